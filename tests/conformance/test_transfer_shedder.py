"""Pulsar's TransferShedderTest (extensions/scheduler), the cases a snapshot can express: same inputs,
same decisions (source, bundle, destination) and reasons, through the shedder and (the ``shed``
fixture) through ``operator rebalance --snapshot``.

Every case runs with getContext()'s settings: hit-count threshold 0 and debug mode on (which in Pulsar
also makes a swap count as traffic gained, see TransferShedder). Not mirrored: testGetAvailableBrokersFailed,
testNoOwnerLoadData and testFilterHasException (a failing registry, the ownership channel and a failing
broker filter are not in a snapshot), testBundlesWithIsolationPolicies, testBundlesWithAntiAffinityGroup and
testIsLoadBalancerSheddingBundlesWithPoliciesEnabled (no isolation or anti-affinity policies in a snapshot),
testRandomLoad and testRandomLoadStats (random loads, LoadStats internals).
"""

import pytest

from pulsar_lb_operator.strategies import StrategyState
from pulsar_lb_operator.strategies.shedding.transfer import update_emas
from tests.builders import NOW, broker_report, cfg, run_shedder, snapshot, stats

NO_HIT_COUNT = {"loadBalancerSheddingConditionHitCountThreshold": 0, "loadBalancerDebugModeEnabled": True}

BASE_TOPS = [
    (1_000_000, 2_000_000),
    (1_000_000, 3_000_000),
    (2_000_000, 4_000_000),
    (2_000_000, 6_000_000),
    (2_000_000, 7_000_000),
]

BASE = {
    ("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080"),
    ("broker4:8080", "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF", "broker2:8080"),
}

FIVE_RANGES = (  # the bundle ranges of both namespaces in Pulsar's test
    "0x00000000_0x1FFFFFFF",
    "0x1FFFFFFF_0x2FFFFFFF",
    "0x2FFFFFFF_0x3FFFFFFF",
    "0x3FFFFFFF_0x4FFFFFFF",
    "0x4FFFFFFF_0x5FFFFFFF",
)


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


def decisions(result):
    return {(u.source, u.bundle, u.destination) for u in result.unloads}


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


def test_max_number_of_transfers_per_shedder_cycle(shed):
    """TransferShedderTest.testMaxNumberOfTransfersPerShedderCycle: setupContext (cpu 2, 4, 6, 80, 90; avg 0.364, std
    0.398) with at most 10 brokers per cycle → E1 from broker5 to broker1 and D1 from broker4 to broker2, both
    Overloaded."""
    result = shed(
        "TransferShedder", base_cluster(), cfg(**NO_HIT_COUNT, loadBalancerMaxNumberOfBrokerSheddingPerCycle=10)
    )
    assert decisions(result) == BASE
    assert "Overloaded" in result.unloads[0].reason
    assert "avg 0.364, std 0.398" in result.unloads[0].reason
    assert any("std after the plan 0.2438" in n for n in result.notes)


def test_recently_unloaded_bundles(shed):
    """TransferShedderTest.testRecentlyUnloadedBundles: E1, E2, D1, D2 in their grace period → broker3's C1
    to broker1."""
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


def test_recently_unloaded_brokers(shed):
    """TransferShedderTest.testRecentlyUnloadedBrokers: an old entry for broker1 is dropped → the base result; an entry
    newer than broker1's report → nothing (CoolDown)."""
    state = StrategyState().evolve(transfer_recent_brokers={"broker1:8080": NOW - 1800 * 1001})
    assert decisions(shed("TransferShedder", base_cluster(), cfg(**NO_HIT_COUNT), state)) == BASE
    state = StrategyState().evolve(transfer_recent_brokers={"broker1:8080": NOW})
    result = shed("TransferShedder", base_cluster(), cfg(**NO_HIT_COUNT), state)
    assert result.unloads == () and "CoolDown" in result.notes[0]


