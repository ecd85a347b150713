"""LeastLongTermMessageRate: the broker with the least long-term msg rate, counting bundles already
placed on it this cycle, so one cycle's bundles do not all land on one broker.

Pulsar scores every candidate on every selection. A broker's score changes only when a bundle is
preallocated to it, so here every broker is scored once per cycle, in a ranking lowest first, and a
selection walks the ranking from the top and rescores only the brokers with preallocated bundles:
the same choice, without a pass over a thousand brokers for each of thousands of unloads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pulsar_lb_operator.strategies.placement.common import PlacementContext

NAME = "LeastLongTermMessageRate"


def broker_score(broker: str, ctx: PlacementContext) -> float:
    usage = ctx.load.snapshot.index.weighted_usage(broker, ctx.config.weights)
    if usage > ctx.config.overload_threshold:
        return math.inf
    preallocated = sum(ctx.load.bundle_or_default(b).long.msg_rate for b in ctx.preallocated.get(broker, []))
    return preallocated + ctx.load.long_term_msg_rate(broker)


def _ranking(ctx: PlacementContext) -> list[tuple[float, str]]:
    """Every broker's score with nothing preallocated, lowest first (then by name); made once per context."""
    ranking = ctx.memo.get(NAME)
    if ranking is None:
        unallocated = PlacementContext(ctx.load, ctx.config, ctx.rng)
        ranking = ctx.memo[NAME] = sorted((broker_score(b, unallocated), b) for b in ctx.load.snapshot.brokers)
    return ranking


def select(candidates: Sequence[str], bundle: str, ctx: PlacementContext) -> str | None:
    """A random one of the candidates with the lowest score."""
    allowed = set(candidates)
    rescored = {b: broker_score(b, ctx) for b in ctx.preallocated if b in allowed}
    lowest = min(rescored.values(), default=math.inf)
    best = [b for b, value in rescored.items() if value == lowest]
    for value, broker in _ranking(ctx):
        if value > lowest:
            break
        if broker not in allowed or broker in rescored:
            continue
        if value < lowest:
            best, lowest = [broker], value
        else:
            best.append(broker)
    return ctx.rng.choice(sorted(best)) if best else None
