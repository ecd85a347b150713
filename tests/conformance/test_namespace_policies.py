"""Pulsar's tests of namespace policies: isolation policies (NamespaceIsolationPoliciesTest, the isolation cases
of ModularLoadManagerImplTest), anti-affinity groups (AntiAffinityNamespaceGroupTest) and the extensible
manager's policy checks (TransferShedderTest). Each test names the Java test it mirrors.

LoadManagerSharedTest has no policy case (only removeMostServicingBrokersForNamespace). Not mirrored:
AntiAffinityNamespaceGroupTest.testClusterDomain (empty in Pulsar), TransferShedderTest.testFilterHasException (a
throwing filter), NamespaceIsolationPoliciesTest's serialization, set and delete cases (the operator never
writes policies).
"""

import random

import pytest

from pulsar_lb_operator.strategies import StrategyState, plan_cycle
from pulsar_lb_operator.strategies import policies as P
from pulsar_lb_operator.strategies.documents import Reader
from pulsar_lb_operator.strategies.loaddata import build_load_data
from pulsar_lb_operator.strategies.placement import least_long_term_message_rate as lltmr
from pulsar_lb_operator.strategies.placement.common import PlacementContext
from pulsar_lb_operator.strategies.planner import select_broker_for_assignment
from pulsar_lb_operator.strategies.snapshots import (
    SnapshotError,
    parse_snapshot,
)
from tests.builders import broker_report, cfg, run_shedder, snapshot, snapshot_doc, stats
from tests.conformance.test_transfer_shedder import NO_HIT_COUNT, base_cluster, decisions


def policy(namespaces, primary, secondary=(), min_limit=1, usage_threshold=80):
    return {
        "namespaces": list(namespaces),
        "primary": list(primary),
        "secondary": list(secondary),
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": str(min_limit), "usage_threshold": str(usage_threshold)},
        },
    }


def policies(isolation=None, groups=None):
    doc = {
        "isolationPolicies": isolation or {},
        "namespaces": {ns: {"antiAffinityGroup": g} for ns, g in (groups or {}).items()},
    }
    return P.parse_policies(Reader(doc, "snapshot", SnapshotError))


# --- NamespaceIsolationPoliciesTest -------------------------------------------------------------------

DEFAULT_JSON = {
    "policy1": {
        "namespaces": ["pulsar/use/test.*"],
        "primary": ["prod1-broker[1-3].messaging.use.example.com"],
        "secondary": ["prod1-broker.*.use.example.com"],
        "auto_failover_policy": {
            "parameters": {"min_limit": "3", "usage_threshold": "100"},
            "policy_type": "min_available",
        },
    }
}


def test_get_namespace_isolation_policy_by_namespace():
    """NamespaceIsolationPoliciesTest.testGetNamespaceIsolationPolicyByNamespace: no policy for
    no/such/namespace; policy1 for pulsar/use/testns-1 (the namespace regex is a whole-string match)."""
    ps = policies(DEFAULT_JSON)
    assert ps.policy_for("no/such/namespace") is None
    found = ps.policy_for("pulsar/use/testns-1")
    assert found is not None and found.name == "policy1" and found.min_limit == 3 and found.usage_threshold == 100


def test_set_policy_parameters_as_numbers():
    """NamespaceIsolationPoliciesTest.testSetPolicy: parameters given as JSON numbers (min_limit 2, usage 80)
    read as MinAvailablePolicy reads them; the first policy whose namespaces match is the namespace's."""
    second = {
        "namespaces": ["pulsar/use/TESTNS.*"],
        "primary": ["prod1-broker[45].messaging.use.example.com"],
        "secondary": ["prod1-broker.*.use.example.com"],
        "auto_failover_policy": {"policy_type": "min_available", "parameters": {"min_limit": 2, "usage_threshold": 80}},
    }
    ps = policies({**DEFAULT_JSON, "policy2": second})
    assert [p.name for p in ps.isolation] == ["policy1", "policy2"]
    assert ps.policy_for("pulsar/use/TESTNS.1").name == "policy2"
    assert (ps.policy_for("pulsar/use/TESTNS.1").min_limit, ps.policy_for("pulsar/use/TESTNS.1").usage_threshold) == (
        2,
        80,
    )


