"""One planning cycle, as Pulsar's leader runs it: shed, place each unloaded bundle, then split.

Pure: snapshot + config + state + seeded RNG in, (plan, next state) out. It mirrors
ModularLoadManagerImpl.doLoadShedding (a destination is chosen by ``selectBroker`` before unloading
and the unload is dropped when there is none or it is the current owner) and ``selectBroker``
itself (brokers that load persistent topics, topic-count filter, even distribution per namespace,
re-selection away from overloaded brokers). ``selectBroker`` does not preallocate: only
``selectBrokerForAssignment`` (a lookup) does, so the destinations of one cycle's unloads are chosen
independently of each other (``select_broker_for_assignment`` is that lookup path).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from strategies import bundles as bundle_names
from strategies import registry
from strategies.config import LoadBalancerConfig
from strategies.loaddata import LoadData, build_load_data
from strategies.placement.common import PlacementContext
from strategies.plans import Action, BrokerScore, Plan, Unload
from strategies.profile import LoadProfile
from strategies.snapshots import ClusterSnapshot
from strategies.splitting.trigger import find_bundles_to_split
from strategies.state import StrategyState


def _broker_topics(load: LoadData, broker: str, ctx: PlacementContext) -> int:
    reported = sum(s.topics for s in load.snapshot.brokers[broker].lastStats.values())
    return reported + sum(load.bundle_or_default(b).topics for b in ctx.preallocated.get(broker, []))


def _namespace_bundles(load: LoadData, broker: str, namespace: str, ctx: PlacementContext) -> int:
    owned = load.snapshot.brokers[broker].owned_bundles() | set(ctx.preallocated.get(broker, []))
    return sum(1 for b in owned if bundle_names.namespace_of(b) == namespace)


def placement_candidates(load: LoadData) -> list[str]:
    """LoadManagerShared.applyNamespacePolicies for a namespace without isolation policies.

    A broker is a candidate when its report says it loads persistent topics. The bundle of an unload
    is built from its name (LoadManagerShared.getNamespaceBundle), so its ``hasNonPersistentTopic``
    is false and ``persistentTopicsEnabled`` is the flag that counts; ``nonPersistentTopicsEnabled``
    only matters for a lookup of a non-persistent topic, which an unload never is. With no isolation
    policy at all in the cluster every broker is a shared broker.
    """
    return sorted(b for b, data in load.snapshot.brokers.items() if data.persistentTopicsEnabled)


def select_broker(bundle: str, placer: registry.Placer, ctx: PlacementContext) -> str | None:
    """ModularLoadManagerImpl.selectBroker: filters, the placement strategy, and the overload re-check.

    Each filter that would leave no broker is skipped, and an empty result falls back to the brokers
    applyNamespacePolicies allows (never to a broker that does not load persistent topics).
    """
    load, config = ctx.load, ctx.config
    candidates = placement_candidates(load)
    if not candidates:
        return None
    filtered = [b for b in candidates if _broker_topics(load, b, ctx) <= config.loadBalancerBrokerMaxTopics]
    filtered = filtered or candidates  # LoadManagerShared.filterBrokersWithLargeTopicCount
    if config.loadBalancerDistributeBundlesEvenlyEnabled:
        namespace = bundle_names.namespace_of(bundle)
        counts = {b: _namespace_bundles(load, b, namespace, ctx) for b in filtered}
        fewest = min(counts.values(), default=0)
        filtered = [b for b in filtered if counts[b] == fewest]  # removeMostServicingBrokersForNamespace
    chosen = placer(filtered or candidates, bundle, ctx)
    if (
        chosen is not None
        and load.snapshot.brokers[chosen].max_resource_usage_with_weight(config.weights) > config.overload_threshold
    ):
        # Every broker of the filtered list may have been overloaded: choose again among all candidates.
        chosen = placer(candidates, bundle, ctx) or chosen
    return chosen


def select_broker_for_assignment(bundle: str, placer: registry.Placer, ctx: PlacementContext) -> str | None:
    """ModularLoadManagerImpl.selectBrokerForAssignment (a lookup): an already preallocated bundle keeps
    its broker; otherwise ``select_broker``, and the bundle is preallocated to the broker chosen."""
    for broker, preallocated in ctx.preallocated.items():
        if bundle in preallocated:
            return broker
    chosen = select_broker(bundle, placer, ctx)
    if chosen is not None:
        ctx.preallocate(chosen, bundle)
    return chosen


def _estimate_scores(load: LoadData, config: LoadBalancerConfig, actions: Sequence[Action]) -> tuple[BrokerScore, ...]:
    """Before, and an estimate of after: a bundle takes its share of the source's usage with it."""
    brokers = load.snapshot.brokers
    usage = {b: brokers[b].max_resource_usage_with_weight(config.weights) * 100 for b in brokers}
    rate = {b: brokers[b].msg_rate for b in brokers}
    count = {b: len(brokers[b].bundles) for b in brokers}
    after_usage, after_rate, after_count = dict(usage), dict(rate), dict(count)
    for action in actions:
        if not isinstance(action, Unload) or action.destination not in brokers:
            continue
        source, dest = action.source, action.destination
        data = load.bundle_or_default(action.bundle).short
        source_load = brokers[source]
        if source_load.msg_rate > 0:
            share = min(data.msg_rate / source_load.msg_rate, 1.0)
        elif source_load.msg_throughput > 0:
            share = min(data.msg_throughput / source_load.msg_throughput, 1.0)
        else:
            share = 0.0
        moved_usage = usage[source] * share
        after_usage[source] -= moved_usage
        after_usage[dest] += moved_usage
        after_rate[source] -= data.msg_rate
        after_rate[dest] += data.msg_rate
        after_count[source] -= 1
        after_count[dest] += 1
    return tuple(
        BrokerScore(b, usage[b], max(after_usage[b], 0.0), rate[b], max(after_rate[b], 0.0), count[b], after_count[b])
        for b in sorted(brokers)
    )


