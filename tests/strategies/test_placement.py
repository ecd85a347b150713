"""Placement: LeastLongTermMessageRate (§8.5, PIP-364's preallocation example) and
LeastResourceUsageWithWeight (§8.5 sequence, PIP-364's over-placement cases)."""

import random

import pytest

from strategies import StrategyState, plan_cycle
from strategies.loaddata import build_load_data
from strategies.placement import least_long_term_message_rate as lltmr
from strategies.placement import least_resource_usage_with_weight as lruww
from strategies.placement.common import PlacementContext
from strategies.planner import select_broker
from tests.builders import broker_report, cfg, snapshot, stats


def context(snap, config=None, seed=0, state=None):
    config = config or cfg()
    state = state or StrategyState()
    load, _, _ = build_load_data(snap, state.bundle_data, state.recently_unloaded, config.grace_period_ms)
    return PlacementContext(load, config, random.Random(seed), placement_ema=dict(state.placement_ema))


def test_least_long_term_message_rate_steps():
    def cluster(rate1, cpu2=0):
        return snapshot(
            {
                "1:8080": broker_report(cpu=(0, 100), bundles={"t/a/0x00000000_0x00000001": stats(rate_in=rate1)}),
                "2:8080": broker_report(cpu=(cpu2, 100), bundles={"t/b/0x00000000_0x00000001": stats(rate_in=200)}),
                "3:8080": broker_report(cpu=(0, 100), bundles={"t/c/0x00000000_0x00000001": stats(rate_in=300)}),
            }
        )

    brokers = ["1:8080", "2:8080", "3:8080"]
    assert lltmr.select(brokers, "t/x/0x0_0x1", context(cluster(100))) == "1:8080"
    assert lltmr.select(brokers, "t/x/0x0_0x1", context(cluster(400))) == "2:8080"
    assert lltmr.select(brokers, "t/x/0x0_0x1", context(cluster(400, cpu2=90))) == "3:8080"  # 90% > 85%: +inf


def test_preallocation_spreads_one_cycles_bundles_100_vs_110():
    """PIP-364: two 20 msg/s bundles, brokers at 100 and 110: the first goes to broker1 (→120),
    so the second goes to broker2, although neither report has changed yet."""
    snap = snapshot(
        {
            "broker1:8080": broker_report(bundles={"t/a/0x00000000_0x00000001": stats(rate_in=100)}),
            "broker2:8080": broker_report(bundles={"t/b/0x00000000_0x00000001": stats(rate_in=110)}),
            "source:8080": broker_report(
                bundles={"t/c/0x00000000_0x00000001": stats(rate_in=20), "t/c/0x00000001_0x00000002": stats(rate_in=20)}
            ),
        }
    )
    ctx = context(snap)
    candidates = ["broker1:8080", "broker2:8080"]
    placer = lltmr.select
    first = placer(candidates, "t/c/0x00000000_0x00000001", ctx)
    ctx.preallocate(first, "t/c/0x00000000_0x00000001")
    second = placer(candidates, "t/c/0x00000001_0x00000002", ctx)
    assert (first, second) == ("broker1:8080", "broker2:8080")
    assert lltmr.broker_score("broker1:8080", ctx) == pytest.approx(120)


def test_preallocation_through_the_planner():
    # OverloadShedder unloads both 20 msg/s bundles of an overloaded source in one cycle.
    snap = snapshot(
        {
            "broker1:8080": broker_report(cpu=(10, 100), bundles={"t/a/0x00000000_0x00000001": stats(rate_in=100)}),
            "broker2:8080": broker_report(cpu=(10, 100), bundles={"t/b/0x00000000_0x00000001": stats(rate_in=110)}),
            # 99% ≥ 85%: offload (0.99 − 0.85 + 0.05) × 50 MB/s = 9.5 MB/s, i.e. both 5 MB/s bundles
            "source:8080": broker_report(
                cpu=(99, 100),
                thr_in=5e7,
                bundles={
                    "t/c/0x00000000_0x00000001": stats(rate_in=20, thr_in=5e6),
                    "t/c/0x00000001_0x00000002": stats(rate_in=20, thr_in=5e6),
                },
            ),
        }
    )
    plan, _ = plan_cycle(
        snap, cfg(), StrategyState(), random.Random(0), shedding="OverloadShedder", placement="LeastLongTermMessageRate"
    )
    assert sorted(u.destination for u in plan.unloads) == ["broker1:8080", "broker2:8080"]


def _weighted_cluster(u1, u2, u3, u4=5, empty3=False):
    def report(u, empty=False):
        level = (u, 100)
        return broker_report(
            cpu=level,
            memory=level,
            direct_memory=level,
            bw_in=level,
            bw_out=level,
            bundles={} if empty else {"t/x/0x00000000_0xffffffff": stats(rate_in=100, rate_out=100)},
        )

    return snapshot({"1:8080": report(u1), "2:8080": report(u2), "3:8080": report(u3, empty3), "4:8080": report(u4)})


