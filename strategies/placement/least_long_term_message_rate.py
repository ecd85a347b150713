"""LeastLongTermMessageRate: the broker with the least long-term msg rate, counting bundles already
placed on it this cycle, so one cycle's bundles do not all land on one broker."""

from __future__ import annotations

import math
from collections.abc import Sequence

from strategies.placement.common import PlacementContext

NAME = "LeastLongTermMessageRate"


def broker_score(broker: str, ctx: PlacementContext) -> float:
    load = ctx.load.snapshot.brokers[broker]
    if load.max_resource_usage_with_weight(ctx.config.weights) > ctx.config.overload_threshold:
        return math.inf
    preallocated = sum(ctx.load.bundle_or_default(b).long.msg_rate for b in ctx.preallocated.get(broker, []))
    return preallocated + ctx.load.long_term_msg_rate(broker)


def select(candidates: Sequence[str], bundle: str, ctx: PlacementContext) -> str | None:
    best: list[str] = []
    lowest = math.inf
    for broker in sorted(candidates):
        value = broker_score(broker, ctx)
        if value < lowest:
            best, lowest = [broker], value
        elif value == lowest:
            best.append(broker)
    if not best:
        best = sorted(candidates)
    return ctx.rng.choice(best) if best else None
