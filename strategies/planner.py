"""One planning cycle, as Pulsar's leader runs it: shed, place each unloaded bundle, then split.

Pure: snapshot + config + state + seeded RNG in, (plan, next state) out. It mirrors
ModularLoadManagerImpl.doLoadShedding (a destination is chosen by ``selectBroker`` before unloading
and the unload is dropped when there is none or it is the current owner) and ``selectBroker``
itself (brokers that load persistent topics, topic-count filter, even distribution per namespace,
re-selection away from overloaded brokers). ``selectBroker`` does not preallocate: only
``selectBrokerForAssignment`` (a lookup) does, so the destinations of one cycle's unloads are chosen
independently of each other (``select_broker_for_assignment`` is that lookup path).

Namespace policies (strategies/policies.py) narrow every choice as in Pulsar: candidates come from
LoadManagerShared.applyNamespacePolicies (isolation policies, shared brokers, topic modes), then
filterAntiAffinityGroupOwnedBrokers spreads an anti-affinity group; before an unload,
doLoadShedding's shouldNamespacePoliciesUnload and shouldAntiAffinityNamespaceUnload keep a bundle
that no allowed broker would take better, and checkNamespaceBundleSplit does not unload split halves
then either. A namespace whose policies could not be read is never placed anywhere.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies import policies as ns_policies
from pulsar_lb_operator.strategies import registry
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.heap import collector_paused
from pulsar_lb_operator.strategies.loaddata import LoadData, build_load_data
from pulsar_lb_operator.strategies.placement.common import PlacementContext
from pulsar_lb_operator.strategies.plans import Action, BrokerScore, Plan, Split, Unload
from pulsar_lb_operator.strategies.profile import LoadProfile
from pulsar_lb_operator.strategies.protocol import PlacementStrategy, SheddingStrategy
from pulsar_lb_operator.strategies.rails import DEFAULT_RAILS, Rails
from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot
from pulsar_lb_operator.strategies.state import StrategyState


def _broker_topics(load: LoadData, broker: str, ctx: PlacementContext) -> int:
    reported = load.snapshot.index.topics(broker)
    return reported + sum(load.bundle_or_default(b).topics for b in ctx.preallocated.get(broker, []))


def _over_topic_limit(load: LoadData, ctx: PlacementContext, limit: int) -> set[str]:
    """Brokers with more than ``limit`` topics, reported and preallocated: the snapshot's (indexed once),
    with the few brokers that got bundles preallocated this cycle counted again."""
    over = set(load.snapshot.index.brokers_over_topics(limit))
    for broker in ctx.preallocated:
        if broker in load.snapshot.brokers:
            if _broker_topics(load, broker, ctx) > limit:
                over.add(broker)
            else:
                over.discard(broker)
    return over


def _namespace_bundles(load: LoadData, broker: str, namespace: str, ctx: PlacementContext) -> int:
    preallocated = set(ctx.preallocated.get(broker, [])) - load.snapshot.index.owned(broker)
    reported = load.snapshot.index.namespace_bundles(broker, namespace)
    return reported + sum(1 for b in preallocated if bundle_names.namespace_of(b) == namespace)


def placement_candidates(load: LoadData, bundle: str | None = None) -> list[str]:
    """LoadManagerShared.applyNamespacePolicies: the brokers the namespace policies allow for ``bundle``.

    For a namespace no isolation policy matches, a broker is a candidate when it is a shared broker (no
    policy's primary) and its report says it loads persistent topics. The bundle of an unload is built
    from its name (LoadManagerShared.getNamespaceBundle), so its ``hasNonPersistentTopic`` is false and
    ``persistentTopicsEnabled`` is the flag that counts; ``nonPersistentTopicsEnabled`` only matters for
    a lookup of a non-persistent topic, which an unload never is. An isolated namespace gets its
    policy's primaries (and secondaries below ``min_limit``). No candidate at all when the namespace's
    policies could not be read. ``bundle`` None: a namespace without isolation policy.
    """
    brokers, policies = load.snapshot.brokers, load.snapshot.policies
    if bundle is None:
        return sorted(
            b
            for b, data in brokers.items()
            if data.persistentTopicsEnabled and policies.is_shared(ns_policies.broker_host(b) or b)
        )
    namespace = bundle_names.namespace_of(bundle)
    if policies.unknown_reason(namespace) is not None:
        return []
    # The candidates depend on the namespace only through the isolation policy matching it (None for most):
    # computed once per policy and snapshot, not once per unload.
    allowed = load.snapshot.index.memo(
        ("placement candidates", policies.policy_for(namespace)),
        lambda: tuple(
            ns_policies.apply_namespace_policies(
                namespace, brokers, policies, lambda b: brokers[b].persistentTopicsEnabled
            )
        ),
    )
    return list(allowed)


def _owned_namespaces(load: LoadData, ctx: PlacementContext | None) -> dict[str, list[str]]:
    """brokerToNamespaceToBundleRange: each broker's namespaces, from its report and its preallocations."""
    owned = {
        b: set(data.owned_bundles()) | set(ctx.preallocated.get(b, []) if ctx else [])
        for b, data in load.snapshot.brokers.items()
    }
    return ns_policies.namespaces_by_broker(owned)


def anti_affinity_counts(load: LoadData, bundle: str, ctx: PlacementContext | None = None) -> dict[str, int] | None:
    """LoadManagerShared.getAntiAffinityNamespaceOwnedBrokers for the bundle's namespace (None: no group)."""
    namespace = bundle_names.namespace_of(bundle)
    if load.snapshot.policies.group_of(namespace) is None:
        return None
    return ns_policies.anti_affinity_namespace_owned_brokers(
        namespace, _owned_namespaces(load, ctx), load.snapshot.policies
    )


def policies_keep(load: LoadData, bundle: str, source: str, ctx: PlacementContext | None = None) -> str | None:
    """Why ModularLoadManagerImpl.doLoadShedding (and checkNamespaceBundleSplit) would not unload ``bundle``
    from ``source`` because of its namespace's policies; None: it may be unloaded.

    shouldNamespacePoliciesUnload: no broker but the owner is allowed. shouldAntiAffinityNamespaceUnload:
    every allowed broker owns as many of the anti-affinity group's namespaces as the owner. Ours: the
    namespace's policies could not be read.
    """
    namespace = bundle_names.namespace_of(bundle)
    policies = load.snapshot.policies
    unknown = policies.unknown_reason(namespace)
    if unknown is not None:
        return f"the policies of {namespace} could not be read ({unknown}): it is not placed anywhere"
    candidates = placement_candidates(load, bundle)
    if not ns_policies.should_namespace_policies_unload(source, candidates):
        policy = policies.policy_for(namespace)
        which = f"isolation policy {policy.name}" if policy else "shared brokers that load persistent topics"
        return (
            f"no broker other than its owner {source} satisfies the namespace policies of {namespace} "
            f"({which}; shouldNamespacePoliciesUnload)"
        )
    counts = anti_affinity_counts(load, bundle, ctx)
    if not ns_policies.should_anti_affinity_namespace_unload(source, candidates, counts):
        return (
            f"anti-affinity group {policies.group_of(namespace)}: every allowed broker owns as many of the group's "
            f"namespaces as {source} (shouldAntiAffinityNamespaceUnload)"
        )
    return None


def destination_refused(
    load: LoadData, bundle: str, destination: str, ctx: PlacementContext | None = None
) -> str | None:
    """Why a destination a shedder chose itself is not allowed for ``bundle`` (None: it is): the broker
    filters TransferShedder.isTransferable runs — applyNamespacePolicies, then the anti-affinity filter."""
    namespace = bundle_names.namespace_of(bundle)
    policies = load.snapshot.policies
    unknown = policies.unknown_reason(namespace)
    if unknown is not None:
        return f"the policies of {namespace} could not be read ({unknown})"
    candidates = placement_candidates(load, bundle)
    if destination not in candidates:
        policy = policies.policy_for(namespace)
        if policy is not None:
            return f"{destination} is not allowed by the isolation policy {policy.name} of {namespace}"
        host = ns_policies.broker_host(destination) or destination
        if not policies.is_shared(host):
            return f"{destination} is another namespace's primary broker (not shared)"
        return f"its destination {destination} does not load persistent topics"
    allowed = ns_policies.filter_anti_affinity_group_owned_brokers(
        candidates, anti_affinity_counts(load, bundle, ctx), policies.domains
    )
    if destination not in allowed:
        return (
            f"{destination} owns more of anti-affinity group {policies.group_of(namespace)} than {', '.join(allowed)}"
        )
    return None


def select_broker(bundle: str, placer: PlacementStrategy, ctx: PlacementContext) -> str | None:
    """ModularLoadManagerImpl.selectBroker: filters, the placement strategy, and the overload re-check.

    Each filter that would leave no broker is skipped, and an empty result falls back to the brokers
    applyNamespacePolicies allows (never to a broker that does not load persistent topics).
    """
    load, config = ctx.load, ctx.config
    candidates = placement_candidates(load, bundle)
    if not candidates:
        return None
    over = _over_topic_limit(load, ctx, config.loadBalancerBrokerMaxTopics)
    filtered = [b for b in candidates if b not in over] if over else candidates
    filtered = filtered or candidates  # LoadManagerShared.filterBrokersWithLargeTopicCount
    # LoadManagerShared.filterAntiAffinityGroupOwnedBrokers, across failure domains first when the snapshot has them
    filtered = ns_policies.filter_anti_affinity_group_owned_brokers(
        filtered, anti_affinity_counts(load, bundle, ctx), load.snapshot.policies.domains
    )
    if config.loadBalancerDistributeBundlesEvenlyEnabled:
        namespace = bundle_names.namespace_of(bundle)
        counts = {b: _namespace_bundles(load, b, namespace, ctx) for b in filtered}
        fewest = min(counts.values(), default=0)
        filtered = [b for b in filtered if counts[b] == fewest]  # removeMostServicingBrokersForNamespace
    chosen = placer(filtered or candidates, bundle, ctx)
    if chosen is not None and load.snapshot.index.weighted_usage(chosen, config.weights) > config.overload_threshold:
        # Every broker of the filtered list may have been overloaded: choose again among all candidates.
        chosen = placer(candidates, bundle, ctx) or chosen
    return chosen


def select_broker_for_assignment(bundle: str, placer: PlacementStrategy, ctx: PlacementContext) -> str | None:
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
        if not isinstance(action, Unload) or action.destination is None or action.destination not in brokers:
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


def estimate_after(
    plan: Plan, snapshot: ClusterSnapshot, config: LoadBalancerConfig, state: StrategyState, actions: Sequence[Action]
) -> Plan:
    """The plan with every broker's 'after' estimated for ``actions`` alone — what the executor will send this
    cycle once its caps and cooldowns have deferred the rest — on ``snapshot`` with the bundle averages of
    ``state`` (the state ``plan_cycle`` returned with the plan)."""
    load = LoadData(snapshot, state.bundle_data, {})
    return replace(plan, brokers=_estimate_scores(load, config, actions))


def plan_cycle(
    snapshot: ClusterSnapshot,
    config: LoadBalancerConfig,
    state: StrategyState,
    rng: random.Random,
    shedding: str | None = None,
    placement: str | None = None,
    profile: LoadProfile | None = None,
    rails: Rails = DEFAULT_RAILS,
) -> tuple[Plan, StrategyState]:
    """Plan one shedding cycle. Raises UnknownStrategyError for a name not in the registry.

    ``rails``: the caps the executor will hold the plan to (the operator's settings); a strategy that plans a
    cycle's moves together plans within them. Pulsar's strategies do not read them, as in Pulsar.
    """
    with collector_paused():  # strategies/heap.py: a cycle makes only acyclic objects
        return _plan_cycle(snapshot, config, state, rng, shedding, placement, profile, rails)


def _strategies(
    config: LoadBalancerConfig, shedding: str | None, placement: str | None
) -> tuple[SheddingStrategy, PlacementStrategy, list[str]]:
    """The cycle's shedding and placement strategies, by name or from the configuration, paired as Pulsar pairs
    them (``registry.paired_placement``), and a note when the placement asked for is not the one used."""
    shedder = registry.SHEDDING[registry.shedding_name(shedding or config.loadBalancerLoadSheddingStrategy)]
    asked = registry.placement_name(placement or shedder.default_placement)
    paired = registry.paired_placement(shedder.name, asked)
    notes = []
    if paired != asked:
        notes.append(
            f"loadBalancerLoadPlacementStrategy {asked} works only with the {asked} shedder "
            f"(its destinations are the shedder's plan); with {shedder.name} Pulsar places with {paired}, "
            "and so do we (ModularLoadManagerImpl.createLoadBalanceStrategies)"
        )
    return shedder, registry.PLACEMENT[paired], notes


def _checked_split(load: LoadData, split: Split, ctx: PlacementContext, notes: list[str]) -> Split:
    """checkNamespaceBundleSplit: a split's halves are unloaded only if the namespace policies allow it."""
    kept = policies_keep(load, split.bundle, split.source, ctx) if split.unload else None
    if kept is None:
        return split
    notes.append(f"split {split.bundle}: its halves stay on {split.source}: {kept}")
    return replace(split, unload=False)


def _placed(
    load: LoadData,
    unload: Unload,
    own: str | None,
    refused: str | None,
    placer: PlacementStrategy,
    ctx: PlacementContext,
    notes: list[str],
) -> Unload | None:
    """The unload with its destination, as ModularLoadManagerImpl.doLoadShedding places it; None: it stays.

    ``own``: the destination its shedder chose and the policies allow; else it is placed by ``placer`` among the
    brokers the policies allow, behind the same checks as any other unload (``refused``: why the shedder's own
    choice was not allowed, as when AvgShedder's planned broker is not a candidate).
    """
    if own is not None:
        destination: str | None = own
        how = "destination chosen by the shedder"
    else:
        kept = policies_keep(load, unload.bundle, unload.source, ctx)
        if kept is not None:  # ModularLoadManagerImpl.doLoadShedding's policy checks
            notes.append(f"keep {unload.bundle}: {kept}")
            return None
        destination = select_broker(unload.bundle, placer, ctx)
        how = f"destination by {placer.name}"
        if refused is not None:
            how = f"{how} (the shedder's own choice {unload.destination} refused: {refused})"
    if destination is None or destination == unload.source:
        notes.append(f"skip {unload.bundle}: {placer.name} found no broker other than its owner {unload.source}")
        return None
    return Unload(unload.bundle, unload.source, destination, f"{unload.reason}; {how}")


def _plan_cycle(
    snapshot: ClusterSnapshot,
    config: LoadBalancerConfig,
    state: StrategyState,
    rng: random.Random,
    shedding: str | None,
    placement: str | None,
    profile: LoadProfile | None,
    rails: Rails,
) -> tuple[Plan, StrategyState]:
    shedder, placer, notes = _strategies(config, shedding, placement)
    load, bundle_data, recent = build_load_data(
        snapshot, state.bundle_data, state.recently_unloaded, config.grace_period_ms
    )
    if profile is not None:
        load = load.with_profile(profile)
    if rails != load.rails:
        load = replace(load, rails=rails)
    sustained = None if profile is None else profile.hot
    split_strategy = registry.SPLIT_STRATEGY
    several = len(snapshot.brokers) > 1
    # A shedder that plans splits gets the split strategy's picks first (ours: their halves placed the same
    # cycle); every other gets the split strategy after shedding, as Pulsar runs it.
    picked: list[Split] = []
    if several and shedder.plans_splits:
        picked, split_notes = split_strategy(load, config, sustained=sustained)
        notes.extend(split_notes)
    if several:
        result = shedder(load, config, state, picked)
        shed_state, unloads, planned_splits = result.state, result.unloads, result.splits
        notes.extend(result.notes)
    else:
        notes.append(f"{len(snapshot.brokers)} broker(s): nothing to balance")
        shed_state, unloads, planned_splits = state, (), ()
    ctx = PlacementContext(
        load,
        config,
        rng,
        placement_ema={b: v for b, v in state.placement_ema.items() if b in snapshot.brokers},
        planned={u.bundle: u.destination for u in unloads if u.destination is not None},
    )
    actions: list[Action] = [_checked_split(load, split, ctx, notes) for split in planned_splits]
    seen = {split.bundle for split in planned_splits}
    for unload in unloads:
        if unload.bundle in seen:
            continue
        seen.add(unload.bundle)
        own = unload.destination if shedder.places_itself else None
        refused = destination_refused(load, unload.bundle, own, ctx) if own is not None else None
        if refused is not None and shedder.refused_destination == "skip":
            notes.append(f"skip {unload.bundle}: {refused}")  # TransferShedder.isTransferable: not transferable
            shed_state = shed_state.forget_unloads({unload.bundle})  # no cooldown for an unload never planned
            continue
        placed = _placed(load, unload, own if refused is None else None, refused, placer, ctx, notes)
        if placed is not None:
            actions.append(placed)
            recent[unload.bundle] = snapshot.taken_at
    if several and not shedder.plans_splits:
        splits, split_notes = split_strategy(load, config, skip=frozenset(seen), sustained=sustained)
        actions.extend(_checked_split(load, split, ctx, notes) for split in splits)
        notes.extend(split_notes)
    elif not several and config.loadBalancerAutoBundleSplitEnabled:
        # ModularLoadManagerImpl.checkNamespaceBundleSplit returns early with one broker (PR #20190):
        # a split would only unload the halves back onto the same broker.
        notes.append(f"split: skipped with {len(snapshot.brokers)} broker(s) (Pulsar splits only with more than one)")
    plan = Plan(
        shedding=shedder.name,
        placement="(transfer)" if shedder.places_itself else placer.name,
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
