"""Pulsar's TransferShedderTest (extensions/scheduler), the cases a snapshot can express: same inputs,
same decisions (source, bundle, destination) and reasons, through the shedder and (the ``shed``
fixture) through ``operator rebalance --snapshot``.

Each case runs on both inputs (the ``form`` fixture): what an extensible-load-manager broker publishes
(BrokerLoadData with its own weightedMaxEMA and msgThroughputEMA, its TopBundlesLoadData, the ownership read
from ownedNamespaces) — Pulsar's own setting — and a modular LocalBrokerData report, for which the operator
keeps the averages itself. TransferShedderTest's getCpuLoad makes a fresh BrokerLoadData updated once, so its
EMAs are the current figures, in both forms.

Every case runs with getContext()'s settings: hit-count threshold 0 and debug mode on (which in Pulsar also
makes a swap count as traffic gained, see TransferShedder). The policy cases (testBundlesWithIsolationPolicies,
testBundlesWithAntiAffinityGroup, testIsLoadBalancerSheddingBundlesWithPoliciesEnabled) are in
test_namespace_policies.py. Not mirrored: testGetAvailableBrokersFailed (a failing registry is not in a
snapshot), testRandomLoad and testRandomLoadStats (random loads, LoadStats internals). The rules no Java test
covers — NoLoadData for an available broker without load data, an owner check on a top bundle that moved, a
swap the state channel refuses, the excluded namespaces, the broker filters on topics and version, no skip for
a max broker at zero load, the published averages — are after the mirrored cases, each against the lines of
TransferShedder.java it re-states.
"""

import pytest

from pulsar_lb_operator.strategies import StrategyState
from pulsar_lb_operator.strategies.shedding.transfer import update_emas
from tests.builders import NOW, broker_report, cfg, elm_report, run_shedder, stats
from tests.builders import snapshot as build_snapshot

NO_HIT_COUNT = {"loadBalancerSheddingConditionHitCountThreshold": 0, "loadBalancerDebugModeEnabled": True}
ELM, MODULAR = "elm", "modular"


@pytest.fixture(params=[ELM, MODULAR])
def form(request):
    """The brokers' load as ELM publishes it, or as the modular load manager reports it."""
    return request.param


def snapshot(brokers, form=ELM, missing=None, **published):
    """The snapshot of ``brokers`` (LocalBrokerData documents) in ``form``; ``published``: elm_report's arguments
    for every broker; ``missing``: available brokers without load data (what the ELM collector names)."""
    if form == ELM:
        brokers = {b: elm_report(r, **published) for b, r in brokers.items()}
    snap = build_snapshot(brokers)
    if missing:
        import dataclasses
        from types import MappingProxyType

        snap = dataclasses.replace(snap, missing=MappingProxyType(missing))
    return snap


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


def base_reports(loads=(2, 4, 6, 80, 90), tops=None, reported=None):
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
    return brokers


def base_cluster(loads=(2, 4, 6, 80, 90), tops=None, reported=None, form=ELM, **published):
    """setupContext() in ``form``."""
    return snapshot(base_reports(loads, tops, reported), form, **published)


def decisions(result):
    return {(u.source, u.bundle, u.destination) for u in result.unloads}


def _two(form, load1, a, load2, b):
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
        },
        form,
    )


def hundred_brokers(form, load_of):
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
    return snapshot(brokers, form)


def test_max_number_of_transfers_per_shedder_cycle(shed, form):
    """TransferShedderTest.testMaxNumberOfTransfersPerShedderCycle: setupContext (cpu 2, 4, 6, 80, 90; avg 0.364, std
    0.398) with at most 10 brokers per cycle → E1 from broker5 to broker1 and D1 from broker4 to broker2, both
    Overloaded."""
    result = shed(
        "TransferShedder",
        base_cluster(form=form),
        cfg(**NO_HIT_COUNT, loadBalancerMaxNumberOfBrokerSheddingPerCycle=10),
    )
    assert decisions(result) == BASE
    assert "Overloaded" in result.unloads[0].reason
    assert "avg 0.364, std 0.398" in result.unloads[0].reason
    assert any("std after the plan 0.2438" in n for n in result.notes)


