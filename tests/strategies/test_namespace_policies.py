"""Namespace policies in the snapshot format and in every plan: no shedder, placement or split ever sends a
bundle where its namespace's isolation policy (or another tenant's) forbids, groups are spread, and a
namespace whose policies could not be read is never placed."""

import json
import random

import pytest

from pulsar_lb_operator.strategies import SHEDDING, StrategyState, parse_snapshot, plan_cycle
from pulsar_lb_operator.strategies import policies as P
from pulsar_lb_operator.strategies.snapshots import SnapshotError
from tests.builders import broker_report, cfg, snapshot_doc, stats

DEDICATED = "tenant-a"  # tenant-a/* may use only a1 and a2 (a3 when fewer than two of them are up)


def policy(namespaces, primary, secondary=(), min_limit=1):
    return {
        "namespaces": list(namespaces),
        "primary": list(primary),
        "secondary": list(secondary),
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": str(min_limit), "usage_threshold": "100"},
        },
    }


ISOLATION = {"tenant-a-dedicated": policy(["tenant-a/.*"], ["a[12]\\.pulsar"], ["a3\\.pulsar"], min_limit=2)}


def cluster_doc(loads, bundles_per_broker=4, groups=None, isolation=ISOLATION, unknown=None, seed=0):
    """Brokers a1..a3 (tenant-a's), s1..s3 (shared); each owns bundles of tenant-a and of tenant-b."""
    rng = random.Random(seed)
    brokers = {}
    for (host, cpu), index in zip(loads.items(), range(len(loads))):
        owned = {}
        for j in range(bundles_per_broker):
            tenant = "tenant-a" if host.startswith("a") else "tenant-b"
            ns = f"{tenant}/ns{j % 2}"
            lower = (index * bundles_per_broker + j) * 0x100000
            rate = (cpu + 1) * 60 * rng.uniform(0.5, 1.5)  # traffic in proportion to the broker's load
            owned[f"{ns}/0x{lower:08x}_0x{lower + 0x100000:08x}"] = stats(rate_in=rate, thr_in=rate * 1000, topics=3)
        brokers[f"{host}.pulsar:8080"] = broker_report(cpu=(cpu, 100), bw_in=(cpu, 100), bundles=owned)
    doc = snapshot_doc(brokers)
    if isolation:
        doc["isolationPolicies"] = isolation
    if groups:
        doc["namespaces"] = {ns: {"antiAffinityGroup": g} for ns, g in groups.items()}
    if unknown:
        doc["policiesUnknown"] = unknown
    return doc


EAGER = {  # AvgShedder acts at its first sighting, whatever the gap's size
    "loadBalancerAvgShedderHitCountHighThreshold": 1,
    "loadBalancerAvgShedderHitCountLowThreshold": 1,
    "minUnloadMessage": 0,
    "minUnloadMessageThroughput": 0,
}


def allowed(snap, bundle):
    namespace = bundle.rsplit("/", 1)[0]
    return P.apply_namespace_policies(namespace, snap.brokers, snap.policies)


# --- the snapshot format ---------------------------------------------------------------------------------


def test_policies_round_trip_through_the_snapshot_format():
    doc = cluster_doc({"a1": 10, "s1": 20}, groups={"tenant-b/ns0": "g1"}, unknown={"tenant-b/ns1": "HTTP 500"})
    snap = parse_snapshot(doc)
    assert [p.name for p in snap.policies.isolation] == ["tenant-a-dedicated"]
    assert snap.policies.group_of("tenant-b/ns0") == "g1" and snap.policies.unknown_reason("tenant-b/ns1") == "HTTP 500"
    again = parse_snapshot(json.loads(json.dumps(snap.to_json())))
    assert again.policies == snap.policies and again.namespaces == snap.namespaces == {}
    assert again.to_json()["namespaces"] == {"tenant-b/ns0": {"antiAffinityGroup": "g1"}}
    assert again.to_json()["namespaceIsolationPolicies"] == ISOLATION
    assert snap.without_brokers(["a1.pulsar:8080"]).policies == snap.policies


