"""ClustersBase: the cluster's name, its namespace isolation policies and its failure domains."""

from __future__ import annotations

from pulsar_lb_operator.simulator import elm as sim_elm
from pulsar_lb_operator.simulator.api.call import Call, Response
from pulsar_lb_operator.simulator.model import SimError


def get_clusters(call: Call) -> Response:
    return Response(200, [call.cluster.scenario.cluster])


def get_cluster(call: Call, cluster: str) -> Response:
    """ClustersBase.getCluster: the cluster's metadata (simulator/elm.py); 404 for another cluster. Its web
    service URL is the first live broker's, over https when the call came over TLS."""
    if cluster != call.cluster.scenario.cluster:
        raise SimError(404, "Cluster does not exist")
    first = min((b for b in call.cluster.brokers.values() if b.alive), key=lambda b: b.name)
    return Response(200, sim_elm.cluster_data(call.cluster, call.web_url(first.id)))


def get_namespace_isolation_policies(call: Call, cluster: str) -> Response:
    """404 for another cluster, and when none was ever set."""
    if cluster != call.cluster.scenario.cluster:
        raise SimError(404, f"Cluster {cluster} does not exist.")
    doc = call.cluster.isolation_policies_doc()
    if doc is None:
        raise SimError(404, f"NamespaceIsolationPolicies for cluster {cluster} does not exist")
    return Response(200, doc)


def get_failure_domains(call: Call, cluster: str) -> Response:
    """Domain → {"brokers": [...]}; {} when none (404 for another cluster)."""
    if cluster != call.cluster.scenario.cluster:
        raise SimError(404, "Cluster does not exist")
    return Response(200, call.cluster.failure_domains_doc())
