"""Pulsar's ThresholdShedderTest (impl): same inputs, same bundles unloaded, through the shedder and
(the ``shed`` fixture) through ``operator rebalance --snapshot``.

Not mirrored: testPrintResourceUsage (LocalBrokerData's log formatting, no decision). Where the Java test
has a single broker, an idle second broker is added when the planner path needs a destination
(ModularLoadManagerImpl.doLoadShedding does nothing with one broker); it does not change the decision.
"""

from pulsar_lb_operator.strategies import StrategyState
from tests.builders import MIB, broker_report, cfg, snapshot, stats

OVERLOADED = {"bw_in": (999, 1000), "bw_out": (999, 1000)}


def ten_bundles(prefix: str = "t/ns") -> dict:
    # bundle-i: short-term throughput i MiB/s in and i MiB/s out
    return {f"{prefix}/0x{i:08x}_0x{i + 1:08x}": stats(thr_in=i * MIB, thr_out=i * MIB) for i in range(1, 11)}


def test_no_brokers(shed):
    """ThresholdShedderTest.testNoBrokers."""
    assert shed("ThresholdShedder", snapshot({})).unloads == ()


def test_brokers_with_no_bundles(shed):
    """ThresholdShedderTest.testBrokersWithNoBundles: 99.9% but no bundles → nothing."""
    assert shed("ThresholdShedder", snapshot({"broker-1:8080": broker_report(**OVERLOADED)})).unloads == ()


def test_broker_not_reach_threshold(shed):
    """ThresholdShedderTest.testBrokerNotReachThreshold: one broker at 50% is the average → nothing."""
    calm = broker_report(
        bw_in=(500, 1000), bw_out=(500, 1000), bundles={"t/ns/0x00000000_0x00000001": stats(thr_in=1000, thr_out=1000)}
    )
    assert shed("ThresholdShedder", snapshot({"broker-1:8080": calm})).unloads == ()


def test_broker_reach_threshold(shed):
    """ThresholdShedderTest.testBrokerReachThreshold: broker-2 at cpu 140% (broker-3 at 50%) with
    msgThroughputIn Double.MAX_VALUE (here the largest a snapshot accepts) → something is unloaded; only
    bundle-2 has bundle data."""
    snap = snapshot(
        {
            "broker-2:8080": broker_report(
                cpu=(140, 100),
                memory=(10, 100),
                direct_memory=(10, 100),
                bw_in=(500, 1000),
                bw_out=(500, 1000),
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
    assert [u.bundle for u in shed("ThresholdShedder", snap).unloads] == ["t/ns/0x00000002_0x00000003"]


def test_broker_with_single_bundle(shed):
    """ThresholdShedderTest.testBrokerWithSingleBundle: one broker, one bundle → nothing."""
    single = broker_report(**OVERLOADED, bundles={"t/ns/0x00000000_0x00000001": stats(thr_in=1000, thr_out=1000)})
    assert shed("ThresholdShedder", snapshot({"broker-1:8080": single})).unloads == ()


def test_broker_with_multiple_bundles(shed):
    """ThresholdShedderTest.testBrokerWithMultipleBundles: average 49.95%, broker-1 at 99.9% sheds
    44.95% (+5%) of 110 MiB/s = 49.4 MiB/s → bundle-10, bundle-9, bundle-8."""
    snap = snapshot(
        {
            "broker-1:8080": broker_report(**OVERLOADED, bundles=ten_bundles(), thr_in=55 * MIB, thr_out=55 * MIB),
            "broker2:8080": broker_report(bundles=ten_bundles("t/other")),
        }
    )
    assert [u.bundle for u in shed("ThresholdShedder", snap).unloads] == [
        "t/ns/0x0000000a_0x0000000b",
        "t/ns/0x00000009_0x0000000a",
        "t/ns/0x00000008_0x00000009",
    ]


def test_filter_recently_unloaded(shed):
    """ThresholdShedderTest.testFilterRecentlyUnloaded: bundle-10 and bundle-9 in their grace period →
    bundle-8, 7, 6, 5."""
    snap = snapshot(
        {
            "broker-1:8080": broker_report(**OVERLOADED, bundles=ten_bundles(), thr_in=55 * MIB, thr_out=55 * MIB),
            "broker2:8080": broker_report(bundles=ten_bundles("t/other")),
        }
    )
    recent = StrategyState().evolve(
        recently_unloaded={"t/ns/0x0000000a_0x0000000b": snap.taken_at, "t/ns/0x00000009_0x0000000a": snap.taken_at}
    )
    assert [u.bundle for u in shed("ThresholdShedder", snap, state=recent).unloads] == [
        "t/ns/0x00000008_0x00000009",
        "t/ns/0x00000007_0x00000008",
        "t/ns/0x00000006_0x00000007",
        "t/ns/0x00000005_0x00000006",
    ]


def _eleven_brokers(idle: int | None, many: int | None = None, bundles_each: int = 10, load: float = 80):
    brokers = {}
    for i in range(11):
        is_idle = i == idle
        thr = 0 if is_idle else 100 * MIB
        count = bundles_each if many is None or i == many else 1
        bundles = {f"t/broker-{i}/0x{j:08x}_0x{j + 1:08x}": stats(thr_in=thr, thr_out=thr) for j in range(count)}
        level = 0 if is_idle else load
        brokers[f"broker-{i}:8080"] = broker_report(
            bw_in=(level, 100), bw_out=(level, 100), bundles=bundles, thr_in=thr, thr_out=thr
        )
    return snapshot(brokers)


def test_lower_boundary_shedding(shed):
    """ThresholdShedderTest.testLowerBoundaryShedding: ten brokers at 80%, one at 0% (average 72.7%, so
    nobody is above 82.7%) → nothing; with lowerBoundarySheddingEnabled → something is unloaded."""
    snap = _eleven_brokers(idle=10)
    assert shed("ThresholdShedder", snap).unloads == ()
    assert shed("ThresholdShedder", snap, cfg(lowerBoundarySheddingEnabled=True)).unloads


def test_lower_boundary_shedding_no_broker_to_offload(shed):
    """ThresholdShedderTest.testLowerBoundarySheddingNoBrokerToOffload: all eleven at 80% → nothing,
    with or without lower-boundary shedding."""
    snap = _eleven_brokers(idle=None)
    assert shed("ThresholdShedder", snap).unloads == ()
    assert shed("ThresholdShedder", snap, cfg(lowerBoundarySheddingEnabled=True)).unloads == ()


def test_lower_boundary_shedding_broker_with_one_bundle(shed):
    """ThresholdShedderTest.testLowerBoundarySheddingBrokerWithOneBundle: broker-5 idle, only broker-3
    has more than one bundle → nothing; with lower-boundary shedding → broker-3 sheds."""
    snap = _eleven_brokers(idle=5, many=3)
    assert shed("ThresholdShedder", snap).unloads == ()
    result = shed("ThresholdShedder", snap, cfg(lowerBoundarySheddingEnabled=True))
    assert result.unloads and {u.source for u in result.unloads} == {"broker-3:8080"}
