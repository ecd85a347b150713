"""The small state strategies carry from one cycle to the next, as one serialisable value.

Pulsar keeps these in the leader's memory (and loses them on a leader change); we keep them in a
value the planner returns and the daemon writes to its state file, so a restart does not reset hit
counters, history averages or grace periods. Strategies never mutate a state: they return a new one.

Reading one back is strict: a document that is not a well-formed state raises StateError naming the
field, never a fresh (reset) state. Keys an older version did not write are optional.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from pulsar_lb_operator.strategies.documents import MAX_AVERAGE, MAX_FINITE, Reader, StateError, describe, type_name
from pulsar_lb_operator.strategies.loaddata import BundleData

STATE_FORMAT = "pulsar-lb-state/1"


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

    def to_json(self) -> list[Any]:
        return [self.source, self.destination, self.planned_at, list(self.traffic)]

    @classmethod
    def from_json(cls, doc: Any, path: str = "pending move") -> PendingMove:
        source, destination, planned_at, traffic = Reader(doc, path, StateError).items(length=4)
        rate, thr_in, thr_out = (v.number(maximum=MAX_AVERAGE) for v in traffic.items(length=3))
        return cls(source.string(), destination.string(), planned_at.integer(), (rate, thr_in, thr_out))


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
    # TransferShedder: its hit count, recentlyUnloadedBrokers (broker → ms) and its own EMAs (only for brokers that
    # publish none: the modular load manager's reports, or a version without msgThroughputEMA). A plan's unloads
    # put their source in recentlyUnloadedBrokers at once; ``transfer_planned`` (bundle → source) and
    # ``transfer_recent_before`` (source → its entry before the plan) let ``forget_unloads`` take a source out
    # again when none of its unloads was sent, as UnloadScheduler records a broker only after an unload succeeded.
    transfer_hit_count: int = 0
    transfer_recent_brokers: Mapping[str, int] = field(default_factory=_frozen)
    transfer_ema: Mapping[str, TransferBrokerEma] = field(default_factory=_frozen)
    transfer_planned: Mapping[str, str] = field(default_factory=_frozen)
    transfer_recent_before: Mapping[str, int] = field(default_factory=_frozen)
    # PredictivePairingShedder: moves not yet visible, predicted usage per broker, and the last errors
    predictive_pending: Mapping[str, PendingMove] = field(default_factory=_frozen)
    predictions: Mapping[str, tuple[float, int]] = field(default_factory=_frozen)
    prediction_errors: Mapping[str, float] = field(default_factory=_frozen)
    predictive_members: frozenset[str] = frozenset()
    predictive_changed_at: int = 0  # when a broker last joined or left
    predictive_halves: frozenset[str] = frozenset()  # bundles its own splits made last cycle: expected, not a change
    predictive_dipped: frozenset[str] = frozenset()  # brokers whose hit counters the last reading held (``debounce``)
    # a broker being balanced (its counters not cleared since its last move) → that move's planned_at (``debounce``)
    predictive_moved_at: Mapping[str, int] = field(default_factory=_frozen)
    predictive_held: frozenset[str] = frozenset()  # of those, the ones a reading under the gap has not cleared since
    predictive_deferred: frozenset[str] = frozenset()  # brokers of the last plan's moves the rails' caps left to later
    # each broker's last CPU samples less its cost model's prediction (its steady level is their median's)
    predictive_residuals: Mapping[str, tuple[float, ...]] = field(default_factory=_frozen)
    # the modelled CPU level each of those was taken at (its noise is measured at the present level)
    predictive_residual_levels: Mapping[str, tuple[float, ...]] = field(default_factory=_frozen)
    # of those, the ones taken while a move of the broker's was showing, each by its age (0: the newest): the step to
    # each is its model's miss on the traffic that moved, not its samples' noise
    predictive_residual_moves: Mapping[str, tuple[int, ...]] = field(default_factory=_frozen)
    # a broker without a good model of its own: (its background when it carried nothing, Σ cost × predicted,
    # Σ predicted², samples): the least-squares sums that refine the cluster's slope for it
    predictive_learned: Mapping[str, tuple[float, float, float, int]] = field(default_factory=_frozen)
    # a broker with a good fit: how much more it pays for traffic than the cluster's per-core cost, by its fit at the
    # traffic it carried when first seen with it, and that fit's intercept
    predictive_scales: Mapping[str, tuple[float, float]] = field(default_factory=_frozen)
    # each broker's steady level at its last reports, before any move planned on them: the drift its traffic shows
    predictive_levels: Mapping[str, tuple[float, ...]] = field(default_factory=_frozen)
    # what the last cycle's moves change each broker's level by: its record moves by it at the next cycle
    predictive_level_moves: Mapping[str, float] = field(default_factory=_frozen)

    def forget_unloads(self, bundles: set[str]) -> StrategyState:
        """Planned unloads that were not carried out (refused, skipped, a dry run, a proposal): out of the grace
        period, the in-flight moves, the predictions of the brokers none of whose moves is left (no report will show
        a move never made: checked against one, a prediction would read as missing by the whole move, in the notes,
        the metrics and the broker's level; one with a move left keeps its own, which its next report checks) and
        their moves' times (no landing to wait for), the brokers of the plan's moves the caps left to later (the rest
        of a plan not carried out), and
        — for a source none of whose unloads is left — TransferShedder's recentlyUnloadedBrokers (back to what it
        was before the plan)."""
        if not bundles:
            return self
        pending = {b: m for b, m in self.predictive_pending.items() if b not in bundles}
        forgotten = [m for b, m in self.predictive_pending.items() if b in bundles]
        involved = {b for m in forgotten for b in (m.source, m.destination)} - {
            b for m in pending.values() for b in (m.source, m.destination)
        }
        forgotten_at = {m.planned_at for m in forgotten}
        touched = {b for m in forgotten for b in (m.source, m.destination)}
        changes: dict[str, Any] = {
            "recently_unloaded": {b: t for b, t in self.recently_unloaded.items() if b not in bundles},
            "predictive_pending": pending,
            "predictions": {b: p for b, p in self.predictions.items() if b not in involved},
            "predictive_moved_at": {
                b: t for b, t in self.predictive_moved_at.items() if b not in involved or t not in forgotten_at
            },
            "predictive_deferred": frozenset(),  # the rest of a plan whose moves were not all made is no plan's
            # a broker with a move not made: its record stays as its reports read it (one step the drift's median
            # ignores, where only some of its moves were made)
            "predictive_level_moves": {b: by for b, by in self.predictive_level_moves.items() if b not in touched},
        }
        if any(b in bundles for b in self.transfer_planned):
            kept = {b: source for b, source in self.transfer_planned.items() if b not in bundles}
            recent = dict(self.transfer_recent_brokers)
            for source in set(self.transfer_planned.values()) - set(kept.values()):
                if source in self.transfer_recent_before:
                    recent[source] = self.transfer_recent_before[source]
                else:
                    recent.pop(source, None)
            changes.update(transfer_planned=kept, transfer_recent_brokers=recent)
        return self.evolve(**changes)

    def evolve(self, **changes: Any) -> StrategyState:
        frozen: dict[str, Any] = {k: _frozen(v) if isinstance(v, dict) else v for k, v in changes.items()}
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
            "transferPlanned": dict(sorted(self.transfer_planned.items())),
            "transferRecentBefore": dict(sorted(self.transfer_recent_before.items())),
            "predictivePending": {b: m.to_json() for b, m in sorted(self.predictive_pending.items())},
            "predictions": {b: list(v) for b, v in sorted(self.predictions.items())},
            "predictionErrors": dict(sorted(self.prediction_errors.items())),
            "predictiveMembers": sorted(self.predictive_members),
            "predictiveChangedAt": self.predictive_changed_at,
            "predictiveHalves": sorted(self.predictive_halves),
            # written only when there is one, so that a state file written before it reads back byte for byte
            **({"predictiveDipped": sorted(self.predictive_dipped)} if self.predictive_dipped else {}),
            **(
                {"predictiveMovedAt": dict(sorted(self.predictive_moved_at.items()))}
                if self.predictive_moved_at
                else {}
            ),
            **({"predictiveHeld": sorted(self.predictive_held)} if self.predictive_held else {}),
            **({"predictiveDeferred": sorted(self.predictive_deferred)} if self.predictive_deferred else {}),
            "predictiveResiduals": {b: list(v) for b, v in sorted(self.predictive_residuals.items())},
            **(
                {"predictiveResidualLevels": {b: list(v) for b, v in sorted(self.predictive_residual_levels.items())}}
                if self.predictive_residual_levels
                else {}
            ),
            **(
                {"predictiveResidualMoves": {b: list(v) for b, v in sorted(self.predictive_residual_moves.items())}}
                if self.predictive_residual_moves
                else {}
            ),
            "predictiveLearned": {b: list(v) for b, v in sorted(self.predictive_learned.items())},
            "predictiveScales": {b: list(v) for b, v in sorted(self.predictive_scales.items())},
            **(
                {"predictiveLevels": {b: list(v) for b, v in sorted(self.predictive_levels.items())}}
                if self.predictive_levels
                else {}
            ),
            **(
                {"predictiveLevelMoves": dict(sorted(self.predictive_level_moves.items()))}
                if self.predictive_level_moves
                else {}
            ),
        }

    @classmethod
    def from_json(cls, doc: Any) -> StrategyState:
        """What ``to_json`` wrote; anything else raises StateError naming the field (never a fresh state)."""
        if not isinstance(doc, dict):
            raise StateError(f"not a {STATE_FORMAT} document: expected an object, got {type_name(doc)}")
        if doc.get("format") != STATE_FORMAT:
            raise StateError(f"not a {STATE_FORMAT} document: format is {describe(doc.get('format'))}")
        root = Reader(doc, "state", StateError)

        def table(key: str, read: Callable[[Reader], Any]) -> dict[str, Any]:
            return {name: read(entry) for name, entry in root.child(key, required=False, default={}).entries()}

        def names(key: str) -> frozenset[str]:
            return frozenset(root.child(key, required=False, default=[]).string_list())

        def ema(reader: Reader) -> float:
            return reader.number(maximum=MAX_FINITE)

        def transfer_ema(reader: Reader) -> TransferBrokerEma:
            weighted, throughput, updated_at = reader.items(length=3)
            return TransferBrokerEma(ema(weighted), ema(throughput), updated_at.integer())

        def signed(reader: Reader) -> float:
            return reader.number(maximum=MAX_FINITE, non_negative=False)

        def residuals(reader: Reader) -> tuple[float, ...]:
            return tuple(signed(item) for item in reader.items())

        def ages(reader: Reader) -> tuple[int, ...]:
            return tuple(item.integer() for item in reader.items())

        def learned(reader: Reader) -> tuple[float, float, float, int]:
            base, products, squares, count = reader.items(length=4)
            return (
                signed(base),
                signed(products),
                ema(squares),
                count.integer(),
            )

        def scale(reader: Reader) -> tuple[float, float]:
            value, intercept = reader.items(length=2)
            return ema(value), signed(intercept)

        def prediction(reader: Reader) -> tuple[float, int]:
            usage, planned_at = reader.items(length=2)
            return ema(usage), planned_at.integer()

        return cls().evolve(
            bundle_data=table("bundleData", lambda r: BundleData.from_json(r.value, r.path)),
            recently_unloaded=table("recentlyUnloaded", Reader.integer),
            threshold_ema=table("thresholdEma", ema),
            placement_ema=table("placementEma", ema),
            avg_hits_high=table("avgHitsHigh", Reader.integer),
            avg_hits_low=table("avgHitsLow", Reader.integer),
            transfer_hit_count=root.child("transferHitCount", required=False, default=0).integer(),
            transfer_recent_brokers=table("transferRecentBrokers", Reader.integer),
            transfer_ema=table("transferEma", transfer_ema),
            transfer_planned=table("transferPlanned", Reader.string),
            transfer_recent_before=table("transferRecentBefore", Reader.integer),
            predictive_pending=table("predictivePending", lambda r: PendingMove.from_json(r.value, r.path)),
            predictions=table("predictions", prediction),
            prediction_errors=table("predictionErrors", signed),
            predictive_members=names("predictiveMembers"),
            predictive_changed_at=root.child("predictiveChangedAt", required=False, default=0).integer(),
            predictive_halves=names("predictiveHalves"),
            predictive_dipped=names("predictiveDipped"),
            predictive_moved_at=table("predictiveMovedAt", Reader.integer),
            predictive_held=names("predictiveHeld"),
            predictive_deferred=names("predictiveDeferred"),
            predictive_residuals=table("predictiveResiduals", residuals),
            predictive_residual_levels=table("predictiveResidualLevels", residuals),
            predictive_residual_moves=table("predictiveResidualMoves", ages),
            predictive_learned=table("predictiveLearned", learned),
            predictive_scales=table("predictiveScales", scale),
            predictive_levels=table("predictiveLevels", residuals),
            predictive_level_moves=table("predictiveLevelMoves", signed),
        )
