"""The end state a cycle plans toward, and which of its moves the cycle makes.

**The balanced level** is the usage every broker that can take load would have with their traffic spread so as
to equalise it, each broker at its own cost (``balanced_level``): moving load onto a broker with twice the cores
lowers the cluster's mean, so the mean of today's usage is not where the brokers end.

**The plan** brings every broker into the band around it — the band where the hit counters leave a broker alone
(``debounce.settled_gap``), less the samples' measured noise (twice for a broker with no model of its own, whose
level is one sample; a broker the trigger has not flagged may end as far as the band and the noise, where it needs
no moving: ``EndState.tolerance``), the two ends no further apart than their estimates can tell from the target
(twice the band and the noise less √2 noise: ``EndState.overspread``; where no broker is left out of the band) —
with the fewest moves, then the narrowest spread (the hottest broker that can take load less the coolest, where the
trigger holds and the target is judged), then the fewest topics disconnected: an optimisation over which bundle goes
where. Each giver's fewest bundles that land it in the band are packed onto the receivers (``packing``: largest
first onto the lowest, then a bounded search); where that leaves a broker out of the band, lands the brokers within
the noise of twice the band apart (estimates a few tenths off cannot tell such a spread from the target), or uses
more moves than the givers' and receivers' own counts need, the whole choice is made again as a mixed-integer
program (HiGHS, through ``scipy.optimize.milp``) — bundles of any broker above the level, receivers below it, within
the namespace policies and under the overload threshold — with a deterministic node budget, and kept when it is
better. Where every receiver would make too many (bundle, receiver) pairs for the program and the receivers the
packing leaves out of the band carry nothing (on a scale-out, the new brokers, each of which a coarse bundle may
overfill or leave short, while the many old brokers just under the level need nothing), it is made over those
receivers. Where a broker is below the band (one back empty), the program is made once more with the bundles that
alone would take their giver below the band, their givers among the receivers (``_through``): a heavy bundle fills
the gap and its giver is refilled from lighter ones, a cycle later; kept with fewer moves.

**This cycle's moves**, when the rails' caps spread the plan over cycles: first what each giver must give now for
the plan to take no more cycles than it needs (a giver with more moves than the per-broker cap allows in the
cycles the whole plan takes), then the givers above the overload threshold (the hottest first), then the heaviest
planned bundles. The plan is made again each cycle from the new reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace

import numpy as np

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.shedding.predictive import packing
from pulsar_lb_operator.strategies.shedding.predictive.forecast import Forecast, Traffic, carried, carries_traffic
from pulsar_lb_operator.strategies.shedding.predictive.pairing import ceiling, permitted

# A plan with more candidate (bundle, receiver) pairs than this is left to the greedy packing (but for the first fill
# of empty receivers, ``_first_fill``): HiGHS needs about a second of one core for a thousand (``python
# benchmarks/decide.py`` prints the decide time), and up to 7 s where its node budget binds (931 pairs in
# ``scale-out#10804``'s fill of four joining brokers; HiGHS releases the GIL, so the lease is renewed meanwhile).
MILP_MAX_PAIRS = 1_000
MILP_NODES = 200  # HiGHS's branch-and-bound budget: a count, so the same cycle gives the same plan on any machine
# Brokers must end strictly inside the band (the hit counters clear a broker strictly inside their gap): the
# program's bounds sit a hundredth of a point inside it (no estimate is that precise), and ending outside by as
# much costs more than every candidate move together.
STRICTLY = 0.01
TIME_LIMIT = 1  # scipy's ``milp`` status for HiGHS's time limit (its node budget reads as 4, "solution limit")
Item = tuple[str, str, Traffic, float, int]  # a movable bundle: giver, bundle, traffic, drop, topics


@dataclass(frozen=True)
class EndState:
    """A plan: every broker's steady level now and where the plan leaves it, the balanced level and the band, the
    moves (giver, bundle, receiver), what each planned bundle takes off its giver, and which solver made it."""

    level: Mapping[str, float]
    target: float
    band: float  # where the plan lands brokers it moves
    noise: float  # the samples' noise: how much wider than the band an untriggered broker is left alone
    moves: tuple[tuple[str, str, str], ...]
    drops: Mapping[str, float]
    ends: Mapping[str, float]
    solver: str
    takers: frozenset[str] = frozenset()
    triggered: frozenset[str] = frozenset()  # brokers the trigger acts on: the band holds for them exactly
    # brokers with no model of their own (one that just joined): their level is one sample, as far off as its noise,
    # and their bundles' costs are the cluster's scaled by a few samples, so the plan lands them that much further in
    sampled: frozenset[str] = frozenset()

    def tolerance(self, broker: str) -> float:
        """Beyond which the broker needs moving: the band for a triggered broker; the band and the samples' noise
        for another (the trigger's own gap: just past the band by its steady level, it may be inside in truth); a
        sample's noise less for one whose level is its latest sample (``sampled``)."""
        untriggered = 0.0 if broker in self.triggered else self.noise
        return max(self.band + untriggered - (self.noise if broker in self.sampled else 0.0), 0.0)

    def receivers(self) -> set[str]:
        """The brokers the plan's moves go to."""
        return {receiver for _, _, receiver in self.moves}

    def spread(self) -> float:
        """The hottest less the coolest broker that can take load, where the plan leaves them: the spread the trigger
        holds at (``debounce.hits``) and the target is judged on."""
        ends = [self.ends[b] for b in self.takers if b in self.ends]
        return max(ends) - min(ends) if ends else 0.0

    def widest(self) -> float:
        """The widest spread two estimates each a noise off still tell from the target: each broker may end within
        its tolerance (one the trigger has not flagged, a noise past the band: ``tolerance``), so the ends may land
        twice the band and the noise apart, which such estimates read inside the target only one time in two; less
        their noise together (√2 noise: one standard deviation, as the benchmark's "shown" reads a spread)."""
        return 2 * self.band + (2 - math.sqrt(2)) * self.noise

    def overspread(self) -> float:
        """How far the spread the plan leaves is past ``widest``: a plan that lands there is as good as outside the
        band."""
        return max(self.spread() - self.widest(), 0.0)

    def outside(self) -> set[str]:
        """Brokers the plan leaves beyond their tolerance: any that can take load, and one that cannot (a
        co-tenant) above."""
        return {
            b
            for b, end in self.ends.items()
            if abs(end - self.target) >= self.tolerance(b) and (b in self.takers or end > self.target)
        }

    def this_cycle(
        self, room: int, per_cycle: int, per_source: Mapping[str, int], cap: int, overloaded: float
    ) -> list[tuple[str, str, str]]:
        """The moves to make now: at most ``room``, and ``cap`` from one giver counting ``per_source`` (this cycle's
        splits); a cycle lets ``per_cycle`` through. First what a giver must give now for the plan to take no more
        cycles than it needs, then givers above ``overloaded`` (Pulsar's
        loadBalancerBrokerOverloadedThresholdPercentage; the hottest first), then the heaviest planned bundles."""
        queue: dict[str, list[tuple[str, str, str]]] = {}
        for move in sorted(self.moves, key=lambda m: (-self.drops.get(m[1], 0.0), m[1])):
            queue.setdefault(move[0], []).append(move)
        if not queue:
            return []
        rounds = max(math.ceil(len(self.moves) / per_cycle), *(math.ceil(len(q) / cap) for q in queue.values()))
        left = {giver: self.level[giver] for giver in queue}
        used = dict(per_source)
        chosen: list[tuple[str, str, str]] = []

        def take(giver: str) -> bool:
            if len(chosen) >= room or used.get(giver, 0) >= cap or not queue[giver]:
                return False
            move = queue[giver].pop(0)
            chosen.append(move)
            used[giver] = used.get(giver, 0) + 1
            left[giver] -= self.drops.get(move[1], 0.0)
            return True

        for giver in sorted(queue, key=lambda g: (-len(queue[g]), g)):
            for _ in range(max(len(queue[giver]) - cap * (rounds - 1), 0)):
                take(giver)
        while any(left[g] > overloaded and take(g) for g in sorted(queue, key=lambda g: (-left[g], g))):
            pass
        heaviest = sorted((m for q in queue.values() for m in q), key=lambda m: (-self.drops.get(m[1], 0.0), m[1]))
        for giver, bundle, _ in heaviest:
            if queue[giver] and queue[giver][0][1] == bundle:
                take(giver)
        return chosen


def balanced_level(forecast: Forecast, takers: set[str]) -> float:
    """The usage the ``takers`` would all have carrying their traffic together, each a share of the same mix at its
    own cost: the level where their shares add up to the whole (one whose background alone is above it holds
    none). On alike brokers, their mean usage; their mean usage too where the models give no such level (a model
    far out of range: ``shed`` runs under ``np.errstate``, so its overflows are no warnings), or one outside the
    coolest and the hottest broker's usage now: traffic moved from the hottest to the coolest lowers the one and
    raises the other until they meet, so a level outside them says the models price a share of the cluster's mix
    other than what each broker's own mix costs it (brokers alike in cores and NIC but not in what they pay)."""
    names = sorted(takers)
    if not names:
        return 0.0
    level = _level_of_shares([forecast.linear(b) for b in names], np.sum([forecast.traffic[b] for b in names], axis=0))
    usage = [forecast.usage(b) for b in names]
    return float(np.mean(usage)) if level is None or not min(usage) <= level <= max(usage) else level


def _level_of_shares(lines: list[tuple[np.ndarray, np.ndarray, float]], whole: np.ndarray) -> float | None:
    """``balanced_level`` by bisection over the brokers' ``Forecast.linear`` lines (each one's share grows with the
    level); None when there is no finite level."""
    per_share = np.array([coefficients @ whole for _, coefficients, _ in lines])  # brokers × resources
    bases = np.array([base for base, _, _ in lines])
    floors = np.array([max(float(base.max()), direct) for base, _, direct in lines])
    finite = np.isfinite(per_share).all() and np.isfinite(bases).all() and np.isfinite(floors).all()
    if not finite or not (per_share > 0).any():
        return None

    def shares(level: float) -> float:
        room = np.divide(level - bases, per_share, out=np.full_like(per_share, np.inf), where=per_share > 0)
        return float(np.where(floors < level, np.maximum(room.min(axis=1), 0.0), 0.0).sum())

    low, high = float(floors.min()), float(floors.max()) + 1.0
    while shares(high) < 1.0:
        high = 2 * high + 1.0
        if not math.isfinite(high):  # the shares never add up
            return None
    for _ in range(60):  # 2⁻⁶⁰ of the interval: far below a hundredth of a point
        middle = (low + high) / 2
        low, high = (middle, high) if shares(middle) < 1.0 else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True)
