"""TenantsBase and NamespacesBase: tenants, namespaces and their bundles; unload, split and the topics'
hash positions, each done by the bundle's owner (307 to it from anywhere else)."""

from __future__ import annotations

import json

from pulsar_lb_operator.simulator import admin_errors
from pulsar_lb_operator.simulator import elm as sim_elm
from pulsar_lb_operator.simulator.api.call import Call, Response
from pulsar_lb_operator.simulator.model import SimError
from pulsar_lb_operator.strategies.bundles import format_boundary, split_bundle_name


def get_tenants(call: Call) -> Response:
    return Response(200, sorted({ns.split("/")[0] for ns in call.cluster.namespaces}))


def get_tenant_namespaces(call: Call, tenant: str) -> Response:
    found = sorted(ns for ns in call.cluster.namespaces if ns.split("/")[0] == tenant)
    if not found:
        raise SimError(404, "Tenant doesn't exist")
    return Response(200, found)


def get_bundles_data(call: Call, tenant: str, namespace: str) -> Response:
    name = f"{tenant}/{namespace}"
    if name not in call.cluster.namespaces:
        raise SimError(404, "Namespace does not exist")
    bounds = call.cluster.namespaces[name]
    return Response(200, {"boundaries": [format_boundary(b) for b in bounds], "numBundles": len(bounds) - 1})


def get_namespace_anti_affinity_group(call: Call, tenant: str, namespace: str) -> Response:
    """The group as a plain string; 204 when none (a null String); 412 for a name NamespaceName.get refuses."""
    admin_errors.validate_namespace_name(tenant, namespace)
    group = call.cluster.anti_affinity_groups.get(f"{tenant}/{namespace}")
    if group is None:
        return Response(204)
    return Response(200, group, content_type="application/json")


def unload_namespace(call: Call, tenant: str, namespace: str) -> Response:
    name = f"{tenant}/{namespace}"
    if name not in call.cluster.namespaces:
        raise SimError(404, "Namespace does not exist")
    for bundle in call.cluster._bundles_of(name):
        call.cluster.unload(bundle)
    return Response(204)


def unload_namespace_bundle(call: Call, tenant: str, namespace: str, bundle: str) -> Response:
    """Modular semantics: with ``destinationBroker`` a broker that is not the leader sends the call to the
    leader, which records the destination and sends it on to the owner; the owner unloads (204). ELM: a
    transfer done by the owner, no leader hop (simulator/elm.py)."""
    admin_errors.validate_namespace_name(tenant, namespace)
    sim, full = call.cluster, f"{tenant}/{namespace}/{bundle}"
    destination = call.param("destinationBroker")
    if sim_elm.is_extensible(sim):
        owner = sim_elm.unload(sim, call.broker_id, full, destination)
        return Response(204) if owner is None else call.redirect(owner)
    leader = sim.leader
    if destination is not None:
        destination = destination.removeprefix("http://").removeprefix("https://")
        if destination not in sim.active_ids():
            raise SimError(409, "Not allowed unload namespace bundle to inactive destination broker")
        if call.broker_id != leader:
            return call.to_leader()
    admin_errors.parse_range_for_unload(bundle)  # NamespaceBundleFactory.getBundle: malformed → text 500
    sim.check_bundle(full)
    owner = sim.owner_of(full)
    if owner is not None and owner != call.broker_id:
        if destination is not None:  # recorded on the leader; the owner hop drops it (modular)
            sim.affinity[sim.affinity_key(full)] = destination
        rest = {k: v for k, v in call.query.items() if k != "destinationBroker"}
        rest["authoritative"] = ["true" if call.broker_id == leader else "false"]
        return call.redirect(owner, rest)
    sim.unload(full, destination)
    return Response(204)


def split_namespace_bundle(call: Call, tenant: str, namespace: str, bundle: str) -> Response:
    """internalSplitNamespaceBundleAsync, in its order: the body (read by Jersey before the method runs), the
    algorithm (412 before anything else), the LARGEST/HOT alias (getBundleRangeAsync, 404), the namespace
    (getNamespacePoliciesAsync, 404), the range (validateNamespaceBundleRange, 412), then ownership
    (validateNamespaceBundleOwnershipAsync with readOnly=false: redirect, or assign an unowned bundle) and the
    split on the owner (NamespaceService.splitAndOwnBundle). Namespaces.splitNamespaceBundle validates the
    namespace's name before all of it."""
    admin_errors.validate_namespace_name(tenant, namespace)
    sim, name = call.cluster, f"{tenant}/{namespace}"
    algorithm = call.param("splitAlgorithmName")
    positions = None
    if call.body.strip():
        try:
            positions = json.loads(call.body)
            if not isinstance(positions, list) or not all(isinstance(p, int) for p in positions):
                raise ValueError
        except ValueError:
            raise SimError(412, "Split bundle failed due to invalid request: positions must be longs") from None
    if algorithm is not None and algorithm.strip():
        supported = list(sim.config.supportedNamespaceBundleSplitAlgorithms)
        if algorithm not in supported:  # List.contains: case-sensitive; List.toString: "[a, b]"
            raise SimError(
                412, f"Unsupported namespace bundle split algorithm, supported algorithms are [{', '.join(supported)}]"
            )
        if algorithm.lower() == "specified_positions_divide" and not positions:  # equalsIgnoreCase
            raise SimError(412, "With specified_positions_divide split algorithm, splitBoundaries must not be empty")
    if name not in sim.namespaces:
        raise admin_errors.namespace_missing()
    if bundle in ("LARGEST", "HOT"):
        bundle = _bundle_range_of(call, name, bundle)
    full = f"{name}/{bundle}"
    sim.check_bundle(full)
    owner = sim.owner_of(full) or sim.assign(full)
    if owner != call.broker_id:
        return call.redirect(owner)
    unload = (call.param("unload") or "false").lower() == "true"
    sim.split(full, algorithm, positions, unload)
    return Response(204)


def _bundle_range_of(call: Call, namespace: str, alias: str) -> str:
    """getBundleRangeAsync: the namespace's bundle with the most topics (LARGEST) or the most throughput (HOT)."""
    candidates = call.cluster._bundles_of(namespace)

    def weight(bundle: str) -> float:
        stats, _ = call.cluster.bundle_stats(bundle)
        return stats.topics if alias == "LARGEST" else stats.msg_throughput

    if not candidates:
        raise SimError(404, f"Bundle range {alias} not found")
    return str(split_bundle_name(max(candidates, key=lambda b: (weight(b), b)))[1])


def get_topic_hash_positions(call: Call, tenant: str, namespace: str, bundle: str) -> Response:
    full = f"{tenant}/{namespace}/{bundle}"
    call.cluster.check_bundle(full)
    owner = call.cluster.owner_of(full)
    if owner is None:
        raise SimError(412, f"Failed to find ownership for ServiceUnit:{full}")
    if owner != call.broker_id:
        return call.redirect(owner)
    wanted = set(call.query.get("topics", []))
    positions = {
        t.name: t.hash
        for t in call.cluster.topics_in(full)
        if not wanted or t.name in wanted or t.name.split("-partition-")[0] in wanted
    }
    return Response(200, {"namespace": f"{tenant}/{namespace}", "bundle": bundle, "topicHashPositions": positions})
