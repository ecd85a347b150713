"""Split algorithms (the concept page's examples) and the automatic trigger beyond Pulsar's own tests
(those are in tests/conformance/test_bundle_split.py)."""

from pulsar_lb_operator.strategies.bundles import BundleRange
from pulsar_lb_operator.strategies.loaddata import build_load_data
from pulsar_lb_operator.strategies.splitting import algorithms
from pulsar_lb_operator.strategies.splitting.trigger import find_bundles_to_split
from tests.builders import broker_report, cfg, snapshot, stats

MB = 1024 * 1024
# The concept page's six topics on [0x00000000, 0x80000000): hash → (msg rate, throughput)
T = {
    0x10000000: (100, 10 * MB),
    0x15000000: (200, 20 * MB),
    0x24000000: (300, 30 * MB),
    0x39000000: (400, 40 * MB),
    0x58000000: (500, 50 * MB),
    0x76000000: (600, 60 * MB),
}


def between(a: int, b: int) -> int:
    return a + (b - a) // 2 + 1  # Pulsar's flow_or_qps cut position between two topic hashes


def test_range_equally_divide():
    assert algorithms.range_equally_divide(BundleRange(0x00000000, 0x80000000)) == [0x40000000]
    assert algorithms.range_equally_divide(BundleRange(10, 0xFFFFFFFF)) == [2147483652]


def test_topic_count_equally_divide_concept_example():
    hashes = [0x10000000, 0x20000000, 0x35000000, 0x65000000, 0x70000000, 0x75000000]
    [boundary] = algorithms.topic_count_positions(hashes)
    # The concept page picks 0x50000000; Pulsar's midpoint of the middle gap is 0x4d000000. Both
    # leave three topics on each side.
    assert boundary == 0x4D000000
    for cut in (boundary, 0x50000000):
        assert sum(h < cut for h in hashes) == 3


def test_concept_specified_positions_two_large_topics():
    got = algorithms.specified_positions_divide(BundleRange(0x00000000, 0x40000000), ["t1", "t2"], [0x33000000])
    assert got == [0x33000000] and 0x30000000 < got[0] < 0x35000000


def test_flow_or_qps_case1_msg_rate_reaches_450_first():
    got = algorithms.flow_or_qps_positions(T, 450, 200, 10)
    h = sorted(T)
    # cuts between t2|t3, t3|t4, t4|t5 and t5|t6, as the concept page walks through
    assert got == [between(h[1], h[2]), between(h[2], h[3]), between(h[3], h[4]), between(h[4], h[5])]


def test_flow_or_qps_case2_throughput_reaches_90_first():
    h = sorted(T)
    assert algorithms.flow_or_qps_positions(T, 1900, 90, 10) == [between(h[2], h[3]), between(h[4], h[5])]


def test_flow_or_qps_case3_both_at_once():
    h = sorted(T)
    assert algorithms.flow_or_qps_positions(T, 1100, 110, 10) == [between(h[3], h[4])]
    # The page prints 0x48500000; (0x39000000 + 0x58000000) / 2 is 0x48800000, and Pulsar adds 1.
    assert between(h[3], h[4]) == 0x48800000 + 1


def test_flow_or_qps_below_threshold_does_not_split():
    assert algorithms.flow_or_qps_positions(T, 10000, 1000, 10) == []


def _hot(topics=5, rate=60000.0, **kwargs):
    return stats(rate_in=rate, rate_out=1, topics=topics, **kwargs)


def _trigger(brokers, config=None, **snap_kwargs):
    snap = snapshot(brokers, **snap_kwargs)
    load, _, _ = build_load_data(snap, {}, {}, 0)
    return find_bundles_to_split(load, config or cfg())


def test_split_trigger_respects_namespace_maximum_bundles():
    bundles = {
        f"ten/ns/{r}": _hot() for r in ("0x00000000_0x20000000", "0x20000000_0x40000000", "0x40000000_0x60000000")
    }
    splits, notes = _trigger({"b:8080": broker_report(bundles=bundles)}, cfg(loadBalancerNamespaceMaximumBundles=3))
    assert splits == [] and any("loadBalancerNamespaceMaximumBundles" in n for n in notes)
    splits, _ = _trigger({"b:8080": broker_report(bundles=bundles)}, cfg(loadBalancerNamespaceMaximumBundles=5))
    assert len(splits) + 3 == 5  # picked + current == maximum


def test_split_trigger_reasons_and_range_boundaries():
    splits, _ = _trigger(
        {
            "b:8080": broker_report(
                bundles={
                    "t/ns/0x00000000_0x80000000": _hot(topics=1001, rate=10),
                    "t/ns/0x80000000_0xffffffff": stats(rate_in=10, topics=3, consumers=600, producers=500),
                    "t/ns2/0x00000000_0xffffffff": stats(thr_in=101 * MB, topics=2),
                    "pulsar/b:8080/0x00000000_0xffffffff": _hot(),
                }
            )
        }
    )
    by_bundle = {s.bundle: s for s in splits}
    assert set(by_bundle) == {"t/ns/0x00000000_0x80000000", "t/ns/0x80000000_0xffffffff", "t/ns2/0x00000000_0xffffffff"}
    assert "topics 1001 > 1000" in by_bundle["t/ns/0x00000000_0x80000000"].reason
    assert "sessions 1100 > 1000" in by_bundle["t/ns/0x80000000_0xffffffff"].reason
    assert "throughput" in by_bundle["t/ns2/0x00000000_0xffffffff"].reason
    assert by_bundle["t/ns/0x00000000_0x80000000"].boundaries == (0x40000000,)
    assert all(s.unload for s in splits)


def test_split_trigger_topic_count_uses_snapshot_topics_or_leaves_it_to_the_owner():
    config = cfg(defaultNamespaceBundleSplitAlgorithm="topic_count_equally_divide")
    brokers = {"b:8080": broker_report(bundles={"t/ns/0x00000000_0xffffffff": _hot(topics=3)})}
    topics = {"t/ns/0x00000000_0xffffffff": {t: {"msgRateIn": 1.0} for t in ("a", "b", "c")}}
    [split], _ = _trigger(brokers, config, topics=topics)
    assert split.boundaries == (1010591668,)
    [split], _ = _trigger(brokers, config)
    assert split.boundaries == () and "owner broker" in split.reason
