"""Pools: the groups of brokers no bundle can move between, each balanced on its own.

A namespace isolation policy keeps a namespace on its primary (and secondary) brokers, and the other namespaces
off them (``policies.apply_namespace_policies``): a tenant isolated on brokers of its own shares no bundle with
the rest of the cluster. The cluster's balanced level is then out of reach of both sides — the isolated brokers
can give to none of the others nor take from them — and a plan toward it finds no move, even where the isolated
brokers are far apart from each other. So brokers are grouped into pools, joined by the namespaces that can move
between them (each namespace joins the brokers that carry it and those its policies allow), and each pool has its
own mean for the hit counters and its own balanced level. A cluster without isolation policies is one pool; a
namespace whose policies could not be read is allowed nowhere, and joins no brokers.
"""

from __future__ import annotations

from collections.abc import Iterable

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.shedding.predictive.pairing import allowed_brokers


def pools(load: LoadData, brokers: Iterable[str]) -> list[frozenset[str]]:
    """``brokers`` in groups no bundle can move between, each sorted group by its first broker (one group, all of
    them, when the cluster has no isolation policy and every namespace's policies are known)."""
    members = sorted(set(brokers))
    policies = load.snapshot.policies
    if not policies.isolation and not policies.unknown:
        return [frozenset(members)] if members else []
    parent = {b: b for b in members}
    carriers: dict[str, set[str]] = {}  # namespace → the brokers that carry it
    for broker in members:
        for namespace in load.snapshot.index.namespaces(broker):
            if not bundle_names.is_system_namespace(namespace):
                carriers.setdefault(namespace, set()).add(broker)
    # each allowed set once joined (one policy's namespaces share it), with its first broker
    anchors: dict[frozenset[str], list[str]] = {}
    for namespace, carrying in carriers.items():
        allowed = allowed_brokers(load, f"{namespace}/{bundle_names.FULL_RANGE}")
        if not allowed & parent.keys():
            continue  # its policies allow no broker (or could not be read): its bundles move nowhere
        anchor = anchors.get(allowed)
        if anchor is None:
            group = sorted(allowed & parent.keys())
            _join(parent, group)
            anchor = anchors[allowed] = group[:1]
        _join(parent, sorted(carrying - allowed) + anchor)  # a namespace where its policies would not put it
    groups: dict[str, set[str]] = {}
    for broker in members:
        groups.setdefault(_root(parent, broker), set()).add(broker)
    return sorted((frozenset(g) for g in groups.values()), key=min)


def _root(parent: dict[str, str], broker: str) -> str:
    while parent[broker] != broker:
        parent[broker] = parent[parent[broker]]
        broker = parent[broker]
    return broker


def _join(parent: dict[str, str], brokers: list[str]) -> None:
    """One group of ``brokers`` (union-find: ``parent`` leads each broker to its group's root)."""
    for broker in brokers[1:]:
        parent[_root(parent, broker)] = _root(parent, brokers[0])
