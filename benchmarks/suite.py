"""``operator benchmark``: every combination over every scenario, on both cores, into one report.

Runs are independent and seeded, so they go to a process pool and are put back in a fixed order:
the same seed gives the same table whatever finished first.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from pulsar_lb_operator.benchmarks import families
from pulsar_lb_operator.benchmarks import runs as benchmark
from pulsar_lb_operator.benchmarks.runs import BASELINE, Combination, RunResult
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.scenario import Scenario, load_scenario, shipped_scenarios
from pulsar_lb_operator.strategies import UserError

# shipped for scale (benchmarks/scale.py, operator simulate), too large to simulate once per strategy here;
# ``--scenario large-1000`` still runs it
SCALE_SCENARIOS = frozenset({"large-1000"})


class UnknownCombinationError(UserError, ValueError):
    """A --strategy that names no combination."""


def combinations() -> tuple[Combination, ...]:
    return (*benchmark.BUILTIN_COMBINATIONS, *benchmark.OWN_COMBINATIONS)


def pick_combinations(names: Sequence[str]) -> list[Combination]:
    """By label or by shedding strategy name, case-insensitive; the baseline always runs."""
    known = combinations()
    if not names:
        return [BASELINE, *known]
    chosen = [BASELINE]
    for name in names:
        matches = [c for c in known if name.lower() in (c.label.lower(), (c.shedding or "").lower())]
        if not matches:
            labels = ", ".join(c.label for c in known)
            raise UnknownCombinationError(f"unknown strategy combination {name!r} (known: {labels})")
        chosen += [c for c in matches if c not in chosen]
    return chosen


@dataclass(frozen=True)
class Task:
    scenario: Scenario
    combination: Combination
    seed: int
    target: float
    cluster_factory: Callable[[Scenario], SimulatedCluster] = SimulatedCluster


def _run(task: Task) -> RunResult:
    return benchmark.run(task.scenario, task.combination, task.seed, task.target, task.cluster_factory)


def run_all(tasks: Sequence[Task], jobs: int = 2, progress: bool = True) -> list[RunResult]:
    """Big clusters first so the pool stays busy; results in task order. The progress bar goes to stderr."""
    order = sorted(range(len(tasks)), key=lambda i: -len(tasks[i].scenario.brokers))
    results: dict[int, RunResult] = {}
    bar = tqdm(total=len(tasks), desc="benchmark", unit="run", file=sys.stderr, disable=not progress)
    if jobs <= 1:
        for i in order:
            results[i] = _run(tasks[i])
            bar.update()
    else:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for i, result in zip(order, pool.imap(_run, [tasks[i] for i in order])):
                results[i] = result
                bar.update()
    bar.close()
    return [results[i] for i in range(len(tasks))]


def scenario_tasks(
    names: Sequence[str], chosen: Sequence[Combination], seeds: Sequence[int], target: float
) -> tuple[list[Task], dict[str, Scenario]]:
    default = [n for n in shipped_scenarios() if n not in SCALE_SCENARIOS]
    scenarios = {s.name: s for s in (load_scenario(n) for n in (names or default))}
    tasks = [Task(s, c, seed, target) for seed in seeds for s in scenarios.values() for c in chosen]
    return tasks, scenarios


def family_tasks(
    names: Sequence[str],
    chosen: Sequence[Combination],
    runs: Sequence[int],
    target: float,
    sample_noise: bool = True,
    size: families.Size | None = None,
) -> list[Task]:
    """Every run of every family asked for (``families.generate``, ``size`` brokers at the start; default each
    family's own), with every combination; ``sample_noise`` False: with exact CPU samples
    (``families.without_sample_noise``)."""
    scenarios = [families.generate(family, k, size) for family in names for k in runs]
    if not sample_noise:
        scenarios = [families.without_sample_noise(s) for s in scenarios]
    return [Task(s, c, 0, target) for s in scenarios for c in chosen]


def benchmark_command(
    scenarios: Sequence[str],
    strategies: Sequence[str],
    seeds: Sequence[int],
    target: float,
    jobs: int,
    out: Path,
    plots: bool,
    history: str | None,
    command: str,
    stdout: TextIO | None = None,
    family: Sequence[str] = (),
    sample_noise: bool = True,
    size: families.Size | None = None,
) -> int:
    """``family``: generated scenarios of these families instead (``seeds``: the run numbers), judged per
    disturbance (``family_report``); ``sample_noise`` False: with exact CPU samples; ``size``: the fewest and most
    brokers they start with."""
    from pulsar_lb_operator.benchmarks import report

    chosen = pick_combinations(strategies)
    stdout = stdout or sys.stdout
    if family:
        from pulsar_lb_operator.benchmarks import family_report

        names = families.family_names(list(family))
        results = run_all(family_tasks(names, chosen, seeds, target, sample_noise, size), jobs)
        summary = family_report.write_report(results, out, command, names, size)
        print(summary, file=stdout)
        print(f"\nReport: {out / 'report.md'}", file=stdout)
        return 0
    if history:
        from pulsar_lb_operator.benchmarks import replay

        recording = replay.read_recording(history)
        scenario = replay.scenario_of(recording)
        factory = replay.ClusterFactory(recording)
        tasks = [Task(scenario, c, seed, target, factory) for seed in seeds for c in chosen]
        by_name = {scenario.name: scenario}
    else:
        tasks, by_name = scenario_tasks(scenarios, chosen, seeds, target)
    results = run_all(tasks, jobs)
    summary = report.write_report(results, by_name, out, command, plots)
    print(summary, file=stdout)
    print(f"\nReport: {out / 'report.md'}" + (f" (plots in {out / 'plots'})" if plots else ""), file=stdout)
    return 0
