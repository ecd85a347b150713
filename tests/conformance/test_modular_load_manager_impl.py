"""Pulsar's ModularLoadManagerImplTest (the cases about shedding, placement and split that a snapshot
can express) and ModularLoadManagerImplStrategyTest (which placement goes with which shedder).

Not mirrored from ModularLoadManagerImplTest: the broker-side report rules (testNeedBrokerDataUpdate
and friends: the operator reads reports, it does not write them), leader election, metrics, the
metadata-store paths, and the isolation / anti-affinity cases (no such policies in a snapshot).
"""

import random

from pulsar_lb_operator.strategies import StrategyState, plan_cycle
from pulsar_lb_operator.strategies.loaddata import BundleData, MessageAverage, build_load_data
from pulsar_lb_operator.strategies.placement import least_long_term_message_rate as lltmr
from pulsar_lb_operator.strategies.placement.common import PlacementContext
from pulsar_lb_operator.strategies.planner import select_broker_for_assignment
from tests.builders import broker_report, cfg, snapshot, stats

T0 = 1_750_000_000_000


def _primary_secondary(cpu: float, taken_at: int):
    bundles = {"1/1/1/0x00000000_0xffffffff": stats(rate_in=100), "2/2/2/0x00000000_0xffffffff": stats(rate_in=200)}
    return snapshot(
        {
            "primary:8080": broker_report(cpu=(cpu, 100), bundles=bundles, last_update=taken_at),
            "secondary:8080": broker_report(cpu=(0, 100), last_update=taken_at),
        },
        taken_at=taken_at,
    )


def test_load_shedding():
    """ModularLoadManagerImplTest.testLoadShedding (OverloadShedder): cpu 80% → no unload; 90% → one
    bundle to the secondary; again → the other bundle to the secondary; again → nothing (both in the
    grace period); once the grace period is over → an unload again. Both bundles have zero throughput,
    so which goes first is a tie (Pulsar's HashMap order)."""
    config = cfg()
    rng = random.Random(1)
    plan, state = plan_cycle(
        _primary_secondary(80, T0), config, StrategyState(), rng, "OverloadShedder", "LeastLongTermMessageRate"
    )
    assert plan.unloads == ()
    plan, state = plan_cycle(
        _primary_secondary(90, T0), config, state, rng, "OverloadShedder", "LeastLongTermMessageRate"
    )
    assert len(plan.unloads) == 1 and plan.unloads[0].destination == "secondary:8080"
    first = plan.unloads[0].bundle
    plan, state = plan_cycle(
        _primary_secondary(90, T0 + 60_000), config, state, rng, "OverloadShedder", "LeastLongTermMessageRate"
    )
    both = {"1/1/1/0x00000000_0xffffffff", "2/2/2/0x00000000_0xffffffff"}
    assert [u.bundle for u in plan.unloads] == sorted(both - {first})
    assert plan.unloads[0].destination == "secondary:8080"
    plan, state = plan_cycle(
        _primary_secondary(90, T0 + 120_000), config, state, rng, "OverloadShedder", "LeastLongTermMessageRate"
    )
    assert plan.unloads == ()
    plan, state = plan_cycle(
        _primary_secondary(90, T0 + 31 * 60_000), config, state, rng, "OverloadShedder", "LeastLongTermMessageRate"
    )
    assert len(plan.unloads) == 1


def test_load_shedding_no_unload_to_the_owner():
    """ModularLoadManagerImplTest.testLoadShedding, last step: when the chosen destination is the current
    owner, doLoadShedding does not unload. Here every broker is overloaded, so LeastLongTermMessageRate's
    random pick among them may be the owner: such an unload never appears in a plan."""
    bundles = {"t/ns/0x00000000_0x00000001": stats(rate_in=100), "t/ns/0x00000001_0x00000002": stats(rate_in=200)}
    snap = snapshot(
        {"primary:8080": broker_report(cpu=(90, 100), bundles=bundles), "other:8080": broker_report(cpu=(95, 100))}
    )
    skipped = 0
    for seed in range(20):
        plan, _ = plan_cycle(
            snap, cfg(), StrategyState(), random.Random(seed), "OverloadShedder", "LeastLongTermMessageRate"
        )
        assert all(u.destination == "other:8080" for u in plan.unloads)
        skipped += sum("no broker other than its owner primary:8080" in n for n in plan.notes)
    assert skipped > 0


