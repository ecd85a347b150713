"""Namespace policies: isolation policies (which brokers may own a namespace) and anti-affinity groups.

Pure ports of Pulsar's code, each function naming the Java method it follows:

* ``NamespaceIsolationPolicies`` / ``NamespaceIsolationPolicyImpl`` / ``MinAvailablePolicy``
  (pulsar-common ``policies.impl``): the first policy whose ``namespaces`` regex matches the namespace
  (``getPolicyByNamespace``, in the document's order), primary and secondary brokers by a regex over
  the broker's *host* (``isPrimaryBroker``/``isSecondaryBroker``; ``LoadManagerShared.parseBrokerHost``
  takes the id up to its last ``:``), shared brokers (``isSharedBroker``: primary in no policy — a
  policy's secondaries stay shared), failover to the secondaries while fewer than ``min_limit``
  primaries are available (``MinAvailablePolicy.shouldFailoverToSecondary(int)``). Java's
  ``String.matches`` is a whole-string match: ``re.fullmatch`` here.
* ``LoadManagerShared.applyNamespacePolicies``, ``filterAntiAffinityGroupOwnedBrokers`` (with
  ``filterDomainsNotHavingLeastNumberAntiAffinityNamespaces``), ``getAntiAffinityNamespaceOwnedBrokers``
  and ``shouldAntiAffinityNamespaceUnload``.
* ``ModularLoadManagerImpl.shouldNamespacePoliciesUnload``.
* The extensible manager's ``TransferShedder.isTransferable`` (its broker filters
  ``BrokerIsolationPoliciesFilter`` and ``AntiAffinityGroupPolicyFilter``) and
  ``isLoadBalancerSheddingBundlesWithPoliciesEnabled`` / ``TopKBundles.hasPolicies``.

Ours, on top: a namespace whose policies could not be read (``unknown``) has no candidate broker at
all — never "no policy", which is the unsafe direction.

In a snapshot (``pulsar-lb-snapshot/1``, all optional): ``namespaceIsolationPolicies`` is the body of
``GET /admin/v2/clusters/{cluster}/namespaceIsolationPolicies`` (``isolationPolicies``, its older name, is
read too); ``failureDomains`` the body of ``GET /admin/v2/clusters/{cluster}/failureDomains`` (domain →
``{"brokers": [broker ids]}``), present only when the brokers run with ``failureDomainsEnabled`` — the
anti-affinity filter spreads a group across domains only then, as ``LoadManagerShared`` does;
``namespaces[ns].antiAffinityGroup`` the answer of ``GET /admin/v2/namespaces/{tenant}/{ns}/antiAffinity``;
``policiesUnknown`` maps a namespace (or ``*``: every namespace) to why its policies could not be read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.documents import Reader, describe

if TYPE_CHECKING:  # both read a snapshot's policies from here: named for the checker only
    from pulsar_lb_operator.strategies.config import LoadBalancerConfig
    from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot

MIN_AVAILABLE = "min_available"  # AutoFailoverPolicyType: the only policy type Pulsar has
ALL = "*"  # policiesUnknown key: the policies of every namespace are unknown
DEFAULT_DOMAIN = "default"  # LoadManagerShared.DEFAULT_DOMAIN


def broker_host(broker_id: str) -> str | None:
    """LoadManagerShared.parseBrokerHost: the id up to its last ``:`` (None: not host:port, skipped)."""
    index = broker_id.rfind(":")
    return broker_id[:index] if index > -1 else None


def _matches_any(patterns: Iterable[str], text: str) -> bool:
    """NamespaceIsolationPolicyImpl.matchesBrokerRegex / matchNamespaces: Java's ``String.matches``."""
    return any(re.fullmatch(p, text) for p in patterns)


