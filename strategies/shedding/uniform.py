"""UniformLoadShedder: move traffic from the highest to the lowest broker by msg rate or throughput."""

from __future__ import annotations

from strategies.config import LoadBalancerConfig
from strategies.loaddata import LoadData
from strategies.plans import Unload
from strategies.shedding.common import SheddingResult
from strategies.state import StrategyState

NAME = "UniformLoadShedder"
_SLACK = 1000  # Pulsar's fixed tolerance when fitting a bundle into the amount to move


def shed(load: LoadData, config: LoadBalancerConfig, state: StrategyState) -> SheddingResult:
    brokers = load.snapshot.brokers
    max_rate = max_thr = -1.0
    min_rate = min_thr = float(2**31 - 1)
    rate_over = thr_over = rate_under = thr_under = ""
    for broker in sorted(brokers):  # strict comparisons: ties go to the first broker seen
        rate, thr = brokers[broker].msg_rate, brokers[broker].msg_throughput
        if rate > max_rate:
            rate_over, max_rate = broker, rate
        if thr > max_thr:
            thr_over, max_thr = broker, thr
        if rate < min_rate:
            rate_under, min_rate = broker, rate
        if thr < min_thr:
            thr_under, min_thr = broker, thr
    if not brokers:
        return SheddingResult((), state)
    min_rate = 1.0 if abs(min_rate) <= 1e-6 else min_rate
    min_thr = 1.0 if abs(min_thr) <= 1e-6 else min_thr
    rate_percent = (max_rate - min_rate) * 100 / min_rate
    thr_ratio = max_thr / min_thr
    rate_threshold = config.loadBalancerMsgRateDifferenceShedderThreshold
    thr_multiplier = config.loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold
    if rate_threshold > 0 and rate_percent > rate_threshold:
        need = int((max_rate - min_rate) * config.maxUnloadPercentage)
        over, under, by_rate, floor = rate_over, rate_under, True, config.minUnloadMessage
        why = (
            f"{NAME}: msg rate {max_rate:.0f} on {over} vs {min_rate:.0f} on {under} differs by "
            f"{rate_percent:.0f}% > {rate_threshold:.0f}%; move {need} msg/s"
        )
    elif thr_multiplier > 0 and thr_ratio > thr_multiplier:
        need = int((max_thr - min_thr) * config.maxUnloadPercentage)
        over, under, by_rate, floor = thr_over, thr_under, False, config.minUnloadMessageThroughput
        why = f"{NAME}: throughput on {over} is {thr_ratio:.1f}× that of {under} > {thr_multiplier:g}×; move {need} B/s"
    else:
        return SheddingResult((), state)
    if len(brokers[over].bundles) <= 1 or need < floor:
        return SheddingResult((), state, (f"{why}, but nothing to unload (bundles or amount below minimum)",))
    owned = brokers[over].owned_bundles()
    candidates = []
    for bundle, data in load.sheddable_bundles().items():
        if bundle not in owned or bundle in load.recently_unloaded:
            continue
        metric = data.short.msg_rate if by_rate else data.short.msg_throughput
        if metric > 0:
            candidates.append((bundle, metric))
    candidates.sort(key=lambda item: (-item[1], item[0]))
    unloads: list[Unload] = []
    cap = config.maxUnloadBundleNumPerShedding
    for bundle, metric in candidates:
        if cap != -1 and len(unloads) >= cap:
            break
        if metric <= need + _SLACK:
            unloads.append(Unload(bundle, over, None, f"{why}; bundle {metric:.0f}, {need} left before it"))
            need = int(need - metric)
    return SheddingResult(tuple(unloads), state)
