"""What any strategy needs to balance a simulated cluster: the band, the fewest moves, the rails' floor of cycles.

The benchmark judges a strategy against these, not against another strategy: the lower bound of unloads
(``balance_needs``) and the fewest cycles the hit counters and the rails allow (``rails_floor``). They read the
simulator's true state, which no strategy sees.

Brokers differ (cores, NIC, per-message costs), so "balanced" is every broker that can take load within
±target/2 of the **balanced level**: the usage they would all have if their traffic were spread so as to equalise
it (``balanced_level``). Moving load onto a broker with twice the cores lowers the mean, and a bundle counts on
each broker at what it costs there: on its owner, what leaving takes off; on a broker below the band, what
arriving adds. On alike brokers the balanced level is their mean usage and both costs are the same. Brokers no
bundle can move between (a namespace isolation policy's primaries and the rest: ``pools_of``) are judged as
clusters of their own.
"""

from __future__ import annotations

import fnmatch
import itertools
import math
from collections.abc import Iterator, Mapping, Set

import numpy as np

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.model import Broker
from pulsar_lb_operator.simulator.scenario import Scenario
from pulsar_lb_operator.strategies import DEFAULT_RAILS, BundleStats, LoadBalancerConfig, Rails

TARGET_SPREAD = 10.0  # points of usage: "balanced" means max − min below this
GOAL_CYCLES = 3  # issue 16: balanced within 3 cycles of a disturbance, or as soon as the rails allow
RESOURCES = ("cpu", "bandwidthIn", "bandwidthOut")  # what the simulator's weighted usage is the max of
UNITS = (BundleStats(msgRateIn=1.0), BundleStats(msgThroughputIn=1.0), BundleStats(msgThroughputOut=1.0))


Pools = Mapping[str, str]  # broker name → its pool: brokers no bundle can move between are judged apart


def pools_of(scenario: Scenario) -> dict[str, str]:
    """Each broker's pool (by name, brokers that join included) under the scenario's namespace isolation policies.
    A policy's primary brokers carry its namespaces and no other (Pulsar's shared brokers are those no policy names
    primary): no bundle moves between them and the rest, whose levels no strategy can bring together, so each pool
    is judged on its own — its spread, its lower bound of moves. A policy with secondary brokers spills onto them,
    shared ones, which joins its primaries to the rest. Empty without isolation policies: the cluster is one pool."""
    closed = [p for p in scenario.isolation_policies if not p.secondary]
    if not closed:
        return {}
    names = [b.name for b in scenario.brokers] + [
        e.broker for e in scenario.events if e.type == "add_broker" and e.broker
    ]
    return {
        name: "+".join(p.name for p in closed if any(fnmatch.fnmatchcase(name, g) for g in p.primary)) for name in names
    }


def pooled(usage: Mapping[str, float], pools: Pools | None) -> list[dict[str, float]]:
    """``usage`` split by pool (``pools_of``; a broker it does not name is shared), in the order first met."""
    if not pools:
        return [dict(usage)]
    out: dict[str, dict[str, float]] = {}
    for name, value in usage.items():
        out.setdefault(pools.get(name, ""), {})[name] = value
    return list(out.values())


def balanceable(usage: dict[str, float], background: dict[str, float]) -> list[str]:
    """The brokers that can take load: one whose background alone is at or above the cluster's mean
    usage (PIP-364's 70% co-tenant) can only give load away, so balance is judged without it."""
    if not usage:
        return []
    mean = sum(usage.values()) / len(usage)
    return [name for name in usage if background.get(name, 0.0) < mean] or list(usage)


def balanceable_mean(usage: dict[str, float], background: dict[str, float]) -> tuple[list[str], float]:
    """The brokers that can take load (``balanceable``) and their mean usage; ([], 0.0) when there are none."""
    takers = balanceable(usage, background)
    return takers, (sum(usage[n] for n in takers) / len(takers) if takers else 0.0)


def balanceable_ends(
    usage: dict[str, float], background: dict[str, float], pools: Pools | None = None
) -> Iterator[tuple[dict[str, float], str, str]]:
    """Each pool's usage with its hottest and coolest broker that can take load (of equals, the first by name)."""
    for group in pooled(usage, pools):
        takers = balanceable(group, background)
        if takers:
            yield group, min(takers, key=lambda n: (-group[n], n)), min(takers, key=lambda n: (group[n], n))


