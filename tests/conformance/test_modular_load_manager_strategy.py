"""Pulsar's ModularLoadManagerStrategyTest: LeastLongTermMessageRate and LeastResourceUsageWithWeight
(the modular manager's placement strategies), called through the placement registry with the load
data a snapshot gives.

Not mirrored: testRoundRobinBrokerSelector (a strategy we do not offer). The extensible manager's own
LeastResourceUsageWithWeightTest is not mirrored either: its steps replace a broker's BrokerLoadData
object to restart its moving average, which a snapshot cannot express (our LeastResourceUsageWithWeight
is the modular class, whose history lives in the strategy).
"""

import random

import pytest

from pulsar_lb_operator.strategies import PLACEMENT, StrategyState
from pulsar_lb_operator.strategies.loaddata import build_load_data
from pulsar_lb_operator.strategies.placement.common import PlacementContext
from tests.builders import broker_report, cfg, snapshot, stats

lltmr_select = PLACEMENT["LeastLongTermMessageRate"]
lruww_select = PLACEMENT["LeastResourceUsageWithWeight"]


def context(snap, config=None, seed=0, state=None):
    config = config or cfg()
    state = state or StrategyState()
    load, _, _ = build_load_data(snap, state.bundle_data, state.recently_unloaded, config.grace_period_ms)
    return PlacementContext(load, config, random.Random(seed), placement_ema=dict(state.placement_ema))


def test_least_long_term_message_rate():
    """ModularLoadManagerStrategyTest.testLeastLongTermMessageRate: long-term rates 100/200/300 → "1";
    broker 1 at 400 → "2"; broker 2 at cpu 90% (over 85%: score +∞) → "3"."""

    def cluster(rate1, cpu2=0):
        return snapshot(
            {
                "1:8080": broker_report(cpu=(0, 100), bundles={"t/a/0x00000000_0x00000001": stats(rate_in=rate1)}),
                "2:8080": broker_report(cpu=(cpu2, 100), bundles={"t/b/0x00000000_0x00000001": stats(rate_in=200)}),
                "3:8080": broker_report(cpu=(0, 100), bundles={"t/c/0x00000000_0x00000001": stats(rate_in=300)}),
            }
        )

    brokers = ["1:8080", "2:8080", "3:8080"]
    assert lltmr_select(brokers, "t/x/0x0_0x1", context(cluster(100))) == "1:8080"
    assert lltmr_select(brokers, "t/x/0x0_0x1", context(cluster(400))) == "2:8080"
    assert lltmr_select(brokers, "t/x/0x0_0x1", context(cluster(400, cpu2=90))) == "3:8080"  # 90% > 85%: +inf


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


def test_least_resource_usage_with_weight():
    """ModularLoadManagerStrategyTest.testLeastResourceUsageWithWeight: after a warm-up over four brokers,
    candidates 1..3 at (10, 30, 60), (20, 30, 50), (30, 30, 40) twice → "1"; (35, 20, 45) → "2"; broker 3
    restarted with no bundles (its history is forgotten) → "3"."""
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
        return lruww_select(candidates, "t/y/0x0_0x1", ctx)

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


def test_least_resource_usage_with_weight_with_arithmetic_exception():
    """ModularLoadManagerStrategyTest.testLeastResourceUsageWithWeightWithArithmeticException: history
    preset to {1: 0.1, 2: 0.3, 4: 0.05}, candidates 1..3 → "1"."""
    config = cfg(
        loadBalancerMemoryResourceWeight=0.1,
        loadBalancerDirectMemoryResourceWeight=0.1,
        loadBalancerHistoryResourcePercentage=0.5,
        loadBalancerAverageResourceUsageDifferenceThresholdPercentage=5,
    )
    snap = _weighted_cluster(10, 30, 60)
    ctx = context(snap, config)
    ctx.placement_ema.update({"1:8080": 0.1, "2:8080": 0.3, "4:8080": 0.05})
    assert lruww_select(["1:8080", "2:8080", "3:8080"], "t/y/0x0_0x1", ctx) == "1:8080"
