"""The simulated cluster on the extensible load manager (ELM, PIP-192): what its brokers serve and publish.

A scenario with ``loadManager: extensible`` (or ``operator demo|simulate --load-manager extensible``) is served
as ELM brokers are:

* ``GET /admin/v2/broker-stats/load-report`` gives no report: BrokerStatsBase.getLoadReport returns
  ``generateLoadReport()``, which ExtensibleLoadManagerWrapper answers with ``new UnsupportedOperationException()``
  — RestException makes it a text/plain 500 (``no_load_report``);
* the runtime configuration says ``loadManagerClassName=…ExtensibleLoadManagerImpl`` and the report interval
  (``runtime_config``);
* with ``ElmBrokers`` started, every simulated broker publishes, on a real binary-protocol broker (pulsar-lite,
  started here on loopback), its ``BrokerLoadData`` to ``non-persistent://pulsar/system/loadbalancer-broker-load-data``
  and its ``TopBundlesLoadData`` to ``non-persistent://pulsar/system/loadbalancer-top-bundles-load-data`` — one
  producer per broker and topic, the broker id as the key, JSON as ``Schema.JSON`` writes it — published after
  ``advance()`` returns (SimulatedCluster.after_advance), outside the cluster's lock: its top bundles after every
  sample (every ``report_interval_seconds`` of simulated time), its BrokerLoadData on the real reporter's cadence
  (``Cadence``: a change above 10 %, else every 15 minutes; the topics are non-persistent, so a reader that
  starts in between sees nothing of a steady broker until then).

The fields are those of Pulsar's BrokerLoadData (cpu, memory, directMemory, bandwidthIn, bandwidthOut as
``{usage, limit}``; msgThroughputIn/Out, msgRateIn/Out, bundleCount, topics, maxResourceUsage, weightedMaxEMA,
msgThroughputEMA, updatedAt, reportedAt — without topics and msgThroughputEMA for a scenario's ``brokerVersion``
before 3.1, as the first 3.0 releases wrote it) computed as BrokerLoadData.update does (the EMAs with
``loadBalancerHistoryResourcePercentage``), and TopBundlesLoadData's ``topBundlesLoadData`` list of
``{bundleName, stats}`` as TopKBundles makes it: the broker's ``loadBalancerMaxNumberOfBundlesInBundleLoadReport``
largest bundles by NamespaceBundleStats.compareTo, system namespaces left out, and namespaces with policies
unless ``loadBalancerSheddingBundlesWithPoliciesEnabled``; smallest first, as TopKBundles stores them.

An unload is ELM's (``unload``): with a destination a transfer by the owner — no hop to the leader, no
destination map, the 204 once the destination owns the bundle — and master's 409 and 500 for an inactive
destination or the owner itself. Not modelled: ELM's split path, its service-unit state channel's in-flight
states as seen by a second, concurrent request, and the simulator's own built-in shedder, which still unloads
the modular way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsar_lb_operator.simulator.cluster import Broker, SimError, unexpected
from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.errors import UserError
from pulsar_lb_operator.strategies.policies import shedding_allowed
from pulsar_lb_operator.strategies.shedding.transfer import compare_bundle_stats
from pulsar_lb_operator.strategies.snapshots import BundleStats, ResourceUsage

if TYPE_CHECKING:
    from pulsar_lb_operator.simulator.cluster import SimulatedCluster
    from pulsar_lb_operator.simulator.scenario import Scenario

EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
BROKER_LOAD_DATA_TOPIC = "non-persistent://pulsar/system/loadbalancer-broker-load-data"
TOP_BUNDLES_TOPIC = "non-persistent://pulsar/system/loadbalancer-top-bundles-load-data"
TOPICS = (BROKER_LOAD_DATA_TOPIC, TOP_BUNDLES_TOPIC)


class ElmError(UserError, OSError):
    """The system topics' broker could not be started or reached."""


def is_extensible(cluster: SimulatedCluster) -> bool:
    return getattr(cluster.scenario, "load_manager", "modular") == "extensible"