@dataclass(frozen=True)
class IsolationPolicy:
    """One entry of a cluster's namespace isolation policies (NamespaceIsolationDataImpl)."""

    name: str
    namespaces: tuple[str, ...]
    primary: tuple[str, ...]
    secondary: tuple[str, ...]
    min_limit: int
    usage_threshold: int
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def matches_namespace(self, namespace: str) -> bool:
        return _matches_any(self.namespaces, namespace)

    def is_primary(self, host: str) -> bool:
        return _matches_any(self.primary, host)

    def is_secondary(self, host: str) -> bool:
        return _matches_any(self.secondary, host)

    def should_failover(self, primaries: int) -> bool:
        """MinAvailablePolicy.shouldFailoverToSecondary(int totalPrimaryCandidates)."""
        return primaries < self.min_limit

    def to_json(self) -> dict[str, Any]:
        if self.raw:
            return dict(self.raw)
        return {
            "namespaces": list(self.namespaces),
            "primary": list(self.primary),
            "secondary": list(self.secondary),
            "auto_failover_policy": {
                "policy_type": MIN_AVAILABLE,
                "parameters": {"min_limit": str(self.min_limit), "usage_threshold": str(self.usage_threshold)},
            },
        }


@dataclass(frozen=True)
class NamespacePolicies:
    """What the cluster says about namespaces' placement: isolation policies, anti-affinity groups, and
    the namespaces whose policies could not be read."""

    isolation: tuple[IsolationPolicy, ...] = ()
    groups: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # namespace → group
    unknown: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # namespace or "*" → why
    # broker id → failure domain (ModularLoadManagerImpl.brokerToFailureDomainMap): only with failureDomainsEnabled
    domains: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def empty(self) -> bool:
        return not (self.isolation or self.groups or self.unknown or self.domains)

    def unknown_reason(self, namespace: str) -> str | None:
        """Why the policies of ``namespace`` are not known (None: they are)."""
        return self.unknown.get(namespace) or self.unknown.get(ALL)

    def policy_for(self, namespace: str) -> IsolationPolicy | None:
        """NamespaceIsolationPolicies.getPolicyByNamespace: the first policy matching the namespace."""
        for policy in self.isolation:
            if policy.matches_namespace(namespace):
                return policy
        return None

    def is_shared(self, host: str) -> bool:
        """NamespaceIsolationPolicies.isSharedBroker: a host that is no policy's primary broker."""
        return not any(policy.is_primary(host) for policy in self.isolation)

    def group_of(self, namespace: str) -> str | None:
        """LoadManagerShared.getNamespaceAntiAffinityGroup: the group, None when blank or not set."""
        group = self.groups.get(namespace)
        return group if group and group.strip() else None

    def has_policies(self, namespace: str) -> bool:
        """TopKBundles.hasPolicies: an isolation policy or an anti-affinity group (unknown counts as yes)."""
        return (
            self.unknown_reason(namespace) is not None
            or self.policy_for(namespace) is not None
            or self.group_of(namespace) is not None
        )

    def write_json(self, doc: dict[str, Any]) -> None:
        """Into a snapshot document: ``namespaceIsolationPolicies``, ``failureDomains``, each group as
        ``namespaces[ns].antiAffinityGroup`` (an entry of its own when the namespace has no boundaries),
        ``policiesUnknown``."""
        if self.isolation:
            doc["namespaceIsolationPolicies"] = {p.name: p.to_json() for p in self.isolation}
        if self.domains:
            doc["failureDomains"] = failure_domains_json(self.domains)
        if self.groups:
            namespaces = doc.setdefault("namespaces", {})
            for namespace, group in sorted(self.groups.items()):
                namespaces.setdefault(namespace, {})["antiAffinityGroup"] = group
            doc["namespaces"] = dict(sorted(namespaces.items()))
        if self.unknown:
            doc["policiesUnknown"] = dict(sorted(self.unknown.items()))


NO_POLICIES = NamespacePolicies()


# --------------------------------------------------------------------------------------------
# Placement filters (LoadManagerShared)


def apply_namespace_policies(
    namespace: str,
    brokers: Iterable[str],
    policies: NamespacePolicies,
    loads_persistent_topics: Callable[[str], bool] = lambda _broker: True,
) -> list[str]:
    """LoadManagerShared.applyNamespacePolicies: the brokers that may own a bundle of ``namespace``.

    A namespace an isolation policy matches goes to that policy's primary brokers, plus its secondary
    brokers when fewer than ``min_limit`` primaries are available (the topic-mode flags are not looked
    at in that branch, as in Pulsar). Any other namespace goes to the shared brokers — those no policy
    names as primary — that load persistent topics (the bundle of an unload is built from its name, so
    ``hasNonPersistentTopic`` is false and ``persistentTopicsEnabled`` is the flag that counts).
    """
    policy = policies.policy_for(namespace)
    primaries: list[str] = []
    others: list[str] = []
    for broker in sorted(brokers):
        host = broker_host(broker)
        if host is None:  # "Unable to parse host": skipped
            continue
        if policy is not None:
            if policy.is_primary(host):
                primaries.append(broker)
            elif policy.is_secondary(host):
                others.append(broker)
        elif loads_persistent_topics(broker) and policies.is_shared(host):
            others.append(broker)
    if policy is None:
        return others
    return sorted(primaries + others) if policy.should_failover(len(primaries)) else primaries


