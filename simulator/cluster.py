"""The simulated cluster: brokers, bundles, topics, ownership and load physics, in simulated time.

Behaviour follows the modular load manager (shared/reference/pulsar-admin-api.md §3.13, §3.14, §7):
an unloaded bundle is unowned until its clients reconnect and look it up; the leader then assigns it
to the destination remembered for it (once) or by the cluster's own placement. Brokers sample host
usage and bundle stats every ``report_interval_s``, so a report lags a move, as in real life.

Thread-safe: the HTTP server calls in from its threads; every public method takes the lock.

Linear in the cluster: ownership is indexed by owner (a broker's bundles without a scan of the whole
map), a broker's load report is built once per change of its sample or of its bundles, and the
leader's view re-parses only the reports that changed.
"""

from __future__ import annotations

import bisect
import fnmatch
import itertools
import json
import math
import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from simulator import report_writes
from simulator.scenario import BrokerSpec, EventSpec, Scenario
from simulator.traffic import Pattern
from strategies import bundles as bundle_names
from strategies import planner, registry
from strategies import policies as ns_policies
from strategies.config import LoadBalancerConfig
from strategies.documents import Reader
from strategies.loaddata import BundleData, LoadData, update_bundle_data
from strategies.placement.common import PlacementContext
from strategies.planner import plan_cycle
from strategies.plans import Split, Unload
from strategies.snapshots import BrokerLoad, BundleStats, ClusterSnapshot, TopicStats, parse_broker_load
from strategies.splitting import algorithms
from strategies.state import StrategyState

EPOCH_MS = 1_750_000_000_000  # simulated time 0
MIB = 1024 * 1024
RECONNECT_DELAY_S = 2.0  # clients of an unloaded bundle look it up again after this long
# An unloaded bundle's ownership stays disabled while its owner closes the topics; another unload meanwhile
# answers 500 "Namespace bundle … is being unloaded" (NamespaceService.findBrokerServiceUrl).
UNLOAD_WINDOW_S = 1.0
LEADER_SAMPLE_S = 10.0


class Ownership(dict[str, str]):
    """bundle → owner broker id, indexed by owner so a broker's bundles are found without a scan.

    A plain dict to read (``dict(ownership)``, ``.items()``, ``.get``); every write keeps the index
    (``by_owner``) and bumps the version of each broker whose bundles changed (``version_of``).
    """

    def __init__(self, items: Any = ()) -> None:
        super().__init__()
        self.by_owner: dict[str, set[str]] = {}
        self._versions: dict[str, int] = {}
        self._counter = itertools.count(1)
        self.update(items)

    def version_of(self, owner: str) -> int:
        return self._versions.get(owner, 0)

    def owned(self, owner: str) -> set[str]:
        return self.by_owner.get(owner, set())

    def _index(self, bundle: str, owner: str, add: bool) -> None:
        if add:
            self.by_owner.setdefault(owner, set()).add(bundle)
        else:
            self.by_owner.get(owner, set()).discard(bundle)
        self._versions[owner] = next(self._counter)

    def __setitem__(self, bundle: str, owner: str) -> None:
        previous = dict.get(self, bundle)
        if previous == owner:
            return
        if previous is not None:
            self._index(bundle, previous, add=False)
        dict.__setitem__(self, bundle, owner)
        self._index(bundle, owner, add=True)

    def __delitem__(self, bundle: str) -> None:
        owner = dict.__getitem__(self, bundle)
        dict.__delitem__(self, bundle)
        self._index(bundle, owner, add=False)

    _MISSING: Any = object()

    def pop(self, bundle: str, default: Any = _MISSING) -> Any:
        if bundle in self:
            owner = dict.__getitem__(self, bundle)
            del self[bundle]
            return owner
        if default is Ownership._MISSING:
            raise KeyError(bundle)
        return default

    def popitem(self) -> tuple[str, str]:
        bundle, owner = dict.popitem(self)
        self._index(bundle, owner, add=False)
        return bundle, owner

    def setdefault(self, bundle: str, owner: Any = None) -> Any:
        if bundle not in self:
            self[bundle] = owner
        return dict.__getitem__(self, bundle)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for bundle, owner in dict(*args, **kwargs).items():
            self[bundle] = owner

    def __ior__(self, other: Any) -> Ownership:
        self.update(other)
        return self

    def clear(self) -> None:
        for owner in list(self.by_owner):
            self._versions[owner] = next(self._counter)
        dict.clear(self)
        self.by_owner.clear()

    def copy(self) -> dict[str, str]:  # type: ignore[override]
        return dict(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Ownership, (dict(self),))


