"""Where an earlier version of ours followed older Pulsar code, and what master does instead.

Each test names the Java class and method it was checked against.
"""

import contextlib
import io
import json
import random

import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.strategies import StrategyState, plan_cycle
from pulsar_lb_operator.strategies.loaddata import build_load_data
from pulsar_lb_operator.strategies.snapshots import SnapshotError
from tests.builders import NOW, broker_report, cfg, run_shedder, snapshot, stats, write_snapshot

HOT = {"topics": 5}  # a bundle the split trigger would split (≥ 2 topics, rate over 30 000 msg/s)


def _hot_bundles(namespace: str) -> dict:
    return {f"{namespace}/0x00000000_0x80000000": stats(rate_in=40000, **HOT)}


# --- TransferShedder: swap credit only in debug mode ------------------------------------------------


def _swap_cluster():
    ranges = ["0x00000000_0x1FFFFFFF", "0x1FFFFFFF_0x2FFFFFFF", "0x2FFFFFFF_0x3FFFFFFF", "0x3FFFFFFF_0x4FFFFFFF"]
    a = {f"t/A/{r}": stats(thr_out=m * 1e6) for r, m in zip(ranges, [1, 5, 5, 10])}
    b = {f"t/B/{r}": stats(thr_out=m * 1e6) for r, m in zip([*ranges, "0x4FFFFFFF_0x5FFFFFFF"], [20, 20, 40, 60, 150])}
    return snapshot(
        {
            "broker1:8080": broker_report(cpu=(30, 100), bundles=a, thr_in=1),
            "broker2:8080": broker_report(cpu=(60, 100), bundles=b, thr_in=1),
        }
    )


def test_transfer_swap_counts_as_gain_only_in_debug_mode():
    """TransferShedder.findBundlesForUnloading adds a swap to trafficMarkedToGain inside its
    ``if (debugMode)`` block (debugMode = loadBalancerDebugModeEnabled or debug logging): with the
    default (off) the max broker gets no credit for what a swap brings back, so the next bundle of the
    max broker is judged against the whole amount already marked and one more bundle comes back."""
    base = {"loadBalancerSheddingConditionHitCountThreshold": 0}
    debug = run_shedder("TransferShedder", _swap_cluster(), cfg(**base, loadBalancerDebugModeEnabled=True))
    default = run_shedder("TransferShedder", _swap_cluster(), cfg(**base))
    assert cfg().loadBalancerDebugModeEnabled is False
    swapped_back = {u.bundle for u in default.unloads if u.source == "broker1:8080"}
    assert swapped_back - {u.bundle for u in debug.unloads} == {"t/A/0x2FFFFFFF_0x3FFFFFFF"}
    assert {u.bundle for u in debug.unloads if u.source == "broker2:8080"} == {
        u.bundle for u in default.unloads if u.source == "broker2:8080"
    }


# --- split trigger: nothing with a single broker; never a system namespace --------------------------


def test_no_split_in_a_single_broker_cluster():
    """ModularLoadManagerImpl.checkNamespaceBundleSplit returns early when at most one broker is known
    (PR #20190, "Skip split bundle if only one broker"): the halves would only land on the same broker."""
    alone = snapshot({"only:8080": broker_report(bundles=_hot_bundles("t/ns"))})
    plan, _ = plan_cycle(alone, cfg(), StrategyState(), random.Random(0), shedding="OverloadShedder")
    assert plan.splits == ()
    assert any("split: skipped with 1 broker(s)" in n for n in plan.notes)
    two = snapshot({"a:8080": broker_report(bundles=_hot_bundles("t/ns")), "b:8080": broker_report()})
    plan, _ = plan_cycle(two, cfg(), StrategyState(), random.Random(0), shedding="OverloadShedder")
    assert [s.bundle for s in plan.splits] == ["t/ns/0x00000000_0x80000000"]


@pytest.mark.parametrize(
    "namespace",
    ["pulsar/system", "pulsar/cluster-a/broker-0:8080", "pulsar/broker-0:8080", "sla-monitor/cluster-a/broker-0:8080"],
)
def test_split_trigger_never_picks_a_system_namespace(namespace):
    """NamespaceService.isSystemServiceNamespace: pulsar/system, heartbeat v1 and v2, SLA monitor."""
    snap = snapshot({"a:8080": broker_report(bundles=_hot_bundles(namespace)), "b:8080": broker_report()})
    plan, _ = plan_cycle(snap, cfg(), StrategyState(), random.Random(0), shedding="OverloadShedder")
    assert plan.splits == ()


# --- the grace period boundary ----------------------------------------------------------------------


def test_grace_period_boundary_is_inclusive():
    """ModularLoadManagerImpl.doLoadShedding removes an entry with ``unloadedAt < now − grace``: a
    bundle unloaded exactly a grace period ago is still protected, one a millisecond earlier is not."""
    snap = snapshot({"a:8080": broker_report()}, taken_at=NOW)
    grace = cfg().grace_period_ms
    recent = {"t/ns/0x00000000_0x00000001": NOW - grace, "t/ns/0x00000001_0x00000002": NOW - grace - 1}
    load, _, kept = build_load_data(snap, {}, recent, grace)
    assert kept == {"t/ns/0x00000000_0x00000001": NOW - grace}
    assert dict(load.recently_unloaded) == kept


# --- OverloadShedder (any classic shedder) with AvgShedder placement ----------------------------------


