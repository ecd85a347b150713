"""What Pulsar's leader derives from the brokers' reports before any strategy runs.

``TimeAverageMessageData`` keeps a short (10-sample) and a long (1000-sample) running average per
bundle; the leader samples every bundle once per report round, we sample once per planning cycle.
``LoadData`` is the per-cycle view the strategies read: the snapshot, those averages, and the
bundles still inside the grace period after an unload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any, NamedTuple

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.averages import NUM_LONG_SAMPLES, NUM_SHORT_SAMPLES, MessageAverage
from pulsar_lb_operator.strategies.documents import Reader, StateError
from pulsar_lb_operator.strategies.expected import Expected, Traffic, expected_traffic
from pulsar_lb_operator.strategies.profile import CostModel, LoadProfile
from pulsar_lb_operator.strategies.rails import DEFAULT_RAILS, Rails
from pulsar_lb_operator.strategies.snapshots import BundleStats, ClusterSnapshot


class BundleData(NamedTuple):
    """ModularLoadManagerImpl's BundleData: the short- and long-term averages, topics, when last reported."""

    short: MessageAverage
    long: MessageAverage
    topics: int = 0
    last_seen: int = 0

    @classmethod
    def new(cls) -> BundleData:
        return _NEW_BUNDLE_DATA

    def update(self, stats: BundleStats, now: int) -> BundleData:
        """The data with one more sample (made as ``MessageAverage.update`` makes its averages)."""
        return tuple.__new__(BundleData, (self.short.update(stats), self.long.update(stats), stats.topics, now))

    def to_json(self) -> dict[str, Any]:
        return {
            "short": self.short.to_json(),
            "long": self.long.to_json(),
            "topics": self.topics,
            "lastSeen": self.last_seen,
        }

    @classmethod
    def from_json(cls, data: Any, path: str = "bundle data") -> BundleData:
        """What ``to_json`` wrote; anything else raises StateError naming the field."""
        reader = Reader(data, path, StateError)
        short, long = reader.child("short"), reader.child("long")
        return cls(
            MessageAverage.from_json(NUM_SHORT_SAMPLES, short.value, short.path),
            MessageAverage.from_json(NUM_LONG_SAMPLES, long.value, long.path),
            reader.child("topics", required=False, default=0).integer(),
            reader.child("lastSeen", required=False, default=0).integer(),
        )


_NEW_BUNDLE_DATA = BundleData(MessageAverage(NUM_SHORT_SAMPLES), MessageAverage(NUM_LONG_SAMPLES))

# Bundle averages are forgotten when no broker has reported the bundle for this long.
BUNDLE_DATA_RETENTION_MS = 24 * 3600 * 1000


def update_bundle_data(previous: Mapping[str, BundleData], snapshot: ClusterSnapshot) -> dict[str, BundleData]:
    """One sample per reported bundle (ModularLoadManagerImpl.updateBundleData)."""
    now = snapshot.taken_at
    data = {b: d for b, d in previous.items() if now - d.last_seen <= BUNDLE_DATA_RETENTION_MS}
    for broker in snapshot.brokers.values():
        for bundle, stats in broker.lastStats.items():
            data[bundle] = data.get(bundle, _NEW_BUNDLE_DATA).update(stats, now)
    return data


@dataclass(frozen=True)
class LoadData:
    snapshot: ClusterSnapshot
    bundle_data: Mapping[str, BundleData]
    recently_unloaded: Mapping[str, int]
    cost_models: Mapping[tuple[str, str], CostModel] = field(default_factory=lambda: MappingProxyType({}))
    rails: Rails = DEFAULT_RAILS  # the executor's caps, for a strategy that plans a cycle's moves together

    # What the strategies ask of the bundle data, per broker, again and again in one cycle: computed once,
    # on first use (the snapshot's own lookups are ``snapshot.index``).

    @cached_property
    def _sheddable(self) -> Mapping[str, BundleData]:
        return MappingProxyType({b: d for b, d in self.bundle_data.items() if not bundle_names.is_system_bundle(b)})

    @cached_property
    def _candidates(self) -> dict[str, list[tuple[str, BundleData]]]:
        return {}

    @cached_property
    def _long_term_rates(self) -> dict[str, float]:
        return {}

    def sheddable_bundles(self) -> Mapping[str, BundleData]:
        """getBundleDataForLoadShedding: bundle data without system namespaces."""
        return self._sheddable

    def shedding_candidates(self, broker: str) -> list[tuple[str, BundleData]]:
        """The broker's bundles a shedder may unload, by name: those of ``sheddable_bundles`` it owns (its
        report's ``bundles`` and ``lastStats``) that are out of their grace period."""
        candidates = self._candidates.get(broker)
        if candidates is None:
            data, recent = self.bundle_data, self.recently_unloaded
            candidates = self._candidates[broker] = sorted(
                (b, data[b])
                for b in self.snapshot.index.owned(broker)
                if b in data and b not in recent and not bundle_names.is_system_bundle(b)
            )
        return candidates

    @cached_property
    def expected(self) -> Expected:
        """What each bundle is expected to carry, where its topics' rates jitter (``expected.expected_traffic``)."""
        return expected_traffic(self.snapshot, self.bundle_data)

    @cached_property
    def expected_traffic(self) -> Mapping[str, Traffic]:
        """Each bundle whose report departs from what it is expected to carry, with that; any other bundle is
        expected to carry what its report says."""
        return MappingProxyType(self.expected.traffic)

    def bundle_or_default(self, bundle: str) -> BundleData:
        return self.bundle_data.get(bundle) or _NEW_BUNDLE_DATA

    def with_profile(self, profile: LoadProfile) -> LoadData:
        """The same data with the aggregated history's long-term averages (where it has them) and cost models."""
        long_term = profile.long_term
        merged = {b: d._replace(long=long_term[b]) if b in long_term else d for b, d in self.bundle_data.items()}
        return replace(self, bundle_data=MappingProxyType(merged), cost_models=profile.cost_models)

    def long_term_msg_rate(self, broker: str) -> float:
        """TimeAverageBrokerData long-term msg rate in+out: the sum over the broker's reported bundles."""
        rate = self._long_term_rates.get(broker)
        if rate is None:
            load = self.snapshot.brokers[broker]
            rate = self._long_term_rates[broker] = sum(self.bundle_or_default(b).long.msg_rate for b in load.lastStats)
        return rate


def build_load_data(
    snapshot: ClusterSnapshot,
    previous_bundle_data: Mapping[str, BundleData],
    recently_unloaded: Mapping[str, int],
    grace_period_ms: int,
) -> tuple[LoadData, dict[str, BundleData], dict[str, int]]:
    """Sample this snapshot and drop grace-period entries that expired (doLoadShedding step 2).

    ModularLoadManagerImpl.doLoadShedding removes an entry when ``unloadedAt < now − grace``: one
    unloaded exactly a grace period ago is still in its grace period.
    """
    bundle_data = update_bundle_data(previous_bundle_data, snapshot)
    timeout = snapshot.taken_at - grace_period_ms
    recent = {b: t for b, t in recently_unloaded.items() if not t < timeout}
    load = LoadData(snapshot, MappingProxyType(dict(bundle_data)), MappingProxyType(dict(recent)))
    return load, bundle_data, recent
