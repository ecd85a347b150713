"""AvgShedder: PIP-364's worked examples and the multiple-hit note (AvgShedderTest is in tests/conformance/)."""

import random

from pulsar_lb_operator.strategies import StrategyState, plan_cycle
from pulsar_lb_operator.strategies.shedding.avg import find_broker_pairs
from tests.builders import broker_report, cfg, snapshot, stats


def eleven_bundles(prefix: str) -> dict:
    # AvgShedderTest: each bundle's short-term rate in/out 450/450 (900 total).
    return {
        f"t/ns/0x{i:08x}_0x{i + 1:08x}" if prefix == "" else f"{prefix}/0x{i:08x}_0x{i + 1:08x}": stats(450, 450)
        for i in range(11)
    }


def test_pip364_pairs_first_with_last_and_middle_with_itself():
    scores = {"b20": 20, "b30": 30, "b52": 52, "b70": 70, "b80": 80}
    high, low = {}, {}
    pairs = find_broker_pairs(scores, cfg(loadBalancerAvgShedderHighThreshold=40), high, low)
    assert pairs == [("b20", "b80"), ("b30", "b70")]
    # 80-20=60 and 70-30=40 both reach the high threshold 40; the middle broker (52) is cleared.
    assert high == {"b20": 1, "b80": 1, "b30": 1, "b70": 1}
    assert "b52" not in low


def test_pip364_unload_amount_evens_out_msg_rate_1000_and_500_to_750(shed):
    high = {f"t/ns/0x{i:08x}_0x{i + 1:08x}": stats(125, 125) for i in range(4)}  # 1000 msg/s
    low = {"t/ns/0x000000f0_0x000000f1": stats(250, 250)}  # 500 msg/s
    snap = snapshot(
        {
            "hi:8080": broker_report(cpu=(80, 100), bundles=high),
            "lo:8080": broker_report(cpu=(20, 100), bundles=low),
        }
    )
    config = cfg(maxUnloadPercentage=0.5, minUnloadMessage=100, loadBalancerAvgShedderHitCountHighThreshold=1)
    result = shed("AvgShedder", snap, config)
    # (1000 - 500) × 0.5 = 250 msg/s moves from the highest to the lowest broker: 750 each after.
    assert len(result.unloads) == 1
    unload = result.unloads[0]
    assert (unload.source, unload.destination) == ("hi:8080", "lo:8080")
    moved = snap.brokers["hi:8080"].lastStats[unload.bundle].msg_rate
    assert 1000 - moved == 500 + moved == 750
    assert "move 250 msg/s" in unload.reason


def test_multiple_hit_note_80_80_20_triggers_on_third_cycle_even_when_partner_changes(shed):
    """The note's example: broker1 and broker2 (both ~80) take turns pairing with broker3 (20).

    Counters are per broker, so broker3 reaches 3 consecutive hits on the 3rd cycle although no
    single pair was hit 3 times in a row.
    """
    bundles1 = {f"t/a/0x{i:08x}_0x{i + 1:08x}": stats(500, 500) for i in range(6)}
    bundles2 = {f"t/b/0x{i:08x}_0x{i + 1:08x}": stats(500, 500) for i in range(6)}
    config = cfg(loadBalancerAvgShedderHitCountHighThreshold=3, loadBalancerAvgShedderHitCountLowThreshold=3)

    def cluster(cpu1: float, cpu2: float):
        return snapshot(
            {
                "broker1:8080": broker_report(cpu=(cpu1, 100), bundles=bundles1),
                "broker2:8080": broker_report(cpu=(cpu2, 100), bundles=bundles2),
                "broker3:8080": broker_report(cpu=(20, 100), bundles={"t/c/0x00000000_0x00000001": stats(100, 100)}),
            }
        )

    first = shed("AvgShedder", cluster(81, 80), config)  # pairs broker1 with broker3
    assert first.unloads == ()
    assert dict(first.state.avg_hits_low) == {"broker1:8080": 1, "broker3:8080": 1}
    second = shed("AvgShedder", cluster(80, 81), config, first.state)  # broker2 with broker3
    assert second.unloads == ()
    # broker1 sat in the middle (paired with itself): its entry is dropped, broker3's counts on.
    assert dict(second.state.avg_hits_low) == {"broker2:8080": 1, "broker3:8080": 2}
    third = shed("AvgShedder", cluster(80, 81), config, second.state)
    assert third.unloads, "broker3 reached 3 consecutive hits: the pair must act"
    assert {u.destination for u in third.unloads} == {"broker3:8080"}
    assert {u.source for u in third.unloads} == {"broker2:8080"}
    assert "broker3:8080" not in third.state.avg_hits_low  # a triggered pair's counters are reset


def test_counters_survive_a_state_round_trip(shed):
    snap = snapshot(
        {
            "broker1:8080": broker_report(cpu=(80, 100), bundles=eleven_bundles(""), rate_in=10000, rate_out=10000),
            "broker2:8080": broker_report(cpu=(30, 100), rate_in=1000, rate_out=1000),
        }
    )
    first = shed("AvgShedder", snap)
    restored = StrategyState.from_json(first.state.to_json())
    assert shed("AvgShedder", snap, state=restored).unloads  # 2nd consecutive high hit acts


def test_planner_binds_placement_to_the_shedder_plan():
    snap = snapshot(
        {
            "broker1:8080": broker_report(cpu=(80, 100), bundles=eleven_bundles(""), rate_in=10000, rate_out=10000),
            "broker2:8080": broker_report(cpu=(30, 100), rate_in=1000, rate_out=1000),
            "broker3:8080": broker_report(cpu=(50, 100), rate_in=5000, rate_out=5000),
        }
    )
    config = cfg(loadBalancerAvgShedderHitCountHighThreshold=1)
    plan, state = plan_cycle(snap, config, StrategyState(), random.Random(7), shedding="AvgShedder")
    assert plan.placement == "AvgShedder"
    assert len(plan.unloads) == 10 and {u.destination for u in plan.unloads} == {"broker2:8080"}
    assert set(state.recently_unloaded) == {u.bundle for u in plan.unloads}
    # The same snapshot again: every unloaded bundle is in its grace period, nothing is shed twice.
    again, _ = plan_cycle(snap, config, state, random.Random(7), shedding="AvgShedder")
    assert not set(u.bundle for u in again.unloads) & set(state.recently_unloaded)
