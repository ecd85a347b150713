"""The small state strategies carry from one cycle to the next, as one serialisable value.

Pulsar keeps these in the leader's memory (and loses them on a leader change); we keep them in a
value the planner returns and the daemon writes to its state file, so a restart does not reset hit
counters, history averages or grace periods. Strategies never mutate a state: they return a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from strategies.loaddata import BundleData

STATE_FORMAT = "pulsar-lb-state/1"


class StateError(ValueError):
    """A state document that cannot be read back."""


def _frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class TransferBrokerEma:
    """BrokerLoadData's moving averages, which the extensible manager's brokers compute themselves."""

    weighted_max_ema: float
    msg_throughput_ema: float
    updated_at: int


@dataclass(frozen=True)
class PendingMove:
    """A move PredictivePairingShedder planned whose effect the reports may not show yet."""

    source: str
    destination: str
    planned_at: int
    traffic: tuple[float, float, float]  # msg rate in + out, throughput in, throughput out

    def to_json(self) -> list:
        return [self.source, self.destination, self.planned_at, list(self.traffic)]

    @classmethod
    def from_json(cls, doc: Any) -> PendingMove:
        return cls(str(doc[0]), str(doc[1]), int(doc[2]), tuple(float(v) for v in doc[3]))  # type: ignore[arg-type]


@dataclass(frozen=True)
class StrategyState:
    bundle_data: Mapping[str, BundleData] = field(default_factory=_frozen)
    # bundle -> epoch ms of its last unload (loadBalancerSheddingGracePeriodMinutes)
    recently_unloaded: Mapping[str, int] = field(default_factory=_frozen)
    # ThresholdShedder.brokerAvgResourceUsage and LeastResourceUsageWithWeight's own map
    threshold_ema: Mapping[str, float] = field(default_factory=_frozen)
    placement_ema: Mapping[str, float] = field(default_factory=_frozen)
    # AvgShedder's per-broker hit counters
    avg_hits_high: Mapping[str, int] = field(default_factory=_frozen)
    avg_hits_low: Mapping[str, int] = field(default_factory=_frozen)
    # TransferShedder
    transfer_hit_count: int = 0
    transfer_recent_brokers: Mapping[str, int] = field(default_factory=_frozen)
    transfer_ema: Mapping[str, TransferBrokerEma] = field(default_factory=_frozen)
    # PredictivePairingShedder: moves not yet visible, predicted usage per broker, and the last errors
    predictive_pending: Mapping[str, PendingMove] = field(default_factory=_frozen)
    predictions: Mapping[str, tuple[float, int]] = field(default_factory=_frozen)
    prediction_errors: Mapping[str, float] = field(default_factory=_frozen)
    predictive_members: frozenset[str] = frozenset()
    predictive_changed_at: int = 0  # when a broker last joined or left

    def forget_unloads(self, bundles: set[str]) -> StrategyState:
        """Planned unloads that were not carried out: out of the grace period and the in-flight moves."""
        if not bundles:
            return self
        return self.evolve(
            recently_unloaded={b: t for b, t in self.recently_unloaded.items() if b not in bundles},
            predictive_pending={b: m for b, m in self.predictive_pending.items() if b not in bundles},
        )

    def evolve(self, **changes: Any) -> StrategyState:
        frozen = {k: _frozen(v) if isinstance(v, dict) else v for k, v in changes.items()}
        return replace(self, **frozen)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "bundleData": {b: d.to_json() for b, d in sorted(self.bundle_data.items())},
            "recentlyUnloaded": dict(sorted(self.recently_unloaded.items())),
            "thresholdEma": dict(sorted(self.threshold_ema.items())),
            "placementEma": dict(sorted(self.placement_ema.items())),
            "avgHitsHigh": dict(sorted(self.avg_hits_high.items())),
            "avgHitsLow": dict(sorted(self.avg_hits_low.items())),
            "transferHitCount": self.transfer_hit_count,
            "transferRecentBrokers": dict(sorted(self.transfer_recent_brokers.items())),
            "transferEma": {
                b: [e.weighted_max_ema, e.msg_throughput_ema, e.updated_at]
                for b, e in sorted(self.transfer_ema.items())
            },
            "predictivePending": {b: m.to_json() for b, m in sorted(self.predictive_pending.items())},
            "predictions": {b: list(v) for b, v in sorted(self.predictions.items())},
            "predictionErrors": dict(sorted(self.prediction_errors.items())),
            "predictiveMembers": sorted(self.predictive_members),
            "predictiveChangedAt": self.predictive_changed_at,
        }

    @classmethod
    def from_json(cls, doc: Any) -> StrategyState:
        if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
            raise StateError(f"not a {STATE_FORMAT} document")
        try:
            return cls().evolve(
                bundle_data={b: BundleData.from_json(d) for b, d in doc.get("bundleData", {}).items()},
                recently_unloaded={b: int(t) for b, t in doc.get("recentlyUnloaded", {}).items()},
                threshold_ema={b: float(v) for b, v in doc.get("thresholdEma", {}).items()},
                placement_ema={b: float(v) for b, v in doc.get("placementEma", {}).items()},
                avg_hits_high={b: int(v) for b, v in doc.get("avgHitsHigh", {}).items()},
                avg_hits_low={b: int(v) for b, v in doc.get("avgHitsLow", {}).items()},
                transfer_hit_count=int(doc.get("transferHitCount", 0)),
                transfer_recent_brokers={b: int(t) for b, t in doc.get("transferRecentBrokers", {}).items()},
                transfer_ema={
                    b: TransferBrokerEma(float(v[0]), float(v[1]), int(v[2]))
                    for b, v in doc.get("transferEma", {}).items()
                },
                predictive_pending={b: PendingMove.from_json(m) for b, m in doc.get("predictivePending", {}).items()},
                predictions={b: (float(v[0]), int(v[1])) for b, v in doc.get("predictions", {}).items()},
                prediction_errors={b: float(v) for b, v in doc.get("predictionErrors", {}).items()},
                predictive_members=frozenset(str(b) for b in doc.get("predictiveMembers", [])),
                predictive_changed_at=int(doc.get("predictiveChangedAt", 0)),
            )
        except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise StateError(f"malformed state document: {exc}") from None
