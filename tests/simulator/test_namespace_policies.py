"""The simulator's namespace policies: scenario keys, the two admin endpoints as a broker serves them
(ClustersBase.getNamespaceIsolationPolicies, Namespaces.getNamespaceAntiAffinityGroup), and the cluster's own
placement of unowned bundles honouring them."""

import pytest
import requests

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import ScenarioError, parse_scenario
from pulsar_lb_operator.strategies import policies as P

POLICIES = {
    "cluster": "sim",
    "addresses": "distinct",
    "brokers": [{"count": 5, "cores": 4}],
    "namespaces": [
        {"name": "tenant-a/ns", "bundles": 8, "topics": 32},
        {"name": "tenant-b/ns", "bundles": 4, "topics": 16, "anti_affinity_group": "spread", "count": 2},
    ],
    "isolation_policies": {
        "tenant-a-dedicated": {
            "namespaces": ["tenant-a/.*"],
            "primary": ["broker-0", "broker-1"],
            "secondary": ["broker-2"],
            "min_limit": 1,
            "usage_threshold": 80,
        }
    },
    "initial_owners": {"broker-4": 5, "broker-*": 1},
    "config": {"loadBalancerSheddingEnabled": False, "loadBalancerAutoBundleSplitEnabled": False},
}


@pytest.fixture
def sim():
    with serve(lambda allocate: SimulatedCluster(parse_scenario(POLICIES), allocate)) as served:
        yield served


def ids(sim, *names):
    return [sim.cluster.by_name(n).id for n in names]


def test_the_isolation_policies_endpoint(sim):
    """ClustersBase.getNamespaceIsolationPolicies: name → NamespaceIsolationDataImpl, parameters as strings;
    primary/secondary are regexes of the brokers' hosts (the scenario names brokers)."""
    url = f"{sim.admin_url}/admin/v2/clusters/sim/namespaceIsolationPolicies"
    answer = requests.get(url, timeout=5)
    assert answer.status_code == 200
    hosts = [i.rsplit(":", 1)[0].replace(".", "\\.") for i in ids(sim, "broker-0", "broker-1", "broker-2")]
    assert answer.json() == {
        "tenant-a-dedicated": {
            "namespaces": ["tenant-a/.*"],
            "primary": hosts[:2],
            "secondary": hosts[2:],
            "auto_failover_policy": {
                "policy_type": "min_available",
                "parameters": {"min_limit": "1", "usage_threshold": "80"},
            },
        }
    }
    other = requests.get(f"{sim.admin_url}/admin/v2/clusters/elsewhere/namespaceIsolationPolicies", timeout=5)
    assert other.status_code == 404 and other.json() == {"reason": "Cluster elsewhere does not exist."}


def test_no_isolation_policy_is_a_404_as_in_pulsar(served):
    """internalGetNamespaceIsolationPolicies: 404 "NamespaceIsolationPolicies for cluster … does not exist"
    when none was ever set (the shipped demo scenario declares none)."""
    cluster = served.cluster.scenario.cluster
    answer = requests.get(f"{served.admin_url}/admin/v2/clusters/{cluster}/namespaceIsolationPolicies", timeout=5)
    assert answer.status_code == 404
    assert answer.json() == {"reason": f"NamespaceIsolationPolicies for cluster {cluster} does not exist"}


def test_the_anti_affinity_endpoint(sim):
    """Namespaces.getNamespaceAntiAffinityGroup: the group as a plain string; 204 without one (a null String,
    also for a namespace without local policies); 412 for an invalid name."""
    base = f"{sim.admin_url}/admin/v2/namespaces"
    grouped = requests.get(f"{base}/tenant-b/ns-1/antiAffinity", timeout=5)
    assert grouped.status_code == 200 and grouped.text == "spread"
    for path in ("tenant-a/ns", "no/such-namespace"):
        none = requests.get(f"{base}/{path}/antiAffinity", timeout=5)
        assert none.status_code == 204 and none.content == b""
    invalid = requests.get(f"{base}/tenant-b/ns%20x/antiAffinity", timeout=5)
    assert invalid.status_code == 412 and invalid.json() == {"reason": "Namespace name is not valid"}


