"""Broker usage over time, one panel per strategy: what a user looks at to pick one."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen: render straight to PNG
import matplotlib.pyplot as plt

from pulsar_lb_operator.benchmarks.runs import RunResult

MAX_LINES = 12  # more brokers than this are drawn as a min–max band around the mean


def usage_figure(scenario: str, runs: Sequence[RunResult], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = min(len(runs), 4)
    rows = math.ceil(len(runs) / columns)
    size = (4.2 * columns, 3.0 * rows)
    fig, axes = plt.subplots(rows, columns, figsize=size, sharex=True, sharey=True, squeeze=False)
    for ax, run in zip(axes.flat, runs):
        minutes = [t / 60 for t in run.times]
        brokers = sorted({b for sample in run.usage for b in sample})
        if len(brokers) <= MAX_LINES:
            for broker in brokers:
                ax.plot(minutes, [s.get(broker, float("nan")) for s in run.usage], lw=1.2, label=broker)
        else:
            lows = [min(s.values()) for s in run.usage]
            highs = [max(s.values()) for s in run.usage]
            means = [sum(s.values()) / len(s) for s in run.usage]
            ax.fill_between(minutes, lows, highs, alpha=0.3, label="min–max")
            ax.plot(minutes, means, lw=1.2, label="mean")
        ax.axhline(85, color="red", lw=0.6, ls="--")
        ax.set_title(f"{run.combination}\n{run.metrics['unloads']} unloads", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylim(0, 105)
    for ax in axes.flat[len(runs) :]:
        ax.axis("off")
    axes[0][0].legend(fontsize=6, loc="upper right")
    fig.supxlabel("simulated minutes", fontsize=8)
    fig.supylabel("broker usage % (true, weighted max)", fontsize=8)
    fig.suptitle(scenario, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
