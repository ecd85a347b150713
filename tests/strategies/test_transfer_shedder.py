"""TransferShedder (§8.8): the extensible load manager's shedder."""

import pytest

from strategies import StrategyState
from strategies.shedding.transfer import compare_bundle_stats, top_bundles
from strategies.snapshots import BundleStats
from tests.builders import NOW, broker_report, cfg, run_shedder, snapshot, stats

NO_HIT_COUNT = {"loadBalancerSheddingConditionHitCountThreshold": 0}


BASE_TOPS = [
    (1_000_000, 2_000_000),
    (1_000_000, 3_000_000),
    (2_000_000, 4_000_000),
    (2_000_000, 6_000_000),
    (2_000_000, 7_000_000),
]


def base_cluster(loads=(2, 4, 6, 80, 90), tops=None, reported=None):
    """setupContext(): cpu loads and two top bundles per broker; the broker's throughput out is the
    sum of the ``reported`` tops (default: the tops themselves), its throughput in 1."""
    tops = tops or BASE_TOPS
    reported = reported or tops
    brokers = {}
    for i, (load, (a, b), (ra, rb)) in enumerate(zip(loads, tops, reported), 1):
        ns = f"my-tenant/my-namespace{'ABCDE'[i - 1]}"
        bundles = {f"{ns}/0x00000000_0x0FFFFFFF": stats(thr_out=a), f"{ns}/0x0FFFFFFF_0xFFFFFFFF": stats(thr_out=b)}
        brokers[f"broker{i}:8080"] = broker_report(
            cpu=(load, 100), bundles=bundles, thr_in=1, thr_out=ra + rb, rate_in=3, rate_out=4
        )
    return snapshot(brokers)


BASE = {
    ("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080"),
    ("broker4:8080", "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF", "broker2:8080"),
}


def decisions(result):
    return {(u.source, u.bundle, u.destination) for u in result.unloads}


def test_base_result_moves_the_smaller_top_bundle_of_the_two_highest_brokers(shed):
    result = shed("TransferShedder", base_cluster(), cfg(**NO_HIT_COUNT))
    assert decisions(result) == BASE
    assert "Overloaded" in result.unloads[0].reason
    assert "avg 0.364, std 0.398" in result.unloads[0].reason
    assert any("std after the plan 0.2438" in n for n in result.notes)


def test_recently_unloaded_bundles_are_skipped(shed):
    recent = {
        b: NOW
        for b in (
            "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF",
            "my-tenant/my-namespaceE/0x0FFFFFFF_0xFFFFFFFF",
            "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF",
            "my-tenant/my-namespaceD/0x0FFFFFFF_0xFFFFFFFF",
        )
    }
    result = shed(
        "TransferShedder", base_cluster(), cfg(**NO_HIT_COUNT), StrategyState().evolve(recently_unloaded=recent)
    )
    assert decisions(result) == {("broker3:8080", "my-tenant/my-namespaceC/0x00000000_0x0FFFFFFF", "broker1:8080")}


def test_recently_unloaded_broker_cools_down_until_it_reports_again(shed):
    state = StrategyState().evolve(transfer_recent_brokers={"broker1:8080": NOW - 1800 * 1001})
    assert decisions(shed("TransferShedder", base_cluster(), cfg(**NO_HIT_COUNT), state)) == BASE
    state = StrategyState().evolve(transfer_recent_brokers={"broker1:8080": NOW})
    result = shed("TransferShedder", base_cluster(), cfg(**NO_HIT_COUNT), state)
    assert result.unloads == () and "CoolDown" in result.notes[0]


def test_target_std_reached_means_no_action(shed):
    snap = base_cluster(loads=(10, 20, 30), tops=[(30, 30), (40, 40), (50, 50)])
    result = shed("TransferShedder", snap, cfg(**NO_HIT_COUNT))
    assert result.unloads == () and "HitCount" in result.notes[0]
    assert "avg 0.200, std 0.082" in result.notes[0]