def test_an_old_snapshot_has_no_policies_and_boundaries_stay_required():
    old = snapshot_doc({"a:8080": broker_report()}, namespaces={"t/ns": ["0x00000000", "0xffffffff"]})
    snap = parse_snapshot(old)
    assert snap.policies.empty and snap.namespaces == {"t/ns": (0, 0xFFFFFFFF)}
    both = dict(old, namespaces={"t/ns": {"boundaries": ["0x00000000", "0xffffffff"], "antiAffinityGroup": "g"}})
    assert (
        parse_snapshot(both).namespaces == {"t/ns": (0, 0xFFFFFFFF)}
        and parse_snapshot(both).policies.group_of("t/ns") == "g"
    )
    with pytest.raises(SnapshotError, match=r"boundaries: missing"):
        parse_snapshot(dict(old, namespaces={"t/ns": {}}))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.update(primary=["a[1"]), r"isolationPolicies\['p'\]\.primary\[0\]: not a regular expression"),
        (lambda p: p["auto_failover_policy"].update(policy_type="max"), r"policy_type: expected 'min_available'"),
        (lambda p: p["auto_failover_policy"]["parameters"].pop("min_limit"), r"min_limit: missing"),
        (lambda p: p["auto_failover_policy"]["parameters"].update(min_limit="two"), r"min_limit: expected an integer"),
        (lambda p: p.pop("namespaces"), r"namespaces: missing"),
    ],
)
def test_a_policy_that_cannot_be_read_is_named(change, message):
    doc = snapshot_doc({"a:8080": broker_report()})
    doc["isolationPolicies"] = {"p": policy(["t/.*"], ["a"])}
    change(doc["isolationPolicies"]["p"])
    with pytest.raises(SnapshotError, match=message):
        parse_snapshot(doc)


def test_groups_must_be_strings():
    doc = snapshot_doc({"a:8080": broker_report()})
    doc["namespaces"] = {"t/ns": {"antiAffinityGroup": 3}}
    with pytest.raises(SnapshotError, match=r"antiAffinityGroup: expected a string"):
        parse_snapshot(doc)
    doc["namespaces"] = {"t/ns": {"antiAffinityGroup": "  "}}
    assert parse_snapshot(doc).policies.group_of("t/ns") is None  # StringUtils.isNotBlank


# --- no plan ever breaks a policy ------------------------------------------------------------------------

SHEDDERS = sorted(SHEDDING)


@pytest.mark.parametrize("shedder", SHEDDERS)
@pytest.mark.parametrize("seed", range(6))
def test_no_unload_lands_where_the_policies_forbid(shedder, seed):
    """Hot dedicated and shared brokers, idle ones of both kinds: every destination of every plan is one the
    bundle's namespace allows (tenant-a: a1/a2, or a3 below min_limit; tenant-b: only the shared s*)."""
    rng = random.Random(seed)
    loads = {h: rng.choice([5, 15, 60, 90, 97]) for h in ("a1", "a2", "a3", "s1", "s2", "s3")}
    config = cfg(
        loadBalancerAvgShedderHitCountHighThreshold=1,
        loadBalancerAvgShedderHitCountLowThreshold=1,
        loadBalancerSheddingConditionHitCountThreshold=0,
        loadBalancerSheddingBundlesWithPoliciesEnabled=True,
    )
    snap = parse_snapshot(cluster_doc(loads, seed=seed))
    plan, _ = plan_cycle(snap, config, StrategyState(), random.Random(seed), shedder)
    for unload in plan.unloads:
        assert unload.destination in allowed(snap, unload.bundle), (unload, plan.notes)
    for split in plan.splits:  # halves are unloaded (placed by Pulsar) only when another broker is allowed
        assert not split.unload or set(allowed(snap, split.bundle)) - {split.source}


