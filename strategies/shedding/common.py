"""What every shedder takes and returns, and the bundle choice OverloadShedder and ThresholdShedder share."""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.plans import Split, Unload
from pulsar_lb_operator.strategies.state import StrategyState
from pulsar_lb_operator.strategies.units import fmt_bytes


@dataclass(frozen=True)
class SheddingResult:
    """Unloads chosen by a shedder (destination None: placement decides) and its next state.

    ``splits``: only from a shedder that plans splits together with its unloads (ours); they are carried out
    before the unloads, which may move their halves."""

    unloads: tuple[Unload, ...]
    state: StrategyState
    notes: tuple[str, ...] = ()
    splits: tuple[Split, ...] = ()


def select_by_short_term_throughput(load: LoadData, broker: str, min_offload: float, why: str) -> list[Unload]:
    """Largest short-term throughput first until ``min_offload`` is reached; always at least one.

    Skips bundles in the grace period and system namespaces (LoadManagerShared / shedders' loop).
    """
    candidates = sorted(
        ((bundle, data.short.msg_throughput) for bundle, data in load.shedding_candidates(broker)),
        key=lambda item: (-item[1], item[0]),
    )
    chosen: list[Unload] = []
    marked = 0.0
    for bundle, throughput in candidates:
        if marked < min_offload or not chosen:
            marked += throughput
            chosen.append(
                Unload(
                    bundle,
                    broker,
                    None,
                    f"{why}; bundle short-term throughput {fmt_bytes(throughput)}, "
                    f"marked {fmt_bytes(marked)} of {fmt_bytes(min_offload)}",
                )
            )
    return chosen


def weighted_usage(load: LoadData, broker: str, config: LoadBalancerConfig) -> float:
    return load.snapshot.brokers[broker].max_resource_usage_with_weight(config.weights)