def balanceable_spread(usage: dict[str, float], background: dict[str, float], pools: Pools | None = None) -> float:
    """The hottest less the coolest of the brokers that can take load: in the pool where that is widest."""
    return max([0.0, *(group[hot] - group[cool] for group, hot, cool in balanceable_ends(usage, background, pools))])


def reading_noise(cluster: SimulatedCluster) -> dict[str, float]:
    """Each live broker's standard deviation of a reading of its usage, in points: the simulator reads CPU as the
    broker's usage times 1 + N(0, jitter), bandwidth exactly; a reading is the larger of them (weighted usage)."""
    out = {}
    for broker in cluster.alive_brokers():
        used = cluster.host_usage(broker, {b: cluster.bundle_stats(b)[0] for b in cluster.owned_by(broker.id)}, 0.0)
        cpu, *others = (used[r][0] / used[r][1] * 100 for r in RESOURCES)
        out[broker.name] = broker.spec.jitter * cpu if cpu >= max(others) else 0.0
    return out


def readings_show(
    usage: dict[str, float],
    background: dict[str, float],
    noise: Mapping[str, float],
    target: float,
    pools: Pools | None = None,
) -> bool:
    """Whether readings ``noise`` off (``reading_noise``) can show the spread at or past ``target``: the two ends of
    some pool's brokers that can take load are further apart than the target by at least the noise of their
    difference (one standard deviation: closer, a reading of the pair falls inside the target one time in six or
    more, and no count of consecutive hits on such readings can say when the spread crossed it)."""
    for group, hottest, coolest in balanceable_ends(usage, background, pools):
        margin = math.hypot(noise.get(hottest, 0.0), noise.get(coolest, 0.0))
        if hottest != coolest and group[hottest] - group[coolest] - target >= margin:
            return True
    return False


def linear_usage(cluster: SimulatedCluster, broker: Broker) -> tuple[np.ndarray, np.ndarray]:
    """The broker's usage per resource (``RESOURCES``, percent) as ``base + coefficients @ traffic``, traffic being
    (msg rate in + out, throughput in, throughput out): the simulator's own physics, probed with unit traffic."""
    zero = cluster.host_usage(broker, {}, 0.0)
    base = np.array([zero[r][0] / zero[r][1] * 100 for r in RESOURCES])
    columns = []
    for unit in UNITS:
        used = cluster.host_usage(broker, {"unit": unit}, 0.0)
        columns.append([used[r][0] / used[r][1] * 100 for r in RESOURCES] - base)
    return base, np.array(columns).T


def balanced_level(lines: list[tuple[np.ndarray, np.ndarray]], traffic: np.ndarray) -> float:
    """The usage the brokers of ``lines`` (each ``linear_usage``) would all have holding ``traffic`` together, each
    a share of the same mix: the level where their shares add up to the whole (brokers whose background alone is
    above it hold none). Found by bisection: each broker's share grows with the level."""

    def shares(level: float) -> float:
        total = 0.0
        for base, coefficients in lines:
            per_resource = coefficients @ traffic
            room = [(level - b) / p for b, p in zip(base, per_resource) if p > 0]
            total += max(min(room, default=0.0), 0.0)
        return total

    low = min(float(base.max()) for base, _ in lines)
    high = max(float(base.max()) for base, _ in lines) + 1.0
    while shares(high) < 1.0:
        high *= 2
    for _ in range(60):  # 2⁻⁶⁰ of the interval: far below a point's hundredth
        middle = (low + high) / 2
        low, high = (middle, high) if shares(middle) < 1.0 else (low, middle)
    return (low + high) / 2


def bundle_contributions(cluster: SimulatedCluster, names: Set[str] | None = None) -> dict[str, dict[str, float]]:
    """Per live broker (of ``names``, default all): each owned bundle's share of its true usage (usage with − usage
    without)."""
    out: dict[str, dict[str, float]] = {}
    for broker in cluster.alive_brokers():
        if names is not None and broker.name not in names:
            continue
        owned = cluster.owned_by(broker.id)
        stats = {b: cluster.bundle_stats(b)[0] for b in owned}
        full = cluster.weighted_usage(broker, stats)
        out[broker.name] = {
            b: full - cluster.weighted_usage(broker, {k: v for k, v in stats.items() if k != b}) for b in owned
        }
    return out


