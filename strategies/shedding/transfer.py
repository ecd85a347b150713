"""TransferShedder (PIP-192, extensible load manager): move top bundles from the highest to the lowest
brokers until the std of broker load is under loadBalancerBrokerLoadTargetStd; destinations are
chosen at unload time (a transfer), with swaps when a bundle is too large to move alone.

The brokers of the extensible manager compute their own EMAs; from LocalBrokerData we compute the
same (weightedMaxEMA and msgThroughputEMA, history 0.9) once per new report (``lastUpdate``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.plans import Unload
from pulsar_lb_operator.strategies.policies import shedding_allowed, transfer_filter
from pulsar_lb_operator.strategies.shedding.common import SheddingResult, fmt_bytes
from pulsar_lb_operator.strategies.snapshots import BrokerLoad, BundleStats
from pulsar_lb_operator.strategies.state import StrategyState, TransferBrokerEma

NAME = "TransferShedder"


def compare_bundle_stats(a: BundleStats, b: BundleStats) -> int:
    """NamespaceBundleStats.compareTo: lexicographic with dead-bands."""
    for x, y, band in (
        (a.msgThroughputIn, b.msgThroughputIn, 1e5),
        (a.msgThroughputOut, b.msgThroughputOut, 1e5),
        (a.msg_rate, b.msg_rate, 100),
        (a.topics + a.consumerCount + a.producerCount, b.topics + b.consumerCount + b.producerCount, 500),
        (a.cacheSize, b.cacheSize, 100000),
    ):
        if abs(x - y) > band:
            return -1 if x < y else 1
    return 0


def top_bundles(
    load: BrokerLoad, k: int, sheddable: Callable[[str], bool] | None = None
) -> list[tuple[str, BundleStats]]:
    """TopKBundles: the k largest non-system bundles with traffic, stored smallest first; ``sheddable``
    (of a namespace) leaves out those with namespace policies unless loadBalancerSheddingBundlesWithPoliciesEnabled."""
    eligible = [
        (name, stats)
        for name, stats in sorted(load.lastStats.items())
        if stats.msg_throughput > 0
        and not bundle_names.is_system_namespace(bundle_names.namespace_of(name))
        and (sheddable is None or sheddable(bundle_names.namespace_of(name)))
    ]
    by_stats = functools.cmp_to_key(lambda x, y: compare_bundle_stats(x[1], y[1]))
    eligible.sort(key=by_stats, reverse=True)
    return sorted(eligible[:k], key=by_stats)


def update_emas(load: LoadData, config: LoadBalancerConfig, state: StrategyState) -> dict[str, TransferBrokerEma]:
    """BrokerLoadData's EMAs: advanced only when a broker wrote a new report."""
    history = config.loadBalancerHistoryResourcePercentage
    emas = dict(state.transfer_ema)
    for broker, data in load.snapshot.brokers.items():
        weighted = data.max_resource_usage_with_weight(config.weights)
        previous = emas.get(broker)
        if previous is None:
            emas[broker] = TransferBrokerEma(weighted, data.msg_throughput, data.lastUpdate)
        elif data.lastUpdate != previous.updated_at:
            emas[broker] = TransferBrokerEma(
                previous.weighted_max_ema * history + (1 - history) * weighted,
                previous.msg_throughput_ema * history + (1 - history) * data.msg_throughput,
                data.lastUpdate,
            )
    return {b: e for b, e in emas.items() if b in load.snapshot.brokers}


def _square(x: float) -> float:
    """x², as infinity rather than OverflowError when a (state-given) load is beyond 1e154."""
    return x * x


@dataclass
class _LoadStats:
    """Running avg/std of broker load; ``offload`` moves load between two brokers (avg unchanged)."""

    n: int
    total: float
    squares: float

    @property
    def avg(self) -> float:
        return self.total / self.n

    @property
    def std(self) -> float:
        return math.sqrt(max(self.squares / self.n - _square(self.avg), 0.0))

    def offload(self, max_load: float, min_load: float, amount: float) -> None:
        new_max, new_min = max(0.0, max_load - amount), min_load + amount
        self.squares += _square(new_max) + _square(new_min) - _square(max_load) - _square(min_load)


