"""TransferShedder beyond Pulsar's own tests (TransferShedderTest is in tests/conformance/)."""

from pulsar_lb_operator.strategies import StrategyState
from pulsar_lb_operator.strategies.shedding.transfer import compare_bundle_stats, top_bundles
from pulsar_lb_operator.strategies.snapshots import BundleStats
from tests.builders import broker_report, cfg, run_shedder, snapshot, stats
from tests.conformance.test_transfer_shedder import base_cluster  # TransferShedderTest.setupContext

# TransferShedderTest.getContext(): hit count threshold 0 and debug mode on (which, in Pulsar, also makes a
# swap count as traffic gained by the max broker).
NO_HIT_COUNT = {"loadBalancerSheddingConditionHitCountThreshold": 0, "loadBalancerDebugModeEnabled": True}


BASE = {
    ("broker5:8080", "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF", "broker1:8080"),
    ("broker4:8080", "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF", "broker2:8080"),
}


def decisions(result):
    return {(u.source, u.bundle, u.destination) for u in result.unloads}


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


def test_a_broker_counts_as_recently_unloaded_only_when_one_of_its_unloads_was_sent():
    """UnloadScheduler puts a broker in recentlyUnloadedBrokers after one of its unloads succeeded, never for a
    decision alone. The plan records its sources at once (a cycle that dies mid-way keeps what it sent);
    ``forget_unloads`` — the cycle's, for what was refused, skipped, dry-run or only proposed — takes a source back
    out when none of its unloads is left."""
    old_entry = 1_700_000_000_000  # older than loadBalanceSheddingDelayInSeconds: LoadStats.update drops it
    state = StrategyState().evolve(transfer_recent_brokers={"broker4:8080": old_entry})
    result = run_shedder("TransferShedder", base_cluster(), cfg(**NO_HIT_COUNT), state)
    assert decisions(result) == BASE
    planned = result.state.transfer_recent_brokers
    assert set(planned) == {"broker4:8080", "broker5:8080"} and old_entry not in planned.values()
    e1, d1 = (b for _, b, _ in sorted(BASE, reverse=True))
    assert dict(result.state.forget_unloads({e1, d1}).transfer_recent_brokers) == {}  # a dry run: nothing sent
    only_d1_sent = result.state.forget_unloads({e1})
    assert dict(only_d1_sent.transfer_recent_brokers) == {"broker4:8080": planned["broker4:8080"]}
    assert StrategyState.from_json(only_d1_sent.to_json()) == only_d1_sent


def test_forgetting_a_sources_unloads_restores_the_entry_it_had_before_the_plan():
    """A source whose entry LoadStats.update kept (an outdated broker is skipped before the cool-down check) gets it
    back when none of its unloads was sent."""
    state = StrategyState().evolve(
        transfer_recent_brokers={"a:8080": 2_000, "b:8080": 2_000},
        transfer_planned={"t/ns/0x00000000_0x80000000": "a:8080", "t/ns/0x80000000_0xffffffff": "b:8080"},
        transfer_recent_before={"a:8080": 1_000},
    )
    forgotten = state.forget_unloads({"t/ns/0x00000000_0x80000000", "t/ns/0x80000000_0xffffffff"})
    assert dict(forgotten.transfer_recent_brokers) == {"a:8080": 1_000}


def test_an_elm_snapshot_an_earlier_version_wrote_still_plans():
    """Before the published order was kept, an ELM snapshot's ``topBundles`` was their count: its top bundles are
    then taken in TopKBundles' order, and the plan is the same."""
    from tests.builders import elm_report
    from tests.conformance.test_transfer_shedder import base_reports

    brokers = {}
    for broker_id, report in base_reports().items():
        doc = elm_report(report)
        doc["extensibleLoadManager"]["topBundles"] = len(doc["extensibleLoadManager"]["topBundles"])
        brokers[broker_id] = doc
    assert decisions(run_shedder("TransferShedder", snapshot(brokers), cfg(**NO_HIT_COUNT))) == BASE
