"""The operator workflows above the cycle: proposals a person approves, drains before maintenance, and
who will carry out a request.

Both live in the control file (``control.py``) so the daemon, the commands and the status page see the
same thing, and both survive restarts. Nothing here calls the cluster: a proposal is executed by the
executor behind the same rails as any cycle (``DaemonView.execute_approved``), and a drain is planned by
``strategies.drain`` inside the cycle.

A request only counts when the daemon will act on it: the daemon writes its own record (``announce``) and
``refusal`` says why a drain or a decision would go unheard (a standby, approval not manual). The commands
and the status page ask the same question and give the same answer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import structlog

from pulsar_lb_operator.act.safety import KillSwitch, Safety, read_pause_file, switch_on
from pulsar_lb_operator.record import audit as audit_events
from pulsar_lb_operator.records import Record
from pulsar_lb_operator.run import lease_pause
from pulsar_lb_operator.run.cycle import CycleResult
from pulsar_lb_operator.run.daemon_view import DaemonView
from pulsar_lb_operator.run.lease_pause import SharedPause
from pulsar_lb_operator.store.control import (
    APPROVED,
    EXECUTED,
    PENDING,
    Control,
    ControlError,
    ControlFile,
    DaemonRecord,
    write_pause,
)
from pulsar_lb_operator.strategies import ClusterSnapshot, Plan, action_from_json
from pulsar_lb_operator.strategies import bundles as bundle_names

log = structlog.get_logger(__name__)


def spread(values: Iterable[float]) -> float:
    values = list(values)
    return round(max(values) - min(values), 1) if values else 0.0


def propose(control: ControlFile, result: CycleResult, now_ms: int, lifetime_ms: float) -> dict[str, Any] | None:
    """Store the cycle's plan as a pending proposal; None when there is nothing to propose."""
    plan = result.plan
    if plan is None or not plan.actions:
        return None
    proposal = {
        "id": result.cycle_id,
        "status": PENDING,
        "createdAt": now_ms,
        "expiresAt": int(now_ms + lifetime_ms),
        "shedding": plan.shedding,
        "placement": plan.placement,
        "takenAt": plan.taken_at,
        # each action with the rail that would hold it back were it executed now (None: it would be sent)
        "actions": [{**a.to_json(), "deferred": why} for a, why in zip(plan.actions, _padded(result.deferred, plan))],
        "spreadBefore": spread(b.usage_before for b in plan.brokers),
        "spreadAfter": spread(b.usage_after for b in plan.brokers),
        "brokers": {b.broker: [round(b.usage_before, 1), round(b.usage_after, 1)] for b in plan.brokers},
    }

    def add(doc: Any) -> None:
        doc.expire(now_ms)
        doc.proposals[proposal["id"]] = proposal
        doc.prune()

    control.update(add)
    return proposal


def _padded(deferred: tuple[str | None, ...], plan: Plan) -> tuple[str | None, ...]:
    return (*deferred, *(None,) * (len(plan.actions) - len(deferred)))


def take_approved(control: ControlFile, now_ms: int) -> list[dict[str, Any]]:
    """Expire what is too old, and hand out the approved proposals (marked executing, so never twice)."""

    def take(doc: Any) -> list[dict[str, Any]]:
        doc.expire(now_ms)
        ready = doc.approved()
        for proposal in ready:
            proposal.update(status=EXECUTED, executedAt=now_ms)
        return [dict(p) for p in ready]

    return control.update(take)


def audit_of(
    proposal_id: str, cluster: str, safety: Safety, publish: Callable[[list[dict[str, Any]]], None]
) -> Callable[[Record], None]:
    """An approved proposal's outcomes as audit events, under its id (the cycle that proposed it)."""
    context = audit_events.CycleContext(proposal_id, cluster, "approved proposal", safety.dry_run)
    return lambda record: publish([audit_events.record_event(context, record)])


