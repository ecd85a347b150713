"""Execute: apply a plan one action at a time, behind safety rails, and verify where unloads went.

The operator must never make a cluster worse than it found it. Before each action it re-checks the
kill switch, the per-cycle and per-broker caps, the bundle's cooldown, exclusions, and that the
destination is still an active, non-excluded broker. An unload or split is never retried blindly: after
a transport error the bundle's owner is checked, and the call counts as done only if it moved.
In dry-run mode every action is logged with its reason and no mutating endpoint is called.
"""

from __future__ import annotations

import enum
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from pulsar_lb_operator.adminapi import AdminClient, AdminError, TransportError
from strategies import bundles as bundle_names
from strategies.plans import Action, Plan, Split, Unload

log = structlog.get_logger(__name__)


class Outcome(enum.Enum):
    DRY_RUN = "dry_run"  # would have been sent
    SKIPPED = "skipped"  # stopped by a safety rail
    EXECUTED = "executed"  # the admin API accepted it
    FAILED = "failed"  # the admin API refused it or could not be reached
    MOVED_AS_PLANNED = "moved_as_planned"  # verified: the bundle is owned by the planned destination
    MOVED_ELSEWHERE = "moved_elsewhere"  # verified: owned by another broker
    NOT_MOVED = "not_moved"  # verified: still unowned or back on its source after the check period


@dataclass(frozen=True)
class Safety:
    """Rails checked before each action; the defaults are deliberately conservative."""

    dry_run: bool = True
    max_unloads_per_cycle: int = 10
    max_unloads_per_broker: int = 5
    cooldown_minutes: float = 30  # loadBalancerSheddingGracePeriodMinutes
    excluded_namespaces: tuple[str, ...] = ()  # regular expressions, matched against tenant/namespace
    excluded_brokers: tuple[str, ...] = ()
    kill_switch_file: str | None = None
    kill_switch_env: str = "PULSAR_LB_KILL_SWITCH"
    pause_seconds: float = 0.0
    verify_after_seconds: float = 120.0

    def killed(self) -> str | None:
        if os.environ.get(self.kill_switch_env, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"kill switch: environment variable {self.kill_switch_env} is set"
        if self.kill_switch_file and Path(self.kill_switch_file).exists():
            return f"kill switch: file {self.kill_switch_file} exists"
        return None

    def excludes_namespace(self, namespace: str) -> bool:
        return any(re.fullmatch(p, namespace) for p in self.excluded_namespaces)


@dataclass(frozen=True)
class Record:
    action: Action
    outcome: Outcome
    detail: str
    at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {**self.action.to_json(), "outcome": self.outcome.value, "detail": self.detail, "at": self.at_ms}


@dataclass(frozen=True)
class ExecutorState:
    """Carried across cycles and restarts: when each bundle was last moved, and unloads to verify."""

    last_moved: dict[str, int] = field(default_factory=dict)
    pending: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"lastMoved": dict(sorted(self.last_moved.items())), "pending": list(self.pending)}

    @classmethod
    def from_json(cls, doc: Any) -> ExecutorState:
        if not isinstance(doc, dict):
            return cls()
        moved = {str(b): int(t) for b, t in (doc.get("lastMoved") or {}).items()}
        pending = tuple(p for p in doc.get("pending") or () if isinstance(p, dict) and "bundle" in p)
        return cls(moved, pending)