def shed(load: LoadData, config: LoadBalancerConfig, state: StrategyState) -> SheddingResult:
    now = load.snapshot.taken_at
    brokers = load.snapshot.brokers
    emas = update_emas(load, config, state)
    recent_brokers = dict(state.transfer_recent_brokers)

    def skip(reason: str, hit_count: int) -> SheddingResult:
        new_state = state.evolve(
            transfer_ema=emas, transfer_recent_brokers=recent_brokers, transfer_hit_count=hit_count
        )
        return SheddingResult((), new_state, (f"{NAME}: skip ({reason})",))

    n, total, squares, outdated = 0, 0.0, 0.0, False
    for broker in sorted(brokers):
        data = brokers[broker]
        if now - data.lastUpdate > config.loadBalancerBrokerLoadDataTTLInSeconds * 1000:
            outdated = True
            continue
        if broker in recent_brokers:
            if data.lastUpdate - recent_brokers[broker] < config.loadBalanceSheddingDelayInSeconds * 1000:
                return skip(f"CoolDown: {broker} has not reported since its last unload", state.transfer_hit_count)
            del recent_brokers[broker]
        value = emas[broker].weighted_max_ema
        n, total, squares = n + 1, total + value, squares + _square(value)
    if n == 0:
        return skip("OutDatedData" if outdated else "NoBrokers", state.transfer_hit_count)
    stats = _LoadStats(n, total, squares)
    ordered = sorted(brokers, key=lambda b: (emas[b].weighted_max_ema, b))
    target_std = config.loadBalancerBrokerLoadTargetStd
    underload_factor = min(0.5, max(0.0, target_std / 2))
    min_idx, max_idx, shed_count = 0, len(ordered) - 1, 0

    def ema(broker: str) -> float:
        return emas[broker].weighted_max_ema

    def under_loaded(broker: str) -> bool:
        peak = ordered[max_idx]
        return ema(broker) < stats.avg * underload_factor or (
            emas[broker].msg_throughput_ema < emas[peak].msg_throughput_ema * underload_factor
        )

    def over_loaded(broker: str) -> bool:
        return ema(broker) > config.overload_threshold and ema(broker) > stats.avg + target_std

    hit_count = state.transfer_hit_count
    if stats.std > target_std or under_loaded(ordered[min_idx]) or over_loaded(ordered[max_idx]):
        hit_count += 1
    else:
        hit_count = 0
    if hit_count <= config.loadBalancerSheddingConditionHitCountThreshold:
        return skip(
            f"HitCount {hit_count}/{config.loadBalancerSheddingConditionHitCountThreshold}: "
            f"avg {stats.avg:.3f}, std {stats.std:.3f}",
            hit_count,
        )

    policies, with_policies = load.snapshot.policies, config.loadBalancerSheddingBundlesWithPoliciesEnabled
    k = config.loadBalancerMaxNumberOfBundlesInBundleLoadReport
    tops: dict[str, list[tuple[str, BundleStats]]] = {}  # each broker's TopKBundles, made when the loop reaches it

    def top_of(broker: str) -> list[tuple[str, BundleStats]]:
        if broker not in tops:
            tops[broker] = top_bundles(brokers[broker], k, lambda ns: shedding_allowed(ns, policies, with_policies))
        return tops[broker]

    transferable = transfer_filter(load.snapshot, config)  # TransferShedder.isTransferable
    unloads: list[Unload] = []
    notes: list[str] = []
    while shed_count < config.loadBalancerMaxNumberOfBrokerSheddingPerCycle and min_idx < max_idx:
        if stats.std > target_std:
            reason = "Overloaded"
        elif under_loaded(ordered[min_idx]):
            reason = "Underloaded"
        elif over_loaded(ordered[max_idx]):
            reason = "Overloaded"
        else:
            break
        hi, lo = ordered[max_idx], ordered[min_idx]
        max_idx -= 1
        max_load, min_load = ema(hi), ema(lo)
        offload = (max_load - min_load) / 2
        max_thr, min_thr = brokers[hi].msg_throughput, brokers[lo].msg_throughput
        if max_load <= 0 or max_thr <= 0:
            notes.append(f"{NAME}: NoLoadData for {hi}")
            continue
        target = max_thr * offload / max_load
        top = top_of(hi)
        if len(top) <= 1:
            if top:
                notes.append(f"{NAME}: NoBundles on {hi} (sole bundle)")
            else:  # TopBundlesLoadData empty (TopKBundles reports no zero-traffic bundle): NoLoadData
                notes.append(f"{NAME}: NoLoadData for {hi} (no top bundles)")
            continue
        why = (
            f"{NAME} {reason}: avg {stats.avg:.3f}, std {stats.std:.3f} (target {target_std:g}); "
            f"{hi} load {max_load:.3f} → {lo} load {min_load:.3f}; move {fmt_bytes(target)}"
        )
        min_iter = iter(top_of(lo))
        marked = gained = 0.0
        remaining = len(top)
        for bundle, stats_e in top:
            if bundle in load.recently_unloaded:
                continue
            if not transferable(bundle, hi, lo):
                # TransferShedder.isTransferable: the broker filters (applyNamespacePolicies with the brokers'
                # topic modes and isolation policies, the anti-affinity filter) must keep the min broker, and a
                # bundle with namespace policies moves only with loadBalancerSheddingBundlesWithPoliciesEnabled.
                continue
            if remaining <= 1:
                break
            size = stats_e.msg_throughput
            if size == 0:
                continue
            swaps: list[Unload] = []
            swap_thr = 0.0
            swapped = False
            if marked - gained + size > target:
                if config.loadBalancerTransferEnabled:
                    max_new = max_thr - marked + gained - size
                    min_new = min_thr + marked - gained + size
                    for other, other_stats in min_iter:
                        if not transferable(other, lo, hi):
                            continue  # isTransferable(minBundle, minBroker → maxBroker)
                        other_size = other_stats.msg_throughput
                        if other_size == 0:
                            continue
                        if max_new + other_size < max_thr and min_new - other_size < max_thr:
                            swaps.append(Unload(other, lo, hi, f"{why}; swap {fmt_bytes(other_size)} back"))
                            max_new += other_size
                            min_new -= other_size
                            swap_thr += other_size
                            if min_new <= max_new and max_new < 0.75 * max_thr:
                                swapped = True
                                break
                if not swapped:
                    break
            if config.loadBalancerTransferEnabled:
                if swapped:
                    unloads.extend(swaps)
                    if config.loadBalancerDebugModeEnabled:
                        # TransferShedder.findBundlesForUnloading adds the swap to trafficMarkedToGain only
                        # inside its `if (debugMode)` block: without debug mode a swap earns no credit.
                        gained += swap_thr
                unloads.append(Unload(bundle, hi, lo, f"{why}; bundle {fmt_bytes(size)}"))
            else:
                unloads.append(Unload(bundle, hi, None, f"{why}; bundle {fmt_bytes(size)}"))
            marked += size
            remaining -= 1
        if marked > 0:
            stats.offload(max_load, min_load, (marked - gained) * max_load / max_thr)
            shed_count += 1
            min_idx += 1
        else:
            notes.append(f"{NAME}: NoBundles on {hi} fit the target {fmt_bytes(target)}")
    if not unloads:
        new_state = state.evolve(
            transfer_ema=emas, transfer_recent_brokers=recent_brokers, transfer_hit_count=hit_count
        )
        return SheddingResult((), new_state, tuple(notes))
    for unload in unloads:
        recent_brokers[unload.source] = now
    new_state = state.evolve(transfer_ema=emas, transfer_recent_brokers=recent_brokers, transfer_hit_count=0)
    notes.append(f"{NAME}: std after the plan {stats.std:.4f}")
    return SheddingResult(tuple(unloads), new_state, tuple(notes))
