"""Per-broker cost models: least squares of each resource's usage % on the traffic the broker owned.

usage% = intercept + a·(msg rate in + out) + b·throughput in + c·throughput out. The fit is done
from the sums of the normal equations, so the Spark job (spark_jobs/load_profile.py) can compute the
sums over any amount of history and solve here on the driver, and ``CostLearner`` can keep the same
sums in process. The intercept is the broker's background usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from pulsar_lb_operator.strategies.profile import CostModel

RESOURCES = ("cpu", "bandwidthIn", "bandwidthOut")
N = 4  # 1, msg rate, throughput in, throughput out


def solve(sums: Mapping[str, float]) -> CostModel:
    """Least squares from the normal-equation sums, with R² and the sample count."""
    xx = np.zeros((N, N))
    for i in range(N):
        for j in range(i, N):
            xx[i, j] = xx[j, i] = sums[f"xx_{i}_{j}"]
    xy = np.array([sums[f"xy_{i}"] for i in range(N)])
    scale = np.sqrt(np.maximum(np.diag(xx), 1e-12))  # column scaling keeps the system well conditioned
    beta_scaled, *_ = np.linalg.lstsq(xx / np.outer(scale, scale), xy / scale, rcond=1e-10)
    beta = beta_scaled / scale
    n = sums["samples"]
    sse = sums["yy"] - 2 * beta @ xy + beta @ xx @ beta
    sst = sums["yy"] - sums["y_sum"] * sums["y_sum"] / n if n else 0.0  # a float product overflows to inf, ** raises
    r2 = 1 - sse / sst if sst > 1e-9 else (1.0 if sse <= 1e-9 else 0.0)
    return CostModel(
        float(beta[0]), float(beta[1]), float(beta[2]), float(beta[3]), float(max(min(r2, 1.0), -1.0)), int(n)
    )


class CostLearner:
    """The same sums, kept in process (a benchmark's day of history, a backtest's recorded brokers)."""

    def __init__(self) -> None:
        self._xx: dict[tuple[str, str], np.ndarray] = {}
        self._xy: dict[tuple[str, str], np.ndarray] = {}
        self._yy: dict[tuple[str, str], np.ndarray] = {}  # [Σy², Σy, n]

    def add(self, broker: str, traffic: tuple[float, float, float], percents: Mapping[str, float]) -> None:
        """One sample: (msg rate in + out, throughput in, throughput out) and usage % per resource."""
        x = np.array([1.0, *traffic])
        for resource, y in percents.items():
            key = (broker, resource)
            self._xx[key] = self._xx.get(key, np.zeros((N, N))) + np.outer(x, x)
            self._xy[key] = self._xy.get(key, np.zeros(N)) + x * y
            self._yy[key] = self._yy.get(key, np.zeros(3)) + np.array([y * y, y, 1.0])

    def models(self) -> Mapping[tuple[str, str], CostModel]:
        out = {}
        for key, xx in self._xx.items():
            sums = {f"xx_{i}_{j}": xx[i, j] for i in range(N) for j in range(i, N)}
            sums.update({f"xy_{i}": self._xy[key][i] for i in range(N)})
            sums.update(yy=self._yy[key][0], y_sum=self._yy[key][1], samples=self._yy[key][2])
            out[key] = solve(sums)
        return MappingProxyType(out)
