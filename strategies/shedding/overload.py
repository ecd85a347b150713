"""OverloadShedder: shed from every broker whose weighted max resource usage reaches the threshold."""

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

NAME = "OverloadShedder"


def shed(load: LoadData, config: LoadBalancerConfig, state: StrategyState) -> SheddingResult:
    threshold = config.overload_threshold
    unloads: list[Unload] = []
    notes: list[str] = []
    for broker in sorted(load.snapshot.brokers):
        usage = weighted_usage(load, broker, config)
        if usage < threshold:
            continue
        broker_load = load.snapshot.brokers[broker]
        percent = usage - threshold + 0.05
        min_offload = broker_load.msg_throughput * percent
        if len(broker_load.bundles) <= 1:
            notes.append(f"{NAME}: {broker} is overloaded ({usage:.1%}) but has {len(broker_load.bundles)} bundle(s)")
            continue
        why = (
            f"{NAME}: {broker} usage {usage:.1%} >= {threshold:.0%}; offload {percent:.1%} of "
            f"{fmt_bytes(broker_load.msg_throughput)} = {fmt_bytes(min_offload)}"
        )
        unloads.extend(select_by_short_term_throughput(load, broker, min_offload, why))
    return SheddingResult(tuple(unloads), state, tuple(notes))