def with_load_manager(scenario: Scenario, load_manager: str | None) -> Scenario:
    """The scenario on ``load_manager`` (``modular`` or ``extensible``; None: as it says). On ELM the cluster's own
    shedder is TransferShedder unless the scenario names another (ELM's UnloadScheduler falls back to it)."""
    if load_manager is None or load_manager == getattr(scenario, "load_manager", "modular"):
        return scenario
    config = dict(scenario.config)
    if load_manager == "extensible":
        config.setdefault("loadBalancerLoadSheddingStrategy", "TransferShedder")
    return dataclasses.replace(scenario, load_manager=load_manager, config=config)


@dataclasses.dataclass(frozen=True)
class Cadence:
    """When BrokerLoadDataReporter writes (master): at every check (``loadBalancerReportUpdateMinIntervalMillis``,
    5 s; here every sample) it publishes only when ``needBrokerDataUpdate``: more than
    ``loadBalancerReportUpdateMaxIntervalMinutes`` since it last wrote, or a change above
    ``loadBalancerReportUpdateThresholdPercentage`` in max resource usage (points), msg rate in+out, throughput
    in+out or bundle count (percent) against what it last wrote. TopBundleLoadDataReporter publishes after every
    stats update (every sample here), whatever changed."""

    threshold_percentage: float = 10.0  # ServiceConfiguration.loadBalancerReportUpdateThresholdPercentage
    max_interval_minutes: float = 15.0  # ServiceConfiguration.loadBalancerReportUpdateMaxIntervalMinutes

    def due(self, last: dict[str, Any] | None, local: dict[str, Any], now_ms: int, reported_at: int) -> bool:
        """BrokerLoadDataReporter.needBrokerDataUpdate: ``last`` as last written, ``local`` as now."""
        if last is None or now_ms - reported_at > self.max_interval_minutes * 60_000:
            return True

        def percent_change(key_a: str, key_b: str | None = None) -> float:
            old = last[key_a] + (last[key_b] if key_b else 0)
            new = local[key_a] + (local[key_b] if key_b else 0)
            if old == 0:
                return 0.0 if new == 0 else float("inf")
            return 100 * abs((old - new) / old)

        change = max(
            100 * abs(last["maxResourceUsage"] - local["maxResourceUsage"]),
            percent_change("msgRateIn", "msgRateOut"),
            percent_change("msgThroughputIn", "msgThroughputOut"),
            percent_change("bundleCount"),
        )
        return change > self.threshold_percentage


def runtime_config(cluster: SimulatedCluster) -> dict[str, str]:
    """What ELM brokers add to ``GET /admin/v2/brokers/configuration/runtime``; {} on the modular manager."""
    if not is_extensible(cluster):
        return {}
    cadence = getattr(cluster, "elm_cadence", None) or Cadence()  # set by ElmBrokers
    return {
        "loadManagerClassName": EXTENSIBLE,
        "loadBalancerReportUpdateMaxIntervalMinutes": f"{cadence.max_interval_minutes:g}",
        "loadBalancerReportUpdateThresholdPercentage": f"{cadence.threshold_percentage:g}",
    }


def no_load_report() -> SimError:
    """ELM's answer to ``GET /admin/v2/broker-stats/load-report``: UnsupportedOperationException, a 500."""
    return unexpected("java.lang.UnsupportedOperationException", "null")


# --------------------------------------------------------------------------------------------- unload = transfer

SAME_BROKER = "Namespace bundle: {bundle} own by {owner}, cannot be transfer to same broker."