def test_hit_count_threshold_waits_for_consecutive_cycles(shed):
    config = cfg(loadBalancerSheddingConditionHitCountThreshold=3)
    state = StrategyState()
    for expected in (1, 2, 3):
        result = shed("TransferShedder", base_cluster(), config, state)
        assert result.unloads == () and result.state.transfer_hit_count == expected
        state = result.state
    assert decisions(shed("TransferShedder", base_cluster(), config, state)) == BASE


FIVE_RANGES = (  # the bundle ranges of both namespaces in Pulsar's test
    "0x00000000_0x1FFFFFFF",
    "0x1FFFFFFF_0x2FFFFFFF",
    "0x2FFFFFFF_0x3FFFFFFF",
    "0x3FFFFFFF_0x4FFFFFFF",
    "0x4FFFFFFF_0x5FFFFFFF",
)


def test_swap_when_bundles_are_larger_than_the_target(shed):
    """testUnloadBundlesGreaterThanTargetThroughput: 3 bundles go down, 4 small ones come back."""
    a = {f"my-tenant/my-namespaceA/{r}": stats(thr_out=m * 1_000_000) for r, m in zip(FIVE_RANGES, [1, 2, 3, 4, 5])}
    b = {
        f"my-tenant/my-namespaceB/{r}": stats(thr_out=m * 1_000_000)
        for r, m in zip(FIVE_RANGES, [100, 180, 220, 250, 250])
    }
    snap = snapshot(
        {
            "broker1:8080": broker_report(cpu=(10, 100), bundles=a, thr_in=1),
            "broker2:8080": broker_report(cpu=(1000, 100), bundles=b, thr_in=1),
        }
    )
    result = shed("TransferShedder", snap, cfg(**NO_HIT_COUNT))
    down = sorted(u.bundle.rsplit("/", 1)[1] for u in result.unloads if u.source == "broker2:8080")
    up = sorted(u.bundle.rsplit("/", 1)[1] for u in result.unloads if u.source == "broker1:8080")
    assert down == ["0x00000000_0x1FFFFFFF", "0x1FFFFFFF_0x2FFFFFFF", "0x2FFFFFFF_0x3FFFFFFF"]
    assert up == ["0x00000000_0x1FFFFFFF", "0x1FFFFFFF_0x2FFFFFFF", "0x2FFFFFFF_0x3FFFFFFF", "0x3FFFFFFF_0x4FFFFFFF"]
    assert all(u.destination == "broker1:8080" for u in result.unloads if u.source == "broker2:8080")
    assert any("std after the plan 0.0500" in n for n in result.notes)


def test_single_top_bundle_per_broker_means_no_bundles(shed):
    brokers = {
        f"broker{i}:8080": broker_report(
            cpu=(load, 100), bundles={f"ns{i}/x/0x00000000_0x0FFFFFFF": stats(thr_out=load * 1000)}
        )
        for i, load in enumerate((1, 2, 6, 10, 70), 1)
    }
    result = shed("TransferShedder", snapshot(brokers), cfg(**NO_HIT_COUNT))
    assert result.unloads == ()
    assert any("sole bundle" in n for n in result.notes)


def test_outdated_reports_are_skipped(shed):
    snap = snapshot({f"broker{i}:8080": broker_report(cpu=(v, 100), last_update=0) for i, v in enumerate((5, 90))})
    result = shed("TransferShedder", snap, cfg(**NO_HIT_COUNT))
    assert result.unloads == () and "OutDatedData" in result.notes[0]


def test_transfer_disabled_leaves_destination_to_placement():
    result = run_shedder("TransferShedder", base_cluster(), cfg(loadBalancerTransferEnabled=False, **NO_HIT_COUNT))
    assert {u.bundle for u in result.unloads} == {b for _, b, _ in BASE}
    assert {u.destination for u in result.unloads} == {None}


def test_top_bundles_sorted_ascending_and_skip_system_and_idle():
    load = snapshot(
        {
            "b:8080": broker_report(
                bundles={
                    "t/ns/0x00000000_0x00000001": stats(thr_in=5e6),
                    "t/ns/0x00000001_0x00000002": stats(thr_in=1e6),
                    "t/ns/0x00000002_0x00000003": stats(),
                    "pulsar/b:8080/0x00000000_0xffffffff": stats(thr_in=9e6),
                }
            )
        }
    ).brokers["b:8080"]
    assert [n for n, _ in top_bundles(load, 10)] == ["t/ns/0x00000001_0x00000002", "t/ns/0x00000000_0x00000001"]
    assert compare_bundle_stats(BundleStats(msgThroughputIn=1e5), BundleStats()) == 0  # within the dead-band
    assert compare_bundle_stats(BundleStats(msgThroughputIn=2e5), BundleStats()) == 1


