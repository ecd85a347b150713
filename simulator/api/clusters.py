"""ClustersBase: the cluster's name, its namespace isolation policies and its failure domains."""

from __future__ import annotations

from pulsar_lb_operator.simulator.api.call import Call, Response
from pulsar_lb_operator.simulator.model import SimError


def get_clusters(call: Call) -> Response:
    return Response(200, [call.cluster.scenario.cluster])


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