def balance_needs(
    cluster: SimulatedCluster,
    target: float = TARGET_SPREAD,
    held: frozenset[str] = frozenset(),
    pools: Pools | None = None,
) -> tuple[int, int]:
    """``_pool_needs`` of each pool (``pools_of``; default: the cluster is one) added up, and the most from one
    broker of any."""
    total = most = 0
    for names in pool_names(cluster, pools):
        needed, one = _pool_needs(cluster, target, held, names)
        total, most = total + needed, max(most, one)
    return total, most


def pool_names(cluster: SimulatedCluster, pools: Pools | None) -> list[set[str] | None]:
    """The live brokers' names by pool; [None] (every broker) without pools."""
    if not pools:
        return [None]
    return [set(group) for group in pooled({b.name: 0.0 for b in cluster.alive_brokers()}, pools)]


def _pool_needs(
    cluster: SimulatedCluster, target: float, held: frozenset[str], names: set[str] | None
) -> tuple[int, int]:
    """At least this many unloads bring every broker that can take load within ±target/2 of the balanced level,
    and at least this many of them leave one broker (the busiest giver's share). ``held``: bundles unloaded within
    the grace period (loadBalancerSheddingGracePeriodMinutes), which no shedder of Pulsar's may unload again: they
    count in their owner's usage but are no move's bundle.

    Each broker above the band must give away its largest bundles (at what each costs it) until under it — those
    another broker can take without ending above the band (``_fits_somewhere``), or its fewest that include one
    that fits nowhere, and then that one's receiver must give its own until under it (``_receiver_gives``); each
    broker below it must receive at least the fewest bundles whose costs there add up to its gap; and together the
    brokers below it must receive at least their total gap, which takes at least as many moves as the fewest
    bundles (of brokers not below the band, each at the most it costs on any of them, and none giving more than
    takes it to the band's floor, and each broker above the band giving at least its own count: ``_fewest_filling``)
    that add up to it: one bundle arrives per move. One move serves one of each, so the bound is the largest of
    the three. A bundle's cost on a broker it arrives on is the most it adds to any one resource there, which is
    never less than what it adds to the broker's weighted usage.

    Where the holds keep a broker above the band (what its held bundles cost it is past the band's top), the band
    moves up to end there: the spread must come under the target around it, so the brokers under the moved band's
    floor must receive (a hot topic on a broker whose bundles all just arrived: it can give nothing for a while,
    and the brokers it keeps the spread past the target from must be filled toward it).
    """
    now = reading(cluster, names)
    if now is None:
        return 0, 0
    _, usage, takers, stats, lines = now
    traffic = traffic_rows(stats)
    low, high = band(cluster, now, target, held)
    contributions = {
        n: {b: size for b, size in sizes.items() if b not in held}
        for n, sizes in bundle_contributions(cluster, names).items()
    }
    free = {n: [k for k, bundle in enumerate(per) if bundle not in held] for n, per in stats.items()}
    fits = _fits_somewhere(cluster, stats, lines, usage, takers, high)
    forced: dict[str, int] = {  # per broker above the band: the fewest of its bundles that take it under
        name: _fewest_reaching(list(contributions[name].values()), value - high)
        for name, value in usage.items()
        if value > high
    }
    give = most = 0
    for name in forced:
        sizes = contributions[name]
        fitting = [sizes[b] for b in sizes if b in fits]
        given = _fewest_reaching(fitting, usage[name] - high)
        unfitting = {  # each bundle that fits nowhere: what its receiver must give
            b: _receiver_gives(lines, traffic, contributions, forced, name, traffic[name][[k]], takers, high)
            for k, b in enumerate(stats[name])
            if b in sizes and b not in fits
        }
        if unfitting:  # or its fewest with some that fit nowhere, and what the receiver that must give most gives
            through = min(_fewest_with(sizes, fits, unfitting, b, usage[name] - high) for b in unfitting)
            given = through if sum(fitting) < usage[name] - high else min(given, through)
        give += given
        most = max(most, given)
    short = sorted(n for n in takers if usage[n] < low)
    if not short:
        return give, most
    sources = [n for n in sorted(usage) if usage[n] >= low]
    movable = np.concatenate([traffic[n][free[n]] for n in sources] or [np.zeros((0, 3))])
    # what each movable bundle adds on each broker below the band: the most it adds to one resource there
    rise = np.array([(lines[n][1] @ movable.T).max(axis=0) for n in short]).reshape(len(short), -1)
    take = 0
    for row, name in enumerate(short):
        take += _fewest_reaching(rise[row], low - usage[name])
    deficit = sum(low - usage[n] for n in short)
    volume = _fewest_filling(sources, contributions, rise.max(axis=0), usage, low, deficit, forced)
    return max(give, take, volume), most


