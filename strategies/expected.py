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
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Protocol

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.averages import MessageAverage
from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot

MIN_SAMPLES = 3  # an average of fewer samples is one or two draws itself
ROUNDING = 1e-9  # a scale this close to 1 is the floats' rounding: the report stands, and no plan turns on it
MAD_TO_SIGMA = 1.4826  # the median absolute deviation of normal noise times this is its standard deviation
Traffic = tuple[float, float, float]  # msg rate in + out, throughput in, throughput out


class Averaged(Protocol):
    """A bundle's data with its short-term average (``loaddata.BundleData``)."""

    @property
    def short(self) -> MessageAverage: ...


def expected_traffic(snapshot: ClusterSnapshot, bundle_data: Mapping[str, Averaged]) -> dict[str, Traffic]:
    """Each bundle whose report departs from what it is expected to carry, with that (see the module's docstring);
    a bundle left out is expected to carry what its report says."""
    departures: dict[str, list[tuple[str, float, Traffic]]] = {}  # namespace → (bundle, relative departure, report)
    for report in snapshot.brokers.values():
        for bundle, stats in report.lastStats.items():
            data = bundle_data.get(bundle)
            average = None if data is None else data.short
            if average is None or average.num_samples < MIN_SAMPLES or bundle_names.is_system_bundle(bundle):
                continue
            ratio = stats.msg_rate / average.msg_rate if average.msg_rate > 0 else 0.0
            if not 0 < ratio < math.inf:  # idle, or rates past what a float's division holds
                continue
            group = departures.setdefault(bundle_names.namespace_of(bundle), [])
            group.append((bundle, ratio - 1, stats.traffic))
    common = {ns: statistics.median(d for _, d, _ in group) for ns, group in departures.items()}
    own = [abs(d - common[ns]) for ns, group in departures.items() if len(group) > 1 for _, d, _ in group]
    if not own:
        return {}
    band = 2 * MAD_TO_SIGMA * statistics.median(own)
    expected: dict[str, Traffic] = {}
    for ns, group in departures.items():
        if len(group) < 2:
            continue
        for bundle, departure, reported in group:
            alone = departure - common[ns]
            beyond = math.copysign(max(abs(alone) - band, 0.0), alone)  # what the jitter cannot make
            scale = (1 + common[ns] + beyond) / (1 + departure)
            if abs(scale - 1) > ROUNDING and math.isfinite(scale):
                expected[bundle] = (reported[0] * scale, reported[1] * scale, reported[2] * scale)
    return expected