def test_broker_assignment():
    """NamespaceIsolationPoliciesTest.testBrokerAssignment: prod1-broker1 is primary and prod1-broker4 secondary
    for pulsar/use/testns-1; use.example.com is shared (no policy for pulsar/use1/testns-1)."""
    ps = policies(DEFAULT_JSON)
    ns_policy = ps.policy_for("pulsar/use/testns-1")
    assert ns_policy.is_primary("prod1-broker1.messaging.use.example.com")
    assert not ns_policy.is_primary("prod1-broker4.messaging.use.example.com")
    assert ns_policy.is_secondary("prod1-broker4.messaging.use.example.com")
    assert ps.policy_for("pulsar/use1/testns-1") is None and ps.is_shared("use.example.com")
    # NamespaceIsolationPolicies.isSharedBroker: a policy's secondary broker is still shared
    assert ps.is_shared("prod1-broker4.messaging.use.example.com")
    assert not ps.is_shared("prod1-broker2.messaging.use.example.com")


# --- ModularLoadManagerImplTest: isolation ------------------------------------------------------------

BROKER1, BROKER2, SHARED = "localhost0:8080", "localhost1:8080", "broker3:8080"


@pytest.mark.parametrize(
    ("min_limit", "available", "expected"),
    [
        (1, {SHARED, BROKER1, BROKER2}, [BROKER1]),
        (1, {SHARED, BROKER2}, [BROKER2]),
        (1, {SHARED}, []),
        (2, {SHARED, BROKER1, BROKER2}, [BROKER1, BROKER2]),
        (2, {SHARED, BROKER2}, [BROKER2]),
        (2, {SHARED}, []),
    ],
)
def test_namespace_isolation_policies_for_primary_and_secondary_brokers(min_limit, available, expected):
    """ModularLoadManagerImplTest.testNamespaceIsolationPoliciesForPrimaryAndSecondaryBrokers: primary =
    localhost0, secondary = localhost1, shared = broker3 (hosts: the broker id without its port)."""
    ps = policies({"p": policy(["my-property/use/my-ns.*"], ["localhost0"], ["localhost1"], min_limit)})
    assert P.apply_namespace_policies("my-property/use/my-ns", available, ps) == expected


def test_load_shedding_with_namespace_isolation_policies():
    """ModularLoadManagerImplTest.testLoadSheddingWithNamespaceIsolationPolicies: no policy → may unload; a
    policy whose only broker is absent → the owner localhost1:8080 may not; a policy matching both brokers'
    host (localhost) → the owner may (the other broker is allowed)."""
    ns, owner, other = "my-tenant/use/my-ns", "localhost:8080", "localhost:8081"
    available = {owner, other}
    none = P.apply_namespace_policies(ns, available, policies())
    assert P.should_namespace_policies_unload(owner, none)
    only_absent = policies({"p": policy([f"{ns}.*"], ["localhost1"], ["localhost1"])})
    assert not P.should_namespace_policies_unload(
        "localhost1:8080", P.apply_namespace_policies(ns, available, only_absent)
    )
    both = policies({"p": policy([f"{ns}.*"], ["localhost"], ["localhost"])})
    assert P.should_namespace_policies_unload(owner, P.apply_namespace_policies(ns, available, both))


