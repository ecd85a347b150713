"""Per-broker cost models: least squares of each resource's usage % on the traffic the broker owned.

usage% = intercept + a·(msg rate in + out) + b·throughput in + c·throughput out. The fit is done
from the sums of the normal equations, so the Spark job (spark_jobs/load_profile.py) can compute the
sums over any amount of history and solve here on the driver, and ``CostLearner`` can keep the same
sums in process. The intercept is the broker's background usage.

One broker's fit is exact for traffic mixed as its own is, but its tenants' traffic rises and falls nearly
together, so it cannot tell what a message costs from what a byte does: its slopes trade a large negative cost of
one for a large positive other, and a bundle of another tenant's mix is mispredicted (by a fifth or more).
Brokers of one machine type split their cost between a message and a byte alike, each with a background of its own,
and carry different tenants' shares: ``pooled`` fits them together, from each fit's sums about its own means, with no
cost below zero (a message or a byte never frees CPU). Alike machines need not run at one speed (one instance type
across two hardware generations, another JVM's flags): each fit has a speed of its own in the pool, the one split
shared, as a slower machine pays more for a message and for a byte alike. Pooled at one speed, the brokers' levels
would set the split: brokers whose tenants send large messages running slower would read as bytes costing more.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import numpy as np

from pulsar_lb_operator.strategies.profile import CostModel

RESOURCES = ("cpu", "bandwidthIn", "bandwidthOut")
N = 4  # 1, msg rate, throughput in, throughput out
UPPER = np.triu_indices(N - 1)  # ``CostModel.centred``'s first six: the traffic's sums about its means, row by row


def solve(sums: Mapping[str, float]) -> CostModel:
    """Least squares from the normal-equation sums, with R² and the sample count."""
    xx = np.zeros((N, N))
    for i in range(N):
        for j in range(i, N):
            xx[i, j] = xx[j, i] = sums[f"xx_{i}_{j}"]
    xy = np.array([sums[f"xy_{i}"] for i in range(N)])
    beta = _least_squares(xx, xy)
    n = sums["samples"]
    sse = sums["yy"] - 2 * beta @ xy + beta @ xx @ beta
    sst = sums["yy"] - sums["y_sum"] * sums["y_sum"] / n if n else 0.0  # a float product overflows to inf, ** raises
    r2 = 1 - sse / sst if sst > 1e-9 else (1.0 if sse <= 1e-9 else 0.0)
    # about the means: Σxxᵀ − Σx Σxᵀ / n and Σxy − Σx Σy / n (xx[0] holds n and Σx, xy[0] Σy)
    centred_xx = xx[1:, 1:] - np.outer(xx[0, 1:], xx[0, 1:]) / n if n else np.zeros((N - 1, N - 1))
    centred_xy = xy[1:] - xx[0, 1:] * xy[0] / n if n else np.zeros(N - 1)
    upper = [float(v) for v in centred_xx[UPPER]]
    return CostModel(
        float(beta[0]),
        float(beta[1]),
        float(beta[2]),
        float(beta[3]),
        float(max(min(r2, 1.0), -1.0)),
        int(n),
        (*upper, *(float(v) for v in centred_xy)),
    )


def _least_squares(xx: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """β minimising the squares whose normal equations are xx·β = xy."""
    scale = np.sqrt(np.maximum(np.diag(xx), 1e-12))  # column scaling keeps the system well conditioned
    beta_scaled, *_ = np.linalg.lstsq(xx / np.outer(scale, scale), xy / scale, rcond=1e-10)
    return np.asarray(beta_scaled / scale)


def pooled(fits: Iterable[tuple[CostModel, float]]) -> np.ndarray | None:
    """The traffic's cost shared by ``fits`` of alike brokers, each with its own intercept — (msg rate, throughput
    in, throughput out) in usage % × the weight given with each fit (its CPU limit: the cost per core) — with no
    cost below zero; None when a fit carries no ``centred`` sums (a profile written before they were kept) or they
    give nothing finite.

    Non-negative least squares over three costs: each subset of them held at zero is solved, and the one with the
    least squares among those with no negative cost is kept (eight small solves)."""
    listed = list(fits)
    sums = len(UPPER[0])
    if not listed or any(len(model.centred) != sums + N - 1 for model, _ in listed):
        return None
    centred = np.array([model.centred for model, _ in listed])
    weights = np.array([weight for _, weight in listed])
    stacked_xx = np.zeros((len(listed), N - 1, N - 1))
    stacked_xx[:, UPPER[0], UPPER[1]] = centred[:, :sums]
    stacked_xx[:, UPPER[1], UPPER[0]] = centred[:, :sums]
    stacked_xy = weights[:, None] * centred[:, sums:]
    slopes = np.array([(model.per_msg_rate, model.per_byte_in, model.per_byte_out) for model, _ in listed])
    r2 = np.array([model.r2 for model, _ in listed])
    samples = np.array([model.samples for model, _ in listed])
    explained = np.einsum("ki,ki->k", slopes, centred[:, sums:])
    told = (r2 > 0) & (r2 <= 1) & (explained > 0) & (samples > N)  # fits whose r² tells the squares they leave
    left = float(np.sum((weights**2 * explained)[told] * (1 / r2[told] - 1)))
    freedom = int(np.sum(samples[told] - N))
    xx, xy = stacked_xx.sum(axis=0), stacked_xy.sum(axis=0)
    if not (np.isfinite(xx).all() and np.isfinite(xy).all()) or not xx.any():
        return None
    beta = _non_negative(xx, xy)
    if beta is None or len(listed) < 2:
        return beta
    sped = _with_speeds(stacked_xx, stacked_xy, beta)
    return sped if _speeds_tell(stacked_xx, stacked_xy, beta, sped, left, freedom) else beta


def _non_negative(xx: np.ndarray, xy: np.ndarray) -> np.ndarray | None:
    """Non-negative least squares over the three costs, from the normal equations xx·β = xy."""
    best: tuple[float, np.ndarray] | None = None
    for free in itertools.product((False, True), repeat=N - 1):
        beta = np.zeros(N - 1)
        keep = np.array(free)
        if keep.any():
            beta[keep] = _least_squares(xx[np.ix_(keep, keep)], xy[keep])
        loss = float(beta @ xx @ beta - 2 * beta @ xy)  # the squares, less what no β changes
        if (beta >= 0).all() and np.isfinite(loss) and (best is None or loss < best[0]):
            best = (loss, beta)
    return None if best is None else best[1]


SPEED_ROUNDS = 50  # alternations of speeds and split at the most; each lowers the squares, a few dozen settle them
SPEED_CONFIDENCE = 0.99  # speeds per broker are kept where noise alone would explain their gain 1 time in 100


def _speeds(xx: np.ndarray, xy: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Each fit's speed given the split β (``xx``, ``xy``: the fits' normal equations, stacked): its own least
    squares, none below zero."""
    across = np.einsum("i,kij,j->k", beta, xx, beta)
    along = xy @ beta
    return np.where(across > 0, np.maximum(along, 0.0) / np.where(across > 0, across, 1.0), 0.0)


