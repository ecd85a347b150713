"""Pulsar's AvgShedderTest (impl): same inputs, same bundles unloaded, and (where the Java test asks
``selectBroker``) the same destination, through the shedder and through ``operator rebalance``.

Bundles are 450+450 msg/s each; broker message rates are set as in the Java tests (their totals
differ from the sum of their bundles, as there).
"""

from pulsar_lb_operator.strategies import StrategyState
from tests.builders import broker_report, cfg, snapshot, stats


def eleven_bundles(prefix: str = "t/ns") -> dict:
    return {f"{prefix}/0x{i:08x}_0x{i + 1:08x}": stats(450, 450) for i in range(11)}


def test_hit_high_threshold(shed):
    """AvgShedderTest.testHitHighThreshold: 80/30/50, high threshold 40, 2 hits: nothing on the first
    cycle; on the second, (20000 − 2000) × 0.5 = 9000 msg/s = 10 bundles from broker1, all to broker2."""
    snap = snapshot(
        {
            "broker1:8080": broker_report(cpu=(80, 100), bundles=eleven_bundles(), rate_in=10000, rate_out=10000),
            "broker2:8080": broker_report(cpu=(30, 100), rate_in=1000, rate_out=1000),
            "broker3:8080": broker_report(cpu=(50, 100), rate_in=5000, rate_out=5000),
        }
    )
    config = cfg(
        maxUnloadPercentage=0.5, loadBalancerAvgShedderHighThreshold=40, loadBalancerAvgShedderHitCountHighThreshold=2
    )
    first = shed("AvgShedder", snap, config)
    assert first.unloads == ()
    second = shed("AvgShedder", snap, config, first.state)
    assert len(second.unloads) == 10
    assert {u.source for u in second.unloads} == {"broker1:8080"}
    assert {u.destination for u in second.unloads} == {"broker2:8080"}


def test_hit_low_threshold(shed):
    """AvgShedderTest.testHitLowThreshold: 60/40/50, low threshold 20, 6 hits: nothing for five cycles,
    then 10 bundles from broker1 to broker2."""
    snap = snapshot(
        {
            "broker1:8080": broker_report(cpu=(60, 100), bundles=eleven_bundles(), rate_in=10000, rate_out=10000),
            "broker2:8080": broker_report(cpu=(40, 100), rate_in=1000, rate_out=1000),
            "broker3:8080": broker_report(cpu=(50, 100), rate_in=5000, rate_out=5000),
        }
    )
    config = cfg(
        maxUnloadPercentage=0.5, loadBalancerAvgShedderLowThreshold=20, loadBalancerAvgShedderHitCountLowThreshold=6
    )
    state = StrategyState()
    for _ in range(5):
        result = shed("AvgShedder", snap, config, state)
        assert result.unloads == ()
        state = result.state
    sixth = shed("AvgShedder", snap, config, state)
    assert len(sixth.unloads) == 10
    assert {u.source for u in sixth.unloads} == {"broker1:8080"}
    assert {u.destination for u in sixth.unloads} == {"broker2:8080"}


def test_shedding_multiple_pairs(shed):
    """AvgShedderTest.testSheddingMultiplePairs: pairs (80, 30) and (75, 35): on the second cycle 20
    bundles, 10 from broker1 to broker2 and 10 from broker3 to broker4."""
    snap = snapshot(
        {
            "broker1:8080": broker_report(
                cpu=(80, 100), bundles=eleven_bundles("t/ns1"), rate_in=10000, rate_out=10000
            ),
            "broker2:8080": broker_report(cpu=(30, 100), rate_in=1000, rate_out=1000),
            "broker3:8080": broker_report(
                cpu=(75, 100), bundles=eleven_bundles("t/ns3"), rate_in=10000, rate_out=10000
            ),
            "broker4:8080": broker_report(cpu=(35, 100), rate_in=1000, rate_out=1000),
        }
    )
    config = cfg(
        maxUnloadPercentage=0.5, loadBalancerAvgShedderHighThreshold=40, loadBalancerAvgShedderHitCountHighThreshold=2
    )
    first = shed("AvgShedder", snap, config)
    assert first.unloads == ()
    second = shed("AvgShedder", snap, config, first.state)
    assert len(second.unloads) == 20
    routes = {(u.source, u.destination) for u in second.unloads}
    assert routes == {("broker1:8080", "broker2:8080"), ("broker3:8080", "broker4:8080")}
    assert sum(u.source == "broker1:8080" for u in second.unloads) == 10
