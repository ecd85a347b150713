"""One strategy on one scenario, in simulated time, with every metric of the comparison table.

Each cycle the operator's view (every broker's load report as its REST endpoint answers: the latest
sample, with the last write's ``lastUpdate``) goes to ``plan_cycle`` with the chosen shedding and
placement strategy, decided exactly as Pulsar's leader would decide it, and the plan's unloads and
splits are applied to the simulated cluster behind the operator's rails (by default at most 10 unloads
per cycle and 5 per source broker, only onto active brokers). The operator runs every strategy, Pulsar's
too, from what it reads; Pulsar's own leader would read the reports as last written to the metadata
store, which lag by up to loadBalancerReportUpdateMaxIntervalMinutes. What happened is measured
from the simulator's true state, not from the reports the strategy saw.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pulsar_lb_operator.benchmarks.metrics import FLAP_WINDOW_S, OVERLOAD_PERCENT, RunMetrics, flapping_bundles
from pulsar_lb_operator.benchmarks.warmup import day_of_history_profile
from pulsar_lb_operator.simulator.cluster import SimError, SimulatedCluster
from pulsar_lb_operator.simulator.scenario import Scenario
from pulsar_lb_operator.strategies import (
    DEFAULT_RAILS,
    LoadBalancerConfig,
    LoadProfile,
    Rails,
    Split,
    StrategyState,
    Unload,
    plan_cycle,
)

TARGET_SPREAD = 10.0  # points of usage: "balanced" means max − min below this
COTENANT_BACKGROUND = 0.25  # a broker whose machine gives a quarter of its CPU to other processes
GOAL_CYCLES = 3  # issue 16: balanced within 3 cycles of a disturbance, or as soon as the rails allow
BUILTIN_SWITCHES = ("loadBalancerSheddingEnabled", "loadBalancerAutoBundleSplitEnabled")


@dataclass(frozen=True)
class Combination:
    """A shedding strategy with its placement strategy, as PIP-364's table names them."""

    label: str
    shedding: str | None  # None: no balancing at all (the baseline)
    placement: str | None = None


BUILTIN_COMBINATIONS = (
    Combination("OverloadShedder + LeastLongTermMessageRate", "OverloadShedder", "LeastLongTermMessageRate"),
    Combination("ThresholdShedder + LeastResourceUsageWithWeight", "ThresholdShedder", "LeastResourceUsageWithWeight"),
    Combination("ThresholdShedder + LeastLongTermMessageRate", "ThresholdShedder", "LeastLongTermMessageRate"),
    Combination("UniformLoadShedder + LeastLongTermMessageRate", "UniformLoadShedder", "LeastLongTermMessageRate"),
    Combination("AvgShedder", "AvgShedder", "AvgShedder"),
    Combination("TransferShedder", "TransferShedder", None),
)
OWN_COMBINATIONS = (Combination("PredictivePairingShedder", "PredictivePairingShedder", None),)
BASELINE = Combination("No balancing", None)


@dataclass(frozen=True)
class Move:
    """One unload the cluster carried out, with both brokers' true usage when it was planned."""

    cycle: int
    bundle: str
    source: str
    destination: str
    source_usage: float
    destination_usage: float
    destination_cotenant: bool
    msg_rate: float
    topics: int

    @property
    def wrong_direction(self) -> bool:
        return self.destination_usage >= self.source_usage


@dataclass
class RunResult:
    scenario: str
    combination: str
    seed: int
    interval_s: float
    brokers: dict[str, bool]  # name → co-tenanted
    times: list[float] = field(default_factory=list)
    usage: list[dict[str, float]] = field(default_factory=list)  # per sample: broker name → true usage %
    moves: list[Move] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "moves": [asdict(m) for m in self.moves]}


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
    """At least this many unloads bring every broker within ±target/2 of the mean, and at least this many
    of them leave one broker (the busiest giver's share).

    The mean is over the brokers that can take load. Each broker above the band must give away its
    largest bundles until under it; each broker below it must receive at least (gap / largest
    bundle) of them; and together the brokers below it must receive at least their total gap, which
    takes at least as many moves as the fewest of the cluster's largest bundles (of brokers not below
    the band) that add up to it: only one bundle, not the largest every time, arrives per move. One
    move serves one of each, so the bound is the largest of the three. As before, a bundle is counted
    at what it costs its owner.
    """
    usage = {b.name: cluster.true_usage(b.id) for b in cluster.alive_brokers()}
    if len(usage) < 2:
        return 0, 0
    background = {b.name: b.spec.background_cpu * 100 for b in cluster.alive_brokers()}
    takers, mean = balanceable_mean(usage, background)
    contributions = bundle_contributions(cluster)
    largest = max((c for per in contributions.values() for c in per.values()), default=0.0)
    give = take = most = 0
    deficit = sum(max(mean - target / 2 - usage[name], 0.0) for name in takers)
    sizes = sorted(
        (c for n, per in contributions.items() if usage[n] >= mean - target / 2 for c in per.values()), reverse=True
    )
    volume = next((k for k, total in enumerate(itertools.accumulate(sizes), 1) if total >= deficit), len(sizes))
    volume = volume if deficit > 0 else 0
    for name, value in usage.items():
        if value > mean + target / 2:
            excess = value - (mean + target / 2)
            given = 0
            for size in sorted(contributions[name].values(), reverse=True):
                if excess <= 0:
                    break
                excess -= size
                given += 1
            give += given
            most = max(most, given)
        elif value < mean - target / 2 and name in takers and largest > 0:
            take += math.ceil((mean - target / 2 - value) / largest)
    return max(give, take, volume), most


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