def test_load_shedding_with_namespace_isolation_policies_through_the_planner():
    """The same rule in doLoadShedding: the shedder picks the isolated bundle (it knows no policies), and it is
    kept because its policy allows only its owner (shouldNamespacePoliciesUnload); the plan says why. A shared
    namespace's bundle picked the same way moves, to the shared broker."""

    def plan_for(hot: str):
        bundles = {
            f"{hot}/0x00000000_0x80000000": stats(rate_in=500, thr_in=5e5),
            "x/ns/0x00000000_0x80000000": stats(rate_in=1),
        }
        doc = snapshot_doc(
            {
                "a.example:8080": broker_report(cpu=(95, 100), bundles=bundles),
                "b.example:8080": broker_report(cpu=(5, 100)),
            }
        )
        doc["isolationPolicies"] = {"iso-only-a": policy(["iso/.*"], ["a\\.example"])}
        plan, _ = plan_cycle(parse_snapshot(doc), cfg(), StrategyState(), random.Random(0), "OverloadShedder")
        return plan

    kept = plan_for("iso/ns")
    assert kept.unloads == ()
    assert any("keep iso/ns/0x00000000_0x80000000" in n and "shouldNamespacePoliciesUnload" in n for n in kept.notes)
    moved = plan_for("open/ns")
    assert [(u.bundle, u.destination) for u in moved.unloads] == [("open/ns/0x00000000_0x80000000", "b.example:8080")]


# --- AntiAffinityNamespaceGroupTest -------------------------------------------------------------------

NS = "my-tenant/use/my-ns"
GROUP = {f"{NS}{i}": "my-antiaffinity" for i in range(5)}


def _counts(namespace, owned):
    return P.anti_affinity_namespace_owned_brokers(namespace, owned, policies(groups=GROUP))


def test_anti_affinity_namespace_filtering_with_domain():
    """AntiAffinityNamespaceGroupTest.testAntiAffinityNamespaceFilteringWithDomain: domain-0 = b0, b1;
    domain-1 = b2, b3. ns0 → any of the 4; ns1 → domain-1 only; ns2 → b1 or b3; ns3 → b3; ns4 → all 4."""
    brokers = ["brokerName-0", "brokerName-1", "brokerName-2", "brokerName-3"]
    domains = {
        "brokerName-0": "domain-0",
        "brokerName-1": "domain-0",
        "brokerName-2": "domain-1",
        "brokerName-3": "domain-1",
    }
    owned: dict[str, list[str]] = {}
    steps = [
        ("brokerName-0", set(brokers)),
        ("brokerName-2", {"brokerName-2", "brokerName-3"}),
        ("brokerName-1", {"brokerName-1", "brokerName-3"}),
        ("brokerName-3", {"brokerName-3"}),
        (None, set(brokers)),
    ]
    for i, (chosen, expected) in enumerate(steps):
        namespace = f"{NS}{i}"
        assert set(P.filter_anti_affinity_group_owned_brokers(brokers, _counts(namespace, owned), domains)) == expected
        if chosen:
            owned[chosen] = [namespace]  # selectBrokerForNamespace: the broker now owns this namespace


def test_anti_affinity_namespace_filtering_without_domain():
    """AntiAffinityNamespaceGroupTest.testAntiAffinityNamespaceFilteringWithoutDomain: ns0 → b0, b1, b2; ns1 → b1,
    b2; ns2 → b2; ns3 → all three again."""
    brokers = ["broker-0", "broker-1", "broker-2"]
    owned: dict[str, list[str]] = {}
    for i, (chosen, expected) in enumerate(
        [("broker-0", brokers), ("broker-1", ["broker-1", "broker-2"]), ("broker-2", ["broker-2"]), (None, brokers)]
    ):
        namespace = f"{NS}{i}"
        assert P.filter_anti_affinity_group_owned_brokers(brokers, _counts(namespace, owned)) == expected
        if chosen:
            owned[chosen] = [namespace]


def test_no_group_filters_nothing():
    """LoadManagerShared.filterAntiAffinityGroupOwnedBrokers: a namespace without a group (counts null) keeps
    every candidate."""
    assert P.anti_affinity_namespace_owned_brokers("other/ns", {"b": ["other/ns"]}, policies(groups=GROUP)) is None
    assert P.filter_anti_affinity_group_owned_brokers(["a", "b"], None) == ["a", "b"]


