"""PIP-364's comparison table, measured: verdicts from documented cut-offs, per-scenario tables, plots.

Each of PIP-364's five columns is backed by one metric over the scenarios that exercise it; the
cut-offs are in ``CUTOFFS`` and printed in every report.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsar_lb_operator.benchmarks.bounds import GOAL_CYCLES
from pulsar_lb_operator.benchmarks.runs import BASELINE, BUILTIN_COMBINATIONS, COTENANT_BACKGROUND, RunResult
from pulsar_lb_operator.simulator.scenario import Scenario

COLUMNS = ("Heterogeneous environment", "Load jitter", "Over placement", "Over unloading", "Slow load balancing")
CUTOFFS = (  # column, metric, scenarios, good, normal (bad: anything else); each seed judged on its own
    (
        COLUMNS[0],
        "moves onto a co-tenanted broker; whether the others end balanced",
        "with a co-tenanted broker",
        "no such move, balanced",
        "no such move",
    ),
    (
        COLUMNS[1],
        "unloads per hour; bundles moved twice within 30 min; unloads under pure jitter",
        "traffic that jitters or bursts (flapping: all; pure jitter: jitter only, no events)",
        "≤ 2/h, no flapping, none under pure jitter",
        "≤ 10/h and ≤ 2 flapping",
    ),
    (
        COLUMNS[2],
        "destinations left above mean + target, plus moves onto a broker already above the source",
        "all",
        "0",
        "≤ 3",
    ),
    (
        COLUMNS[3],
        "unloads ÷ the lower bound of moves (a run with events: the sum of the bounds at its start and each "
        "event): the worst scenario, and all summed; sources left "
        "underloaded (PIP-364's definition): more than half the target below the mean after their cycle",
        "the ratio: all with an imbalance to fix (not jittery); underloaded sources: all but jittery ones",
        "worst ≤ 1.25×, none left underloaded",
        "summed ≤ 2.5×, ≤ 3 left underloaded",
    ),
    (
        COLUMNS[4],
        "cycles from the disturbance (the start, or the last event) until the spread stays under target, "
        f"against {GOAL_CYCLES} or the rails' floor when that is higher",
        "all with an imbalance to fix (not jittery)",
        f"every one within max({GOAL_CYCLES}, floor)",
        "at least half balanced",
    ),
)
BUILTIN_LABELS = frozenset(c.label for c in BUILTIN_COMBINATIONS)
JITTERY_PATTERNS = ("jitter", "burst", "daily")
JITTERY_BROKER = 0.05  # relative noise on CPU samples from which a scenario counts as jittery


@dataclass(frozen=True)
class Cell:
    verdict: str  # good | normal | bad | n/a
    figure: str

    def __str__(self) -> str:
        return f"{self.verdict} ({self.figure})" if self.verdict != "n/a" else "n/a"


def is_heterogeneous(scenario: Scenario) -> bool:
    return any(b.background_cpu >= COTENANT_BACKGROUND for b in scenario.brokers)


def is_jittery(scenario: Scenario) -> bool:
    return any(ns.pattern.kind in JITTERY_PATTERNS for ns in scenario.namespaces) or any(
        b.jitter >= JITTERY_BROKER for b in scenario.brokers
    )


def is_pure_jitter(scenario: Scenario) -> bool:
    """Noise and nothing else: no bursts or daily curves, no events. Nothing there needs moving."""
    return (
        is_jittery(scenario)
        and not scenario.events
        and all(ns.pattern.kind in ("jitter", "constant") for ns in scenario.namespaces)
    )


RunKey = tuple[str, int]  # scenario, seed


def lower_bounds(results: Iterable[RunResult]) -> dict[RunKey, int]:
    """Per scenario and seed: the moves needed at the start, or after its events with no balancing, whichever
    is more."""
    bounds: dict[RunKey, int] = {}
    for r in results:
        needed = r.metrics["moves_lower_bound"]
        if r.combination == BASELINE.label:
            needed = max(needed, r.metrics["moves_still_needed"])
        key = (r.scenario, r.seed)
        bounds[key] = max(bounds.get(key, 0), needed)
    return bounds


def run_bound(run: RunResult, bounds: dict[RunKey, int]) -> int:
    """The lower bound of moves ``run`` is judged against: its scenario's (``lower_bounds``), or, where the run had
    scenario events, the sum of the bounds at its start and at each event, as the run itself met them — each
    restart or join asks for moves of its own (a restarted broker comes back empty and is refilled), as the
    scenario families judge each disturbance. Excursions are left out: an excursion's bound is the most the drift
    needed while it lasted, which grows the longer a strategy leaves it, so summing it would reward waiting."""
    at_events = sum(s["moves"] for s in run.metrics.get("segments", ()) if s["kind"] != "excursion")
    return max(bounds[(run.scenario, run.seed)], at_events)


def needs_moves(run: RunResult, bounds: dict[RunKey, int], scenarios: dict[str, Scenario]) -> bool:
    """A scenario with an imbalance to fix; in a jittery one the "imbalance" is noise and is not judged."""
    return bounds[(run.scenario, run.seed)] > 0 and not is_jittery(scenarios[run.scenario])


RANK = {"good": 0, "normal": 1, "bad": 2, "n/a": -1}


def seed_verdicts(
    results: Sequence[RunResult], scenarios: dict[str, Scenario]
) -> dict[str, dict[int, dict[str, Cell]]]:
    """combination → seed → column → cell, for every combination but the baseline."""
    bounds = lower_bounds(results)
    groups: dict[str, dict[int, list[RunResult]]] = {}
    for r in results:
        if r.combination != BASELINE.label:
            groups.setdefault(r.combination, {}).setdefault(r.seed, []).append(r)
    out: dict[str, dict[int, dict[str, Cell]]] = {}
    for label, by_seed in groups.items():
        out[label] = {}
        for seed, runs in sorted(by_seed.items()):
            judged = [r for r in runs if needs_moves(r, bounds, scenarios)]
            out[label][seed] = {
                COLUMNS[0]: _heterogeneous([r for r in runs if is_heterogeneous(scenarios[r.scenario])]),
                COLUMNS[1]: _jitter(
                    [r for r in runs if is_jittery(scenarios[r.scenario])],
                    runs,
                    [r for r in runs if is_pure_jitter(scenarios[r.scenario])],
                ),
                COLUMNS[2]: _over_placement(runs),
                COLUMNS[3]: _over_unloading(judged, [r for r in runs if not is_jittery(scenarios[r.scenario])], bounds),
                COLUMNS[4]: _slow(judged),
            }
    return out


def verdicts(results: Sequence[RunResult], scenarios: dict[str, Scenario]) -> dict[str, dict[str, Cell]]:
    """combination → column → the worst seed's cell (with how many seeds were judged)."""
    out: dict[str, dict[str, Cell]] = {}
    for label, by_seed in seed_verdicts(results, scenarios).items():
        out[label] = {}
        for column in COLUMNS:
            cells = [by_seed[seed][column] for seed in sorted(by_seed)]
            worst = max(cells, key=lambda c: RANK[c.verdict])  # the first of the worst: lowest seed
            if len(cells) > 1 and worst.verdict != "n/a":
                good = sum(1 for c in cells if c.verdict == "good")
                worst = Cell(worst.verdict, f"{worst.figure}; worst of {len(cells)} seeds, {good} good")
            out[label][column] = worst
    return out


