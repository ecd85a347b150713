"""``operator benchmark``: the strategy benchmark (``benchmarks/suite.py``) as the CLI runs it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pulsar_lb_operator.benchmarks import replay, suite


def run(
    scenarios: list[str],
    strategies: list[str],
    seeds: Sequence[int],
    target: float,
    jobs: int,
    out: Path,
    plots: bool,
    history: str | None,
    command: str,
) -> int:
    """Runs the suite; an unknown strategy or an unreadable history is a ValueError (one line for the user)."""
    try:
        return suite.benchmark_command(scenarios, strategies, seeds, target, jobs, out, plots, history, command)
    except (suite.UnknownCombinationError, replay.ReplayError) as exc:
        raise ValueError(str(exc)) from None
