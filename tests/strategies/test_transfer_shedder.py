"""TransferShedder beyond Pulsar's own tests (TransferShedderTest is in tests/conformance/)."""

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