def plan_of(proposal: Mapping[str, Any]) -> Plan:
    actions = tuple(action_from_json(a) for a in proposal["actions"])
    return Plan(str(proposal["shedding"]), str(proposal["placement"]), int(proposal["takenAt"]), actions)


def record_outcomes(control: ControlFile, proposal_id: str, records: list[Record]) -> None:
    def note(doc: Any) -> None:
        if proposal_id in doc.proposals:
            doc.proposals[proposal_id]["outcomes"] = [
                {"bundle": r.action.bundle, "outcome": r.outcome.value, "detail": r.detail} for r in records
            ]

    control.update(note)


def bundles_left(snapshot: ClusterSnapshot | None, broker: str) -> int | None:
    """Bundles still on a draining broker (system namespaces aside); None when it is not in the snapshot."""
    if snapshot is None or broker not in snapshot.brokers:
        return None
    owned = snapshot.brokers[broker].owned_bundles()
    return sum(1 for b in owned if not bundle_names.is_system_namespace(bundle_names.namespace_of(b)))


def count_owned(owned: Iterable[str]) -> int:
    """The same count from an ownedNamespaces answer."""
    return sum(1 for b in owned if not bundle_names.is_system_namespace(bundle_names.namespace_of(b)))


def still_pending(proposals: Mapping[str, Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for _, p in sorted(proposals.items()) if p["status"] in (PENDING, APPROVED)]


# ---------------------------------------------------------------------------------------------- who acts


def daemon_record(daemon: DaemonView, leading: bool) -> DaemonRecord:
    """The daemon as a command needs to know it: whether it leads, what it does with plans, where its pause is."""
    holder = getattr(daemon.elector, "holder", None)  # the elector's Lease holder, last seen
    safety = daemon.executor.safety
    return DaemonRecord(
        pid=os.getpid(),
        leading=leading,
        approval=daemon.settings.approval,
        dry_run=safety.dry_run,
        pause_file=os.path.abspath(daemon.settings.kill_switch_file()),
        leader=None if leading else holder,
        kill_switch_env=switch_on(os.environ.get(safety.kill_switch_env)),
    )


def announce(daemon: DaemonView, leading: bool) -> None:
    """Write the daemon's record into its control file (at start and on every change of role). A failure is
    logged and the daemon goes on: the commands then say they cannot tell who acts, and refuse."""
    record = daemon_record(daemon, leading)
    try:
        daemon.control.update(lambda doc: setattr(doc, "daemon", record))
    except (OSError, ControlError) as exc:
        log.error("the control file could not be written: operator drain/approve/pause will refuse", reason=str(exc))


# what a person asks, as a noun
REQUESTS = {"drain": "drain", "undrain": "undrain", "approve": "approval", "reject": "rejection", "pause": "pause"}


def refusal(daemon: DaemonRecord, request: str, paused: bool = False) -> str | None:
    """Why ``request`` (``REQUESTS``) would not be carried out by this daemon; None when it will. A standby reads
    files of its own, which the leader never sees: a pause there would leave the leader sending. ``paused``: the
    kill switch is on, and an approval now would be carried out with nothing sent."""
    if not daemon.leading:
        leader = f"{daemon.leader} leads" if daemon.leader else "another instance leads"
        if request == "pause":
            return (
                f"this operator is a standby ({leader}): pausing it would not stop the leader; pause the leader "
                "(its pod), or stop every pod with the chart's killSwitch=true"
            )
        return f"this operator is a standby ({leader}): it carries out no {REQUESTS[request]}; ask the leader (its pod)"
    if request in ("approve", "reject") and daemon.approval != "manual":
        return (
            "approval is auto: the daemon executes each plan itself and keeps no proposals "
            "(approval: manual makes it wait for a person)"
        )
    if request == "approve" and paused:
        return "the kill switch is on: nothing would be sent; operator resume first, then approve (it stays pending)"
    return None


def pause_file(path: str, by: str, reason: str, now_ms: int) -> tuple[str, KillSwitch | None]:
    """Write the pause file, unless a pause someone wrote is there already: then its note — who, why, since when —
    is kept (a second pause while paused changes nothing; the first reason is the incident's). A file without a
    readable note is written over with this one. Returns the note the Lease is to carry (``lease_pause.note``: the
    kept one's, where one was kept) and the earlier pause (None: this one was written)."""
    earlier = read_pause_file(path)
    if earlier is not None and earlier.by:
        return lease_pause.note(earlier.by, earlier.reason, earlier.since_ms or now_ms), earlier
    write_pause(path, by, reason, now_ms)
    return lease_pause.note(by, reason, now_ms), None


def kept(earlier: KillSwitch | None) -> str:
    """The words that say an earlier pause was kept, for the front of a pause's answer; empty where none was."""
    if earlier is None:
        return ""
    why = f" ({earlier.reason})" if earlier.reason else ""
    return f"already paused by {earlier.by}{why}: its note is kept; "


def share_pause(
    shared: SharedPause, note: str, leading: bool, within_s: float, path: str, earlier: KillSwitch | None = None
) -> str:
    """Write the pause on the Lease every replica reads; the line saying whom it stops and from when. Raises
    LeaseApiError when the Lease could not be written. ``leading``: this instance leads (its own pause file has
    stopped it already); a standby waits up to ``within_s`` (renewDeadlineSeconds) for the leader to read it.
    Where the Lease held a pause already, its note is kept, and this pod's pause file (``path``) takes it too; the
    line says which pause was kept: the Lease's, else ``earlier`` (this pod's file's, from ``pause_file``)."""
    written = shared.pause(note)
    if (first := written.earlier) is not None:
        write_pause(path, first.by, first.reason, first.since_ms or json.loads(note)["since"])
    everyone = kept(first or earlier) + f"paused every instance through Lease {shared.lease}"
    holder = written.holder
    if not holder:
        return f"{everyone}: none leads now, and whichever takes the Lease starts paused"
    if leading:
        return f"{everyone}: this one from its next call on, a standby before it can lead"
    if shared.wait_read_by_holder(written, within_s):
        return f"{everyone}: the leader {holder} has read it and sends nothing from its next call on"
    return (
        f"{everyone}: the leader {holder} has not renewed the Lease within {within_s:g} s, so it no longer acts, "
        "and it reads the pause before it can lead again"
    )


def add_drain(doc: Control, broker: str, active: Collection[str], entry: dict[str, Any]) -> None:
    """Record the drain of ``broker`` in the control document (under its lock). ControlError where every other
    active broker is being drained too: its bundles would have nowhere to go, and the maintenance it stands for
    would find the broker still full (``active`` empty: unknown, not checked)."""
    if active and set(active) <= set(doc.drains) | {broker}:
        others = sorted(set(active) & set(doc.drains) - {broker})
        already = f" (already draining: {', '.join(others)})" if others else ""
        raise ControlError(
            f"draining {broker} would leave no active broker to take its bundles{already}: undrain one, or add a broker"
        )
    doc.drains.setdefault(broker, entry)


def approval_outcome(daemon: DaemonRecord) -> str:
    """What an approval will do, in one line (``refusal`` has let it through)."""
    if daemon.dry_run:
        return "approved: in dry run the daemon only logs its actions, and the proposal is then done (dryRun: false)"
    return "approved: the daemon executes it within seconds"


def drain_outcome(broker: str, daemon: DaemonRecord, paused: bool) -> str:
    """What a drain request will do, in one line."""
    if paused:
        return f"draining {broker}: requested, but the kill switch is on: nothing moves until operator resume"
    if daemon.dry_run:
        return f"draining {broker}: in dry run the daemon only logs the moves (dryRun: false to act)"
    if daemon.approval == "manual":
        return f"draining {broker}: each cycle's moves off it are proposed; nothing moves until they are approved"
    return f"draining {broker}: the daemon moves its bundles within the rails, from its next cycle"
