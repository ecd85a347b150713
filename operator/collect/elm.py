"""Which load manager a cluster runs, and the extensible load manager's (ELM, PIP-192) own load data.

**Detection**, at start and every cycle, never from the load report's status: ``loadManagerClassName`` in
``GET /admin/v2/brokers/configuration/runtime`` (the effective value, dynamic overrides included) and the
broker's version from ``GET /admin/v2/brokers/version``. Under ELM ``GET /admin/v2/broker-stats/load-report``
gives no report: BrokerStatsBase.getLoadReport returns ``generateLoadReport()``, which ExtensibleLoadManagerWrapper
answers with an UnsupportedOperationException (a text/plain 500; a wrapper returning null would make it a 204).

**ELM's data.** Every ELM broker publishes, keyed by its broker id (``host:port``), its ``BrokerLoadData`` on
``non-persistent://pulsar/system/loadbalancer-broker-load-data`` and its ``TopBundlesLoadData`` (its top
``loadBalancerMaxNumberOfBundlesInBundleLoadReport`` bundles, 10 by default, with their NamespaceBundleStats) on
``non-persistent://pulsar/system/loadbalancer-top-bundles-load-data`` (ExtensibleLoadManagerImpl's
BROKER_LOAD_DATA_STORE_TOPIC and TOP_BUNDLES_LOAD_DATA_STORE_TOPIC; TableViewLoadDataStoreImpl writes them with
``Schema.JSON(...)``, i.e. JSON text). BrokerLoadDataReporter writes the broker's data when it changed by more
than ``loadBalancerReportUpdateThresholdPercentage`` and at least every ``loadBalancerReportUpdateMaxIntervalMinutes``
(15); TopBundleLoadDataReporter writes after every stats update (60 s) and a tombstone (empty value) when the
broker's ownership changes. The topics are non-persistent: a reader sees only what is published while it reads.
So we keep readers open (from the latest message), keep the latest value per key, and in a cycle wait at most one
report interval (``elmReadTimeoutSeconds``, else the brokers' ``loadBalancerReportUpdateMaxIntervalMinutes``),
counted from when the readers connected, for every active broker; the cycle goes on with those heard from, and
the rest are logged. The readers use the admin client's credentials and TLS settings (as the audit publisher
does) and read the JSON as bytes (``pulsar-client consume`` does the same; a consumer without a schema may read
a topic that has one).

Each broker's BrokerLoadData (cpu, memory, directMemory, bandwidthIn, bandwidthOut as ResourceUsage
``{usage, limit}``; msgThroughputIn/Out, msgRateIn/Out, bundleCount, topics, maxResourceUsage, weightedMaxEMA,
msgThroughputEMA, updatedAt, reportedAt — ``topics`` and ``msgThroughputEMA`` are missing in the first 3.0
releases) becomes a LocalBrokerData-shaped report (``lastUpdate`` = updatedAt) whose ``lastStats`` are only
its **top bundles**, and whose ``bundles`` are what ``ownedNamespaces`` lists (ELM serves it from its state
channel). Only strategies whose inputs are there may plan from that (SUPPORTED_SHEDDING): TransferShedder (ELM's
own), and the shedders that score brokers from broker-level usage and rates and unload a broker's largest bundles
first — AvgShedder (our default, on ELM too), ThresholdShedder, OverloadShedder, UniformLoadShedder — which then
choose among the top K; placement by AvgShedder's own plan or LeastResourceUsageWithWeight. PredictivePairingShedder
and LeastLongTermMessageRate need every bundle's stats and are refused with a ConfigError naming the strategy and
the load manager — never a silent, empty plan. Bundle averages of bundles no longer in any top K are forgotten
(``top_bundles_only``), so no shedder acts on stats ELM stopped publishing.

**The conflict guard** (guard.py) runs once, and under ELM only after ELM's data was read: ELM's
UnloadScheduler sheds only while ``loadBalancerEnabled && loadBalancerSheddingEnabled`` — the same key as the
modular manager's — and the operator never turns it off when it is not going to balance. When the system topics
cannot be read, ``ElmDataUnreadable`` (a ConnectionError) names exactly what, and the cycle stops before acting.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import structlog

from pulsar_lb_operator.adminapi import AdminClient, AdminError
from pulsar_lb_operator.adminapi.client import service_url_of
from pulsar_lb_operator.collect import collector
from pulsar_lb_operator.collect.collector import Collection
from pulsar_lb_operator.strategies import registry
from pulsar_lb_operator.strategies.config import ConfigError, LoadBalancerConfig
from pulsar_lb_operator.strategies.documents import MAX_BROKER_TOTAL, Reader, describe
from pulsar_lb_operator.strategies.errors import ClusterError
from pulsar_lb_operator.strategies.snapshots import BrokerLoad, ClusterSnapshot, SnapshotError, parse_broker_load
from pulsar_lb_operator.strategies.state import StrategyState

log = structlog.get_logger(__name__)

MODULAR = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
SIMPLE = "org.apache.pulsar.broker.loadbalance.impl.SimpleLoadManagerImpl"
BROKER_LOAD_DATA_TOPIC = "non-persistent://pulsar/system/loadbalancer-broker-load-data"
TOP_BUNDLES_TOPIC = "non-persistent://pulsar/system/loadbalancer-top-bundles-load-data"
TOPICS = (BROKER_LOAD_DATA_TOPIC, TOP_BUNDLES_TOPIC)
DEFAULT_REPORT_MAX_INTERVAL_MINUTES = 15.0  # ServiceConfiguration.loadBalancerReportUpdateMaxIntervalMinutes
CONNECT_TIMEOUT_S = 10.0  # at most this long to connect the readers (a dead address fails after it)
# What may plan from ELM's data (each broker's BrokerLoadData and its top-K bundles with their stats):
# - TransferShedder, the extensible load manager's own, works on exactly that;
# - AvgShedder, ThresholdShedder, OverloadShedder and UniformLoadShedder score brokers from broker-level usage
#   and message rates (in BrokerLoadData) and unload the broker's largest bundles first (its top K are those):
#   they choose among the top K, never a bundle outside them;
# - PredictivePairingShedder needs every bundle's stats (a bundle missing from a report is "moved" to it, and its
#   cost model is fitted on every bundle's history), and LeastLongTermMessageRate sums every bundle's long-term
#   rates per broker: refused.
SUPPORTED_SHEDDING = frozenset(
    {"TransferShedder", "AvgShedder", "ThresholdShedder", "OverloadShedder", "UniformLoadShedder"}
)
SUPPORTED_PLACEMENT = frozenset({"LeastResourceUsageWithWeight", "AvgShedder"})
ELM_SHEDDING = "TransferShedder"
ELM_PLACEMENT = "LeastResourceUsageWithWeight"


def _quiet_logger() -> Any:
    """pulsar-client's C++ core logs every refused reconnection; we log each problem once instead. Its own file
    logger on /dev/null, not a Python logger: a Python logger called from the core's threads while the interpreter
    exits prints the core's debug lines, or aborts the process."""
    import pulsar

    return pulsar.FileLogger(pulsar.LoggerLevel.Error, os.devnull)