def strictly_better(cells: dict[str, dict[str, Cell]], ours: str, others: Sequence[str]) -> list[str]:
    """The columns where ``ours`` has a better verdict than every one of ``others``."""
    return [
        column
        for column in COLUMNS
        if cells[ours][column].verdict != "n/a"
        and all(RANK[cells[ours][column].verdict] < RANK[cells[o][column].verdict] for o in others)
    ]


def goals(results: Sequence[RunResult], scenarios: dict[str, Scenario]) -> dict[str, list[Any]]:
    """Issue 16's decision-quality goals, per combination over every seed: [balanced in time (k/n), unloads under
    pure jitter, bundles moved twice within 30 min, the worst unloads ÷ lower bound (and where)]."""
    bounds = lower_bounds(results)
    out: dict[str, list[Any]] = {}
    for label in dict.fromkeys(r.combination for r in results if r.combination != BASELINE.label):
        runs = [r for r in results if r.combination == label]
        judged = [r for r in runs if needs_moves(r, bounds, scenarios)]
        in_time = sum(1 for r in judged if r.metrics["balanced_in_time"])
        late = sorted({r.scenario for r in judged if not r.metrics["balanced_in_time"]})
        pure = sum(r.metrics["unloads"] for r in runs if is_pure_jitter(scenarios[r.scenario]))
        flapping = sum(r.metrics["flapping_bundles"] for r in runs)
        ratios = [(r.metrics["unloads"] / run_bound(r, bounds), r.scenario, r.seed) for r in judged]
        worst = max(ratios, default=None)
        out[label] = [
            f"{in_time}/{len(judged)}" + (f" (late: {', '.join(late)})" if late else ""),
            pure,
            flapping,
            f"{worst[0]:.2f}× ({worst[1]}, seed {worst[2]})" if worst else "–",
        ]
    return out


