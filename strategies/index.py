"""Lookups over one snapshot, each built once, on first use, so that planning a cycle stays linear in bundles.

A strategy asks the same questions again and again in one cycle — which bundles a broker owns, how
many topics it reports, how loaded it is, how many bundles of a namespace it has — and with a
thousand brokers and a hundred thousand bundles, answering each by a scan made a cycle quadratic.
``ClusterSnapshot.index`` answers them from tables built the first time they are asked for; the
snapshot is immutable, so they never go stale. (What depends on the strategies' bundle averages too —
the bundles a broker may shed, its long-term msg rate — is cached on ``LoadData``.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pulsar_lb_operator.strategies import bundles as bundle_names

if TYPE_CHECKING:  # snapshots.py builds the index
    from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot, ResourceWeights

T = TypeVar("T")


class SnapshotIndex:
    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self._brokers = snapshot.brokers
        self._owned: dict[str, frozenset[str]] = {}
        self._topics: dict[str, int] = {}
        self._namespace_counts: dict[str, Counter[str]] = {}
        self._owner: dict[str, str] | None = None
        self._namespace_bundles: Counter[str] | None = None
        self._usage: dict[tuple[ResourceWeights, bool], dict[str, float]] = {}
        self._over_topics: dict[int, frozenset[str]] = {}
        self._memo: dict[Hashable, Any] = {}

    def owned(self, broker: str) -> frozenset[str]:
        """The broker's bundles: its report's ``bundles`` and ``lastStats`` (BrokerLoad.owned_bundles)."""
        owned = self._owned.get(broker)
        if owned is None:
            owned = self._owned[broker] = self._brokers[broker].owned_bundles()
        return owned

    def owner(self, bundle: str) -> str | None:
        """The first broker, by id, that owns the bundle (ClusterSnapshot.owner_of)."""
        if self._owner is None:
            owner: dict[str, str] = {}
            for broker in sorted(self._brokers):
                for b in self.owned(broker):
                    owner.setdefault(b, broker)
            self._owner = owner
        return self._owner.get(bundle)

    def topics(self, broker: str) -> int:
        """Topics the broker reports: the sum over its ``lastStats``."""
        count = self._topics.get(broker)
        if count is None:
            count = self._topics[broker] = sum(s.topics for s in self._brokers[broker].lastStats.values())
        return count

    def brokers_over_topics(self, limit: int) -> frozenset[str]:
        """Brokers that report more than ``limit`` topics."""
        over = self._over_topics.get(limit)
        if over is None:
            over = self._over_topics[limit] = frozenset(b for b in self._brokers if self.topics(b) > limit)
        return over

    def namespace_bundles(self, broker: str, namespace: str) -> int:
        """How many of the broker's bundles belong to ``namespace``."""
        return self._namespace_counts_of(broker)[namespace]

    def namespaces(self, broker: str) -> frozenset[str]:
        """The namespaces the broker carries bundles of."""
        return frozenset(self._namespace_counts_of(broker))

    def _namespace_counts_of(self, broker: str) -> Counter[str]:
        counts = self._namespace_counts.get(broker)
        if counts is None:
            counts = self._namespace_counts[broker] = Counter(map(bundle_names.namespace_of, self.owned(broker)))
        return counts

    def owned_in_namespace(self, namespace: str) -> int:
        """Distinct bundles of ``namespace`` that some broker owns."""
        if self._namespace_bundles is None:
            every = {b for broker in self._brokers for b in self.owned(broker)}
            self._namespace_bundles = Counter(map(bundle_names.namespace_of, every))
        return self._namespace_bundles[namespace]

    def weighted_usage(self, broker: str, weights: ResourceWeights, memory: bool = True) -> float:
        """BrokerLoad.max_resource_usage_with_weight, computed once per broker and weights."""
        table = self._usage.setdefault((weights, memory), {})
        usage = table.get(broker)
        if usage is None:
            usage = table[broker] = self._brokers[broker].max_resource_usage_with_weight(weights, memory)
        return usage

    def weighted_usages(self, weights: ResourceWeights, memory: bool = True) -> Mapping[str, float]:
        """``weighted_usage`` of every broker."""
        for broker in self._brokers:
            self.weighted_usage(broker, weights, memory)
        return self._usage.setdefault((weights, memory), {})

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """Anything else that depends on the snapshot alone, computed once: ``key`` must name it and
        everything it depends on (e.g. the placement candidates of one isolation policy)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return cast(T, self._memo[key])