class ElmDataUnreadable(ClusterError, ConnectionError):
    """ELM's system topics could not be read: the message names what, where, and why. Nothing was done."""


class ElmStrategyError(ConfigError):
    """A strategy whose inputs ELM does not publish."""


# ------------------------------------------------------------------------------------------------ detection


@dataclass(frozen=True)
class LoadManager:
    """What a cluster's brokers say about their load manager (the broker the admin URL reaches)."""

    class_name: str | None  # loadManagerClassName; None: it could not be read (``error`` says why)
    version: str | None = None  # GET /admin/v2/brokers/version
    report_interval_s: float = DEFAULT_REPORT_MAX_INTERVAL_MINUTES * 60  # loadBalancerReportUpdateMaxIntervalMinutes
    error: str | None = None
    top_k: int | None = None  # the brokers' loadBalancerMaxNumberOfBundlesInBundleLoadReport, when they say it

    @property
    def kind(self) -> str:
        """``extensible``, ``modular``, ``simple``, ``other`` (a class of someone's own) or ``unknown``."""
        if not self.class_name:
            return "unknown"
        return {EXTENSIBLE: "extensible", MODULAR: "modular", SIMPLE: "simple"}.get(self.class_name, "other")

    @property
    def extensible(self) -> bool:
        return self.kind == "extensible"

    @property
    def short_name(self) -> str:
        return self.class_name.rsplit(".", 1)[-1] if self.class_name else "unknown"

    def describe(self) -> str:
        version = f"Pulsar {self.version}" if self.version else "version unknown"
        return f"{self.short_name} ({version})"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "className": self.class_name, "version": self.version}
        if self.error:
            doc["error"] = self.error
        return doc


