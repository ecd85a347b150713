"""Traffic and load physics: topics and their rates, a bundle's stats, what a broker's host uses.

State: ``namespaces`` (bundle boundaries), ``topics`` (sorted by hash, so a bundle's topics are a bisect
away), ``patterns``, ``traffic_factor`` (per namespace, ``*`` for all) and ``topic_factor`` (per topic: a
surge into a few topics) — the traffic over time. Host usage is background plus traffic times each
broker's costs, in LocalBrokerData's units; a ``background`` event changes what other processes use.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import math
from collections.abc import Iterator, Sequence

from pulsar_lb_operator.simulator.model import (
    LEADER_SAMPLE_S,
    MIB,
    Broker,
    Topic,
)
from pulsar_lb_operator.simulator.scenario import EventSpec, NamespaceSpec
from pulsar_lb_operator.simulator.state import ClusterState
from pulsar_lb_operator.simulator.traffic import Pattern, TrafficPattern
from pulsar_lb_operator.strategies import BundleStats, TopicStats
from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies import policies as ns_policies


class Physics(ClusterState):
    """Mixed into SimulatedCluster (cluster.py); the state it shares with the other mixins is ClusterState's."""

    def _create_namespaces(self) -> None:
        for index, ns in enumerate(self.scenario.namespaces):
            self.namespaces[ns.name] = bundle_names.default_boundaries(ns.bundles)
            topics: list[Topic] = []
            for t in range(ns.topics):
                base = ns.rate * (math.exp(self.rng.gauss(0, ns.rate_spread)) if ns.rate_spread else 1.0)
                names = _full_names(ns, f"topic-{t}")
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
                (full,) = _full_names(ns, name)
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

    def _bundles_of(self, namespace: str) -> list[str]:
        return [bundle_names.bundle_name(namespace, r) for r in bundle_names.ranges_of(self.namespaces[namespace])]

    def all_bundles(self) -> list[str]:
        return [b for ns in sorted(self.namespaces) for b in self._bundles_of(ns)]

    def _topic_stats(self, topic: Topic) -> TopicStats:
        multiplier = self.patterns[topic.pattern_index].multiplier(self.now_s, self.noise)
        multiplier *= self.traffic_factor.get(topic.namespace, 1.0) * self.traffic_factor.get("*", 1.0)
        if self.topic_factor:
            multiplier *= self.topic_factor.get(topic.name, 1.0)
        return topic.stats(multiplier)

    @contextlib.contextmanager
    def steady(self) -> Iterator[None]:
        """Within it, every jittering topic runs at its mean rate (a jitter's multiplier, 1 + N(0, amplitude), is 1
        on average) and draws no noise; daily curves, bursts and surges are as they are. A jitter is drawn anew at
        each reading, so a balance judged on the drawn rates would judge the draws, not the cluster."""
        drawn = self.patterns
        self.patterns = [Pattern() if type(p) is Pattern and p.kind == "jitter" else p for p in drawn]
        try:
            yield
        finally:
            self.patterns = drawn

    def change_traffic(self, event: EventSpec) -> None:
        """A ``traffic`` event: the namespace's (or, without one, every) topic's rate × ``factor`` from now on; with
        ``topics``, only those topics' (every partition of a partitioned one)."""
        if not event.topics:
            key = event.namespace or "*"
            self.traffic_factor[key] = self.traffic_factor.get(key, 1.0) * event.factor
            return
        spec = next(ns for ns in self.scenario.namespaces if ns.name == event.namespace)
        for topic in event.topics:
            for name in _full_names(spec, topic):
                self.topic_factor[name] = self.topic_factor.get(name, 1.0) * event.factor

    def change_background(self, broker: Broker, fraction: float) -> None:
        """A ``background`` event: other processes on the broker's machine use ``fraction`` of its CPU from now on
        (the next sample shows it)."""
        broker.spec = dataclasses.replace(broker.spec, background_cpu=fraction)

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
            if self.topic_factor:
                multiplier *= self.topic_factor.get(topic.name, 1.0)
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

    def balanced_deal(self) -> dict[str, str]:
        """Every bundle to the live broker it leaves least used (each broker's own cores and costs), the largest
        first, among those its namespace's isolation policy allows: an even start, as a balancer would have kept
        the cluster. bundle → broker id."""
        brokers = self.alive_brokers()
        held = {b.id: BundleStats() for b in brokers}
        stats = {bundle: self.bundle_stats(bundle)[0] for bundle in self.all_bundles()}
        reference = brokers[0]
        size = {bundle: self.weighted_usage(reference, {bundle: s}) for bundle, s in stats.items()}
        policies = self.namespace_policies() if self.scenario.isolation_policies else None
        owners: dict[str, str] = {}
        for bundle in sorted(stats, key=lambda b: (-size[b], b)):
            allowed = [b.id for b in brokers]
            if policies is not None:
                namespace = bundle_names.namespace_of(bundle)
                allowed = ns_policies.apply_namespace_policies(namespace, allowed, policies) or allowed
            after = {b: self.weighted_usage(self.brokers[b], {"held": held[b], bundle: stats[bundle]}) for b in allowed}
            chosen = min(allowed, key=lambda b: (after[b], b))
            owners[bundle] = chosen
            held[chosen] = _plus(held[chosen], stats[bundle])
        return owners

    def true_usage(self, broker_id: str) -> float:
        """Weighted max usage in % from current traffic, without noise or report lag (for metrics)."""
        return self.weighted_usage(
            self.brokers[broker_id], {b: self.bundle_stats(b)[0] for b in self.owned_by(broker_id)}
        )

    def weighted_usage(self, broker: Broker, stats: dict[str, BundleStats]) -> float:
        """What ``broker`` would use, in %, carrying exactly the bundles in ``stats`` (no noise)."""
        usage = self.host_usage(broker, stats, 0.0)
        return max(usage[k][0] / usage[k][1] * 100 for k in ("cpu", "bandwidthIn", "bandwidthOut"))

    def replace_traffic(
        self,
        namespaces: dict[str, list[int]],
        topics: dict[str, list[Topic]],
        ownership: dict[str, str],
        patterns: Sequence[TrafficPattern],
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


def _full_names(namespace: NamespaceSpec, topic: str) -> list[str]:
    """The full names of a topic of ``namespace`` as the scenario names it: a hot topic's own (a full name stays as
    it is), or ``persistent://tenant/ns/topic-N`` — one per partition when the namespace's topics are partitioned."""
    if topic in namespace.hot_topics:
        return [topic if "://" in topic else f"persistent://{namespace.name}/{topic}"]
    if namespace.partitions:
        return [f"persistent://{namespace.name}/{topic}-partition-{p}" for p in range(namespace.partitions)]
    return [f"persistent://{namespace.name}/{topic}"]


def _plus(total: BundleStats, stats: BundleStats) -> BundleStats:
    return BundleStats(
        msgRateIn=total.msgRateIn + stats.msgRateIn,
        msgRateOut=total.msgRateOut + stats.msgRateOut,
        msgThroughputIn=total.msgThroughputIn + stats.msgThroughputIn,
        msgThroughputOut=total.msgThroughputOut + stats.msgThroughputOut,
        topics=total.topics + stats.topics,
    )
