"""Every path a simulated broker answers, in one table: adding an endpoint is one line here and its handler.

A template's ``{name}`` matches one path segment, handed to the handler as the keyword ``name``
(percent-decoded). The first template in the table that matches the path decides, as Jersey takes the
matching template with the most literal characters: a literal path comes before a template that would also
match it (``/admin/v2/brokers/health`` before ``/admin/v2/brokers/{cluster}``). The method then picks among
that template's routes; none is 405, no template 404 (Jersey's statuses, with Pulsar's ``{"reason"}``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

from pulsar_lb_operator.simulator.api import broker_stats, brokers, clusters, lookup, namespaces
from pulsar_lb_operator.simulator.api.call import Response

NOT_FOUND = 404
METHOD_NOT_ALLOWED = 405


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    handler: Callable[..., Response]
    authenticated: bool = True  # False: answered without credentials (VipStatus)

    @property
    def params(self) -> list[str]:
        return re.findall(r"\{(\w+)\}", self.template)

    @property
    def regex(self) -> str:
        """The template as a regular expression, each parameter one unnamed group."""
        return re.sub(r"\\\{\w+\\\}", "([^/]+)", re.escape(self.template))


class Routes:
    """A table of routes, matched in one pass: every template is one branch of a single regular expression,
    tried in the table's order."""

    def __init__(self, *routes: Route) -> None:
        self.routes = routes
        self._methods: dict[str, dict[str, Route]] = {}
        self._branches: dict[int, tuple[str, list[str]]] = {}  # group number → template, its parameters
        branches, group = [], 1
        for route in routes:
            self._methods.setdefault(route.template, {})[route.method] = route
            if len(self._methods[route.template]) == 1:  # its template's first route: a branch of its own
                branches.append(f"({route.regex})")
                self._branches[group] = (route.template, route.params)
                group += 1 + len(route.params)
        self._pattern = re.compile("|".join(branches))

    def find(self, method: str, path: str) -> tuple[Route, dict[str, str]] | int:
        """The route for ``method`` on ``path`` and its path parameters, else 405 or 404."""
        match = self._pattern.fullmatch(path)
        if match is None or match.lastindex is None:
            return NOT_FOUND
        template, names = self._branches[match.lastindex]
        route = self._methods[template].get(method)
        if route is None:
            return METHOD_NOT_ALLOWED
        values = match.groups()[match.lastindex : match.lastindex + len(names)]
        return route, {name: unquote(value) for name, value in zip(names, values)}


ROUTES = Routes(
    Route("GET", "/status.html", brokers.status_html, authenticated=False),
    Route("GET", "/admin/v2/clusters", clusters.get_clusters),
    Route("GET", "/admin/v2/clusters/{cluster}", clusters.get_cluster),
    Route("GET", "/admin/v2/clusters/{cluster}/namespaceIsolationPolicies", clusters.get_namespace_isolation_policies),
    Route("GET", "/admin/v2/clusters/{cluster}/failureDomains", clusters.get_failure_domains),
    Route("GET", "/admin/v2/brokers/leaderBroker", brokers.get_leader_broker),
    Route("GET", "/admin/v2/brokers/health", brokers.health_check),
    Route("GET", "/admin/v2/brokers/ready", brokers.health_check),
    Route("GET", "/admin/v2/brokers/version", brokers.version),
    Route("GET", "/admin/v2/brokers/configuration", brokers.get_dynamic_configuration_names),
    Route("GET", "/admin/v2/brokers/configuration/values", brokers.get_all_dynamic_configurations),
    Route("GET", "/admin/v2/brokers/configuration/runtime", brokers.get_runtime_configuration),
    Route("POST", "/admin/v2/brokers/configuration/{name}/{value}", brokers.update_dynamic_configuration),
    Route("DELETE", "/admin/v2/brokers/configuration/{name}", brokers.delete_dynamic_configuration),
    Route("GET", "/admin/v2/brokers", brokers.get_active_brokers),
    Route("GET", "/admin/v2/brokers/{cluster}", brokers.get_active_brokers),
    Route("GET", "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", brokers.get_owned_namespaces),
    Route("GET", "/admin/v2/broker-stats/load-report", broker_stats.get_load_report),
    Route("GET", "/admin/v2/broker-stats/topics", broker_stats.get_topics2),
    Route(
        "GET",
        "/admin/v2/broker-stats/broker-resource-availability/{tenant}/{namespace}",
        broker_stats.get_broker_resource_availability,
    ),
    Route("GET", "/admin/v2/tenants", namespaces.get_tenants),
    Route("GET", "/admin/v2/namespaces/{tenant}", namespaces.get_tenant_namespaces),
    Route("GET", "/admin/v2/namespaces/{tenant}/{namespace}/bundles", namespaces.get_bundles_data),
    Route(
        "GET", "/admin/v2/namespaces/{tenant}/{namespace}/antiAffinity", namespaces.get_namespace_anti_affinity_group
    ),
    Route("PUT", "/admin/v2/namespaces/{tenant}/{namespace}/unload", namespaces.unload_namespace),
    Route("PUT", "/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload", namespaces.unload_namespace_bundle),
    Route("PUT", "/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/split", namespaces.split_namespace_bundle),
    Route(
        "GET",
        "/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/topicHashPositions",
        namespaces.get_topic_hash_positions,
    ),
    Route("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle", lookup.get_namespace_bundle),
    Route("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", lookup.lookup_topic),
)