def unload(cluster: SimulatedCluster, at: str, bundle: str, destination: str | None) -> str | None:
    """``PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/unload[?destinationBroker=]`` on an ELM broker ``at``:
    None when done (204), else the owner to redirect to (307, ``destinationBroker`` kept in the query).

    As master answers it (NamespacesBase.internalUnloadNamespaceBundleAsync, then
    ExtensibleLoadManagerImpl.unloadNamespaceBundleAsync):

    * ``destinationBroker`` loses an ``http://``/``https://`` prefix and must be an available broker id
      (``host:port``): else 409 ``Not allowed unload namespace bundle to inactive destination broker``
      (setNamespaceBundleAffinityAsync; NotAllowedException → CONFLICT). Under ELM there is no hop to the leader
      and no destination map: the destination travels with the request;
    * a bundle no broker owns: 204, nothing done (isBundleOwnedByAnyBroker);
    * a broker that does not own it redirects to the owner (validateNamespaceBundleOwnershipAsync);
    * on the owner, a destination the owner's id ends with: IllegalArgumentException ``Namespace bundle: … own
      by …, cannot be transfer to same broker.`` — RestException makes it a text/plain 500;
    * else the owner publishes an Unload event on the service-unit state channel: with a destination a transfer
      (Owned → Releasing → Assigning → Owned by the destination; clients are sent to the destination without a
      lookup, lookups during it wait), without one Releasing → Free (the next lookup assigns it). The answer
      (204) comes when the channel reaches Owned or Free (UnloadManager.waitAsync), so once it is in, lookups and
      ``ownedNamespaces`` name the destination.
    """
    with cluster.lock:
        destination = cluster.active_destination(destination)
        cluster.check_bundle(bundle)
        owner = cluster.ownership.get(bundle)
        if owner is None:
            return None
        if owner != at:
            return owner
        if destination is None:
            cluster.unload(bundle)
            return None
        if owner.endswith(destination):
            raise unexpected("java.lang.IllegalArgumentException", SAME_BROKER.format(bundle=bundle, owner=owner))
        transfer(cluster, bundle, owner, destination)
        return None


def transfer(cluster: SimulatedCluster, bundle: str, source: str, destination: str) -> None:
    """The bundle's topics close on ``source`` and open on ``destination`` at once (no lookup in between)."""
    with cluster.lock:
        cluster.topics_disconnected += len(cluster.topics_in(bundle))
        cluster.unloads += 1
        cluster.ownership[bundle] = destination
        cluster.pending_lookups.pop(bundle, None)
        cluster.preallocated.setdefault(destination, []).append(bundle)
        cluster.moves.append((cluster.now_s, bundle, source, destination))


# --------------------------------------------------------------------------------------------- the documents


def broker_load_data(
    cluster: SimulatedCluster, broker: Broker, previous: dict[str, Any] | None, reported_at: int
) -> dict[str, Any]:
    """The broker's BrokerLoadData JSON from its last sample; ``previous`` carries the EMAs (BrokerLoadData.update)."""
    host = broker.host_sample
    stats = broker.stats_sample
    usage = {k: ResourceUsage(u, limit) for k, (u, limit) in host.items()}
    weights = cluster.config.weights
    percent = {k: r.percent_usage() for k, r in usage.items()}
    max_usage = max(percent["cpu"], percent["directMemory"], percent["bandwidthIn"], percent["bandwidthOut"]) / 100
    weighted = (
        max(
            percent["cpu"] * weights.cpu,
            percent["memory"] * weights.memory,
            percent["directMemory"] * weights.direct_memory,
            percent["bandwidthIn"] * weights.bandwidth_in,
            percent["bandwidthOut"] * weights.bandwidth_out,
        )
        / 100
    )
    throughput = sum(s.msg_throughput for s in stats.values())
    history = cluster.config.loadBalancerHistoryResourcePercentage
    if previous is None:
        weighted_ema, throughput_ema = weighted, throughput
    else:
        weighted_ema = previous["weightedMaxEMA"] * history + (1 - history) * weighted
        throughput_ema = previous.get("msgThroughputEMA", throughput) * history + (1 - history) * throughput
    doc = {
        **{k: {"usage": r.usage, "limit": r.limit} for k, r in usage.items()},
        "msgThroughputIn": sum(s.msgThroughputIn for s in stats.values()),
        "msgThroughputOut": sum(s.msgThroughputOut for s in stats.values()),
        "msgRateIn": sum(s.msgRateIn for s in stats.values()),
        "msgRateOut": sum(s.msgRateOut for s in stats.values()),
        "bundleCount": len(stats),
        "topics": sum(s.topics for s in stats.values()),
        "maxResourceUsage": max_usage,
        "weightedMaxEMA": weighted_ema,
        "msgThroughputEMA": throughput_ema,
        "updatedAt": broker.last_update_ms,
        "reportedAt": reported_at,
    }
    if _release(getattr(cluster.scenario, "broker_version", "")) < (3, 1):
        del doc["topics"], doc["msgThroughputEMA"]  # not yet in BrokerLoadData as the first 3.0 releases wrote it
    return doc


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``3.0.2`` or ``4.1.0-SNAPSHOT``; (99, 0) when unreadable."""
    parts = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(parts.group(1)), int(parts.group(2))) if parts else (99, 0)


def top_bundles_load_data(cluster: SimulatedCluster, broker: Broker) -> dict[str, Any]:
    """TopBundlesLoadData JSON: TopKBundles.update over the broker's last sample (smallest of the top k first)."""
    config = cluster.config
    policies = cluster.namespace_policies()
    with_policies = config.loadBalancerSheddingBundlesWithPoliciesEnabled
    eligible = [
        (name, stats)
        for name, stats in sorted(broker.stats_sample.items())
        if not bundle_names.is_system_namespace(bundle_names.namespace_of(name))
        and shedding_allowed(bundle_names.namespace_of(name), policies, with_policies)
    ]
    by_stats = functools.cmp_to_key(lambda x, y: compare_bundle_stats(x[1], y[1]))
    top = sorted(eligible, key=by_stats, reverse=True)[: config.loadBalancerMaxNumberOfBundlesInBundleLoadReport]
    return {"topBundlesLoadData": [{"bundleName": n, "stats": _stats(s)} for n, s in reversed(top)]}