def test_target_std(shed):
    """TransferShedderTest.testTargetStd: cpu 10, 20, 30 (avg 0.200, std 0.082 ≤ 0.25) → nothing (HitCount)."""
    snap = base_cluster(loads=(10, 20, 30), tops=[(30, 30), (40, 40), (50, 50)])
    result = shed("TransferShedder", snap, cfg(**NO_HIT_COUNT))
    assert result.unloads == () and "HitCount" in result.notes[0]
    assert "avg 0.200, std 0.082" in result.notes[0]


def test_load_balancer_shedding_condition_hit_count_threshold(shed):
    """TransferShedderTest.testLoadBalancerSheddingConditionHitCountThreshold: threshold 3 → nothing for three cycles
    (counter 1, 2, 3), then the base result."""
    config = cfg(loadBalancerSheddingConditionHitCountThreshold=3)
    state = StrategyState()
    for expected in (1, 2, 3):
        result = shed("TransferShedder", base_cluster(), config, state)
        assert result.unloads == () and result.state.transfer_hit_count == expected
        state = result.state
    assert decisions(shed("TransferShedder", base_cluster(), config, state)) == BASE


def test_unload_bundles_greater_than_target_throughput(shed):
    """TransferShedderTest.testUnloadBundlesGreaterThanTargetThroughput: three of broker2's bundles go down and four
    small ones of broker1 come back (swaps); final std 0.0500."""
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


def test_single_top_bundles_load_data(shed):
    """TransferShedderTest.testSingleTopBundlesLoadData: one top bundle per broker → nothing (NoBundles)."""
    brokers = {
        f"broker{i}:8080": broker_report(
            cpu=(load, 100), bundles={f"ns{i}/x/0x00000000_0x0FFFFFFF": stats(thr_out=load * 1000)}
        )
        for i, load in enumerate((1, 2, 6, 10, 70), 1)
    }
    result = shed("TransferShedder", snapshot(brokers), cfg(**NO_HIT_COUNT))
    assert result.unloads == ()
    assert any("sole bundle" in n for n in result.notes)


@pytest.mark.parametrize("loads", [(200, 1000)])
def test_load_more_than_100(loads, shed):
    """TransferShedderTest.testLoadMoreThan100: broker4 at 200% and broker5 at 1000% → the base result."""
    result = shed("TransferShedder", base_cluster(loads=(2, 4, 6, *loads)), cfg(**NO_HIT_COUNT))
    assert decisions(result) == BASE


