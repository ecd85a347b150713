"""What operators ask of a running daemon — proposals to approve or reject, brokers to drain — on disk.

The daemon and the commands (``operator approve``, ``operator drain``, the status page's buttons)
share one small JSON file beside the state file, ``<stateFile>.control.json``. Every change is a
read-modify-write under an exclusive ``flock`` of its own (held for milliseconds, unlike the
instance lock the daemon holds for its life), written atomically, so a command never waits for a
cycle and nothing is lost when two write at once. It survives restarts: a drain or an approval
outlives the process that made it.

A proposal is a cycle's plan the daemon did not execute (``approval: manual``): it waits for a
person, and expires after one shedding interval — by then the cluster has moved on and the plan was
made for a cluster that no longer exists.

The daemon also keeps its own record there (``daemon``: its pid, whether it leads, its approval mode and
dryRun), so a command can tell whether anyone will carry out what it asks — a drain in a standby's file,
or an approval while approval is auto, would otherwise be a success message for nothing.

The pause file (``operator pause``, the status page's Pause) is not in this document but beside it: the
executor checks it before every call by its mere existence, which no half-written or unreadable document
can turn off.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsar_lb_operator.store import files

FORMAT = "pulsar-lb-control/1"
PAUSE_FORMAT = "pulsar-lb-pause/1"
PENDING, APPROVED, REJECTED, EXPIRED, EXECUTED = "pending", "approved", "rejected", "expired", "executed"


class ControlError(files.FileError):
    """A request that cannot be carried out (unknown proposal, already decided, …): one line, exit 2."""


@dataclass(frozen=True)
class DaemonRecord:
    """What the daemon on this state says about itself; written when it starts leading or standing by."""

    pid: int
    leading: bool
    approval: str  # auto | manual
    dry_run: bool
    pause_file: str  # the kill switch file it checks before every call (absolute)
    leader: str | None = None  # on a standby: the Lease holder it last saw
    kill_switch_env: bool = False  # the daemon's own environment stops it (a command's environment may differ)

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "leading": self.leading,
            "approval": self.approval,
            "dryRun": self.dry_run,
            "pauseFile": self.pause_file,
            "leader": self.leader,
            "killSwitchEnv": self.kill_switch_env,
        }

    @classmethod
    def from_json(cls, doc: Any) -> DaemonRecord | None:
        """None for anything but a complete record: a command then says it cannot tell, never guesses."""
        if not isinstance(doc, dict):
            return None
        pid, leader, pause_file = doc.get("pid"), doc.get("leader"), doc.get("pauseFile")
        if not (isinstance(pid, int) and isinstance(doc.get("leading"), bool) and isinstance(doc.get("dryRun"), bool)):
            return None
        if doc.get("approval") not in ("auto", "manual") or not isinstance(leader, str | None):
            return None
        if not isinstance(pause_file, str):
            return None
        leading, approval, dry_run = doc["leading"], doc["approval"], doc["dryRun"]
        return cls(pid, leading, approval, dry_run, pause_file, leader, doc.get("killSwitchEnv") is True)


@dataclass
class Control:
    """The document: proposals by id, drains by broker id, and the daemon's record of itself."""

    proposals: dict[str, dict[str, Any]] = field(default_factory=dict)
    drains: dict[str, dict[str, Any]] = field(default_factory=dict)
    daemon: DaemonRecord | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {"format": FORMAT, "proposals": self.proposals, "drains": self.drains}
        return {**doc, "daemon": self.daemon.to_json()} if self.daemon else doc

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Control:
        ok = (
            isinstance(doc, dict)
            and doc.get("format") == FORMAT
            and isinstance(doc.get("proposals", {}), dict)
            and isinstance(doc.get("drains", {}), dict)
            and all(isinstance(p, dict) and isinstance(p.get("status"), str) for p in doc.get("proposals", {}).values())
            and all(isinstance(d, dict) for d in doc.get("drains", {}).values())
        )
        if not ok:
            raise ControlError(f"{where} is not a {FORMAT} document; repair or remove it")
        return cls(
            dict(doc.get("proposals", {})), dict(doc.get("drains", {})), DaemonRecord.from_json(doc.get("daemon"))
        )

    # ------------------------------------------------------------------ proposals

    def expire(self, now_ms: int) -> list[str]:
        """Pending or approved-but-not-executed proposals past their time: expired. Returns their ids."""
        gone = [
            pid
            for pid, p in self.proposals.items()
            if p["status"] in (PENDING, APPROVED) and now_ms >= int(p.get("expiresAt", 0))
        ]
        for pid in gone:
            self.proposals[pid]["status"] = EXPIRED
        return gone

    def decide(self, proposal_id: str, approve: bool, now_ms: int, by: str) -> dict[str, Any]:
        self.expire(now_ms)
        proposal = self.proposals.get(proposal_id)
        if proposal is None:
            known = ", ".join(sorted(self.proposals)[-5:]) or "none"
            raise ControlError(f"no proposal {proposal_id!r} (latest: {known})")
        # an approved one not yet taken (``take_approved`` marks it executed under this file's lock) may still be
        # rejected: a person who approved it and then paused must be able to withdraw it before resuming
        decidable = (PENDING,) if approve else (PENDING, APPROVED)
        if proposal["status"] not in decidable:
            raise ControlError(f"proposal {proposal_id} is {proposal['status']}, not {' or '.join(decidable)}")
        proposal.update(status=APPROVED if approve else REJECTED, decidedAt=now_ms, decidedBy=by)
        return proposal

    def approved(self) -> list[dict[str, Any]]:
        return [p for _, p in sorted(self.proposals.items()) if p["status"] == APPROVED]

    def prune(self, keep: int = 50) -> None:
        """Keep the newest ``keep`` decided proposals; pending ones always stay."""
        decided = sorted(
            (p.get("createdAt", 0), pid) for pid, p in self.proposals.items() if p["status"] not in (PENDING, APPROVED)
        )
        for _, pid in decided[: max(0, len(decided) - keep)]:
            del self.proposals[pid]


