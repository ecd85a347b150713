"""What a strategy takes, returns and declares: the one seam between the planner and every strategy.

Pulsar wires its strategies by class name and special-cases a few by name (AvgShedder's shedding and
placement halves pair only with each other; TransferShedder picks its own destinations and drops one the
policies refuse). Here each strategy declares those traits, and the planner (``planner.py``) reads the
declarations, never a name, so a new strategy is one module: build a ``Shedder`` (or any object with
``SheddingStrategy``'s members) and pass it to ``register_shedding`` (``registry.py``).

The shapes are Pulsar's interfaces: a shedding strategy is LoadSheddingStrategy.findBundlesForUnloading, a
placement strategy ModularLoadManagerStrategy.selectBroker, a split strategy BundleSplitStrategy.findBundlesToSplit
— each over the cycle's immutable load data, returning what it decided and, for shedding, its next state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.placement.common import PlacementContext
from pulsar_lb_operator.strategies.placement.least_long_term_message_rate import NAME as LEAST_LONG_TERM_MESSAGE_RATE
from pulsar_lb_operator.strategies.plans import Split
from pulsar_lb_operator.strategies.profile import HotBundle
from pulsar_lb_operator.strategies.shedding.common import SheddingResult
from pulsar_lb_operator.strategies.state import StrategyState

# What becomes of an unload whose shedder chose a destination the namespace policies refuse:
# "skip": dropped (TransferShedder.isTransferable: not transferable); "place": placed by the placement strategy.
RefusedDestination = Literal["skip", "place"]


class SheddingStrategy(Protocol):
    """Which bundles leave which broker this cycle, and the strategy's next state.

    ``splits`` are the split strategy's picks of this cycle, passed only to a strategy that ``plans_splits``.
    """

    @property
    def name(self) -> str:
        """The name it is registered and configured by (``loadBalancerLoadSheddingStrategy``)."""
        ...

    @property
    def default_placement(self) -> str:
        """The placement strategy it places with when none is configured."""
        ...

    @property
    def own_placement(self) -> str | None:
        """The placement strategy that is its own placement half (AvgShedder's): a placement strategy that
        ``follows_plan`` is used only with a shedder naming it here; with any other, that shedder's default."""
        ...

    @property
    def places_itself(self) -> bool:
        """Its unloads carry their own destination (TransferShedder's transfers): the planner checks it against
        the namespace policies instead of asking the placement strategy, which places only unloads without one."""
        ...

    @property
    def refused_destination(self) -> RefusedDestination:
        """What becomes of an unload whose own destination the namespace policies refuse."""
        ...

    @property
    def plans_splits(self) -> bool:
        """It plans the split strategy's picks together with its unloads: the split strategy runs before it, and
        the result's ``splits`` are the ones carried out. Otherwise it runs after shedding, as Pulsar runs it."""
        ...

    def __call__(
        self, load: LoadData, config: LoadBalancerConfig, state: StrategyState, splits: Sequence[Split] = ()
    ) -> SheddingResult: ...


class PlacementStrategy(Protocol):
    """The broker ``bundle`` goes to among ``candidates`` (None: none), with the cycle's context."""

    @property
    def name(self) -> str:
        """The name it is registered and configured by (``loadBalancerLoadPlacementStrategy``)."""
        ...

    @property
    def follows_plan(self) -> bool:
        """It places by its shedder's plan (``PlacementContext.planned``): the placement half of one shedder."""
        ...

    def __call__(self, candidates: Sequence[str], bundle: str, ctx: PlacementContext) -> str | None: ...


class SplitStrategy(Protocol):
    """The bundles to split this cycle and notes on the hot ones left whole; ``skip``: bundles this cycle already
    moves; ``sustained``: the aggregated profile's hot bundles, when there is a profile."""

    def __call__(
        self,
        load: LoadData,
        config: LoadBalancerConfig,
        skip: frozenset[str] = frozenset(),
        sustained: Mapping[str, HotBundle] | None = None,
    ) -> tuple[list[Split], list[str]]: ...


ShedFunction = Callable[[LoadData, LoadBalancerConfig, StrategyState], SheddingResult]
SplitPlanningShedFunction = Callable[[LoadData, LoadBalancerConfig, StrategyState, Sequence[Split]], SheddingResult]
SelectFunction = Callable[[Sequence[str], str, PlacementContext], "str | None"]


@dataclass(frozen=True, kw_only=True)
class _Declared:
    """What a shedding strategy declares; the defaults are a classic Pulsar shedder's (OverloadShedder's)."""

    name: str
    default_placement: str = LEAST_LONG_TERM_MESSAGE_RATE
    own_placement: str | None = None
    places_itself: bool = False
    refused_destination: RefusedDestination = "place"


@dataclass(frozen=True, kw_only=True)
class Shedder(_Declared):
    """A shedding strategy made of a function of the load data, the configuration and its state."""

    shed: ShedFunction
    plans_splits: ClassVar[bool] = False

    def __call__(
        self, load: LoadData, config: LoadBalancerConfig, state: StrategyState, splits: Sequence[Split] = ()
    ) -> SheddingResult:
        if splits:
            raise ValueError(f"{self.name} does not plan splits: the split strategy runs after it")
        return self.shed(load, config, state)


@dataclass(frozen=True, kw_only=True)
class SplitPlanningShedder(_Declared):
    """A shedding strategy whose function also takes the split strategy's picks and plans them with its unloads."""

    shed: SplitPlanningShedFunction
    plans_splits: ClassVar[bool] = True

    def __call__(
        self, load: LoadData, config: LoadBalancerConfig, state: StrategyState, splits: Sequence[Split] = ()
    ) -> SheddingResult:
        return self.shed(load, config, state, splits)


@dataclass(frozen=True, kw_only=True)
class Placer:
    """A placement strategy made of its selection function."""

    name: str
    select: SelectFunction
    follows_plan: bool = False

    def __call__(self, candidates: Sequence[str], bundle: str, ctx: PlacementContext) -> str | None:
        return self.select(candidates, bundle, ctx)