def run(
    scenario: Scenario,
    combination: Combination,
    seed: int = 0,
    target: float = TARGET_SPREAD,
    cluster_factory: Callable[[Scenario], SimulatedCluster] = SimulatedCluster,
    profile: LoadProfile | None = None,
    rails: Rails = DEFAULT_RAILS,
) -> RunResult:
    """``profile``: the load profile the strategies see (default: one fitted from a day of history).
    ``rails``: the caps the plan is applied behind, as the operator's executor would (its defaults).

    ``seed`` seeds the strategies' RNG and shifts the scenario's own seed (its traffic draws, initial owners
    and report noise) by as much: seed 0 is the scenario as written, other seeds are variations of it.
    """
    if seed:
        scenario = dataclasses.replace(scenario, seed=scenario.seed + seed)
    if profile is None:
        profile = day_of_history_profile(scenario, cluster_factory)
    cluster = cluster_factory(scenario)
    # the scenario's switches turn the simulated brokers' own balancer off; the operator's splits stay on
    config = LoadBalancerConfig().replace({k: v for k, v in scenario.config.items() if k not in BUILTIN_SWITCHES})
    interval_s = config.loadBalancerSheddingIntervalMinutes * 60
    rng = random.Random(seed)
    state = StrategyState()
    metrics = RunMetrics()
    errors: list[float] = []
    result = RunResult(
        scenario.name,
        combination.label,
        seed,
        interval_s,
        {s.name: s.background_cpu >= COTENANT_BACKGROUND for s in _all_specs(scenario)},
    )
    background = {s.name: s.background_cpu * 100 for s in _all_specs(scenario)}
    names = {b.id: b.name for b in cluster.brokers.values()}
    initial_bound, initial_most = balance_needs(cluster, target)
    disturbance = {"sample": 0, "moves": initial_bound, "most_from_one": initial_most}
    metrics.record(cluster)
    event_samples: set[int] = set()  # samples taken after a scenario event: a drop there is not the strategy's
    cycle = 0
    while cluster.now_s < scenario.duration_s - 1e-9:
        cycle += 1
        before = metrics.samples[-1].usage
        if combination.shedding is not None:
            view = cluster.operator_view()  # what the operator's collector reads (REST), for every strategy
            plan, state = plan_cycle(
                view, config, state, rng, combination.shedding, combination.placement, profile=profile, rails=rails
            )
            errors += state.prediction_errors.values()
            names.update({b.id: b.name for b in cluster.brokers.values()})
            moved = _apply(cluster, plan.actions, cycle, before, result.brokers, names, rails)
            state = state.forget_unloads({u.bundle for u in plan.unloads} - {m.bundle for m in moved})
            result.moves += moved
        pending_events = list(cluster.events)
        cluster.advance(interval_s)
        names.update({b.id: b.name for b in cluster.brokers.values()})
        metrics.record(cluster)
        if cluster.events != pending_events:  # a scenario event (a restart, a broker added…) happened
            event_samples.add(len(metrics.samples) - 1)
            moves, most = balance_needs(cluster, target)
            disturbance = {"sample": len(metrics.samples) - 1, "moves": moves, "most_from_one": most}
    result.times = [s.time_s for s in metrics.samples]
    result.usage = [dict(s.usage) for s in metrics.samples]
    result.metrics = _metrics(result, metrics, cluster, background, target, initial_bound)
    result.metrics["overunloaded_sources"] = overunloaded_sources(result, target, event_samples, background)
    result.metrics.update(_after_disturbance(result, background, target, disturbance, config, rails))
    result.metrics["prediction_error"] = round(sum(map(abs, errors)) / len(errors), 2) if errors else None
    return result


def _all_specs(scenario: Scenario) -> list[Any]:
    return [*scenario.brokers, *(e.spec for e in scenario.events if e.spec is not None)]