class _Candidates:
    """Movable bundles of brokers above the level (``rows`` of ``items``) and the receivers below it (columns)."""

    items: list[Item]
    rows: list[int]  # the items the matrices' rows are
    receivers: list[str]
    rise: np.ndarray  # rows × receivers: what each bundle adds to each receiver
    fits: np.ndarray  # rows × receivers: allowed by the namespace policies, not above ``pairing.ceiling``


def plan(
    load: LoadData,
    forecast: Forecast,
    movable: Mapping[str, list[str]],
    takers: set[str],
    band: float,
    config: LoadBalancerConfig,
    halves: Mapping[str, Traffic],
    topics: Mapping[str, int],
    triggered: set[str],
    in_doubt: Set[str] = frozenset(),
) -> EndState:
    """The end state (see the module's docstring). ``movable``: each broker's bundles that may move this cycle;
    ``topics``: the topic count of pieces of this cycle's splits; ``in_doubt``: takers that count in the level but
    receive nothing this cycle. A broker the trigger has not flagged needs moving only beyond the band and the
    samples' noise (``EndState.tolerance``)."""
    level = {b: forecast.usage(b) for b in forecast.points}
    target = balanced_level(forecast, takers)
    if not (math.isfinite(target) and all(math.isfinite(v) for v in level.values())):
        return EndState(level, target, band, forecast.sigma, (), {}, dict(level), "none")  # a model far out of range
    nothing = EndState(
        level,
        target,
        band,
        forecast.sigma,
        (),
        {},
        dict(level),
        "none",
        frozenset(takers),
        frozenset(triggered),
        frozenset(b for b in takers if forecast.slope[b].borrowed),
    )
    if not nothing.outside():
        return nothing
    items, heavy = _items(load, forecast, movable, nothing, halves, topics)
    receivers = sorted(b for b in takers - in_doubt if level[b] < target)
    if not receivers:
        return nothing
    limit = ceiling(config, target, band)
    best = _plan_of(load, forecast, items, receivers, limit, nothing, config) if items else nothing
    return _through(load, forecast, items, heavy, receivers, limit, nothing, best, config) or best