def anti_affinity_namespace_owned_brokers(
    namespace: str, owned: Mapping[str, Iterable[str]], policies: NamespacePolicies
) -> dict[str, int] | None:
    """LoadManagerShared.getAntiAffinityNamespaceOwnedBrokers: broker → how many of ``owned[broker]``
    (namespaces) belong to the anti-affinity group of ``namespace`` (compared ignoring case); None when
    ``namespace`` has no group.

    The modular manager passes each broker's namespaces once (brokerToNamespaceToBundleRange), the
    extensible one each owned bundle's namespace (the ownership channel): it counts bundles.
    """
    group = policies.group_of(namespace)
    if group is None:
        return None
    target = group.lower()
    counts: dict[str, int] = {}
    for broker, namespaces in owned.items():
        for other in namespaces:
            other_group = policies.group_of(other)
            if other_group is not None and other_group.lower() == target:
                counts[broker] = counts.get(broker, 0) + 1
    return counts


def failure_domains_json(domains: Mapping[str, str]) -> dict[str, Any]:
    """broker → domain as ``GET …/clusters/{cluster}/failureDomains`` gives it: domain → {"brokers": [...]}."""
    out: dict[str, dict[str, list[str]]] = {}
    for broker, domain in sorted(domains.items()):
        out.setdefault(domain, {"brokers": []})["brokers"].append(broker)
    return dict(sorted(out.items()))


def filter_anti_affinity_group_owned_brokers(
    candidates: Iterable[str], counts: Mapping[str, int] | None, domains: Mapping[str, str] | None = None
) -> list[str]:
    """LoadManagerShared.filterAntiAffinityGroupOwnedBrokers: spread a group's namespaces.

    With failure domains (``domains``: broker → domain, given only when ``failureDomainsEnabled``),
    only the brokers of the domains owning the fewest of the group's namespaces stay
    (filterDomainsNotHavingLeastNumberAntiAffinityNamespaces; a broker in no domain is in "default").
    Then the brokers owning the fewest stay: when some candidate owns none, every broker owning any
    is removed. ``counts`` None (the namespace has no group): nothing is filtered.
    """
    kept = list(candidates)
    if not kept or counts is None:
        return kept
    if domains:
        per_domain: dict[str, int] = {}
        for broker in kept:
            domain = domains.get(broker, DEFAULT_DOMAIN)
            per_domain[domain] = per_domain.get(domain, 0) + counts.get(broker, 0)
        fewest_in_domain = min(per_domain.values())
        kept = [b for b in kept if per_domain[domains.get(b, DEFAULT_DOMAIN)] == fewest_in_domain]
    fewest = min(counts.get(b, 0) for b in kept)
    if fewest == 0:
        return [b for b in kept if counts.get(b, 0) <= 0]
    return [b for b in kept if counts.get(b) == fewest]


def should_anti_affinity_namespace_unload(
    current: str, candidates: Collection[str], counts: Mapping[str, int] | None
) -> bool:
    """LoadManagerShared.shouldAntiAffinityNamespaceUnload: False only when unloading could not land the
    namespace anywhere owning fewer of its group than ``current`` (every candidate owns the same number)."""
    if not counts:
        return True
    least = 2**31 - 1  # Integer.MAX_VALUE
    current_count = 0
    for broker in candidates:
        count = counts.get(broker, 0)
        if broker == current:
            current_count = count
        least = min(least, count)
    if least == 0 or current_count > least:
        return True
    owners_of_least = sum(1 for broker in candidates if counts.get(broker, 0) == least)
    return len(candidates) != owners_of_least


