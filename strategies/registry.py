"""Strategy names → strategies. Names are Pulsar's class names (the short form or the full one).

Pulsar's strategies and ours are registered here, each with what it declares (``protocol.py``); another one
registers itself from its own module with ``register_shedding`` / ``register_placement``, and is then planned
with and configured by its name like these (``loadBalancerLoadSheddingStrategy``, ``--strategy``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

from pulsar_lb_operator.strategies.errors import UserError
from pulsar_lb_operator.strategies.placement import avg as avg_placement
from pulsar_lb_operator.strategies.placement import least_long_term_message_rate, least_resource_usage_with_weight
from pulsar_lb_operator.strategies.protocol import (
    PlacementStrategy,
    Placer,
    Shedder,
    SheddingStrategy,
    SplitPlanningShedder,
    SplitStrategy,
)
from pulsar_lb_operator.strategies.shedding import avg, overload, predictive, threshold, transfer, uniform
from pulsar_lb_operator.strategies.splitting.trigger import find_bundles_to_split

_SHEDDING: dict[str, SheddingStrategy] = {}
_PLACEMENT: dict[str, PlacementStrategy] = {}
# Read-only views: a strategy is added through the functions below, which check what it declares.
SHEDDING: Mapping[str, SheddingStrategy] = MappingProxyType(_SHEDDING)
PLACEMENT: Mapping[str, PlacementStrategy] = MappingProxyType(_PLACEMENT)

# The split strategy: the modular load manager's BundleSplitterTask (Pulsar has the one, and no key to choose).
SPLIT_STRATEGY: SplitStrategy = find_bundles_to_split

S = TypeVar("S", bound=SheddingStrategy)
P = TypeVar("P", bound=PlacementStrategy)


class UnknownStrategyError(UserError, ValueError):
    """A strategy name that is not in the registry."""


def _check_name(name: str, known: Mapping[str, object], kind: str) -> None:
    """A name a lookup can find, and only this strategy: names are matched without case and package."""
    if not name or name != name.strip() or "." in name:
        raise ValueError(f"a {kind} strategy's name must be a class name without package or spaces: {name!r}")
    taken = [other for other in known if other.lower() == name.lower()]
    if taken:
        raise ValueError(f"a {kind} strategy named {taken[0]} is already registered")


def register_placement(strategy: P) -> P:
    """Add a placement strategy under its ``name``; returns it, for a module to keep."""
    _check_name(strategy.name, _PLACEMENT, "placement")
    _PLACEMENT[strategy.name] = strategy
    return strategy


def register_shedding(strategy: S) -> S:
    """Add a shedding strategy under its ``name``; the placement strategies it names must be registered."""
    _check_name(strategy.name, _SHEDDING, "shedding")
    for placement in (strategy.default_placement, strategy.own_placement):
        if placement is not None and placement not in _PLACEMENT:
            raise ValueError(f"{strategy.name} names placement strategy {placement!r}, which is not registered")
    if strategy.refused_destination not in ("skip", "place"):
        raise ValueError(f"{strategy.name}: refused_destination must be 'skip' or 'place'")
    _SHEDDING[strategy.name] = strategy
    return strategy


def _canonical(name: str, known: Mapping[str, object], kind: str) -> str:
    short = name.strip().rsplit(".", 1)[-1]
    for candidate in known:
        if candidate.lower() == short.lower():
            return candidate
    raise UnknownStrategyError(f"unknown {kind} strategy {name!r} (known: {', '.join(sorted(known))})")


def shedding_name(name: str) -> str:
    return _canonical(name, _SHEDDING, "shedding")


def placement_name(name: str) -> str:
    return _canonical(name, _PLACEMENT, "placement")


def default_placement(shedding: str) -> str:
    """The placement a shedder places with when none is configured (its declaration).

    PR #26609: AvgShedder pairs with itself; another shedder falls back to LeastLongTermMessageRate, but
    TransferShedder to the extensible manager's LeastResourceUsageWithWeight (its fallback when transfer is
    disabled), and ours to AvgShedder's behaviour.
    """
    return _SHEDDING[shedding].default_placement


def paired_placement(shedding: str, placement: str) -> str:
    """The placement Pulsar actually uses for a (shedding, placement) pair.

    AvgShedder's placement half only follows the plan its own shedding half made, so Pulsar's
    ModularLoadManagerImpl.createLoadBalanceStrategies pairs them (one instance) only when both are
    AvgShedder; with any other shedder, loadBalancerLoadPlacementStrategy=AvgShedder (also the default
    after PR #26609) falls back to LeastLongTermMessageRate (ModularLoadManagerImplStrategyTest.
    testExplicitClassicShedderFallsBackToLeastLongTermMessageRatePlacement). Ours (PredictivePairingShedder)
    plans like AvgShedder and keeps it; TransferShedder falls back to its own default. Declared: a placement
    that ``follows_plan`` is kept only with a shedder whose ``own_placement`` it is.
    """
    shedder = _SHEDDING[shedding]
    if _PLACEMENT[placement].follows_plan and shedder.own_placement != placement:
        return shedder.default_placement
    return placement


register_placement(Placer(name=least_long_term_message_rate.NAME, select=least_long_term_message_rate.select))
register_placement(Placer(name=least_resource_usage_with_weight.NAME, select=least_resource_usage_with_weight.select))
register_placement(Placer(name=avg_placement.NAME, select=avg_placement.select, follows_plan=True))

register_shedding(Shedder(name=overload.NAME, shed=overload.shed))
register_shedding(Shedder(name=threshold.NAME, shed=threshold.shed))
register_shedding(Shedder(name=uniform.NAME, shed=uniform.shed))
# AvgShedder's unloads name the low broker of their pair; its placement half places them there.
register_shedding(
    Shedder(name=avg.NAME, shed=avg.shed, default_placement=avg_placement.NAME, own_placement=avg_placement.NAME)
)
register_shedding(
    Shedder(
        name=transfer.NAME,
        shed=transfer.shed,
        default_placement=least_resource_usage_with_weight.NAME,
        places_itself=True,
        refused_destination="skip",
    )
)
# Ours: its own destinations, a refused one placed like AvgShedder's unplanned bundles; the trigger's splits
# planned with its unloads (their halves placed the same cycle).
register_shedding(
    SplitPlanningShedder(
        name=predictive.NAME,
        shed=predictive.shed,
        default_placement=avg_placement.NAME,
        own_placement=avg_placement.NAME,
        places_itself=True,
    )
)