def _plan_of(
    load: LoadData,
    forecast: Forecast,
    items: list[Item],
    receivers: list[str],
    limit: float,
    nothing: EndState,
    config: LoadBalancerConfig,
) -> EndState:
    """The plan over ``items`` (see the module's docstring): the greedy packing, made again as a program where that
    may pay."""
    exact_size = len(items) * len(receivers) <= MILP_MAX_PAIRS
    rows = _fewest(items, nothing)
    found = _candidates(load, forecast, items, range(len(items)) if exact_size else rows, receivers, limit)
    if found is None:
        return nothing
    fewest = set(rows)
    chosen = [k for k, row in enumerate(found.rows) if row in fewest]
    greedy = _greedy(found, chosen, nothing, limit)
    if exact_size and _may_pay(greedy, found):
        if exact := _better(found, nothing, greedy, config):
            return exact
    elif not exact_size and (filled := _first_fill(load, forecast, items, receivers, limit, nothing, greedy, config)):
        return filled
    return greedy


def _through(
    load: LoadData,
    forecast: Forecast,
    items: list[Item],
    heavy: list[Item],
    receivers: list[str],
    limit: float,
    nothing: EndState,
    best: EndState,
    config: LoadBalancerConfig,
) -> EndState | None:
    """The program again with the ``heavy`` bundles too, their givers among the receivers: a bundle that alone takes
    its giver below the band may go to a broker below the band (one back empty), its giver then refilled with
    lighter ones — after a rolling restart a few of the heaviest bundles and lighter ones to refill their givers,
    where the lighter ones alone take more moves. Kept only with fewer moves (or fewer brokers or points out of the
    band) than ``best``: the giver dips below the band until its refill, a cycle later (``_carry_out_plan``); None
    where there is no heavy bundle, the pairs are too many for the program, or it finds nothing better."""
    if not heavy:
        return None
    columns = receivers + sorted({giver for giver, *_ in heavy} - set(receivers))
    every = items + heavy
    if len(every) * len(columns) > MILP_MAX_PAIRS:
        return None
    found = _candidates(load, forecast, every, range(len(every)), columns, limit)
    if found is None:
        return None
    # a heavy bundle goes to a broker below the band, its giver refilled from lighter ones only
    short = _short(nothing)
    found.fits[len(items) :] &= np.array([column in short for column in columns])
    through = _milp(found, nothing, _seconds(config))
    if through is None or _score(through, found)[:3] >= _score(best, found)[:3]:
        return None
    sent = {bundle for _, bundle, _, _, _ in heavy}
    gave = {giver for giver, bundle, _ in through.moves if bundle in sent}
    if through.receivers() - set(receivers) - gave:
        return None  # a giver refilled without giving its heavy bundle: a relay, which ``_pair`` orders its own way
    return replace(through, solver="milp through a heavy bundle")


