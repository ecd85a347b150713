"""Failure domains over real loopback HTTP: the simulator serves them (ClustersBase.getFailureDomains) and spreads
an anti-affinity group across them in its own assignment while failureDomainsEnabled
(LoadManagerShared.filterAntiAffinityGroupOwnedBrokers → filterDomainsNotHavingLeastNumberAntiAffinityNamespaces);
the collector reads them only then, and the snapshot file carries them as the admin API gives them."""

import requests

from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.collect.collector import collect
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import parse_scenario
from pulsar_lb_operator.strategies.snapshots import parse_snapshot

T = (2, 10)


def scenario(enabled=True):
    return {
        "cluster": "sim",
        "brokers": [{"count": 4, "cores": 4}],
        "namespaces": [
            {"name": "t/a", "bundles": 1, "topics": 4, "rate": 10, "anti_affinity_group": "g"},
            {"name": "t/b", "bundles": 1, "topics": 4, "rate": 10, "anti_affinity_group": "g"},
            {"name": "t/other", "bundles": 4, "topics": 16, "rate": 10},
        ],
        "failure_domains": {"east": ["broker-0", "broker-1"], "west": ["broker-2", "broker-3"]},
        "failure_domains_enabled": enabled,
        "config": {"loadBalancerSheddingEnabled": False, "loadBalancerAutoBundleSplitEnabled": False},
    }


def domain_of(sim, broker_id):
    name = sim.cluster.brokers[broker_id].name
    return "east" if name in ("broker-0", "broker-1") else "west"


def test_failure_domains_endpoint_and_runtime_flag():
    with serve(lambda allocate: SimulatedCluster(parse_scenario(scenario()), allocate)) as sim:
        ids = {b.name: b.id for b in sim.cluster.brokers.values()}
        doc = requests.get(f"{sim.admin_url}/admin/v2/clusters/sim/failureDomains", timeout=T).json()
        assert doc == {
            "east": {"brokers": sorted([ids["broker-0"], ids["broker-1"]])},
            "west": {"brokers": sorted([ids["broker-2"], ids["broker-3"]])},
        }
        other = requests.get(f"{sim.admin_url}/admin/v2/clusters/elsewhere/failureDomains", timeout=T)
        assert other.status_code == 404
        runtime = requests.get(f"{sim.admin_url}/admin/v2/brokers/configuration/runtime", timeout=T).json()
        assert runtime["failureDomainsEnabled"] == "true"


def test_the_simulators_own_assignment_spreads_a_group_across_domains():
    """testBrokerSelectionForAntiAffinityGroup, end to end: both namespaces unloaded and looked up again land
    in different domains, every time (each round after the brokers' reports show the last one's moves, as the
    leader's brokerToNamespaceToBundleRange is built from the written reports)."""
    with serve(lambda allocate: SimulatedCluster(parse_scenario(scenario()), allocate)) as sim:
        cluster = sim.cluster
        for _ in range(8):
            for namespace in ("t/a", "t/b"):
                cluster.unload(cluster._bundles_of(namespace)[0])
            cluster.advance(5)
            owners = [cluster.owner_of(cluster._bundles_of(ns)[0]) for ns in ("t/a", "t/b")]
            assert None not in owners
            assert domain_of(sim, owners[0]) != domain_of(sim, owners[1])
            cluster.advance(2 * cluster.scenario.report_interval_s)


def test_the_collector_reads_domains_only_when_enabled(tmp_path):
    for enabled in (True, False):
        with serve(lambda allocate, e=enabled: SimulatedCluster(parse_scenario(scenario(e)), allocate)) as sim:
            client = AdminClient(sim.admin_url)
            snap = collect(client, "sim", now_ms=sim.cluster.now_ms).snapshot
            asked = [r for r in sim.requests if r.path.endswith("/failureDomains")]
            if enabled:
                assert asked and set(snap.policies.domains.values()) == {"east", "west"}
                doc = snap.to_json()
                assert (
                    doc["failureDomains"]
                    == requests.get(f"{sim.admin_url}/admin/v2/clusters/sim/failureDomains", timeout=T).json()
                )
                assert parse_snapshot(doc).policies.domains == snap.policies.domains  # the file round-trips
            else:
                assert not asked and dict(snap.policies.domains) == {}
                assert "failureDomains" not in snap.to_json()


def test_a_failed_domain_read_marks_only_the_groups_unknown():
    with serve(
        lambda allocate: SimulatedCluster(parse_scenario(scenario()), allocate),
        faults=["*:GET:/admin/v2/clusters/sim/failureDomains:status=500"],
    ) as sim:
        snap = collect(AdminClient(sim.admin_url), "sim", now_ms=sim.cluster.now_ms).snapshot
        assert snap.policies.unknown_reason("t/a") and snap.policies.unknown_reason("t/b")
        assert snap.policies.unknown_reason("t/other") is None