Reading = tuple[
    dict[str, Broker],  # the alive brokers by name
    dict[str, float],  # their true usage
    set[str],  # those that can take load (``balanceable``)
    dict[str, dict[str, BundleStats]],  # each one's bundles, at the cluster's traffic now
    dict[str, tuple[np.ndarray, np.ndarray]],  # each one's ``linear_usage``
]


def reading(cluster: SimulatedCluster, names: set[str] | None = None) -> Reading | None:
    """What ``balance_needs`` and ``held_blocks`` read of the cluster (its brokers of ``names``, default all) now;
    None with fewer than two alive brokers, where there is nothing to balance."""
    alive = {b.name: b for b in cluster.alive_brokers() if names is None or b.name in names}
    if len(alive) < 2:
        return None
    usage = {name: cluster.true_usage(b.id) for name, b in alive.items()}
    takers = set(balanceable(usage, {name: b.spec.background_cpu * 100 for name, b in alive.items()}))
    stats = {name: {x: cluster.bundle_stats(x)[0] for x in cluster.owned_by(b.id)} for name, b in alive.items()}
    lines = {name: linear_usage(cluster, b) for name, b in alive.items()}
    return alive, usage, takers, stats, lines


def traffic_rows(stats: Mapping[str, Mapping[str, BundleStats]]) -> dict[str, np.ndarray]:
    """Each broker's bundles' traffic (``RESOURCES``' units), a row per bundle in ``stats``' order."""
    return {n: np.array([s.traffic for s in per.values()]).reshape(-1, 3) for n, per in stats.items()}


def band(cluster: SimulatedCluster, now: Reading, target: float, held: frozenset[str]) -> tuple[float, float]:
    """The band a reading's brokers must end in (low, high): ±target/2 around the balanced level, moved up where the
    grace period's ``held`` bundles keep a broker above it (``_pool_needs``)."""
    _, usage, takers, stats, lines = now
    traffic = traffic_rows(stats)
    carried = sum((traffic[n].sum(axis=0) for n in takers), np.zeros(3))
    level = balanced_level([lines[n] for n in sorted(takers)], carried) if carried.any() else _mean(usage, takers)
    high = level + target / 2
    if held and not _blocked(cluster, now, held, target):  # where the holds block, balance waits for their release
        high = max([high, *_held_floors(cluster, now, held).values()])  # no lower than a broker the holds keep up
    return high - target, high


def held_blocks(
    cluster: SimulatedCluster,
    target: float = TARGET_SPREAD,
    held: frozenset[str] = frozenset(),
    pools: Pools | None = None,
) -> bool:
    """Whether the grace period's holds alone keep some pool (``pools_of``; default: the cluster is one) from
    balance (``_held_blocks_pool``)."""
    return bool(held) and any(_held_blocks_pool(cluster, target, held, names) for names in pool_names(cluster, pools))


def _held_blocks_pool(cluster: SimulatedCluster, target: float, held: frozenset[str], names: set[str] | None) -> bool:
    """Whether the grace period's holds alone keep the brokers of ``names`` from balance: no shedder of Pulsar's may
    unload a ``held`` bundle (one unloaded within loadBalancerSheddingGracePeriodMinutes), so each broker that can
    take load is at least at what its held bundles cost it. Those whose floor is above the level the others would
    share carrying all the rest (``balanced_level``) carry only their held bundles; if the highest floor is still
    ``target`` or more above that level, no strategy behind the rails can balance, wherever the rest goes."""
    now = reading(cluster, names)
    return now is not None and _blocked(cluster, now, held, target)


def _held_floors(cluster: SimulatedCluster, now: Reading, held: frozenset[str]) -> dict[str, float]:
    """What its ``held`` bundles cost each broker that can take load: the least it can be brought down to now."""
    alive, _, takers, stats, _ = now
    return {n: cluster.weighted_usage(alive[n], {x: s for x, s in stats[n].items() if x in held}) for n in takers}


