"""A run cut at each disturbance, each part judged on its own against the rails' floor and the lower bound.

A disturbance is the start of the run, a scenario event (a broker joining or leaving, a surge, a noisy
neighbour…; see ``Tracker`` for when it counts from), or an **excursion**: the spread reaching the target after
it had stayed under it for ``GOAL_CYCLES`` samples (traffic that drifts apart, as tenants' daily curves do). Each
part of the run, from one disturbance to the next, is judged on what that disturbance asked for:

* **cycles**: from the disturbance until the spread stays under the target (to the part's end) — against the
  rails' floor for the moves it needed (``floor_of``); judged where the disturbance left the spread at
  or above the target, unless the next event cut the part short before it could show floor + 2 cycles;
* **unloads**: those planned in the part, against the lower bound of moves at the disturbance (for an excursion,
  the most the imbalance needed while it lasted: the drift goes on until a strategy may act); a part that needed
  no move should have none (unloads on noise).

The floor reads the simulator's true usage, which no strategy sees: a strategy reads each broker through samples
a point or more off. Where the spread is past the target by less than the noise of its two ends' readings, or the
high hit count rests on a broker within its reading's noise of the high gap, no count of hits on the readings can
say when the disturbance began. Each part also has the floor counted from when the readings can show it
(``shown_floor_of``): a part late on the floor but within it on this one asked for what no reading could show.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pulsar_lb_operator.benchmarks.bounds import (
    GOAL_CYCLES,
    Pools,
    balanceable_spread,
    hits_to_act,
    rails_floor,
    readings_show,
)
from pulsar_lb_operator.strategies import LoadBalancerConfig, Rails


@dataclass
class Disturbance:
    sample: int  # where it is measured: the first sample with every bundle owned again
    kind: str  # start | event | excursion
    moves: int  # the lower bound of unloads it needed
    most_from_one: int  # of which from the busiest giver
    hits: int  # consecutive cycles a debounced strategy sees it before acting (bounds.hits_to_act)
    lag: int = 0  # cycles from ``sample`` until the brokers' reports show it
    released: int = 0  # the first cycle the grace period's holds no longer keep balance out of reach (0: never did)
    shown: int | None = 0  # samples from ``sample`` until the readings show it (``readings_show``); None: not yet
    hits_shown: int = 0  # the hits a count of those readings needs then (``hits_to_act`` with the noise); 0: ``hits``
    whole: int | None = None  # the fewest whole-bundle moves of a fill (``whole_fill``); None: no such figure


@dataclass(frozen=True)
class Segment:
    """One part of a run, judged (see the module's docstring)."""

    start: int
    end: int  # the next disturbance's sample, or the number of samples
    kind: str
    moves: int
    floor: int
    cycles: int | None  # from the disturbance until the spread stays under the target; None: not in this part
    unloads: int
    # on cycles: the disturbance left the spread at or above the target, and there was time to see floor + 2 cycles
    # (or the spread came under it)
    judged: bool
    held: bool = False  # the floor is the cycle the grace period's holds free (``floor_of``)
    # where judged: the floor from when the readings could show it (``shown_floor_of``); None: they never did
    shown_floor: int | None = None
    whole: int | None = None  # the disturbance's ``whole``

    @property
    def ratio(self) -> float | None:
        """Unloads ÷ the lower bound; None where nothing needed moving."""
        return self.unloads / self.moves if self.moves else None


class Tracker:
    """Finds a run's disturbances as its samples come: ``observe`` each sample in order. ``needs``: the lower bound
    of moves now (``bounds.balance_needs`` of the cluster), asked only at a disturbance and during an excursion.

    ``report_lag``: cycles until every broker has written a report since a moment (its report interval over the
    shedding interval, rounded up). A strategy sees an event through the reports, so an event counts from the first
    sample at which they show it: at once for a broker that joins or comes back (it reports as it starts and the
    others are as they were), a report interval later for anything else (traffic, other processes' CPU, a broker
    gone and its bundles placed elsewhere). An event is measured once no bundle waits for an owner (a departed
    broker's bundles are placed within seconds, after the sample that follows the event)."""

    JOINS = frozenset({"add_broker", "start_broker"})

    def __init__(
        self,
        needs: Callable[[], tuple[int, int]],
        config: LoadBalancerConfig,
        target: float,
        report_lag: int,
        released: Callable[[], int] = lambda: 0,
        pools: Pools | None = None,
        noise: Callable[[], Mapping[str, float]] = dict,
        whole: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.needs, self.config, self.target, self.report_lag = needs, config, target, report_lag
        self.released, self.pools, self.noise, self.whole = released, pools, noise, whole
        self.found: list[Disturbance] = []
        self.spreads: list[float] = []
        self.pending: tuple[int, int] | None = None  # an event not yet measured: (its sample, when reports show it)

    def observe(
        self, usage: dict[str, float], background: dict[str, float], events: Sequence[str], settled: bool
    ) -> None:
        """One sample: the brokers' true usage and background, the kinds of the events since the last one, and
        whether every bundle has an owner."""
        sample = len(self.spreads)
        spread = balanceable_spread(usage, background, self.pools)
        self.spreads.append(spread)
        if events:
            shown = sample + (0 if self.JOINS.issuperset(events) else self.report_lag)
            self.pending = (sample, max(shown, self.pending[1]) if self.pending else shown)
        if self.pending is not None and settled:
            _, shown = self.pending
            self.pending = None
            self._found(sample, "event", usage, background, spread, lag=max(shown - sample, 0))
            return
        calm = len(self.spreads) > GOAL_CYCLES and all(s < self.target for s in self.spreads[-GOAL_CYCLES - 1 : -1])
        since = sample - self.found[-1].sample if self.found else 0
        if sample == 0 or (spread >= self.target and calm and since > GOAL_CYCLES and self.pending is None):
            self._found(sample, "start" if sample == 0 else "excursion", usage, background, spread, lag=0)
        elif self.found and self.found[-1].kind == "excursion" and spread >= self.target:
            moves, most = self.needs()  # the drift goes on: what it needs at its largest
            last = self.found[-1]
            last.moves, last.most_from_one = max(last.moves, moves), max(last.most_from_one, most)
        last = self.found[-1]
        if last.shown is None and last.sample < sample and spread >= self.target:
            self._shown(last, sample, usage, background)

    def _found(
        self, sample: int, kind: str, usage: dict[str, float], background: dict[str, float], spread: float, lag: int
    ) -> None:
        """A disturbance at ``sample`` (``spread``: the sample's ``balanceable_spread``)."""
        moves, most = self.needs()
        hits = hits_to_act(usage, background, self.config, self.pools)
        found = Disturbance(sample, kind, moves, most, hits, lag, self.released() if moves else 0, shown=None)
        if moves and kind != "excursion":  # a drift's needs grow while it lasts: no one figure
            found.whole = self.whole()
        self.found.append(found)
        if spread >= self.target:
            self._shown(found, sample, usage, background)

    def _shown(self, found: Disturbance, sample: int, usage: dict[str, float], background: dict[str, float]) -> None:
        """Marks ``found`` shown at ``sample`` if the readings show its spread past the target there."""
        noise = self.noise()
        if readings_show(usage, background, noise, self.target, self.pools):
            found.shown = sample - found.sample
            found.hits_shown = hits_to_act(usage, background, self.config, self.pools, noise)


def segments(
    found: Sequence[Disturbance], spreads: Sequence[float], move_cycles: Sequence[int], target: float, rails: Rails
) -> list[Segment]:
    """Each part of the run judged; ``move_cycles``: the cycle of each unload (cycle c plans on sample c − 1)."""
    out = []
    for k, disturbance in enumerate(found):
        start = disturbance.sample
        end = found[k + 1].sample if k + 1 < len(found) else len(spreads)
        part = spreads[start:end]
        cycles = next((j for j in range(len(part)) if all(s < target for s in part[j:])), None)
        floor = floor_of(disturbance, rails)
        unloads = sum(1 for c in move_cycles if start < c <= end)
        unbalanced = disturbance.moves > 0 and bool(part) and part[0] >= target
        judged = unbalanced and (cycles is not None or len(part) >= floor + 3)
        held = floor > rails_floor_of(disturbance, rails)  # only the holds set a floor above the caps' and hits'
        shown = shown_floor_of(disturbance, rails) if judged else None
        out.append(
            Segment(
                start,
                end,
                disturbance.kind,
                disturbance.moves,
                floor,
                cycles,
                unloads,
                judged,
                held,
                shown,
                disturbance.whole,
            )
        )
    return out


def floor_of(disturbance: Disturbance, rails: Rails) -> int:
    """The rails' floor for the disturbance, counted from its sample (``rails_floor_of``), and no sooner than the
    cycle the grace period's holds stop keeping balance out of reach (``released``: a move made then shows at that
    sample)."""
    floor = rails_floor_of(disturbance, rails)
    return max(floor, disturbance.released - disturbance.sample) if floor else 0


def rails_floor_of(disturbance: Disturbance, rails: Rails) -> int:
    """The cycles until the reports show the disturbance, then ``bounds.rails_floor``; 0: nothing to move."""
    floor = rails_floor(disturbance.moves, disturbance.most_from_one, disturbance.hits, rails)
    return disturbance.lag + floor if floor else 0


def shown_floor_of(disturbance: Disturbance, rails: Rails) -> int | None:
    """The floor counted from when the readings could show the disturbance (``Disturbance.shown``, and no sooner
    than its reports do), with the hits a count of those readings needs; None: they never showed it."""
    if disturbance.shown is None:
        return None
    hits = disturbance.hits_shown or disturbance.hits
    floor = rails_floor(disturbance.moves, disturbance.most_from_one, hits, rails)
    if not floor:
        return 0
    return max(max(disturbance.lag, disturbance.shown) + floor, disturbance.released - disturbance.sample)


def hold_release(free_at: Mapping[str, int], now: int, blocks: Callable[[frozenset[str]], bool]) -> int:
    """The first cycle from ``now`` on at which the bundles the grace period still holds (``free_at``: each bundle's
    first cycle a shedder may unload it again) no longer keep balance out of reach (``blocks``: ``bounds.held_blocks``
    of the cluster now); 0 if those held at ``now`` do not."""

    def held(at: int) -> frozenset[str]:
        return frozenset(bundle for bundle, free in free_at.items() if at < free)

    if not blocks(held(now)):
        return 0
    return next(at for at in sorted(set(free_at.values())) if at > now and not blocks(held(at)))
