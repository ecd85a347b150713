"""The fewest whole bundles that fill the brokers a disturbance left below the band: what a strategy that moves
whole bundles can do at best, beside the lower bound (``bounds.balance_needs``).

The lower bound lets each broker not below the band give up to its room — what takes it to the band's floor — in
parts of bundles: a giver 6 points over the floor whose bundles cost 10 and 4 offers 6 there, though no whole
bundle of its carries more than 4 without taking it under the floor. That keeps the bound a bound for a strategy
that splits bundles to move a piece, but on a cluster of coarse bundles (a big cluster's rolling restart: each of
thirty brokers a few points over the floor, each bundle 4 to 13 points) the whole-bundle optimum is well above
it. Here it is found exactly where it is well defined, a **fill** — a broker joined, came back or restarted
empty: some broker is below the band — as an integer program (HiGHS, through ``scipy.optimize.milp``): the fewest
bundles, each moved once, straight from the brokers not below the band to those below it, that land every broker
in the band (a giver above it gives at least what takes it under its top), each bundle at what it costs where it
goes (the most it adds to one resource there, as the bound counts it).

It is a reference for reading a strategy's unloads, not a bound: a strategy that relays (a giver takes a small
bundle to give a larger one) or splits may use fewer. None where the disturbance is no fill, where no whole
bundles can fill it, or where the program is too large or not proven optimal within its node budget (a count, so
the same run gives the same figure on any machine); and where the givers above the band have more to give than the
brokers below it can take, the disturbance is more than a fill: None too.
"""

from __future__ import annotations

import numpy as np

from pulsar_lb_operator.benchmarks.bounds import (
    TARGET_SPREAD,
    Pools,
    band,
    bundle_contributions,
    pool_names,
    reading,
    traffic_rows,
)
from pulsar_lb_operator.simulator.cluster import SimulatedCluster

MAX_VARIABLES = 2_000  # (bundle, receiver) pairs: about a second of HiGHS on 2 cores (20 alike receivers' 3,200: 5 s)
NODES = 2_000  # HiGHS's branch-and-bound budget: the families' fills (up to a few hundred pairs) took one node each
OPTIMAL = 0  # scipy's ``milp`` status for a proven optimum


def fewest_whole_fill(
    cluster: SimulatedCluster,
    target: float = TARGET_SPREAD,
    held: frozenset[str] = frozenset(),
    pools: Pools | None = None,
) -> int | None:
    """The fewest whole-bundle moves that fill every pool's brokers below the band (see the module's docstring),
    added up; 0 where none is below it. ``held``: bundles the grace period keeps where they are."""
    total = 0
    for names in pool_names(cluster, pools):
        fewest = _pool_fill(cluster, target, held, names)
        if fewest is None:
            return None
        total += fewest
    return total


def _pool_fill(cluster: SimulatedCluster, target: float, held: frozenset[str], names: set[str] | None) -> int | None:
    now = reading(cluster, names)
    if now is None:
        return 0
    _, usage, takers, stats, lines = now
    low, high = band(cluster, now, target, held)
    short = sorted(n for n in takers if usage[n] < low)
    if not short:
        return None if any(value > high for value in usage.values()) else 0  # a broker above the band: no fill
    traffic = traffic_rows(stats)
    contributions = bundle_contributions(cluster, names)
    # per giver: its bundles (rows), what it must give to be under the band's top, and its room above the floor
    givers: list[tuple[list[int], float, float]] = []
    drops: list[float] = []
    arriving: list[np.ndarray] = []
    for name in sorted(n for n in usage if usage[n] >= low):
        room = usage[name] - low
        rows = []
        for k, (bundle, drop) in enumerate(contributions[name].items()):
            if bundle not in held and 0 < drop <= room:  # one that alone does not take its giver under the floor
                rows.append(len(drops))
                drops.append(drop)
                arriving.append(traffic[name][k])
        givers.append((rows, max(usage[name] - high, 0.0), room))
    if not drops or len(drops) * len(short) > MAX_VARIABLES:
        return None
    # what each bundle adds to each receiver: the most it adds to one resource there
    rise = np.array([(lines[r][1] @ np.array(arriving).T).max(axis=0) for r in short]).T  # bundles × receivers
    gaps = [(low - usage[r], high - usage[r]) for r in short]
    return _solve(np.array(drops), rise, givers, gaps)


def _solve(
    drops: np.ndarray, rise: np.ndarray, givers: list[tuple[list[int], float, float]], gaps: list[tuple[float, float]]
) -> int | None:
    """x[bundle, receiver] ∈ {0, 1}, each bundle to one receiver at most; each receiver gains within its ``gaps``
    (to the band's floor, to its top), each giver gives within its own (``givers``: its bundles, what takes it to
    the band's top, to its floor); fewest moves."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    bundles, receivers = rise.shape
    count = bundles * receivers
    variable = np.arange(count).reshape(bundles, receivers)
    rows: list[np.ndarray] = []
    columns: list[np.ndarray] = []
    values: list[np.ndarray] = []
    lower: list[float] = []
    upper: list[float] = []

    def constraint(cols: np.ndarray, coefficients: np.ndarray, least: float, most: float) -> None:
        rows.append(np.full(len(cols), len(lower)))
        columns.append(cols)
        values.append(coefficients)
        lower.append(least)
        upper.append(most)

    for b in range(bundles):  # one receiver at most
        constraint(variable[b], np.ones(receivers), 0.0, 1.0)
    for r, (least, most) in enumerate(gaps):  # the receiver ends in the band
        constraint(variable[:, r], rise[:, r], least, most)
    for mine, least, most in givers:  # the giver ends in the band
        if least > 0 and not mine:
            return None  # above the band with no bundle it can give
        if mine:
            constraint(variable[mine].ravel(), np.repeat(drops[mine], receivers), least, most)
    matrix = coo_matrix(
        (np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))), shape=(len(lower), count)
    )
    result = milp(
        np.ones(count),
        constraints=LinearConstraint(matrix.tocsr(), lower, upper),
        integrality=np.ones(count),
        bounds=Bounds(0, 1),
        options={"node_limit": NODES, "time_limit": 60.0},
    )
    if result.status != OPTIMAL or result.x is None:
        return None
    return round(float(result.x.sum()))
