"""TransferShedder (§8.8): the extensible load manager's shedder."""

import pytest

from strategies import StrategyState
from strategies.shedding.transfer import compare_bundle_stats, top_bundles
from strategies.snapshots import BundleStats
from tests.builders import NOW, broker_report, cfg, run_shedder, snapshot, stats

NO_HIT_COUNT = {"loadBalancerSheddingConditionHitCountThreshold": 0}


def base_cluster(loads=(2, 4, 6, 80, 90), tops=None, ns_prefix="my-tenant/my-namespace"):
    tops = tops or [
        (1_000_000, 2_000_000),
        (1_000_000, 3_000_000),
        (2_000_000, 4_000_000),
        (2_000_000, 6_000_000),
        (2_000_000, 7_000_000),
    ]
    brokers = {}
    for i, (load, (a, b)) in enumerate(zip(loads, tops), 1):
        ns = f"{ns_prefix}{'ABCDE'[i - 1]}"
        bundles = {f"{ns}/0x00000000_0x0FFFFFFF": stats(thr_out=a), f"{ns}/0x0FFFFFFF_0xFFFFFFFF": stats(thr_out=b)}
        brokers[f"broker{i}:8080"] = broker_report(cpu=(load, 100), bundles=bundles, thr_in=1, rate_in=3, rate_out=4)
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


def test_swap_when_bundles_are_larger_than_the_target(shed):
    """testUnloadBundlesGreaterThanTargetThroughput: 3 bundles go down, 4 small ones come back."""
    a = {
        f"my-tenant/my-namespaceA/{r}": stats(thr_out=m * 1_000_000)
        for r, m in zip(
            [
                "0x00000000_0x1FFFFFFF",
                "0x1FFFFFFF_0x2FFFFFFF",
                "0x2FFFFFFF_0x3FFFFFFF",
                "0x3FFFFFFF_0x4FFFFFFF",
                "0x4FFFFFFF_0x5FFFFFFF",
            ],
            [1, 2, 3, 4, 5],
        )
    }
    b = {
        f"my-tenant/my-namespaceB/{r}": stats(thr_out=m * 1_000_000)
        for r, m in zip(
            [
                "0x00000000_0x1FFFFFFF",
                "0x1FFFFFFF_0x2FFFFFFF",
                "0x2FFFFFFF_0x3FFFFFFF",
                "0x3FFFFFFF_0x4FFFFFFF",
                "0x4FFFFFFF_0x5FFFFFFF",
            ],
            [100, 180, 220, 250, 250],
        )
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
