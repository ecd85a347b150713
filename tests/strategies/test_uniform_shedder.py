"""UniformLoadShedder (§8.3)."""

from tests.builders import MIB, broker_report, cfg, cli_shedder, run_shedder, snapshot, stats


def test_max_unload_bundle_num_per_shedding(shed):
    bundles = {f"t/ns/0x{i:08x}_0x{i + 1:08x}": stats(thr_in=MIB, thr_out=MIB) for i in range(1, 21)}
    snap = snapshot({"broker-1:8080": broker_report(bundles=bundles), "broker2:8080": broker_report()})
    result = shed("UniformLoadShedder", snap, cfg(maxUnloadBundleNumPerShedding=2, maxUnloadPercentage=0.2))
    assert len(result.unloads) == 2


def test_broker_with_multiple_bundles(shed):
    bundles = {f"t/ns/0x{i:08x}_0x{i + 1:08x}": stats(thr_in=i * MIB, thr_out=i * MIB) for i in range(1, 11)}
    snap = snapshot({"broker-1:8080": broker_report(bundles=bundles), "broker2:8080": broker_report()})
    assert shed("UniformLoadShedder", snap).unloads


def _five_brokers():
    rates = [50000, 60000, 70000, 10000, 20000]
    thrs = [50, 60, 70, 80, 10]
    brokers = {}
    for i, (rate, thr) in enumerate(zip(rates, thrs)):
        bundles = {f"t/b{i}/0x{j:08x}_0x{j + 1:08x}": stats(rate_in=rate / 5, thr_in=thr * MIB / 5) for j in range(5)}
        brokers[f"broker{i}:8080"] = broker_report(bundles=bundles)
    return snapshot(brokers)


def test_overload_broker_select_by_rate_or_throughput():
    snap = _five_brokers()
    base = {"maxUnloadBundleNumPerShedding": 1, "maxUnloadPercentage": 0.5}
    by_rate = run_shedder(
        "UniformLoadShedder",
        snap,
        cfg(
            **base,
            loadBalancerMsgRateDifferenceShedderThreshold=50,
            loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold=0,
        ),
    )
    assert [u.source for u in by_rate.unloads] == ["broker2:8080"]
    by_thr = run_shedder(
        "UniformLoadShedder",
        snap,
        cfg(
            **base,
            loadBalancerMsgRateDifferenceShedderThreshold=0,
            loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold=2,
        ),
    )
    assert [u.source for u in by_thr.unloads] == ["broker3:8080"]
    both = run_shedder(
        "UniformLoadShedder",
        snap,
        cfg(
            **base,
            loadBalancerMsgRateDifferenceShedderThreshold=50,
            loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold=2,
        ),
    )
    assert [u.source for u in both.unloads] == ["broker2:8080"]  # the rate path wins


def test_filter_out_non_traffic_bundles(shed):
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
        # need 45 000 (or 45 MiB): 60k does not fit, 20k + 20k do, zero-traffic bundles are never picked
        assert sorted(u.bundle for u in result.unloads) == ["t/b1/0x00000001_0x00000002", "t/b1/0x00000002_0x00000003"]


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


def test_throughput_path_with_rate_based_placement_sends_the_bundle_home(tmp_path):
    """Uniform sheds broker3 for its throughput, but LeastLongTermMessageRate ranks by msg rate and
    broker3 has the lowest: the destination is the owner, so the modular manager drops the unload."""
    config = cfg(
        maxUnloadBundleNumPerShedding=1,
        maxUnloadPercentage=0.5,
        loadBalancerMsgRateDifferenceShedderThreshold=0,
        loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold=2,
    )
    result = cli_shedder(tmp_path, "UniformLoadShedder", _five_brokers(), config)
    assert result.unloads == ()
    assert any("no broker other than its owner broker3:8080" in n for n in result.notes)