def test_groups_compare_ignoring_case():
    """LoadManagerShared.countAntiAffinityNamespaceOwnedBrokers: ``antiAffinityGroup.equalsIgnoreCase``."""
    ps = policies(groups={"t/a": "Group", "t/b": "gROUP", "t/c": "other"})
    assert P.anti_affinity_namespace_owned_brokers("t/a", {"x": ["t/b"], "y": ["t/c"]}, ps) == {"x": 1}


def test_load_shedding_util_with_anti_affinity_namespace():
    """AntiAffinityNamespaceGroupTest.testLoadSheddingUtilWithAntiAffinityNamespace: broker-0 owns ns0 → it may
    unload ns0; broker-1 owns ns1 → still; broker-2 owns ns2 → no: every broker owns one of the group."""
    candidates = ["broker-0", "broker-1", "broker-2"]
    owned = {"broker-0": [f"{NS}0"]}
    assert P.should_anti_affinity_namespace_unload("broker-0", candidates, _counts(f"{NS}0", owned))
    owned["broker-1"] = [f"{NS}1"]
    assert P.should_anti_affinity_namespace_unload("broker-0", candidates, _counts(f"{NS}0", owned))
    owned["broker-2"] = [f"{NS}2"]
    assert not P.should_anti_affinity_namespace_unload("broker-0", candidates, _counts(f"{NS}0", owned))


def test_load_shedding_with_anti_affinity_namespace():
    """AntiAffinityNamespaceGroupTest.testLoadSheddingWithAntiAffinityNamespace: ns0 owned by the primary broker
    alone, another broker available → it may be unloaded (through the planner: its bundle moves)."""
    bundles = {
        f"{NS}0/0x00000000_0xffffffff": stats(rate_in=500, thr_in=5e5),
        "t/x/0x00000000_0x80000000": stats(rate_in=10),
    }
    doc = snapshot_doc(
        {"primary:8080": broker_report(cpu=(95, 100), bundles=bundles), "secondary:8080": broker_report()}
    )
    doc["namespaces"] = {ns: {"antiAffinityGroup": g} for ns, g in GROUP.items()}
    snap = parse_snapshot(doc)
    load, _, _ = build_load_data(snap, {}, {}, cfg().grace_period_ms)
    counts = P.anti_affinity_namespace_owned_brokers(f"{NS}0", {"primary:8080": [f"{NS}0", "t/x"]}, snap.policies)
    assert P.should_anti_affinity_namespace_unload("primary:8080", ["primary:8080", "secondary:8080"], counts)
    plan, _ = plan_cycle(snap, cfg(), StrategyState(), random.Random(0), "OverloadShedder")
    assert [(u.bundle, u.destination) for u in plan.unloads] == [(f"{NS}0/0x00000000_0xffffffff", "secondary:8080")]
    assert load.snapshot.policies.group_of(f"{NS}0") == "my-antiaffinity"


def test_broker_selection_for_anti_affinity_group():
    """AntiAffinityNamespaceGroupTest.testBrokerSelectionForAntiAffinityGroup (without failure domains): two
    namespaces of one group assigned one after the other (selectBrokerForAssignment) go to different brokers."""
    doc = snapshot_doc({"broker1:8080": broker_report(), "broker2:8080": broker_report()})
    doc["namespaces"] = {
        "tenant/use/ns1": {"antiAffinityGroup": "group"},
        "tenant/use/ns2": {"antiAffinityGroup": "group"},
    }
    snap = parse_snapshot(doc)
    for seed in range(10):
        load, _, _ = build_load_data(snap, {}, {}, cfg().grace_period_ms)
        ctx = PlacementContext(load, cfg(), random.Random(seed))
        first = select_broker_for_assignment("tenant/use/ns1/0x00000000_0xffffffff", lltmr.select, ctx)
        second = select_broker_for_assignment("tenant/use/ns2/0x00000000_0xffffffff", lltmr.select, ctx)
        assert first != second


