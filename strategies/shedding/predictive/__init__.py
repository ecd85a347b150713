"""PredictivePairingShedder: plan the balanced end state from each broker's cost model, then move toward it.

Why not a built-in: resource-based strategies cannot tell what a bundle will cost on another broker (PIP-364),
so they over-place; rate-based ones ignore background load (the 10/50/70 co-tenant case). With a cost model per
broker (``forecast``) both are predictable. Each cycle:

1. **When** (``debounce``): brokers are scored as AvgShedder scores them and debounced with its hit counters
   (no history EMA, so nothing is unloaded twice), and none is acted on while the spread of their steady levels
   (less the bias their samples show) is within the target; the pair furthest apart at their average traffic
   count every reading as a hit while they stay past it (``debounce.apart``), and are acted on, unless models a gap
   or more off by their departures made the pair; a broker that carries nothing — one that joined or came back — is
   acted on without hits, and so is a newcomer that carries only what its fill brought where the report that shows
   the fill reads it short of the prediction and the spread near the target (``_filling``: its cost is a guess until
   its samples say better); after a broker leaves or a new one joins, or someone else splits a bundle, the shedder
   waits until every broker has reported since. Brokers no bundle can move between — a tenant's isolation policy
   keeps it on its own brokers, and the others off them — are counted and planned apart, each pool on its own mean
   and level (``pools``): the cluster's is out of reach of both sides.
2. **Where to** (``endstate``): the balanced level every broker that can take load would share, each at its own
   cost, and the plan that brings every broker into the band around it with the fewest moves, then the
   narrowest spread, then topics. A broker the trigger flagged is planned at the level the trigger read it at
   (``forecast.Forecast.count_bias``): planned on a model its departures show to be off, it would be left as it is.
   A broker whose latest sample puts it further from its steady level than the target spread sits the cycle out,
   counted in the level at that sample (``_leave_out_doubt``). A broker whose traffic drifts is planned where its
   drift takes it by half the low hit count's cycles (``drift``), so that a balance holds until the counters could
   act again.
3. **This cycle's moves** (``endstate.EndState.this_cycle``): as much of the plan as the rails let through, the
   moves that lead fastest to the end state first; what the plan cannot fix, one best move at a time
   (``pairing``), splitting a bundle too big to move (``splits``, with the split trigger's splits), or, where
   none can split, swapping it for smaller ones — and where nothing helps, splitting it with no move for the next
   report to measure its halves; a bundle too big for any receiver's band goes to one that hands
   smaller ones on (a relay; both in ``swaps``); where the grace period holds a broker above the band, the brokers
   it keeps the spread past the target from are filled toward it from those above the level.

A broker whose background usage alone is at or above the mean never receives load; a move never leaves its
destination above the overload threshold, or above the band where balance itself puts brokers past the threshold
(``pairing.ceiling``). Without a CPU model of R² ≥ ``forecast.MIN_R2`` for any broker it is
AvgShedder, and says so. Each prediction is checked on the first report that shows the move; the error is in the
notes and the state.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

import numpy as np

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.documents import MAX_FINITE
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.plans import Split, Unload
from pulsar_lb_operator.strategies.shedding import avg
from pulsar_lb_operator.strategies.shedding.common import SheddingResult
from pulsar_lb_operator.strategies.shedding.predictive import (
    debounce,
    drift,
    endstate,
    forecast,
    pairing,
    pools,
    splits,
    swaps,
)
from pulsar_lb_operator.strategies.splitting import algorithms
from pulsar_lb_operator.strategies.state import PendingMove, StrategyState

NAME = "PredictivePairingShedder"
Numbers = TypeVar("Numbers", bound=tuple[float, ...])  # a per-broker row of the strategy's state


def shed(
    load: LoadData, config: LoadBalancerConfig, state: StrategyState, trigger_splits: Sequence[Split] = ()
) -> SheddingResult:
    """``trigger_splits``: what the split trigger picked this cycle; the ones whose halves are known
    (range_equally_divide) are planned here with their halves kept on the owner and placed like any bundle, and
    come back in the result's ``splits`` (the others come back as they were, for the planner to add)."""
    # Reports near MAX_BROKER_TOTAL overflow float64 sums; every figure is checked for finiteness where it is
    # used (a model far out of range falls back), so the overflow itself is no error.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        slope = forecast.slopes(load, state)
        if slope is None:
            return _fallback(load, config, state, trigger_splits)
        return _Cycle(load, config, state, slope).run(trigger_splits)