def should_namespace_policies_unload(current: str, candidates: Iterable[str]) -> bool:
    """ModularLoadManagerImpl.shouldNamespacePoliciesUnload: some broker other than the owner satisfies
    the namespace's policies (``candidates``: applyNamespacePolicies over the available brokers)."""
    return any(broker != current for broker in candidates)


def shedding_allowed(namespace: str, policies: NamespacePolicies, enabled: bool) -> bool:
    """TransferShedder.isLoadBalancerSheddingBundlesWithPoliciesEnabled (and TopKBundles.hasPolicies): a
    bundle whose namespace has an isolation policy or an anti-affinity group is shed only when
    ``loadBalancerSheddingBundlesWithPoliciesEnabled``; one whose policies are unknown never is."""
    if policies.unknown_reason(namespace) is not None:
        return False
    return enabled if policies.has_policies(namespace) else True


def is_transferable(
    namespace: str,
    source: str,
    destination: str | None,
    brokers: Iterable[str],
    policies: NamespacePolicies,
    *,
    policies_enabled: bool,
    transfer_enabled: bool,
    loads_persistent_topics: Callable[[str], bool] = lambda _broker: True,
    owned_bundles: Callable[[], Mapping[str, list[str]]] = dict,
) -> bool:
    """TransferShedder.isTransferable with the broker filters that namespace policies drive:
    BrokerIsolationPoliciesFilter (applyNamespacePolicies) and AntiAffinityGroupPolicyFilter (the
    extensible manager counts the group's *bundles* each broker owns: ``owned_bundles()`` gives broker →
    the namespace of each bundle it owns). The destination must survive the filters; then, without a
    transfer, any other broker must; with one, the destination."""
    if not shedding_allowed(namespace, policies, policies_enabled):
        return False
    candidates = apply_namespace_policies(namespace, brokers, policies, loads_persistent_topics)
    if policies.group_of(namespace) is not None:
        counts = anti_affinity_namespace_owned_brokers(namespace, owned_bundles(), policies)
        candidates = filter_anti_affinity_group_owned_brokers(candidates, counts)
    if destination is not None and destination not in candidates:
        return False
    others = [b for b in candidates if b != source]
    if destination is None or not transfer_enabled:
        return bool(others)
    return destination in others


def namespaces_by_broker(
    owned: Mapping[str, Iterable[str]], per_bundle: bool = False, skip_system: bool = False
) -> dict[str, list[str]]:
    """broker → the namespace of each bundle it owns (``per_bundle``) or each namespace once."""
    out: dict[str, list[str]] = {}
    for broker, bundles in owned.items():
        names = [bundle_names.namespace_of(b) for b in bundles]
        if skip_system:
            names = [n for n in names if not bundle_names.is_system_namespace(n)]
        out[broker] = names if per_bundle else sorted(set(names))
    return out


# --------------------------------------------------------------------------------------------
# Reading: the admin API's bodies as they are, into NamespacePolicies (strict, naming the path).


def _regexes(reader: Reader) -> tuple[str, ...]:
    out = []
    for item in reader.items():
        text = item.value
        if not isinstance(text, str):
            raise item.fail(f"expected a regular expression, got {describe(text)}")
        try:
            re.compile(text)
        except re.error as exc:
            raise item.fail(f"not a regular expression this operator can read ({exc})") from None
        out.append(text)
    return tuple(out)


def _parameter(reader: Reader) -> int:
    """MinAvailablePolicy: ``Integer.parseInt`` of a parameter (Pulsar serializes them as strings)."""
    value = reader.value
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d{1,10}", value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        raise reader.fail(f"expected an integer, got {describe(reader.value)}")
    return value


def parse_isolation_policy(name: str, reader: Reader) -> IsolationPolicy:
    """One NamespaceIsolationDataImpl; its auto_failover_policy must build a MinAvailablePolicy."""
    data = reader.obj()
    failover = reader.child("auto_failover_policy")
    policy_type = failover.child("policy_type").value
    if policy_type != MIN_AVAILABLE:
        raise failover.child("policy_type").fail(f"expected {MIN_AVAILABLE!r}, got {describe(policy_type)}")
    parameters = failover.child("parameters")
    return IsolationPolicy(
        name=name,
        namespaces=_regexes(reader.child("namespaces")),
        primary=_regexes(reader.child("primary", required=False, default=[])),
        secondary=_regexes(reader.child("secondary", required=False, default=[])),
        min_limit=_parameter(parameters.child("min_limit")),
        usage_threshold=_parameter(parameters.child("usage_threshold")),
        raw=MappingProxyType(dict(data)),
    )