def test_the_cluster_starts_and_places_within_the_policies(sim):
    """Initial owners, and every unowned bundle the leader assigns (lookups), honour the policies."""
    cluster = sim.cluster
    policies = cluster.namespace_policies()

    def check():
        alive = cluster.active_ids()
        for bundle, owner in cluster.ownership.items():
            assert owner in P.apply_namespace_policies(bundle.rsplit("/", 1)[0], alive, policies), (bundle, owner)

    check()
    for bundle in list(cluster.ownership):
        cluster.unload(bundle)
    cluster.advance(30)  # clients look their bundles up again: the leader places all of them
    assert len(cluster.ownership) == len(cluster.all_bundles())
    check()
    b1, b2 = ids(sim, "broker-0", "broker-1")
    assert {o for b, o in cluster.ownership.items() if b.startswith("tenant-a/")} <= {b1, b2}


def test_without_an_allowed_broker_a_bundle_stays_unowned(sim):
    """With both primaries and the secondary down, tenant-a's bundles have nowhere to go: they stay unowned
    (a lookup answers 503) instead of landing on a shared broker, and are placed once a primary is back."""
    cluster = sim.cluster
    for name in ("broker-0", "broker-1", "broker-2"):
        cluster.crash(name)
    cluster.advance(30)
    assert not [b for b in cluster.ownership if b.startswith("tenant-a/")]
    answer = requests.get(f"{sim.admin_url}/lookup/v2/topic/persistent/tenant-a/ns/topic-1", timeout=5)
    assert answer.status_code == 503
    cluster._start(cluster.by_name("broker-1"))
    cluster.advance(30)
    assert {o for b, o in cluster.ownership.items() if b.startswith("tenant-a/")} == set(ids(sim, "broker-1"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(addresses="ports"), "use addresses: distinct"),
        (lambda d: d["isolation_policies"]["tenant-a-dedicated"].update(primary=["nobody"]), "matches no broker"),
        (lambda d: d["isolation_policies"]["tenant-a-dedicated"].update(namespaces=["("]), "not a regular expression"),
        (lambda d: d["isolation_policies"]["tenant-a-dedicated"].update(weight=1), "unknown key 'weight'"),
        (lambda d: d["namespaces"][1].update(anti_affinity_group=""), "anti_affinity_group: expected a group name"),
    ],
)
def test_scenario_keys_are_checked(change, message):
    import copy

    doc = copy.deepcopy(POLICIES)
    change(doc)
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(doc)


def test_distinct_addresses_without_http():
    """The cluster alone (benchmarks, unit tests) also gives each broker its own host with ``addresses: distinct``."""
    cluster = SimulatedCluster(parse_scenario(POLICIES))
    assert len({i.rsplit(":", 1)[0] for i in cluster.active_ids()}) == 5
    assert cluster.isolation_policies_doc()["tenant-a-dedicated"]["primary"] == ["127\\.0\\.0\\.1", "127\\.0\\.0\\.2"]


def test_owned_namespaces_reports_each_bundles_broker_assignment(sim):
    """NamespaceService.getNamespaceOwnershipStatus: is_controlled when an isolation policy matches the
    namespace, broker_assignment primary/secondary for the policy's brokers, shared otherwise."""

    def owned(name):
        broker = sim.cluster.by_name(name).id
        return requests.get(f"{sim.admin_url}/admin/v2/brokers/sim/{broker}/ownedNamespaces", timeout=5).json()

    isolated = [s for b, s in owned("broker-0").items() if b.startswith("tenant-a/")]
    assert isolated and all(
        s == {"broker_assignment": "primary", "is_controlled": True, "is_active": True} for s in isolated
    )
    shared = [s for b, s in owned("broker-4").items() if b.startswith("tenant-b/")]
    assert shared and all(
        s == {"broker_assignment": "shared", "is_controlled": False, "is_active": True} for s in shared
    )
