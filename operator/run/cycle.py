"""One balancing cycle: verify earlier moves → collect → plan → preview → execute → record.

The same function serves ``operator rebalance`` against a cluster, the daemon and the demo, so a dry
run and a real run take the same path up to the executor. What stays the same from one cycle to the next (the
cluster, its client, the executor and its rails, the load-manager session, where events and state go) is a
``CycleContext``, built once by whoever runs the cycles; each step of the cycle is a function of its own below:
which load manager runs (``_detect``: the extensible load manager's strategies), the load (``_collect``), the
plan (``_plan``) with the drains' moves first (``_drain``), then the executor's preview and its execution.
Approvals are the daemon's (a plan becomes a proposal with ``propose_only``) and the conflict guard the
executor's (act/guard.py), asked right before its first call. The plan a cycle shows is the executor's
preview of it: which actions this cycle sends, which rail defers each of the others, and the brokers'
load as estimated after the actions sent — never after actions a cap or a cooldown will hold back.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from pulsar_lb_operator.act.executor import Executor
from pulsar_lb_operator.act.guard import Verdict
from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.collect import elm
from pulsar_lb_operator.collect.collector import Collection, collect
from pulsar_lb_operator.record import audit as audit_events
from pulsar_lb_operator.record.ids import new_id
from pulsar_lb_operator.records import ExecutorState, Outcome, Record
from pulsar_lb_operator.store.statefile import OperatorState
from pulsar_lb_operator.strategies import (
    Action,
    ClusterSnapshot,
    LoadBalancerConfig,
    LoadProfile,
    Plan,
    StrategyState,
    Unload,
    estimate_after,
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
    deferred: tuple[str | None, ...] = ()  # per plan action: None, sent this cycle; else the rail deferring it
    action_ids: tuple[str, ...] = ()  # per plan action: its id, in the audit events and the JSON output
    builtin: Verdict | None = None  # Pulsar's own balancer, as the conflict guard found it last (None: not asked)

    @property
    def failed(self) -> int:
        """Actions refused, or sent without a clear answer (they count as done, but a person should look)."""
        return sum(1 for r in self.records if r.outcome in (Outcome.FAILED, Outcome.UNKNOWN))

    @property
    def held(self) -> str | None:
        """Why this cycle sent nothing because Pulsar's own balancer is on (guard.py); None otherwise."""
        return self.builtin.held if self.builtin is not None else None

    def action_id(self, action: Action) -> str | None:
        """The id of one of the plan's actions (a record's ``action``), None for another (a verification's)."""
        ids = dict(zip(self.plan.actions, self.action_ids)) if self.plan is not None else {}
        return ids.get(action)


@dataclass(frozen=True)
class CycleContext:
    """What every cycle of one run works with, built once (the daemon, ``operator rebalance``, the demo).

    ``audit`` receives the cycle's audit events as they happen (verified, plan, planned, outcomes); ``save`` puts
    the operator state on disk, and is called before each action is sent (write-ahead). ``on_plan`` hears of the
    previewed plan (``records`` still empty) before the first mutating call, and ``on_outcome`` of each action's
    outcome as it happens: a person can read the plan, and interrupt. ``load_manager``: the session that detects
    the cluster's load manager every cycle and reads the load where it runs (load reports, or the extensible load
    manager's topics: operator/collect/elm.py); None: load reports, no detection."""

    client: AdminClient
    cluster: str
    config: LoadBalancerConfig
    executor: Executor
    shedding: str | None = None
    placement: str | None = None
    broker_timeout_s: float = 20.0
    load_manager: elm.Session | None = None
    audit: Callable[[list[dict[str, Any]]], None] | None = None
    save: Callable[[OperatorState], None] | None = None
    on_plan: Callable[[CycleResult], None] | None = None
    on_outcome: Callable[[CycleResult, Record], None] | None = None


@dataclass(frozen=True)
class _Detected:
    """The load manager found this cycle (None: not asked) and the strategies that plan on it."""

    load_manager: elm.LoadManager | None
    shedding: str | None
    placement: str | None
    notes: tuple[str, ...] = ()