def _apply(
    cluster: SimulatedCluster,
    actions: tuple,
    cycle: int,
    usage: dict[str, float],
    cotenant: dict[str, bool],
    names: dict[str, str],
    rails: Rails,
) -> list[Move]:
    moves: list[Move] = []
    per_broker: dict[str, int] = {}
    sent = 0  # as the executor counts: a split is one of the cycle's actions under the caps too
    for action in actions:
        if sent >= rails.max_unloads_per_cycle or per_broker.get(action.source, 0) >= rails.max_unloads_per_broker:
            continue
        if isinstance(action, Split):
            with contextlib.suppress(SimError):  # the bundle changed since the report: the executor skips it too
                cluster.split(action.bundle, action.algorithm, list(action.boundaries) or None, action.unload)
                sent += 1
                per_broker[action.source] = per_broker.get(action.source, 0) + 1
            continue
        if not isinstance(action, Unload) or action.destination is None or action.destination == action.source:
            continue
        if action.destination not in cluster.active_ids() or cluster.owner_of(action.bundle) != action.source:
            continue
        stats = cluster.bundle_stats(action.bundle)[0]
        try:
            cluster.unload(action.bundle, action.destination)
        except SimError:
            continue
        sent += 1
        per_broker[action.source] = per_broker.get(action.source, 0) + 1
        source, destination = names[action.source], names[action.destination]
        moves.append(
            Move(
                cycle,
                action.bundle,
                source,
                destination,
                usage.get(source, 0.0),
                usage.get(destination, 0.0),
                cotenant.get(destination, False),
                round(stats.msg_rate, 3),
                stats.topics,
            )
        )
    return moves


def overunloaded_sources(
    result: RunResult, target: float, event_samples: set[int], background: dict[str, float] | None = None
) -> int:
    """PIP-364's over unloading: "the load offloaded from high load brokers is too much and make them
    underloaded". Per cycle, the brokers that gave load and were left below the balanced band (more than
    target/2 under the mean of the brokers that can take load, as ``balance_needs`` has it) in the sample after
    it; a sample right after a scenario event (a restart empties a broker) is not counted."""
    sources: dict[int, set[str]] = {}
    for move in result.moves:
        sources.setdefault(move.cycle, set()).add(move.source)
    count = 0
    for cycle, names in sources.items():
        if cycle in event_samples:
            continue
        after = result.usage[cycle]
        takers, mean = balanceable_mean(after, background or {})
        if not takers:
            continue
        count += sum(1 for n in names if n in after and after[n] < mean - target / 2)
    return count


def flapping(moves: list[Move], interval_s: float, window_s: float = FLAP_WINDOW_S) -> int:
    """Bundles the strategy moved more than once within ``window_s`` (restarts' moves do not count)."""
    return flapping_bundles(((m.bundle, m.cycle * interval_s) for m in moves), window_s)


def _after_disturbance(
    result: RunResult,
    background: dict[str, float],
    target: float,
    disturbance: dict[str, int],
    config: LoadBalancerConfig,
    rails: Rails,
) -> dict[str, Any]:
    """Issue 16's measure: cycles from the last disturbance (the start, or the last scenario event) until the
    spread stays under target, against ``GOAL_CYCLES`` or, when the rails allow no less, their floor."""
    start = disturbance["sample"]
    spreads = [balanceable_spread(u, background) for u in result.usage[start:]]
    converged = next((k for k in range(len(spreads)) if all(s < target for s in spreads[k:])), None)
    floor = rails_floor(
        disturbance["moves"], disturbance["most_from_one"], hits_to_act(result.usage[start], background, config), rails
    )
    allowed = max(GOAL_CYCLES, floor)
    return {
        "disturbance_cycle": start,
        "moves_at_disturbance": disturbance["moves"],
        "cycles_after_disturbance": converged,
        "rails_floor_cycles": floor,
        "balanced_in_time": converged is not None and converged <= allowed,
    }


def _metrics(
    result: RunResult,
    metrics: RunMetrics,
    cluster: SimulatedCluster,
    background: dict[str, float],
    target: float,
    initial_bound: int,
) -> dict[str, Any]:
    spreads = [balanceable_spread(u, background) for u in result.usage]
    converged = next((k for k in range(len(spreads)) if all(s < target for s in spreads[k:])), None)
    destinations: dict[int, set[str]] = {}
    for move in result.moves:
        destinations.setdefault(move.cycle, set()).add(move.destination)
    overplaced = 0
    for cycle, names in destinations.items():
        after = result.usage[cycle]
        mean = sum(after.values()) / len(after)
        overplaced += sum(1 for n in names if after.get(n, 0.0) > mean + target)
    last = metrics.samples[-1]
    hours = max(result.times[-1] / 3600, 1e-9)
    return {
        "cycles": len(result.usage) - 1,
        "cycles_to_balance": converged,
        "initial_spread": round(spreads[0], 2),
        "final_spread": round(spreads[-1], 2),
        "final_std": round(last.std, 2),
        "unloads": len(result.moves),
        "unloads_per_hour": round(len(result.moves) / hours, 2),
        "topics_disconnected": sum(m.topics for m in result.moves),
        "moves_lower_bound": initial_bound,
        "moves_still_needed": moves_lower_bound(cluster, target),
        "flapping_bundles": flapping(result.moves, result.interval_s),
        "broker_cycles_over_85": metrics.broker_cycles_overloaded(),
        "wrong_direction_moves": sum(1 for m in result.moves if m.wrong_direction),
        "overplaced_destinations": overplaced,
        "cotenant_moves": sum(1 for m in result.moves if m.destination_cotenant),
        "cotenant_msg_rate": round(sum(m.msg_rate for m in result.moves if m.destination_cotenant), 1),
        "overload_percent": OVERLOAD_PERCENT,
        "target_spread": target,
    }
