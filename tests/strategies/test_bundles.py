"""Bundle naming, default boundaries and topic → bundle hashing (§7)."""

import pytest

from pulsar_lb_operator.strategies import bundles


def test_crc32_of_full_topic_name():
    assert bundles.topic_hash("persistent://tenant/ns/topic") == 2161282094
    assert bundles.topic_hash("a") == 3904355907


def test_default_boundaries_for_four_bundles():
    assert [bundles.format_boundary(b) for b in bundles.default_boundaries(4)] == [
        "0x00000000",
        "0x40000000",
        "0x80000000",
        "0xc0000000",
        "0xffffffff",
    ]


def test_find_range_half_open_except_the_last():
    bounds = bundles.default_boundaries(4)
    assert str(bundles.find_range(bounds, 0x40000000)) == "0x40000000_0x80000000"
    assert str(bundles.find_range(bounds, 0x3FFFFFFF)) == "0x00000000_0x40000000"
    assert str(bundles.find_range(bounds, 0xFFFFFFFF)) == "0xc0000000_0xffffffff"
    topic = "persistent://tenant/ns/topic"  # hash 0x80d2d12e
    assert bundles.bundle_of_topic("tenant/ns", bounds, topic) == "tenant/ns/0x80000000_0xc0000000"


def test_bundle_names_parse_uppercase_and_reject_garbage():
    ns, r = bundles.split_bundle_name("t/ns/0x0FFFFFFF_0xFFFFFFFF")
    assert ns == "t/ns" and (r.lower, r.upper) == (0x0FFFFFFF, 0xFFFFFFFF)
    for bad in ("t/ns", "0x0_0x1", "t/ns/0x2_0x1", "t/ns/zz_0x1", "t/ns/0x0_0x1ffffffff"):
        with pytest.raises(bundles.BundleNameError):
            bundles.split_bundle_name(bad)


def test_system_namespaces():
    for ns in ("pulsar/system", "pulsar/us-west/broker-1:8080", "pulsar/broker-1:8080", "sla-monitor/us-west/b:8080"):
        assert bundles.is_system_namespace(ns)
    assert not bundles.is_system_namespace("public/default")


def test_apply_split_and_width_one_bundles():
    bounds = bundles.default_boundaries(2)
    assert bundles.apply_split(bounds, bundles.BundleRange(0, 0x80000000), [0x40000000]) == [
        0,
        0x40000000,
        0x80000000,
        0xFFFFFFFF,
    ]
    assert not bundles.BundleRange(5, 6).can_split()
    with pytest.raises(bundles.BundleNameError):
        bundles.apply_split(bounds, bundles.BundleRange(0, 0x80000000), [0x90000000])
