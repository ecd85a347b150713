"""Pulsar's bundle split tests: the four split algorithms (common/naming/*BundleSplitAlgorithmTest) and the
modular manager's split trigger (impl/BundleSplitterTaskTest).

Not mirrored: the argument checks that only Java can fail (a null bundle or null service:
RangeEquallyDivide's NullPointerException half of its test, TopicCountEquallyDivide.testWrongArg).
"""

import itertools
import random

import pytest

from pulsar_lb_operator.strategies import StrategyState, plan_cycle
from pulsar_lb_operator.strategies.bundles import BundleRange, topic_hash
from pulsar_lb_operator.strategies.loaddata import build_load_data
from pulsar_lb_operator.strategies.snapshots import TopicStats
from pulsar_lb_operator.strategies.splitting import algorithms
from pulsar_lb_operator.strategies.splitting.trigger import find_bundles_to_split
from tests.builders import broker_report, cfg, snapshot, stats


def test_range_equally_divide_get_split_boundary():
    """RangeEquallyDivideBundleSplitAlgorithmTest.testGetSplitBoundaryMethodReturnCorrectResult: [10,
    0xffffffff] → 10 + (0xffffffff − 10) / 2."""
    assert algorithms.range_equally_divide(BundleRange(10, 0xFFFFFFFF)) == [10 + (0xFFFFFFFF - 10) // 2]


def test_range_equally_divide_through_the_planner():
    """The same algorithm as the trigger applies it (defaultNamespaceBundleSplitAlgorithm): a hot
    [0x00000000, 0x80000000) bundle splits at 0x40000000."""
    hot = {"t/ns/0x00000000_0x80000000": stats(rate_in=40000, topics=5)}
    snap = snapshot({"a:8080": broker_report(bundles=hot), "b:8080": broker_report()})
    plan, _ = plan_cycle(snap, cfg(), StrategyState(), random.Random(0), "OverloadShedder")
    assert [(s.bundle, s.boundaries) for s in plan.splits] == [("t/ns/0x00000000_0x80000000", (0x40000000,))]


def test_topic_count_topics_size_less_than_1():
    """TopicCountEquallyDivideBundleSplitAlgorithmTest.testTopicsSizeLessThan1: one topic → no boundary."""
    assert algorithms.topic_count_equally_divide(["a"]) == []


def test_topic_count_algorithm_return_correct_result():
    """TopicCountEquallyDivideBundleSplitAlgorithmTest.testAlgorithmReturnCorrectResult: topics a, b, c →
    the midpoint of the two middle CRC-32 hashes."""
    hashes = sorted(topic_hash(t) for t in ("a", "b", "c"))
    start, end = hashes[max(len(hashes) // 2 - 1, 0)], hashes[len(hashes) // 2]
    assert algorithms.topic_count_equally_divide(["a", "b", "c"]) == [start + (end - start) // 2] == [1010591668]


def test_specified_positions_total_topics_size_less_than_1():
    """SpecifiedPositionsBundleSplitAlgorithmTest.testTotalTopicsSizeLessThan1: one topic → no boundary."""
    assert algorithms.specified_positions_divide(BundleRange(1, 1000), ["a"], [1, 2]) == []


def test_specified_positions_less_than_1():
    """SpecifiedPositionsBundleSplitAlgorithmTest.testSpecifiedPositionsLessThan1: no positions (null or
    empty) → IllegalArgumentException (SplitError, Pulsar's 412)."""
    for positions in (None, []):
        with pytest.raises(algorithms.SplitError):
            algorithms.specified_positions_divide(BundleRange(1, 1000), ["a", "b"], positions)


def test_specified_positions_algorithm_return_correct_result():
    """SpecifiedPositionsBundleSplitAlgorithmTest.testAlgorithmReturnCorrectResult: bundle [1, 1000],
    positions −1, 0, 1, 100, 200, 500, 800, 1000, 1100 → 100, 200, 500, 800 (the bounds are excluded)."""
    got = algorithms.specified_positions_divide(
        BundleRange(1, 1000), ["topic", "topic2"], [-1, 0, 1, 100, 200, 500, 800, 1000, 1100]
    )
    assert got == [100, 200, 500, 800]


def test_flow_or_qps_first_position_is_over_load():
    """FlowOrQpsEquallyDivideBundleSplitAlgorithmTest.testFirstPositionIsOverLoad: the lowest-hash topic
    alone exceeds 1010 msg/s → the first boundary right after it, H0 + (H1 − H0) / 2 + 1."""
    names = [f"persistent://test-tenant1/test-namespace1/test-partition-{i}" for i in range(5)]
    topic_stats = {n: TopicStats(24.5, 25, 1000, 1000) for n in names}
    topic_stats[names[3]] = TopicStats(1000, 1000, 1000, 1000)  # partition-3 has the lowest hash
    hashes = sorted(topic_hash(n) for n in names)
    assert topic_hash(names[3]) == hashes[0]
    first = algorithms.flow_or_qps_equally_divide(topic_stats, 1010, 100, 10)[0]
    assert first == hashes[0] + (hashes[1] - hashes[0]) // 2 + 1 == 1140613260


def test_flow_or_qps_split_bundle_by_flow_or_qps():
    """FlowOrQpsEquallyDivideBundleSplitAlgorithmTest.testSplitBundleByFlowOrQps: 241 topics; between
    consecutive boundaries the msg rate stays under 1010 msg/s and the throughput under 100 MiB/s."""
    topics = {}
    for i in range(1, 13):
        for j in range(20):
            rate = (24.5, 25) if i <= 5 else (25.5, 25)
            topics[f"persistent://test-tenant1/test-namespace1/test{i}-partition-{j}"] = TopicStats(*rate, 1000, 1000)
    topics["persistent://test-tenant1/test-namespace1/test695-partition-0"] = TopicStats(25, 35, 1000, 1000)
    cuts = algorithms.flow_or_qps_equally_divide(topics, 1010, 100, 10)
    assert len(cuts) == 12
    for lo, hi in itertools.pairwise([0, *cuts, 1 << 32]):
        segment = [s for t, s in topics.items() if lo <= topic_hash(t) < hi]
        assert sum(s.msg_rate for s in segment) < 1010
        assert sum(s.msg_throughput for s in segment) < 100 * 1024 * 1024


def _trigger(bundles, config):
    snap = snapshot({"b:8080": broker_report(bundles=bundles)})
    load, _, _ = build_load_data(snap, {}, {}, 0)
    return find_bundles_to_split(load, config)


def test_split_task_when_topic_just_one():
    """BundleSplitterTaskTest.testSplitTaskWhenTopicJustOne: one topic at 30 000 + 1 msg/s long-term → no split."""
    splits, _ = _trigger({"ten/ns/0x00000000_0x80000000": stats(rate_in=30000, rate_out=1, topics=1)}, cfg())
    assert splits == []


def test_load_balancer_namespace_maximum_bundles():
    """BundleSplitterTaskTest.testLoadBalancerNamespaceMaximumBundles: three hot bundles of ten/ns with
    loadBalancerNamespaceMaximumBundles 3 → picked + current bundle count == 3 (none picked)."""
    bundles = {
        f"ten/ns/{r}": stats(rate_in=60000, rate_out=1, topics=5)
        for r in ("0x00000000_0x20000000", "0x20000000_0x40000000", "0x40000000_0x60000000")
    }
    splits, notes = _trigger(bundles, cfg(loadBalancerNamespaceMaximumBundles=3))
    assert len(splits) + 3 == 3
    assert any("loadBalancerNamespaceMaximumBundles" in n for n in notes)