@dataclass
class Executor:
    client: AdminClient
    cluster: str
    safety: Safety
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    stop_requested: Callable[[], bool] = lambda: False

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------------ apply

    def apply(
        self, plan: Plan, state: ExecutorState, on_record: Callable[[Record], None] = lambda _r: None
    ) -> tuple[list[Record], ExecutorState]:
        """Carry out the plan; ``on_record`` hears of each outcome as it happens (the audit trail)."""
        records: list[Record] = []
        last_moved = dict(state.last_moved)
        pending = list(state.pending)
        per_broker: dict[str, int] = {}
        unloads = 0

        def done(record: Record) -> Record:
            records.append(record)
            on_record(record)
            return record

        for index, action in enumerate(plan.actions):
            if self.stop_requested():
                for rest in plan.actions[index:]:
                    done(self._record(rest, Outcome.SKIPPED, "shutting down"))
                break
            why_not = self._rail(action, last_moved, unloads, per_broker)
            if why_not:
                done(self._record(action, Outcome.SKIPPED, why_not))
                continue
            if self.safety.dry_run:
                done(self._record(action, Outcome.DRY_RUN, "dry run: no call made"))
                continue
            if index and self.safety.pause_seconds:
                self.sleep(self.safety.pause_seconds)
            record = done(self._execute(action))
            if record.outcome is Outcome.EXECUTED:
                last_moved[action.bundle] = record.at_ms
                if isinstance(action, Unload):
                    unloads += 1
                    per_broker[action.source] = per_broker.get(action.source, 0) + 1
                    pending.append(
                        {
                            "bundle": action.bundle,
                            "source": action.source,
                            "destination": action.destination,
                            "at": record.at_ms,
                        }
                    )
        return records, ExecutorState(last_moved, tuple(pending))

    def _rail(self, action: Action, last_moved: dict[str, int], unloads: int, per_broker: dict[str, int]) -> str | None:
        killed = self.safety.killed()
        if killed:
            return killed
        namespace = bundle_names.namespace_of(action.bundle)
        if bundle_names.is_system_namespace(namespace):
            return f"system namespace {namespace} is never touched"
        if self.safety.excludes_namespace(namespace):
            return f"namespace {namespace} is excluded"
        if action.source in self.safety.excluded_brokers:
            return f"broker {action.source} is excluded"
        moved_at = last_moved.get(action.bundle)
        cooldown_ms = self.safety.cooldown_minutes * 60_000
        if moved_at is not None and self.now_ms() - moved_at < cooldown_ms:
            minutes = (self.now_ms() - moved_at) / 60000
            return f"bundle moved {minutes:.1f} min ago (cooldown {self.safety.cooldown_minutes:g} min)"
        if isinstance(action, Unload):
            if unloads >= self.safety.max_unloads_per_cycle:
                return f"max unloads per cycle ({self.safety.max_unloads_per_cycle}) reached"
            if per_broker.get(action.source, 0) >= self.safety.max_unloads_per_broker:
                return f"max unloads per broker ({self.safety.max_unloads_per_broker}) reached for {action.source}"
            if action.destination is None:
                return "no destination: the operator only moves bundles to a broker it chose"
            if action.destination == action.source:
                return "destination is the source"
            if action.destination in self.safety.excluded_brokers:
                return f"destination {action.destination} is excluded"
            try:
                active = set(self.client.active_brokers(self.cluster))
            except AdminError as exc:
                return f"cannot confirm the destination is active: {exc.reason}"
            if action.destination not in active:
                return f"destination {action.destination} is not an active broker"
        return None

    def _execute(self, action: Action) -> Record:
        try:
            if isinstance(action, Unload):
                self.client.unload(action.bundle, action.destination)
            elif isinstance(action, Split):
                namespace, bundle_range = bundle_names.split_bundle_name(action.bundle)
                bounds = sorted(bundle_names.parse_boundary(b) for b in self.client.bundles(namespace))
                if bundle_range not in bundle_names.ranges_of(bounds):  # re-read before every split
                    return self._record(action, Outcome.SKIPPED, "bundle no longer exists (split already?)")
                self.client.split(action.bundle, action.algorithm, list(action.boundaries) or None, action.unload)
        except TransportError as exc:
            if isinstance(action, Unload) and self._left_source(action):
                detail = f"no answer ({exc.reason}) but the bundle left its source"
                return self._record(action, Outcome.EXECUTED, detail)
            return self._record(action, Outcome.FAILED, exc.reason)
        except AdminError as exc:
            status = f"HTTP {exc.status}: " if exc.status else ""
            return self._record(action, Outcome.FAILED, f"{status}{exc.reason}")
        return self._record(action, Outcome.EXECUTED, "accepted")

    def _left_source(self, action: Unload) -> bool:
        try:
            return action.bundle not in self.client.owned_bundles(self.cluster, action.source)
        except AdminError:
            return False

    # ------------------------------------------------------------------ verify

    def verify(
        self, state: ExecutorState, on_record: Callable[[Record], None] = lambda _r: None
    ) -> tuple[list[Record], ExecutorState]:
        """Check unloads older than ``verify_after_seconds``: where did each bundle go?"""
        records: list[Record] = []
        still: list[dict[str, Any]] = []
        owners: dict[str, str] | None = None
        for item in state.pending:
            age_s = (self.now_ms() - int(item.get("at", 0))) / 1000
            if age_s < self.safety.verify_after_seconds:
                still.append(item)
                continue
            if owners is None:
                owners = self._owners()
                if owners is None:  # cannot read ownership now: try again next cycle
                    return records, state
            action = Unload(item["bundle"], item["source"], item.get("destination"), "verification")
            owner = owners.get(item["bundle"])
            if owner == item.get("destination"):
                records.append(self._record(action, Outcome.MOVED_AS_PLANNED, f"owned by {owner}"))
            elif owner is not None and owner != item["source"]:
                records.append(self._record(action, Outcome.MOVED_ELSEWHERE, f"owned by {owner}"))
            elif age_s < 3 * self.safety.verify_after_seconds:
                still.append(item)  # not looked up yet; clients reconnect lazily
            else:
                where = f"back on {owner}" if owner else "still unowned"
                records.append(self._record(action, Outcome.NOT_MOVED, where))
        for record in records:
            on_record(record)
        return records, replace(state, pending=tuple(still))

    def _owners(self) -> dict[str, str] | None:
        owners: dict[str, str] = {}
        try:
            for broker_id in self.client.active_brokers(self.cluster):
                for bundle in self.client.owned_bundles(self.cluster, broker_id):
                    owners[bundle] = broker_id
        except AdminError as exc:
            log.warning("verification postponed", reason=exc.reason)
            return None
        return owners

    def _record(self, action: Action, outcome: Outcome, detail: str) -> Record:
        record = Record(action, outcome, detail, self.now_ms())
        log.info(
            "action",
            type="unload" if isinstance(action, Unload) else "split",
            bundle=action.bundle,
            source=action.source,
            destination=getattr(action, "destination", None),
            dry_run=self.safety.dry_run,
            result=outcome.value,
            detail=detail,
            reason=action.reason,
        )
        return record