def _short(base: EndState) -> set[str]:
    """The brokers that can take load below their tolerance of the level: the gaps a heavy bundle may fill."""
    return {b for b in base.takers if b in base.level and base.level[b] < base.target - base.tolerance(b)}


def _first_fill(
    load: LoadData,
    forecast: Forecast,
    items: list[Item],
    receivers: list[str],
    limit: float,
    nothing: EndState,
    greedy: EndState,
    config: LoadBalancerConfig,
) -> EndState | None:
    """The program over the receivers the ``greedy`` plan leaves out of the band, where every receiver made too many
    pairs for it and each of them carries nothing (joined or came back): what a broker receives empty, the grace
    period keeps on it, so its first fill is planned whole; one already carrying load is topped up one move at a
    time. Kept when it is better; None where these too are too many, or it finds nothing better."""
    outside = greedy.outside()
    short = [r for r in receivers if r in outside]
    if not short or len(items) * len(short) > MILP_MAX_PAIRS:
        return None
    if any(carries_traffic(load.snapshot.brokers[r]) for r in short):
        return None
    found = _candidates(load, forecast, items, range(len(items)), short, limit)
    return None if found is None else _better(found, nothing, greedy, config)


def _better(found: _Candidates, nothing: EndState, greedy: EndState, config: LoadBalancerConfig) -> EndState | None:
    """The program's plan over ``found``, where it scores better than the ``greedy`` one; else None."""
    exact = _milp(found, nothing, _seconds(config))
    return exact if exact is not None and _score(exact, found) < _score(greedy, found) else None


