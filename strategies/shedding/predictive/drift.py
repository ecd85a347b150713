"""Where a broker's level is going: the drift its traffic shows, and the plan made on the levels a few cycles on.

Tenants' daily curves pull brokers apart slowly and steadily: one broker's traffic climbs half a point a cycle while
another's stays flat. A plan made on the levels as they are brings the climbing broker just inside the band with the
fewest moves, and the drift takes it out again two or three cycles later; the hit counters then need their full
count before anything moves, and the spread stays past the target all the while. Planned on where each broker will
be ``horizon`` cycles on (its steady level plus its drift over them), a climbing giver lands as far inside the band as
it will climb in that time, and a sinking receiver is filled that much higher: the balance holds about as long as
the counters take to act again.

A broker's drift is the median of the successive differences of its steady level over its last
``loadBalancerAvgShedderHitCountLowThreshold`` reports (the steady level follows the traffic its bundles are expected
to carry, not one report's jitter): a one-off step — a move, a surge, a restart — is one difference among them,
which the median ignores. It counts only beyond twice its standard error (a normal draw goes that far one time in
twenty) and where it takes the broker further than the samples' noise by the horizon (the band allows for that
much already, and a plan moved by less only trades one bundle for another), and it never moves a broker's planned
level by more than the band: beyond it a plan would move bundles for a level the broker is not at. The record moves
with each of the shedder's own moves that was carried out (``carried``), so a fill over several cycles is no drift,
and across a change of membership (``continued``). The hit counters go on reading the levels as they are.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.expected import MAD_TO_SIGMA, MEDIAN_ERROR

MIN_STEPS = 3  # a median of fewer differences is one or two of them: a move's step would read as a drift


def window(config: LoadBalancerConfig) -> int:
    """How many steady levels a broker's drift is read over: the low hit count's reports and the one before them
    (the cycles a broker cleared by a plan takes to be triggered again, and so how long a plan should hold)."""
    return config.loadBalancerAvgShedderHitCountLowThreshold + 1


def horizon(config: LoadBalancerConfig) -> float:
    """How many cycles on the plan reads the levels: half the low hit count's. A drifting giver planned at the band's
    edge there lands as far inside it now as it drifts in that time, and is back at the edge about halfway to when
    the counters could act again, rather than out of the band at once."""
    return config.loadBalancerAvgShedderHitCountLowThreshold / 2


def per_cycle(levels: Sequence[float]) -> float:
    """The drift of a broker's steady level per report (the module's docstring): the median of the successive
    differences, where it is beyond twice its standard error; 0 otherwise, or with fewer than ``MIN_STEPS``."""
    steps = [later - earlier for earlier, later in itertools.pairwise(levels)]
    if len(steps) < MIN_STEPS or not all(math.isfinite(s) for s in steps):
        return 0.0
    median = statistics.median(steps)
    sigma = MAD_TO_SIGMA * statistics.median(abs(s - median) for s in steps)
    error = MEDIAN_ERROR * sigma / math.sqrt(len(steps))
    return median if abs(median) > 2 * error else 0.0


def offsets(
    history: Mapping[str, Sequence[float]], brokers: set[str], config: LoadBalancerConfig, band: float, noise: float
) -> dict[str, float]:
    """How far each of ``brokers`` that drifts will have gone ``horizon`` cycles on, at most the band either way; none
    where that is within the samples' ``noise``, which the band already allows for, nor for a broker with fewer
    levels on record than the ``window``: a broker's first reports settle its level as its bundles' averages fill."""
    ahead, full = horizon(config), window(config)
    gone = {b: per_cycle(levels) * ahead for b in brokers if len(levels := history.get(b, ())) >= full}
    return {b: max(-band, min(band, by)) for b, by in gone.items() if abs(by) > noise}


def carried(history: Mapping[str, Sequence[float]], moved: Mapping[str, float]) -> dict[str, tuple[float, ...]]:
    """Each broker's record moved by what the last cycle's moves changed its level by (``moved``; a move not carried
    out — refused, skipped, a dry run — is not in it: ``StrategyState.forget_unloads``): the record reads as if the
    broker had always carried what it now does, and a fill over several cycles is no drift."""
    return {b: tuple(v + moved.get(b, 0.0) for v in levels) for b, levels in history.items()}


def continued(history: Mapping[str, Sequence[float]], levels: Mapping[str, float]) -> dict[str, tuple[float, ...]]:
    """Each broker's record moved to end at its level now: across a report where bundles moved that the shedder did
    not move (a broker left and its bundles were placed on the others, one joined, someone split a bundle), the step
    is no drift. A rolling restart places each leaving broker's bundles on the rest, a step on each of them every few
    cycles, and read as drifts they held the brokers a band apart."""
    return {
        b: tuple(v + levels[b] - record[-1] for v in record) if record and b in levels else tuple(record)
        for b, record in history.items()
    }


def remembered(
    history: Mapping[str, Sequence[float]], levels: Mapping[str, float], config: LoadBalancerConfig
) -> dict[str, tuple[float, ...]]:
    """Each broker's levels on record with this cycle's appended, the last ``window`` kept. Brokers that are gone
    are dropped, and a level that is not a finite number starts the broker's record again."""
    keep = window(config)
    kept = {}
    for b, level in levels.items():
        record = (*history.get(b, ()), level)[-keep:]
        kept[b] = record if all(math.isfinite(v) for v in record) else ()
    return kept
