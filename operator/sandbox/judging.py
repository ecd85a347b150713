"""How the rehearsal judges a case from the outside: the simulator's request log and the state file on disk.

``Tally`` is one row of ``operator rehearse``'s table; the functions below count what went wrong in a
request log (see the columns in rehearse.py), never from what the operator says about itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsar_lb_operator.simulator.http import Request
from pulsar_lb_operator.store import files
from pulsar_lb_operator.store.statefile import OperatorState
from pulsar_lb_operator.strategies import StateError

MAYBE_ACTED = (0, 409)  # no answer, or a conflict: as unknown as a 5xx
MUTATING = ("/unload", "/split")


@dataclass
class Tally:
    """One row of the table."""

    case: str
    faults_injected: int = 0
    daemon_crashes: int = 0
    rail_violations: int = 0
    double_actions: int = 0
    state_lost: int = 0
    secrets_in_logs: int = 0
    sent_astray: int = 0
    left_behind: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    COLUMNS = (
        "faults_injected",
        "daemon_crashes",
        "rail_violations",
        "double_actions",
        "state_lost",
        "secrets_in_logs",
        "sent_astray",
        "left_behind",
    )

    @property
    def clean(self) -> bool:
        return not any(getattr(self, c) for c in self.COLUMNS[1:])

    def add(self, other: Tally) -> None:
        for column in self.COLUMNS:
            setattr(self, column, getattr(self, column) + getattr(other, column))

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            **{c: getattr(self, c) for c in self.COLUMNS},
            "notes": self.notes,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class Window:
    """The requests one cycle made: indices into the request log, simulated time, owners at its start."""

    start: int
    end: int
    at_ms: int
    owners: dict[str, str]


def bundle_of(request: Request) -> str | None:
    for suffix in MUTATING:
        if request.method == "PUT" and request.path.endswith(suffix):
            return request.path.removeprefix("/admin/v2/namespaces/").removesuffix(suffix)
    return None


def calls(requests: Iterable[Request]) -> list[Request]:
    """Logical mutating calls: the last hop of each redirect chain (a reset hop is logged with status 0)."""
    return [r for r in requests if bundle_of(r) is not None and r.status != 307]


def maybe_acted(request: Request) -> bool:
    """Anything but an explicit refusal may have acted: a 2xx, a 5xx, a 409, or no answer at all."""
    return request.status in MAYBE_ACTED or 200 <= request.status < 300 or request.status >= 500


def rail_violations(requests: list[Request], windows: list[Window], per_cycle: int, per_broker: int) -> list[str]:
    found: list[str] = []
    for number, window in enumerate(windows, 1):
        made = calls(requests[window.start : window.end])
        if len(made) > per_cycle:
            found.append(f"cycle {number}: {len(made)} mutating calls (cap {per_cycle})")
        sources: dict[str, int] = {}
        for request in made:
            source = window.owners.get(bundle_of(request) or "", "?")
            sources[source] = sources.get(source, 0) + 1
        for source, count in sorted(sources.items()):
            if count > per_broker:
                found.append(f"cycle {number}: {count} mutating calls on bundles of {source} (cap {per_broker})")
    return found


def double_actions(requests: list[Request], windows: list[Window], grace_ms: float) -> list[str]:
    found: list[str] = []
    acted_at: dict[str, int] = {}
    for window in windows:
        for request in calls(requests[window.start : window.end]):
            bundle = bundle_of(request) or ""
            before = acted_at.get(bundle)
            if before is not None and window.at_ms - before < grace_ms:
                found.append(
                    f"{bundle}: called again {(window.at_ms - before) / 60000:.0f} min after a call that may have acted"
                )
            if maybe_acted(request):
                acted_at[bundle] = window.at_ms
    return found


def state_lost(requests: list[Request], state_file: Path) -> list[str]:
    """Bundles a call that may have acted went to, missing from the cooldowns on disk."""
    acted = {bundle for r in calls(requests) if maybe_acted(r) and (bundle := bundle_of(r)) is not None}
    if not acted:
        return []
    try:
        remembered = set(OperatorState.from_json(files.read_json(state_file, "state file")).executor.last_moved)
    except (files.FileError, StateError) as exc:
        return [f"state file unreadable: {exc}"]
    return [f"{b}: not in the state file" for b in sorted(acted - remembered)]


def secrets_in(text: str, token: str) -> int:
    return text.count(token)
