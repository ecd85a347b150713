"""Pulsar's UniformLoadShedderTest (impl), on master: same inputs, same bundles unloaded.

Broker names get a port (snapshots key brokers by host:port) and bundle names a namespace and range;
each scenario runs on the bare shedder and through ``operator rebalance --snapshot`` (the ``shed``
fixture).
"""

from tests.builders import MIB, broker_report, cfg, cli_shedder, run_shedder, snapshot, stats


def _bundle(prefix: str, i: int) -> str:
    return f"t/{prefix}/0x{i:08x}_0x{i + 1:08x}"


def test_max_unload_bundle_num_per_shedding(shed):
    """UniformLoadShedderTest.testMaxUnloadBundleNumPerShedding: 20 bundles of 1+1 MiB/s on broker-1,
    an empty broker2; maxUnloadBundleNumPerShedding 2 → 2 bundles."""
    bundles = {_bundle("ns", i): stats(thr_in=MIB, thr_out=MIB) for i in range(1, 21)}
    snap = snapshot({"broker-1:8080": broker_report(bundles=bundles), "broker2:8080": broker_report()})
    result = shed("UniformLoadShedder", snap, cfg(maxUnloadBundleNumPerShedding=2))
    assert len(result.unloads) == 2
    assert {u.source for u in result.unloads} == {"broker-1:8080"}


def test_broker_with_multiple_bundles(shed):
    """UniformLoadShedderTest.testBrokerWithMultipleBundles: bundle-i carries i+i MiB/s → something is unloaded."""
    bundles = {_bundle("ns", i): stats(thr_in=i * MIB, thr_out=i * MIB) for i in range(1, 11)}
    snap = snapshot({"broker-1:8080": broker_report(bundles=bundles), "broker2:8080": broker_report()})
    assert shed("UniformLoadShedder", snap).unloads


def _five_brokers():
    rates = [50000, 60000, 70000, 10000, 20000]
    thrs = [50, 60, 70, 80, 10]
    brokers = {}
    for i, (rate, thr) in enumerate(zip(rates, thrs)):
        bundles = {_bundle(f"b{i}", j): stats(rate_in=rate / 5, thr_in=thr * MIB / 5) for j in range(5)}
        brokers[f"broker{i}:8080"] = broker_report(bundles=bundles)
    return snapshot(brokers)


def _select_config(rate_threshold: float, throughput_multiplier: float):
    return cfg(
        maxUnloadBundleNumPerShedding=1,
        maxUnloadPercentage=0.5,
        loadBalancerMsgRateDifferenceShedderThreshold=rate_threshold,
        loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold=throughput_multiplier,
    )


def test_overload_broker_select(shed):
    """UniformLoadShedderTest.testOverloadBrokerSelect: rate only → broker2 (70k msg/s); throughput only
    → broker3 (80 MiB/s); both on → the rate path wins (broker2). One bundle each (cap 1)."""
    snap = _five_brokers()
    for rate_t, thr_t, source in ((50, 0, "broker2:8080"), (0, 2, "broker3:8080"), (50, 2, "broker2:8080")):
        result = run_shedder("UniformLoadShedder", snap, _select_config(rate_t, thr_t))
        assert len(result.unloads) == 1 and result.unloads[0].source == source
    for rate_t, thr_t in ((50, 0), (50, 2)):
        [unload] = shed("UniformLoadShedder", snap, _select_config(rate_t, thr_t)).unloads
        assert unload.source == "broker2:8080"


def test_overload_broker_select_throughput_path_through_the_planner(tmp_path):
    """The throughput case of testOverloadBrokerSelect, through ``operator rebalance``: the shedder picks
    broker3, but LeastLongTermMessageRate (the placement Pulsar pairs with UniformLoadShedder) ranks by
    msg rate and broker3 has the lowest, so the destination is the owner and doLoadShedding drops it."""
    result = cli_shedder(tmp_path, "UniformLoadShedder", _five_brokers(), _select_config(0, 2))
    assert result.unloads == ()
    assert any("no broker other than its owner broker3:8080" in n for n in result.notes)


def test_small_traffic_shedding(shed):
    """UniformLoadShedderTest.testSmallTrafficShedding: 5 bundles of 50+50 msg/s on broker-1, an idle
    broker-2, minUnloadMessage 0: the minimum counts as 1.0, (int) (499 × 0.5) = 249 → 100 + 100 fit,
    the third does not → 2 bundles. The same with 1024+1024 B/s bundles on the throughput path."""
    config = cfg(minUnloadMessage=0, minUnloadMessageThroughput=0, maxUnloadPercentage=0.5)
    by_rate = {_bundle("ns", i): stats(rate_in=50, rate_out=50) for i in range(1, 6)}
    snap = snapshot({"broker-1:8080": broker_report(bundles=by_rate), "broker-2:8080": broker_report()})
    assert len(shed("UniformLoadShedder", snap, config).unloads) == 2
    by_thr = {_bundle("ns", i): stats(thr_in=1024, thr_out=1024) for i in range(1, 6)}
    snap = snapshot({"broker-1:8080": broker_report(bundles=by_thr), "broker-2:8080": broker_report()})
    assert len(shed("UniformLoadShedder", snap, config).unloads) == 2