def test_a_shared_namespace_never_goes_to_a_dedicated_broker():
    """The multi-tenant case: tenant-b's hot broker, tenant-a's brokers idle. Without policies they would take
    tenant-b's bundles; with tenant-a's policy only the idle shared broker may."""
    loads = {"a1": 2, "a2": 3, "s1": 95, "s2": 40}
    config = cfg(**EAGER)
    free = parse_snapshot(cluster_doc(loads, isolation=None))
    plan, _ = plan_cycle(free, config, StrategyState(), random.Random(0), "AvgShedder")
    assert {u.destination for u in plan.unloads} & {"a1.pulsar:8080", "a2.pulsar:8080"}  # the unsafe plan
    isolated = parse_snapshot(cluster_doc(loads))
    plan, _ = plan_cycle(isolated, config, StrategyState(), random.Random(0), "AvgShedder")
    assert plan.unloads and {u.destination for u in plan.unloads} == {"s2.pulsar:8080"}


def test_secondaries_only_below_min_limit():
    """MinAvailablePolicy: with a1 gone only one primary is left (< min_limit 2): a3 (secondary) is allowed too."""
    snap = parse_snapshot(cluster_doc({"a1": 10, "a2": 10, "a3": 10, "s1": 10}))
    assert allowed(snap, "tenant-a/ns0/0x00000000_0x00100000") == ["a1.pulsar:8080", "a2.pulsar:8080"]
    fewer = snap.without_brokers(["a1.pulsar:8080"])
    assert allowed(fewer, "tenant-a/ns0/0x00000000_0x00100000") == ["a2.pulsar:8080", "a3.pulsar:8080"]
    assert allowed(snap, "tenant-b/ns0/0x00000000_0x00100000") == ["a3.pulsar:8080", "s1.pulsar:8080"]


def test_unknown_policies_place_nothing_of_the_namespace():
    loads = {"a1": 2, "a2": 3, "s1": 95, "s2": 5, "s3": 4}
    config = cfg(**EAGER)
    snap = parse_snapshot(cluster_doc(loads, unknown={"tenant-b/ns0": "anti-affinity group: HTTP 500"}))
    plan, _ = plan_cycle(snap, config, StrategyState(), random.Random(0), "AvgShedder")
    assert all(not u.bundle.startswith("tenant-b/ns0/") for u in plan.unloads)
    assert any("tenant-b/ns0" in n and "could not be read (anti-affinity group: HTTP 500)" in n for n in plan.notes)
    everything = parse_snapshot(cluster_doc(loads, unknown={"*": "namespace isolation policies: timed out"}))
    for shedder in SHEDDERS:
        plan, _ = plan_cycle(everything, config, StrategyState(), random.Random(0), shedder)
        assert plan.unloads == () and all(not s.unload for s in plan.splits), shedder


def test_split_halves_stay_when_only_the_owner_is_allowed():
    """ModularLoadManagerImpl.checkNamespaceBundleSplit: the halves of a split are unloaded only when
    shouldNamespacePoliciesUnload and shouldAntiAffinityNamespaceUnload allow it."""
    hot = {"tenant-a/ns0/0x00000000_0x80000000": stats(rate_in=40000, topics=5)}
    doc = snapshot_doc({"a1.pulsar:8080": broker_report(bundles=hot), "s1.pulsar:8080": broker_report()})
    doc["isolationPolicies"] = {"only-a1": policy(["tenant-a/.*"], ["a1\\.pulsar"])}
    plan, _ = plan_cycle(parse_snapshot(doc), cfg(), StrategyState(), random.Random(0), "OverloadShedder")
    assert [(s.bundle, s.unload) for s in plan.splits] == [("tenant-a/ns0/0x00000000_0x80000000", False)]
    assert any("its halves stay on a1.pulsar:8080" in n for n in plan.notes)
    del doc["isolationPolicies"]
    plan, _ = plan_cycle(parse_snapshot(doc), cfg(), StrategyState(), random.Random(0), "OverloadShedder")
    assert [s.unload for s in plan.splits] == [True]


