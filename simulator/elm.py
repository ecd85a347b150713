"""The simulated cluster on the extensible load manager (ELM, PIP-192): what its brokers serve and publish.

A scenario with ``loadManager: extensible`` (or ``operator demo|simulate --load-manager extensible``) is served
as ELM brokers are:

* ``GET /admin/v2/broker-stats/load-report`` gives no report: BrokerStatsBase.getLoadReport returns
  ``generateLoadReport()``, which ExtensibleLoadManagerWrapper answers with ``new UnsupportedOperationException()``
  — RestException makes it a text/plain 500 (``no_load_report``);
* the runtime configuration says ``loadManagerClassName=…ExtensibleLoadManagerImpl`` and the reporters' cadence
  (``runtime_config``);
* ``GET /admin/v2/clusters/{cluster}`` answers the cluster's metadata (``cluster_data``), whose
  ``brokerServiceUrl`` is where the system topics are read, as on any cluster;
* with ``ElmBrokers`` started, every simulated broker publishes, on a real binary-protocol broker (pulsar-lite,
  started here on loopback), its ``BrokerLoadData`` to ``non-persistent://pulsar/system/loadbalancer-broker-load-data``
  and its ``TopBundlesLoadData`` to ``non-persistent://pulsar/system/loadbalancer-top-bundles-load-data`` — one
  producer per broker and topic, the broker id as the key, JSON as ``Schema.JSON`` writes it, a tombstone as an
  empty value — as its BrokerLoadDataReporter and TopBundleLoadDataReporter decide (simulator/elm_reporters.py:
  a check every 5 s of simulated time, inside ``advance()``; the messages are sent after it returns, outside the
  cluster's lock). The topics are non-persistent: a reader that starts in between sees nothing of a steady broker
  until it writes again.

An unload is ELM's (``unload``): with a destination a transfer by the owner — no hop to the leader, no
destination map, the 204 once the destination owns the bundle — and master's 409 and 500 for an inactive
destination or the owner itself. A split is ELM's too (simulator/splits.py): the halves stay on the owner, whatever
``unload`` says. Not modelled: its service-unit state channel's in-flight states as seen by a second, concurrent
request, and the simulator's own built-in shedder and split trigger, which still act the modular way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsar_lb_operator import lifecycle
from pulsar_lb_operator.simulator.cluster import SimError, unexpected
from pulsar_lb_operator.simulator.elm_reporters import (
    BROKER_LOAD_DATA_TOPIC,
    TOP_BUNDLES_TOPIC,
    TOPICS,
    Cadence,
    Outgoing,
    Reporter,
)
from pulsar_lb_operator.strategies import UserError

if TYPE_CHECKING:
    from pulsar_lb_operator.simulator.cluster import Broker, SimulatedCluster
    from pulsar_lb_operator.simulator.scenario import Scenario

__all__ = ["BROKER_LOAD_DATA_TOPIC", "TOPICS", "TOP_BUNDLES_TOPIC", "Cadence"]

EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"


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


def runtime_config(cluster: SimulatedCluster) -> dict[str, str]:
    """What ELM brokers add to ``GET /admin/v2/brokers/configuration/runtime``; {} on the modular manager."""
    if not is_extensible(cluster):
        return {}
    reporters = getattr(cluster, "elm_brokers", None)  # set by ElmBrokers
    cadence = reporters.cadence if reporters is not None else Cadence()
    return {
        "loadManagerClassName": EXTENSIBLE,
        "loadBalancerReportUpdateMaxIntervalMinutes": f"{cadence.max_interval_minutes:g}",
        "loadBalancerReportUpdateThresholdPercentage": f"{cadence.threshold_percentage:g}",
        "loadBalancerReportUpdateMinIntervalMillis": str(cadence.min_interval_ms),
    }


def cluster_data(cluster: SimulatedCluster, admin_url: str) -> dict[str, Any]:
    """``GET /admin/v2/clusters/{cluster}``: the cluster's ClusterData as ClustersBase.getCluster answers it (Jackson,
    null fields left out; the builder's defaults for the broker client's TLS settings). ``brokerServiceUrl`` is
    where its binary protocol is served: the system topics' broker when ELM's reporters run, else what the first
    broker's load report names."""
    reporters = getattr(cluster, "elm_brokers", None)
    if reporters is not None:
        service_url = reporters.service_url
    else:
        first = min(cluster.brokers.values(), key=lambda b: b.name)
        service_url = f"pulsar://{first.host}:{first.port + 1}"
    doc: dict[str, Any] = {"serviceUrl": admin_url} if admin_url.startswith("http://") else {"serviceUrlTls": admin_url}
    doc.update(
        {
            "brokerServiceUrl": service_url,
            "brokerClientTlsEnabled": False,
            "tlsAllowInsecureConnection": False,
            "brokerClientTlsEnabledWithKeyStore": False,
            "brokerClientTlsTrustStoreType": "JKS",
            "brokerClientTlsKeyStoreType": "JKS",
        }
    )
    return doc


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


