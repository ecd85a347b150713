"""ThresholdShedder: the concept page's 40/10/10 example, PIP-364's 90/10 over-unloading sequence,
and Pulsar's ThresholdShedderTest (§8.2)."""

import pytest

from strategies import StrategyState
from tests.builders import MIB, broker_report, cfg, run_shedder, snapshot, stats


def ten_bundles(prefix: str = "t/ns") -> dict:
    # bundle-i: short-term throughput i MiB in and i MiB out
    return {f"{prefix}/0x{i:08x}_0x{i + 1:08x}": stats(thr_in=i * MIB, thr_out=i * MIB) for i in range(1, 11)}


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


def test_no_brokers_and_single_broker():
    assert run_shedder("ThresholdShedder", snapshot({})).unloads == ()
    lonely = snapshot({"broker-1:8080": broker_report(bw_in=(999, 1000), bw_out=(999, 1000))})
    assert run_shedder("ThresholdShedder", lonely).unloads == ()


def test_broker_reach_threshold(shed):
    snap = snapshot(
        {
            "broker-2:8080": broker_report(
                cpu=(140, 100),
                memory=(10, 100),
                direct_memory=(10, 100),
                bw_in=(500, 1000),
                bw_out=(500, 1000),
                # bundle data exists only for bundle-2: bundle-1 is owned but absent from lastStats
                bundles={"t/ns/0x00000002_0x00000003": stats(thr_in=1000, thr_out=1000)},
                extra_bundles=["t/ns/0x00000001_0x00000002"],
                thr_in=1.7976931348623157e308 / 4,
                thr_out=0,
            ),
            "broker-3:8080": broker_report(
                cpu=(10, 100),
                memory=(10, 100),
                direct_memory=(10, 100),
                bw_in=(500, 1000),
                bw_out=(500, 1000),
                extra_bundles=["t/ns/0x00000003_0x00000004", "t/ns/0x00000004_0x00000005"],
            ),
        }
    )
    result = shed("ThresholdShedder", snap)
    assert [u.bundle for u in result.unloads] == ["t/ns/0x00000002_0x00000003"]


def test_broker_with_multiple_bundles_sheds_largest_first(shed):
    snap = snapshot(
        {
            "broker-1:8080": broker_report(
                bw_in=(999, 1000), bw_out=(999, 1000), bundles=ten_bundles(), thr_in=55 * MIB, thr_out=55 * MIB
            ),
            "broker2:8080": broker_report(bundles=ten_bundles("t/other")),
        }
    )
    result = shed("ThresholdShedder", snap)
    # avg 0.4995, offload 0.4495 × 110 MiB = 49.4 MiB: 20 + 18 + 16 MiB
    assert [u.bundle for u in result.unloads] == [
        "t/ns/0x0000000a_0x0000000b",
        "t/ns/0x00000009_0x0000000a",
        "t/ns/0x00000008_0x00000009",
    ]


def test_filters_recently_unloaded_bundles(shed):
    snap = snapshot(
        {
            "broker-1:8080": broker_report(
                bw_in=(999, 1000), bw_out=(999, 1000), bundles=ten_bundles(), thr_in=55 * MIB, thr_out=55 * MIB
            ),
            "broker2:8080": broker_report(bundles=ten_bundles("t/other")),
        }
    )
    recent = StrategyState().evolve(
        recently_unloaded={"t/ns/0x0000000a_0x0000000b": snap.taken_at, "t/ns/0x00000009_0x0000000a": snap.taken_at}
    )
    result = shed("ThresholdShedder", snap, state=recent)
    assert [u.bundle for u in result.unloads] == [
        "t/ns/0x00000008_0x00000009",
        "t/ns/0x00000007_0x00000008",
        "t/ns/0x00000006_0x00000007",
        "t/ns/0x00000005_0x00000006",
    ]


def _lower_boundary_cluster(all_loaded: bool = False):
    brokers = {}
    for i in range(11):
        idle = i == 10 and not all_loaded
        thr = 0 if idle else 100 * MIB
        bundles = {f"t/broker-{i}/0x{j:08x}_0x{j + 1:08x}": stats(thr_in=thr, thr_out=thr) for j in range(10)}
        load = 0 if idle else 80
        brokers[f"broker-{i}:8080"] = broker_report(
            bw_in=(load, 100), bw_out=(load, 100), bundles=bundles, thr_in=thr, thr_out=thr
        )
    return snapshot(brokers)


def test_lower_boundary_shedding_only_when_enabled():
    snap = _lower_boundary_cluster()
    assert run_shedder("ThresholdShedder", snap).unloads == ()
    result = run_shedder("ThresholdShedder", snap, cfg(lowerBoundarySheddingEnabled=True))
    # offload 200 MiB × 0.1 × 0.5 = 10 MiB is not below the 10 MiB minimum: one bundle goes
    assert len(result.unloads) == 1 and result.unloads[0].source == "broker-0:8080"


def test_lower_boundary_needs_a_broker_below_average(shed):
    snap = _lower_boundary_cluster(all_loaded=True)
    assert shed("ThresholdShedder", snap, cfg(lowerBoundarySheddingEnabled=True)).unloads == ()


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


def test_broker_not_reaching_threshold_or_with_a_single_bundle():
    calm = snapshot(
        {
            "broker-1:8080": broker_report(
                bw_in=(500, 1000),
                bw_out=(500, 1000),
                bundles={"t/ns/0x00000000_0x00000001": stats(thr_in=1000, thr_out=1000)},
            )
        }
    )
    assert run_shedder("ThresholdShedder", calm).unloads == ()
    single = snapshot(
        {
            "broker-1:8080": broker_report(
                bw_in=(999, 1000), bw_out=(999, 1000), bundles={"t/ns/0x00000000_0x00000001": stats(thr_in=MIB)}
            )
        }
    )
    assert run_shedder("ThresholdShedder", single).unloads == ()


def test_lower_boundary_picks_the_only_broker_with_more_than_one_bundle(shed):
    brokers = {}
    for i in range(11):
        load = 0 if i == 5 else 80
        thr = 0 if i == 5 else 100 * MIB
        count = 10 if i == 3 else 1
        bundles = {f"t/b{i}/0x{j:08x}_0x{j + 1:08x}": stats(thr_in=thr, thr_out=thr) for j in range(count)}
        brokers[f"broker-{i}:8080"] = broker_report(
            bw_in=(load, 100), bw_out=(load, 100), bundles=bundles, thr_in=thr, thr_out=thr
        )
    snap = snapshot(brokers)
    assert shed("ThresholdShedder", snap).unloads == ()
    result = shed("ThresholdShedder", snap, cfg(lowerBoundarySheddingEnabled=True))
    assert [u.source for u in result.unloads] == ["broker-3:8080"]