def _finite(values: Mapping[str, Numbers]) -> dict[str, Numbers]:
    """What a cost model far out of range made infinite is not kept (nor could the state file hold it)."""
    return {b: v for b, v in values.items() if all(math.isfinite(x) and abs(x) <= MAX_FINITE for x in v)}


def _fallback(
    load: LoadData, config: LoadBalancerConfig, state: StrategyState, trigger_splits: Sequence[Split]
) -> SheddingResult:
    result = avg.shed(load, config, state)
    why = (
        f"{NAME}: no CPU cost model with R² ≥ {forecast.MIN_R2} and ≥ {forecast.MIN_SAMPLES} samples; "
        "AvgShedder's behaviour"
    )
    unloads = tuple(Unload(u.bundle, u.source, u.destination, f"{why}: {u.reason}") for u in result.unloads)
    unloaded = {u.bundle for u in result.unloads}
    later = tuple(sp for sp in trigger_splits if sp.bundle not in unloaded)  # as the trigger skips this cycle's
    return SheddingResult(unloads, result.state, (why, *result.notes), later)


class _Cycle:
    """One cycle's work, in the order of the module's docstring."""

    def __init__(
        self, load: LoadData, config: LoadBalancerConfig, state: StrategyState, slope: dict[str, forecast.Slope]
    ) -> None:
        self.load, self.config, self.state = load, config, state
        brokers = load.snapshot.brokers
        self.forecast = forecast.Forecast(load, config, slope, state)
        self.pending = forecast.in_flight(load, state, self.forecast, config)
        # as modelled with the moves in flight, before a missed prediction sets a level from one sample
        self.levels = {b: self.forecast.usage(b) for b in self.forecast.points}
        self.history = drift.carried(state.predictive_levels, state.predictive_level_moves)
        self.shifted: dict[str, float] = {}  # what this cycle's moves change each broker's level by
        self.waiting, self.errors = forecast.check_predictions(
            load, state, self.pending, config, self.forecast.sampled, self.forecast.drawn
        )
        self.forecast.trust_samples(self.forecast.missed(self.errors))
        scores = self.forecast.sampled
        self.backgrounds = {b: self.forecast.background(b) for b in brokers}
        self.pools = pools.pools(load, scores)
        self.takers: set[str] = set()
        self.means: dict[frozenset[str], float] = {}
        for pool in self.pools:
            overall = sum(scores[b] for b in pool) / len(pool)
            takers = {b for b in pool if self.backgrounds[b] < overall}
            self.takers |= takers
            self.means[pool] = sum(scores[b] for b in takers) / len(takers) if takers else overall
        steady = {b: self.forecast.unbiased(b) for b in scores}
        averaged = {b: self.forecast.averaged(load, b) for b in self.takers}  # only takers can be the pair
        firm = {b: self.forecast.firmly_unbiased(b, debounce.settled_gap(config)) for b in averaged}
        steady_averaged = {b: level + steady[b] - self.forecast.usage(b) for b, (level, _) in averaged.items()}
        firm_averaged = {
            b: (level + firm[b][0] - self.forecast.usage(b), firm[b][1]) for b, (level, _) in averaged.items()
        }
        self.high: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.triggered: set[str] = set()
        self.dipped: frozenset[str] = frozenset()
        self.held: frozenset[str] = frozenset()
        for pool in self.pools:  # each pool's brokers are counted on their distance from the pool's mean
            high, low, triggered, dipped, held = debounce.hits(
                {b: s for b, s in scores.items() if b in pool},  # its counters only: hits drops the others'
                self.means[pool],
                config,
                state,
                self.takers & pool,
                steady,
                averaged,
                load.snapshot.taken_at,
                steady_averaged,  # read for the pool's takers only
                firm_averaged,
                {b: self.forecast.as_read(b) for b in self.takers & pool},  # read for the takers only
                functools.partial(self.forecast.level_error, load),  # read for the spread's two ends only
            )
            self.high |= high
            self.low |= low
            self.triggered |= triggered
            self.dipped |= dipped
            self.held |= held
        self.empty = debounce.empty(load) & self.takers
        sheddable = load.sheddable_bundles()
        self.movable = {
            b: sorted(
                x
                for x in brokers[b].lastStats
                if x in sheddable and x not in load.recently_unloaded and x not in self.pending
            )
            for b in brokers
        }
        self.pieces = splits.Pieces()
        self.unloads: list[Unload] = []
        # no chains: a broker that took load this cycle gives none, and vice versa; nor does one whose arrival no
        # report before this one showed (a single reading, jittering traffic's or a fit's miss, is no cause to move
        # back what just arrived: where it is truly above the band, the next cycle shows it again)
        self.received = {m.destination for m in state.predictive_pending.values()}
        self.stranded: set[str] = set()  # givers whose planned move leaves its receiver above the band
        self.deferred: set[str] = set()  # brokers of the plan's moves the caps left to the next cycle
        self.in_doubt: set[str] = set()  # brokers that neither give nor take this cycle (``_leave_out_doubt``)
        self.filling: set[str] = set()  # newcomers whose fill this report reads short (``_filling``)
        apart = len(self.pools) > 1
        self.notes = [
            f"{NAME}: mean usage of the {len(self.takers & pool)} brokers that can take load {self.means[pool]:.1f}"
            + (f" among {_few(pool)}, which no bundle can move out of or into" if apart else "")
            for pool in self.pools
        ]
        self.notes += [
            f"{NAME}: {b} has no good CPU model; its capacity and the cluster's per-core cost stand in"
            for b in sorted(slope)
            if slope[b].borrowed
        ]
        self.notes += [
            f"{NAME}: {b} background {self.backgrounds[b]:.0f} ≥ mean: never a destination"
            for b in sorted(set(brokers) - self.takers)
        ]
        if self.errors:
            mae = sum(abs(e) for e in self.errors.values()) / len(self.errors)
            self.notes.append(f"{NAME}: prediction error {mae:.1f} points (mean |error| over {len(self.errors)})")

    def actions(self) -> int:
        return len(self.unloads) + len(self.pieces.splits)

    def run(self, trigger_splits: Sequence[Split]) -> SheddingResult:
        changed_at = debounce.changed_at(self.load, self.state, self.state.predictive_halves)
        settling = debounce.settling(self.load, self.config, changed_at)
        if settling or changed_at != self.state.predictive_changed_at:  # bundles moved that the shedder did not move
            self.history = drift.continued(self.history, self.levels)
        if settling:
            since = (self.load.snapshot.taken_at - changed_at) / 1000
            self.notes.append(
                f"{NAME}: a broker left or a new one joined, or a bundle was split, {since:.0f} s ago; waiting "
                "until every broker has reported since"
            )
        self._leave_out_doubt()
        self.filling = self._filling()
        passed_on = self._trigger_splits(trigger_splits)
        if self.empty:
            self.notes.append(f"{NAME}: {', '.join(sorted(self.empty))} carries nothing (joined or came back): acting")
        if self.filling:
            self.notes.append(
                f"{NAME}: {_few(self.filling)} carries only what its fill brought, and reads short of it: planned "
                "without hits until it is within the band"
            )
        room = self.load.rails.max_unloads_per_cycle - self.actions()
        plans: list[endstate.EndState] = []
        if not settling and self.acting() and room > 0:  # no room: planned again next cycle
            self.forecast.count_bias(self.triggered)
            band = max(debounce.settled_gap(self.config) - self.forecast.sigma, 0.0)
            before = {b: self.forecast.usage(b) for b in self.forecast.points}
            with self.forecast.ahead(self._drifting(band)):
                plans = self._plan(band)
            shifted = {b: self.forecast.usage(b) - level for b, level in before.items()}
            self.shifted = {b: by for b, by in shifted.items() if by and math.isfinite(by)}
        return SheddingResult(
            tuple(self.unloads),
            self._next_state(plans, changed_at),
            tuple(self.notes),
            (*self.pieces.splits, *passed_on),
        )

    def acting(self) -> set[str]:
        """The brokers this cycle's plan is made for: those the trigger flagged, and those joined or filling."""
        return self.triggered | self.empty | self.filling

    def _filling(self) -> set[str]:
        """Takers with no cost model of their own (``forecast.Slope.borrowed``: one that joined) whose every bundle
        came with a fill of ours (the grace period's record) and that this report shows short of what the fill was
        predicted to bring, by more than twice a sample's noise (``forecast.check_predictions``), where the pool's
        spread is past the target or within that of it. A newcomer's cost is known from its capacity until its
        samples say better, so its fill may land short of the band the plan aimed at, the spread just within the
        target, where the spread rule holds every broker back and the newcomer's counters clear once it reads inside
        the gap; its one sample is all that says the target is met. It is planned again, without hits, as Cruise
        Control's add-broker goes on until the broker holds its share; the plan moves nothing where it is within the
        band. A broker back from a restart has its model, and one whose fill landed as predicted or whose pool is well
        within the target is left as it is: a sample's miss there is its noise, and topping up what the plan's own
        margins left only adds moves."""
        recent, target = self.load.recently_unloaded, debounce.target_spread(self.config)
        filling = set()
        for b in (self.takers & set(self.errors)) - self.in_doubt - self.empty:
            margin = 2 * self.forecast.sample_noise(b)
            if not self.forecast.slope[b].borrowed or not self.errors[b] < -margin:
                continue
            pool = next(p for p in self.pools if b in p)
            levels = [self.forecast.unbiased(x) for x in self.takers & pool]
            if max(levels) - min(levels) < target - margin:  # well within: met, whatever its sample missed
                continue
            carried = list(forecast.traffic_bundles(self.load.snapshot.brokers[b]))
            if carried and all(x in recent for x in carried):
                filling.add(b)
        return filling

    def _drifting(self, band: float) -> dict[str, float]:
        """How far each taker whose traffic drifts will have gone by the plan's horizon (``drift``): planned there.
        A broker that carries nothing or sits the cycle out is planned where it is."""
        brokers = self.takers - self.empty - self.in_doubt
        ahead = drift.offsets(self.history, brokers, self.config, band, self.forecast.sigma)
        if ahead:
            shown = _few(f"{b} {by:+.1f}" for b, by in ahead.items())
            self.notes.append(
                f"{NAME}: planned on the levels {drift.horizon(self.config):g} cycles on, where traffic drifts: {shown}"
            )
        return ahead

    def _plan(self, band: float) -> list[endstate.EndState]:
        """Each pool's end state, and as much of it as the rails let through this cycle."""
        plans = []
        for pool in self.pools:
            if not self.acting() & pool:
                continue
            if self.actions() >= self.load.rails.max_unloads_per_cycle:
                break
            with self._within(pool):
                plan = endstate.plan(
                    self.load,
                    self.forecast,
                    self.movable,
                    self.takers - set(self.pieces.per_source),
                    band,
                    self.config,
                    self.pieces.halves,
                    self.pieces.topics,
                    self.acting() & pool,
                    self.in_doubt,
                )
                self._carry_out_plan(plan)
                self._pair(plan)
            plans.append(plan)
        return plans

    def _leave_out_doubt(self) -> None:
        """A broker whose latest sample is further from its steady level than the target spread (twice the settled
        gap) and than its samples' noise can be (``forecast.Forecast.in_doubt``) neither gives nor takes this cycle,
        and counts in the balanced level at that sample, the latest word on it. Planned where its model has it, it
        may be on the wrong side of the level: a noisy neighbour that stopped left one broker's model 31 points
        above its sample, and the plan moved five bundles off it onto a broker as cool, wider apart than before.
        The next report says whether the step lasts; the trigger counts it as it counts any reading."""
        self.in_doubt = self.forecast.in_doubt(debounce.target_spread(self.config)) - self.empty
        for b in sorted(self.in_doubt):
            self.notes.append(
                f"{NAME}: {b} read {self.forecast.sampled[b]:.1f} where its model has it at "
                f"{self.forecast.usage(b):.1f}: it neither gives nor takes until the next report says which holds"
            )
            self.movable.pop(b, None)
        self.forecast.trust_samples(self.in_doubt)

    def _trigger_splits(self, trigger_splits: Sequence[Split]) -> list[Split]:
        """The trigger's splits whose halves are known are planned here, before any unload, under the same caps."""
        passed_on = []
        for sp in trigger_splits:
            if sp.algorithm != algorithms.RANGE_EQUALLY_DIVIDE or not sp.boundaries or sp.source not in self.movable:
                passed_on.append(sp)
                continue
            parts = self.pieces.add_trigger_split(
                self.load, sp, f"{sp.reason}; the halves stay on {sp.source} and {NAME} places them"
            )
            movable = [b for b in self.movable[sp.source] if b != sp.bundle]
            self.movable[sp.source] = sorted([*movable, *parts])
        return passed_on

    def _carry_out(self, move: pairing.Move, level: float) -> None:
        giver, bundle, destination, before, after = move
        traffic = forecast.bundle_traffic(self.load, giver, bundle, self.pieces.halves)
        self.forecast.move(giver, destination, traffic)
        self.received.add(destination)
        self.movable[giver].remove(bundle)
        self.pieces.count(giver)
        self.pending[bundle] = PendingMove(giver, destination, self.load.snapshot.taken_at, traffic)
        self.unloads.append(
            Unload(
                bundle,
                giver,
                destination,
                f"{NAME}: {giver} {self.forecast.sampled[giver]:.1f} vs balanced level {level:.1f}; predicted "
                f"{giver} {before[0]:.1f}→{after[0]:.1f}, {destination} {before[1]:.1f}→{after[1]:.1f}",
            )
        )

    def _carry_out_plan(self, plan: endstate.EndState) -> None:
        if plan.moves:
            self.notes.append(
                f"{NAME}: end state by {plan.solver}: {len(plan.moves)} moves bring every broker within "
                f"{plan.band:.2f} of the balanced level {plan.target:.1f}"
                + (f" but {', '.join(sorted(plan.outside()))}" if plan.outside() else "")
            )
        rails = self.load.rails
        now = plan.this_cycle(
            rails.max_unloads_per_cycle - self.actions(),
            rails.max_unloads_per_cycle,
            self.pieces.per_source,
            rails.max_unloads_per_broker,
            self.config.loadBalancerBrokerOverloadedThresholdPercentage,
        )
        self.deferred = {b for move in set(plan.moves) - set(now) for b in (move[0], move[2])}
        outside = plan.outside()
        givers, receivers = {move[0] for move in plan.moves}, plan.receivers()
        for giver, bundle, destination in now:
            if destination in givers:  # refilled once it has given its heavy bundle (``endstate._through``)
                self.deferred |= {giver, destination}
                continue
            if giver in self.received or destination in self.pieces.per_source:
                continue
            if giver in outside or destination in outside:
                if destination in outside and plan.ends[destination] > plan.target:
                    self.stranded.add(giver)  # its bundle fits no receiver's band: a relay's (``_pair``)
                continue  # the plan does not bring them into the band: one move at a time does (``_pair``)
            move = pairing.planned_move(
                self.forecast,
                self.load,
                giver,
                bundle,
                destination,
                plan.target,
                plan.band,
                self.config,
                self.pieces.halves,
                plan.tolerance,
                refilled=giver in receivers,
            )
            if move is not None:
                self._carry_out(move, plan.target)

    def _pair(self, plan: endstate.EndState) -> None:
        """What the plan leaves out of the band: one best move at a time while the caps allow (from a broker above the
        level now, though the plan's bundles would take it under the band), a bundle too big to move split first when
        moving a piece helps more than any plain move; and a giver whose planned bundle would leave its receiver
        above the band, a relay, else the best move it has (``_best``, as any broker above the band; left with
        nothing, it stayed above the band until a plan chose another bundle). Where one above the band can give
        nothing, the brokers it keeps the spread past the target from are filled toward it (``_behind``)."""
        outside = plan.outside()
        hot = {b for b in outside if plan.level[b] > plan.target}  # above the level now: the plan may overshoot it
        cold = outside - hot
        stranded = {b for b in self.stranded - hot if self.forecast.usage(b) - plan.target > plan.tolerance(b)}
        hot |= stranded
        done: set[str] = set()
        held: tuple[set[str], set[str]] | None = None  # the brokers a hold keeps past the band, those behind them
        filled = False
        rails = self.load.rails
        while self.actions() < rails.max_unloads_per_cycle:
            able = {
                b
                for b in self.movable
                if self.pieces.per_source.get(b, 0) < rails.max_unloads_per_broker and b not in done | self.received
            }
            cap_left = {b for b in able if self.forecast.usage(b) > plan.target}
            sources = sorted(cap_left & hot, key=lambda b: (-self.forecast.usage(b), b))
            destinations = self.takers - set(self.pieces.per_source) - self.in_doubt
            past, behind = self._behind(hot & done, plan) if not sources else (set(), set())
            if not sources and (
                behind or any(abs(self.forecast.usage(b) - plan.target) > plan.tolerance(b) for b in cold)
            ):
                # the grace period holds the top: the spread closes from below, any broker not behind giving
                sources = sorted((able - behind) if behind else cap_left, key=lambda b: (-self.forecast.usage(b), b))
                destinations &= cold | behind
                held = held or ((past, behind) if behind else None)
            if not sources:
                break
            source = sources[0]
            moves = self._best(source, destinations, plan, stranded=source in stranded)
            if not moves:
                done.add(source)
                continue
            for move in moves:
                self._carry_out(move, plan.target)
            filled |= held is not None and any(move[2] in held[1] for move in moves)
            hot = {b for b in hot if abs(self.forecast.usage(b) - plan.target) > plan.tolerance(b)}
        if held is not None:  # what the notes say is what was done
            holding, filling = (", ".join(sorted(brokers)) for brokers in held)
            doing = "filling" if filled else "no bundle free to move can fill"
            self.notes.append(f"{NAME}: the grace period holds {holding} above the band: {doing} {filling} toward it")

    def _behind(self, stuck: set[str], plan: endstate.EndState) -> tuple[set[str], set[str]]:
        """Of the brokers that can take load above the band and can give nothing that helps (``stuck``), those the
        grace period holds past it — it carries bundles unloaded within loadBalancerSheddingGracePeriodMinutes: a
        restart's reassignment can put such bundles on a broker that never received them from a shedder; and the
        brokers that can take load they keep the spread past the target from: below the highest of them by more
        than the settled gap and the band. Balance then closes from below until the hold expires, from any broker
        not behind, the busiest first: where the hold is on every broker above the level (a rolling restart's fills
        hold what each restarted broker received), only those under it have bundles to give. (A broker with nothing
        held that gives nothing — a hot topic's — is left to the moves above: filling every other broker toward it
        would move load for nothing; so would a fill toward one whose hold ends by the next cycle with enough
        released to bring it within the band: ``_released_by_next_cycle``.)"""
        brokers = self.load.snapshot.brokers
        past = {
            b
            for b in stuck & self.takers
            if self.forecast.usage(b) - plan.target > plan.tolerance(b)
            and any(x in self.load.recently_unloaded for x in brokers[b].lastStats)
            and not self._released_by_next_cycle(b, plan)
        }
        if not past:
            return past, set()
        floor = max(self.forecast.usage(b) for b in past) - debounce.settled_gap(self.config) - plan.band
        return past, {b for b in self.takers if self.forecast.usage(b) < floor}

    def _released_by_next_cycle(self, broker: str, plan: endstate.EndState) -> bool:
        """Whether the bundles of ``broker`` whose hold ends by the next shedding cycle carry enough to bring it
        within the band: it then gives them itself, a cycle later, and filling the others toward it would move
        their bundles for one cycle's balance."""
        released_by = (
            self.load.snapshot.taken_at
            + self.config.loadBalancerSheddingIntervalMinutes * 60_000
            - self.config.grace_period_ms
        )
        held = self.load.recently_unloaded
        leaving = [
            forecast.bundle_traffic(self.load, broker, x)
            for x in self.load.snapshot.brokers[broker].lastStats
            if x in held and held[x] < released_by  # a hold ends after the grace period, not at its end
        ]
        if not leaving:
            return False
        traffic: forecast.Traffic = tuple(float(v) for v in np.sum(leaving, axis=0))  # type: ignore[assignment]
        after = self.forecast.usage_with(broker, traffic, -1)
        return after - plan.target <= plan.tolerance(broker)

    def _best(
        self, source: str, destinations: set[str], plan: endstate.EndState, stranded: bool = False
    ) -> list[pairing.Move]:
        """The moves that help ``source`` most: a plain move; a bundle too big to move split first, when moving a
        piece helps more (``splits``); a relay, when no plain move lands it within the band and the relay helps
        more than either (a split's pieces are estimated, a relay's bundles measured); else a swap (``swaps``).
        ``stranded``: its planned bundle would leave any receiver above the band (``_carry_out_plan``): a relay
        first, and the others only where there is none."""
        level, band = plan.target, plan.band
        room = self.load.rails.max_unloads_per_cycle - self.actions()
        if stranded and (relayed := self._relay(source, destinations, level, band, room)):
            return relayed
        best = pairing.best_move(
            self.load,
            self.forecast,
            source,
            self.movable[source],
            destinations,
            level,
            self.config,
            self.pieces.halves,
            band,
        )
        plain = [] if best is None else [(source, *best)]
        above = self.forecast.usage(source) - level > band
        relay: list[pairing.Move] = []
        if above and _leaves_above(plain, level, band) and not stranded:  # a stranded one's was searched above
            relay = self._relay(source, destinations, level, band, room)
        # a broker below the band that no plain move fills without overshooting it takes a piece of a bundle
        receiving = not above and not plain and any(level - self.forecast.usage(d) > band for d in destinations)
        if self.config.loadBalancerAutoBundleSplitEnabled and (above or receiving):
            trial = self.pieces.copy()
            moves, movable = splits.split_to_move(
                self.load,
                self.forecast,
                source,
                self.movable[source],
                destinations,
                level,
                band,
                self.config,
                trial,
                room,
                receiving,
            )
            if splits.gains_more(moves, plain, level) and pairing.gains(moves, level) >= pairing.gains(relay, level):
                self.pieces = trial
                self.movable[source] = movable
                self.notes.append(f"{NAME}: {trial.splits[-1].reason}")
                return moves
        if relay and pairing.gains(relay, level) > pairing.gains(plain, level):
            return relay
        if plain or not above:
            return plain
        swap = self._swap(source, destinations, level, band, room)
        if not swap and self.config.loadBalancerAutoBundleSplitEnabled:
            made = len(self.pieces.splits)
            self.movable[source] = splits.split_to_measure(
                self.load,
                self.forecast,
                source,
                self.movable[source],
                destinations,
                level,
                band,
                self.config,
                self.pieces,
                room,
                self.state.predictive_halves,
            )
            self.notes += [f"{NAME}: {sp.reason}" for sp in self.pieces.splits[made:]]
        return swap

    def _givers(self, source: str) -> set[str]:
        """Brokers that may give besides ``source``: none that took load this cycle, none at the per-broker cap."""
        cap = self.load.rails.max_unloads_per_broker
        return {
            b for b in self.movable if b != source and b not in self.received and self.pieces.per_source.get(b, 0) < cap
        }

    def _swap(self, source: str, destinations: set[str], level: float, band: float, room: int) -> list[pairing.Move]:
        """A broker every bundle of which takes it below the band, none of which can split, gives one and takes
        smaller ones back in the same cycle (``swaps.best_swap``); left as it is, it would stay above the band for
        good. One that cannot take load (a co-tenant) takes none back, so it makes no swap."""
        if source not in self.takers:
            return []
        args = (self.load, self.forecast, source, self.movable, destinations, self._givers(source), level, band)
        return swaps.best_swap(*args, self.config, self.pieces.halves, room)

    def _relay(self, source: str, destinations: set[str], level: float, band: float, room: int) -> list[pairing.Move]:
        """A bundle that lands ``source`` within the band but any receiver above it goes to one that hands smaller
        ones on in the same cycle (``swaps.best_relay``): a broker that gave this cycle is no relay."""
        relays = {b for b in self._givers(source) & self.takers if b not in self.pieces.per_source}
        args = (self.load, self.forecast, source, self.movable, destinations, relays, level, band)
        return swaps.best_relay(*args, self.config, self.pieces.halves, room, self.load.rails.max_unloads_per_broker)

    @contextlib.contextmanager
    def _within(self, pool: frozenset[str]) -> Iterator[None]:
        """Plan one pool: its takers and its brokers' movable bundles only, as though it were the whole cluster."""
        takers, movable = self.takers, self.movable
        self.takers, self.movable = takers & pool, {b: v for b, v in movable.items() if b in pool}
        try:
            yield
        finally:
            self.takers, self.movable = takers, {**movable, **self.movable}

    def _next_state(self, plans: Sequence[endstate.EndState], changed_at: int) -> StrategyState:
        high, low = self.high, self.low
        moved = {u.source for u in self.unloads} | {u.destination for u in self.unloads if u.destination is not None}
        planned = {b for plan in plans for m in plan.moves for b in (m[0], m[2])} if self.unloads else set()
        for b in moved | planned:
            # being balanced: it stays triggered, and the next cycle's hit count clears it once it is within the
            # gap, instead of counting low hits again from nothing while the plan or the moves' errors leave it out
            high.pop(b, None)
            low[b] = self.config.loadBalancerAvgShedderHitCountLowThreshold
        predictions = dict(self.waiting)
        now = self.load.snapshot.taken_at
        for b in moved:
            predictions[b] = (self.forecast.usage(b), now)
        # being balanced until its counters clear (``debounce.hits``)
        moved_at = {b: t for b, t in self.state.predictive_moved_at.items() if b in low}
        moved_at.update((b, now) for b in moved)
        return self.state.evolve(
            avg_hits_high=high,
            avg_hits_low=low,
            predictive_pending=self.pending,
            predictions=predictions,
            prediction_errors=self.errors,
            predictive_members=frozenset(self.load.snapshot.brokers),
            predictive_changed_at=changed_at,
            predictive_halves=frozenset(self.pieces.halves),
            predictive_dipped=self.dipped,
            predictive_moved_at=moved_at,
            predictive_held=self.held - moved,
            predictive_deferred=frozenset(self.deferred),
            predictive_residuals=_finite(self.forecast.residuals),
            predictive_residual_levels=_finite(self.forecast.residual_levels),
            predictive_residual_moves={b: ages for b, ages in self.forecast.residual_moves.items() if ages},
            predictive_learned=_finite(self.forecast.learned),
            predictive_scales=_finite(self.forecast.scales),
            predictive_levels=drift.remembered(self.history, self.levels, self.config),
            predictive_level_moves=self.shifted,
        )


def _few(brokers: Iterable[str], shown: int = 5) -> str:
    """The brokers by name (or lines that start with it), the first ``shown`` of a larger group and how many more: a
    note stays a line."""
    names = sorted(brokers)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _leaves_above(moves: Sequence[pairing.Move], level: float, band: float) -> bool:
    """Whether the giver of ``moves`` (none: no move) is still above the band after them."""
    return not moves or moves[-1][4][0] >= level + band
