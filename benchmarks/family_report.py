"""The scenario families' table: per family and strategy, how often each disturbance was balanced on the rails'
floor (+0, +1, +2 cycles), the worst ratio of unloads to the lower bound, unloads where nothing needed moving.

Each disturbance of a run is judged on its own (``disturbances.py``); the table counts disturbances, not runs.
The report adds the parts later than floor + 2, and each strategy's fills against the fewest whole-bundle moves
that make them (``whole_fill``): what the lower bound, which counts parts of bundles, cannot say.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pulsar_lb_operator.benchmarks.families import FAMILIES, Size
from pulsar_lb_operator.benchmarks.runs import BASELINE, RunResult

RATIO_GOAL = 1.25  # issue 16's goal: at most a quarter more unloads than the lower bound


def family_of(result: RunResult) -> str:
    return result.scenario.split("#", 1)[0]


def _share(count: int, of: int) -> str:
    return f"{100 * count / of:.0f} %" if of else "–"


@dataclass(frozen=True)
class Late:
    """A disturbance later than floor + 2, and whether the readings could show it (``disturbances.shown_floor_of``)."""

    scenario: str
    kind: str
    sample: int
    floor: int
    cycles: int | None  # None: not balanced within the part
    samples: int  # the part's length
    shown_floor: int | None  # None: the readings never showed it past the target

    @classmethod
    def of(cls, scenario: str, part: dict) -> Late:
        start, end = part["start"], part["end"]
        return cls(scenario, part["kind"], start, part["floor"], part["cycles"], end - start, part.get("shown_floor"))

    def row(self) -> str:
        cycles = "not balanced in the part" if self.cycles is None else str(self.cycles)
        if self.shown_floor is None:
            shown = "never: its spread was past the target by less than the readings' noise"
        elif self.cycles is None and self.samples < self.shown_floor + 3:
            shown = f"{self.shown_floor}: the part ended before it + 2"
        else:
            late = None if self.cycles is None else self.cycles - self.shown_floor
            shown = f"{self.shown_floor}: " + ("late" if late is None or late > 2 else "within it + 2")
        return f"| {self.scenario} | {self.kind} at sample {self.sample} | {self.floor} | {cycles} | {shown} |"


@dataclass(frozen=True)
class Tally:
    """One strategy over one family's runs (or over all of them)."""

    runs: int
    judged: int  # disturbances judged on cycles
    within: tuple[int, int, int]  # of them, balanced within floor, floor + 1, floor + 2 cycles
    bounded: int  # disturbances that needed moves
    under_goal: int  # of them, unloads ≤ RATIO_GOAL × the lower bound
    worst: tuple[float, str] | None  # the worst unloads ÷ lower bound, and where
    noise_unloads: int  # unloads where the disturbance needed none
    flapping: int
    late: tuple[Late, ...] = ()  # the disturbances later than floor + 2

    @classmethod
    def of(cls, runs: Sequence[RunResult]) -> Tally:
        within = [0, 0, 0]
        judged = bounded = under = noise = 0
        worst: tuple[float, str] | None = None
        lates = []
        for run in runs:
            for part in run.metrics["segments"]:
                if part["judged"]:
                    judged += 1
                    late = None if part["cycles"] is None else part["cycles"] - part["floor"]
                    for k in range(3):
                        within[k] += late is not None and late <= k
                    if late is None or late > 2:
                        lates.append(Late.of(run.scenario, part))
                if part["moves"] > 0:
                    bounded += 1
                    ratio = part["unloads"] / part["moves"]
                    under += ratio <= RATIO_GOAL
                    where = f"{run.scenario} at sample {part['start']}"
                    worst = max(worst, (ratio, where)) if worst else (ratio, where)
                else:
                    noise += part["unloads"]
        flapping = sum(r.metrics["flapping_bundles"] for r in runs)
        counts = (within[0], within[1], within[2])
        return cls(len(runs), judged, counts, bounded, under, worst, noise, flapping, tuple(lates))

    def cells(self) -> list[str]:
        worst = f"{self.worst[0]:.2f}×" if self.worst else "–"
        return [
            str(self.judged),
            *(_share(n, self.judged) for n in self.within),
            f"{worst} ({_share(self.under_goal, self.bounded)} ≤ {RATIO_GOAL}×)",
            str(self.noise_unloads),
            str(self.flapping),
        ]


HEADER = [
    "family",
    "strategy",
    "disturbances judged",
    "on the floor",
    "≤ floor + 1",
    "≤ floor + 2",
    "worst unloads ÷ bound",
    "unloads on noise",
    "flapping",
]