def _blocked(cluster: SimulatedCluster, now: Reading, held: frozenset[str], target: float) -> bool:
    """``_held_blocks_pool`` of a reading."""
    _, _, takers, stats, lines = now
    kept = {name: {x: s for x, s in stats[name].items() if x in held} for name in takers}
    if not any(kept.values()):
        return False
    floors = _held_floors(cluster, now, held)
    total = sum((np.array(s.traffic) for n in takers for s in stats[n].values()), np.zeros(3))
    fixed: set[str] = set()
    while True:
        free = sorted(takers - fixed)
        if not free:
            return False
        rest = total - sum((np.array(s.traffic) for n in fixed for s in kept[n].values()), np.zeros(3))
        free_lines = [lines[n] for n in free]
        level = balanced_level(free_lines, rest) if rest.any() else max(float(base.max()) for base, _ in free_lines)
        above = {n for n in free if floors[n] > level}
        if not above:
            return bool(fixed) and max(floors[n] for n in fixed) - level >= target
        fixed |= above


def _receiver_gives(
    lines: dict[str, tuple[np.ndarray, np.ndarray]],
    traffic: dict[str, np.ndarray],
    contributions: dict[str, dict[str, float]],
    forced: dict[str, int],
    giver: str,
    unfitting: np.ndarray,
    takers: set[str],
    high: float,
) -> int:
    """The fewest moves a broker must make after receiving one of the ``giver``'s bundles that fit nowhere (rows of
    ``unfitting``: their traffic): it ends above the band and must give its own bundles until under it — not that
    one, which the grace period holds — beyond what it gives anyway (``forced``). At least one (a chain through
    brokers this does not follow); a receiver that cannot get under by giving all its own is no route."""
    fewest: int | None = None
    for name in sorted(takers - {giver}):
        base, coefficients = lines[name]
        now = base + coefficients @ traffic[name].sum(axis=0)
        after = float((now[:, np.newaxis] + coefficients @ unfitting.T).max(axis=0).min())  # the least overshoot
        own = list(contributions[name].values())
        if sum(own) >= after - high:
            needed = _fewest_reaching(own, after - high) - forced.get(name, 0)
            fewest = needed if fewest is None else min(fewest, needed)
    return max(fewest or 1, 1)


def _fewest_filling(
    sources: list[str],
    contributions: dict[str, dict[str, float]],
    arriving: np.ndarray,
    usage: dict[str, float],
    low: float,
    deficit: float,
    forced: dict[str, int],
) -> int:
    """The fewest moves that can bring ``deficit`` points to the brokers below the band: each move one bundle of a
    broker not below it (``arriving``: the most each adds there, in ``sources``' order), and no broker giving more
    than takes it to the band's floor — at most that many of its own points, times the most any of its bundles
    adds elsewhere per point it takes off it — and at least ``forced`` moves from a broker above the band (what
    it must give to get under it: its moves count, and what they bring, whether the brokers below need it or not).
    With so much from each source at most, the moves go where they add most (what j moves bring from one source
    only grows by less with each: taking them in turn is optimal, from the forced ones on)."""
    if deficit <= 0:
        return 0
    offer: list[list[float]] = []  # per source: what its 1st, 2nd, … move can add at most
    start = 0
    for name in sources:
        drops = list(contributions[name].values())
        adds = arriving[start : start + len(drops)]
        start += len(drops)
        per_point = max((a / d for a, d in zip(adds, drops) if d > 0), default=0.0)
        room = (usage[name] - low) * per_point
        totals = np.minimum(np.cumsum(sorted(adds, reverse=True)), room) if len(adds) else np.zeros(0)
        offer.append(list(np.diff(totals, prepend=0.0)))
    heads = [min(forced.get(name, 0), len(o)) for name, o in zip(sources, offer)]
    filled, moves = float(sum(sum(o[:h]) for o, h in zip(offer, heads))), float(sum(heads))
    while filled < deficit:
        gains = [o[h] if h < len(o) else 0.0 for o, h in zip(offer, heads)]
        best = int(np.argmax(gains)) if gains else 0
        if not gains or gains[best] <= 0:
            break
        filled += gains[best]
        heads[best] += 1
        moves += 1
    return int(moves)


def _fewest_with(sizes: dict[str, float], fits: set[str], unfitting: dict[str, int], most: str, total: float) -> int:
    """The fewest moves of a giver's bundles (``sizes``) adding up to ``total`` that include ``most``, one that fits
    nowhere, and none whose receiver must give more than its receiver (``unfitting``: what each such receiver must
    give), with those gives: the receiver of each bundle that fits nowhere gives at least its own count, so a set
    of them costs at least the largest (``most``'s) — the largest others first."""
    others = [size for b, size in sizes.items() if b != most and (b in fits or unfitting[b] <= unfitting[most])]
    left = total - sizes[most]
    return 1 + unfitting[most] + (_fewest_reaching(others, left) if left > 0 else 0)


