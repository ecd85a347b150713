"""The four NamespaceBundleSplitAlgorithms. Each returns split positions strictly inside the bundle,
or an empty list for "do not split" (Pulsar's null)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.bundles import BundleRange
from pulsar_lb_operator.strategies.errors import UserError
from pulsar_lb_operator.strategies.snapshots import TopicStats

RANGE_EQUALLY_DIVIDE = "range_equally_divide"
TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
SPECIFIED_POSITIONS_DIVIDE = "specified_positions_divide"
FLOW_OR_QPS_EQUALLY_DIVIDE = "flow_or_qps_equally_divide"
# Algorithms that need the bundle's topics (from broker-stats/topics or topicHashPositions).
NEEDS_TOPICS = (TOPIC_COUNT_EQUALLY_DIVIDE, SPECIFIED_POSITIONS_DIVIDE, FLOW_OR_QPS_EQUALLY_DIVIDE)


class SplitError(UserError, ValueError):
    """Input Pulsar answers with 412 (IllegalArgumentException)."""


def range_equally_divide(bundle: BundleRange) -> list[int]:
    return [bundle.lower + (bundle.upper - bundle.lower) // 2]


def topic_count_equally_divide(topics: Sequence[str]) -> list[int]:
    return topic_count_positions([bundle_names.topic_hash(t) for t in topics])


def topic_count_positions(hashes: Sequence[int]) -> list[int]:
    """Midpoint between the two middle topic hashes, so each side holds half the topics."""
    if len(hashes) <= 1:
        return []
    ordered = sorted(hashes)
    n = len(ordered)
    start, end = ordered[max(n // 2 - 1, 0)], ordered[n // 2]
    return [start + (end - start) // 2]


def specified_positions_divide(bundle: BundleRange, topics: Sequence[str], positions: Sequence[int]) -> list[int]:
    if not positions:
        raise SplitError("splitBoundaries must not be empty")
    if len(topics) <= 1:
        return []
    return sorted({p for p in positions if bundle.lower < p < bundle.upper})


def flow_or_qps_equally_divide(
    topic_stats: Mapping[str, TopicStats],
    max_msg_rate: float,
    max_bandwidth_mbytes: float,
    difference_threshold_percentage: float,
) -> list[int]:
    if len(topic_stats) <= 1:
        return []
    points: dict[int, tuple[float, float]] = {}
    for topic, stats in sorted(topic_stats.items()):
        rate = stats.msg_rate
        thr = stats.msg_throughput
        if rate > 0 or thr > 0:
            points[bundle_names.topic_hash(topic)] = (rate, thr)  # a hash collision overwrites, as in Pulsar
    return flow_or_qps_positions(points, max_msg_rate, max_bandwidth_mbytes, difference_threshold_percentage)


def flow_or_qps_positions(
    points: Mapping[int, tuple[float, float]],
    max_msg_rate: float,
    max_bandwidth_mbytes: float,
    difference_threshold_percentage: float,
) -> list[int]:
    """Cut wherever the msg rate or throughput accumulated in hash order would pass the maximum.

    ``points`` maps a topic hash to its (msg rate in+out, throughput in+out in bytes/s).
    """
    diff = difference_threshold_percentage / 100
    max_bandwidth = max_bandwidth_mbytes * 1024 * 1024
    total_rate = sum(rate for rate, _ in points.values())
    total_thr = sum(thr for _, thr in points.values())
    if len(points) < 2 or (total_rate < max_msg_rate * (1 + diff) and total_thr < max_bandwidth * (1 + diff)):
        return []
    hashes = sorted(points)
    acc_rate, acc_thr = points[hashes[0]]
    boundaries = []
    for previous, current in itertools.pairwise(hashes):
        rate, thr = points[current]
        if acc_rate + rate > max_msg_rate or acc_thr + thr > max_bandwidth:
            boundaries.append(previous + (current - previous) // 2 + 1)
            acc_rate, acc_thr = rate, thr
        else:
            acc_rate += rate
            acc_thr += thr
    return boundaries
