"""Draining brokers before maintenance: move every bundle off them, placed as the placement strategy would.

Pure, like every strategy: the snapshot, the configuration, the brokers to drain and a seeded RNG in;
unloads out. Destinations are chosen among the other brokers only, as a lookup would place the
bundles (``select_broker_for_assignment``: each choice is preallocated, so one cycle's moves spread
instead of piling onto the broker that looked emptiest first). At most ``per_broker`` bundles leave
each drained broker per cycle — the executor's rails would stop more anyway — hottest first, so the
load the remaining brokers must absorb is spread while the most capacity is free. System namespaces
(the broker's own heartbeat namespaces) never move.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies import registry
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import build_load_data
from pulsar_lb_operator.strategies.placement.common import PlacementContext
from pulsar_lb_operator.strategies.planner import select_broker_for_assignment
from pulsar_lb_operator.strategies.plans import Unload
from pulsar_lb_operator.strategies.snapshots import BundleStats, ClusterSnapshot
from pulsar_lb_operator.strategies.state import StrategyState


def plan_drain(
    snapshot: ClusterSnapshot,
    config: LoadBalancerConfig,
    state: StrategyState,
    rng: random.Random,
    draining: Collection[str],
    per_broker: int,
    placement: str | None = None,
    skip: Mapping[str, str] | None = None,
) -> tuple[tuple[Unload, ...], tuple[str, ...]]:
    """(unloads, notes) that move bundles off the ``draining`` brokers onto the others. ``skip``: bundles the rails
    hold back now (bundle: why), left for a later cycle; picked, they would take the drain's share of the caps
    every cycle and nothing would leave."""
    skip = skip or {}
    unseen = tuple(
        f"drain {b}: not an active broker, nothing to move" for b in sorted(draining) if b not in snapshot.brokers
    )
    draining = sorted(b for b in draining if b in snapshot.brokers)
    if not draining:
        return (), unseen
    others = snapshot.without_brokers(draining)
    if not others.brokers:
        return (), (*unseen, f"drain of {', '.join(draining)}: no other broker to move bundles to")
    shedding_name = registry.shedding_name(config.loadBalancerLoadSheddingStrategy)
    placement_name = registry.placement_name(placement or registry.default_placement(shedding_name))
    load, _, _ = build_load_data(others, state.bundle_data, state.recently_unloaded, config.grace_period_ms)
    ctx = PlacementContext(load, config, rng)
    placer = registry.PLACEMENT[placement_name]
    unloads: list[Unload] = []
    notes: list[str] = list(unseen)
    for broker in draining:
        report = snapshot.brokers[broker]
        owned = [
            b
            for b in sorted(report.owned_bundles())
            if not bundle_names.is_system_namespace(bundle_names.namespace_of(b))
        ]
        movable = [b for b in owned if b not in skip]
        waiting = [skip[b] for b in owned if b in skip]
        stats = report.lastStats

        def heat(bundle: str, stats: Mapping[str, BundleStats] = stats) -> tuple[float, str]:
            data = stats.get(bundle)
            return (-(data.msg_rate if data else 0.0), bundle)

        movable.sort(key=heat)
        for bundle in movable[:per_broker]:
            destination = select_broker_for_assignment(bundle, placer, ctx)
            if destination is None:
                notes.append(f"drain {broker}: no destination for {bundle}")
                continue
            reason = f"drain {broker}: {len(owned)} bundle(s) left; destination by {placement_name}"
            unloads.append(Unload(bundle, broker, destination, reason))
        note = f"drain {broker}: {len(owned)} bundle(s) left, {min(len(movable), per_broker)} this cycle"
        if waiting:
            note += f"; {len(waiting)} held back by the rails (e.g. {waiting[0]})"
        notes.append(note)
    return tuple(unloads), tuple(notes)
