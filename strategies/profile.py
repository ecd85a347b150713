"""The aggregated load profile (spark_jobs/load_profile.py), as a pure value the planner can use.

With a profile, LeastLongTermMessageRate uses the history's long-term averages instead of this
process's own, the split trigger acts only on bundles that stayed hot, and each broker's fitted
cost model is at hand for a predictive strategy. Without one, everything works on the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pulsar_lb_operator.strategies.averages import MessageAverage


@dataclass(frozen=True)
class CostModel:
    """usage% = intercept + per_msg_rate·msg/s + per_byte_in·B/s in + per_byte_out·B/s out.

    ``centred``: the fit's sums about its samples' means — Σ(x − x̄)(x − x̄)ᵀ's upper triangle (6 values, row by
    row) then Σ(x − x̄)(y − ȳ) (3), x the traffic and y the usage % — from which the fits of alike brokers are
    pooled into one (``costs.pooled``); empty in a profile written before they were kept."""

    intercept: float
    per_msg_rate: float
    per_byte_in: float
    per_byte_out: float
    r2: float
    samples: int
    centred: tuple[float, ...] = ()

    def predict(self, msg_rate: float, throughput_in: float, throughput_out: float) -> float:
        return (
            self.intercept
            + self.per_msg_rate * msg_rate
            + self.per_byte_in * throughput_in
            + self.per_byte_out * throughput_out
        )


@dataclass(frozen=True)
class HotBundle:
    share: float  # of recent samples over a split threshold
    boundary: int  # range_equally_divide position


@dataclass(frozen=True)
class LoadProfile:
    long_term: Mapping[str, MessageAverage] = field(default_factory=lambda: MappingProxyType({}))
    hot: Mapping[str, HotBundle] | None = None  # None: the profile says nothing about hotness
    cost_models: Mapping[tuple[str, str], CostModel] = field(default_factory=lambda: MappingProxyType({}))
    generated_at: int = 0
