"""TopicLookupBase: which broker serves a topic (the leader assigns an unowned bundle first), and its bundle."""

from __future__ import annotations

from pulsar_lb_operator.simulator.api.call import Call, Response
from pulsar_lb_operator.strategies.bundles import split_bundle_name


def lookup_topic(call: Call, domain: str, tenant: str, namespace: str, topic: str) -> Response:
    sim = call.cluster
    bundle = sim.bundle_of_topic(f"{domain}://{tenant}/{namespace}/{topic}")
    owner = sim.owner_of(bundle)
    leader = sim.leader
    if owner is None:  # the leader assigns it, then sends the client to the chosen broker
        if call.broker_id != leader:
            return call.to_leader()
        owner = sim.assign(bundle)
        if owner != call.broker_id:
            return call.redirect(owner, {**call.query, "authoritative": ["true"]})
    broker = sim.brokers[owner]
    pulsar_url = f"pulsar://{owner.rsplit(':', 1)[0]}:{broker.port + 1}"
    data = {"brokerUrl": pulsar_url, "httpUrl": broker.web_url, "nativeUrl": pulsar_url, "brokerUrlSsl": ""}
    if broker.web_url_tls:
        data["httpUrlTls"] = broker.web_url_tls
    return Response(200, data)


def get_namespace_bundle(call: Call, domain: str, tenant: str, namespace: str, topic: str) -> Response:
    bundle = call.cluster.bundle_of_topic(f"{domain}://{tenant}/{namespace}/{topic}")
    return Response(200, str(split_bundle_name(bundle)[1]))
