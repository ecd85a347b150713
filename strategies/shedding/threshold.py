"""ThresholdShedder: shed from brokers whose history-weighted usage exceeds the cluster average + threshold.

The history EMA (loadBalancerHistoryResourcePercentage, 0.9) is kept faithfully, including the
over-unloading it causes (PIP-364): that is what users of this strategy get from Pulsar.
"""

from __future__ import annotations

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.plans import Unload
from pulsar_lb_operator.strategies.shedding.common import (
    SheddingResult,
    select_by_short_term_throughput,
    weighted_usage,
)
from pulsar_lb_operator.strategies.state import StrategyState
from pulsar_lb_operator.strategies.units import fmt_bytes

NAME = "ThresholdShedder"


def _update_and_average(load: LoadData, config: LoadBalancerConfig, ema: dict[str, float]) -> float:
    """One EMA step per broker; returns the mean over the brokers of this snapshot."""
    history = config.loadBalancerHistoryResourcePercentage
    brokers = sorted(load.snapshot.brokers)
    for broker in brokers:
        usage = weighted_usage(load, broker, config)
        ema[broker] = usage if broker not in ema else ema[broker] * history + (1 - history) * usage
    return sum(ema[b] for b in brokers) / len(brokers) if brokers else 0.0


def shed(load: LoadData, config: LoadBalancerConfig, state: StrategyState) -> SheddingResult:
    threshold = config.loadBalancerBrokerThresholdShedderPercentage / 100
    min_throughput = config.loadBalancerBundleUnloadMinThroughputThreshold * 1024 * 1024
    ema = dict(state.threshold_ema)
    average = _update_and_average(load, config, ema)
    unloads: list[Unload] = []
    notes: list[str] = []
    if average == 0:
        return SheddingResult((), state.evolve(threshold_ema=ema), ("ThresholdShedder: average usage is 0",))
    for broker in sorted(load.snapshot.brokers):
        current = ema[broker]
        if current < average + threshold:
            continue
        broker_load = load.snapshot.brokers[broker]
        percent = current - average - threshold + 0.05
        min_offload = broker_load.msg_throughput * percent
        if min_offload < min_throughput:
            notes.append(
                f"{NAME}: {broker} above average but offload {fmt_bytes(min_offload)} < minimum "
                f"{fmt_bytes(min_throughput)}"
            )
            continue
        if len(broker_load.bundles) <= 1:
            notes.append(f"{NAME}: {broker} is above average but has {len(broker_load.bundles)} bundle(s)")
            continue
        why = (
            f"{NAME}: {broker} history usage {current:.1%} >= average {average:.1%} + {threshold:.0%}; "
            f"offload {percent:.1%} of {fmt_bytes(broker_load.msg_throughput)} = {fmt_bytes(min_offload)}"
        )
        unloads.extend(select_by_short_term_throughput(load, broker, min_offload, why))
    if not unloads and config.lowerBoundarySheddingEnabled:
        unloads.extend(_lower_boundary(load, config, ema, threshold, min_throughput))
    return SheddingResult(tuple(unloads), state.evolve(threshold_ema=ema), tuple(notes))


def _lower_boundary(
    load: LoadData, config: LoadBalancerConfig, ema: dict[str, float], threshold: float, min_throughput: float
) -> list[Unload]:
    """Shed from the most loaded broker when another is below average − threshold.

    As in Pulsar, this applies a second EMA step in the same cycle.
    """
    average = _update_and_average(load, config, ema)
    max_broker: str | None = None
    max_usage = average - threshold
    has_below = False
    for broker in sorted(load.snapshot.brokers):
        if ema[broker] > max_usage and len(load.snapshot.brokers[broker].bundles) > 1:
            max_usage, max_broker = ema[broker], broker
        if ema[broker] < average - threshold:
            has_below = True
    if max_broker is None or not has_below:
        return []
    min_offload = load.snapshot.brokers[max_broker].msg_throughput * threshold * 0.5
    if min_throughput > min_offload:
        return []
    why = (
        f"{NAME} (lower boundary): {max_broker} history usage {max_usage:.1%} is the highest and a broker is "
        f"below average {average:.1%} − {threshold:.0%}; offload {fmt_bytes(min_offload)}"
    )
    return select_by_short_term_throughput(load, max_broker, min_offload, why)
