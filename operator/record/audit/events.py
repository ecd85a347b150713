"""What goes on the audit topic: one JSON event per plan, per planned action and per action outcome.

Kinds, in the order a cycle produces them: ``verified`` (where an earlier unload ended up), ``plan``
(the cycle's decision with every broker's numbers), ``planned`` (one per action), then one outcome per
action: ``executed``, ``unknown`` (sent, no clear answer: counted as done and verified later),
``failed``, ``skipped`` (a safety rail stopped it) or ``dry_run``. Every event
carries the cycle id, so a consumer can put a cycle back together; the spool adds ``seq``. A ``planned``
event and its outcome carry the same ``actionId``; a ``planned`` event whose action a rail defers this
cycle says which (``deferred``), and the plan's brokers are estimated after the actions sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pulsar_lb_operator.records import Outcome, Record
from pulsar_lb_operator.strategies import Plan

FORMAT = "pulsar-lb-audit/1"

KIND_OF_OUTCOME = {
    Outcome.EXECUTED: "executed",
    Outcome.UNKNOWN: "unknown",
    Outcome.FAILED: "failed",
    Outcome.SKIPPED: "skipped",
    Outcome.DRY_RUN: "dry_run",
    Outcome.MOVED_AS_PLANNED: "verified",
    Outcome.MOVED_ELSEWHERE: "verified",
    Outcome.NOT_MOVED: "verified",
    Outcome.SPLIT_DONE: "verified",
    Outcome.NOT_SPLIT: "verified",
}


@dataclass(frozen=True)
class CycleContext:
    cycle_id: str
    cluster: str
    strategy: str
    dry_run: bool

    def event(self, kind: str, at_ms: int, **fields: Any) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "kind": kind,
            "at": at_ms,
            "cycleId": self.cycle_id,
            "cluster": self.cluster,
            "strategy": self.strategy,
            "dryRun": self.dry_run,
            **fields,
        }


def plan_events(
    context: CycleContext,
    plan: Plan,
    skipped_brokers: dict[str, str],
    deferred: Sequence[str | None],
    action_ids: Sequence[str],
) -> list[dict[str, Any]]:
    summary = plan.to_json()
    actions = summary.pop("actions")
    summary["actionCount"] = len(actions)
    summary["deferredCount"] = sum(1 for d in deferred if d)
    summary["skippedBrokers"] = dict(sorted(skipped_brokers.items()))
    events = [context.event("plan", plan.taken_at, plan=summary)]
    events.extend(
        context.event("planned", plan.taken_at, index=i, actionId=action_id, action=a, deferred=why)
        for i, (a, why, action_id) in enumerate(zip(actions, deferred, action_ids))
    )
    return events


def record_event(context: CycleContext, record: Record, action_id: str | None = None) -> dict[str, Any]:
    """An outcome; ``action_id`` that of its ``planned`` event (None for a verification of an earlier cycle's)."""
    ids = {"actionId": action_id} if action_id else {}
    return context.event(
        KIND_OF_OUTCOME[record.outcome],
        record.at_ms,
        **ids,
        action=record.action.to_json(),
        outcome=record.outcome.value,
        detail=record.detail,
    )