def _heterogeneous(runs: list[RunResult]) -> Cell:
    if not runs:
        return Cell("n/a", "")
    cotenant = sum(r.metrics["cotenant_moves"] for r in runs)
    spread = max(r.metrics["final_spread"] for r in runs)
    figure = f"{cotenant} onto co-tenant, spread {spread:.0f}"
    if cotenant:
        return Cell("bad", figure)
    return Cell("good" if all(r.metrics["cycles_to_balance"] is not None for r in runs) else "normal", figure)


def _jitter(jittery: list[RunResult], runs: list[RunResult], pure: list[RunResult]) -> Cell:
    if not jittery:
        return Cell("n/a", "")
    per_hour = max(r.metrics["unloads_per_hour"] for r in jittery)
    flapping = sum(r.metrics["flapping_bundles"] for r in runs)
    still = sum(r.metrics["unloads"] for r in pure)
    figure = f"{per_hour:g} unloads/h, {flapping} flapping" + (f", {still} under pure jitter" if pure else "")
    if per_hour <= 2 and flapping == 0 and still == 0:
        return Cell("good", figure)
    return Cell("normal" if per_hour <= 10 and flapping <= 2 else "bad", figure)


def _over_placement(runs: list[RunResult]) -> Cell:
    over = sum(r.metrics["overplaced_destinations"] for r in runs)
    wrong = sum(r.metrics["wrong_direction_moves"] for r in runs)
    figure = f"{over} over-placed, {wrong} wrong-way"
    return Cell("good" if over + wrong == 0 else "normal" if over + wrong <= 3 else "bad", figure)


def _over_unloading(judged: list[RunResult], runs: list[RunResult], bounds: dict[RunKey, int]) -> Cell:
    """More unloads than the imbalance needs, or, as PIP-364 defines over unloading, so much load taken off a
    broker that it is left underloaded: either one is the harm. ``runs``: where underloaded sources are counted,
    the scenarios that are not jittery — in a jittery one a broker's usage after a cycle is the bursts' as much
    as the moves' (moves on noise are the load jitter column's), as the ratio leaves them out for the same
    reason."""
    under = sum(r.metrics["overunloaded_sources"] for r in runs)
    if not judged and not under:
        return Cell("n/a", "")
    parts, ratio, worst = [], 0.0, 0.0
    if judged:
        ratio = sum(r.metrics["unloads"] for r in judged) / sum(run_bound(r, bounds) for r in judged)
        worst = max(r.metrics["unloads"] / run_bound(r, bounds) for r in judged)
        parts.append(f"{ratio:.2f}× the lower bound, worst {worst:.2f}×")
    figure = ", ".join([*parts, f"{under} left underloaded"])
    if worst <= 1.25 and under == 0:
        return Cell("good", figure)
    return Cell("normal" if ratio <= 2.5 and under <= 3 else "bad", figure)


def _slow(runs: list[RunResult]) -> Cell:
    if not runs:
        return Cell("n/a", "")
    cycles = [r.metrics["cycles_after_disturbance"] for r in runs]
    balanced = sum(1 for c in cycles if c is not None)
    in_time = sum(1 for r in runs if r.metrics["balanced_in_time"])
    length = [r.metrics["cycles"] - r.metrics["disturbance_cycle"] for r in runs]
    mean = statistics.fmean(c if c is not None else n for c, n in zip(cycles, length))
    figure = f"{balanced}/{len(runs)} balanced, {in_time} in time, mean {mean:.1f} cycles"
    if in_time == len(runs):
        return Cell("good", figure)
    return Cell("normal" if balanced * 2 >= len(runs) else "bad", figure)


# ---------------------------------------------------------------------------------------------- markdown


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def summary_table(cells: dict[str, dict[str, Cell]]) -> str:
    return _table(["Strategy", *COLUMNS], ([label, *(cells[label][c] for c in COLUMNS)] for label in cells))