def test_bundle_throughput_larger_than_offload_threshold(shed):
    """TransferShedderTest.testBundleThroughputLargerThanOffloadThreshold: broker4's and broker5's top bundles are 1e9
    B/s each (their reported load unchanged) → only broker3's C1 to broker1."""
    tops = [(1_000_000, 2_000_000), (1_000_000, 3_000_000), (2_000_000, 4_000_000), (1e9, 1e9), (1e9, 1e9)]
    snap = base_cluster(tops=tops, reported=BASE_TOPS)
    result = shed("TransferShedder", snap, cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker3:8080", "my-tenant/my-namespaceC/0x00000000_0x0FFFFFFF", "broker1:8080")}


def test_skip_bundles_greater_than_target_throughput_after_split(shed):
    """TransferShedderTest.testSkipBundlesGreaterThanTargetThroughputAfterSplit: target std 0.20, both of broker2's 500
    MB/s bundles exceed what should move → nothing."""
    result = shed(
        "TransferShedder",
        _two(50, [1, 500_000_000], 100, [500_000_000, 500_000_000]),
        cfg(loadBalancerBrokerLoadTargetStd=0.20, **NO_HIT_COUNT),
    )
    assert result.unloads == ()


def test_unload_bundles_less_than_target_throughput_after_split(shed):
    """TransferShedderTest.testUnloadBundlesLessThanTargetThroughputAfterSplit: broker2 (load 10.0) with 490M and 510M →
    the 490M bundle to broker1; final std 0.0500."""
    result = shed("TransferShedder", _two(10, [1e6, 2e6, 3e6, 4e6, 5e6], 1000, [490e6, 510e6]), cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker2:8080", "my-tenant/my-namespaceB/0x00000000_0x0FFFFFFF", "broker1:8080")}
    assert any("std after the plan 0.0500" in n for n in result.notes)


def test_unload_bundles_greater_than_target_throughput_after_split(shed):
    """TransferShedderTest.testUnloadBundlesGreaterThanTargetThroughputAfterSplit: broker1 48% (2.4M, 2.4M), broker2
    100% (5M, 5M) → one bundle each way; avg 0.74, std 0.26."""
    result = shed("TransferShedder", _two(48, [2.4e6, 2.4e6], 100, [5e6, 5e6]), cfg(**NO_HIT_COUNT))
    moves = sorted((u.source, u.destination) for u in result.unloads)
    assert moves == [("broker1:8080", "broker2:8080"), ("broker2:8080", "broker1:8080")]
    assert "avg 0.740, std 0.260" in result.unloads[0].reason


def test_min_broker_with_low_traffic():
    """TransferShedderTest.testMinBrokerWithLowTraffic: broker2's msgThroughputEMA forced to 10, broker4 55%, broker5
    65% → E1 to broker1 (Overloaded) and D1 to broker2 (Underloaded)."""
    snap = base_cluster(loads=(2, 4, 6, 55, 65))

    config = cfg(**NO_HIT_COUNT)
    load = __import__("pulsar_lb_operator.strategies.loaddata", fromlist=["x"]).build_load_data(snap, {}, {}, 0)[0]
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


def test_min_broker_with_lower_load_than_avg(shed):
    """TransferShedderTest.testMinBrokerWithLowerLoadThanAvg: broker2 3%, broker4 55%, broker5 65% → E1 to broker1
    (Overloaded), D1 to broker2 (Underloaded); avg 0.262, std 0.278."""
    result = shed("TransferShedder", base_cluster(loads=(2, 3, 6, 55, 65)), cfg(**NO_HIT_COUNT))
    reasons = {u.source: u.reason for u in result.unloads}
    assert decisions(result) == {
        ("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080"),
        ("broker4:8080", "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF", "broker2:8080"),
    }
    assert "Overloaded" in reasons["broker5:8080"] and "Underloaded" in reasons["broker4:8080"]
    assert "avg 0.262, std 0.278" in reasons["broker5:8080"]


def test_target_std_after_transfer(shed):
    """TransferShedderTest.testTargetStdAfterTransfer: broker4 55%, broker5 65% → only E1 to broker1 (Overloaded)."""
    result = shed("TransferShedder", base_cluster(loads=(2, 4, 6, 55, 65)), cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080")}
    assert "Overloaded" in result.unloads[0].reason and "avg 0.264, std 0.276" in result.unloads[0].reason


def test_underload_outlier(shed):
    """TransferShedderTest.testUnderloadOutlier: 98 brokers at 98%, broker98 at 99%, broker99 at 1% → broker98's first
    bundle to broker99 (Underloaded); avg 0.970, std 0.097."""
    brokers = hundred_brokers(
        lambda i: (98, (30e6, 70e6)) if i < 98 else ((99, (30e6, 70e6)) if i == 98 else (1, (300e3, 700e3)))
    )
    result = shed("TransferShedder", brokers, cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker98:8080", "my-tenant/my-namespace98/0x00000000_0x0FFFFFFF", "broker99:8080")}
    assert "Underloaded" in result.unloads[0].reason and "avg 0.970, std 0.097" in result.unloads[0].reason


def test_overload_outlier(shed):
    """TransferShedderTest.testOverloadOutlier: 99 brokers at 1%, broker99 at 100% → broker99's first bundle to one idle
    broker (Underloaded). Pulsar's destination (broker52 or broker83) comes from its HashMap order among 99 equal
    brokers; ours from broker-name order, so only "one of the idle brokers" is asserted."""
    brokers = hundred_brokers(lambda i: (1, (300e3, 700e3)) if i < 99 else (100, (30e6, 70e6)))
    result = shed("TransferShedder", brokers, cfg(**NO_HIT_COUNT))
    [unload] = result.unloads
    assert (unload.source, unload.bundle) == ("broker99:8080", "my-tenant/my-namespace99/0x00000000_0x0FFFFFFF")
    assert unload.destination != "broker99:8080" and "Underloaded" in unload.reason
    assert "avg 0.020, std 0.099" in unload.reason


def test_empty_broker_load_data():
    """TransferShedderTest.testEmptyBrokerLoadData: no brokers → nothing (NoBrokers)."""
    result = run_shedder("TransferShedder", snapshot({}), cfg(**NO_HIT_COUNT))
    assert result.unloads == () and "NoBrokers" in result.notes[0]


def test_out_dated_load_data(shed):
    """TransferShedderTest.testOutDatedLoadData: fresh reports → 2 decisions; every report older than
    loadBalancerBrokerLoadDataTTLInSeconds → nothing (OutDatedData)."""
    assert len(shed("TransferShedder", base_cluster(), cfg(**NO_HIT_COUNT)).unloads) == 2
    stale = snapshot({b: {**r.raw, "lastUpdate": 0} for b, r in base_cluster().brokers.items()})
    result = shed("TransferShedder", stale, cfg(**NO_HIT_COUNT))
    assert result.unloads == () and "OutDatedData" in result.notes[0]


def test_empty_top_bundles_load_data(shed):
    """TransferShedderTest.testEmptyTopBundlesLoadData: broker loads 2..90% but no top bundles → nothing
    (NoLoadData)."""
    brokers = {
        f"broker{i}:8080": broker_report(cpu=(load, 100), thr_in=1, thr_out=2, rate_in=3, rate_out=4)
        for i, load in enumerate((2, 4, 6, 80, 90), 1)
    }
    result = shed("TransferShedder", snapshot(brokers), cfg(**NO_HIT_COUNT))
    assert result.unloads == () and any("NoLoadData" in n for n in result.notes)


def test_remaining_top_bundles(shed):
    """TransferShedderTest.testRemainingTopBundles: broker5's top bundles (2M, 3M) → the base result."""
    tops = [*BASE_TOPS[:4], (2_000_000, 3_000_000)]
    assert decisions(shed("TransferShedder", base_cluster(tops=tops), cfg(**NO_HIT_COUNT))) == BASE


def test_zero_bundle_throughput(shed):
    """TransferShedderTest.testZeroBundleThroughput: every top bundle at zero throughput → nothing. Pulsar's
    test zeroes the stats after TopKBundles built the list and counts NoBundles; a broker reporting only idle
    bundles has no top bundles at all (TopKBundles skips zero traffic), so here the reason is NoLoadData."""
    result = shed("TransferShedder", base_cluster(tops=[(0, 0)] * 5), cfg(**NO_HIT_COUNT))
    assert result.unloads == () and any("no top bundles" in n for n in result.notes)


def _loads_cluster(loads):
    brokers = {}
    for i, load in enumerate(loads):
        ns = f"my-tenant/my-namespace{i}"
        bundles = {f"{ns}/0x00000000_0x0FFFFFFF": stats(thr_out=1e6), f"{ns}/0x0FFFFFFF_0xFFFFFFFF": stats(thr_out=2e6)}
        brokers[f"broker{i}:8080"] = broker_report(cpu=(load, 100), bundles=bundles, thr_in=1)
    return snapshot(brokers)


def test_high_variance_load_stats():
    """TransferShedderTest.testHighVarianceLoadStats: loads 1% and sixteen at 100% → avg 0.942, std 0.233."""
    result = run_shedder("TransferShedder", _loads_cluster([1] + [100] * 16), cfg(**NO_HIT_COUNT))
    assert "avg 0.942, std 0.233" in result.unloads[0].reason


def test_low_variance_load_stats():
    """TransferShedderTest.testLowVarianceLoadStats: loads 390..399% → avg 3.945, std 0.029."""
    result = run_shedder("TransferShedder", _loads_cluster(range(390, 400)), cfg(**NO_HIT_COUNT))
    assert any("avg 3.945, std 0.029" in text for text in (*result.notes, *(u.reason for u in result.unloads)))