# --------------------------------------------------------------------------------------------- the publisher


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiteBroker:
    """pulsar-lite's binary-protocol broker on a loopback port, with its storage in a directory of its own.

    The process and the directory it makes are the lifecycle module's: stopped and removed at exit, on SIGTERM,
    SIGINT and SIGHUP, and the process killed by the kernel if ours dies first."""

    def __init__(self, directory: Path | None = None, port: int | None = None) -> None:
        self._own_dir = directory is None
        self.directory = directory or lifecycle.temp_dir("sim-elm")
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
            self._process = lifecycle.spawn(
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
            lifecycle.stop(self._process)
            self._process = None

    def remove(self) -> None:
        self.stop()
        if self._own_dir:
            lifecycle.remove(self.directory)


class ElmBrokers:
    """Every simulated broker's ELM reporters (simulator/elm_reporters.py), publishing on a pulsar-lite broker.

    ``start`` starts the broker and a client and hooks into the cluster: a check of every live broker each
    ``cadence.min_interval_ms`` of simulated time (a ticker inside ``advance()``), whose messages are sent after
    ``advance()`` returns (``publish``). ``sent`` counts what was published per topic, tombstones included;
    ``unchanged`` the checks whose BrokerLoadData was not due; ``failed`` the sends the broker did not take."""

    def __init__(self, cluster: SimulatedCluster, broker: LiteBroker | None = None, cadence: Cadence | None = None):
        if not is_extensible(cluster):
            raise ValueError("the scenario's brokers run the modular load manager (loadManager: extensible)")
        self.cluster = cluster
        self.broker = broker or LiteBroker()
        self.cadence = cadence or Cadence()
        cluster.elm_brokers = self  # type: ignore[attr-defined]  # the runtime configuration and cluster metadata
        self.sent: dict[str, int] = dict.fromkeys(TOPICS, 0)
        self.unchanged = 0
        self.failed = 0  # sends the broker did not take (stopped, unreachable)
        self.next_s = cluster.now_s  # the ticker: the brokers' next check
        self._client: Any = None
        self._producers: dict[tuple[str, str], Any] = {}
        self._reporters: dict[str, Reporter] = {}
        self._outbox: list[Outgoing] = []  # made under the cluster's lock, sent outside it
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
        with self.cluster.lock:
            for broker in self.cluster.alive_brokers():  # what they own now is no change
                self._reporter(broker)
            self.next_s = self.cluster.now_s + self.cadence.min_interval_ms / 1000
            self.cluster.tickers.append(self)
        self.cluster.after_advance.append(self.publish)
        self._started = True
        return self

    def _reporter(self, broker: Broker) -> Reporter:
        reporter = self._reporters.get(broker.id)
        if reporter is None or reporter.started_at_s != broker.started_at_s:  # new, or restarted: new reporters
            reporter = Reporter(broker.started_at_s, self.cluster.ownership.version_of(broker.id))
            self._reporters[broker.id] = reporter
        return reporter

    def tick(self, now_s: float) -> None:
        """The brokers' periodic check (called by the cluster's clock, under its lock)."""
        self._check(force=False)
        period_s = self.cadence.min_interval_ms / 1000
        while self.next_s <= now_s:
            self.next_s += period_s

    def _check(self, force: bool) -> None:
        now_ms = self.cluster.now_ms
        for broker in self.cluster.alive_brokers():
            out, due = self._reporter(broker).check(self.cluster, broker, self.cadence, now_ms, force)
            self._outbox.extend(out)
            self.unchanged += not due

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

    def publish(self, force: bool = False) -> int:
        """Send what the checks since the last call decided (``force``: every live broker's both documents now, as
        ELM's reportAsync(true) when a broker's role changes); returns how many messages the broker took. Never
        raises: a stopped system-topic broker only counts ``failed``, and a BrokerLoadData it did not take is due
        again at the next check (its reporter's lastData and reportedAt are put back)."""
        if not self._started:
            return 0
        with self._lock:
            with self.cluster.lock:
                if force:
                    self._check(force=True)
                outbox, self._outbox = self._outbox, []
            sent = 0
            for message in outbox:
                try:
                    self._producer(message.broker, message.topic).send(message.payload, partition_key=message.broker)
                except Exception:  # the system topics' broker is down: ELM brokers would log and go on
                    self.failed += 1
                    if message.written is not None:
                        with self.cluster.lock:
                            reporter, last, reported_at = message.written
                            reporter.last, reporter.reported_at = last, reported_at
                    continue
                self.sent[message.topic] += 1
                sent += 1
            return sent

    def stop_system_topics(self) -> None:
        """Stop the system topics' broker (the brokers' admin API keeps serving): the topics are unreachable."""
        self.broker.stop()

    def close(self) -> None:
        if self.publish in self.cluster.after_advance:
            self.cluster.after_advance.remove(self.publish)
        with self.cluster.lock:
            if self in self.cluster.tickers:
                self.cluster.tickers.remove(self)
        self._started = False
        with self._lock:
            client, self._client = self._client, None
            self._producers.clear()
        if client is not None:
            with contextlib.suppress(Exception):  # a client whose broker is gone may fail to close: nothing to keep
                client.close()
        self.broker.remove()
