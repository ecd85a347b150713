"""Placement beyond Pulsar's own tests (ModularLoadManagerStrategyTest is in tests/conformance/):
PIP-364's preallocation and over-placement cases, and the shedding path's selectBroker."""

import random

import pytest

from pulsar_lb_operator.strategies import StrategyState, plan_cycle
from pulsar_lb_operator.strategies.loaddata import build_load_data
from pulsar_lb_operator.strategies.placement import least_long_term_message_rate as lltmr
from pulsar_lb_operator.strategies.placement import least_resource_usage_with_weight as lruww
from pulsar_lb_operator.strategies.placement.common import PlacementContext
from pulsar_lb_operator.strategies.planner import select_broker, select_broker_for_assignment
from tests.builders import broker_report, cfg, snapshot, stats


def context(snap, config=None, seed=0, state=None):
    config = config or cfg()
    state = state or StrategyState()
    load, _, _ = build_load_data(snap, state.bundle_data, state.recently_unloaded, config.grace_period_ms)
    return PlacementContext(load, config, random.Random(seed), placement_ema=dict(state.placement_ema))


def test_preallocation_spreads_assignments_100_vs_110():
    """PIP-364: two 20 msg/s bundles, brokers at 100 and 110. On the lookup path
    (selectBrokerForAssignment) the first goes to broker1 and is preallocated there (→ 120), so the
    second goes to broker2, although neither report has changed yet. (Shedding picks destinations with
    selectBroker, which does not preallocate: see the next test.)"""
    snap = snapshot(
        {
            "broker1:8080": broker_report(bundles={"t/a/0x00000000_0x00000001": stats(rate_in=100)}),
            "broker2:8080": broker_report(bundles={"t/b/0x00000000_0x00000001": stats(rate_in=110)}),
            # the bundles' previous owner, overloaded (LeastLongTermMessageRate scores it +inf)
            "source:8080": broker_report(
                cpu=(99, 100),
                bundles={
                    "t/c/0x00000000_0x00000001": stats(rate_in=20),
                    "t/c/0x00000001_0x00000002": stats(rate_in=20),
                },
            ),
        }
    )
    ctx = context(snap)
    first = select_broker_for_assignment("t/c/0x00000000_0x00000001", lltmr.select, ctx)
    second = select_broker_for_assignment("t/c/0x00000001_0x00000002", lltmr.select, ctx)
    assert (first, second) == ("broker1:8080", "broker2:8080")
    assert lltmr.broker_score("broker1:8080", ctx) == pytest.approx(120)


def test_no_preallocation_within_a_shedding_cycle():
    """OverloadShedder unloads both 20 msg/s bundles of an overloaded source in one cycle. Pulsar's
    doLoadShedding picks each destination with selectBroker, which does not preallocate (only
    selectBrokerForAssignment, on the lookup, does): both unloads name broker1, the least loaded
    when the cycle started, although the first one would lift it to 120 msg/s."""
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
    assert [u.destination for u in plan.unloads] == ["broker1:8080", "broker1:8080"]


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
    assert ctx.preallocated == {}  # selectBroker (the shedding path) preallocates nothing
    assert select_broker_for_assignment("t/c/0x00000000_0x00000001", lltmr.select, ctx) == "free:8080"
    assert ctx.preallocated == {"free:8080": ["t/c/0x00000000_0x00000001"]}  # the lookup path does
