"""Traffic patterns: a topic's publish rate as a function of simulated time."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Protocol

DAY_S = 86_400.0


class TrafficPattern(Protocol):
    """What drives a topic's rate: a scenario's ``Pattern``, or a backtest's recorded series."""

    def multiplier(self, t_s: float, rng: random.Random) -> float: ...


@dataclass(frozen=True)
class Pattern:
    """``kind``: constant | daily | jitter | burst | step.

    daily: rate × (1 + amplitude·sin(2π(t/period + phase))); jitter: rate × (1 + N(0, amplitude));
    burst: rate × factor during [start, start+duration) every period; step: rate × factor from start on.
    """

    kind: str = "constant"
    amplitude: float = 0.0
    period_s: float = DAY_S
    phase: float = 0.0
    factor: float = 1.0
    start_s: float = 0.0
    duration_s: float = 0.0

    KINDS = ("constant", "daily", "jitter", "burst", "step")

    def multiplier(self, t_s: float, rng: random.Random) -> float:
        if self.kind == "daily":
            return max(0.0, 1 + self.amplitude * math.sin(2 * math.pi * (t_s / self.period_s + self.phase)))
        if self.kind == "jitter":
            return max(0.0, 1 + rng.gauss(0, self.amplitude))
        if self.kind == "burst":
            if t_s < self.start_s:
                return 1.0
            in_burst = (t_s - self.start_s) % self.period_s < self.duration_s
            return self.factor if in_burst else 1.0
        if self.kind == "step":
            return self.factor if t_s >= self.start_s else 1.0
        return 1.0