def _squares(xx: np.ndarray, xy: np.ndarray, beta: np.ndarray, speeds: np.ndarray) -> float:
    """The fits' squares at split β and ``speeds``, less what neither changes."""
    return float(speeds**2 @ np.einsum("i,kij,j->k", beta, xx, beta) - 2 * speeds @ (xy @ beta))


def _with_speeds(xx: np.ndarray, xy: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """The split shared by the fits (``xx``, ``xy``: each one's normal equations about its own means, stacked) with
    a speed per fit: each fit's traffic costs its speed × β. Least squares in turn over the speeds (each fit's own,
    given β) and β (non-negative, given the speeds), from the one-speed pool's β; the result at the fits' mean
    speed, so a kind at one speed is priced as before. A fit its traffic explains nothing of (no speed above zero)
    drops out."""
    for _ in range(SPEED_ROUNDS):
        speeds = _speeds(xx, xy, beta)
        if not speeds.any():
            return beta
        shared = _non_negative(np.einsum("k,kij->ij", speeds**2, xx), speeds @ xy)
        if shared is None or not shared.any():
            return beta
        settled = np.allclose(shared, beta, rtol=1e-9, atol=0.0)
        beta = shared
        if settled:
            break
    running = _speeds(xx, xy, beta)
    running = running[running > 0]
    return beta * float(running.mean()) if running.size else beta


def _speeds_tell(xx: np.ndarray, xy: np.ndarray, one: np.ndarray, sped: np.ndarray, left: float, freedom: int) -> bool:
    """Whether a speed per fit explains the samples better than one speed by more than their noise would (an F
    test at the 1 % level, on the squares the fits leave, ``left`` over ``freedom`` degrees): with the brokers'
    tenants rising and falling together, a speed can trade against the split, and speeds fitted to noise would
    turn a well-told split. Exact fits (no squares left) always tell."""
    gain = _squares(xx, xy, one, np.ones(len(xy))) - _squares(xx, xy, sped, _speeds(xx, xy, sped))
    if gain <= 0:
        return False
    if left <= 0 or freedom <= 0:
        return True
    from scipy.special import fdtri  # the F quantile, without scipy.stats' import (half a second on 2 cores)

    extra = len(xy) - 1
    return (gain / extra) / (left / freedom) > float(fdtri(extra, freedom, SPEED_CONFIDENCE))


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