def parse_isolation_policies(reader: Reader) -> tuple[IsolationPolicy, ...]:
    """The body of ``GET /admin/v2/clusters/{cluster}/namespaceIsolationPolicies``: name → policy."""
    return tuple(parse_isolation_policy(name, entry) for name, entry in reader.entries())


def parse_group(reader: Reader) -> str | None:
    """An anti-affinity group: a string (blank or null: none)."""
    value = reader.value
    if value is None:
        return None
    if not isinstance(value, str):
        raise reader.fail(f"expected a string, got {describe(value)}")
    return value if value.strip() else None


def parse_failure_domains(reader: Reader) -> dict[str, str]:
    """ClustersBase.getFailureDomains' body (domain → FailureDomain ``{"brokers": [...]}``) as broker → domain
    (ModularLoadManagerImpl.refreshBrokerToFailureDomainMap: a broker listed twice ends in the last domain)."""
    domains: dict[str, str] = {}
    for name, entry in reader.entries():
        for broker in entry.child("brokers", required=False, default=[]).string_list():
            domains[broker] = name
    return domains


def parse_policies(root: Reader) -> NamespacePolicies:
    """The policy parts of a snapshot document (see the module docstring); all optional."""
    key = "namespaceIsolationPolicies" if "namespaceIsolationPolicies" in root.obj() else "isolationPolicies"
    isolation = parse_isolation_policies(root.child(key, required=False, default={}))
    domains = parse_failure_domains(root.child("failureDomains", required=False, default={}))
    groups: dict[str, str] = {}
    for namespace, entry in root.child("namespaces", required=False, default={}).entries():
        group = parse_group(entry.child("antiAffinityGroup", required=False, default=None))
        if group is not None:
            groups[namespace] = group
    unknown: dict[str, str] = {}
    for namespace, why in root.child("policiesUnknown", required=False, default={}).entries():
        unknown[namespace] = why.string()
    return NamespacePolicies(isolation, MappingProxyType(groups), MappingProxyType(unknown), MappingProxyType(domains))


def transfer_filter(
    snapshot: ClusterSnapshot, config: LoadBalancerConfig, brokers: Iterable[str] | None = None
) -> Callable[[str, str, str], bool]:
    """``is_transferable(bundle, source, destination)`` over one snapshot (a ClusterSnapshot) and
    configuration (a LoadBalancerConfig), as TransferShedder.isTransferable calls it in its loop. ``brokers``:
    the candidates the filters before these left (TransferShedder's topic-count and version filters), else all."""
    candidates = list(snapshot.brokers if brokers is None else brokers)
    reports, policies = snapshot.brokers, snapshot.policies
    owned: dict[str, list[str]] = {}

    def owned_bundles() -> Mapping[str, list[str]]:
        if not owned:
            owned.update(namespaces_by_broker({b: d.owned_bundles() for b, d in reports.items()}, per_bundle=True))
        return owned

    def check(bundle: str, source: str, destination: str) -> bool:
        return is_transferable(
            bundle_names.namespace_of(bundle),
            source,
            destination,
            candidates,
            policies,
            policies_enabled=config.loadBalancerSheddingBundlesWithPoliciesEnabled,
            transfer_enabled=config.loadBalancerTransferEnabled,
            loads_persistent_topics=lambda b: reports[b].persistentTopicsEnabled,
            owned_bundles=owned_bundles,
        )

    return check


def candidates_for(snapshot: Any, bundle: str) -> list[str]:
    """applyNamespacePolicies for ``bundle`` over a snapshot's brokers and their topic modes; no broker at
    all when its namespace's policies could not be read."""
    namespace = bundle_names.namespace_of(bundle)
    policies: NamespacePolicies = snapshot.policies
    if policies.unknown_reason(namespace) is not None:
        return []
    brokers = snapshot.brokers
    return apply_namespace_policies(namespace, brokers, policies, lambda b: brokers[b].persistentTopicsEnabled)
