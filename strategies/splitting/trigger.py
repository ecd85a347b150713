"""The modular load manager's automatic split trigger (BundleSplitterTask) and the boundaries to use.

A bundle with at least two topics is split when its topic count or sessions (latest report) or its
long-term msg rate or throughput exceed the loadBalancerNamespaceBundleMax* keys, as long as the
namespace stays within loadBalancerNamespaceMaximumBundles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import BundleData, LoadData
from pulsar_lb_operator.strategies.plans import Split
from pulsar_lb_operator.strategies.profile import HotBundle
from pulsar_lb_operator.strategies.splitting import algorithms
from pulsar_lb_operator.strategies.units import fmt_bytes


class SplitLimits(NamedTuple):
    """The loadBalancerNamespaceBundleMax* thresholds, read from the configuration once per cycle."""

    topics: int
    sessions: int  # 0 or less: not checked
    msg_rate: float
    throughput: float  # bytes/s

    @classmethod
    def of(cls, config: LoadBalancerConfig) -> SplitLimits:
        return cls(
            config.loadBalancerNamespaceBundleMaxTopics,
            config.loadBalancerNamespaceBundleMaxSessions,
            config.loadBalancerNamespaceBundleMaxMsgRate,
            config.loadBalancerNamespaceBundleMaxBandwidthMbytes * 1024 * 1024,
        )

    def exceeded(self, topics: int, sessions: int, data: BundleData | None) -> bool:
        """Whether ``split_reasons`` finds any (the same four comparisons, without the words)."""
        rate, thr = (data.long.msg_rate, data.long.msg_throughput) if data is not None else (0.0, 0.0)
        return (
            topics > self.topics
            or (self.sessions > 0 and sessions > self.sessions)
            or rate > self.msg_rate
            or thr > self.throughput
        )


def split_reasons(load: LoadData, bundle: str, config: LoadBalancerConfig, topics: int, sessions: int) -> list[str]:
    limits = SplitLimits.of(config)
    data = load.bundle_data.get(bundle)
    rate = data.long.msg_rate if data else 0.0
    thr = data.long.msg_throughput if data else 0.0
    reasons = []
    if topics > limits.topics:
        reasons.append(f"topics {topics} > {limits.topics}")
    if limits.sessions > 0 and sessions > limits.sessions:
        reasons.append(f"sessions {sessions} > {limits.sessions}")
    if rate > limits.msg_rate:
        reasons.append(f"long-term msg rate {rate:.0f}/s > {limits.msg_rate}/s")
    if thr > limits.throughput:
        reasons.append(f"long-term throughput {fmt_bytes(thr)} > {fmt_bytes(limits.throughput)}")
    return reasons


def boundaries_for(load: LoadData, bundle: str, algorithm: str, config: LoadBalancerConfig) -> list[int] | None:
    """Split positions, or None when only the owner broker can compute them (topic data not collected)."""
    _, bundle_range = bundle_names.split_bundle_name(bundle)
    if algorithm == algorithms.RANGE_EQUALLY_DIVIDE:
        return algorithms.range_equally_divide(bundle_range)
    topic_stats = load.snapshot.topics.get(bundle)
    if topic_stats is None:
        return None
    if algorithm == algorithms.TOPIC_COUNT_EQUALLY_DIVIDE:
        return algorithms.topic_count_equally_divide(sorted(topic_stats))
    return algorithms.flow_or_qps_equally_divide(
        topic_stats,
        config.loadBalancerNamespaceBundleMaxMsgRate,
        config.loadBalancerNamespaceBundleMaxBandwidthMbytes,
        config.flowOrQpsDifferenceThresholdPercentage,
    )


def find_bundles_to_split(
    load: LoadData,
    config: LoadBalancerConfig,
    skip: frozenset[str] = frozenset(),
    sustained: Mapping[str, HotBundle] | None = None,
) -> tuple[list[Split], list[str]]:
    """Bundles to split now. With ``sustained`` (from the aggregated profile) a bundle must also have
    been over a threshold in most recent samples, so a single spike does not split it."""
    if not config.loadBalancerAutoBundleSplitEnabled:
        return [], []
    algorithm = config.defaultNamespaceBundleSplitAlgorithm
    picked_per_namespace: dict[str, int] = {}
    splits: list[Split] = []
    notes: list[str] = []
    limits, bundle_data = SplitLimits.of(config), load.bundle_data
    for broker in sorted(load.snapshot.brokers):
        hot = []  # the broker's bundles over a threshold, found in one pass; then handled by name
        for bundle, stats in load.snapshot.brokers[broker].lastStats.items():
            sessions = stats.consumerCount + stats.producerCount
            if stats.topics < 2 or not limits.exceeded(stats.topics, sessions, bundle_data.get(bundle)):
                continue
            if bundle in skip or bundle_names.is_system_bundle(bundle):
                continue
            hot.append((bundle, split_reasons(load, bundle, config, stats.topics, sessions)))
        for bundle, reasons in sorted(hot, key=lambda item: item[0]):
            namespace, bundle_range = bundle_names.split_bundle_name(bundle)
            if sustained is not None:
                if bundle not in sustained:
                    notes.append(f"split: {bundle} is hot now but not in most recent samples (profile)")
                    continue
                reasons.append(f"hot in {sustained[bundle].share:.0%} of recent samples")
            if not bundle_range.can_split():
                notes.append(f"split: {bundle} is hot ({'; '.join(reasons)}) but can't be split further")
                continue
            count = load.snapshot.bundle_count(namespace) + picked_per_namespace.get(namespace, 0)
            if count >= config.loadBalancerNamespaceMaximumBundles:
                notes.append(
                    f"split: {bundle} is hot but {namespace} has {count} bundles "
                    f"(loadBalancerNamespaceMaximumBundles {config.loadBalancerNamespaceMaximumBundles})"
                )
                continue
            if algorithm == algorithms.SPECIFIED_POSITIONS_DIVIDE:
                notes.append(f"split: {bundle} is hot but {algorithm} needs positions given by hand")
                continue
            positions = boundaries_for(load, bundle, algorithm, config)
            if positions == []:
                notes.append(f"split: {bundle} is hot but {algorithm} finds no split position")
                continue
            picked_per_namespace[namespace] = picked_per_namespace.get(namespace, 0) + 1
            if positions is None:
                where = "left to the owner broker: the snapshot has no topic stats for it"
            elif algorithm == algorithms.RANGE_EQUALLY_DIVIDE:
                where = "from the bundle's hash range"
            else:
                where = "from the snapshot's topic stats"
            splits.append(
                Split(
                    bundle,
                    broker,
                    algorithm,
                    tuple(positions or ()),
                    f"split trigger: {'; '.join(reasons)}; {algorithm}, boundaries {where}",
                    unload=config.loadBalancerAutoUnloadSplitBundlesEnabled,
                )
            )
    return splits, notes