def test_least_resource_usage_with_weight_sequence():
    config = cfg(
        loadBalancerCPUResourceWeight=1.0,
        loadBalancerMemoryResourceWeight=0.1,
        loadBalancerDirectMemoryResourceWeight=0.1,
        loadBalancerBandwidthInResourceWeight=1.0,
        loadBalancerBandwidthOutResourceWeight=1.0,
        loadBalancerHistoryResourcePercentage=0.5,
        loadBalancerAverageResourceUsageDifferenceThresholdPercentage=5,
    )
    ema: dict = {}

    def select(snap, candidates):
        ctx = context(snap, config)
        ctx.placement_ema = ema
        return lruww.select(candidates, "t/y/0x0_0x1", ctx)

    select(_weighted_cluster(10, 30, 60), ["1:8080", "2:8080", "3:8080", "4:8080"])  # warm-up
    three = ["1:8080", "2:8080", "3:8080"]
    assert select(_weighted_cluster(10, 30, 60), three) == "1:8080"  # broker4's 0.05 must not leak in
    assert select(_weighted_cluster(20, 30, 50), three) == "1:8080"
    assert select(_weighted_cluster(30, 30, 40), three) == "1:8080"
    assert select(_weighted_cluster(30, 30, 40), three) == "1:8080"
    assert ema["1:8080"] == pytest.approx(0.2625) and ema["3:8080"] == pytest.approx(0.4375)
    assert select(_weighted_cluster(35, 20, 45), three) == "2:8080"
    # broker3 restarts with no bundles: its history is forgotten and it becomes the best
    assert select(_weighted_cluster(35, 20, 0, empty3=True), three) == "3:8080"
    assert ema["3:8080"] == 0.0


def _scores_cluster(scores):
    return snapshot(
        {
            f"b{i}-{s}:8080": broker_report(cpu=(s, 100), bundles={f"t/n{i}/0x00000000_0x00000001": stats(rate_in=100)})
            for i, s in enumerate(scores)
        }
    )


def test_over_placement_40_40_40_40_69_70_falls_back_to_all_brokers():
    """avg 49.83: 40 + 10 > 49.83, so no broker is a candidate and any broker — even the 69% and 70%
    ones — may receive the bundle."""
    snap = _scores_cluster([40, 40, 40, 40, 69, 70])
    chosen = {lruww.select(sorted(snap.brokers), "t/z/0x0_0x1", context(snap, seed=s)) for s in range(60)}
    assert {"b4-69:8080", "b5-70:8080"} <= chosen


def test_over_placement_10_60_70_80_80_with_zero_threshold_includes_the_60_broker():
    # PIP-364's 10/60/70/80/80 (avg 60). 60/100 is not exact in float32 (Pulsar's percentUsage), so
    # "60 + 0 <= 60" is decided by rounding; 59/81 keep the average at 60 and the point intact.
    snap = _scores_cluster([10, 59, 70, 80, 81])
    config = cfg(loadBalancerAverageResourceUsageDifferenceThresholdPercentage=0)
    chosen = {lruww.select(sorted(snap.brokers), "t/z/0x0_0x1", context(snap, config, seed=s)) for s in range(60)}
    assert chosen == {"b0-10:8080", "b1-59:8080"}  # the near-average broker takes half the bundles


def test_select_broker_skips_brokers_over_max_topics():
    snap = snapshot(
        {
            "full:8080": broker_report(bundles={"t/a/0x00000000_0x00000001": stats(topics=60000)}),
            "free:8080": broker_report(bundles={"t/b/0x00000000_0x00000001": stats(rate_in=1000, topics=10)}),
        }
    )
    ctx = context(snap)
    assert select_broker("t/c/0x00000000_0x00000001", lltmr.select, ctx) == "free:8080"
    assert ctx.preallocated == {"free:8080": ["t/c/0x00000000_0x00000001"]}


def test_least_resource_usage_with_weight_with_preset_history():
    # testLeastResourceUsageWithWeightWithArithmeticException: {1: 0.1, 2: 0.3, 4: 0.05}, candidates 1..3
    config = cfg(
        loadBalancerMemoryResourceWeight=0.1,
        loadBalancerDirectMemoryResourceWeight=0.1,
        loadBalancerHistoryResourcePercentage=0.5,
        loadBalancerAverageResourceUsageDifferenceThresholdPercentage=5,
    )
    snap = _weighted_cluster(10, 30, 60)
    ctx = context(snap, config)
    ctx.placement_ema.update({"1:8080": 0.1, "2:8080": 0.3, "4:8080": 0.05})
    assert lruww.select(["1:8080", "2:8080", "3:8080"], "t/y/0x0_0x1", ctx) == "1:8080"


def test_max_topic_distribution_to_broker():
    """testMaxTopicDistributionToBroker: once a broker holds a bundle with more than
    loadBalancerBrokerMaxTopics topics (preallocated, not yet reported), no further bundle goes there."""
    snap = snapshot(
        {f"b{i}:8080": broker_report(bundles={f"t/own{i}/0x00000000_0x00000001": stats(rate_in=10)}) for i in range(3)}
    )
    ctx = context(snap)
    big = "test/test/0x00000000_0x00000001"
    from strategies.loaddata import BundleData, MessageAverage

    data = dict(ctx.load.bundle_data)
    data[big] = BundleData(MessageAverage(10, 1, 1000, 0, 0, 0), MessageAverage(1000, 1, 1000, 0, 0, 0), topics=50010)
    ctx.load = type(ctx.load)(ctx.load.snapshot, data, ctx.load.recently_unloaded)
    first = select_broker(big, lltmr.select, ctx)
    others = {select_broker(f"test/test/0x{i:08x}_0x{i + 1:08x}", lltmr.select, ctx) for i in range(1, 50)}
    assert first not in others
