"""One move at a time: the bundle and destination that shrink Σ(usage − level)² most, as the forecast predicts.

What the end-state plan cannot do is left to this: a broker no set of its bundles brings into the band (a bundle
too big to move whole is split first, ``splits.py``). A move never leaves its destination above the overload
threshold (``ceiling``), nor above its source unless the destination ends within the band; nor — the mirror,
PIP-364's over unloading — its source below its destination unless the source ends within the band (for a planned
move, within the tolerance the plan was made with: ``planned_move``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.policies import candidates_for
from pulsar_lb_operator.strategies.shedding.predictive.forecast import (
    Forecast,
    Traffic,
    bundle_traffic,
    carried,
)

Move = tuple[str, str, str, tuple[float, float], tuple[float, float]]  # giver, bundle, taker, before, after
Choice = tuple[str, str, tuple[float, float], tuple[float, float]]  # bundle, destination, before, after


def gain(move: Move, level: float) -> float:
    """How much a move shrinks Σ(usage − level)² over its two brokers, as predicted."""
    _, _, _, before, after = move
    return sum(square(b - level) - square(a - level) for b, a in zip(before, after))


def gains(moves: Sequence[Move], level: float) -> float:
    """What a sequence of moves shrinks Σ(usage − level)² by: their gains add up, each starting where one ended."""
    return sum(gain(move, level) for move in moves)


def ceiling(config: LoadBalancerConfig, level: float, band: float) -> float:
    """The most a move may leave its destination at: Pulsar's overload threshold
    (loadBalancerBrokerOverloadedThresholdPercentage) — or, where the balanced level is within the band of it, the
    top of the band. Balance then puts brokers above the threshold anyway, and one that ends within the band is no
    hotter than the balanced cluster; as Pulsar's placement chooses among all brokers when every one is overloaded."""
    return max(config.loadBalancerBrokerOverloadedThresholdPercentage, level + band)


def square(x: float) -> float:
    """x², as infinity rather than OverflowError when a cost model predicts beyond 1e154 points."""
    return x * x


def allowed_brokers(load: LoadData, bundle: str) -> frozenset[str]:
    """``candidates_for`` the bundle (applyNamespacePolicies), computed once per snapshot and isolation policy:
    it depends on the namespace only through the policy matching it and whether its policies are known."""
    namespace = bundle_names.namespace_of(bundle)
    policies = load.snapshot.policies
    key = ("allowed brokers", policies.unknown_reason(namespace) is None, policies.policy_for(namespace))
    return load.snapshot.index.memo(key, lambda: frozenset(candidates_for(load.snapshot, bundle)))


def permitted(load: LoadData, bundles: Sequence[str], brokers: Sequence[str]) -> np.ndarray:
    """Bundles × brokers: whether each bundle's namespace policies allow each broker (``allowed_brokers``)."""
    mask = np.ones((len(bundles), len(brokers)), dtype=bool)
    for row, bundle in enumerate(bundles):
        allowed = allowed_brokers(load, bundle)
        if not allowed.issuperset(brokers):
            mask[row] = [broker in allowed for broker in brokers]
    return mask


def planned_move(
    forecast: Forecast,
    load: LoadData,
    giver: str,
    bundle: str,
    destination: str,
    level: float,
    band: float,
    config: LoadBalancerConfig,
    halves: Mapping[str, Traffic],
    reach: Callable[[str], float],
    refilled: bool = False,
) -> Move | None:
    """A planned move as the forecast sees it now; None if it would overload its destination, leave it above the
    giver and beyond its reach of the level, or (the mirror) leave the giver below its destination and beyond its
    reach, but for a giver the plan refills (``refilled``: ``endstate._through``). ``reach``: how far from the level
    the plan lets a broker end (``EndState.tolerance``: wider than the band for a broker the trigger has not flagged,
    which the hit counters leave alone there), never less than the band."""
    traffic = bundle_traffic(load, giver, bundle, halves)
    new_source = forecast.usage_with(giver, traffic, -1)
    new_destination = forecast.usage_with(destination, traffic, +1)
    limit = ceiling(config, level, band)
    up, down = max(reach(destination), band), max(reach(giver), band)
    beyond = new_destination > level + up or (new_source < level - down and not refilled)
    above = new_destination > new_source and beyond
    if new_destination > limit or above:
        return None
    return (
        giver,
        bundle,
        destination,
        (forecast.usage(giver), forecast.usage(destination)),
        (new_source, new_destination),
    )