class SimError(Exception):
    """An admin call Pulsar would refuse; carries the HTTP status and Pulsar's reason."""

    def __init__(self, status: int, reason: str, text: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.text = text  # an unexpected exception's text/plain body (RestException), instead of {"reason"}


def unexpected(exception: str, message: str, status: int = 500) -> SimError:
    """What Pulsar's RestException makes of an unexpected exception: a text/plain body with its message."""
    text = (
        "\n --- An unexpected error occurred in the server ---\n\n"  # RestException.getExceptionData
        f"Message: {message}\n\nStacktrace:\n\n{exception}: {message}\n\tat org.apache.pulsar.broker (simulated)\n"
    )
    return SimError(status, message, text)


@dataclass
class Topic:
    name: str
    namespace: str
    hash: int
    rate: float
    msg_size: int
    fanout: float
    producers: int
    consumers: int
    pattern_index: int

    def stats(self, multiplier: float) -> TopicStats:
        rate_in = self.rate * multiplier
        return TopicStats(
            rate_in, rate_in * self.fanout, rate_in * self.msg_size, rate_in * self.fanout * self.msg_size
        )


@dataclass
class Broker:
    name: str
    id: str
    spec: BrokerSpec
    started_at_s: float
    alive: bool = True
    next_sample_s: float = 0.0
    last_update_ms: int = 0
    stats_sample: dict[str, BundleStats] = field(default_factory=dict)
    topic_sample: dict[str, dict[str, TopicStats]] = field(default_factory=dict)
    host_sample: dict[str, tuple[float, float]] = field(default_factory=dict)
    sample_version: int = 0  # bumped by every sample: the load report is rebuilt only after a change
    web_url_tls: str | None = None  # the https URL it publishes, when it serves TLS (set_web_url_tls)
    # The modular manager's write of LocalBrokerData to the metadata store (report_writes.py): when it last
    # happened (the report's lastUpdate), the figures it compared (lastData), what the leader reads since, and
    # the bundles gained and lost since (lastBundleGains/Losses, cleared by each write).
    written_ms: int = 0
    written_figures: tuple[float, float, float, int] | None = None
    written_report: dict | None = None
    bundle_gains: set[str] = field(default_factory=set)
    bundle_losses: set[str] = field(default_factory=set)

    @property
    def port(self) -> int:
        return int(self.id.rsplit(":", 1)[1])

    @property
    def host(self) -> str:
        return self.id.rsplit(":", 1)[0]

    @property
    def web_url(self) -> str:
        return f"http://{self.id}"


class _VirtualIds:
    """127.0.0.1 and a port each; with the scenario's ``addresses: distinct``, 127.0.0.1, 127.0.0.2, … on one
    port (hosts tell brokers apart, as namespace isolation policies need)."""

    def __init__(self) -> None:
        self.ports = iter(range(20000, 30000))
        self.distinct: itertools.count[int] | None = None

    def prepare(self, scenario: Scenario) -> None:
        if getattr(scenario, "addresses", "ports") == "distinct":
            self.distinct = itertools.count()

    def __call__(self, _name: str) -> str:
        if self.distinct is None:
            return f"127.0.0.1:{next(self.ports)}"
        third, fourth = divmod(next(self.distinct), 254)
        return f"127.{third // 256}.{third % 256}.{fourth + 1}:20000"


def virtual_ids() -> Callable[[str], str]:
    """Broker ids for a cluster that is not served over HTTP (benchmarks, unit tests)."""
    return _VirtualIds()


class SimulatedCluster:
    def __init__(
        self, scenario: Scenario, allocate_id: Callable[[str], str] | None = None, epoch_ms: int = EPOCH_MS
    ) -> None:
        """``epoch_ms``: the wall-clock time of simulated time 0 (fixed by default, so runs repeat exactly)."""
        self.scenario = scenario
        self.epoch_ms = epoch_ms
        self.lock = threading.RLock()
        self.allocate_id = allocate_id or virtual_ids()
        prepare = getattr(self.allocate_id, "prepare", None)
        if prepare is not None:  # e.g. the HTTP server's allocator: addressing mode, file descriptor limit
            prepare(scenario)
        self.rng = random.Random(scenario.seed)
        self.noise = random.Random(scenario.seed + 1)
        self.now_s = 0.0
        self.config = LoadBalancerConfig().replace(scenario.config)
        self.brokers: dict[str, Broker] = {}
        self.namespaces: dict[str, list[int]] = {}
        self.topics: dict[str, list[Topic]] = {}
        self.patterns = [ns.pattern for ns in scenario.namespaces]
        self.traffic_factor: dict[str, float] = {}
        self._ownership = Ownership()
        self._reports: dict[str, tuple[tuple, dict]] = {}  # broker id → (what it was built from, report)
        self._report_json: dict[str, tuple[dict, bytes]] = {}  # broker id → (report, its JSON)
        self._parsed: dict[str, tuple[dict, BrokerLoad]] = {}  # broker id → (report, the leader's parse)
        self.pending_lookups: dict[str, float] = {}
        self.affinity: dict[str, str] = {}
        # namespace policies: anti-affinity groups by namespace; (broker count, policies) built on demand
        self.anti_affinity_groups = {
            ns.name: ns.anti_affinity_group for ns in scenario.namespaces if ns.anti_affinity_group
        }
        self._policies: tuple[int, ns_policies.NamespacePolicies] | None = None
        self.leader_bundle_data: dict[str, BundleData] = {}
        self.preallocated: dict[str, list[str]] = {}
        self.dynamic_config: dict[str, str] = {}
        self.report_update_settings = report_writes.Settings.of(scenario)
        self.events = list(scenario.events)
        self.released_from: dict[str, str] = {}  # unowned bundle -> the broker that last owned it
        self.unloading: dict[str, float] = {}  # bundle → simulated time its unload's window ends
        self.moves: list[tuple[float, str, str, str]] = []  # (time, bundle, from, to) of completed moves
        self._view: ClusterSnapshot | None = None
        self._last_leader_sample_s = -LEADER_SAMPLE_S
        self.unloads = 0
        self.topics_disconnected = 0
        self.listeners: list[Callable[[str, Broker], None]] = []  # ("added" | "removed", broker)
        self.after_advance: list[Callable[[], None]] = []  # called after each advance(), outside the lock (elm.py)
        # Pulsar's own shedder on the leader, active while loadBalancerSheddingEnabled is true
        self.builtin_state = StrategyState()
        self.builtin_actions = 0
        self.next_shed_s = scenario.shedding_interval_s
        for spec in scenario.brokers:
            self._add_broker(spec)
        self._create_namespaces()
        self._initial_assignment()
        for broker in self.brokers.values():
            self._sample(broker)
        self._leader_sample()

    # ----------------------------------------------------------------------------- construction

    @property
    def ownership(self) -> Ownership:
        """bundle → owner broker id (indexed by owner; assigning a plain dict re-indexes it)."""
        return self._ownership

    @ownership.setter
    def ownership(self, value: dict[str, str]) -> None:
        self._ownership = value if isinstance(value, Ownership) else Ownership(value)

    def _add_broker(self, spec: BrokerSpec) -> Broker:
        broker_id = self.allocate_id(spec.name)
        if broker_id in self.brokers:  # never serve fewer brokers than asked: two on one address is a bug
            taken = self.brokers[broker_id].name
            raise ValueError(f"broker {spec.name}: id {broker_id} is already {taken}'s (the allocator reused it)")
        broker = Broker(spec.name, broker_id, spec, self.now_s)
        offset = (len(self.brokers) * self.scenario.report_interval_s / 7) % self.scenario.report_interval_s
        broker.next_sample_s = self.now_s + offset
        self.brokers[broker.id] = broker
        self._view = None
        for listener in self.listeners:
            listener("added", broker)
        return broker

    def _create_namespaces(self) -> None:
        for index, ns in enumerate(self.scenario.namespaces):
            self.namespaces[ns.name] = bundle_names.default_boundaries(ns.bundles)
            topics: list[Topic] = []
            for t in range(ns.topics):
                base = ns.rate * (math.exp(self.rng.gauss(0, ns.rate_spread)) if ns.rate_spread else 1.0)
                names = (
                    [f"persistent://{ns.name}/topic-{t}-partition-{p}" for p in range(ns.partitions)]
                    if ns.partitions
                    else [f"persistent://{ns.name}/topic-{t}"]
                )
                for name in names:
                    topics.append(
                        Topic(
                            name,
                            ns.name,
                            bundle_names.topic_hash(name),
                            base / len(names),
                            ns.msg_size,
                            ns.fanout,
                            ns.producers,
                            ns.consumers,
                            index,
                        )
                    )
            for name, rate in ns.hot_topics.items():
                full = name if "://" in name else f"persistent://{ns.name}/{name}"
                topics.append(
                    Topic(
                        full,
                        ns.name,
                        bundle_names.topic_hash(full),
                        rate,
                        ns.msg_size,
                        ns.fanout,
                        ns.producers,
                        ns.consumers,
                        index,
                    )
                )
            self.topics[ns.name] = topics
        self._index_topics()

    def _index_topics(self) -> None:
        """Topics sorted by hash per namespace, so a bundle's topics are a bisect away."""
        self.topics = {ns: sorted(ts, key=lambda t: (t.hash, t.name)) for ns, ts in self.topics.items()}
        self._hashes = {ns: [t.hash for t in ts] for ns, ts in self.topics.items()}
        self._topics_of_bundle: dict[str, list[Topic]] = {}  # a bundle's topics (its name fixes its range)

    def _initial_assignment(self) -> None:
        names = {b.name: b.id for b in self.brokers.values()}
        weights = self.scenario.initial_owners or {n: 1.0 for n in names}
        pool = [names[n] for n in sorted(weights) if weights[n] > 0]
        total = sum(weights[n] for n in sorted(weights) if weights[n] > 0)
        bundles = [b for ns in sorted(self.namespaces) for b in self._bundles_of(ns)]
        self.rng.shuffle(bundles)
        # deal bundles out in proportion to the weights (largest remainder, deterministic)
        quotas = {
            bid: weights[n] / total * len(bundles)
            for n, bid in ((n, names[n]) for n in sorted(weights))
            if weights[n] > 0
        }
        counts = {bid: int(q) for bid, q in quotas.items()}
        for bid in sorted(quotas, key=lambda b: quotas[b] - counts[b], reverse=True)[
            : len(bundles) - sum(counts.values())
        ]:
            counts[bid] += 1
        iterator = iter(bundles)
        for bid in pool:
            for _ in range(counts[bid]):
                self.ownership[next(iterator)] = bid
        if self.scenario.isolation_policies:  # an isolated namespace starts on brokers its policy allows
            policies, alive = self.namespace_policies(), self.active_ids()
            for bundle in bundles:
                allowed = ns_policies.apply_namespace_policies(bundle_names.namespace_of(bundle), alive, policies)
                if allowed and self.ownership.get(bundle) not in allowed:
                    self.ownership[bundle] = min(allowed, key=lambda b: (len(self.ownership.owned(b)), b))

    # ----------------------------------------------------------------------------- namespace policies

    def isolation_policies_doc(self) -> dict[str, Any] | None:
        """GET …/clusters/{cluster}/namespaceIsolationPolicies (None: none declared, Pulsar's 404): the
        scenario's broker names become regexes of their hosts, which is what Pulsar matches."""
        if not self.scenario.isolation_policies:
            return None
        names = sorted(b.name for b in self.brokers.values())

        def hosts(patterns: tuple[str, ...]) -> list[str]:
            found = {self.by_name(n).host for p in patterns for n in fnmatch.filter(names, p)}
            return [re.escape(h) for h in sorted(found)]

        return {
            p.name: {
                "namespaces": list(p.namespaces),
                "primary": hosts(p.primary),
                "secondary": hosts(p.secondary),
                "auto_failover_policy": {
                    "policy_type": ns_policies.MIN_AVAILABLE,
                    "parameters": {"min_limit": str(p.min_limit), "usage_threshold": str(p.usage_threshold)},
                },
            }
            for p in self.scenario.isolation_policies
        }

    def failure_domains_doc(self) -> dict[str, Any]:
        """GET …/clusters/{cluster}/failureDomains: domain → {"brokers": [broker ids]} (the scenario's names)."""
        names = sorted(b.name for b in self.brokers.values())
        return {
            domain: {"brokers": sorted({self.by_name(n).id for p in patterns for n in fnmatch.filter(names, p)})}
            for domain, patterns in self.scenario.failure_domains
        }

    def namespace_policies(self) -> ns_policies.NamespacePolicies:
        """The policies as the leader sees them (what the admin endpoints serve); failure domains only while
        failureDomainsEnabled (ModularLoadManagerImpl.refreshBrokerToFailureDomainMap returns at once otherwise)."""
        if self._policies is None or self._policies[0] != len(self.brokers):
            doc = self.isolation_policies_doc() or {}
            isolation = ns_policies.parse_isolation_policies(Reader(doc, "isolation_policies"))
            groups = MappingProxyType(dict(self.anti_affinity_groups))
            domains = {}
            if self.scenario.failure_domains_enabled:
                domains = ns_policies.parse_failure_domains(Reader(self.failure_domains_doc(), "failure_domains"))
            policies = ns_policies.NamespacePolicies(isolation, groups, domains=MappingProxyType(domains))
            self._policies = (len(self.brokers), policies)
        return self._policies[1]

    # ----------------------------------------------------------------------------- traffic & physics

    def _bundles_of(self, namespace: str) -> list[str]:
        return [bundle_names.bundle_name(namespace, r) for r in bundle_names.ranges_of(self.namespaces[namespace])]

    def all_bundles(self) -> list[str]:
        return [b for ns in sorted(self.namespaces) for b in self._bundles_of(ns)]

    def _topic_stats(self, topic: Topic) -> TopicStats:
        multiplier = self.patterns[topic.pattern_index].multiplier(self.now_s, self.noise)
        multiplier *= self.traffic_factor.get(topic.namespace, 1.0) * self.traffic_factor.get("*", 1.0)
        return topic.stats(multiplier)

    def topics_in(self, bundle: str) -> list[Topic]:
        found = self._topics_of_bundle.get(bundle)
        if found is None:
            namespace, bundle_range = bundle_names.split_bundle_name(bundle)
            hashes = self._hashes.get(namespace, [])
            upper = bundle_range.upper + 1 if bundle_range.upper == bundle_names.LAST_BOUNDARY else bundle_range.upper
            first, end = bisect.bisect_left(hashes, bundle_range.lower), bisect.bisect_left(hashes, upper)
            found = self._topics_of_bundle[bundle] = self.topics[namespace][first:end]
        return list(found)

    def bundle_stats(self, bundle: str) -> tuple[BundleStats, dict[str, TopicStats]]:
        topics = self.topics_in(bundle)
        per_topic: dict[str, TopicStats] = {}
        fixed: dict[int, float] = {}  # multipliers of the patterns that draw no noise, once per call
        for topic in topics:
            pattern = self.patterns[topic.pattern_index]
            if type(pattern) is Pattern and pattern.kind != "jitter":
                multiplier = fixed.get(topic.pattern_index)
                if multiplier is None:
                    multiplier = fixed[topic.pattern_index] = pattern.multiplier(self.now_s, self.noise)
            else:  # noise is drawn per topic, in topic order, as _topic_stats does
                multiplier = pattern.multiplier(self.now_s, self.noise)
            multiplier *= self.traffic_factor.get(topic.namespace, 1.0) * self.traffic_factor.get("*", 1.0)
            per_topic[topic.name] = topic.stats(multiplier)
        values = list(per_topic.values())
        throughput_in = sum([s.msgThroughputIn for s in values])
        return (
            BundleStats(
                msgRateIn=sum([s.msgRateIn for s in values]),
                msgRateOut=sum([s.msgRateOut for s in values]),
                msgThroughputIn=throughput_in,
                msgThroughputOut=sum([s.msgThroughputOut for s in values]),
                consumerCount=sum([t.consumers for t in topics]),
                producerCount=sum([t.producers for t in topics]),
                topics=len(topics),
                cacheSize=int(throughput_in),
            ),
            per_topic,
        )

    def owned_by(self, broker_id: str) -> list[str]:
        return sorted(self.ownership.owned(broker_id))

    def host_usage(self, broker: Broker, stats: dict[str, BundleStats], noise: float) -> dict[str, tuple[float, float]]:
        """Host usage in LocalBrokerData's units: background + Σ(traffic × cost), CPU with noise."""
        spec = broker.spec
        cpu_limit = 100 * spec.cores
        rate = sum(s.msg_rate for s in stats.values())
        thr_in = sum(s.msgThroughputIn for s in stats.values())
        thr_out = sum(s.msgThroughputOut for s in stats.values())
        cpu = cpu_limit * spec.background_cpu + rate * spec.cost_per_msg + (thr_in + thr_out) / MIB * spec.cost_per_mib
        topics = sum(s.topics for s in stats.values())
        nic = spec.nic_gbps * 1e6  # kbit/s
        return {
            "cpu": (max(cpu * (1 + noise), 0.0), cpu_limit),
            "memory": (spec.heap_mib * 0.25 + topics * 0.5, spec.heap_mib),
            "directMemory": (spec.direct_mib * 0.05 + thr_in / MIB * 2, spec.direct_mib),
            "bandwidthIn": (thr_in * 8 / 1000, nic),
            "bandwidthOut": (thr_out * 8 / 1000, nic),
        }

    def true_usage(self, broker_id: str) -> float:
        """Weighted max usage in % from current traffic, without noise or report lag (for metrics)."""
        return self.weighted_usage(
            self.brokers[broker_id], {b: self.bundle_stats(b)[0] for b in self.owned_by(broker_id)}
        )

    def weighted_usage(self, broker: Broker, stats: dict[str, BundleStats]) -> float:
        """What ``broker`` would use, in %, carrying exactly the bundles in ``stats`` (no noise)."""
        usage = self.host_usage(broker, stats, 0.0)
        return max(usage[k][0] / usage[k][1] * 100 for k in ("cpu", "bandwidthIn", "bandwidthOut"))

    def _sample(self, broker: Broker) -> None:
        """A broker's periodic stats and host-usage sample, and its report written to the metadata store."""
        before = set(broker.stats_sample)
        broker.stats_sample = {}
        broker.topic_sample = {}
        for bundle in self.owned_by(broker.id):
            broker.stats_sample[bundle], broker.topic_sample[bundle] = self.bundle_stats(bundle)
        broker.host_sample = self.host_usage(broker, broker.stats_sample, self.noise.gauss(0, broker.spec.jitter))
        broker.last_update_ms = self.now_ms  # the sample's time (the extensible manager's updatedAt)
        report_writes.track_bundles(broker, before)
        broker.sample_version += 1
        if report_writes.need_broker_data_update(broker, self.now_ms, self.report_update_settings):
            report_writes.write(broker, self.now_ms, lambda: self.load_report(broker.id))
        self.preallocated[broker.id] = [b for b in self.preallocated.get(broker.id, []) if b not in broker.stats_sample]
        self._view = None

    def _leader_sample(self) -> None:
        """The leader re-samples every broker's latest bundle stats after report changes.

        Pulsar does this on every report change; we do it at most once per LEADER_SAMPLE_S of
        simulated time, which keeps a 200-broker cluster fast and changes the averages little. Only
        the cluster's LeastLongTermMessageRate placement reads these averages: with ``placement:
        random`` there is nothing to sample (a 1,000-broker cluster saves a pass over every bundle).
        """
        if self.scenario.placement == "random":
            return
        if self.now_s - self._last_leader_sample_s < LEADER_SAMPLE_S and self.leader_bundle_data:
            return
        self._last_leader_sample_s = self.now_s
        self.leader_bundle_data = update_bundle_data(self.leader_bundle_data, self.leader_view())

    @property
    def now_ms(self) -> int:
        return self.epoch_ms + int(self.now_s * 1000)

    # ----------------------------------------------------------------------------- reports

    def load_report(self, broker_id: str) -> dict:
        """LocalBrokerData JSON of one broker (GET /admin/v2/broker-stats/load-report on that broker).

        Built once per change of the broker's sample or of its bundles, then shared: do not modify it.
        """
        with self.lock:
            broker = self.brokers[broker_id]
            key = (broker.sample_version, broker.started_at_s)
            cached = self._reports.get(broker_id)
            if cached is not None and cached[0] == key:
                return cached[1]
            report = self._build_report(broker)
            self._reports[broker_id] = (key, report)
            return report

    def load_report_json(self, broker_id: str) -> bytes:
        """``load_report`` as JSON bytes, serialized once per report."""
        with self.lock:
            report = self.load_report(broker_id)
            cached = self._report_json.get(broker_id)
            if cached is not None and cached[0] is report:
                return cached[1]
            body = json.dumps(report).encode()
            self._report_json[broker_id] = (report, body)
            return body

    def _build_report(self, broker: Broker) -> dict:
        """LocalBrokerData as Jackson writes it (getters included, nulls left out): report_writes.local_broker_data."""
        heartbeat = [
            f"pulsar/{broker.id}/0x00000000_0xffffffff",
            f"pulsar/{self.scenario.cluster}/{broker.id}/0x00000000_0xffffffff",
        ]
        return report_writes.local_broker_data(
            broker,
            pulsar_service_url=f"pulsar://{broker.host}:{broker.port + 1}",
            extra_bundles=heartbeat,
            version=self.scenario.broker_version,
            start_ms=self.epoch_ms + int(broker.started_at_s * 1000),
        )

    def topic_stats_report(self, broker_id: str) -> dict:
        """GET /admin/v2/broker-stats/topics: namespace → bundle range → persistent → topic → stats."""
        with self.lock:
            out: dict[str, dict] = {}
            for bundle, per_topic in sorted(self.brokers[broker_id].topic_sample.items()):
                namespace, bundle_range = bundle_names.split_bundle_name(bundle)
                topics = {
                    name: {
                        "msgRateIn": s.msgRateIn,
                        "msgRateOut": s.msgRateOut,
                        "msgThroughputIn": s.msgThroughputIn,
                        "msgThroughputOut": s.msgThroughputOut,
                        "producerCount": 1,
                        "publishers": [],
                        "subscriptions": {},
                        "replication": {},
                        "averageMsgSize": s.msgThroughputIn / s.msgRateIn if s.msgRateIn else 0.0,
                    }
                    for name, s in sorted(per_topic.items())
                }
                out.setdefault(namespace, {})[str(bundle_range)] = {"persistent": topics}
            return out

    def leader_view(self) -> ClusterSnapshot:
        """What the leader reads from the metadata store: every live broker's latest report."""
        if self._view is None:
            brokers = {b.id: self._parsed_report(b.id) for b in self.alive_brokers()}
            self._view = ClusterSnapshot(
                self.scenario.cluster, self.now_ms, brokers, policies=self.namespace_policies()
            )
        return self._view

    def _parsed_report(self, broker_id: str) -> BrokerLoad:
        """The leader's parse of a broker's report as last written to the metadata store (not the fresher one the
        REST endpoint builds), redone only when a new one was written."""
        report = self.brokers[broker_id].written_report or self.load_report(broker_id)
        cached = self._parsed.get(broker_id)
        if cached is not None and cached[0] is report:
            return cached[1]
        load = parse_broker_load(broker_id, report)
        self._parsed[broker_id] = (report, load)
        return load

    # ----------------------------------------------------------------------------- membership

    def alive_brokers(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b.alive]

    def active_ids(self) -> list[str]:
        return sorted(b.id for b in self.alive_brokers())

    @property
    def leader(self) -> str | None:
        """The longest-running live broker (ties: the first created), as after a leader election."""
        alive = self.alive_brokers()
        return min(alive, key=lambda b: b.started_at_s).id if alive else None

    def by_name(self, name: str) -> Broker:
        for broker in self.brokers.values():
            if broker.name == name:
                return broker
        raise KeyError(name)

    # ----------------------------------------------------------------------------- admin operations

    def affinity_key(self, bundle: str) -> str:
        """The key of the leader's destination map: the bundle, or — before Pulsar 4.0.10, which kept it in
        a map keyed by the bundle's *range* — the range alone, so two namespaces' bundles of one range
        overwrite each other's destination (the bug the operator's executor works around)."""
        by_range = bundle_names.destination_keyed_by_range(self.scenario.broker_version)
        return bundle.rsplit("/", 1)[1] if by_range else bundle

    def unload(self, bundle: str, destination: str | None = None) -> None:
        """PUT …/{bundle}/unload[?destinationBroker=]: validated as Pulsar does (409, 404, 412)."""
        with self.lock:
            if destination is not None:
                destination = destination.removeprefix("http://").removeprefix("https://")
                if destination not in self.active_ids():
                    raise SimError(409, "Not allowed unload namespace bundle to inactive destination broker")
            self.check_bundle(bundle)
            if destination is not None:
                self.affinity[self.affinity_key(bundle)] = destination  # the leader remembers it
            if self.in_transition(bundle):  # after the affinity, as Pulsar: the destination is kept
                raise unexpected("java.lang.IllegalStateException", f"Namespace bundle {bundle} is being unloaded")
            owner = self.ownership.get(bundle)
            if owner is None:
                return  # unowned: 204, nothing to close
            self._release(bundle)
            self.unloading[bundle] = self.now_s + UNLOAD_WINDOW_S

    def _release(self, bundle: str) -> None:
        self.topics_disconnected += len(self.topics_in(bundle))
        self.unloads += 1
        self.released_from[bundle] = self.ownership.pop(bundle)
        self.pending_lookups[bundle] = self.now_s + RECONNECT_DELAY_S

    def in_transition(self, bundle: str) -> bool:
        """Whether ``bundle`` is within its unload's window (its ownership disabled, topics closing)."""
        with self.lock:
            until = self.unloading.get(bundle)
            if until is not None and self.now_s >= until:
                del self.unloading[bundle]
                return False
            return until is not None

    def set_web_url_tls(self, broker_id: str, url: str | None) -> None:
        """The https URL a broker publishes (``webServiceUrlTls``) once it serves TLS; its report is rebuilt."""
        with self.lock:
            self.brokers[broker_id].web_url_tls = url
            self._reports.pop(broker_id, None)

    def check_bundle(self, bundle: str) -> None:
        """The namespace exists (404) and the range is one of its bundles (412, validateNamespaceBundleRange)."""
        from simulator import admin_errors  # it builds on this module's SimError

        namespace, _, range_text = bundle.rpartition("/")
        if namespace not in self.namespaces:
            raise admin_errors.namespace_missing()
        admin_errors.validate_range(self.namespaces[namespace], range_text)

    def owner_of(self, bundle: str) -> str | None:
        with self.lock:
            return self.ownership.get(bundle)

    def assign(self, bundle: str) -> str:
        """The leader's assignment of an unowned bundle: the remembered destination once, else placement."""
        with self.lock:
            if bundle in self.ownership:
                return self.ownership[bundle]
            alive = self.active_ids()
            if not alive:
                raise SimError(503, "No broker is available")
            destination = self.affinity.pop(self.affinity_key(bundle), None)
            if destination not in alive:
                destination = self._place(bundle)
            self.ownership[bundle] = destination
            self.pending_lookups.pop(bundle, None)
            self.preallocated.setdefault(destination, []).append(bundle)
            source = self.released_from.pop(bundle, None)
            if source is not None:
                self.moves.append((self.now_s, bundle, source, destination))
            return destination

    def _place(self, bundle: str) -> str:
        """The cluster's own placement, within what the namespace policies allow (SimError 503: nothing)."""
        policies = self.namespace_policies()
        namespace = bundle_names.namespace_of(bundle)
        alive = ns_policies.apply_namespace_policies(namespace, self.active_ids(), policies)
        if not alive:
            raise SimError(503, f"No broker is available for {bundle}: its namespace policies allow no active broker")
        if self.scenario.placement == "random":
            if policies.group_of(namespace) is not None:  # filterAntiAffinityGroupOwnedBrokers
                owned = ns_policies.namespaces_by_broker({b: self.ownership.owned(b) for b in alive})
                counts = ns_policies.anti_affinity_namespace_owned_brokers(namespace, owned, policies)
                alive = ns_policies.filter_anti_affinity_group_owned_brokers(alive, counts, policies.domains)
            return self.rng.choice(alive)
        view = self.leader_view()
        load = LoadData(view, dict(self.leader_bundle_data), {})
        ctx = PlacementContext(
            load,
            self.config,
            self.rng,
            preallocated={b: list(v) for b, v in self.preallocated.items() if b in view.brokers},
        )
        chosen = planner.select_broker(bundle, registry.PLACEMENT["LeastLongTermMessageRate"], ctx)
        return chosen or self.rng.choice(alive)

    def bundle_of_topic(self, topic: str) -> str:
        rest = topic.split("://", 1)[-1]
        namespace = "/".join(rest.split("/")[:2])
        if namespace not in self.namespaces:
            raise SimError(404, f"Namespace {namespace} does not exist")
        return bundle_names.bundle_of_topic(namespace, self.namespaces[namespace], topic)

    def split(self, bundle: str, algorithm: str | None, positions: list[int] | None, unload: bool) -> None:
        """PUT …/{bundle}/split: the owner splits the bundle and owns both halves (or unloads them)."""
        with self.lock:
            self.check_bundle(bundle)
            supported = self.config.supportedNamespaceBundleSplitAlgorithms
            name = algorithm or self.config.defaultNamespaceBundleSplitAlgorithm
            if algorithm and algorithm not in supported:
                raise SimError(
                    412,
                    f"Unsupported namespace bundle split algorithm, supported algorithms are [{', '.join(supported)}]",
                )
            namespace, bundle_range = bundle_names.split_bundle_name(bundle)
            if not bundle_range.can_split():
                raise SimError(412, "Split bundle failed due to invalid request: bundle can't be split further")
            _, per_topic = self.bundle_stats(bundle)
            try:
                if name == algorithms.RANGE_EQUALLY_DIVIDE:
                    cuts = algorithms.range_equally_divide(bundle_range)
                elif name == algorithms.TOPIC_COUNT_EQUALLY_DIVIDE:
                    cuts = algorithms.topic_count_equally_divide(sorted(per_topic))
                elif name == algorithms.SPECIFIED_POSITIONS_DIVIDE:
                    cuts = algorithms.specified_positions_divide(bundle_range, sorted(per_topic), positions or [])
                else:
                    cuts = algorithms.flow_or_qps_equally_divide(
                        per_topic,
                        self.config.loadBalancerNamespaceBundleMaxMsgRate,
                        self.config.loadBalancerNamespaceBundleMaxBandwidthMbytes,
                        self.config.flowOrQpsDifferenceThresholdPercentage,
                    )
            except algorithms.SplitError as exc:
                raise SimError(412, str(exc)) from None
            cuts = [c for c in cuts if bundle_range.lower < c < bundle_range.upper]
            if not cuts:
                return  # no valid boundary: 204 and nothing changes
            owner = self.ownership.get(bundle) or self.assign(bundle)  # an unowned bundle is assigned first
            del self.ownership[bundle]
            self.namespaces[namespace] = bundle_names.apply_split(self.namespaces[namespace], bundle_range, cuts)
            edges = [bundle_range.lower, *sorted(cuts), bundle_range.upper]
            for lower, upper in itertools.pairwise(edges):
                child = bundle_names.bundle_name(namespace, bundle_names.BundleRange(lower, upper))
                self.ownership[child] = owner
                if unload:
                    self._release(child)

    # ----------------------------------------------------------------------------- time and events

    def advance(self, seconds: float) -> None:
        """Run simulated time forward: events, reconnect lookups and periodic samples, in time order."""
        with self.lock:
            end = self.now_s + seconds
            while True:
                due = [b.next_sample_s for b in self.alive_brokers()]
                due += list(self.pending_lookups.values())
                due += [e.at_s for e in self.events[:1]]
                due.append(self.next_shed_s)
                next_t = min([t for t in due if t <= end], default=None)
                if next_t is None:
                    break
                self.now_s = max(self.now_s, next_t)
                while self.events and self.events[0].at_s <= self.now_s:
                    self._apply_event(self.events.pop(0))
                for bundle, t in sorted(self.pending_lookups.items()):
                    if t <= self.now_s:
                        try:
                            self.assign(bundle)
                        except SimError:  # no broker may own it now: its clients look it up again later
                            self.pending_lookups[bundle] = self.now_s + RECONNECT_DELAY_S
                sampled = False
                for broker in self.alive_brokers():
                    if broker.next_sample_s <= self.now_s:
                        self._sample(broker)
                        broker.next_sample_s += self.scenario.report_interval_s
                        sampled = True
                if sampled:
                    self._leader_sample()
                if self.next_shed_s <= self.now_s:
                    self._builtin_cycle()
                    self.next_shed_s += self.config.loadBalancerSheddingIntervalMinutes * 60
            self.now_s = end
        for callback in list(self.after_advance):
            callback()

    def _builtin_cycle(self) -> None:
        """The leader's doLoadShedding and checkNamespaceBundleSplit, when Pulsar's own balancer is on."""
        shedding = self.config.loadBalancerSheddingEnabled
        splitting = self.config.loadBalancerAutoBundleSplitEnabled
        if not (shedding or splitting) or self.leader is None:
            return
        plan, self.builtin_state = plan_cycle(self.leader_view(), self.config, self.builtin_state, self.rng)
        for action in plan.actions:
            if (
                isinstance(action, Unload)
                and shedding
                and action.destination in self.active_ids()
                and not self.in_transition(action.bundle)
            ):
                self.unload(action.bundle, action.destination)
                self.builtin_actions += 1
            elif isinstance(action, Split) and splitting and action.bundle in self.ownership:
                self.split(action.bundle, action.algorithm, list(action.boundaries) or None, action.unload)
                self.builtin_actions += 1

    def _apply_event(self, event: EventSpec) -> None:
        if event.type == "add_broker":
            self._sample(self._add_broker(event.spec))
        elif event.type in ("crash_broker", "remove_broker"):
            self._stop(self.by_name(event.broker))
        elif event.type == "restart_broker":
            broker = self.by_name(event.broker)
            self._stop(broker)
            self.events.append(EventSpec(at_s=self.now_s + event.interval_s, type="start_broker", broker=event.broker))
            self.events.sort(key=lambda e: e.at_s)
        elif event.type == "start_broker":
            self._start(self.by_name(event.broker))
        elif event.type == "rolling_restart":
            names = sorted(b.name for b in self.alive_brokers())
            for i, name in enumerate(names):
                when = self.now_s + i * event.interval_s
                self.events.append(
                    EventSpec(at_s=when, type="restart_broker", broker=name, interval_s=min(event.interval_s / 2, 60.0))
                )
            self.events.sort(key=lambda e: e.at_s)
        elif event.type == "traffic":
            key = event.namespace or "*"
            self.traffic_factor[key] = self.traffic_factor.get(key, 1.0) * event.factor

    def _stop(self, broker: Broker) -> None:
        broker.alive = False
        if self.leader is None or broker.id == self.leader:
            self.affinity.clear()  # the affinity map lives in the leader's memory
        for bundle in self.owned_by(broker.id):
            self._release(bundle)
        self.preallocated.pop(broker.id, None)
        self._view = None
        for listener in self.listeners:
            listener("removed", broker)

    def _start(self, broker: Broker) -> None:
        """A restarted broker comes back empty and reports at once; it gets load only from placement."""
        broker.alive = True
        broker.started_at_s = self.now_s
        broker.next_sample_s = self.now_s
        broker.stats_sample, broker.topic_sample = {}, {}
        report_writes.restart(broker)
        self._sample(broker)
        broker.next_sample_s = self.now_s + self.scenario.report_interval_s
        for listener in self.listeners:
            listener("added", broker)

    # ----------------------------------------------------------------------------- test & operator hooks

    def replace_traffic(
        self,
        namespaces: dict[str, list[int]],
        topics: dict[str, list[Topic]],
        ownership: dict[str, str],
        patterns: list,
    ) -> None:
        """Swap in recorded bundles, topics, owners and traffic (a backtest), and re-sample every broker."""
        with self.lock:
            self.namespaces, self.topics, self.patterns = dict(namespaces), dict(topics), list(patterns)
            self._index_topics()
            self.ownership = dict(ownership)
            self.leader_bundle_data = {}
            for broker in self.alive_brokers():
                self._sample(broker)
            self._last_leader_sample_s = -LEADER_SAMPLE_S
            self._leader_sample()

    def crash(self, name: str) -> None:
        with self.lock:
            self._stop(self.by_name(name))
