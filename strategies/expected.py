"""What each bundle is expected to carry next, where one report's rate is a draw of its topics' jitter.

A topic's rate jitters from report to report (±10–30 % is common for producers that batch or burst). A plan made
on one report's figures moves the bundle that happened to read high off the broker that happened to read high, and
the next report undoes it: the plan chases the jitter, a move after every move. The short-term average
(``TimeAverageMessageData``, ten samples) is near the bundle's mean rate, but it lags what is real: a tenant's
daily curve, a surge, a hot topic.

The two are told apart by what a namespace's bundles do together. What moves all of them alike — a tenant's daily
curve, its surge — is traffic, and is kept: the namespace's common movement (the median of its bundles' departures
from their averages) is applied to each bundle's average. What one bundle does on its own is jitter as far as
twice the jitter the cluster's bundles show on their own (a normal draw goes that far one time in twenty), and
real beyond it (a hot topic): only the part beyond counts. Cutting there instead — the average within, the report
beyond — would read the one draw in twenty past the cut at its most extreme, on every broker every cycle. A bundle
alone in its namespace, one with fewer than ``MIN_SAMPLES`` samples (it was just split or just appeared) and a
system bundle are read as reported; so is every bundle of a cluster whose bundles show no jitter of their own.

What is expected so is still an estimate (``Expected.error``): a ten-sample average is off by a part of one draw, and
a namespace's movement, the median of one report's draws, by a part of one draw for every bundle of it at once. A
broker's level read from such traffic is a point or so off where topics jitter by tens of percent; the trigger allows
for that before it calls two brokers further apart than the target.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import NamedTuple, Protocol

import numpy as np

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.averages import NUM_SHORT_SAMPLES, MessageAverage
from pulsar_lb_operator.strategies.snapshots import BundleStats, ClusterSnapshot

MIN_SAMPLES = 3  # an average of fewer samples is one or two draws itself
ROUNDING = 1e-9  # a scale this close to 1 is the floats' rounding: the report stands, and no plan turns on it
MAD_TO_SIGMA = 1.4826  # the median absolute deviation of normal noise times this is its standard deviation
Traffic = tuple[float, float, float]  # msg rate in + out, throughput in, throughput out
# a ten-sample running average of draws is off by √(α/(2 − α)) of one draw (α = 1/10: an exponential average's spread)
AVERAGE_ERROR = math.sqrt((1 / NUM_SHORT_SAMPLES) / (2 - 1 / NUM_SHORT_SAMPLES))
MEDIAN_ERROR = math.sqrt(math.pi / 2)  # a median of n normal draws is off by √(π/2)/√n of one


class Averaged(Protocol):
    """A bundle's data with its short-term average (``loaddata.BundleData``)."""

    @property
    def short(self) -> MessageAverage: ...


class Expected(NamedTuple):
    """``traffic``: each bundle whose report departs from what it is expected to carry, with that; a bundle left out
    is expected to carry what its report says. ``jitter``: a bundle's draws' spread around its namespace's movement,
    as a fraction of its average (0: none shown); ``sizes``: per namespace read so, its bundles."""

    traffic: dict[str, Traffic]
    jitter: float = 0.0
    sizes: Mapping[str, int] = MappingProxyType({})

    def error(self, costs: Iterable[tuple[str, float]]) -> float:
        """How far a level made of bundles expected so may be off (one standard error), in the units of ``costs``
        (each bundle's name and what its traffic costs): each bundle's average is off by a part of a draw, on its
        own, and its namespace's movement by a part of a draw for all of the namespace's bundles at once."""
        if not self.jitter:
            return 0.0
        together: dict[str, float] = defaultdict(float)
        alone = 0.0
        for bundle, cost in costs:
            namespace = bundle.rpartition("/")[0]
            if namespace in self.sizes:
                together[namespace] += cost
                alone += cost * cost
        common = sum((cost * MEDIAN_ERROR) ** 2 / self.sizes[ns] for ns, cost in together.items())
        return self.jitter * math.sqrt(common + AVERAGE_ERROR**2 * alone)


def expected_traffic(snapshot: ClusterSnapshot, bundle_data: Mapping[str, Averaged]) -> Expected:
    """What each bundle is expected to carry (see the module's docstring). One pass over the reports gathers each
    bundle's rate against its average; the rest is numpy (a cycle of 100,000 bundles reads every one)."""
    stats: list[BundleStats] = []
    names: list[str] = []
    ratios: list[float] = []
    groups: list[int] = []
    namespaces: dict[str, int] = {}
    get = bundle_data.get
    for report in snapshot.brokers.values():
        for bundle, reported in report.lastStats.items():
            data = get(bundle)
            if data is None:
                continue
            short = data.short
            if short.num_samples < MIN_SAMPLES:
                continue
            average = short.msgRateIn + short.msgRateOut
            ratio = (reported.msgRateIn + reported.msgRateOut) / average if average > 0 else 0.0
            if not 0 < ratio < math.inf:  # idle, or rates past what a float's division holds
                continue
            namespace = bundle.rpartition("/")[0]
            stats.append(reported)
            names.append(bundle)
            ratios.append(ratio)
            groups.append(namespaces.setdefault(namespace, len(namespaces)))
    if not ratios:
        return Expected({})
    group = np.array(groups, dtype=np.intp)
    departure = np.array(ratios) - 1
    order = np.lexsort((departure, group))  # by namespace, then departure: each namespace's median by position
    sizes = np.bincount(group, minlength=len(namespaces))
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    ranked = departure[order]
    common = (ranked[starts + (sizes - 1) // 2] + ranked[starts + sizes // 2]) / 2
    system = np.array([bundle_names.is_system_namespace(ns) for ns in namespaces])
    readable = (sizes > 1) & ~system  # per namespace: a bundle alone in its namespace has nothing to tell its jitter by
    kept = readable[group]
    alone = departure - common[group]
    if not kept.any():
        return Expected({})
    band = 2 * MAD_TO_SIGMA * float(np.median(np.abs(alone[kept])))
    beyond = np.sign(alone) * np.maximum(np.abs(alone) - band, 0.0)  # what the jitter cannot make
    with np.errstate(over="ignore", invalid="ignore"):
        scale = (1 + common[group] + beyond) / (1 + departure)
    changed = kept & np.isfinite(scale) & (np.abs(scale - 1) > ROUNDING)
    expected: dict[str, Traffic] = {}
    for k, factor in zip(np.flatnonzero(changed).tolist(), scale[changed].tolist()):
        rate, bytes_in, bytes_out = stats[k].traffic
        expected[names[k]] = (rate * factor, bytes_in * factor, bytes_out * factor)
    return Expected(expected, band / 2, {ns: int(sizes[g]) for ns, g in namespaces.items() if readable[g]})