def _items(
    load: LoadData,
    forecast: Forecast,
    movable: Mapping[str, list[str]],
    base: EndState,
    halves: Mapping[str, Traffic],
    topics: Mapping[str, int],
) -> tuple[list[Item], list[Item]]:
    """The bundles of brokers above the level that may move: (giver, bundle, traffic, drop, topics), each one
    that alone does not take its giver below its tolerance (``EndState.tolerance``: as far as the plan may land it);
    and the heavy ones that do, but fit within the band on a broker below it with the most room (``_through``)."""
    level, target = base.level, base.target
    deepest = max((target + base.tolerance(b) - level[b] for b in _short(base)), default=0.0)
    items: list[Item] = []
    heavy: list[Item] = []
    for giver in sorted(b for b in movable if level[b] > target):
        stats = load.snapshot.brokers[giver].lastStats
        moving = carried(load, giver, movable[giver], halves)
        if not moving:
            continue
        drops = level[giver] - forecast.departures(giver, np.array([traffic for _, traffic in moving]))
        for (bundle, traffic), drop in zip(moving, drops.tolist()):
            if 0 < drop <= level[giver] - (target - base.tolerance(giver)):
                kept = items
            elif 0 < drop <= deepest:
                kept = heavy
            else:
                continue
            kept.append(
                (giver, bundle, traffic, drop, topics.get(bundle, stats[bundle].topics if bundle in stats else 0))
            )
    return items, heavy


def _fewest(items: list[Item], base: EndState) -> list[int]:
    """Each giver beyond its tolerance: its fewest bundles that land it in the band, nearest the level
    (``packing.fewest_into_band``); none for a giver no set of its bundles lands there."""
    rows_of: dict[str, list[int]] = {}
    for row, item in enumerate(items):
        rows_of.setdefault(item[0], []).append(row)
    chosen = []
    for giver, rows in rows_of.items():
        excess, band = base.level[giver] - base.target, base.band
        if excess > base.tolerance(giver):
            picked = packing.fewest_into_band([items[row][3] for row in rows], excess - band, excess + band, excess)
            chosen += [rows[i] for i in picked or ()]
    return chosen


def _candidates(
    load: LoadData,
    forecast: Forecast,
    items: list[Item],
    rows: Sequence[int],
    receivers: list[str],
    limit: float,
) -> _Candidates | None:
    """What each of the ``rows`` of ``items`` adds to each receiver, and where it may go (ending at most at
    ``limit``: ``pairing.ceiling``)."""
    chosen = [items[row] for row in rows]
    if not chosen:
        return _Candidates(
            items, list(rows), receivers, np.zeros((0, len(receivers))), np.zeros((0, len(receivers)), bool)
        )
    now, after = forecast.arrivals(receivers, np.array([traffic for _, _, traffic, _, _ in chosen]))
    rise = after - now
    if not (np.isfinite(now).all() and np.isfinite(rise).all()):
        return None
    fits = (after <= limit) & permitted(load, [bundle for _, bundle, _, _, _ in chosen], receivers)
    fits &= np.array([[giver != receiver for receiver in receivers] for giver, *_ in chosen])
    return _Candidates(items, list(rows), receivers, rise, fits)


def _state(found: _Candidates, chosen: list[tuple[int, int]], base: EndState, solver: str) -> EndState:
    """``base`` (no moves) with item ``found.rows[k]`` moved to receiver ``column`` for each (k, column) of
    ``chosen``."""
    ends = dict(base.level)
    moves, drops = [], {}
    for k, column in chosen:
        giver, bundle, _, drop, _ = found.items[found.rows[k]]
        receiver = found.receivers[column]
        ends[giver] -= drop
        ends[receiver] += float(found.rise[k, column])
        moves.append((giver, bundle, receiver))
        drops[bundle] = drop
    return replace(base, moves=tuple(sorted(moves)), drops=drops, ends=ends, solver=solver)


def _score(state: EndState, found: _Candidates) -> tuple[int, float, int, float, int]:
    """Lower is better: brokers out of the band, or where none is, a spread past its widest (``EndState.overspread``),
    points out of them, then moves, then the spread, then topics disconnected."""
    outside = state.outside()
    over = 0.0 if outside else state.overspread()
    out = sum(abs(state.ends[b] - state.target) - state.tolerance(b) for b in outside) + over
    topics = {bundle: count for _, bundle, _, _, count in found.items}
    moved = sum(topics[bundle] for _, bundle, _ in state.moves)
    return (len(outside) + (over > STRICTLY), round(out, 6), len(state.moves), round(state.spread(), 6), moved)


