"""One strategy on one scenario, in simulated time, with every metric of the comparison table.

Each cycle the operator's view (every broker's load report as its REST endpoint answers: the latest
sample, with the last write's ``lastUpdate``) goes to ``plan_cycle`` with the chosen shedding and
placement strategy, decided exactly as Pulsar's leader would decide it, and the plan's unloads and
splits are applied to the simulated cluster behind the operator's rails (by default at most 10 unloads
per cycle and 5 per source broker, only onto active brokers; on a Pulsar before 4.0.10, one unload per bundle range
a cycle, as the executor defers the others). The operator runs every strategy, Pulsar's
too, from what it reads; Pulsar's own leader would read the reports as last written to the metadata
store, which lag by up to loadBalancerReportUpdateMaxIntervalMinutes. What happened is measured
from the simulator's true state, not from the reports the strategy saw.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pulsar_lb_operator.benchmarks import disturbances
from pulsar_lb_operator.benchmarks.bounds import (
    GOAL_CYCLES,
    TARGET_SPREAD,
    balance_needs,
    balanceable_mean,
    balanceable_spread,
    held_blocks,
    moves_lower_bound,
    pooled,
    pools_of,
    reading_noise,
)
from pulsar_lb_operator.benchmarks.metrics import (
    FLAP_WINDOW_S,
    OVERLOAD_PERCENT,
    RunMetrics,
    broker_usage,
    flapping_bundles,
)
from pulsar_lb_operator.benchmarks.warmup import day_of_history_profile
from pulsar_lb_operator.benchmarks.whole_fill import fewest_whole_fill
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
from pulsar_lb_operator.strategies import bundles as bundle_names

COTENANT_BACKGROUND = 0.25  # a broker whose machine gives a quarter of its CPU to other processes
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
    # per sample: broker name → the CPU points other processes on its machine use (a noisy neighbour changes it)
    background: list[dict[str, float]] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    pools: dict[str, str] = field(default_factory=dict)  # broker name → its pool (``bounds.pools_of``); {}: one

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "moves": [asdict(m) for m in self.moves]}


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
        pools=pools_of(scenario),
    )
    names = {b.id: b.name for b in cluster.brokers.values()}
    report_lag = math.ceil(scenario.report_interval_s / interval_s)

    grace_cycles = math.ceil(config.grace_period_ms / 1000 / interval_s)  # a move of cycle c is free at c + this

    def free_at() -> dict[str, int]:
        """Each bundle moved so far: the first cycle at which a shedder may unload it again (its latest move's)."""
        return {m.bundle: m.cycle + grace_cycles for m in result.moves}

    def held() -> frozenset[str]:
        """The bundles no shedder may unload at the next cycle: unloaded within the grace period before its
        snapshot (a move of cycle c was made on the snapshot taken (c − 1) intervals in)."""
        return frozenset(b for b, free in free_at().items() if cycle + 1 < free)

    def released() -> int:
        return disturbances.hold_release(
            free_at(), cycle + 1, lambda bundles: _unperturbed(cluster, held_blocks, target, bundles, result.pools)
        )

    tracker = disturbances.Tracker(
        lambda: _unperturbed(cluster, balance_needs, target, held(), result.pools),
        config,
        target,
        report_lag,
        released,
        result.pools,
        lambda: _unperturbed(cluster, reading_noise),
        lambda: _unperturbed(cluster, fewest_whole_fill, target, held(), result.pools),
    )
    event_samples: set[int] = set()  # samples taken after a scenario event: a drop there is not the strategy's
    cycle = 0
    _record(cluster, metrics, result, tracker, events=())
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
            moved = _apply(cluster, plan.actions, cycle, before, names, rails)
            state = state.forget_unloads({u.bundle for u in plan.unloads} - {m.bundle for m in moved})
            result.moves += moved
        pending_events = list(cluster.events)
        cluster.advance(interval_s)
        names.update({b.id: b.name for b in cluster.brokers.values()})
        # the scenario events that happened (a restart, a broker added…): those no longer waiting
        happened = [e.type for e in pending_events if not any(e is left for left in cluster.events)]
        _record(cluster, metrics, result, tracker, happened)
        if happened:
            event_samples.add(len(metrics.samples) - 1)
    result.times = [s.time_s for s in metrics.samples]
    result.metrics = _metrics(result, metrics, cluster, target, tracker.found[0].moves)
    result.metrics["overunloaded_sources"] = overunloaded_sources(result, target, event_samples)
    last = next(d for d in reversed(tracker.found) if d.kind != "excursion")
    result.metrics.update(_after_disturbance(result, target, last, rails))
    parts = disturbances.segments(tracker.found, tracker.spreads, [m.cycle for m in result.moves], target, rails)
    result.metrics["segments"] = [dataclasses.asdict(p) for p in parts]
    result.metrics["prediction_error"] = round(sum(map(abs, errors)) / len(errors), 2) if errors else None
    return result


def _unperturbed(cluster: SimulatedCluster, measure: Callable[..., Any], *args: Any) -> Any:
    """``measure(cluster, *args)`` on the cluster's steady traffic (``SimulatedCluster.steady``: a jittering topic at
    its mean rate, not at a draw no strategy saw), leaving the run as it would be without it: a judge's reading must
    not change the draws the run makes."""
    noise = cluster.noise.getstate()
    try:
        with cluster.lock, cluster.steady():
            return measure(cluster, *args)
    finally:
        cluster.noise.setstate(noise)


def _record(
    cluster: SimulatedCluster,
    metrics: RunMetrics,
    result: RunResult,
    tracker: disturbances.Tracker,
    events: Sequence[str],
) -> None:
    """One sample of the cluster's true state: usage, what other processes use on each machine, disturbances."""
    sample = metrics.record(cluster)
    background = {b.name: b.spec.background_cpu * 100 for b in cluster.alive_brokers()}
    result.usage.append(dict(sample.usage))
    result.background.append(background)
    tracker.observe(_unperturbed(cluster, broker_usage), background, events, settled=not cluster.pending_lookups)


def _all_specs(scenario: Scenario) -> list[Any]:
    return [*scenario.brokers, *(e.spec for e in scenario.events if e.spec is not None)]


def _apply(
    cluster: SimulatedCluster,
    actions: tuple,
    cycle: int,
    usage: dict[str, float],
    names: dict[str, str],
    rails: Rails,
) -> list[Move]:
    moves: list[Move] = []
    per_broker: dict[str, int] = {}
    sent = 0  # as the executor counts: a split is one of the cycle's actions under the caps too
    # a Pulsar before 4.0.10 keeps one destination per bundle range: the executor defers an unload whose range another
    # namespace's unload, sent and not yet verified, has (operator/act/executor.py); a cycle's moves settle by the next
    by_range = bundle_names.destination_keyed_by_range(cluster.scenario.broker_version)
    ranges: set[bundle_names.BundleRange] = set()
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
        _, bundle_range = bundle_names.split_bundle_name(action.bundle)
        if by_range and bundle_range in ranges:
            continue
        stats = cluster.bundle_stats(action.bundle)[0]
        try:
            cluster.unload(action.bundle, action.destination)
        except SimError:
            continue
        sent += 1
        per_broker[action.source] = per_broker.get(action.source, 0) + 1
        ranges.add(bundle_range)
        source, destination = names[action.source], names[action.destination]
        moves.append(
            Move(
                cycle,
                action.bundle,
                source,
                destination,
                usage.get(source, 0.0),
                usage.get(destination, 0.0),
                cluster.brokers[action.destination].spec.background_cpu >= COTENANT_BACKGROUND,
                round(stats.msg_rate, 3),
                stats.topics,
            )
        )
    return moves


def overunloaded_sources(result: RunResult, target: float, event_samples: set[int]) -> int:
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
        for group in pooled(after, result.pools):
            takers, mean = balanceable_mean(group, _background_at(result, cycle))
            if takers:
                count += sum(1 for n in names if n in group and group[n] < mean - target / 2)
    return count


def flapping(moves: list[Move], interval_s: float, window_s: float = FLAP_WINDOW_S) -> int:
    """Bundles the strategy moved more than once within ``window_s`` (restarts' moves do not count)."""
    return flapping_bundles(((m.bundle, m.cycle * interval_s) for m in moves), window_s)


def _background_at(result: RunResult, sample: int) -> dict[str, float]:
    return result.background[sample] if sample < len(result.background) else {}


def _spreads(result: RunResult, start: int = 0) -> list[float]:
    return [
        balanceable_spread(u, _background_at(result, k), result.pools) for k, u in enumerate(result.usage) if k >= start
    ]


def _after_disturbance(
    result: RunResult, target: float, disturbance: disturbances.Disturbance, rails: Rails
) -> dict[str, Any]:
    """Issue 16's measure: cycles from the last disturbance (the start, or the last scenario event) until the
    spread stays under target, against ``GOAL_CYCLES`` or, when the rails allow no less, their floor."""
    start = disturbance.sample
    spreads = _spreads(result, start)
    converged = next((k for k in range(len(spreads)) if all(s < target for s in spreads[k:])), None)
    floor = disturbances.floor_of(disturbance, rails)
    allowed = max(GOAL_CYCLES, floor)
    return {
        "disturbance_cycle": start,
        "moves_at_disturbance": disturbance.moves,
        "cycles_after_disturbance": converged,
        "rails_floor_cycles": floor,
        "balanced_in_time": converged is not None and converged <= allowed,
    }


def _metrics(
    result: RunResult,
    metrics: RunMetrics,
    cluster: SimulatedCluster,
    target: float,
    initial_bound: int,
) -> dict[str, Any]:
    spreads = _spreads(result)
    converged = next((k for k in range(len(spreads)) if all(s < target for s in spreads[k:])), None)
    destinations: dict[int, set[str]] = {}
    for move in result.moves:
        destinations.setdefault(move.cycle, set()).add(move.destination)
    overplaced = 0
    for cycle, names in destinations.items():
        for group in pooled(result.usage[cycle], result.pools):
            mean = sum(group.values()) / len(group)
            overplaced += sum(1 for n in names if group.get(n, 0.0) > mean + target)
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
        "moves_still_needed": _unperturbed(cluster, moves_lower_bound, target, result.pools),
        "flapping_bundles": flapping(result.moves, result.interval_s),
        "broker_cycles_over_85": metrics.broker_cycles_overloaded(),
        "wrong_direction_moves": sum(1 for m in result.moves if m.wrong_direction),
        "overplaced_destinations": overplaced,
        "cotenant_moves": sum(1 for m in result.moves if m.destination_cotenant),
        "cotenant_msg_rate": round(sum(m.msg_rate for m in result.moves if m.destination_cotenant), 1),
        "overload_percent": OVERLOAD_PERCENT,
        "target_spread": target,
    }
