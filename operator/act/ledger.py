"""What the rails count within one cycle: the executor's record (``records.ExecutorState``: when each bundle was
last moved, its cooldown, and the actions whose outcome is still to be verified) during the cycle, plus the calls
counted toward the caps at sending; the executor's preview and its execution keep one each, the same way, so that
what a dry run shows is what is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pulsar_lb_operator.records import ExecutorState, Pending
from pulsar_lb_operator.strategies import Action


@dataclass
class Ledger:
    """What the rails count within one cycle: cooldowns and pending verifications (carried over from the state),
    and the calls sent so far, in all and per source broker (counted at sending, whatever comes back)."""

    last_moved: dict[str, int]
    pending: list[Pending]
    sent: int = 0
    per_broker: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, state: ExecutorState) -> Ledger:
        return cls(dict(state.last_moved), list(state.pending))

    def count(self, action: Action, at: int) -> tuple[Pending, int | None]:
        """The action as sent: counted toward the caps, in cooldown and awaiting verification. Returns its pending
        entry and the bundle's previous move, to undo the cooldown and the verification if it is refused."""
        self.sent += 1
        self.per_broker[action.source] = self.per_broker.get(action.source, 0) + 1
        previous = self.last_moved.get(action.bundle)
        entry = Pending.of(action, at)
        self.last_moved[action.bundle] = at
        self.pending.append(entry)
        return entry, previous

    def undo(self, action: Action, entry: Pending, previous: int | None) -> None:
        """Nothing happened (refused, or never sent): no cooldown, nothing to verify; the caps keep the count."""
        self.pending.remove(entry)
        if previous is None:
            self.last_moved.pop(action.bundle)
        else:
            self.last_moved[action.bundle] = previous

    def state(self) -> ExecutorState:
        return ExecutorState(dict(self.last_moved), tuple(self.pending))