def _minutes(value: Any) -> float | None:
    try:
        minutes = float(str(value).strip())
    except ValueError:
        return None
    return minutes if minutes > 0 else None


def read_version(client: AdminClient) -> str | None:
    """The raw version string of ``GET /admin/v2/brokers/version`` (e.g. ``3.3.2``), quotes stripped; None if unread."""
    try:
        answer = client.request("GET", "/admin/v2/brokers/version")
    except AdminError as exc:
        log.debug("broker version not read", reason=str(exc))
        return None
    text = answer.content.decode("utf-8", errors="replace").strip().strip('"').strip()
    return text[:100] or None


def detect(client: AdminClient) -> LoadManager:
    """Read the load manager's class name and the broker version; never raises (an error is in ``error``)."""
    try:
        runtime = client.runtime_config()
    except AdminError as exc:
        return LoadManager(None, read_version(client), error=f"configuration/runtime: {exc}")
    name = runtime.get("loadManagerClassName")
    interval = _minutes(runtime.get("loadBalancerReportUpdateMaxIntervalMinutes"))
    version = read_version(client)
    if not isinstance(name, str) or not name.strip():
        return LoadManager(None, version, error="configuration/runtime has no loadManagerClassName")
    top_k = _minutes(runtime.get("loadBalancerMaxNumberOfBundlesInBundleLoadReport"))
    return LoadManager(
        name.strip(),
        version,
        (interval or DEFAULT_REPORT_MAX_INTERVAL_MINUTES) * 60,
        top_k=int(top_k) if top_k else None,
    )


# ------------------------------------------------------------------------------------------------ strategies


def of_snapshot(snapshot: ClusterSnapshot) -> LoadManager:
    """The load manager a captured snapshot's reports name (``loadManagerClassName``): extensible when any does."""
    raws = [load.raw for load in snapshot.brokers.values()]
    names = sorted({n for r in raws if isinstance(n := r.get("loadManagerClassName"), str)})
    versions = sorted({v for r in raws if isinstance(v := r.get("brokerVersionString"), str)})
    name = EXTENSIBLE if EXTENSIBLE in names else (names[0] if names else None)
    return LoadManager(name, versions[0] if versions else None)


