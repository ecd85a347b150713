"""Strategy names → implementations. Names are Pulsar's class names (the short form or the full one)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.errors import UserError
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.placement import avg as avg_placement
from pulsar_lb_operator.strategies.placement import least_long_term_message_rate, least_resource_usage_with_weight
from pulsar_lb_operator.strategies.placement.common import PlacementContext
from pulsar_lb_operator.strategies.shedding import avg, overload, predictive, threshold, transfer, uniform
from pulsar_lb_operator.strategies.shedding.common import SheddingResult
from pulsar_lb_operator.strategies.state import StrategyState

Shedder = Callable[[LoadData, LoadBalancerConfig, StrategyState], SheddingResult]
Placer = Callable[[Sequence[str], str, PlacementContext], "str | None"]

SHEDDING: dict[str, Shedder] = {
    overload.NAME: overload.shed,
    threshold.NAME: threshold.shed,
    uniform.NAME: uniform.shed,
    avg.NAME: avg.shed,
    transfer.NAME: transfer.shed,
    predictive.NAME: predictive.shed,
}
PLACEMENT: dict[str, Placer] = {
    least_long_term_message_rate.NAME: least_long_term_message_rate.select,
    least_resource_usage_with_weight.NAME: least_resource_usage_with_weight.select,
    avg_placement.NAME: avg_placement.select,
}
# Shedders that choose the destination themselves (the extensible manager's transfer, and ours).
SELF_PLACING = frozenset({transfer.NAME, predictive.NAME})


class UnknownStrategyError(UserError, ValueError):
    """A strategy name that is not in the registry."""


def _canonical(name: str, known: dict[str, object], kind: str) -> str:
    short = name.strip().rsplit(".", 1)[-1]
    for candidate in known:
        if candidate.lower() == short.lower():
            return candidate
    raise UnknownStrategyError(f"unknown {kind} strategy {name!r} (known: {', '.join(sorted(known))})")


def shedding_name(name: str) -> str:
    return _canonical(name, SHEDDING, "shedding")


def placement_name(name: str) -> str:
    return _canonical(name, PLACEMENT, "placement")


def default_placement(shedding: str) -> str:
    """PR #26609: AvgShedder pairs with itself; an explicit other shedder falls back to LeastLongTermMessageRate.

    TransferShedder places by itself; its fallback (transfer disabled) is the extensible manager's
    LeastResourceUsageWithWeight.
    """
    if shedding in (avg.NAME, predictive.NAME):  # ours falls back to AvgShedder's behaviour
        return avg_placement.NAME
    if shedding == transfer.NAME:
        return least_resource_usage_with_weight.NAME
    return least_long_term_message_rate.NAME


def paired_placement(shedding: str, placement: str) -> str:
    """The placement Pulsar actually uses for a (shedding, placement) pair.

    AvgShedder's placement half only follows the plan its own shedding half made, so Pulsar's
    ModularLoadManagerImpl.createLoadBalanceStrategies pairs them (one instance) only when both are
    AvgShedder; with any other shedder, loadBalancerLoadPlacementStrategy=AvgShedder (also the default
    after PR #26609) falls back to LeastLongTermMessageRate (ModularLoadManagerImplStrategyTest.
    testExplicitClassicShedderFallsBackToLeastLongTermMessageRatePlacement). Ours (PredictivePairingShedder)
    plans like AvgShedder and keeps it; TransferShedder falls back to its own default.
    """
    if placement == avg_placement.NAME and shedding not in (avg.NAME, predictive.NAME):
        return default_placement(shedding)
    return placement
