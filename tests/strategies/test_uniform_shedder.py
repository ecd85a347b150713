"""UniformLoadShedder beyond Pulsar's own tests (those are in tests/conformance/test_uniform_load_shedder.py)."""

from pulsar_lb_operator.strategies.shedding.uniform import java_int
from tests.builders import MIB, broker_report, cfg, run_shedder, snapshot, stats


def test_zero_traffic_bundles_are_candidates_as_on_master(shed):
    """Pulsar 3.x filtered bundles without traffic out and added a slack of 1000 to the amount
    (testFilterOutNonTrafficBundlesForUnloading); master does neither. Need 45 000 msg/s (or 45 MiB/s):
    60k does not fit, 20k + 20k do (5 000 left), and then both idle bundles (0 ≤ 5 000) go too."""
    rates = [60000, 20000, 20000, 0, 0]
    b1 = {f"t/b1/0x{j:08x}_0x{j + 1:08x}": stats(rate_in=r, thr_in=r / 1000 * MIB) for j, r in enumerate(rates)}
    snap = snapshot(
        {
            "broker0:8080": broker_report(
                bundles={"t/b0/0x00000000_0x00000001": stats(rate_in=10000, thr_in=10 * MIB)}
            ),
            "broker1:8080": broker_report(bundles=b1),
        }
    )
    for rate_t, thr_t in ((50, 0), (0, 2)):
        result = shed(
            "UniformLoadShedder",
            snap,
            cfg(
                maxUnloadBundleNumPerShedding=5,
                maxUnloadPercentage=0.5,
                loadBalancerMsgRateDifferenceShedderThreshold=rate_t,
                loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold=thr_t,
            ),
        )
        assert sorted(u.bundle for u in result.unloads) == [
            "t/b1/0x00000001_0x00000002",
            "t/b1/0x00000002_0x00000003",
            "t/b1/0x00000003_0x00000004",
            "t/b1/0x00000004_0x00000005",
        ]


def test_amount_is_truncated_like_a_java_int():
    """The amount is a MutableInt: (int) ((603 − 1.0) × 0.5) = 301, and each bundle subtracts its value
    truncated (MutableInt.add(-100.9) adds -100): 301 → 201 → 101, so a third 100.9 msg/s bundle
    still fits (101 ≥ 100.9); with exact arithmetic only two would (301 − 2 × 100.9 = 99.2)."""
    bundles = {f"t/ns/0x{i:08x}_0x{i + 1:08x}": stats(rate_in=100.9) for i in range(5)}
    bundles["t/ns/0x000000f0_0x000000f1"] = stats(rate_in=98.5)
    snap = snapshot({"a:8080": broker_report(bundles=bundles, rate_in=603), "b:8080": broker_report()})
    result = run_shedder("UniformLoadShedder", snap, cfg(minUnloadMessage=0, maxUnloadPercentage=0.5))
    assert len(result.unloads) == 3
    assert "move 301 msg/s" in result.unloads[0].reason


def test_heterogeneous_10_50_70_moves_load_onto_the_busy_machine(shed):
    """PIP-364: by msg rate the 70% broker (another process, no traffic) looks idle and receives load."""
    traffic = {f"t/ns/0x{i:08x}_0x{i + 1:08x}": stats(rate_in=2000) for i in range(5)}
    snap = snapshot(
        {
            "broker1:8080": broker_report(cpu=(10, 100), bundles={"t/ns/0x000000f0_0x000000f1": stats(rate_in=8000)}),
            "broker2:8080": broker_report(cpu=(50, 100), bundles=traffic),
            "broker3:8080": broker_report(cpu=(70, 100)),
        }
    )
    result = shed("UniformLoadShedder", snap)
    assert result.unloads and {u.source for u in result.unloads} == {"broker2:8080"}


def test_java_int_cast():
    """(int) of a double: truncated toward zero, saturated at the int range, NaN → 0."""
    assert java_int(249.9) == 249
    assert java_int(-0.5) == 0
    assert java_int(1e12) == 2**31 - 1
    assert java_int(-1e12) == -(2**31)
    assert java_int(float("nan")) == 0