def _stats(stats: BundleStats) -> dict[str, Any]:
    return {
        "msgRateIn": stats.msgRateIn,
        "msgThroughputIn": stats.msgThroughputIn,
        "msgRateOut": stats.msgRateOut,
        "msgThroughputOut": stats.msgThroughputOut,
        "consumerCount": stats.consumerCount,
        "producerCount": stats.producerCount,
        "topics": stats.topics,
        "cacheSize": stats.cacheSize,
    }


# --------------------------------------------------------------------------------------------- the publisher


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiteBroker:
    """pulsar-lite's binary-protocol broker on a loopback port, with its storage in a directory of its own."""

    def __init__(self, directory: Path | None = None, port: int | None = None) -> None:
        self._own_dir = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="pulsar-lb-sim-elm-"))
        self.port = port or _free_port()
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, wait_s: float = 15.0) -> LiteBroker:
        try:
            from pulsar_lite.binary_finder import find_pulsar_lite_binary

            binary = find_pulsar_lite_binary()
        except Exception as exc:  # not installed, or no binary for this platform
            raise ElmError(f"pulsar-lite is needed for the extensible load manager's topics: {exc}") from None
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "broker.log", "ab") as out:  # the child keeps its own copy
            self._process = subprocess.Popen(
                [binary, "--addr", f"127.0.0.1:{self.port}", "--db-path", str(self.directory / "db")],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise ElmError(f"pulsar-lite did not listen on 127.0.0.1:{self.port} within {wait_s:g} s")

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(5)
            self._process = None

    def remove(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)


class ElmBrokers:
    """Every simulated broker's ELM reporters: on start, a pulsar-lite broker and a client; after every
    ``advance()``, each broker that took a sample since publishes its TopBundlesLoadData, and its BrokerLoadData
    when ``cadence`` says BrokerLoadDataReporter would (``publish``). ``sent`` counts what was published per
    topic; ``unchanged`` the BrokerLoadData that were not, being within the threshold and the interval."""

    def __init__(self, cluster: SimulatedCluster, broker: LiteBroker | None = None, cadence: Cadence | None = None):
        if not is_extensible(cluster):
            raise ValueError("the scenario's brokers run the modular load manager (loadManager: extensible)")
        self.cluster = cluster
        self.broker = broker or LiteBroker()
        self.cadence = cadence or Cadence()
        cluster.elm_cadence = self.cadence  # type: ignore[attr-defined]  # what the runtime configuration says
        self.sent: dict[str, int] = dict.fromkeys(TOPICS, 0)
        self.unchanged = 0
        self.failed = 0  # sends the broker did not take (stopped, unreachable)
        self._client: Any = None
        self._producers: dict[tuple[str, str], Any] = {}
        self._sampled: dict[str, int] = {}  # broker id → sample_version its documents were last made from
        self._local: dict[str, dict[str, Any]] = {}  # broker id → its BrokerLoadData as of its last sample
        self._written: dict[str, dict[str, Any]] = {}  # broker id → its BrokerLoadData as last published
        self._reported_at: dict[str, int] = {}  # broker id → when it last published its BrokerLoadData
        self._lock = threading.Lock()
        self._started = False

    @property
    def service_url(self) -> str:
        return self.broker.url

    def start(self) -> ElmBrokers:
        import pulsar

        if not self.broker.running:
            self.broker.start()
        self._client = pulsar.Client(
            self.service_url,
            operation_timeout_seconds=5,
            connection_timeout_ms=5000,
            logger=pulsar.FileLogger(pulsar.LoggerLevel.Error, os.devnull),  # not Python's: see operator/collect/elm.py
        )
        self.cluster.after_advance.append(self.publish)
        self._started = True
        return self

    def _producer(self, broker_id: str, topic: str) -> Any:
        producer = self._producers.get((broker_id, topic))
        if producer is None:
            producer = self._client.create_producer(
                topic,
                producer_name=f"{broker_id}-{topic.rsplit('/', 1)[-1]}",
                batching_enabled=False,
                send_timeout_millis=5000,
            )
            self._producers[(broker_id, topic)] = producer
        return producer

    def documents(self, force: bool = False) -> list[tuple[str, str, bytes, dict[str, Any] | None]]:
        """(broker id, topic, JSON, BrokerLoadData or None) to publish now: of every live broker that sampled since,
        its TopBundlesLoadData and, when due, its BrokerLoadData; every broker's both with ``force``."""
        out: list[tuple[str, str, bytes, dict[str, Any] | None]] = []
        cluster = self.cluster
        with cluster.lock:
            for broker in cluster.alive_brokers():
                sampled = self._sampled.get(broker.id) != broker.sample_version
                if not (force or sampled):
                    continue
                reported_at = self._reported_at.get(broker.id, 0)
                if sampled or broker.id not in self._local:  # BrokerLoadData.update: the EMAs move every sample
                    self._local[broker.id] = broker_load_data(cluster, broker, self._local.get(broker.id), reported_at)
                    self._sampled[broker.id] = broker.sample_version
                local = self._local[broker.id]
                if force or self.cadence.due(self._written.get(broker.id), local, cluster.now_ms, reported_at):
                    out.append((broker.id, BROKER_LOAD_DATA_TOPIC, json.dumps(local).encode(), local))
                else:
                    self.unchanged += 1
                top = top_bundles_load_data(cluster, broker)
                out.append((broker.id, TOP_BUNDLES_TOPIC, json.dumps(top).encode(), None))
        return out

    def publish(self, force: bool = False) -> int:
        """Publish what ``documents`` gives; returns how many messages the broker took. Never raises: a stopped
        system-topic broker only counts ``failed`` (the BrokerLoadData is tried again at the next sample)."""
        if not self._started:
            return 0
        with self._lock:
            sent = 0
            for broker_id, topic, payload, load in self.documents(force):
                try:
                    self._producer(broker_id, topic).send(payload, partition_key=broker_id)
                except Exception:  # the system topics' broker is down: ELM brokers would log and go on
                    self.failed += 1
                    continue
                if load is not None:  # written: what the next change is measured against, and when
                    self._written[broker_id] = load
                    self._reported_at[broker_id] = self.cluster.now_ms
                self.sent[topic] += 1
                sent += 1
            return sent

    def stop_system_topics(self) -> None:
        """Stop the system topics' broker (the brokers' admin API keeps serving): the topics are unreachable."""
        self.broker.stop()

    def close(self) -> None:
        if self.publish in self.cluster.after_advance:
            self.cluster.after_advance.remove(self.publish)
        self._started = False
        with self._lock:
            client, self._client = self._client, None
            self._producers.clear()
        if client is not None:
            with contextlib.suppress(Exception):  # a client whose broker is gone may fail to close: nothing to keep
                client.close()
        self.broker.remove()
