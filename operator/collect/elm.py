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
``Schema.JSON(...)``, i.e. JSON text). BrokerLoadDataReporter checks every 5 s and writes when the data changed by
more than ``loadBalancerReportUpdateThresholdPercentage`` or at least every
``loadBalancerReportUpdateMaxIntervalMinutes`` (15); TopBundleLoadDataReporter writes after every stats update;
both write a tombstone (empty value) when the broker's ownership changes. The readers (elm_readers.py) reach the
topics at the cluster's binary-protocol URL, from its metadata (``GET /admin/v2/clusters/{cluster}``:
``brokerServiceUrlTls`` when the admin URL is https and the cluster has one, else ``brokerServiceUrl``) unless
``elmServiceUrl`` names another; they stay open across cycles, so only the first cycle waits — at most one report
interval (``elmReadTimeoutSeconds``, else the brokers' ``loadBalancerReportUpdateMaxIntervalMinutes``), shown on
a terminal — for every active broker. A broker not heard from, heard only as a tombstone, unusable or stale is
named in the snapshot's ``missing`` (TransferShedder skips such a cycle, as Pulsar's does); the others plan.

The report each broker's data becomes (elm_documents.py) has only its **top bundles** in ``lastStats``. Only
strategies whose inputs are there may plan from that (SUPPORTED_SHEDDING): TransferShedder (ELM's own, from the
brokers' published averages), and the shedders that score brokers from broker-level usage and rates and unload a
broker's largest bundles first — AvgShedder (our default, on ELM too), ThresholdShedder, OverloadShedder,
UniformLoadShedder — which then choose among the top K; placement by AvgShedder's own plan or
LeastResourceUsageWithWeight. PredictivePairingShedder and LeastLongTermMessageRate need every bundle's stats and
are refused with a ConfigError naming the strategy and the load manager — never a silent, empty plan. Bundle
averages of bundles no longer in any top K are forgotten (``top_bundles_only``), so no shedder acts on stats ELM
stopped publishing.

**The conflict guard** is the executor's (act/guard.py), asked right before its first mutating call, so after
the load — load reports or ELM's topics — was read and planned from: ELM's UnloadScheduler sheds only while
``loadBalancerEnabled && loadBalancerSheddingEnabled`` — the same key as the modular manager's — and the operator
never turns it off when it is not going to balance. When the system topics cannot be read, ``ElmDataUnreadable``
(a ConnectionError) names exactly what, and the cycle stops before acting.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TextIO

import structlog

from pulsar_lb_operator.adminapi import AdminClient, AdminError
from pulsar_lb_operator.collect import collector
from pulsar_lb_operator.collect.collector import Collection
from pulsar_lb_operator.collect.elm_documents import local_broker_data, parse_broker_load_data, parse_top_bundles
from pulsar_lb_operator.collect.elm_readers import (
    BROKER_LOAD_DATA_TOPIC,
    CONNECT_TIMEOUT_S,
    TOP_BUNDLES_TOPIC,
    TOPICS,
    ElmDataUnreadable,
    SystemTopicReader,
    WaitLine,
    cluster_service_url,
)
from pulsar_lb_operator.strategies import (
    BrokerLoad,
    ClusterSnapshot,
    ConfigError,
    LoadBalancerConfig,
    SnapshotError,
    StrategyState,
    parse_broker_load,
    registry,
)

__all__ = [  # the readers' and documents' names, used through this module
    "BROKER_LOAD_DATA_TOPIC",
    "TOPICS",
    "TOP_BUNDLES_TOPIC",
    "ElmDataUnreadable",
    "SystemTopicReader",
    "WaitLine",
    "cluster_service_url",
    "local_broker_data",
    "parse_broker_load_data",
    "parse_top_bundles",
]

log = structlog.get_logger(__name__)

MODULAR = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
SIMPLE = "org.apache.pulsar.broker.loadbalance.impl.SimpleLoadManagerImpl"
DEFAULT_REPORT_MAX_INTERVAL_MINUTES = 15.0  # ServiceConfiguration.loadBalancerReportUpdateMaxIntervalMinutes
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


def read_version(client: AdminClient, base: str | None = None) -> str | None:
    """The raw version string of ``GET /admin/v2/brokers/version`` (e.g. ``3.3.2``), quotes stripped, of the admin
    URL's broker or of the broker at ``base``; None if unread."""
    try:
        answer = client.request("GET", "/admin/v2/brokers/version", base=base)
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


# ------------------------------------------------------------------------------------------------ the session


@dataclass(frozen=True)
class ElmSettings:
    """What the session reads from the operator's settings."""

    service_url: str | None = None  # elmServiceUrl; None: the cluster's own, from its metadata
    read_timeout_s: float = 0.0  # elmReadTimeoutSeconds; 0: one report interval of the brokers


@dataclass
class Session:
    """What a cycle needs to work on either load manager, kept between cycles (the daemon's, or one command's).

    ``begin`` detects the load manager (every cycle); ``collect`` reads the load — load reports, or ELM's topics.
    ``tell``: where a command says, before it waits for ELM's brokers, how long it may wait and why (the daemon
    logs it); a terminal also shows the wait as it goes (WaitLine).
    """

    service_url: str | None = None  # elmServiceUrl; None: the cluster's own, from its metadata
    read_timeout_s: float = 0.0  # 0: one report interval of the brokers (loadBalancerReportUpdateMaxIntervalMinutes)
    current: LoadManager | None = None
    reader: SystemTopicReader | None = None
    tell: TextIO | None = None
    progress: WaitLine | None = None

    @classmethod
    def from_settings(cls, settings: ElmSettings, tell: TextIO | None = None) -> Session:
        import sys

        return cls(settings.service_url, settings.read_timeout_s, tell=tell, progress=WaitLine.on_terminal(sys.stderr))

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
                "cannot read loadManagerClassName; reading load reports",
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
        """The cycle's first step: which load manager the cluster runs now."""
        return self.detect(client)

    # -------------------------------------------------------------- reading

    def connect(self, client: AdminClient, cluster: str | None = None) -> SystemTopicReader:
        """The readers on ELM's topics, started on first use (ElmDataUnreadable when they cannot be), at
        ``service_url`` or else the cluster's binary-protocol URL from its metadata."""
        if self.reader is not None:
            return self.reader
        service_url = self.service_url or cluster_service_url(client, cluster)
        options = client.credentials.pulsar_client_options()
        verify = client.verify
        if service_url.startswith("pulsar+ssl://"):
            options["tls_trust_certs_file_path"] = verify if isinstance(verify, str) else None
            options["tls_allow_insecure_connection"] = verify is False
            # pulsar-client trusts any name the CA signed unless told: the credentials go to the broker named only
            options["tls_validate_hostname"] = verify is not False
        timeout = min(CONNECT_TIMEOUT_S, self.read_timeout_s) if self.read_timeout_s else CONNECT_TIMEOUT_S
        self.reader = SystemTopicReader(service_url, options, timeout).start()
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
    ) -> Collection:
        """The cycle's snapshot, from ELM's topics or from load reports."""
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
        return collection

    def wait(self, reader: SystemTopicReader, broker_ids: list[str], timeout_s: float) -> None:
        """Wait for every broker's first words, said up front with how long and why; only the readers' first
        cycle waits (the wait counts from when they connected)."""
        unheard = len(broker_ids) - len(reader.heard_from(broker_ids))
        left = reader.left_s(timeout_s)
        if not unheard or left <= 0:
            return
        message = (
            f"reading the load of {len(broker_ids)} brokers from the extensible load manager's system topics: "
            f"waiting up to {left:.0f} s for the {unheard} not heard yet (a broker publishes its BrokerLoadData "
            "when it changes or once per loadBalancerReportUpdateMaxIntervalMinutes, and the topics keep no "
            "earlier ones; elmReadTimeoutSeconds bounds the wait)"
        )
        log.info("waiting for the extensible load manager's load data", brokers=len(broker_ids), unheard=unheard)
        if self.tell is not None:
            print(message, file=self.tell, flush=True)
        try:
            reader.wait_for(broker_ids, timeout_s, self.progress)
        finally:
            if self.progress is not None:
                self.progress.clear()

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
        reader = self.connect(client, cluster)
        timeout_s = self.read_timeout_s or load_manager.report_interval_s
        self.wait(reader, broker_ids, timeout_s)
        heard = reader.heard()
        workers = collector.concurrency(len(broker_ids))
        owned = collector._fetch_all(  # the collector's bounded fan-out on daemon threads
            broker_ids, lambda b: client.owned_bundles(cluster, b), workers, broker_timeout_s + 1.0
        )
        versions: dict[str, Any] = {}
        if config.preferLaterVersions:  # BrokerVersionFilter compares the brokers' own versions
            versions = collector._fetch_all(
                broker_ids, lambda b: read_version(client, client.broker_url(b)), workers, broker_timeout_s + 1.0
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
                bundle_list = sorted(bundles)
            version = load_manager.version  # the admin URL's broker's, for all: BrokerVersionFilter needs none
            if config.preferLaterVersions:  # the broker's own; unknown (an error, no answer) makes the filter fail
                own = versions.get(broker_id)
                version = own if isinstance(own, str) else None
            report = local_broker_data(load_data, top, bundle_list, version, load_manager.class_name)
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
        snapshot = ClusterSnapshot(
            cluster, now_ms, MappingProxyType(loads), policies=policies, missing=MappingProxyType(dict(skipped))
        )
        return Collection(snapshot, skipped)

    def close(self) -> None:
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.close()


def with_notes(plan: Any, notes: tuple[str, ...]) -> Any:
    """The plan with ``notes`` in front of its own (a frozen Plan)."""
    return dataclasses.replace(plan, notes=(*notes, *plan.notes)) if notes and plan is not None else plan