def run_cycle(
    context: CycleContext,
    state: OperatorState,
    rng: random.Random,
    *,
    now_ms: int | None = None,
    profile: LoadProfile | None = None,
    draining: frozenset[str] = frozenset(),
    propose_only: bool = False,
) -> CycleResult:
    """One cycle from ``state``; ``rng`` serves the decisions only (the cycle's and its actions' ids are new ids,
    record/ids.py).

    ``draining``: brokers being drained — the strategy plans without them (they give nothing and take nothing),
    and their bundles move first, placed among the others. ``propose_only``: plan, execute nothing (``approval:
    manual``: the plan becomes a proposal for a person to approve)."""
    executor = context.executor
    cycle_id = new_id()
    detected = _detect(context)
    strategy = detected.shedding or context.config.loadBalancerLoadSheddingStrategy
    events = audit_events.CycleContext(cycle_id, context.cluster, strategy, executor.safety.dry_run)
    publish = context.audit or (lambda _events: None)
    verifications: list[Record] = []

    def on_verified(record: Record) -> None:
        verifications.append(record)
        publish([audit_events.record_event(events, record)])

    with structlog.contextvars.bound_contextvars(cycle_id=cycle_id, strategy=strategy):
        _, executor_state = executor.verify(state.executor, on_verified)
        collection = _collect(context, detected, now_ms)
        snapshot = collection.snapshot
        verified = OperatorState(state.strategy, executor_state)
        plan, strategy_state = _plan(context, detected, snapshot, verified, rng, profile, draining)
        # What this cycle's execution will send, and the rail that defers each of the others; the estimate is of
        # the actions sent (a proposal is executed behind the same rails).
        deferred = executor.preview(plan, executor_state)
        to_send = [action for action, why in zip(plan.actions, deferred) if not why]
        plan = estimate_after(plan, snapshot, context.config, strategy_state, to_send)
        result = CycleResult(
            cycle_id,
            plan,
            (),
            tuple(verifications),
            collection.skipped,
            OperatorState(strategy_state, executor_state),
            snapshot,
            detected.load_manager,
            deferred,
            tuple(new_id() for _ in plan.actions),
            executor.guard.last if executor.guard is not None else None,
        )
        log.info(
            "plan",
            strategy=plan.shedding,
            placement=plan.placement,
            actions=len(plan.actions),
            deferred=sum(1 for d in deferred if d),
            brokers=len(snapshot.brokers),
            skipped=len(collection.skipped),
        )
        publish(audit_events.plan_events(events, plan, collection.skipped, deferred, result.action_ids))
        if context.on_plan is not None:
            context.on_plan(result)
        planned_unloads = {a.bundle for a in plan.actions if isinstance(a, Unload)}

        def on_record(record: Record) -> None:
            publish([audit_events.record_event(events, record, result.action_id(record.action))])
            if context.on_outcome is not None:
                context.on_outcome(result, record)

        def persist(attempted: ExecutorState) -> None:
            # Mid-cycle, only the unloads already attempted sit in the strategy's grace period.
            if context.save is not None:
                sent = attempted.awaiting()
                context.save(OperatorState(strategy_state.forget_unloads(planned_unloads - sent), attempted))

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
        return dataclasses.replace(
            result,
            records=tuple(records),
            state=OperatorState(strategy_state, executor_state),
            builtin=executor.guard.last if executor.guard is not None else None,
        )


def _detect(context: CycleContext) -> _Detected:
    """Which load manager the cluster runs now, and the strategies that can plan on it: on the extensible load
    manager, only those whose inputs its topics carry (elm.resolve_strategies). The executor learns the brokers'
    version (some rails depend on it)."""
    if context.load_manager is None:
        return _Detected(None, context.shedding, context.placement)
    found = context.load_manager.begin(context.client)
    context.executor.broker_version = found.version
    shedding, placement, notes = elm.resolve_strategies(found, context.config, context.shedding, context.placement)
    return _Detected(found, shedding, placement, notes)


def _collect(context: CycleContext, detected: _Detected, now_ms: int | None) -> Collection:
    """The cycle's snapshot: ELM's topics or load reports through the session, else load reports."""
    if context.load_manager is not None:
        return context.load_manager.collect(
            context.client,
            context.cluster,
            context.config,
            detected.load_manager,
            now_ms=now_ms,
            broker_timeout_s=context.broker_timeout_s,
        )
    return collect(
        context.client,
        context.cluster,
        stale_after_s=context.config.loadBalancerBrokerLoadDataTTLInSeconds,
        now_ms=now_ms,
        broker_timeout_s=context.broker_timeout_s,
    )


def _plan(
    context: CycleContext,
    detected: _Detected,
    snapshot: ClusterSnapshot,
    state: OperatorState,
    rng: random.Random,
    profile: LoadProfile | None,
    draining: frozenset[str],
) -> tuple[Plan, StrategyState]:
    """The strategy's plan over the brokers not being drained, with the drains' moves first."""
    strategy_before = state.strategy
    if detected.load_manager is not None and detected.load_manager.extensible:  # only the top bundles ELM publishes
        strategy_before = elm.top_bundles_only(strategy_before, snapshot)
    plan, strategy_state = plan_cycle(
        snapshot.without_brokers(draining) if draining else snapshot,
        context.config,
        strategy_before,
        rng,
        detected.shedding,
        detected.placement,
        profile=profile,
        rails=context.executor.safety.rails,
    )
    plan = elm.with_notes(plan, detected.notes)
    if draining:
        plan = _drain(context, detected, plan, snapshot, state, rng, draining)
    return plan, strategy_state


def _drain(
    context: CycleContext,
    detected: _Detected,
    plan: Plan,
    snapshot: ClusterSnapshot,
    state: OperatorState,
    rng: random.Random,
    draining: frozenset[str],
) -> Plan:
    """The drained brokers' bundles move first, placed among the others; the strategy's actions on the same
    bundles give way."""
    executor = context.executor
    on_drained = (
        b for broker in draining if broker in snapshot.brokers for b in snapshot.brokers[broker].owned_bundles()
    )
    held = {
        b: why for b in on_drained if (why := executor.held_back(b, state.executor.pending, state.executor.last_moved))
    }
    moves, notes = plan_drain(
        snapshot,
        context.config,
        state.strategy,
        rng,
        draining,
        executor.safety.max_unloads_per_broker,
        detected.placement,
        skip=held,
    )
    say = log.info if moves else log.warning  # a drain is a person's request: why it stalls, where they look
    for note in notes:
        say("drain", note=note)
    moved = {m.bundle for m in moves}
    rest = tuple(a for a in plan.actions if a.bundle not in moved)
    return dataclasses.replace(plan, actions=moves + rest, notes=plan.notes + notes)