@pytest.mark.parametrize("loads", [(200, 1000)])
def test_load_above_100_percent(loads, shed):
    result = shed("TransferShedder", base_cluster(loads=(2, 4, 6, *loads)), cfg(**NO_HIT_COUNT))
    assert decisions(result) == BASE


def test_bundles_larger_than_the_offload_threshold_are_skipped_for_the_next_broker(shed):
    # #4: broker4's and broker5's top bundles are huge (1e9) but their loads are unchanged
    tops = [(1_000_000, 2_000_000), (1_000_000, 3_000_000), (2_000_000, 4_000_000), (1e9, 1e9), (1e9, 1e9)]
    snap = base_cluster(tops=tops, reported=BASE_TOPS)
    result = shed("TransferShedder", snap, cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker3:8080", "my-tenant/my-namespaceC/0x00000000_0x0FFFFFFF", "broker1:8080")}


def _two(load1, a, load2, b, **config):
    bundles_a = {
        f"my-tenant/my-namespaceA/{r}": stats(thr_out=t)
        for r, t in zip(
            [
                "0x00000000_0x0FFFFFFF",
                "0x0FFFFFFF_0xFFFFFFFF",
                "0x1FFFFFFF_0x2FFFFFFF",
                "0x2FFFFFFF_0x3FFFFFFF",
                "0x3FFFFFFF_0x4FFFFFFF",
            ],
            a,
        )
    }
    bundles_b = {
        f"my-tenant/my-namespaceB/{r}": stats(thr_out=t)
        for r, t in zip(["0x00000000_0x0FFFFFFF", "0x0FFFFFFF_0xFFFFFFFF"], b)
    }
    return snapshot(
        {
            "broker1:8080": broker_report(cpu=(load1, 100), bundles=bundles_a, thr_in=1),
            "broker2:8080": broker_report(cpu=(load2, 100), bundles=bundles_b, thr_in=1),
        }
    )


def test_skip_bundles_greater_than_target_after_split(shed):
    # #7: targetStd 0.20; both of broker2's bundles are larger than what should move: no decision
    result = shed(
        "TransferShedder",
        _two(50, [1, 500_000_000], 100, [500_000_000, 500_000_000]),
        cfg(loadBalancerBrokerLoadTargetStd=0.20, **NO_HIT_COUNT),
    )
    assert result.unloads == ()


def test_unload_bundle_less_than_target_after_split(shed):
    # #8: broker2 (load 10.0) with (490M, 510M): the 490M bundle moves to broker1
    result = shed("TransferShedder", _two(10, [1e6, 2e6, 3e6, 4e6, 5e6], 1000, [490e6, 510e6]), cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker2:8080", "my-tenant/my-namespaceB/0x00000000_0x0FFFFFFF", "broker1:8080")}
    assert any("std after the plan 0.0500" in n for n in result.notes)


def test_swap_a_bundle_back_when_the_one_to_move_is_too_large(shed):
    # #9: broker1 48 with (2.4M, 2.4M), broker2 100 with (5M, 5M): one bundle each way
    result = shed("TransferShedder", _two(48, [2.4e6, 2.4e6], 100, [5e6, 5e6]), cfg(**NO_HIT_COUNT))
    moves = sorted((u.source, u.destination) for u in result.unloads)
    assert moves == [("broker1:8080", "broker2:8080"), ("broker2:8080", "broker1:8080")]
    assert "avg 0.740, std 0.260" in result.unloads[0].reason


def test_min_broker_with_low_traffic_is_underloaded():
    # #10: broker2's msgThroughputEMA is forced to 10; broker4 55, broker5 65
    snap = base_cluster(loads=(2, 4, 6, 55, 65))
    from strategies.shedding.transfer import update_emas

    config = cfg(**NO_HIT_COUNT)
    load = __import__("strategies.loaddata", fromlist=["x"]).build_load_data(snap, {}, {}, 0)[0]
    emas = update_emas(load, config, StrategyState())
    emas["broker2:8080"] = type(emas["broker2:8080"])(
        emas["broker2:8080"].weighted_max_ema, 10, emas["broker2:8080"].updated_at
    )
    result = run_shedder("TransferShedder", snap, config, StrategyState().evolve(transfer_ema=emas))
    assert decisions(result) == {
        ("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080"),
        ("broker4:8080", "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF", "broker2:8080"),
    }
    reasons = {u.source: u.reason for u in result.unloads}
    assert "Overloaded" in reasons["broker5:8080"] and "Underloaded" in reasons["broker4:8080"]


def test_min_broker_with_lower_load_than_average(shed):
    result = shed("TransferShedder", base_cluster(loads=(2, 3, 6, 55, 65)), cfg(**NO_HIT_COUNT))
    reasons = {u.source: u.reason for u in result.unloads}
    assert decisions(result) == {
        ("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080"),
        ("broker4:8080", "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF", "broker2:8080"),
    }
    assert "Overloaded" in reasons["broker5:8080"] and "Underloaded" in reasons["broker4:8080"]
    assert "avg 0.262, std 0.278" in reasons["broker5:8080"]


def test_target_std_after_transfer(shed):
    result = shed("TransferShedder", base_cluster(loads=(2, 4, 6, 55, 65)), cfg(**NO_HIT_COUNT))
    assert ("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080") in decisions(result)


def hundred_brokers(load_of):
    """broker0..broker99, each with two bundles; ``load_of(i)`` gives (cpu %, (bundle 1, bundle 2 bytes/s out))."""
    brokers = {}
    for i in range(100):
        load, (a, b) = load_of(i)
        ns = f"my-tenant/my-namespace{i}"
        brokers[f"broker{i}:8080"] = broker_report(
            cpu=(load, 100),
            thr_in=1,
            bundles={f"{ns}/0x00000000_0x0FFFFFFF": stats(thr_out=a), f"{ns}/0x0FFFFFFF_0xFFFFFFFF": stats(thr_out=b)},
        )
    return snapshot(brokers)


def test_underload_outlier(shed):
    # #12: 98 brokers at 98%, one at 99%, one at 1%
    brokers = hundred_brokers(
        lambda i: (98, (30e6, 70e6)) if i < 98 else ((99, (30e6, 70e6)) if i == 98 else (1, (300e3, 700e3)))
    )
    result = shed("TransferShedder", brokers, cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker98:8080", "my-tenant/my-namespace98/0x00000000_0x0FFFFFFF", "broker99:8080")}
    assert "Underloaded" in result.unloads[0].reason and "avg 0.970, std 0.097" in result.unloads[0].reason


def test_overload_outlier(shed):
    brokers = hundred_brokers(lambda i: (1, (300e3, 700e3)) if i < 99 else (100, (30e6, 70e6)))
    result = shed("TransferShedder", brokers, cfg(**NO_HIT_COUNT))
    [unload] = result.unloads
    assert (unload.source, unload.bundle) == ("broker99:8080", "my-tenant/my-namespace99/0x00000000_0x0FFFFFFF")
    assert unload.destination != "broker99:8080" and "Underloaded" in unload.reason


def test_remaining_top_bundles_and_zero_throughput(shed):
    tops = [
        (1_000_000, 2_000_000),
        (1_000_000, 3_000_000),
        (2_000_000, 4_000_000),
        (2_000_000, 6_000_000),
        (2_000_000, 3_000_000),
    ]
    assert decisions(shed("TransferShedder", base_cluster(tops=tops), cfg(**NO_HIT_COUNT))) == BASE
    zero = base_cluster(tops=[(0, 0)] * 5)
    result = shed("TransferShedder", zero, cfg(**NO_HIT_COUNT))
    assert result.unloads == () and any("no top bundles" in n for n in result.notes)


def test_no_brokers():
    result = run_shedder("TransferShedder", snapshot({}), cfg(**NO_HIT_COUNT))
    assert result.unloads == () and "NoBrokers" in result.notes[0]
