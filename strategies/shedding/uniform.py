"""UniformLoadShedder: move traffic from the highest to the lowest broker by msg rate or throughput.

A port of master's ``impl/UniformLoadShedder.findBundlesForUnloading``:

* the max and min brokers are found separately for msg rate (in + out) and throughput (in + out),
  with strict comparisons (ties go to the first broker seen; Pulsar iterates a HashMap, we go by name);
* a minimum within ±1e-6 of zero counts as 1.0 (``EPS``), so an idle broker gives a large ratio
  instead of a division by zero;
* the msg-rate path (difference in percent of the minimum > ``loadBalancerMsgRateDifferenceShedderThreshold``)
  has priority over the throughput path (max / min > ``loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold``);
  a threshold of 0 or less disables its path;
* the amount to move is ``(int) ((max − min) × maxUnloadPercentage)``, held in a ``MutableInt``: the
  cast truncates (and saturates at Integer.MAX_VALUE), and each chosen bundle subtracts its own value
  truncated to an int (``MutableInt.add(Number)`` adds ``intValue()``);
* nothing is unloaded when the max broker owns a single bundle or the amount is below
  ``minUnloadMessage`` / ``minUnloadMessageThroughput``;
* candidates are the max broker's bundles (system namespaces and bundles in their grace period left
  out), largest short-term value first; each is taken when it is ≤ what is still to move, until
  ``maxUnloadBundleNumPerShedding`` bundles are chosen. No slack is added and bundles without traffic
  are not filtered out (older versions did both).
"""

from __future__ import annotations

import math

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.plans import Unload
from pulsar_lb_operator.strategies.shedding.common import SheddingResult
from pulsar_lb_operator.strategies.state import StrategyState
from pulsar_lb_operator.strategies.units import fmt_bytes

NAME = "UniformLoadShedder"
_EPS = 1e-6
_INT_MAX = 2**31 - 1
_INT_MIN = -(2**31)


def java_int(value: float) -> int:
    """Java's ``(int)`` cast of a double: truncation toward zero, saturating at the int range, NaN → 0."""
    if math.isnan(value):
        return 0
    if value >= _INT_MAX:
        return _INT_MAX
    if value <= _INT_MIN:
        return _INT_MIN
    return int(value)


def shed(load: LoadData, config: LoadBalancerConfig, state: StrategyState) -> SheddingResult:
    brokers = load.snapshot.brokers
    if not brokers:
        return SheddingResult((), state)
    max_rate = max_thr = -1.0
    min_rate = min_thr = float(_INT_MAX)  # MutableDouble(Integer.MAX_VALUE)
    rate_over = thr_over = rate_under = thr_under = ""
    for broker in sorted(brokers):
        rate, thr = brokers[broker].msg_rate, brokers[broker].msg_throughput
        if rate > max_rate:
            rate_over, max_rate = broker, rate
        if thr > max_thr:
            thr_over, max_thr = broker, thr
        if rate < min_rate:
            rate_under, min_rate = broker, rate
        if thr < min_thr:
            thr_under, min_thr = broker, thr
    if -_EPS <= min_rate <= _EPS:
        min_rate = 1.0
    if -_EPS <= min_thr <= _EPS:
        min_thr = 1.0
    rate_percent = (max_rate - min_rate) * 100 / min_rate
    thr_ratio = max_thr / min_thr
    rate_threshold = config.loadBalancerMsgRateDifferenceShedderThreshold
    thr_multiplier = config.loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold
    rate_exceeded = rate_threshold > 0 and rate_percent > rate_threshold
    thr_exceeded = thr_multiplier > 0 and thr_ratio > thr_multiplier
    if rate_exceeded:
        need = java_int((max_rate - min_rate) * config.maxUnloadPercentage)
        over, by_rate, floor = rate_over, True, config.minUnloadMessage
        why = (
            f"{NAME}: msg rate {max_rate:.0f} on {over} vs {min_rate:.0f} on {rate_under} differs by "
            f"{rate_percent:.0f}% > {rate_threshold:g}%; move {need} msg/s"
        )
    elif thr_exceeded:
        need = java_int((max_thr - min_thr) * config.maxUnloadPercentage)
        over, by_rate, floor = thr_over, False, config.minUnloadMessageThroughput
        why = (
            f"{NAME}: throughput {fmt_bytes(max_thr)} on {over} is {thr_ratio:.1f}× that of {thr_under} "
            f"> {thr_multiplier:g}×; move {need} B/s"
        )
    else:
        return SheddingResult((), state)
    over_bundles = brokers[over].bundles  # LocalBrokerData.getBundles()
    if len(over_bundles) <= 1 or need < floor:
        note = f"{why}, but nothing to unload (one bundle, or the amount is below the minimum)"
        return SheddingResult((), state, (note,))
    candidates = [  # getBundleDataForLoadShedding, of the report's bundles
        (bundle, data.short.msg_rate if by_rate else data.short.msg_throughput)
        for bundle, data in load.shedding_candidates(over)
        if bundle in over_bundles
    ]
    # Stable sort, largest first; Pulsar's tie order is its HashMap's, ours is the bundle name.
    candidates.sort(key=lambda item: (-item[1], item[0]))
    unloads: list[Unload] = []
    cap = config.maxUnloadBundleNumPerShedding
    for bundle, metric in candidates:
        if cap != -1 and len(unloads) >= cap:
            break
        if metric <= need:
            unloads.append(Unload(bundle, over, None, f"{why}; bundle {metric:.0f}, {need} left before it"))
            need -= java_int(metric)  # MutableInt.add(-metric): adds (-metric).intValue()
    return SheddingResult(tuple(unloads), state)