def test_broker_selection_for_anti_affinity_group_with_failure_domains():
    """AntiAffinityNamespaceGroupTest.testBrokerSelectionForAntiAffinityGroup, with its failure domains
    (domain1: broker1, domain2: broker2; failureDomainsEnabled): the two namespaces of the group land in
    different domains. With two brokers per domain the domain decides: without domains the second namespace
    may go to the first one's neighbour in the same domain, with them it never does."""
    doc = snapshot_doc({"broker1:8080": broker_report(), "broker2:8080": broker_report()})
    doc["namespaces"] = {
        "tenant/use/ns1": {"antiAffinityGroup": "group"},
        "tenant/use/ns2": {"antiAffinityGroup": "group"},
    }
    doc["failureDomains"] = {"domain1": {"brokers": ["broker1:8080"]}, "domain2": {"brokers": ["broker2:8080"]}}
    snap = parse_snapshot(doc)
    assert snap.policies.domains == {"broker1:8080": "domain1", "broker2:8080": "domain2"}
    assert snap.to_json()["failureDomains"] == doc["failureDomains"]  # the admin API's own JSON, kept
    domain_of = snap.policies.domains
    for seed in range(10):
        load, _, _ = build_load_data(snap, {}, {}, cfg().grace_period_ms)
        ctx = PlacementContext(load, cfg(), random.Random(seed))
        first = select_broker_for_assignment("tenant/use/ns1/0x00000000_0xffffffff", lltmr.select, ctx)
        second = select_broker_for_assignment("tenant/use/ns2/0x00000000_0xffffffff", lltmr.select, ctx)
        assert domain_of[first] != domain_of[second]

    four = {f"b{i}:8080": broker_report() for i in range(4)}
    doc = snapshot_doc(four)
    doc["namespaces"] = {f"tenant/use/ns{i}": {"antiAffinityGroup": "group"} for i in (1, 2)}
    with_domains = {**doc, "failureDomains": {"east": {"brokers": ["b0:8080", "b1:8080"]}}}  # b2, b3: "default"
    same_domain = 0
    for seed in range(20):
        for document, spread in ((doc, False), (with_domains, True)):
            snap = parse_snapshot(document)
            load, _, _ = build_load_data(snap, {}, {}, cfg().grace_period_ms)
            ctx = PlacementContext(load, cfg(), random.Random(seed))
            first = select_broker_for_assignment("tenant/use/ns1/0x00000000_0xffffffff", lltmr.select, ctx)
            second = select_broker_for_assignment("tenant/use/ns2/0x00000000_0xffffffff", lltmr.select, ctx)
            east = {"b0:8080", "b1:8080"}
            together = (first in east) == (second in east)
            assert first != second
            if spread:
                assert not together
            else:
                same_domain += together
    assert same_domain > 0  # without domains, a same-domain neighbour is chosen sometimes


# --- TransferShedderTest ------------------------------------------------------------------------------

BUNDLE_D1 = "my-tenant/my-namespaceD/0x00000000_0x0FFFFFFF"
BUNDLE_E1 = "my-tenant/my-namespaceE/0x00000000_0x0FFFFFFF"


def _with_policies(snap, isolation=None, groups=None):
    doc = snap.to_json()
    if isolation:
        doc["isolationPolicies"] = isolation
    if groups:
        doc["namespaces"] = {ns: {"antiAffinityGroup": g} for ns, g in groups.items()}
    return parse_snapshot(doc)


