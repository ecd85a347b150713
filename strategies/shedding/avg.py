"""AvgShedder (PIP-364): pair the most and least loaded brokers and even out their traffic.

Shedding and placement are bound: every bundle unloaded from the high broker of a pair is planned
onto the low broker of the same pair. Jitter is absorbed by per-broker hit counters (the
multiple-hit note): a pair acts when either broker has been in a qualifying pair enough
consecutive cycles, even if its partner changed.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.documents import one_more
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.plans import Unload
from pulsar_lb_operator.strategies.shedding.common import SheddingResult
from pulsar_lb_operator.strategies.state import StrategyState
from pulsar_lb_operator.strategies.units import fmt_bytes

NAME = "AvgShedder"


def score(load: LoadData, broker: str, config: LoadBalancerConfig) -> float:
    """100 × instantaneous weighted max usage over cpu, direct memory and bandwidth (no memory, no history)."""
    return 100 * load.snapshot.brokers[broker].max_resource_usage_with_weight(config.weights, memory=False)


def find_broker_pairs(
    scores: dict[str, float], config: LoadBalancerConfig, high: dict[str, int], low: dict[str, int]
) -> list[tuple[str, str]]:
    """Two-pointer pairing over brokers sorted by score; updates the hit counters in place."""
    ordered = sorted(scores, key=lambda b: (scores[b], b))
    low_threshold = config.loadBalancerAvgShedderLowThreshold
    high_threshold = config.loadBalancerAvgShedderHighThreshold
    pairs: list[tuple[str, str]] = []
    i, j = 0, len(ordered) - 1
    while i <= j:
        lo, hi = ordered[i], ordered[j]
        diff = scores[hi] - scores[lo]
        if diff < low_threshold:
            for counters in (high, low):
                counters.pop(lo, None)
                counters.pop(hi, None)
        else:
            pairs.append((lo, hi))
            low[lo] = one_more(low.get(lo, 0))
            low[hi] = one_more(low.get(hi, 0))
            if diff < high_threshold:
                high.pop(lo, None)
                high.pop(hi, None)
            else:
                high[lo] = one_more(high.get(lo, 0))
                high[hi] = one_more(high.get(hi, 0))
        i += 1
        j -= 1
    if not pairs:
        high.clear()
        low.clear()
    return pairs


def _select_bundles(
    load: LoadData, config: LoadBalancerConfig, over: str, under: str, why: str
) -> tuple[list[Unload], str | None]:
    """Rate first, then throughput; greedy first-fit descending on short-term traffic."""
    brokers = load.snapshot.brokers
    max_rate, min_rate = brokers[over].msg_rate, brokers[under].msg_rate
    max_thr, min_thr = brokers[over].msg_throughput, brokers[under].msg_throughput
    need_rate = (max_rate - min_rate) * config.maxUnloadPercentage
    need_thr = (max_thr - min_thr) * config.maxUnloadPercentage
    if need_rate > config.minUnloadMessage:
        by_rate, remaining = True, need_rate
        amount = f"move {need_rate:.0f} msg/s of ({max_rate:.0f} − {min_rate:.0f}) × {config.maxUnloadPercentage:g}"
    elif need_thr > config.minUnloadMessageThroughput:
        by_rate, remaining = False, need_thr
        amount = f"move {fmt_bytes(need_thr)} of the throughput gap × {config.maxUnloadPercentage:g}"
    else:
        return [], (
            f"{NAME}: {over}→{under} triggered but the traffic gap is below minUnloadMessage / "
            f"minUnloadMessageThroughput"
        )
    candidates = [
        (bundle, data.short.msg_rate if by_rate else data.short.msg_throughput)
        for bundle, data in load.shedding_candidates(over)
    ]
    candidates.sort(key=lambda item: (-item[1], item[0]))
    unloads = []
    for bundle, traffic in candidates:
        if 0 < traffic <= remaining:
            remaining -= traffic
            unit = f"{traffic:.0f} msg/s" if by_rate else fmt_bytes(traffic)
            unloads.append(Unload(bundle, over, under, f"{why}; {amount}; bundle {unit}"))
    return unloads, None


def shed(load: LoadData, config: LoadBalancerConfig, state: StrategyState) -> SheddingResult:
    high = dict(state.avg_hits_high)
    low = dict(state.avg_hits_low)
    scores = {b: score(load, b, config) for b in load.snapshot.brokers}
    pairs = find_broker_pairs(scores, config, high, low)
    unloads: list[Unload] = []
    notes: list[str] = []
    hit_high = config.loadBalancerAvgShedderHitCountHighThreshold
    hit_low = config.loadBalancerAvgShedderHitCountLowThreshold
    for lo, hi in pairs:
        counts = (high.get(lo, 0), high.get(hi, 0), low.get(lo, 0), low.get(hi, 0))
        triggered = max(counts[:2]) >= hit_high or max(counts[2:]) >= hit_low
        diff = scores[hi] - scores[lo]
        hits = f"high hits {max(counts[:2])}/{hit_high}, low hits {max(counts[2:])}/{hit_low}"
        if not triggered:
            notes.append(f"{NAME}: pair {hi} ({scores[hi]:.1f}) / {lo} ({scores[lo]:.1f}) diff {diff:.1f}; {hits}")
            continue
        for counters in (high, low):
            counters.pop(lo, None)
            counters.pop(hi, None)
        why = f"{NAME}: {hi} score {scores[hi]:.1f} − {lo} score {scores[lo]:.1f} = {diff:.1f}; {hits}"
        chosen, note = _select_bundles(load, config, hi, lo, why)
        unloads.extend(chosen)
        if note:
            notes.append(note)
    return SheddingResult(tuple(unloads), state.evolve(avg_hits_high=high, avg_hits_low=low), tuple(notes))


def expected_broker(candidates: Sequence[str], rng: random.Random) -> str | None:
    """AvgShedder's placement for bundles it did not plan: CRC32 of a random number, mod the sorted brokers."""
    ordered = sorted(candidates)
    if not ordered:
        return None
    value = rng.randint(-(2**31), 2**31 - 1)
    return ordered[zlib.crc32(str(value).encode()) % len(ordered)]