def resolve_strategies(
    load_manager: LoadManager,
    config: LoadBalancerConfig,
    shedding: str | None,
    placement: str | None,
) -> tuple[str | None, str | None, tuple[str, ...]]:
    """(shedding, placement, notes) to plan with on this load manager; ElmStrategyError when the chosen
    strategy needs inputs ELM does not publish. Unchanged for any other load manager.

    The shedder is the one chosen (else the configured one, AvgShedder by default) when its inputs exist in
    ELM's data (SUPPORTED_SHEDDING); a placement that needs every bundle's stats is replaced by ELM's own,
    LeastResourceUsageWithWeight, when it was only a default, and refused when it was asked for."""
    if not load_manager.extensible:
        return shedding, placement, ()
    notes: list[str] = []
    try:
        name = registry.shedding_name(shedding or config.loadBalancerLoadSheddingStrategy)
    except registry.UnknownStrategyError:
        return shedding, placement, ()  # the planner names the unknown strategy
    k = load_manager.top_k or config.loadBalancerMaxNumberOfBundlesInBundleLoadReport
    if name not in SUPPORTED_SHEDDING:
        raise ElmStrategyError(
            f"strategy {name} cannot plan on this cluster: its load manager is {load_manager.short_name}, which "
            f"publishes only each broker's top {k} bundles (TopBundlesLoadData), and {name} needs every bundle's "
            f"stats (LocalBrokerData.lastStats of the modular load manager); use --strategy AvgShedder or "
            f"--strategy {ELM_SHEDDING}"
        )
    if name != ELM_SHEDDING:
        notes.append(
            f"{load_manager.short_name}: {name} chooses among each broker's top {k} bundles (TopBundlesLoadData), "
            "the only bundle stats the extensible load manager publishes"
        )
    placement_name = None
    if placement is not None:
        try:
            placement_name = registry.placement_name(placement)
        except registry.UnknownStrategyError:
            return name, placement, tuple(notes)
        if placement_name not in SUPPORTED_PLACEMENT:
            raise ElmStrategyError(
                f"placement {placement_name} cannot place on this cluster: its load manager is "
                f"{load_manager.short_name}, which publishes only each broker's top {k} bundles, and "
                f"{placement_name} sums every bundle's long-term stats per broker; use --placement {ELM_PLACEMENT}"
            )
    if placement_name is None or placement_name == "AvgShedder":  # AvgShedder's follows its own shedder only
        placement_name = registry.paired_placement(name, registry.default_placement(name))
        if placement_name not in SUPPORTED_PLACEMENT:
            notes.append(
                f"{load_manager.short_name}: placing with {ELM_PLACEMENT}, the extensible load manager's own "
                f"({placement_name}, {name}'s default, sums every bundle's long-term stats per broker)"
            )
            placement_name = ELM_PLACEMENT
    return name, placement_name, tuple(notes)


def top_bundles_only(state: StrategyState, snapshot: ClusterSnapshot) -> StrategyState:
    """The strategy state without the bundle data of bundles no broker's top bundles name in this snapshot.

    A bundle that left its broker's top K is no longer published; the averages kept from when it was would be
    stale, and a shedder must not unload it for a rate it no longer has. ModularLoadManagerImpl.updateBundleData
    forgets the bundles no broker reports in the same way."""
    reported = {bundle for load in snapshot.brokers.values() for bundle in load.lastStats}
    if all(bundle in reported for bundle in state.bundle_data):
        return state
    kept = {bundle: data for bundle, data in state.bundle_data.items() if bundle in reported}
    return state.evolve(bundle_data=MappingProxyType(kept))


# ------------------------------------------------------------------------------------------------ ELM's data


def _reader(value: Any, path: str) -> Reader:
    return Reader(value, path, SnapshotError)


def _json(payload: bytes, path: str) -> Any:
    try:
        return json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise SnapshotError(f"{path}: not JSON ({describe(payload[:60].decode('utf-8', 'replace'))})") from None


def parse_broker_load_data(payload: bytes, path: str) -> dict[str, Any]:
    """BrokerLoadData JSON, checked field by field (SnapshotError naming the field); returns the document."""
    reader = _reader(_json(payload, path), path)
    doc = reader.obj()
    for key in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut"):
        usage = reader.child(key)
        usage.child("usage").number()
        usage.child("limit").number()
    for key in ("msgThroughputIn", "msgThroughputOut", "msgRateIn", "msgRateOut"):
        reader.child(key).number(maximum=MAX_BROKER_TOTAL)
    reader.child("updatedAt").integer()
    for key in ("bundleCount", "topics", "reportedAt"):
        reader.child(key, required=False, default=0).integer()
    for key in ("maxResourceUsage", "weightedMaxEMA", "msgThroughputEMA"):
        reader.child(key, required=False, default=0.0).number(maximum=MAX_BROKER_TOTAL)
    return doc