def test_bundles_with_isolation_policies(shed):
    """TransferShedderTest.testBundlesWithIsolationPolicies: namespaceE's policy allows only broker5. With
    loadBalancerSheddingBundlesWithPoliciesEnabled: E's bundles cannot go to broker1, so only broker4's D1 moves,
    to broker1; without a transfer, D1 is unloaded with no destination. With the flag off (and every
    namespace under a policy, as the test's spy answers): nothing."""
    only_e = _with_policies(base_cluster(), {"e": policy(["my-tenant/my-namespaceE"], ["broker5"])})
    on = {**NO_HIT_COUNT, "loadBalancerSheddingBundlesWithPoliciesEnabled": True}
    assert decisions(run_shedder("TransferShedder", only_e, cfg(**on))) == {("broker4:8080", BUNDLE_D1, "broker1:8080")}
    without_transfer = run_shedder("TransferShedder", only_e, cfg(**on, loadBalancerTransferEnabled=False))
    assert decisions(without_transfer) == {("broker4:8080", BUNDLE_D1, None)}
    every = _with_policies(base_cluster(), {"all": policy(["my-tenant/.*"], ["broker5"])})
    for transfer in (True, False):
        result = shed("TransferShedder", every, cfg(**NO_HIT_COUNT, loadBalancerTransferEnabled=transfer))
        assert result.unloads == ()


def test_bundles_with_anti_affinity_group():
    """TransferShedderTest.testBundlesWithAntiAffinityGroup, with a real group instead of the test's mocked
    filter: E and A in one group, A owned by broker1 → AntiAffinityGroupPolicyFilter removes broker1 for E's
    bundles (brokers 2–4 own none of the group), so broker5 moves nothing and D1 goes to broker1. With the flag
    off, no bundle of a grouped namespace is even a top bundle: the same decisions."""
    groups = {"my-tenant/my-namespaceE": "g", "my-tenant/my-namespaceA": "g"}
    snap = _with_policies(base_cluster(), groups=groups)
    on = cfg(**NO_HIT_COUNT, loadBalancerSheddingBundlesWithPoliciesEnabled=True)
    assert decisions(run_shedder("TransferShedder", snap, on)) == {("broker4:8080", BUNDLE_D1, "broker1:8080")}
    assert decisions(run_shedder("TransferShedder", snap, cfg(**NO_HIT_COUNT))) == {
        ("broker4:8080", BUNDLE_D1, "broker1:8080")
    }
    # the group spread across every broker: each owns two of its bundles → the filter keeps them all → base result
    spread = _with_policies(base_cluster(), groups={f"my-tenant/my-namespace{c}": "g" for c in "ABCDE"})
    assert decisions(run_shedder("TransferShedder", spread, on)) == {
        ("broker5:8080", BUNDLE_E1, "broker1:8080"),
        ("broker4:8080", BUNDLE_D1, "broker2:8080"),
    }


@pytest.mark.parametrize(
    ("isolation", "anti_affinity", "enabled", "expected"),
    [
        (True, True, True, True),
        (True, True, False, False),
        (True, False, True, True),
        (True, False, False, False),
        (False, True, True, True),
        (False, True, False, False),
        (False, False, True, True),
        (False, False, False, True),
    ],
)
def test_is_load_balancer_shedding_bundles_with_policies_enabled(isolation, anti_affinity, enabled, expected):
    """TransferShedderTest.testIsLoadBalancerSheddingBundlesWithPoliciesEnabled: the truth table."""
    ps = policies(
        {"p": policy(["t/ns"], ["h"])} if isolation else None,
        {"t/ns": "g"} if anti_affinity else None,
    )
    assert P.shedding_allowed("t/ns", ps, enabled) is expected
    assert cfg().loadBalancerSheddingBundlesWithPoliciesEnabled is False  # ServiceConfiguration's default


def test_transfer_shedder_never_sheds_a_namespace_whose_policies_are_unknown():
    """Ours: policies that could not be read are never taken as "no policy", whatever the flag."""
    doc = base_cluster().to_json()
    doc["policiesUnknown"] = {"my-tenant/my-namespaceE": "HTTP 500"}
    result = run_shedder(
        "TransferShedder", parse_snapshot(doc), cfg(**NO_HIT_COUNT, loadBalancerSheddingBundlesWithPoliciesEnabled=True)
    )
    assert all(not u.bundle.startswith("my-tenant/my-namespaceE/") for u in result.unloads)
    assert snapshot({"a:1": broker_report()}).policies.empty
