"""What any strategy needs to balance a simulated cluster: the band, the fewest moves, the rails' floor of cycles.

The benchmark judges a strategy against these, not against another strategy: the lower bound of unloads
(``balance_needs``) and the fewest cycles the hit counters and the rails allow (``rails_floor``). They read the
simulator's true state, which no strategy sees.

Brokers differ (cores, NIC, per-message costs), so "balanced" is every broker that can take load within
±target/2 of the **balanced level**: the usage they would all have if their traffic were spread so as to equalise
it (``balanced_level``). Moving load onto a broker with twice the cores lowers the mean, and a bundle counts on
each broker at what it costs there: on its owner, what leaving takes off; on a broker below the band, what
arriving adds. On alike brokers the balanced level is their mean usage and both costs are the same.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.model import Broker
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.rails import DEFAULT_RAILS, Rails
from pulsar_lb_operator.strategies.snapshots import BundleStats

TARGET_SPREAD = 10.0  # points of usage: "balanced" means max − min below this
GOAL_CYCLES = 3  # issue 16: balanced within 3 cycles of a disturbance, or as soon as the rails allow
RESOURCES = ("cpu", "bandwidthIn", "bandwidthOut")  # what the simulator's weighted usage is the max of
UNITS = (BundleStats(msgRateIn=1.0), BundleStats(msgThroughputIn=1.0), BundleStats(msgThroughputOut=1.0))


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


def balanceable_spread(usage: dict[str, float], background: dict[str, float]) -> float:
    values = [usage[name] for name in balanceable(usage, background)]
    return max(values) - min(values) if values else 0.0


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


def bundle_contributions(cluster: SimulatedCluster) -> dict[str, dict[str, float]]:
    """Per live broker: each owned bundle's share of its true usage (usage with − usage without)."""
    out: dict[str, dict[str, float]] = {}
    for broker in cluster.alive_brokers():
        owned = cluster.owned_by(broker.id)
        stats = {b: cluster.bundle_stats(b)[0] for b in owned}
        full = cluster.weighted_usage(broker, stats)
        out[broker.name] = {
            b: full - cluster.weighted_usage(broker, {k: v for k, v in stats.items() if k != b}) for b in owned
        }
    return out


def balance_needs(cluster: SimulatedCluster, target: float = TARGET_SPREAD) -> tuple[int, int]:
    """At least this many unloads bring every broker that can take load within ±target/2 of the balanced level,
    and at least this many of them leave one broker (the busiest giver's share).

    Each broker above the band must give away its largest bundles (at what each costs it) until under it; each
    broker below it must receive at least the fewest bundles whose costs there add up to its gap; and together the
    brokers below it must receive at least their total gap, which takes at least as many moves as the fewest
    bundles (of brokers not below the band, each at the most it costs on any of them) that add up to it: one bundle
    arrives per move. One move serves one of each, so the bound is the largest of the three. A bundle's cost on a
    broker it arrives on is the most it adds to any one resource there, which is never less than what it adds to
    the broker's weighted usage.
    """
    alive = cluster.alive_brokers()
    usage = {b.name: cluster.true_usage(b.id) for b in alive}
    if len(usage) < 2:
        return 0, 0
    background = {b.name: b.spec.background_cpu * 100 for b in alive}
    takers = set(balanceable(usage, background))
    stats = {b.name: {bundle: cluster.bundle_stats(bundle)[0] for bundle in cluster.owned_by(b.id)} for b in alive}
    lines = {b.name: linear_usage(cluster, b) for b in alive}
    traffic = {n: np.array([s.traffic for s in per.values()]).reshape(-1, 3) for n, per in stats.items()}
    held = sum((traffic[n].sum(axis=0) for n in takers), np.zeros(3))
    level = balanced_level([lines[n] for n in sorted(takers)], held) if held.any() else _mean(usage, takers)
    low, high = level - target / 2, level + target / 2
    contributions = bundle_contributions(cluster)
    give = most = 0
    for name, value in usage.items():
        if value > high:
            excess, given = value - high, 0
            for size in sorted(contributions[name].values(), reverse=True):
                if excess <= 0:
                    break
                excess -= size
                given += 1
            give += given
            most = max(most, given)
    short = sorted(n for n in takers if usage[n] < low)
    if not short:
        return give, most
    movable = np.concatenate([traffic[n] for n in sorted(usage) if usage[n] >= low] or [np.zeros((0, 3))])
    # what each movable bundle adds on each broker below the band: the most it adds to one resource there
    rise = np.array([(lines[n][1] @ movable.T).max(axis=0) for n in short]).reshape(len(short), -1)
    take = 0
    for row, name in enumerate(short):
        take += _fewest_reaching(rise[row], low - usage[name])
    deficit = sum(low - usage[n] for n in short)
    volume = _fewest_reaching(rise.max(axis=0), deficit)
    return max(give, take, volume), most


def _mean(usage: dict[str, float], names: set[str]) -> float:
    return sum(usage[n] for n in names) / len(names)


def _fewest_reaching(sizes: np.ndarray, total: float) -> int:
    """The fewest of ``sizes`` (the largest first) that add up to ``total``; all of them when they do not."""
    ordered = sorted((float(s) for s in sizes), reverse=True)
    return next((k for k, acc in enumerate(itertools.accumulate(ordered), 1) if acc >= total), len(ordered))


def moves_lower_bound(cluster: SimulatedCluster, target: float = TARGET_SPREAD) -> int:
    """``balance_needs``' count of unloads."""
    return balance_needs(cluster, target)[0]


def hits_to_act(usage: dict[str, float], background: dict[str, float], config: LoadBalancerConfig) -> int:
    """How many consecutive cycles the default hit counters make a strategy debounced like AvgShedder see this
    imbalance before it acts: loadBalancerAvgShedderHitCountHighThreshold (2) when a broker that can take load
    is at least half of loadBalancerAvgShedderHighThreshold (40 points between a pair: 20) from their mean,
    loadBalancerAvgShedderHitCountLowThreshold (8) below that. AvgShedder's own pair rule (the hottest and
    coolest broker more than 40 points apart) never asks for fewer: such a pair has a broker 20 from the mean."""
    takers, mean = balanceable_mean(usage, background)
    if not takers:
        return config.loadBalancerAvgShedderHitCountHighThreshold
    far = max(abs(usage[n] - mean) for n in takers)
    if far >= config.loadBalancerAvgShedderHighThreshold / 2:
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
