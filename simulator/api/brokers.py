"""BrokersBase: who is active and who leads, what a broker owns, health and version, dynamic configuration;
and VipStatus's ``/status.html``."""

from __future__ import annotations

from typing import Any

from pulsar_lb_operator.simulator import admin_errors, dynamic_config
from pulsar_lb_operator.simulator import elm as sim_elm
from pulsar_lb_operator.simulator.api.call import Call, Response
from pulsar_lb_operator.simulator.model import SimError
from pulsar_lb_operator.strategies import config_keys

STATIC_RUNTIME = {
    "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
    "loadBalancerEnabled": "true",
}


def status_html(call: Call) -> Response:
    return Response(200, "OK")


def get_active_brokers(call: Call, cluster: str | None = None) -> Response:
    if cluster is not None and cluster != call.cluster.scenario.cluster:
        raise SimError(404, f"Cluster does not exist: cluster={cluster}")
    return Response(200, call.cluster.active_ids())


def get_leader_broker(call: Call) -> Response:
    leader = call.cluster.leader
    if leader is None:
        raise SimError(404, "Couldn't find leader broker")
    return Response(200, {"serviceUrl": call.cluster.brokers[leader].web_url, "brokerId": leader})


def get_owned_namespaces(call: Call, cluster: str, broker: str) -> Response:
    """The bundles a broker owns (307 to that broker when asked elsewhere), heartbeat namespaces included,
    each with NamespaceService.getNamespaceOwnershipStatus: primary/secondary under the namespace's policy."""
    broker_id = broker.removeprefix("http://").removeprefix("https://")
    sim = call.cluster
    if broker_id not in sim.active_ids():
        raise SimError(404, f"Broker id '{broker_id}' not found in available brokers.")
    if broker_id != call.broker_id:
        return call.redirect(broker_id)
    heartbeat = [
        f"pulsar/{broker_id}/0x00000000_0xffffffff",
        f"pulsar/{sim.scenario.cluster}/{broker_id}/0x00000000_0xffffffff",
    ]
    policies, host = sim.namespace_policies(), broker_id.rsplit(":", 1)[0]

    def status(bundle: str) -> dict[str, Any]:
        policy = policies.policy_for(bundle.rsplit("/", 1)[0])
        assignment = "shared"
        if policy is not None and policy.is_primary(host):
            assignment = "primary"
        elif policy is not None and policy.is_secondary(host):
            assignment = "secondary"
        return {"broker_assignment": assignment, "is_controlled": policy is not None, "is_active": True}

    return Response(200, {b: status(b) for b in sorted(sim.owned_by(broker_id) + heartbeat)})


def health_check(call: Call) -> Response:
    return Response(200, "ok")


def version(call: Call) -> Response:
    return Response(200, getattr(call.cluster.scenario, "broker_version", "4.0.4-sim"))


def get_dynamic_configuration_names(call: Call) -> Response:
    return Response(200, config_keys())


def get_all_dynamic_configurations(call: Call) -> Response:
    return Response(200, dict(call.cluster.dynamic_config))


def get_runtime_configuration(call: Call) -> Response:
    sim = call.cluster
    values = {
        k: ",".join(v) if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in sim.config.to_json().items()
    }
    return Response(
        200,
        {
            **values,
            **STATIC_RUNTIME,
            **sim.report_update_settings.runtime(),
            "failureDomainsEnabled": str(sim.scenario.failure_domains_enabled).lower(),
            **sim_elm.runtime_config(sim),  # the extensible load manager's class name (loadManager)
            "clusterName": sim.scenario.cluster,
            "webServicePort": str(sim.brokers[call.broker_id].port),
        },
    )


def update_dynamic_configuration(call: Call, name: str, value: str) -> Response:
    """updateDynamicConfiguration → persistDynamicConfigurationAsync: the key's validator first (only
    loadManagerClassName has one: a class that is not found is 412 " Invalid dynamic-config value"), then a
    key that is not dynamic (or unknown) is 412 "Can't update non-dynamic configuration"; otherwise the value
    is stored as given and the answer is an empty 200 (Response.ok()). Each broker then applies it as
    FieldParser reads it: a boolean is true only for "true", a number that does not parse leaves the setting
    as it was (dynamic_config.effective_config)."""
    sim = call.cluster
    if name == "loadManagerClassName":
        if value not in admin_errors.LOAD_MANAGER_CLASSES:
            raise SimError(412, " Invalid dynamic-config value")
        sim.dynamic_config = {**sim.dynamic_config, name: value}  # applied at a restart
        return Response(200)
    if name not in config_keys():
        raise SimError(412, "Can't update non-dynamic configuration")
    sim.dynamic_config = {**sim.dynamic_config, name: value}
    sim.config = dynamic_config.effective_config(sim.config, name, value)
    return Response(200)


def delete_dynamic_configuration(call: Call, name: str) -> Response:
    """412 "Can't delete non-dynamic configuration" for a key that is not dynamic; else the override is removed
    from the store (an empty 200). Brokers keep the value in effect until they restart (the store's watch
    only applies values that are set)."""
    if name not in config_keys() and name != "loadManagerClassName":
        raise SimError(412, "Can't delete non-dynamic configuration")
    call.cluster.dynamic_config = {k: v for k, v in call.cluster.dynamic_config.items() if k != name}
    return Response(200)