def plan_cycle(
    snapshot: ClusterSnapshot,
    config: LoadBalancerConfig,
    state: StrategyState,
    rng: random.Random,
    shedding: str | None = None,
    placement: str | None = None,
    profile: LoadProfile | None = None,
) -> tuple[Plan, StrategyState]:
    """Plan one shedding cycle. Raises UnknownStrategyError for a name not in the registry."""
    shedding_name = registry.shedding_name(shedding or config.loadBalancerLoadSheddingStrategy)
    placement_name = registry.placement_name(placement or registry.default_placement(shedding_name))
    notes: list[str] = []
    paired = registry.paired_placement(shedding_name, placement_name)
    if paired != placement_name:
        notes.append(
            f"loadBalancerLoadPlacementStrategy {placement_name} works only with the {placement_name} shedder "
            f"(its destinations are the shedder's plan); with {shedding_name} Pulsar places with {paired}, "
            "and so do we (ModularLoadManagerImpl.createLoadBalanceStrategies)"
        )
        placement_name = paired
    load, bundle_data, recent = build_load_data(
        snapshot, state.bundle_data, state.recently_unloaded, config.grace_period_ms
    )
    if profile is not None:
        load = load.with_profile(profile)
    result = registry.SHEDDING[shedding_name](load, config, state) if len(snapshot.brokers) > 1 else None
    if result is None:
        notes.append(f"{len(snapshot.brokers)} broker(s): nothing to balance")
        shed_state, unloads = state, ()
    else:
        shed_state, unloads = result.state, result.unloads
        notes.extend(result.notes)
    self_placing = shedding_name in registry.SELF_PLACING
    ctx = PlacementContext(
        load,
        config,
        rng,
        placement_ema={b: v for b, v in state.placement_ema.items() if b in snapshot.brokers},
        planned={u.bundle: u.destination for u in unloads if u.destination is not None},
    )
    placer = registry.PLACEMENT[placement_name]
    actions: list[Action] = []
    seen: set[str] = set()
    for unload in unloads:
        if unload.bundle in seen:
            continue
        seen.add(unload.bundle)
        if self_placing and unload.destination is not None:
            destination: str | None = unload.destination
            how = "destination chosen by the shedder"
            if destination not in placement_candidates(load):
                notes.append(f"skip {unload.bundle}: its destination {destination} does not load persistent topics")
                continue
        else:
            destination = select_broker(unload.bundle, placer, ctx)
            how = f"destination by {placement_name}"
        if destination is None or destination == unload.source:
            notes.append(f"skip {unload.bundle}: {placement_name} found no broker other than its owner {unload.source}")
            continue
        actions.append(Unload(unload.bundle, unload.source, destination, f"{unload.reason}; {how}"))
        recent[unload.bundle] = snapshot.taken_at
    if len(snapshot.brokers) > 1:
        splits, split_notes = find_bundles_to_split(
            load, config, skip=frozenset(seen), sustained=None if profile is None else profile.hot
        )
        actions.extend(splits)
        notes.extend(split_notes)
    elif config.loadBalancerAutoBundleSplitEnabled:
        # ModularLoadManagerImpl.checkNamespaceBundleSplit returns early with one broker (PR #20190):
        # a split would only unload the halves back onto the same broker.
        notes.append(f"split: skipped with {len(snapshot.brokers)} broker(s) (Pulsar splits only with more than one)")
    plan = Plan(
        shedding=shedding_name,
        placement="(transfer)" if self_placing else placement_name,
        taken_at=snapshot.taken_at,
        actions=tuple(actions),
        brokers=_estimate_scores(load, config, actions),
        notes=tuple(notes),
    )
    next_state = shed_state.evolve(
        bundle_data=bundle_data,
        recently_unloaded=recent,
        placement_ema=ctx.placement_ema,
    )
    return plan, next_state