class ControlFile:
    """``with control.change() as doc:`` — read, change and write back under the file's own lock."""

    def __init__(self, state_file: str | Path) -> None:
        self.path = Path(f"{state_file}.control.json")
        self._lock_path = Path(f"{state_file}.control.lock")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self) -> Control:
        """The document; ControlError (which every reader handles) for a file that cannot be read or is not JSON as
        much as for one that is not a control document."""
        if not self.path.exists():
            return Control()
        try:
            document = files.read_json(self.path, "control file")
        except ControlError:
            raise
        except files.FileError as exc:
            raise ControlError(f"{exc}; repair or remove it") from None
        return Control.from_json(document, str(self.path))

    def read(self) -> Control:
        with self._locked():
            return self._read()

    @contextmanager
    def change(self) -> Iterator[Control]:
        with self._locked():
            doc = self._read()
            yield doc
            files.write_json_atomically(self.path, doc.to_json())

    def update(self, change: Callable[[Control], Any]) -> Any:
        with self.change() as doc:
            return change(doc)


def pause_note(by: str, reason: str, now_ms: int) -> dict[str, Any]:
    """What a pause says of itself (in the pause file, and on the Lease): who, why and since when."""
    return {"format": PAUSE_FORMAT, "by": by, "reason": reason, "since": now_ms}


def write_pause(path: str | Path, by: str, reason: str, now_ms: int) -> None:
    """Turn the kill switch on: the pause file, with who, why and since when for the status page."""
    files.write_json_atomically(path, pause_note(by, reason, now_ms))


def remove_pause(path: str | Path) -> bool:
    """Turn the pause file's switch off; False when there was none."""
    try:
        Path(path).unlink()
    except FileNotFoundError:
        return False
    return True