def best_move(
    load: LoadData,
    forecast: Forecast,
    source: str,
    bundles: list[str],
    takers: set[str],
    level: float,
    config: LoadBalancerConfig,
    halves: Mapping[str, Traffic] | None = None,
    within: float | None = None,
) -> Choice | None:
    """``within``: a destination may end above the source if it ends at most this far above ``level`` (bundles and
    split pieces rarely fit exactly; the shedder passes its band); None: never.

    The (bundle, destination) that shrinks Σ(usage − level)² most without overshooting; on equal gains,
    the first by (bundle, destination).

    Every pair is scored, as ``best_move_pairwise`` does one at a time; here the destinations are the
    columns of arrays, so a bundle's effect on all of them is a few array operations — the same float
    operations, in the same order — instead of a Python loop over hundreds of brokers for each bundle.
    Should a forecast reach infinity (a cost model far out of range), the pair-by-pair loop decides.
    """
    u_source = forecast.usage(source)
    destinations = sorted(d for d in takers if d != source and forecast.usage(d) < level)
    movable = carried(load, source, sorted(bundles), halves)
    if not destinations or not movable:
        return None
    new_source = np.array([forecast.usage_with(source, t, -1) for _, t in movable])
    u_destination, new_destination = forecast.arrivals(destinations, np.array([t for _, t in movable]))
    with np.errstate(over="ignore", invalid="ignore"):
        gained = (
            np.square(u_source - level)
            + np.square(u_destination - level)
            - np.square(new_source - level)[:, np.newaxis]
            - np.square(new_destination - level)
        )
    if not (np.isfinite(new_source).all() and np.isfinite(new_destination).all() and np.isfinite(gained).all()):
        return best_move_pairwise(load, forecast, source, bundles, takers, level, config, halves, within)
    limit = ceiling(config, level, within or 0.0)
    # over-placement: the destination would end hotter than the source, or above the ceiling
    above = new_destination > new_source[:, np.newaxis]
    if within is not None:
        # the mirror: a source left below its destination and beyond the band under the level is over-unloaded
        above &= (new_destination > level + within) | (new_source[:, np.newaxis] < level - within)
    # namespace policies: only the brokers a bundle's namespace allows
    refused = ~permitted(load, [bundle for bundle, _ in movable], destinations)
    gained[above | (new_destination > limit) | refused] = -np.inf
    b, d = np.unravel_index(np.argmax(gained), gained.shape)  # the first of the largest: rows and columns are sorted
    if not gained[b, d] > 1e-9:
        return None
    bundle, destination = movable[b][0], destinations[d]
    new_destination_usage = forecast.usage_with(destination, movable[b][1], +1)
    return bundle, destination, (u_source, forecast.usage(destination)), (float(new_source[b]), new_destination_usage)


def best_move_pairwise(
    load: LoadData,
    forecast: Forecast,
    source: str,
    bundles: list[str],
    takers: set[str],
    level: float,
    config: LoadBalancerConfig,
    halves: Mapping[str, Traffic] | None = None,
    within: float | None = None,
) -> Choice | None:
    """``best_move`` one pair at a time (the reference it is tested against)."""
    u_source = forecast.usage(source)
    destinations = [d for d in takers if d != source and forecast.usage(d) < level]
    limit = ceiling(config, level, within or 0.0)
    best, best_gain = None, 1e-9
    for bundle, traffic in carried(load, source, bundles, halves):
        new_source = forecast.usage_with(source, traffic, -1)
        allowed = allowed_brokers(load, bundle)  # namespace policies
        for destination in destinations:
            if destination not in allowed:
                continue
            u_destination = forecast.usage(destination)
            new_destination = forecast.usage_with(destination, traffic, +1)
            above = new_destination > new_source and (
                within is None or new_destination > level + within or new_source < level - within
            )
            if above or new_destination > limit:
                continue  # over-placement: the destination would end hotter than the source
            gained = (
                square(u_source - level)
                + square(u_destination - level)
                - square(new_source - level)
                - square(new_destination - level)
            )
            if gained > best_gain or (gained == best_gain and best is not None and (bundle, destination) < best[:2]):
                best_gain = gained
                best = (bundle, destination, (u_source, u_destination), (new_source, new_destination))
    return best