def _overloaded_cluster():
    bundles = {f"t/ns/0x{i:08x}_0x{i + 1:08x}": stats(rate_in=100 * (i + 1), thr_in=1e6 * (i + 1)) for i in range(4)}
    return {
        "hot:8080": broker_report(cpu=(95, 100), bundles=bundles),
        "idle:8080": broker_report(cpu=(5, 100), bundles={"t/x/0x00000000_0x00000001": stats(rate_in=10)}),
        "busy:8080": broker_report(cpu=(50, 100), bundles={"t/y/0x00000000_0x00000001": stats(rate_in=5000)}),
    }


def test_classic_shedder_with_avgshedder_placement_places_with_least_long_term_message_rate():
    """ModularLoadManagerImpl.createLoadBalanceStrategies pairs AvgShedder placement only with the
    AvgShedder shedder; with a classic shedder the placement is LeastLongTermMessageRate
    (ModularLoadManagerImplStrategyTest.testExplicitClassicShedderFallsBackToLeastLongTermMessageRatePlacement,
    where the placement key still reads AvgShedder). We apply the same override and say so in the plan."""
    snap = snapshot(_overloaded_cluster())
    plan, _ = plan_cycle(
        snap, cfg(), StrategyState(), random.Random(0), shedding="OverloadShedder", placement="AvgShedder"
    )
    assert plan.placement == "LeastLongTermMessageRate"
    assert any("works only with the AvgShedder shedder" in n for n in plan.notes)
    assert plan.unloads and {u.destination for u in plan.unloads} == {"idle:8080"}


def test_classic_shedder_with_avgshedder_placement_through_the_cli(tmp_path):
    path = write_snapshot(tmp_path / "snap.json", _overloaded_cluster())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(
            [
                "rebalance",
                "--snapshot",
                str(path),
                "--strategy",
                "OverloadShedder",
                "--set",
                "loadBalancerLoadPlacementStrategy=AvgShedder",
                "--output",
                "json",
            ]
        )
    assert code == 0
    plan = json.loads(out.getvalue())
    assert plan["placement"] == "LeastLongTermMessageRate"
    assert any("works only with the AvgShedder shedder" in n for n in plan["notes"])


def test_avgshedder_with_another_placement_is_kept():
    """ModularLoadManagerImplStrategyTest.testAvgShedderSheddingWithOtherPlacementIsNotPaired."""
    snap = snapshot(_overloaded_cluster())
    plan, _ = plan_cycle(
        snap, cfg(), StrategyState(), random.Random(0), shedding="AvgShedder", placement="LeastResourceUsageWithWeight"
    )
    assert plan.placement == "LeastResourceUsageWithWeight"


# --- brokers that do not load persistent topics ---------------------------------------------------------


def test_brokers_without_persistent_topics_are_not_destinations():
    """LoadManagerShared.applyNamespacePolicies with ModularLoadManagerImpl's brokerTopicLoadingPredicate:
    the bundle of an unload is built from its name (hasNonPersistentTopic false), so only brokers whose
    report says persistentTopicsEnabled are candidates; nonPersistentTopicsEnabled does not matter."""
    brokers = _overloaded_cluster()
    brokers["idle:8080"]["persistentTopicsEnabled"] = False
    brokers["busy:8080"]["nonPersistentTopicsEnabled"] = False
    snap = snapshot(brokers)
    assert snap.brokers["idle:8080"].persistentTopicsEnabled is False
    plan, _ = plan_cycle(snap, cfg(), StrategyState(), random.Random(0), shedding="OverloadShedder")
    assert plan.unloads and {u.destination for u in plan.unloads} == {"busy:8080"}


def test_no_destination_when_no_other_broker_loads_persistent_topics():
    brokers = _overloaded_cluster()
    for name in ("idle:8080", "busy:8080"):
        brokers[name]["persistentTopicsEnabled"] = False
    plan, _ = plan_cycle(snapshot(brokers), cfg(), StrategyState(), random.Random(0), shedding="OverloadShedder")
    assert plan.unloads == ()
    assert any("no broker other than its owner" in n for n in plan.notes)


def test_topic_mode_flags_must_be_booleans():
    report = broker_report()
    report["persistentTopicsEnabled"] = "yes"
    with pytest.raises(SnapshotError, match="persistentTopicsEnabled: expected true or false"):
        snapshot({"a:8080": report})


def test_transfer_never_moves_a_bundle_to_a_broker_without_persistent_topics():
    """TransferShedder.isTransferable runs the broker filters, which drop a min broker that does not load
    persistent topics: its pair moves nothing, and the next pair still has the same min broker."""

    def report(cpu, ns, persistent=True):
        bundles = {
            f"t/{ns}/0x00000000_0x0FFFFFFF": stats(thr_out=2e6),
            f"t/{ns}/0x0FFFFFFF_0xFFFFFFFF": stats(thr_out=6e6),
        }
        doc = broker_report(cpu=(cpu, 100), bundles=bundles, thr_in=1)
        doc["persistentTopicsEnabled"] = persistent
        return doc

    config = cfg(loadBalancerSheddingConditionHitCountThreshold=0)
    brokers = {"b1:8080": report(2, "A"), "b2:8080": report(4, "B"), "b3:8080": report(90, "C")}
    assert {u.destination for u in run_shedder("TransferShedder", snapshot(brokers), config).unloads} == {"b1:8080"}
    brokers["b1:8080"] = report(2, "A", persistent=False)
    result = run_shedder("TransferShedder", snapshot(brokers), config)
    assert result.unloads == ()
