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

from pulsar_lb_operator.benchmarks.runs import BASELINE, COTENANT_BACKGROUND, RunResult
from pulsar_lb_operator.simulator.scenario import Scenario

COLUMNS = ("Heterogeneous environment", "Load jitter", "Over placement", "Over unloading", "Slow load balancing")
CUTOFFS = (  # column, metric, scenarios, good, normal (bad: anything else)
    (
        COLUMNS[0],
        "moves onto a co-tenanted broker; whether the others end balanced",
        "with a co-tenanted broker",
        "no such move, balanced",
        "no such move",
    ),
    (
        COLUMNS[1],
        "unloads per hour; bundles moved twice within 30 min",
        "traffic that jitters or bursts (flapping: all)",
        "≤ 2/h and no flapping",
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
        "unloads ÷ the scenarios' lower bound of moves (summed)",
        "all with an imbalance to fix (not jittery)",
        "≤ 1.5×",
        "≤ 2.5×",
    ),
    (
        COLUMNS[4],
        "cycles until the spread stays under target (never = run length)",
        "all with an imbalance to fix (not jittery)",
        "all balanced, mean ≤ 10",
        "at least half balanced",
    ),
)
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


def lower_bounds(results: Iterable[RunResult]) -> dict[str, int]:
    """Per scenario: the moves needed at the start, or after its events with no balancing, whichever is more."""
    bounds: dict[str, int] = {}
    for r in results:
        needed = r.metrics["moves_lower_bound"]
        if r.combination == BASELINE.label:
            needed = max(needed, r.metrics["moves_still_needed"])
        bounds[r.scenario] = max(bounds.get(r.scenario, 0), needed)
    return bounds


def needs_moves(run: RunResult, bounds: dict[str, int], scenarios: dict[str, Scenario]) -> bool:
    """A scenario with an imbalance to fix; in a jittery one the "imbalance" is noise and is not judged."""
    return bounds[run.scenario] > 0 and not is_jittery(scenarios[run.scenario])


def verdicts(results: Sequence[RunResult], scenarios: dict[str, Scenario]) -> dict[str, dict[str, Cell]]:
    """combination → column → cell, for every combination but the baseline."""
    bounds = lower_bounds(results)
    by_combination: dict[str, list[RunResult]] = {}
    for r in results:
        if r.combination != BASELINE.label:
            by_combination.setdefault(r.combination, []).append(r)
    return {
        label: {
            COLUMNS[0]: _heterogeneous([r for r in runs if is_heterogeneous(scenarios[r.scenario])]),
            COLUMNS[1]: _jitter([r for r in runs if is_jittery(scenarios[r.scenario])], runs),
            COLUMNS[2]: _over_placement(runs),
            COLUMNS[3]: _over_unloading([r for r in runs if needs_moves(r, bounds, scenarios)], bounds),
            COLUMNS[4]: _slow([r for r in runs if needs_moves(r, bounds, scenarios)]),
        }
        for label, runs in by_combination.items()
    }


def _heterogeneous(runs: list[RunResult]) -> Cell:
    if not runs:
        return Cell("n/a", "")
    cotenant = sum(r.metrics["cotenant_moves"] for r in runs)
    spread = max(r.metrics["final_spread"] for r in runs)
    figure = f"{cotenant} onto co-tenant, spread {spread:.0f}"
    if cotenant:
        return Cell("bad", figure)
    return Cell("good" if all(r.metrics["cycles_to_balance"] is not None for r in runs) else "normal", figure)


def _jitter(jittery: list[RunResult], runs: list[RunResult]) -> Cell:
    if not jittery:
        return Cell("n/a", "")
    per_hour = max(r.metrics["unloads_per_hour"] for r in jittery)
    flapping = sum(r.metrics["flapping_bundles"] for r in runs)
    figure = f"{per_hour:g} unloads/h, {flapping} flapping"
    if per_hour <= 2 and flapping == 0:
        return Cell("good", figure)
    return Cell("normal" if per_hour <= 10 and flapping <= 2 else "bad", figure)


def _over_placement(runs: list[RunResult]) -> Cell:
    over = sum(r.metrics["overplaced_destinations"] for r in runs)
    wrong = sum(r.metrics["wrong_direction_moves"] for r in runs)
    figure = f"{over} over-placed, {wrong} wrong-way"
    return Cell("good" if over + wrong == 0 else "normal" if over + wrong <= 3 else "bad", figure)


def _over_unloading(runs: list[RunResult], bounds: dict[str, int]) -> Cell:
    if not runs:
        return Cell("n/a", "")
    ratio = sum(r.metrics["unloads"] for r in runs) / sum(bounds[r.scenario] for r in runs)
    figure = f"{ratio:.2f}× the lower bound"
    return Cell("good" if ratio <= 1.5 else "normal" if ratio <= 2.5 else "bad", figure)


def _slow(runs: list[RunResult]) -> Cell:
    if not runs:
        return Cell("n/a", "")
    cycles = [r.metrics["cycles_to_balance"] for r in runs]
    balanced = sum(1 for c in cycles if c is not None)
    mean = statistics.fmean(c if c is not None else r.metrics["cycles"] for c, r in zip(cycles, runs))
    figure = f"{balanced}/{len(runs)} balanced, mean {mean:.0f} cycles"
    if balanced == len(runs) and mean <= 10:
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
    ("final spread", "final_spread"),
    ("final std", "final_std"),
    ("unloads", "unloads"),
    ("topics disconnected", "topics_disconnected"),
    ("flapping", "flapping_bundles"),
    ("broker-cycles > 85%", "broker_cycles_over_85"),
    ("wrong-way moves", "wrong_direction_moves"),
    ("over-placed", "overplaced_destinations"),
    ("onto co-tenant", "cotenant_moves"),
)


def scenario_table(runs: Sequence[RunResult], bound: int) -> str:
    rows = []
    for r in runs:
        m = r.metrics
        values = ["never" if m[key] is None and key == "cycles_to_balance" else m[key] for _, key in SCENARIO_COLUMNS]
        ratio = f"{m['unloads'] / bound:.2f}" if bound else "–"
        rows.append([r.combination, *values[:4], ratio, *values[4:]])
    header = [name for name, _ in SCENARIO_COLUMNS]
    return _table(["Strategy", *header[:4], f"÷ bound ({bound})", *header[4:]], rows)


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
    parts = [
        "# Strategy benchmark",
        f"Generated by `{command}`. Simulated time, seeded: the same command gives the same numbers.",
        "## PIP-364's table, measured",
        summary,
        "How each column is decided (bad: worse than normal):",
        _table(["column", "metric", "scenarios", "good", "normal"], CUTOFFS),
    ]
    for name in sorted({r.scenario for r in results}):
        runs = [r for r in results if r.scenario == name]
        parts += [f"## {name}", scenarios[name].description, scenario_table(runs, bounds[name])]
        if plots:
            from pulsar_lb_operator.benchmarks import plots as plotting  # matplotlib only when plots are asked for

            slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")
            image = plotting.usage_figure(name, runs, out / "plots" / f"{slug}.png")
            parts.append(f"![broker usage over time, {name}](plots/{image.name})")
    (out / "report.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    (out / "results.json").write_text(json.dumps([r.to_json() for r in results], indent=1), encoding="utf-8")
    return summary