SCENARIO_COLUMNS = (
    ("cycles to balance", "cycles_to_balance"),
    ("disturbance at", "disturbance_cycle"),
    ("cycles after it", "cycles_after_disturbance"),
    ("rails' floor", "rails_floor_cycles"),
    ("final spread", "final_spread"),
    ("final std", "final_std"),
    ("unloads", "unloads"),
    ("topics disconnected", "topics_disconnected"),
    ("flapping", "flapping_bundles"),
    ("broker-cycles > 85%", "broker_cycles_over_85"),
    ("wrong-way moves", "wrong_direction_moves"),
    ("over-placed", "overplaced_destinations"),
    ("left underloaded", "overunloaded_sources"),
    ("onto co-tenant", "cotenant_moves"),
)


def scenario_table(runs: Sequence[RunResult], bounds: dict[RunKey, int]) -> str:
    rows = []
    for r in runs:
        m = r.metrics
        never = ("cycles_to_balance", "cycles_after_disturbance")
        values = ["never" if m[key] is None and key in never else m[key] for _, key in SCENARIO_COLUMNS]
        bound = run_bound(r, bounds)
        ratio = f"{m['unloads'] / bound:.2f} of {bound}" if bound else "–"
        rows.append([r.combination, r.seed, *values[:7], ratio, *values[7:]])
    header = [name for name, _ in SCENARIO_COLUMNS]
    return _table(["Strategy", "seed", *header[:7], "÷ bound", *header[7:]], rows)


def write_report(
    results: Sequence[RunResult],
    scenarios: dict[str, Scenario],
    out: Path,
    command: str,
    plots: bool = True,
) -> str:
    """Writes report.md, results.json and plots/<scenario>.png; returns the summary table."""
    out.mkdir(parents=True, exist_ok=True)
    cells = verdicts(results, scenarios)
    summary = summary_table(cells)
    bounds = lower_bounds(results)
    seeds = sorted({r.seed for r in results})
    per_seed = seed_verdicts(results, scenarios)
    labels = list(cells)
    builtin = [label for label in labels if label in BUILTIN_LABELS]
    comparison = [
        f"- {label}: strictly better than every Pulsar combination on "
        f"{', '.join(better) if (better := strictly_better(cells, label, builtin)) else 'no column'}"
        for label in labels
        if label not in BUILTIN_LABELS and builtin
    ]
    parts = [
        "# Strategy benchmark",
        f"Generated by `{command}`. Simulated time, seeded: the same command gives the same numbers.",
        f"## PIP-364's table, measured (seeds {', '.join(map(str, seeds))}; each cell the worst seed's)",
        summary,
        *comparison,
        "How each column is decided (bad: worse than normal):",
        _table(["column", "metric", "scenarios", "good", "normal"], CUTOFFS),
        "## Verdicts per seed",
        _table(
            ["Strategy", "seed", *COLUMNS],
            ([label, seed, *(per_seed[label][seed][c].verdict for c in COLUMNS)] for label in labels for seed in seeds),
        ),
        "## Decision-quality goals (issue 16), over every seed",
        f"Balanced in time: the spread stays under target within {GOAL_CYCLES} cycles of the disturbance, or "
        "within the rails' floor where that is more (see `rails_floor` in benchmarks/runs.py).",
        _table(
            [
                "Strategy",
                f"balanced within max({GOAL_CYCLES}, floor) cycles",
                "unloads under pure jitter",
                "moved twice within 30 min",
                "worst unloads ÷ lower bound",
            ],
            ([label, *row] for label, row in goals(results, scenarios).items()),
        ),
    ]
    for name in sorted({r.scenario for r in results}):
        runs = [r for r in results if r.scenario == name]
        parts += [f"## {name}", scenarios[name].description, scenario_table(runs, bounds)]
        if plots:
            from pulsar_lb_operator.benchmarks import plots as plotting  # matplotlib only when plots are asked for

            slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")
            first = [r for r in runs if r.seed == seeds[0]]  # one seed's runs: a panel per strategy
            image = plotting.usage_figure(name, first, out / "plots" / f"{slug}.png")
            parts.append(f"![broker usage over time, {name}](plots/{image.name})")
    (out / "report.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    (out / "results.json").write_text(json.dumps([r.to_json() for r in results], indent=1), encoding="utf-8")
    return summary