def test_max_topic_distribution_to_broker():
    """ModularLoadManagerImplTest.testMaxTopicDistributionToBroker: once a bundle with more than
    loadBalancerBrokerMaxTopics topics is assigned (preallocated, not yet reported) to a broker, none
    of the next 49 bundles of the namespace goes there (selectBrokerForAssignment)."""
    snap = snapshot(
        {f"b{i}:8080": broker_report(bundles={f"t/own{i}/0x00000000_0x00000001": stats(rate_in=10)}) for i in range(3)}
    )
    config = cfg()
    load, _, _ = build_load_data(snap, {}, {}, config.grace_period_ms)
    big = "test/test/test/0x00000000_0x00000001"
    data = dict(load.bundle_data)
    data[big] = BundleData(MessageAverage(10, 1, 1000, 0, 0, 0), MessageAverage(1000, 1, 1000, 0, 0, 0), topics=50010)
    ctx = PlacementContext(type(load)(load.snapshot, data, load.recently_unloaded), config, random.Random(0))
    first = select_broker_for_assignment(big, lltmr.select, ctx)
    others = {
        select_broker_for_assignment(f"test/test/test/0x{i:08x}_0x{i + 1:08x}", lltmr.select, ctx) for i in range(1, 50)
    }
    assert first is not None and first not in others


def _placement_of(shedding: str | None, placement: str | None) -> str:
    snap = snapshot({"a:8080": broker_report(), "b:8080": broker_report()})
    plan, _ = plan_cycle(snap, cfg(), StrategyState(), random.Random(0), shedding, placement)
    return plan.placement


def test_defaults_pair_avg_shedder_for_shedding_and_placement():
    """ModularLoadManagerImplStrategyTest.testDefaultsPairAvgShedderForSheddingAndPlacement."""
    config = cfg()
    assert config.loadBalancerLoadSheddingStrategy == "AvgShedder"
    assert config.loadBalancerLoadPlacementStrategy == "AvgShedder"
    assert config.maxUnloadPercentage == 0.5
    assert config.loadBalancerDistributeBundlesEvenlyEnabled is False
    snap = snapshot({"a:8080": broker_report(), "b:8080": broker_report()})
    plan, _ = plan_cycle(snap, config, StrategyState(), random.Random(0))
    assert (plan.shedding, plan.placement) == ("AvgShedder", "AvgShedder")


def test_explicit_classic_shedder_falls_back_to_least_long_term_message_rate_placement():
    """ModularLoadManagerImplStrategyTest.testExplicitClassicShedderFallsBackToLeastLongTermMessageRatePlacement:
    ThresholdShedder with the placement key left at its default (AvgShedder) → LeastLongTermMessageRate;
    the same when AvgShedder placement is given explicitly (Pulsar cannot tell the two apart)."""
    assert _placement_of("ThresholdShedder", None) == "LeastLongTermMessageRate"
    assert _placement_of("ThresholdShedder", "AvgShedder") == "LeastLongTermMessageRate"


def test_explicit_placement_is_kept_with_classic_shedder():
    """ModularLoadManagerImplStrategyTest.testExplicitPlacementIsKeptWithClassicShedder."""
    assert _placement_of("ThresholdShedder", "LeastResourceUsageWithWeight") == "LeastResourceUsageWithWeight"


def test_avg_shedder_shedding_with_other_placement_is_not_paired():
    """ModularLoadManagerImplStrategyTest.testAvgShedderSheddingWithOtherPlacementIsNotPaired."""
    assert _placement_of("AvgShedder", "LeastResourceUsageWithWeight") == "LeastResourceUsageWithWeight"