def _mean(usage: dict[str, float], names: set[str]) -> float:
    return sum(usage[n] for n in names) / len(names)


def _fewest_reaching(sizes: np.ndarray | list[float], total: float, exceed: bool = False) -> int:
    """The fewest of ``sizes`` (the largest first) that add up to ``total`` (``exceed``: more than it); all of
    them when they do not."""
    ordered = sorted((float(s) for s in sizes), reverse=True)
    enough = (lambda acc: acc > total) if exceed else (lambda acc: acc >= total)
    return next((k for k, acc in enumerate(itertools.accumulate(ordered), 1) if enough(acc)), len(ordered))


def _fits_somewhere(
    cluster: SimulatedCluster,
    stats: dict[str, dict[str, BundleStats]],
    lines: dict[str, tuple[np.ndarray, np.ndarray]],
    usage: dict[str, float],
    takers: set[str],
    high: float,
) -> set[str]:
    """The bundles some other broker that can take load could receive without ending above the band: moving any
    other leaves its destination above the band, unless the destination gives a bundle away too — a move more."""
    fits = set()
    for owner, owned in stats.items():
        for bundle, s in owned.items():
            traffic = np.array(s.traffic)
            for name in takers:
                if name != owner and usage[name] + (lines[name][1] @ traffic).max() <= high:
                    fits.add(bundle)
                    break
    return fits


def moves_lower_bound(cluster: SimulatedCluster, target: float = TARGET_SPREAD, pools: Pools | None = None) -> int:
    """``balance_needs``' count of unloads."""
    return balance_needs(cluster, target, pools=pools)[0]


def hits_to_act(
    usage: dict[str, float],
    background: dict[str, float],
    config: LoadBalancerConfig,
    pools: Pools | None = None,
    noise: Mapping[str, float] | None = None,
) -> int:
    """How many consecutive cycles the default hit counters make a strategy debounced like AvgShedder see this
    imbalance before it acts: loadBalancerAvgShedderHitCountHighThreshold (2) when a broker that can take load
    is at least half of loadBalancerAvgShedderHighThreshold (40 points between a pair: 20) from their mean,
    loadBalancerAvgShedderHitCountLowThreshold (8) below that. AvgShedder's own pair rule (the hottest and
    coolest broker more than 40 points apart) never asks for fewer: such a pair has a broker 20 from the mean.
    With ``pools`` (``pools_of``), each broker's distance is from its own pool's mean. With ``noise``
    (``reading_noise``), a broker is past the high gap only by as much as its distance exceeds its reading's noise:
    the count its readings can complete, as ``readings_show`` reads the spread."""
    distances: list[float] = []
    for group in pooled(usage, pools):
        takers, mean = balanceable_mean(group, background)
        distances += [abs(group[n] - mean) - (noise or {}).get(n, 0.0) for n in takers]
    if not distances:
        return config.loadBalancerAvgShedderHitCountHighThreshold
    if max(distances) >= config.loadBalancerAvgShedderHighThreshold / 2:
        return config.loadBalancerAvgShedderHitCountHighThreshold
    return config.loadBalancerAvgShedderHitCountLowThreshold


def rails_floor(moves: int, most_from_one: int, hits_needed: int, rails: Rails = DEFAULT_RAILS) -> int:
    """The fewest cycles after a disturbance in which any strategy behind the default rails can balance.

    A strategy debounced like AvgShedder acts on the ``hits_needed``-th consecutive cycle it sees the
    imbalance (the first cycle after the disturbance is the first hit), and the rails let at most 10
    unloads a cycle through and 5 from one broker: ``moves`` unloads, ``most_from_one`` of them from one
    broker, take at least max(⌈moves / 10⌉, ⌈most_from_one / 5⌉) cycles of moves. The sample after the
    last of them is the first that can be balanced: (hits_needed − 1) + rounds cycles after. 0: nothing
    to move.
    """
    if moves <= 0:
        return 0
    rounds = max(
        math.ceil(moves / rails.max_unloads_per_cycle), math.ceil(most_from_one / rails.max_unloads_per_broker)
    )
    return max(hits_needed - 1, 0) + rounds