def _greedy(found: _Candidates, chosen: list[int], base: EndState, limit: float) -> EndState:
    """The givers' fewest bundles (``chosen``: rows of ``found``) packed onto the receivers (``packing.assign``)."""
    if not chosen:
        return _state(found, [], base, "greedy")
    start = np.array([base.level[r] for r in found.receivers])
    where = packing.assign(start, found.rise[chosen], found.fits[chosen], limit, base.target, base.band)
    return _state(found, [(k, t) for k, t in zip(chosen, where) if t >= 0], base, "greedy")


def _may_pay(greedy: EndState, found: _Candidates) -> bool:
    """Whether the exact program can do better than the greedy plan: it leaves a broker out of the band; it leaves
    the brokers further apart than twice the band less the noise (a spread a few tenths off the trigger's, which
    the estimates cannot tell from it: as few moves may land them closer); or it makes more moves than the givers'
    and receivers' own counts need (each giver's fewest largest bundles that take it to the band, each receiver's
    fewest largest arrivals that bring it there)."""
    if greedy.outside() or greedy.spread() > 2 * (greedy.band - greedy.noise):
        return True
    level, target = greedy.level, greedy.target
    need_give = need_take = 0
    rows_of: dict[str, list[float]] = {}
    for giver, _, _, drop, _ in found.items:  # every movable bundle, whether the matrices hold it or not
        rows_of.setdefault(giver, []).append(drop)
    for giver, drops in rows_of.items():
        need_give += _fewest_reaching(drops, level[giver] - target - greedy.tolerance(giver))
    for column, receiver in enumerate(found.receivers):
        arriving = found.rise[found.fits[:, column], column]
        need_take += _fewest_reaching(list(arriving), target - greedy.tolerance(receiver) - level[receiver])
    return len(greedy.moves) > max(need_give, need_take)


def _fewest_reaching(sizes: list[float], total: float) -> int:
    if total <= 0:
        return 0
    reached = np.cumsum(sorted(sizes, reverse=True)) >= total
    return int(np.argmax(reached)) + 1 if reached.any() else len(sizes)


def _seconds(config: LoadBalancerConfig) -> float:
    """HiGHS's time limit: one shedding interval. The node budget ends every program long before it (seconds at the
    most pairs on 2 cores); the limit is only a guard against a runaway, as a plan made over a whole interval is late
    for the cycle it was made in. A limit near what the budget takes made the plan depend on the machine's load."""
    return 60.0 * max(config.loadBalancerSheddingIntervalMinutes, 1)


def _milp(found: _Candidates, base: EndState, seconds: float) -> EndState | None:
    """The program's plan (``_program``); where it lands every broker within its tolerance but its ends further apart
    than ``EndState.widest``, the program's again with the spread bounded there, kept where that lands every broker
    within its tolerance and its ends within the bound. A plan that leaves a broker out of the band leaves the
    spread to that broker, which later cycles move one at a time (``_pair``): the bound would only add moves."""
    plan = _program(found, base, seconds, None)
    if plan is None or plan.outside() or plan.overspread() <= STRICTLY:
        return plan
    narrower = _program(found, base, seconds, base.widest())
    kept = narrower is not None and not narrower.outside() and narrower.overspread() <= STRICTLY
    return narrower if kept else plan