def test_recently_unloaded_bundles(shed, form):
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
        "TransferShedder",
        base_cluster(form=form),
        cfg(**NO_HIT_COUNT),
        StrategyState().evolve(recently_unloaded=recent),
    )
    assert decisions(result) == {("broker3:8080", "my-tenant/my-namespaceC/0x00000000_0x0FFFFFFF", "broker1:8080")}


def test_recently_unloaded_brokers(shed, form):
    """TransferShedderTest.testRecentlyUnloadedBrokers: an old entry for broker1 is dropped → the base result; an entry
    newer than broker1's report → nothing (CoolDown)."""
    state = StrategyState().evolve(transfer_recent_brokers={"broker1:8080": NOW - 1800 * 1001})
    assert decisions(shed("TransferShedder", base_cluster(form=form), cfg(**NO_HIT_COUNT), state)) == BASE
    state = StrategyState().evolve(transfer_recent_brokers={"broker1:8080": NOW})
    result = shed("TransferShedder", base_cluster(form=form), cfg(**NO_HIT_COUNT), state)
    assert result.unloads == () and "CoolDown" in result.notes[0]


def test_target_std(shed, form):
    """TransferShedderTest.testTargetStd: cpu 10, 20, 30 (avg 0.200, std 0.082 ≤ 0.25) → nothing (HitCount)."""
    snap = base_cluster(form=form, loads=(10, 20, 30), tops=[(30, 30), (40, 40), (50, 50)])
    result = shed("TransferShedder", snap, cfg(**NO_HIT_COUNT))
    assert result.unloads == () and "HitCount" in result.notes[0]
    assert "avg 0.200, std 0.082" in result.notes[0]


def test_load_balancer_shedding_condition_hit_count_threshold(shed, form):
    """TransferShedderTest.testLoadBalancerSheddingConditionHitCountThreshold: threshold 3 → nothing for three cycles
    (counter 1, 2, 3), then the base result."""
    config = cfg(loadBalancerSheddingConditionHitCountThreshold=3)
    state = StrategyState()
    for expected in (1, 2, 3):
        result = shed("TransferShedder", base_cluster(form=form), config, state)
        assert result.unloads == () and result.state.transfer_hit_count == expected
        state = result.state
    assert decisions(shed("TransferShedder", base_cluster(form=form), config, state)) == BASE


def test_unload_bundles_greater_than_target_throughput(shed, form):
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
        },
        form,
    )
    result = shed("TransferShedder", snap, cfg(**NO_HIT_COUNT))
    down = sorted(u.bundle.rsplit("/", 1)[1] for u in result.unloads if u.source == "broker2:8080")
    up = sorted(u.bundle.rsplit("/", 1)[1] for u in result.unloads if u.source == "broker1:8080")
    assert down == ["0x00000000_0x1FFFFFFF", "0x1FFFFFFF_0x2FFFFFFF", "0x2FFFFFFF_0x3FFFFFFF"]
    assert up == ["0x00000000_0x1FFFFFFF", "0x1FFFFFFF_0x2FFFFFFF", "0x2FFFFFFF_0x3FFFFFFF", "0x3FFFFFFF_0x4FFFFFFF"]
    assert all(u.destination == "broker1:8080" for u in result.unloads if u.source == "broker2:8080")
    assert any("std after the plan 0.0500" in n for n in result.notes)


def test_single_top_bundles_load_data(shed, form):
    """TransferShedderTest.testSingleTopBundlesLoadData: one top bundle per broker → nothing (NoBundles)."""
    brokers = {
        f"broker{i}:8080": broker_report(
            cpu=(load, 100), bundles={f"ns{i}/x/0x00000000_0x0FFFFFFF": stats(thr_out=load * 1000)}
        )
        for i, load in enumerate((1, 2, 6, 10, 70), 1)
    }
    result = shed("TransferShedder", snapshot(brokers, form), cfg(**NO_HIT_COUNT))
    assert result.unloads == ()
    assert any("sole bundle" in n for n in result.notes)


