"""What the rails count: the executor's record carried across cycles and restarts, and one cycle's ledger.

``ExecutorState`` is on disk (the state file, and the Lease with leader election): when each bundle was last
moved (its cooldown) and the actions whose outcome is still to be verified. ``Ledger`` is that record during
one cycle, plus the calls counted toward the caps at sending; the executor's preview and its execution keep
one each, the same way, so that what a dry run shows is what is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pulsar_lb_operator.strategies import Action, Split, Unload, UserError


class ExecutorStateError(UserError, ValueError):
    """An executor state document that cannot be read back (never silently reset)."""


@dataclass(frozen=True)
class ExecutorState:
    """Carried across cycles and restarts: when each bundle was last moved, and actions to verify.

    A pending entry is ``{"type": "unload"|"split", "bundle", "source", "destination", "at"}``; it is
    written before the call is sent, so a crash right after sending still leaves the bundle in
    cooldown and awaiting verification.
    """

    last_moved: dict[str, int] = field(default_factory=dict)
    pending: tuple[dict[str, Any], ...] = ()

    def awaiting(self) -> set[str]:
        return {p["bundle"] for p in self.pending}

    def merged(self, other: ExecutorState) -> ExecutorState:
        """Both records at once: the later move of each bundle, every pending action (a new leader
        inheriting the previous leader's record must honour its cooldowns and verify what it sent)."""
        moved = dict(self.last_moved)
        for bundle, at in other.last_moved.items():
            moved[bundle] = max(at, moved.get(bundle, at))
        seen = {(p["bundle"], p["at"]) for p in self.pending}
        pending = [*self.pending, *(p for p in other.pending if (p["bundle"], p["at"]) not in seen)]
        return ExecutorState(moved, tuple(pending))

    def recent(self, now_ms: int, keep_ms: float) -> ExecutorState:
        """Only what still matters: cooldowns younger than ``keep_ms``, and every pending action."""
        return ExecutorState({b: t for b, t in self.last_moved.items() if now_ms - t < keep_ms}, self.pending)

    def to_json(self) -> dict[str, Any]:
        return {"lastMoved": dict(sorted(self.last_moved.items())), "pending": list(self.pending)}

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
        pending: list[dict[str, Any]] = []
        for i, item in enumerate(pending_doc):
            ok = (
                isinstance(item, dict)
                and isinstance(item.get("bundle"), str)
                and isinstance(item.get("source"), str)
                and isinstance(item.get("at"), int)
                and isinstance(item.get("destination"), str | None)
                and item.get("type", "unload") in ("unload", "split")
            )
            if not ok:
                raise ExecutorStateError(f"executor state: pending[{i}] is not a pending action")
            pending.append({"type": "unload", **item})
        return cls(moved, tuple(pending))


@dataclass
class Ledger:
    """What the rails count within one cycle: cooldowns and pending verifications (carried over from the state),
    and the calls sent so far, in all and per source broker (counted at sending, whatever comes back)."""

    last_moved: dict[str, int]
    pending: list[dict[str, Any]]
    sent: int = 0
    per_broker: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, state: ExecutorState) -> Ledger:
        return cls(dict(state.last_moved), list(state.pending))

    def count(self, action: Action, at: int) -> tuple[dict[str, Any], int | None]:
        """The action as sent: counted toward the caps, in cooldown and awaiting verification. Returns its pending
        entry and the bundle's previous move, to undo the cooldown and the verification if it is refused."""
        self.sent += 1
        self.per_broker[action.source] = self.per_broker.get(action.source, 0) + 1
        previous = self.last_moved.get(action.bundle)
        entry = {
            "type": "split" if isinstance(action, Split) else "unload",
            "bundle": action.bundle,
            "source": action.source,
            "destination": action.destination if isinstance(action, Unload) else None,
            "at": at,
        }
        self.last_moved[action.bundle] = at
        self.pending.append(entry)
        return entry, previous

    def undo(self, action: Action, entry: dict[str, Any], previous: int | None) -> None:
        """Nothing happened (refused, or never sent): no cooldown, nothing to verify; the caps keep the count."""
        self.pending.remove(entry)
        if previous is None:
            self.last_moved.pop(action.bundle)
        else:
            self.last_moved[action.bundle] = previous

    def state(self) -> ExecutorState:
        return ExecutorState(dict(self.last_moved), tuple(self.pending))
