"""BrokerStatsBase: a broker's own load report and topic stats, and the resource availability it refuses."""

from __future__ import annotations

from pulsar_lb_operator.simulator import elm as sim_elm
from pulsar_lb_operator.simulator.api.call import Call, Response
from pulsar_lb_operator.simulator.model import SimError


def get_load_report(call: Call) -> Response:
    """LocalBrokerData of the broker asked, serialized once per change (SimulatedCluster.load_report_json)."""
    if sim_elm.is_extensible(call.cluster):  # ELM keeps its load on system topics: no report here
        raise sim_elm.no_load_report()
    return Response(200, call.cluster.load_report_json(call.broker_id), content_type="application/json")


def get_topics2(call: Call) -> Response:
    return Response(200, call.cluster.topic_stats_report(call.broker_id))


def get_broker_resource_availability(call: Call, tenant: str, namespace: str) -> Response:
    raise SimError(
        409, "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerWrapper does not support this operation"
    )