@pytest.mark.parametrize("loads", [(200, 1000)])
def test_load_more_than_100(loads, shed, form):
    """TransferShedderTest.testLoadMoreThan100: broker4 at 200% and broker5 at 1000% → the base result."""
    result = shed("TransferShedder", base_cluster(form=form, loads=(2, 4, 6, *loads)), cfg(**NO_HIT_COUNT))
    assert decisions(result) == BASE


def test_bundle_throughput_larger_than_offload_threshold(shed, form):
    """TransferShedderTest.testBundleThroughputLargerThanOffloadThreshold: broker4's and broker5's top bundles are 1e9
    B/s each (their reported load unchanged) → only broker3's C1 to broker1."""
    tops = [(1_000_000, 2_000_000), (1_000_000, 3_000_000), (2_000_000, 4_000_000), (1e9, 1e9), (1e9, 1e9)]
    snap = base_cluster(form=form, tops=tops, reported=BASE_TOPS)
    result = shed("TransferShedder", snap, cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker3:8080", "my-tenant/my-namespaceC/0x00000000_0x0FFFFFFF", "broker1:8080")}


def test_skip_bundles_greater_than_target_throughput_after_split(shed, form):
    """TransferShedderTest.testSkipBundlesGreaterThanTargetThroughputAfterSplit: target std 0.20, both of broker2's 500
    MB/s bundles exceed what should move → nothing."""
    result = shed(
        "TransferShedder",
        _two(form, 50, [1, 500_000_000], 100, [500_000_000, 500_000_000]),
        cfg(loadBalancerBrokerLoadTargetStd=0.20, **NO_HIT_COUNT),
    )
    assert result.unloads == ()


def test_unload_bundles_less_than_target_throughput_after_split(shed, form):
    """TransferShedderTest.testUnloadBundlesLessThanTargetThroughputAfterSplit: broker2 (load 10.0) with 490M and 510M →
    the 490M bundle to broker1; final std 0.0500."""
    result = shed(
        "TransferShedder", _two(form, 10, [1e6, 2e6, 3e6, 4e6, 5e6], 1000, [490e6, 510e6]), cfg(**NO_HIT_COUNT)
    )
    assert decisions(result) == {("broker2:8080", "my-tenant/my-namespaceB/0x00000000_0x0FFFFFFF", "broker1:8080")}
    assert any("std after the plan 0.0500" in n for n in result.notes)


def test_unload_bundles_greater_than_target_throughput_after_split(shed, form):
    """TransferShedderTest.testUnloadBundlesGreaterThanTargetThroughputAfterSplit: broker1 48% (2.4M, 2.4M), broker2
    100% (5M, 5M) → one bundle each way; avg 0.74, std 0.26."""
    result = shed("TransferShedder", _two(form, 48, [2.4e6, 2.4e6], 100, [5e6, 5e6]), cfg(**NO_HIT_COUNT))
    moves = sorted((u.source, u.destination) for u in result.unloads)
    assert moves == [("broker1:8080", "broker2:8080"), ("broker2:8080", "broker1:8080")]
    assert "avg 0.740, std 0.260" in result.unloads[0].reason


def test_min_broker_with_low_traffic(form):
    """TransferShedderTest.testMinBrokerWithLowTraffic: broker2's msgThroughputEMA forced to 10, broker4 55%, broker5
    65% → E1 to broker1 (Overloaded) and D1 to broker2 (Underloaded)."""
    config = cfg(**NO_HIT_COUNT)
    reports = base_reports(loads=(2, 4, 6, 55, 65))
    if form == ELM:  # what broker2 published
        brokers = {b: elm_report(r, msg_throughput_ema=10 if b == "broker2:8080" else None) for b, r in reports.items()}
        snap, state = build_snapshot(brokers), StrategyState()
    else:  # the operator's own average for broker2
        snap = build_snapshot(reports)
        load = __import__("pulsar_lb_operator.strategies.loaddata", fromlist=["x"]).build_load_data(snap, {}, {}, 0)[0]
        emas = update_emas(load, config, StrategyState())
        emas["broker2:8080"] = type(emas["broker2:8080"])(
            emas["broker2:8080"].weighted_max_ema, 10, emas["broker2:8080"].updated_at
        )
        state = StrategyState().evolve(transfer_ema=emas)
    result = run_shedder("TransferShedder", snap, config, state)
    assert decisions(result) == {
        ("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080"),
        ("broker4:8080", "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF", "broker2:8080"),
    }
    reasons = {u.source: u.reason for u in result.unloads}
    assert "Overloaded" in reasons["broker5:8080"] and "Underloaded" in reasons["broker4:8080"]


def test_min_broker_with_lower_load_than_avg(shed, form):
    """TransferShedderTest.testMinBrokerWithLowerLoadThanAvg: broker2 3%, broker4 55%, broker5 65% → E1 to broker1
    (Overloaded), D1 to broker2 (Underloaded); avg 0.262, std 0.278."""
    result = shed("TransferShedder", base_cluster(form=form, loads=(2, 3, 6, 55, 65)), cfg(**NO_HIT_COUNT))
    reasons = {u.source: u.reason for u in result.unloads}
    assert decisions(result) == {
        ("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080"),
        ("broker4:8080", "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF", "broker2:8080"),
    }
    assert "Overloaded" in reasons["broker5:8080"] and "Underloaded" in reasons["broker4:8080"]
    assert "avg 0.262, std 0.278" in reasons["broker5:8080"]


def test_target_std_after_transfer(shed, form):
    """TransferShedderTest.testTargetStdAfterTransfer: broker4 55%, broker5 65% → only E1 to broker1 (Overloaded)."""
    result = shed("TransferShedder", base_cluster(form=form, loads=(2, 4, 6, 55, 65)), cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080")}
    assert "Overloaded" in result.unloads[0].reason and "avg 0.264, std 0.276" in result.unloads[0].reason


def test_underload_outlier(shed, form):
    """TransferShedderTest.testUnderloadOutlier: 98 brokers at 98%, broker98 at 99%, broker99 at 1% → broker98's first
    bundle to broker99 (Underloaded); avg 0.970, std 0.097."""
    brokers = hundred_brokers(
        form, lambda i: (98, (30e6, 70e6)) if i < 98 else ((99, (30e6, 70e6)) if i == 98 else (1, (300e3, 700e3)))
    )
    result = shed("TransferShedder", brokers, cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker98:8080", "my-tenant/my-namespace98/0x00000000_0x0FFFFFFF", "broker99:8080")}
    assert "Underloaded" in result.unloads[0].reason and "avg 0.970, std 0.097" in result.unloads[0].reason


def test_overload_outlier(shed, form):
    """TransferShedderTest.testOverloadOutlier: 99 brokers at 1%, broker99 at 100% → broker99's first bundle to one idle
    broker (Underloaded). Pulsar's destination (broker52 or broker83) comes from its HashMap order among 99 equal
    brokers; ours from broker-name order, so only "one of the idle brokers" is asserted."""
    brokers = hundred_brokers(form, lambda i: (1, (300e3, 700e3)) if i < 99 else (100, (30e6, 70e6)))
    result = shed("TransferShedder", brokers, cfg(**NO_HIT_COUNT))
    [unload] = result.unloads
    assert (unload.source, unload.bundle) == ("broker99:8080", "my-tenant/my-namespace99/0x00000000_0x0FFFFFFF")
    assert unload.destination != "broker99:8080" and "Underloaded" in unload.reason
    assert "avg 0.020, std 0.099" in unload.reason


def test_empty_broker_load_data(form):
    """TransferShedderTest.testEmptyBrokerLoadData: no brokers → nothing (NoBrokers)."""
    result = run_shedder("TransferShedder", snapshot({}), cfg(**NO_HIT_COUNT))
    assert result.unloads == () and "NoBrokers" in result.notes[0]


def test_out_dated_load_data(shed, form):
    """TransferShedderTest.testOutDatedLoadData: fresh reports → 2 decisions; every report older than
    loadBalancerBrokerLoadDataTTLInSeconds → nothing (OutDatedData)."""
    assert len(shed("TransferShedder", base_cluster(form=form), cfg(**NO_HIT_COUNT)).unloads) == 2
    stale = build_snapshot({b: {**r.raw, "lastUpdate": 0} for b, r in base_cluster(form=form).brokers.items()})
    result = shed("TransferShedder", stale, cfg(**NO_HIT_COUNT))
    assert result.unloads == () and "OutDatedData" in result.notes[0]


def test_empty_top_bundles_load_data(shed, form):
    """TransferShedderTest.testEmptyTopBundlesLoadData: broker loads 2..90% but no top bundles → nothing
    (NoLoadData)."""
    brokers = {
        f"broker{i}:8080": broker_report(cpu=(load, 100), thr_in=1, thr_out=2, rate_in=3, rate_out=4)
        for i, load in enumerate((2, 4, 6, 80, 90), 1)
    }
    result = shed("TransferShedder", snapshot(brokers, form), cfg(**NO_HIT_COUNT))
    assert result.unloads == () and any("NoLoadData" in n for n in result.notes)


def test_remaining_top_bundles(shed, form):
    """TransferShedderTest.testRemainingTopBundles: broker5's top bundles (2M, 3M) → the base result."""
    tops = [*BASE_TOPS[:4], (2_000_000, 3_000_000)]
    assert decisions(shed("TransferShedder", base_cluster(form=form, tops=tops), cfg(**NO_HIT_COUNT))) == BASE


def test_zero_bundle_throughput(shed, form):
    """TransferShedderTest.testZeroBundleThroughput: every top bundle at zero throughput → nothing (NoBundles).
    Pulsar's test zeroes the stats after TopKBundles built the list, which is what an ELM broker's list may hold;
    from a modular report the operator builds the list itself, and TopKBundles leaves idle bundles out: there
    the reason is NoLoadData (no top bundles)."""
    result = shed(
        "TransferShedder", base_cluster(form=form, tops=[(0, 0)] * 5, reported=BASE_TOPS), cfg(**NO_HIT_COUNT)
    )
    assert result.unloads == ()
    assert result.notes[0] == (
        "TransferShedder: skip (NoBundles)" if form == ELM else "TransferShedder: skip (NoLoadData)"
    )


def test_no_owner_load_data(shed):
    """TransferShedderTest.testNoOwnerLoadData: the state channel says no broker owns its top bundles (here: the
    ownership the cycle read names none of them) → nothing (NoBundles); avg and std as setupContext's."""
    brokers = {b: elm_report(r, owned=[]) for b, r in base_reports().items()}
    result = shed("TransferShedder", build_snapshot(brokers), cfg(**NO_HIT_COUNT))
    assert result.unloads == () and result.notes[0] == "TransferShedder: skip (NoBundles)"


def test_filter_has_exception(shed):
    """TransferShedderTest.testFilterHasException: a broker filter that fails makes every bundle untransferable →
    nothing (NoBundles). Here BrokerVersionFilter fails as it does in Pulsar: preferLaterVersions and a broker
    whose version is unknown (BrokerFilterBadVersionException)."""
    brokers = {b: elm_report(r, version=None if b == "broker3:8080" else "4.0.4") for b, r in base_reports().items()}
    result = shed("TransferShedder", build_snapshot(brokers), cfg(**NO_HIT_COUNT, preferLaterVersions=True))
    assert result.unloads == () and result.notes[0] == "TransferShedder: skip (NoBundles)"
    assert any("no version known for broker3:8080" in n for n in result.notes)


def _loads_cluster(loads, form):
    brokers = {}
    for i, load in enumerate(loads):
        ns = f"my-tenant/my-namespace{i}"
        bundles = {f"{ns}/0x00000000_0x0FFFFFFF": stats(thr_out=1e6), f"{ns}/0x0FFFFFFF_0xFFFFFFFF": stats(thr_out=2e6)}
        brokers[f"broker{i}:8080"] = broker_report(cpu=(load, 100), bundles=bundles, thr_in=1)
    return snapshot(brokers, form)


def test_high_variance_load_stats(form):
    """TransferShedderTest.testHighVarianceLoadStats: loads 1% and sixteen at 100% → avg 0.942, std 0.233."""
    result = run_shedder("TransferShedder", _loads_cluster([1] + [100] * 16, form), cfg(**NO_HIT_COUNT))
    assert "avg 0.942, std 0.233" in result.unloads[0].reason


def test_low_variance_load_stats(form):
    """TransferShedderTest.testLowVarianceLoadStats: loads 390..399% → avg 3.945, std 0.029."""
    result = run_shedder("TransferShedder", _loads_cluster(range(390, 400), form), cfg(**NO_HIT_COUNT))
    assert any("avg 3.945, std 0.029" in text for text in (*result.notes, *(u.reason for u in result.unloads)))


# ------------------------------------------------------------------- rules without a Java test of their own

D1_TO_BROKER1 = {("broker4:8080", "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF", "broker1:8080")}


def test_an_available_broker_without_load_data_skips_the_whole_cycle(shed):
    """LoadStats.update: after the loop, any available broker missing from the BrokerLoadData store → the cycle is
    skipped (NoLoadData), whatever the others' load; a CoolDown found in the loop comes first."""
    missing = {"broker6:8080": "no BrokerLoadData heard"}
    result = shed("TransferShedder", snapshot(base_reports(), missing=missing), cfg(**NO_HIT_COUNT))
    assert result.unloads == ()
    assert (
        result.notes[0] == "TransferShedder: skip (NoLoadData: no load data of broker6:8080: no BrokerLoadData heard)"
    )
    state = StrategyState().evolve(transfer_recent_brokers={"broker1:8080": NOW})
    result = shed("TransferShedder", snapshot(base_reports(), missing=missing), cfg(**NO_HIT_COUNT), state)
    assert result.unloads == () and "CoolDown" in result.notes[0]


def test_a_top_bundle_its_broker_no_longer_owns_is_not_unloaded(shed):
    """TransferShedder's ``channel.isOwner(bundle, maxBroker)``: broker5 still publishes E1 among its top bundles, but
    E1 has moved to broker1 (ownedNamespaces). E1 is skipped; E2 alone exceeds what broker5 should give and no swap
    from broker1 balances it, so broker5 gives nothing and broker4 gives D1 to broker1, still the least loaded."""
    reports = base_reports()
    e1 = "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF"
    brokers = {
        b: elm_report(r, owned=[n for n in r["bundles"] if n != e1] + ([e1] if b == "broker1:8080" else []))
        for b, r in reports.items()
    }
    result = shed("TransferShedder", build_snapshot(brokers), cfg(**NO_HIT_COUNT))
    assert decisions(result) == D1_TO_BROKER1
    assert all(u.bundle != e1 for u in result.unloads)


def test_a_swap_the_min_broker_does_not_own_is_decided_then_dropped(shed):
    """TransferShedder does not check the min broker's top bundles for ownership when it swaps; ELM's state channel
    refuses an Unload whose source is not the owner (ServiceUnitStateDataConflictResolver.invalidUnload). The case
    of testUnloadBundlesGreaterThanTargetThroughputAfterSplit, with broker1's bundles no longer its own: broker2's
    bundle still moves, the swap is dropped with a note."""
    brokers = {
        "broker1:8080": broker_report(
            cpu=(48, 100),
            thr_in=1,
            bundles={f"my-tenant/my-namespaceA/{r}": stats(thr_out=2.4e6) for r in FIVE_RANGES[:2]},
        ),
        "broker2:8080": broker_report(
            cpu=(100, 100),
            thr_in=1,
            bundles={f"my-tenant/my-namespaceB/{r}": stats(thr_out=5e6) for r in FIVE_RANGES[:2]},
        ),
    }
    brokers["broker1:8080"] = elm_report(brokers["broker1:8080"], owned=[])
    brokers["broker2:8080"] = elm_report(brokers["broker2:8080"])
    result = shed("TransferShedder", build_snapshot(brokers), cfg(**NO_HIT_COUNT))
    assert [(u.source, u.destination) for u in result.unloads] == [("broker2:8080", "broker1:8080")]
    assert any("drop the swap" in n and "broker1:8080 does not own it" in n for n in result.notes)


def test_excluded_namespaces_are_never_shed(shed, form):
    """TransferShedder skips a top bundle of loadBalancerSheddingExcludedNamespaces (PIP-380): broker5's namespace is
    excluded, so broker5 gives nothing and broker4 gives D1 to broker1."""
    config = cfg(**NO_HIT_COUNT, loadBalancerSheddingExcludedNamespaces="my-tenant/my-namespaceE")
    assert decisions(shed("TransferShedder", base_cluster(form=form), config)) == D1_TO_BROKER1


@pytest.mark.parametrize("topics, moved", [(49_999, BASE), (50_000, set())])
def test_no_bundle_goes_to_a_broker_at_its_topic_limit(shed, topics, moved):
    """BrokerMaxTopicCountFilter in isTransferable: the min broker, broker1, with ``topics`` >=
    loadBalancerBrokerMaxTopics (50000) is no destination; TransferShedder keeps pairing each max broker with it,
    so nothing moves."""
    brokers = {b: elm_report(r, topics=topics if b == "broker1:8080" else 6) for b, r in base_reports().items()}
    result = shed("TransferShedder", build_snapshot(brokers), cfg(**NO_HIT_COUNT))
    assert decisions(result) == moved


@pytest.mark.parametrize("oldest, moved", [("4.0.4", BASE), ("3.3.2", set())])
def test_with_prefer_later_versions_only_the_newest_brokers_take_bundles(shed, oldest, moved):
    """BrokerVersionFilter in isTransferable, with preferLaterVersions: broker1 on an older version than the others
    takes nothing (and is every max broker's partner here, so nothing moves)."""
    brokers = {b: elm_report(r, version=oldest if b == "broker1:8080" else "4.0.4") for b, r in base_reports().items()}
    result = shed("TransferShedder", build_snapshot(brokers), cfg(**NO_HIT_COUNT, preferLaterVersions=True))
    assert decisions(result) == moved


def test_a_max_broker_at_zero_load_still_sheds_as_javas_doubles_do(shed):
    """No skip for a max broker at zero load: with every broker at 0 % CPU, broker1 is underloaded by throughput
    (msgThroughputEMA under an eighth of the max broker's), broker5 is the max broker (ties by name), and the
    bundle target is 0.0 × throughput / 0.0 = NaN, which no comparison exceeds: E1 moves, E2 stays (the last top
    bundle), Underloaded."""
    reports = base_reports(loads=(0, 0, 0, 0, 0), tops=[(1, 1), *BASE_TOPS[1:]])
    result = shed("TransferShedder", snapshot(reports), cfg(**NO_HIT_COUNT))
    assert decisions(result) == {("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080")}
    assert "Underloaded" in result.unloads[0].reason


def test_the_published_averages_decide_not_the_current_usage(shed):
    """On ELM the brokers' own weightedMaxEMA orders them: broker1 and broker5 report 2 % and 90 % CPU right now, but
    published 0.90 and 0.02 (their averages over their own samples) → broker1 is the max broker (A1 to broker5) and
    broker4 gives D1 to broker2."""
    emas = {"broker1:8080": 0.90, "broker5:8080": 0.02}
    brokers = {b: elm_report(r, weighted_max_ema=emas.get(b)) for b, r in base_reports().items()}
    result = shed("TransferShedder", build_snapshot(brokers), cfg(**NO_HIT_COUNT))
    assert decisions(result) == {
        ("broker1:8080", "my-tenant/my-namespaceA/0x00000000_0x0FFFFFFF", "broker5:8080"),
        ("broker4:8080", "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF", "broker2:8080"),
    }


def test_a_version_without_msg_throughput_ema_is_said_and_planned_with_the_operators_own():
    """A first 3.0 release publishes no msgThroughputEMA: the operator's own average of its reports stands in for
    it, and the plan says so."""
    brokers = {b: elm_report(r, publishes_throughput_ema=False) for b, r in base_reports().items()}
    result = run_shedder("TransferShedder", build_snapshot(brokers), cfg(**NO_HIT_COUNT))
    assert decisions(result) == BASE
    assert any("publish no msgThroughputEMA" in n for n in result.notes)
    assert set(result.state.transfer_ema) == set(brokers)  # kept for the next cycle
