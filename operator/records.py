"""What the executor, the stores and the recorders share: actions' outcomes, and the record kept across cycles.

A module of its own, below all of them, so that the state file (``store/``) and the audit events (``record/``)
read the executor's record without importing the executor, and the executor's state is typed instead of looked
up by string. ``ExecutorState`` is on disk (the state file, and the Lease with leader election) in the format
``{"lastMoved": {bundle: ms}, "pending": [{"type", "bundle", "source", "destination", "at"}]}``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from pulsar_lb_operator.strategies import Action, Split, Unload, UserError


class Outcome(enum.Enum):
    DRY_RUN = "dry_run"  # would have been sent
    SKIPPED = "skipped"  # stopped by a safety rail
    EXECUTED = "executed"  # the admin API accepted it
    UNKNOWN = "unknown"  # sent, but no clear answer (timeout, reset, 5xx, 409): counted as done, verified later
    FAILED = "failed"  # the admin API refused it explicitly (nothing happened), or it could not be sent
    MOVED_AS_PLANNED = "moved_as_planned"  # verified: the bundle is owned by the planned destination
    MOVED_ELSEWHERE = "moved_elsewhere"  # verified: owned by another broker
    NOT_MOVED = "not_moved"  # verified: still unowned or back on its source after the check period
    SPLIT_DONE = "split_done"  # verified: the bundle's range no longer exists in its namespace
    NOT_SPLIT = "not_split"  # verified: the bundle's range still exists after the check period


@dataclass(frozen=True)
class Record:
    """One action and what came of it."""

    action: Action
    outcome: Outcome
    detail: str
    at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {**self.action.to_json(), "outcome": self.outcome.value, "detail": self.detail, "at": self.at_ms}


class ExecutorStateError(UserError, ValueError):
    """An executor state document that cannot be read back (never silently reset)."""


@dataclass(frozen=True)
class Pending:
    """An action sent (or about to be) whose outcome is still to be verified. Written before the call is sent, so
    a crash right after sending still leaves the bundle in cooldown and awaiting verification."""

    type: str  # "unload" | "split"
    bundle: str
    source: str
    destination: str | None  # an unload's planned destination; None: the cluster's choice, or a split
    at: int  # ms

    @classmethod
    def of(cls, action: Action, at: int) -> Pending:
        kind = "split" if isinstance(action, Split) else "unload"
        return cls(kind, action.bundle, action.source, action.destination if isinstance(action, Unload) else None, at)

    @property
    def is_split(self) -> bool:
        return self.type == "split"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "bundle": self.bundle,
            "source": self.source,
            "destination": self.destination,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, item: Any, index: int) -> Pending:
        """A state file's pending entry; one written before splits existed has no "type" and is an unload."""
        ok = (
            isinstance(item, dict)
            and isinstance(item.get("bundle"), str)
            and isinstance(item.get("source"), str)
            and isinstance(item.get("at"), int)
            and isinstance(item.get("destination"), str | None)
            and item.get("type", "unload") in ("unload", "split")
        )
        if not ok:
            raise ExecutorStateError(f"executor state: pending[{index}] is not a pending action")
        return cls(item.get("type", "unload"), item["bundle"], item["source"], item.get("destination"), item["at"])


@dataclass(frozen=True)
class ExecutorState:
    """Carried across cycles and restarts: when each bundle was last moved, and the actions to verify."""

    last_moved: dict[str, int] = field(default_factory=dict)
    pending: tuple[Pending, ...] = ()

    def awaiting(self) -> set[str]:
        return {p.bundle for p in self.pending}

    def merged(self, other: ExecutorState) -> ExecutorState:
        """Both records at once: the later move of each bundle, every pending action (a new leader
        inheriting the previous leader's record must honour its cooldowns and verify what it sent)."""
        moved = dict(self.last_moved)
        for bundle, at in other.last_moved.items():
            moved[bundle] = max(at, moved.get(bundle, at))
        seen = {(p.bundle, p.at) for p in self.pending}
        pending = [*self.pending, *(p for p in other.pending if (p.bundle, p.at) not in seen)]
        return ExecutorState(moved, tuple(pending))

    def recent(self, now_ms: int, keep_ms: float) -> ExecutorState:
        """Only what still matters: cooldowns younger than ``keep_ms``, and every pending action."""
        return ExecutorState({b: t for b, t in self.last_moved.items() if now_ms - t < keep_ms}, self.pending)

    def to_json(self) -> dict[str, Any]:
        return {"lastMoved": dict(sorted(self.last_moved.items())), "pending": [p.to_json() for p in self.pending]}

    @classmethod
    def from_json(cls, doc: Any) -> ExecutorState:
        if not isinstance(doc, dict):
            raise ExecutorStateError(f"executor state: expected an object, got {type(doc).__name__}")
        moved_doc = doc.get("lastMoved", {})
        pending_doc = doc.get("pending", [])
        if not isinstance(moved_doc, dict) or not isinstance(pending_doc, list):
            raise ExecutorStateError("executor state: lastMoved must be an object and pending a list")
        moved: dict[str, int] = {}
        for bundle, at in moved_doc.items():
            if not isinstance(at, int) or isinstance(at, bool):
                raise ExecutorStateError(f"executor state: lastMoved[{bundle!r}] is not a time in ms")
            moved[str(bundle)] = at
        return cls(moved, tuple(Pending.from_json(item, i) for i, item in enumerate(pending_doc)))
