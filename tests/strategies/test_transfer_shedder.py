"""TransferShedder beyond Pulsar's own tests (TransferShedderTest is in tests/conformance/)."""

from strategies.shedding.transfer import compare_bundle_stats, top_bundles
from strategies.snapshots import BundleStats
from tests.builders import broker_report, cfg, run_shedder, snapshot, stats

# TransferShedderTest.getContext(): hit count threshold 0 and debug mode on (which, in Pulsar, also makes a
# swap count as traffic gained by the max broker).
NO_HIT_COUNT = {"loadBalancerSheddingConditionHitCountThreshold": 0, "loadBalancerDebugModeEnabled": True}


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
