"""The modular load manager's automatic split trigger (BundleSplitterTask) and the boundaries to use.

A bundle with at least two topics is split when its topic count or sessions (latest report) or its
long-term msg rate or throughput exceed the loadBalancerNamespaceBundleMax* keys, as long as the
namespace stays within loadBalancerNamespaceMaximumBundles.
"""

from __future__ import annotations

from collections.abc import Mapping

from strategies import bundles as bundle_names
from strategies.config import LoadBalancerConfig
from strategies.loaddata import LoadData
from strategies.plans import Split
from strategies.profile import HotBundle
from strategies.shedding.common import fmt_bytes
from strategies.splitting import algorithms


def split_reasons(load: LoadData, bundle: str, config: LoadBalancerConfig, topics: int, sessions: int) -> list[str]:
    data = load.bundle_data.get(bundle)
    rate = data.long.msg_rate if data else 0.0
    thr = data.long.msg_throughput if data else 0.0
    max_bandwidth = config.loadBalancerNamespaceBundleMaxBandwidthMbytes * 1024 * 1024
    reasons = []
    if topics > config.loadBalancerNamespaceBundleMaxTopics:
        reasons.append(f"topics {topics} > {config.loadBalancerNamespaceBundleMaxTopics}")
    max_sessions = config.loadBalancerNamespaceBundleMaxSessions
    if max_sessions > 0 and sessions > max_sessions:
        reasons.append(f"sessions {sessions} > {max_sessions}")
    if rate > config.loadBalancerNamespaceBundleMaxMsgRate:
        reasons.append(f"long-term msg rate {rate:.0f}/s > {config.loadBalancerNamespaceBundleMaxMsgRate}/s")
    if thr > max_bandwidth:
        reasons.append(f"long-term throughput {fmt_bytes(thr)} > {fmt_bytes(max_bandwidth)}")
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
    for broker in sorted(load.snapshot.brokers):
        for bundle, stats in sorted(load.snapshot.brokers[broker].lastStats.items()):
            namespace, bundle_range = bundle_names.split_bundle_name(bundle)
            if stats.topics < 2 or bundle_names.is_system_namespace(namespace) or bundle in skip:
                continue
            reasons = split_reasons(load, bundle, config, stats.topics, stats.consumerCount + stats.producerCount)
            if not reasons:
                continue
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