def test_a_self_placing_shedders_destination_is_checked():
    """PredictivePairingShedder (here its AvgShedder fallback) chooses destinations itself: one the policies
    forbid is not used; the bundle is placed among the allowed brokers instead, and the reason says so (as
    AvgShedder's placement does when its planned broker is not a candidate)."""
    loads = {"a1": 95, "s1": 3, "a2": 50}
    config = cfg(**EAGER)
    snap = parse_snapshot(cluster_doc(loads, isolation={"p": policy(["tenant-a/.*"], ["a[12]\\.pulsar"])}))
    plan, _ = plan_cycle(snap, config, StrategyState(), random.Random(0), "PredictivePairingShedder")
    assert plan.unloads and all(u.destination in allowed(snap, u.bundle) for u in plan.unloads)
    assert any(
        "own choice s1.pulsar:8080 refused: s1.pulsar:8080 is not allowed by the isolation policy p" in u.reason
        for u in plan.unloads
    )


def test_predictive_pairing_with_cost_models_pairs_only_allowed_brokers():
    """With fitted cost models, PredictivePairingShedder's own pairing considers only destinations the bundle's
    namespace allows: tenant-a's bundles go to its idle secondary a3, never to the idler shared s1 (where
    they go without the policy)."""
    from types import MappingProxyType

    from pulsar_lb_operator.strategies.profile import CostModel, LoadProfile

    def plan_for(isolation):
        doc = cluster_doc({"a1": 90, "a2": 85, "a3": 20, "s1": 5}, isolation=isolation)
        for report in doc["brokers"].values():
            report["bandwidthIn"] = {"usage": 0, "limit": 1e9}  # CPU decides
        snap = parse_snapshot(doc)
        models = {(b, "cpu"): CostModel(1.0, 0.002, 0.0, 0.0, 0.99, 48) for b in snap.brokers}
        profile = LoadProfile(cost_models=MappingProxyType(models))
        plan, _ = plan_cycle(
            snap, cfg(**EAGER), StrategyState(), random.Random(0), "PredictivePairingShedder", profile=profile
        )
        return snap, plan

    _, free = plan_for(None)
    assert "s1.pulsar:8080" in {u.destination for u in free.unloads}
    snap, plan = plan_for({"p": policy(["tenant-a/.*"], ["a[12]\\.pulsar"], ["a3\\.pulsar"], min_limit=3)})
    assert plan.unloads and {u.destination for u in plan.unloads} == {"a3.pulsar:8080"}
    assert all(u.destination in allowed(snap, u.bundle) and "refused" not in u.reason for u in plan.unloads)


def test_anti_affinity_groups_are_spread_by_placement():
    """filterAntiAffinityGroupOwnedBrokers in selectBroker: three namespaces of one group on a hot broker move to
    brokers owning none of the group, not all to the least loaded one."""
    group = {f"t/g{i}": "g" for i in range(3)}
    hot = {f"t/g{i}/0x00000000_0xffffffff": stats(rate_in=1000 * (i + 1), thr_in=1e6 * (i + 1)) for i in range(3)}
    brokers = {
        "hot:8080": broker_report(cpu=(97, 100), bundles=hot),
        "idle:8080": broker_report(cpu=(1, 100)),
        "calm:8080": broker_report(cpu=(30, 100), bundles={"t/x/0x00000000_0xffffffff": stats(rate_in=5)}),
        "busy:8080": broker_report(cpu=(60, 100), bundles={"t/y/0x00000000_0xffffffff": stats(rate_in=50)}),
    }
    doc = snapshot_doc(brokers)
    doc["namespaces"] = {ns: {"antiAffinityGroup": g} for ns, g in group.items()}
    plan, _ = plan_cycle(parse_snapshot(doc), cfg(), StrategyState(), random.Random(0), "OverloadShedder")
    destinations = [u.destination for u in plan.unloads]
    assert destinations and "hot:8080" not in destinations
    assert len(plan.unloads) == 1 or len(set(destinations)) == len(destinations)  # no two of the group together
