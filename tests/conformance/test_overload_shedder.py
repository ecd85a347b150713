"""Pulsar's OverloadShedderTest (impl): same inputs, same bundles unloaded, through the shedder and
(the ``shed`` fixture) through ``operator rebalance --snapshot``.

Not mirrored: testPrintResourceUsage (LocalBrokerData's log formatting, no decision).
"""

from pulsar_lb_operator.strategies import StrategyState
from tests.builders import MIB, broker_report, cfg, snapshot, stats

OVERLOADED = {"bw_in": (999, 1000), "bw_out": (999, 1000)}


def ten_bundles(prefix: str = "t/ns") -> dict:
    # bundle-i: short-term throughput i MiB/s in and i MiB/s out
    return {f"{prefix}/0x{i:08x}_0x{i + 1:08x}": stats(thr_in=i * MIB, thr_out=i * MIB) for i in range(1, 11)}


def test_no_brokers(shed):
    """OverloadShedderTest.testNoBrokers: no brokers → nothing."""
    assert shed("OverloadShedder", snapshot({})).unloads == ()


def test_brokers_with_no_bundles(shed):
    """OverloadShedderTest.testBrokersWithNoBundles: 99.9% bandwidth but no bundles → nothing."""
    assert shed("OverloadShedder", snapshot({"broker-1:8080": broker_report(**OVERLOADED)})).unloads == ()


def test_broker_not_overloaded(shed):
    """OverloadShedderTest.testBrokerNotOverloaded: 50% < 85% → nothing."""
    calm = broker_report(
        bw_in=(500, 1000), bw_out=(500, 1000), bundles={"t/ns/0x00000000_0x00000001": stats(thr_in=1000, thr_out=1000)}
    )
    assert shed("OverloadShedder", snapshot({"broker-1:8080": calm}), cfg()).unloads == ()


def test_broker_with_single_bundle(shed):
    """OverloadShedderTest.testBrokerWithSingleBundle: overloaded, but its only bundle stays."""
    single = broker_report(**OVERLOADED, bundles={"t/ns/0x00000000_0x00000001": stats(thr_in=1000, thr_out=1000)})
    assert shed("OverloadShedder", snapshot({"broker-1:8080": single})).unloads == ()


def test_broker_with_multiple_bundles(shed):
    """OverloadShedderTest.testBrokerWithMultipleBundles: 0.999 − 0.85 + 0.05 = 19.9% of 110 MiB/s
    = 21.9 MiB/s → bundle-10 (20 MiB/s) then bundle-9; another broker's bundles are never chosen."""
    snap = snapshot(
        {
            "broker-1:8080": broker_report(**OVERLOADED, bundles=ten_bundles(), thr_in=55 * MIB, thr_out=55 * MIB),
            "another-broker:8080": broker_report(bundles=ten_bundles("t/other")),
        }
    )
    assert [u.bundle for u in shed("OverloadShedder", snap).unloads] == [
        "t/ns/0x0000000a_0x0000000b",
        "t/ns/0x00000009_0x0000000a",
    ]


def test_filter_recently_unloaded(shed):
    """OverloadShedderTest.testFilterRecentlyUnloaded: bundle-10 and bundle-9 in their grace period →
    bundle-8 then bundle-7. (An idle second broker is added so that the planner, which like
    doLoadShedding does nothing with a single broker, has a destination; the shedder ignores it.)"""
    snap = snapshot(
        {
            "broker-1:8080": broker_report(**OVERLOADED, bundles=ten_bundles(), thr_in=55 * MIB, thr_out=55 * MIB),
            "idle:8080": broker_report(),
        }
    )
    state = StrategyState().evolve(
        recently_unloaded={"t/ns/0x0000000a_0x0000000b": snap.taken_at, "t/ns/0x00000009_0x0000000a": snap.taken_at}
    )
    assert [u.bundle for u in shed("OverloadShedder", snap, state=state).unloads] == [
        "t/ns/0x00000008_0x00000009",
        "t/ns/0x00000007_0x00000008",
    ]
