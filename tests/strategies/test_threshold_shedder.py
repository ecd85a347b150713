"""ThresholdShedder: the concept page's 40/10/10 example and PIP-364's 90/10 over-unloading sequence
(Pulsar's ThresholdShedderTest is in tests/conformance/)."""

import pytest

from tests.builders import MIB, broker_report, cfg, snapshot, stats


def test_concept_page_40_10_10_only_broker1_is_shed(shed):
    many = {f"t/ns/0x{i:08x}_0x{i + 1:08x}": stats(thr_in=20 * MIB, thr_out=20 * MIB) for i in range(5)}
    snap = snapshot(
        {
            "broker1:8080": broker_report(cpu=(40, 100), bundles=many),
            "broker2:8080": broker_report(cpu=(10, 100), bundles={"t/ns/0x000000f0_0x000000f1": stats(thr_in=MIB)}),
            "broker3:8080": broker_report(cpu=(10, 100), bundles={"t/ns/0x000000f2_0x000000f3": stats(thr_in=MIB)}),
        }
    )
    result = shed("ThresholdShedder", snap)
    # average 20%, threshold 10%: 40% > 30% → only broker1 sheds
    assert result.unloads and {u.source for u in result.unloads} == {"broker1:8080"}
    assert "average 20.0%" in result.unloads[0].reason


def test_pip364_90_10_history_overestimates_and_keeps_unloading(shed):
    """Scores 90/10, then real load 50/50 reads 86/14 and still sheds; then 78.8/21.2."""

    def cluster(cpu1: float, cpu2: float):
        b1 = {f"t/a/0x{i:08x}_0x{i + 1:08x}": stats(100, 0, 10 * MIB, 10 * MIB) for i in range(10)}
        b2 = {f"t/b/0x{i:08x}_0x{i + 1:08x}": stats(50, 0, 10 * MIB, 10 * MIB) for i in range(10)}
        return snapshot(
            {
                "broker1:8080": broker_report(cpu=(cpu1, 100), bundles=b1),
                "broker2:8080": broker_report(cpu=(cpu2, 100), bundles=b2),
            }
        )

    # The PIP's example is idealised: no overload threshold is in play (broker2 reaches 86% in step 3,
    # which would otherwise make LeastLongTermMessageRate refuse it as a destination).
    config = cfg(loadBalancerBrokerOverloadedThresholdPercentage=95)
    first = shed("ThresholdShedder", cluster(90, 10), config)
    assert first.unloads and first.state.threshold_ema == {"broker1:8080": 0.9, "broker2:8080": 0.1}
    # Balanced for real now (50/50), but the history says 86/14: broker1 is shed again.
    second = shed("ThresholdShedder", cluster(50, 50), config, first.state)
    assert second.state.threshold_ema["broker1:8080"] == pytest.approx(0.86)
    assert second.state.threshold_ema["broker2:8080"] == pytest.approx(0.14)
    assert second.unloads and {u.source for u in second.unloads} == {"broker1:8080"}
    # The over-unloading flips the real load to 14/86, and broker1 still scores higher.
    third = shed("ThresholdShedder", cluster(14, 86), config, second.state)
    assert third.state.threshold_ema["broker1:8080"] == pytest.approx(0.788)
    assert third.state.threshold_ema["broker2:8080"] == pytest.approx(0.212)
    assert {u.source for u in third.unloads} == {"broker1:8080"}


def test_heterogeneous_10_50_70_is_stuck(shed):
    """PIP-364: broker3's 70% is another process; avg 43.3 + 10 > 50, so broker2 is never shed."""
    traffic = {f"t/ns/0x{i:08x}_0x{i + 1:08x}": stats(thr_in=20 * MIB, thr_out=20 * MIB) for i in range(5)}
    snap = snapshot(
        {
            "broker1:8080": broker_report(cpu=(10, 100), bundles={"t/ns/0x000000f0_0x000000f1": stats(thr_in=MIB)}),
            "broker2:8080": broker_report(cpu=(50, 100), bundles=traffic),
            "broker3:8080": broker_report(cpu=(70, 100)),
        }
    )
    assert shed("ThresholdShedder", snap).unloads == ()
