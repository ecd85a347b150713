"""Ownership: who owns each bundle, unloads, the leader's assignment, and the namespace policies it honours.

State: ``ownership`` (indexed by owner), ``affinity`` (the leader's remembered destinations),
``pending_lookups`` (unowned bundles whose clients reconnect), ``unloading`` (bundles inside their
unload's window), ``released_from``, ``preallocated``, ``moves``. An unloaded bundle is unowned until its
clients look it up; the leader then assigns it to the destination remembered for it (once), else by the
cluster's own placement within the namespace policies.
"""

from __future__ import annotations

import fnmatch
import re
from types import MappingProxyType
from typing import Any

from pulsar_lb_operator.simulator import admin_errors
from pulsar_lb_operator.simulator.model import (
    RECONNECT_DELAY_S,
    UNLOAD_WINDOW_S,
    SimError,
    unexpected,
)
from pulsar_lb_operator.simulator.state import ClusterState
from pulsar_lb_operator.strategies import PLACEMENT, LoadData, PlacementContext, Reader, select_broker
from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies import policies as ns_policies


class OwnershipJobs(ClusterState):
    """Mixed into SimulatedCluster (cluster.py); the state it shares with the other mixins is ClusterState's."""

    def affinity_key(self, bundle: str) -> str:
        """The key of the leader's destination map: the bundle, or — before Pulsar 4.0.10, which kept it in
        a map keyed by the bundle's *range* — the range alone, so two namespaces' bundles of one range
        overwrite each other's destination (the bug the operator's executor works around)."""
        by_range = bundle_names.destination_keyed_by_range(self.scenario.broker_version)
        return bundle.rsplit("/", 1)[1] if by_range else bundle

    def active_destination(self, destination: str | None) -> str | None:
        """An unload's ``destinationBroker`` as a broker id; 409 when it is no active broker (both managers)."""
        if destination is None:
            return None
        destination = destination.removeprefix("http://").removeprefix("https://")
        if destination not in self.active_ids():
            raise SimError(409, "Not allowed unload namespace bundle to inactive destination broker")
        return destination

    def unload(self, bundle: str, destination: str | None = None) -> None:
        """PUT …/{bundle}/unload[?destinationBroker=]: validated as Pulsar does (409, 404, 412)."""
        with self.lock:
            destination = self.active_destination(destination)
            self.check_bundle(bundle)
            if destination is not None:
                self.affinity[self.affinity_key(bundle)] = destination  # the leader remembers it
            if self.in_transition(bundle):  # after the affinity, as Pulsar: the destination is kept
                raise unexpected("java.lang.IllegalStateException", f"Namespace bundle {bundle} is being unloaded")
            owner = self.ownership.get(bundle)
            if owner is None:
                return  # unowned: 204, nothing to close
            self._release(bundle)
            self.unloading[bundle] = self.now_s + UNLOAD_WINDOW_S

    def _release(self, bundle: str) -> None:
        self.topics_disconnected += len(self.topics_in(bundle))
        self.unloads += 1
        self.released_from[bundle] = self.ownership.pop(bundle)
        self.pending_lookups[bundle] = self.now_s + RECONNECT_DELAY_S

    def in_transition(self, bundle: str) -> bool:
        """Whether ``bundle`` is within its unload's window (its ownership disabled, topics closing)."""
        with self.lock:
            until = self.unloading.get(bundle)
            if until is not None and self.now_s >= until:
                del self.unloading[bundle]
                return False
            return until is not None

    def check_bundle(self, bundle: str) -> None:
        """The namespace exists (404) and the range is one of its bundles (412, validateNamespaceBundleRange)."""
        namespace, _, range_text = bundle.rpartition("/")
        if namespace not in self.namespaces:
            raise admin_errors.namespace_missing()
        admin_errors.validate_range(self.namespaces[namespace], range_text)

    def owner_of(self, bundle: str) -> str | None:
        with self.lock:
            return self.ownership.get(bundle)

    def assign(self, bundle: str) -> str:
        """The leader's assignment of an unowned bundle: the remembered destination once, else placement."""
        with self.lock:
            if bundle in self.ownership:
                return self.ownership[bundle]
            alive = self.active_ids()
            if not alive:
                raise SimError(503, "No broker is available")
            destination = self.affinity.pop(self.affinity_key(bundle), None)
            if destination not in alive:
                destination = self._place(bundle)
            self.ownership[bundle] = destination
            self.pending_lookups.pop(bundle, None)
            self.preallocated.setdefault(destination, []).append(bundle)
            source = self.released_from.pop(bundle, None)
            if source is not None:
                self.moves.append((self.now_s, bundle, source, destination))
            return destination

    def _place(self, bundle: str) -> str:
        """The cluster's own placement, within what the namespace policies allow (SimError 503: nothing)."""
        policies = self.namespace_policies()
        namespace = bundle_names.namespace_of(bundle)
        alive = ns_policies.apply_namespace_policies(namespace, self.active_ids(), policies)
        if not alive:
            raise SimError(503, f"No broker is available for {bundle}: its namespace policies allow no active broker")
        if self.scenario.placement == "random":
            if policies.group_of(namespace) is not None:  # filterAntiAffinityGroupOwnedBrokers
                owned = ns_policies.namespaces_by_broker({b: self.ownership.owned(b) for b in alive})
                counts = ns_policies.anti_affinity_namespace_owned_brokers(namespace, owned, policies)
                alive = ns_policies.filter_anti_affinity_group_owned_brokers(alive, counts, policies.domains)
            return self.rng.choice(alive)
        view = self.leader_view()
        load = LoadData(view, dict(self.leader_bundle_data), {})
        ctx = PlacementContext(
            load,
            self.config,
            self.rng,
            preallocated={b: list(v) for b, v in self.preallocated.items() if b in view.brokers},
        )
        chosen = select_broker(bundle, PLACEMENT["LeastLongTermMessageRate"], ctx)
        return chosen or self.rng.choice(alive)

    def bundle_of_topic(self, topic: str) -> str:
        rest = topic.split("://", 1)[-1]
        namespace = "/".join(rest.split("/")[:2])
        if namespace not in self.namespaces:
            raise SimError(404, f"Namespace {namespace} does not exist")
        return bundle_names.bundle_of_topic(namespace, self.namespaces[namespace], topic)

    def _initial_assignment(self) -> None:
        if self.scenario.balanced_start:
            self.ownership = self.balanced_deal()
            return
        names = {b.name: b.id for b in self.brokers.values()}
        weights = self.scenario.initial_owners or {n: 1.0 for n in names}
        pool = [names[n] for n in sorted(weights) if weights[n] > 0]
        total = sum(weights[n] for n in sorted(weights) if weights[n] > 0)
        bundles = [b for ns in sorted(self.namespaces) for b in self._bundles_of(ns)]
        self.rng.shuffle(bundles)
        # deal bundles out in proportion to the weights (largest remainder, deterministic)
        quotas = {
            bid: weights[n] / total * len(bundles)
            for n, bid in ((n, names[n]) for n in sorted(weights))
            if weights[n] > 0
        }
        counts = {bid: int(q) for bid, q in quotas.items()}
        for bid in sorted(quotas, key=lambda b: quotas[b] - counts[b], reverse=True)[
            : len(bundles) - sum(counts.values())
        ]:
            counts[bid] += 1
        iterator = iter(bundles)
        for bid in pool:
            for _ in range(counts[bid]):
                self.ownership[next(iterator)] = bid
        if self.scenario.isolation_policies:  # an isolated namespace starts on brokers its policy allows
            policies, alive = self.namespace_policies(), self.active_ids()
            for bundle in bundles:
                allowed = ns_policies.apply_namespace_policies(bundle_names.namespace_of(bundle), alive, policies)
                if allowed and self.ownership.get(bundle) not in allowed:
                    self.ownership[bundle] = min(allowed, key=lambda b: (len(self.ownership.owned(b)), b))

    def isolation_policies_doc(self) -> dict[str, Any] | None:
        """GET …/clusters/{cluster}/namespaceIsolationPolicies (None: none declared, Pulsar's 404): the
        scenario's broker names become regexes of their hosts, which is what Pulsar matches."""
        if not self.scenario.isolation_policies:
            return None
        names = sorted(b.name for b in self.brokers.values())

        def hosts(patterns: tuple[str, ...]) -> list[str]:
            found = {self.by_name(n).host for p in patterns for n in fnmatch.filter(names, p)}
            return [re.escape(h) for h in sorted(found)]

        return {
            p.name: {
                "namespaces": list(p.namespaces),
                "primary": hosts(p.primary),
                "secondary": hosts(p.secondary),
                "auto_failover_policy": {
                    "policy_type": ns_policies.MIN_AVAILABLE,
                    "parameters": {"min_limit": str(p.min_limit), "usage_threshold": str(p.usage_threshold)},
                },
            }
            for p in self.scenario.isolation_policies
        }

    def failure_domains_doc(self) -> dict[str, Any]:
        """GET …/clusters/{cluster}/failureDomains: domain → {"brokers": [broker ids]} (the scenario's names)."""
        names = sorted(b.name for b in self.brokers.values())
        return {
            domain: {"brokers": sorted({self.by_name(n).id for p in patterns for n in fnmatch.filter(names, p)})}
            for domain, patterns in self.scenario.failure_domains
        }

    def namespace_policies(self) -> ns_policies.NamespacePolicies:
        """The policies as the leader sees them (what the admin endpoints serve); failure domains only while
        failureDomainsEnabled (ModularLoadManagerImpl.refreshBrokerToFailureDomainMap returns at once otherwise)."""
        if self._policies is None or self._policies[0] != len(self.brokers):
            doc = self.isolation_policies_doc() or {}
            isolation = ns_policies.parse_isolation_policies(Reader(doc, "isolation_policies"))
            groups = MappingProxyType(dict(self.anti_affinity_groups))
            domains = {}
            if self.scenario.failure_domains_enabled:
                domains = ns_policies.parse_failure_domains(Reader(self.failure_domains_doc(), "failure_domains"))
            policies = ns_policies.NamespacePolicies(isolation, groups, domains=MappingProxyType(domains))
            self._policies = (len(self.brokers), policies)
        return self._policies[1]
