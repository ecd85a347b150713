"""AvgShedder's placement half: the destination the shedder planned, else a hash-random broker."""

from __future__ import annotations

from collections.abc import Sequence

from pulsar_lb_operator.strategies.placement.common import PlacementContext
from pulsar_lb_operator.strategies.shedding.avg import expected_broker

NAME = "AvgShedder"


def select(candidates: Sequence[str], bundle: str, ctx: PlacementContext) -> str | None:
    planned = ctx.planned.get(bundle)
    if planned is not None and planned in candidates:
        return planned
    chosen = expected_broker(candidates, ctx.rng)
    if chosen is not None:
        ctx.planned[bundle] = chosen
    return chosen