def _groups(results: Sequence[RunResult]) -> dict[tuple[str, str], list[RunResult]]:
    """(family, strategy) → its runs, and (all, strategy) → every family's; the baseline left out."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        if r.combination != BASELINE.label:
            groups.setdefault((family_of(r), r.combination), []).append(r)
            groups.setdefault(("all", r.combination), []).append(r)
    return groups


def tallies(results: Sequence[RunResult]) -> dict[tuple[str, str], Tally]:
    """(family, strategy) → its tally, and (all, strategy) over every family; the baseline left out."""
    return {key: Tally.of(runs) for key, runs in _groups(results).items()}


def table(results: Sequence[RunResult]) -> str:
    rows = [[family, strategy, *tally.cells()] for (family, strategy), tally in tallies(results).items()]
    order = [*FAMILIES, "all"]
    rows.sort(key=lambda row: order.index(row[0]))  # families in their order (stable: strategies too), then all
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _late(results: Sequence[RunResult]) -> list[tuple[str, Late]]:
    """The disturbances later than floor + 2, each with its strategy."""
    everything = [(strategy, tally) for (family, strategy), tally in tallies(results).items() if family == "all"]
    return [(strategy, part) for strategy, tally in everything for part in tally.late]


def _late_section(late: Sequence[tuple[str, Late]]) -> list[str]:
    """The disturbances later than floor + 2 (``_late``), with the floor from when the readings showed them."""
    if not late:
        return []
    return [
        "## Later than floor + 2",
        "The floor reads the true usage; a strategy reads samples a point or more off. The last column is the floor "
        "counted from when the readings could show the disturbance: its spread past the target, and a broker past "
        "the high gap for the high hit count, by at least their readings' noise (one standard deviation).",
        "\n".join(
            [
                "| strategy | run | disturbance | floor | cycles | floor from when the readings showed it |",
                "|---|---|---|---|---|---|",
                *(f"| {strategy} {part.row()}" for strategy, part in late),
            ]
        ),
    ]


@dataclass(frozen=True)
class WholeTally:
    """One strategy over one family's fills: disturbances with a whole-bundle figure (``whole_fill``), how many
    were made in at most as many unloads, and in at most ``RATIO_GOAL`` times as many, and the worst ratio."""

    fills: int
    at_fewest: int
    under_goal: int
    worst: float | None

    @classmethod
    def of(cls, runs: Sequence[RunResult]) -> WholeTally:
        ratios = [
            part["unloads"] / part["whole"]
            for run in runs
            for part in run.metrics["segments"]
            if part["moves"] > 0 and part.get("whole")
        ]
        at_fewest, under_goal = sum(r <= 1 for r in ratios), sum(r <= RATIO_GOAL for r in ratios)
        return cls(len(ratios), at_fewest, under_goal, max(ratios, default=None))


def _whole_section(results: Sequence[RunResult]) -> list[str]:
    """Each strategy's unloads against the fewest whole-bundle moves of the disturbances that were fills."""
    rows = []
    order = [*FAMILIES, "all"]
    for (family, strategy), runs in sorted(_groups(results).items(), key=lambda item: order.index(item[0][0])):
        tally = WholeTally.of(runs)
        if tally.fills:
            rows.append(
                f"| {family} | {strategy} | {tally.fills} | {_share(tally.at_fewest, tally.fills)} | "
                f"{_share(tally.under_goal, tally.fills)} | {tally.worst:.2f}× |"
            )
    if not rows:
        return []
    return [
        "## Against the fewest whole-bundle moves",
        "Where a disturbance left brokers below the band (a broker joined, came back or restarted empty), the "
        "fewest whole bundles that fill them — each moved once, straight from a broker not below the band, every "
        "broker landing in the band — found exactly. The lower bound above lets each giver give parts of bundles "
        "up to its room, which only a split can carry; this is what moving whole bundles straight can do at best "
        "(a relay or a split may do with fewer).",
        "\n".join(
            [
                f"| family | strategy | fills | unloads ≤ the fewest | ≤ {RATIO_GOAL}× the fewest | worst ratio |",
                "|---|---|---|---|---|---|",
                *rows,
            ]
        ),
    ]


def write_report(
    results: Sequence[RunResult],
    out: Path,
    command: str,
    families: Sequence[str],
    size: Size | None = None,
) -> str:
    """Writes report.md and results.json; returns the table (and how many disturbances were later than floor + 2).
    ``size``: the fewest and most brokers the runs started with, where not each family's own."""
    out.mkdir(parents=True, exist_ok=True)
    summary = table(results)
    late = _late(results)
    runs = sorted({r.scenario for r in results}, key=lambda name: (name.split("#")[0], int(name.split("#")[1])))
    parts = [
        "# Scenario families",
        f"Generated by `{command}`. Simulated time, seeded: the same command gives the same numbers.",
        f"Families: {', '.join(families)}; runs: {', '.join(runs)}; brokers at the start: "
        + ("each family's own" if size is None else f"{size[0]} to {size[1]}")
        + ".",
        "Each disturbance (the start, a scenario event, or the spread reaching the target after it had stayed under "
        "it) is judged on its own: cycles until the spread stays under the target against the rails' floor for the "
        "moves it needed (where it left the cluster unbalanced and the next event left time to see it), unloads "
        "against the lower bound of moves at the disturbance; unloads on noise are those made where the "
        "disturbance needed none.",
        summary,
        *_late_section(late),
        *_whole_section(results),
    ]
    (out / "report.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    (out / "results.json").write_text(json.dumps([r.to_json() for r in results], indent=1), encoding="utf-8")
    if late:
        summary += f"\n\n{len(late)} later than floor + 2: the report lists each, with the floor its readings allowed."
    return summary
