"""LeastResourceUsageWithWeight: a random broker among those whose history-weighted usage is at least
loadBalancerAverageResourceUsageDifferenceThresholdPercentage below the candidates' average.

As in Pulsar, each selection advances the usage EMA one step, an idle or restarted broker (no
bundles or no traffic) forgets its history, and an empty candidate list falls back to all brokers.
"""

from __future__ import annotations

from collections.abc import Sequence

from pulsar_lb_operator.strategies.placement.common import PlacementContext

NAME = "LeastResourceUsageWithWeight"


def _usage(broker: str, ctx: PlacementContext) -> float:
    load = ctx.load.snapshot.brokers[broker]
    if not load.bundles or (load.msgRateIn == 0 and load.msgRateOut == 0):
        ctx.placement_ema.pop(broker, None)
    weighted = ctx.load.snapshot.index.weighted_usage(broker, ctx.config.weights, memory=False)
    history = ctx.config.loadBalancerHistoryResourcePercentage
    previous = ctx.placement_ema.get(broker)
    ctx.placement_ema[broker] = weighted if previous is None else previous * history + (1 - history) * weighted
    return ctx.placement_ema[broker]


def select(candidates: Sequence[str], bundle: str, ctx: PlacementContext) -> str | None:
    ordered = sorted(candidates)
    if not ordered:
        return None
    average = sum(_usage(b, ctx) for b in ordered) / len(ordered)
    margin = ctx.config.loadBalancerAverageResourceUsageDifferenceThresholdPercentage / 100
    best = [b for b in ordered if ctx.placement_ema.get(b, 1.0) + margin <= average]
    return ctx.rng.choice(best or ordered)