def parse_top_bundles(payload: bytes | None, path: str) -> list[tuple[str, dict[str, Any]]]:
    """TopBundlesLoadData JSON (``{"topBundlesLoadData": [{"bundleName", "stats"}, …]}``) as (bundle, stats);
    a tombstone (empty value) is no bundles."""
    if not payload:
        return []
    reader = _reader(_json(payload, path), path)
    out = []
    for item in reader.child("topBundlesLoadData").items():
        name = item.child("bundleName").string()
        stats = item.child("stats", required=False, default={})
        stats.obj()
        out.append((name, dict(stats.value)))
    return out


def local_broker_data(
    load_data: Mapping[str, Any],
    top_bundles: list[tuple[str, dict[str, Any]]],
    owned: list[str] | None,
    load_manager: LoadManager,
) -> dict[str, Any]:
    """A LocalBrokerData-shaped report (what the snapshot model parses) from one broker's ELM data.

    ``lastStats`` holds only the top bundles; ``bundles`` is the ownership list when known (ownedNamespaces),
    else the top bundles' names. ELM's own fields stay under ``extensibleLoadManager`` (kept, not planned from).
    """
    stats = {name: dict(values) for name, values in top_bundles}
    names = sorted(set(owned) if owned is not None else set(stats))

    def total(key: str) -> int:
        return int(sum(float(s.get(key, 0) or 0) for s in stats.values()))

    return {
        **{k: dict(load_data[k]) for k in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")},
        **{k: load_data[k] for k in ("msgThroughputIn", "msgThroughputOut", "msgRateIn", "msgRateOut")},
        "lastUpdate": int(load_data["updatedAt"]),
        "lastStats": stats,
        "bundleStats": stats,
        "bundles": names,
        "numBundles": int(load_data.get("bundleCount", len(names)) or 0),
        "numTopics": int(load_data.get("topics", 0) or total("topics")),
        "numConsumers": total("consumerCount"),
        "numProducers": total("producerCount"),
        "brokerVersionString": load_manager.version,
        "loadManagerClassName": load_manager.class_name,
        "maxResourceUsage": load_data.get("maxResourceUsage", 0.0),
        "loadReportType": "LocalBrokerData",
        "extensibleLoadManager": {
            "topBundles": len(stats),
            "ownedBundlesKnown": owned is not None,
            **{
                k: load_data[k]
                for k in ("weightedMaxEMA", "msgThroughputEMA", "updatedAt", "reportedAt", "bundleCount", "topics")
                if k in load_data
            },
        },
    }


@dataclass
class Heard:
    payload: bytes | None  # None: a tombstone
    at: float  # time.monotonic() when received


@dataclass
class SystemTopicReader:
    """Readers from the latest message on ELM's two topics, each on a thread of its own, keeping the latest value
    per key (broker id). ``start`` raises ElmDataUnreadable naming the topic, the address and the reason."""

    service_url: str
    client_options: dict[str, Any] = field(default_factory=dict)
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    latest: dict[str, dict[str, Heard]] = field(default_factory=lambda: {t: {} for t in TOPICS})
    received: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOPICS, 0))
    connected_at: float | None = None

    def __post_init__(self) -> None:
        self._client: Any = None
        self._readers: dict[str, Any] = {}
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._threads: list[threading.Thread] = []

    def start(self) -> SystemTopicReader:
        import pulsar  # the native client: only clusters on the extensible load manager need it

        timeout = max(1.0, self.connect_timeout_s)
        try:
            self._client = pulsar.Client(
                self.service_url,
                **self.client_options,
                operation_timeout_seconds=max(1, int(timeout)),
                connection_timeout_ms=int(timeout * 1000),
                logger=_quiet_logger(),
            )
        except Exception as exc:  # a malformed URL, an unusable certificate file
            raise ElmDataUnreadable(
                f"cannot read {BROKER_LOAD_DATA_TOPIC} at {self.service_url}: {_why(exc)}"
            ) from None
        for topic in TOPICS:
            try:
                self._readers[topic] = self._client.create_reader(
                    topic, pulsar.MessageId.latest, reader_name=f"pulsar-lb-operator-{topic.rsplit('/', 1)[-1]}"
                )
            except Exception as exc:
                self.close()
                reason = f"no connection within {timeout:g} s ({_why(exc)})" if _timed_out(exc) else _why(exc)
                raise ElmDataUnreadable(f"cannot read {topic} at {self.service_url}: {reason}") from None
        self.connected_at = time.monotonic()
        for topic, reader in self._readers.items():
            thread = threading.Thread(target=self._run, args=(topic, reader), name="elm-reader", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("reading the extensible load manager's topics", service_url=self.service_url, topics=list(TOPICS))
        return self

    def _run(self, topic: str, reader: Any) -> None:
        import pulsar

        warned = False
        while not self._stop.is_set():
            try:
                message = reader.read_next(200)
            except pulsar.Timeout:
                continue
            except Exception as exc:  # closed, or the broker went away: the client reconnects by itself
                if self._stop.is_set():
                    return
                if not warned:
                    log.warning("reading an ELM topic failed; retrying", topic=topic, reason=_why(exc))
                    warned = True
                self._stop.wait(1.0)
                continue
            warned = False
            key = message.partition_key()
            if not key:
                continue
            data = message.data()
            with self._changed:
                self.latest[topic][key] = Heard(bytes(data) if data else None, time.monotonic())
                self.received[topic] += 1
                self._changed.notify_all()

    def wait_for(self, brokers: list[str], timeout_s: float) -> None:
        """Until every broker was heard on both topics, or ``timeout_s`` after the readers connected."""
        deadline = (self.connected_at or time.monotonic()) + timeout_s
        with self._changed:
            while not all(b in self.latest[t] for b in brokers for t in TOPICS):
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return
                self._changed.wait(min(left, 1.0))

    def caught_up(self, sent: Mapping[str, int], timeout_s: float) -> bool:
        """Wait until as many messages were received on each topic as ``sent`` says were published (the
        simulator's publisher counts them); True when they were."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while any(self.received.get(t, 0) < n for t, n in sent.items()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
        return True

    def heard(self) -> dict[str, dict[str, Heard]]:
        with self._changed:
            return {t: dict(v) for t, v in self.latest.items()}

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(2.0)
        client, self._client = self._client, None
        for reader in self._readers.values():
            try:
                reader.close()
            except Exception as exc:  # a reader whose broker is gone may fail to close; nothing to keep
                log.debug("ELM reader close failed", reason=_why(exc))
        self._readers.clear()
        if client is not None:
            try:
                client.close()
            except Exception as exc:
                log.debug("ELM client close failed", reason=_why(exc))


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def _timed_out(exc: BaseException) -> bool:
    return type(exc).__name__ == "Timeout" or "timeout" in str(exc).lower()


# ------------------------------------------------------------------------------------------------ the session


@dataclass
class Session:
    """What a cycle needs to work on either load manager, kept between cycles (the daemon's, or one command's).

    ``begin`` detects the load manager (every cycle) and, on a modular cluster, runs the conflict guard once
    before anything else, as before; ``collect`` reads the load — load reports, or ELM's topics — and runs the
    guard once when it was deferred (ELM, or a load manager that could not be detected) and the load was read.
    """

    service_url: str | None = None  # pulsar:// or pulsar+ssl:// of any broker or proxy (ELM's topics)
    read_timeout_s: float = 0.0  # 0: one report interval of the brokers (loadBalancerReportUpdateMaxIntervalMinutes)
    guard: Callable[[], object] | None = None
    current: LoadManager | None = None
    reader: SystemTopicReader | None = None
    guarded: bool = False

    @classmethod
    def from_settings(cls, settings: Any, guard: Callable[[], object] | None = None) -> Session:
        service_url = getattr(settings, "elmServiceUrl", None)
        if not service_url and settings.adminUrl:
            service_url = service_url_of(settings.adminUrl)
        return cls(service_url, float(getattr(settings, "elmReadTimeoutSeconds", 0.0) or 0.0), guard)

    # -------------------------------------------------------------- detection

    def detect(self, client: AdminClient) -> LoadManager:
        found = detect(client)
        previous = self.current
        if found.class_name is None:
            if previous is not None and previous.class_name is not None:
                log.warning(
                    "cannot read the load manager again; still assuming the last one seen",
                    load_manager=previous.short_name,
                    reason=found.error,
                )
                return previous
            log.warning(
                "cannot read loadManagerClassName; reading load reports, and the conflict guard waits until they "
                "were read",
                reason=found.error,
            )
            return found
        if previous is None or previous.class_name is None:
            log.info("load manager", load_manager=found.short_name, class_name=found.class_name, version=found.version)
        elif (previous.class_name, previous.version) != (found.class_name, found.version):
            log.warning(
                "the cluster's load manager or version changed",
                before=previous.describe(),
                now=found.describe(),
            )
        self.current = found
        return found

    def begin(self, client: AdminClient) -> LoadManager:
        """Detect; on a cluster known to run another load manager than ELM, run the guard (once) now."""
        found = self.detect(client)
        if found.class_name is not None and not found.extensible:
            self._guard()
        return found

    def _guard(self) -> None:
        if self.guarded or self.guard is None:
            return
        self.guard()
        self.guarded = True

    # -------------------------------------------------------------- reading

    def connect(self, client: AdminClient) -> SystemTopicReader:
        """The readers on ELM's topics, started on first use (ElmDataUnreadable when they cannot be)."""
        if self.reader is not None:
            return self.reader
        if not self.service_url:
            raise ElmDataUnreadable(
                f"cannot read {BROKER_LOAD_DATA_TOPIC}: no service URL (set elmServiceUrl, or an adminUrl to derive "
                "it from)"
            )
        options = client.credentials.pulsar_client_options()
        verify = client.verify
        if self.service_url.startswith("pulsar+ssl://"):
            options["tls_trust_certs_file_path"] = verify if isinstance(verify, str) else None
            options["tls_allow_insecure_connection"] = verify is False
        timeout = min(CONNECT_TIMEOUT_S, self.read_timeout_s) if self.read_timeout_s else CONNECT_TIMEOUT_S
        self.reader = SystemTopicReader(self.service_url, options, timeout).start()
        return self.reader

    def collect(
        self,
        client: AdminClient,
        cluster: str,
        config: LoadBalancerConfig,
        load_manager: LoadManager | None = None,
        *,
        now_ms: int | None = None,
        broker_timeout_s: float = 20.0,
        guard: bool = True,
    ) -> Collection:
        """The cycle's snapshot, from ELM's topics or from load reports; then the deferred guard, if any."""
        found = load_manager or self.current or self.detect(client)
        if found.extensible:
            collection = self.collect_extensible(client, cluster, config, found, now_ms, broker_timeout_s)
        else:
            collection = collector.collect(
                client,
                cluster,
                stale_after_s=config.loadBalancerBrokerLoadDataTTLInSeconds,
                now_ms=now_ms,
                broker_timeout_s=broker_timeout_s,
            )
        if guard and collection.snapshot.brokers:
            self._guard()
        return collection

    def collect_extensible(
        self,
        client: AdminClient,
        cluster: str,
        config: LoadBalancerConfig,
        load_manager: LoadManager,
        now_ms: int | None = None,
        broker_timeout_s: float = 20.0,
    ) -> Collection:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        broker_ids = client.active_brokers(cluster)
        reader = self.connect(client)
        timeout_s = self.read_timeout_s or load_manager.report_interval_s
        reader.wait_for(broker_ids, timeout_s)
        heard = reader.heard()
        workers = collector.concurrency(len(broker_ids))
        owned = collector._fetch_all(  # the collector's bounded fan-out on daemon threads
            broker_ids, lambda b: client.owned_bundles(cluster, b), workers, broker_timeout_s + 1.0
        )
        loads: dict[str, BrokerLoad] = {}
        skipped: dict[str, str] = {}
        for broker_id in broker_ids:
            load_heard = heard[BROKER_LOAD_DATA_TOPIC].get(broker_id)
            if load_heard is None:
                skipped[broker_id] = (
                    f"no BrokerLoadData on {BROKER_LOAD_DATA_TOPIC} within {timeout_s:g} s of reading it"
                )
                continue
            if load_heard.payload is None:
                skipped[broker_id] = f"its BrokerLoadData on {BROKER_LOAD_DATA_TOPIC} was removed (a tombstone)"
                continue
            try:
                load_data = parse_broker_load_data(load_heard.payload, f"BrokerLoadData of {broker_id}")
            except SnapshotError as exc:
                skipped[broker_id] = str(exc)
                continue
            top_heard = heard[TOP_BUNDLES_TOPIC].get(broker_id)
            try:
                top = parse_top_bundles(top_heard.payload if top_heard else None, f"TopBundlesLoadData of {broker_id}")
            except SnapshotError as exc:
                log.warning("top bundles not usable: its bundles' stats are unknown this cycle", reason=str(exc))
                top = []
            if top_heard is None:
                log.warning(
                    "no TopBundlesLoadData heard: its bundles' stats are unknown this cycle",
                    broker=broker_id,
                    topic=TOP_BUNDLES_TOPIC,
                )
            bundles = owned.get(broker_id)
            if isinstance(bundles, Exception) or bundles is None:
                why = str(bundles) if bundles is not None else f"no answer within {broker_timeout_s:g} s"
                log.warning("ownedNamespaces not read: its bundles are its top bundles only", broker=broker_id, why=why)
                bundle_list = None
            else:
                bundle_list = sorted(bundles)  # type: ignore[arg-type]
            report = local_broker_data(load_data, top, bundle_list, load_manager)
            try:
                load = parse_broker_load(broker_id, report, f"BrokerLoadData of {broker_id}")
            except SnapshotError as exc:
                skipped[broker_id] = str(exc)
                continue
            age_s = (now_ms - load.lastUpdate) / 1000
            stale_after_s = config.loadBalancerBrokerLoadDataTTLInSeconds
            if age_s > stale_after_s:
                skipped[broker_id] = f"BrokerLoadData is stale: updated {age_s:.0f} s ago (> {stale_after_s:g} s)"
                continue
            loads[broker_id] = load
        if not loads:  # one line says it all: no per-broker lines before it
            unheard = sum(1 for b in broker_ids if b not in heard[BROKER_LOAD_DATA_TOPIC])
            bad = [why for b, why in sorted(skipped.items()) if b in heard[BROKER_LOAD_DATA_TOPIC]]
            unusable = f", {len(bad)} unusable: {bad[0]}" if bad else ""
            raise ElmDataUnreadable(
                f"cannot read the extensible load manager's load data: no active broker's BrokerLoadData on "
                f"{BROKER_LOAD_DATA_TOPIC} at {reader.service_url} could be used within {timeout_s:g} s "
                f"({len(broker_ids)} active brokers, {unheard} not heard{unusable})"
            )
        for broker_id, why in sorted(skipped.items()):
            log.warning("broker skipped", broker=broker_id, reason=why)
        namespaces = collector.seen_namespaces(loads.values())
        policies = collector.read_policies(client, cluster, namespaces, now_ms, workers, broker_timeout_s)
        snapshot = ClusterSnapshot(cluster, now_ms, MappingProxyType(loads), policies=policies)
        return Collection(snapshot, skipped)

    def close(self) -> None:
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.close()


def with_notes(plan: Any, notes: tuple[str, ...]) -> Any:
    """The plan with ``notes`` in front of its own (a frozen Plan)."""
    return dataclasses.replace(plan, notes=(*notes, *plan.notes)) if notes and plan is not None else plan
