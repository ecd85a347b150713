"""The operator workflows above the cycle: proposals a person approves, and drains before maintenance.

Both live in the control file (``control.py``) so the daemon, the commands and the status page see the
same thing, and both survive restarts. Nothing here calls the cluster: a proposal is executed by the
executor behind the same rails as any cycle (``Daemon.execute_approved``), and a drain is planned by
``strategies.drain`` inside the cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pulsar_lb_operator.act.executor import Record
from pulsar_lb_operator.run.cycle import CycleResult
from pulsar_lb_operator.store.control import APPROVED, EXECUTED, PENDING, ControlFile
from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.plans import Plan, action_from_json
from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot


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
        "actions": [a.to_json() for a in plan.actions],
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


def take_approved(control: ControlFile, now_ms: int) -> list[dict[str, Any]]:
    """Expire what is too old, and hand out the approved proposals (marked executing, so never twice)."""

    def take(doc: Any) -> list[dict[str, Any]]:
        doc.expire(now_ms)
        ready = doc.approved()
        for proposal in ready:
            proposal.update(status=EXECUTED, executedAt=now_ms)
        return [dict(p) for p in ready]

    return control.update(take)


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