def _program(found: _Candidates, base: EndState, seconds: float, widest: float | None) -> EndState | None:
    """The plan as a mixed-integer program: x[item, receiver] ∈ {0, 1}, each item to one receiver at most; every
    broker involved ends within the band (within the tolerance if it starts there) or pays for each hundredth of a
    point outside it more than every candidate move costs together, and so does the spread of the takers' ends past
    ``widest`` where given; each move costs 1, plus the spread and its topics, each less than a move in all (so they
    only break ties between plans of as many moves). None when HiGHS does not finish within its budgets."""
    # imported here: the rest of the strategies (the Spark job's cost fits among them) needs numpy only
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    pairs = np.argwhere(found.fits)  # (row, column) of each variable
    count = len(pairs)
    brokers = sorted({found.items[row][0] for row in found.rows} | set(found.receivers))
    index = {b: k for k, b in enumerate(brokers)}
    most_topics = max(found.items[row][4] for row in found.rows) + 1
    level, target = base.level, base.target
    # the spread of the takers' ends, hottest (u) less coolest (l): those the program leaves bound them
    left = [level[b] for b in base.takers - set(brokers)]
    span = max(level.values()) - min(level.values()) + 1.0  # more than any plan's spread but one far off the band
    costs = np.concatenate(
        [
            1 + np.array([found.items[found.rows[k]][4] for k, _ in pairs]) / (2 * most_topics * (count + 1)),
            np.full(2 * len(brokers), (count + 1.0) / STRICTLY),  # a point above or below the band
            [0.5 / span, -0.5 / span],  # u − l: less than a move in all, as are the topics
            [(count + 1.0) / STRICTLY],  # a point of u − l past ``widest``
        ]
    )
    rows, columns, values = [], [], []
    lower, upper = [], []
    by_item: dict[int, list[int]] = {}
    for k, (row, _) in enumerate(pairs):
        by_item.setdefault(int(row), []).append(k)
    constraint = 0
    for ks in by_item.values():  # one receiver at most
        rows += [constraint] * len(ks)
        columns += ks
        values += [1.0] * len(ks)
        lower.append(0.0)
        upper.append(1.0)
        constraint += 1
    effect: dict[int, list[tuple[int, float]]] = {k: [] for k in range(len(brokers))}
    for k, (row, column) in enumerate(pairs):
        giver, _, _, drop, _ = found.items[found.rows[row]]
        effect[index[giver]].append((k, -drop))
        effect[index[found.receivers[column]]].append((k, float(found.rise[row, column])))

    def end_row(b: int, side: int, variable: int, coefficient: float, bound: float) -> None:
        """side · (broker b's end − its level now) + coefficient · variable ≤ bound."""
        nonlocal constraint
        for k, v in effect[b]:
            rows.append(constraint)
            columns.append(k)
            values.append(side * v)
        rows.append(constraint)
        columns.append(variable)
        values.append(coefficient)
        lower.append(-np.inf)
        upper.append(bound)
        constraint += 1

    spread_u, spread_l = count + 2 * len(brokers), count + 2 * len(brokers) + 1
    for b, name in enumerate(brokers):
        if name in base.takers:  # its end ≤ u and ≥ l
            end_row(b, +1, spread_u, -1.0, -level[name])
            end_row(b, -1, spread_l, +1.0, level[name])
    for b, name in enumerate(brokers):
        tolerance = base.tolerance(name)
        width = (tolerance if abs(level[name] - target) <= tolerance else min(tolerance, base.band)) - STRICTLY
        end_row(b, +1, count + b, -1.0, target + width - level[name])  # above the band: its slack pays
        end_row(b, -1, count + len(brokers) + b, -1.0, level[name] - (target - width))
    over = count + 2 * len(brokers) + 2  # u − l − over ≤ widest
    if widest is not None:
        rows += [constraint] * 3
        columns += [spread_u, spread_l, over]
        values += [1.0, -1.0, -1.0]
        lower.append(-np.inf)
        upper.append(widest - STRICTLY)
        constraint += 1
    size = count + 2 * len(brokers) + 3
    matrix = coo_matrix((values, (rows, columns)), shape=(constraint, size)).tocsr()
    integrality = np.concatenate([np.ones(count), np.zeros(2 * len(brokers) + 3)])
    bounds = Bounds(
        np.concatenate([np.zeros(count + 2 * len(brokers)), [max(left, default=-np.inf), -np.inf, 0.0]]),
        np.concatenate(
            [np.ones(count), np.full(2 * len(brokers), np.inf), [np.inf, min(left, default=np.inf), np.inf]]
        ),
    )
    result = milp(
        costs,
        constraints=LinearConstraint(matrix, lower, upper),
        integrality=integrality,
        bounds=bounds,
        options={"node_limit": MILP_NODES, "time_limit": seconds, "mip_rel_gap": 0.0},
    )
    if result.x is None or result.status == TIME_LIMIT:
        return None  # no plan, or one the time limit (not the node budget) cut short: it would vary by machine
    chosen = [(int(row), int(column)) for (row, column), x in zip(pairs, result.x[:count]) if x > 0.5]
    return _state(found, chosen, base, "milp")
