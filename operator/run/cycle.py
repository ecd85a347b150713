"""One balancing cycle: verify earlier moves → collect → plan → execute → record.

The same function serves ``operator rebalance`` against a cluster, the daemon and the demo, so a dry
run and a real run take the same path up to the executor.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from pulsar_lb_operator.act.executor import Executor, ExecutorState, Outcome, Record
from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.collect import elm
from pulsar_lb_operator.collect.collector import collect
from pulsar_lb_operator.record import audit as audit_events
from pulsar_lb_operator.store.statefile import OperatorState
from pulsar_lb_operator.strategies import (
    ClusterSnapshot,
    LoadBalancerConfig,
    LoadProfile,
    Plan,
    Unload,
    plan_cycle,
    plan_drain,
)

log = structlog.get_logger(__name__)

DONE = (Outcome.EXECUTED, Outcome.UNKNOWN)  # an unknown outcome counts as done


@dataclass(frozen=True)
class CycleResult:
    cycle_id: str
    plan: Plan | None
    records: tuple[Record, ...]
    verifications: tuple[Record, ...]
    skipped_brokers: dict[str, str]
    state: OperatorState
    snapshot: ClusterSnapshot | None = None
    load_manager: elm.LoadManager | None = None  # what the cluster runs (detected this cycle; None: not asked)

    @property
    def failed(self) -> int:
        """Actions refused, or sent without a clear answer (they count as done, but a person should look)."""
        return sum(1 for r in self.records if r.outcome in (Outcome.FAILED, Outcome.UNKNOWN))


def run_cycle(
    client: AdminClient,
    cluster: str,
    config: LoadBalancerConfig,
    executor: Executor,
    state: OperatorState,
    rng: random.Random,
    shedding: str | None = None,
    placement: str | None = None,
    now_ms: int | None = None,
    broker_timeout_s: float = 20.0,
    profile: LoadProfile | None = None,
    audit: Callable[[list[dict[str, Any]]], None] | None = None,
    save: Callable[[OperatorState], None] | None = None,
    draining: frozenset[str] = frozenset(),
    propose_only: bool = False,
    load_manager: elm.Session | None = None,
) -> CycleResult:
    """``audit`` receives the cycle's audit events as they happen (verified, plan, planned, outcomes);
    ``save`` puts the operator state on disk, and is called before each action is sent (write-ahead).

    ``draining``: brokers being drained — the strategy plans without them (they give nothing and take
    nothing), and their bundles move first, placed among the others. ``propose_only``: plan, execute
    nothing (``approval: manual``: the plan becomes a proposal for a person to approve).

    ``load_manager``: the session that detects the cluster's load manager this cycle, reads the load where it
    runs (load reports, or the extensible load manager's topics: operator/collect/elm.py) and runs the conflict guard;
    None: load reports, no detection, no guard."""
    cycle_id = uuid.UUID(int=rng.getrandbits(128)).hex[:12]
    detected, elm_notes = None, ()
    if load_manager is not None:
        detected = load_manager.begin(client)
        executor.broker_version = detected.version if detected is not None else executor.broker_version
        shedding, placement, elm_notes = elm.resolve_strategies(detected, config, shedding, placement)
    strategy = shedding or config.loadBalancerLoadSheddingStrategy
    context = audit_events.CycleContext(cycle_id, cluster, strategy, executor.safety.dry_run)
    publish = audit or (lambda _events: None)

    def on_record(record: Record) -> None:
        publish([audit_events.record_event(context, record)])

    with structlog.contextvars.bound_contextvars(cycle_id=cycle_id, strategy=strategy):
        verifications, executor_state = executor.verify(state.executor, on_record)
        if load_manager is not None:
            collection = load_manager.collect(
                client, cluster, config, detected, now_ms=now_ms, broker_timeout_s=broker_timeout_s
            )
        else:
            collection = collect(
                client,
                cluster,
                stale_after_s=config.loadBalancerBrokerLoadDataTTLInSeconds,
                now_ms=now_ms,
                broker_timeout_s=broker_timeout_s,
            )
        snapshot = collection.snapshot
        strategy_before = state.strategy
        if detected is not None and detected.extensible:  # only the top bundles ELM publishes now
            strategy_before = elm.top_bundles_only(strategy_before, snapshot)
        plan, strategy_state = plan_cycle(
            snapshot.without_brokers(draining) if draining else snapshot,
            config,
            strategy_before,
            rng,
            shedding,
            placement,
            profile=profile,
            rails=executor.safety.rails,
        )
        plan = elm.with_notes(plan, elm_notes)
        if draining:
            moves, notes = plan_drain(
                snapshot, config, state.strategy, rng, draining, executor.safety.max_unloads_per_broker, placement
            )
            moved = {m.bundle for m in moves}
            rest = tuple(a for a in plan.actions if a.bundle not in moved)
            plan = dataclasses.replace(plan, actions=moves + rest, notes=plan.notes + notes)
        log.info(
            "plan",
            strategy=plan.shedding,
            placement=plan.placement,
            actions=len(plan.actions),
            brokers=len(collection.snapshot.brokers),
            skipped=len(collection.skipped),
        )
        publish(audit_events.plan_events(context, plan, collection.skipped))
        planned_unloads = {a.bundle for a in plan.actions if isinstance(a, Unload)}

        def persist(attempted: ExecutorState) -> None:
            # Mid-cycle, only the unloads already attempted sit in the strategy's grace period.
            if save is not None:
                sent = {p["bundle"] for p in attempted.pending}
                save(OperatorState(strategy_state.forget_unloads(planned_unloads - sent), attempted))

        if propose_only:
            records: list[Record] = []
        else:
            records, executor_state = executor.apply(plan, executor_state, on_record, persist)
        # A planned unload that was not carried out (skipped, refused, dry run) must not sit in the
        # strategy's grace period: nothing moved. One whose outcome is unknown counts as done.
        not_done = {r.action.bundle for r in records if isinstance(r.action, Unload) and r.outcome not in DONE}
        if propose_only:  # nothing was sent: a proposal's unloads enter the grace period when executed
            not_done = planned_unloads
        strategy_state = strategy_state.forget_unloads(not_done)
        return CycleResult(
            cycle_id,
            plan,
            tuple(records),
            tuple(verifications),
            collection.skipped,
            OperatorState(strategy_state, executor_state),
            collection.snapshot,
            detected,
        )
