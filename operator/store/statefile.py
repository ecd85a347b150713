"""The operator's state file, and the lock that makes its holder the one active instance on this host.

Read strictly: a state file that exists but is not a complete operator state stops the operator with
a message naming the file and the fix (``--reset-state``), because starting fresh silently would
forget every cooldown and every unload awaiting verification — exactly what lets bundles flap.
Written atomically (temporary file, fsync, rename) before every action the executor sends.

The lock is an exclusive ``flock`` on ``<stateFile>.lock``: a second ``operator run`` or live
``operator rebalance`` on the same state exits with code 3 instead of acting beside the first. The
kernel releases it when the process dies, however it dies, so a SIGKILL never leaves it stale.
Across hosts (two replicas) the Kubernetes Lease does the same job (``leadership.py``).
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import json
import os
import time
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from pulsar_lb_operator import hints
from pulsar_lb_operator.records import ExecutorState, ExecutorStateError
from pulsar_lb_operator.store import files
from pulsar_lb_operator.strategies import PulsarLbError, StateError, StrategyState

log = structlog.get_logger(__name__)


STATE_FORMAT = "pulsar-lb-operator-state/1"


@dataclass(frozen=True)
class OperatorState:
    """Everything that must survive a restart: the strategy's state and the executor's."""

    strategy: StrategyState = field(default_factory=StrategyState)
    executor: ExecutorState = field(default_factory=ExecutorState)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "strategy": self.strategy.to_json(),
            "executor": self.executor.to_json(),
        }

    @classmethod
    def from_json(cls, doc: Any) -> OperatorState:
        """Strict: a document that is not a complete operator state raises StateError, never resets."""
        if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
            raise StateError(f"not a {STATE_FORMAT} document")
        try:
            return cls(StrategyState.from_json(doc.get("strategy")), ExecutorState.from_json(doc.get("executor")))
        except ExecutorStateError as exc:
            raise StateError(str(exc)) from None


class StateFileError(files.FileError):
    """A state file that exists but cannot be used; the message names the file and the fix."""


class AnotherInstanceError(PulsarLbError, RuntimeError):
    """Another operator process holds the state lock: neither a bad input nor the cluster's doing."""

    exit_code = 3


def load(path: str | Path, reset: bool = False) -> OperatorState:
    """The state in ``path``; a fresh state when it does not exist, or when ``reset`` (the old file is kept)."""
    target = Path(path)
    if not target.exists():
        return OperatorState()
    if reset:
        kept = target.with_name(f"{target.name}.reset-{time.strftime('%Y%m%dT%H%M%S')}")
        os.replace(target, kept)
        log.warning("state reset on request: starting with no cooldowns or pending verifications", kept=str(kept))
        return OperatorState()
    fix = "repair or remove it, or start over with --reset-state (the old file is kept beside it)"
    try:
        document = files.read_json(target, "state file")
        state = OperatorState.from_json(document)
    except files.FileError as exc:
        raise StateFileError(f"{exc}; {fix}") from None
    except StateError as exc:
        raise StateFileError(f"state file {str(target)!r} is not a valid operator state ({exc}); {fix}") from None
    log.info("state restored", path=str(target), pending=len(state.executor.pending))
    return state


def save(path: str | Path, state: OperatorState) -> None:
    files.write_json_atomically(path, state.to_json())


class InstanceLock:
    """``with InstanceLock(state_file):`` — held for the life of the command."""

    def __init__(self, state_file: str | Path) -> None:
        self.path = Path(f"{state_file}.lock")
        self._fd: int | None = None

    def acquire(self) -> InstanceLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            fix = hints.file_fix(exc, self.path, writing=True) or "choose another stateFile"
            raise StateFileError(
                f"cannot create the state lock {str(self.path)!r}: {exc.strerror or exc}: {fix} "
                "(stateFile in the settings, or --set stateFile=PATH)"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", errors="replace").strip() or "unknown"
            os.close(fd)
            raise AnotherInstanceError(
                f"another operator instance is active on this state (lock {self.path} held by pid {holder}); "
                "stop it first, or give this one its own stateFile if it balances another cluster"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    @staticmethod
    def holder(state_file: str | Path) -> int | None:
        """The pid of the process holding the lock on ``state_file`` (0 when it wrote none), None when no
        process does. The probe takes a shared lock for an instant, never creating the lock file."""
        try:
            fd = os.open(f"{state_file}.lock", os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):  # no lock file, so no holder (taking it says what is wrong)
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = os.read(fd, 64).decode("ascii", errors="replace").strip()
                return int(text) if text.isdigit() else 0
            return None
        finally:
            os.close(fd)  # releases the probe's shared lock

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the flock
            self._fd = None

    def __enter__(self) -> InstanceLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# The strategy's state as a Lease annotation (leader election): its hit counters, EMAs, recent unloads and
# in-flight moves — what makes a new leader decide as the old one would have — without the per-bundle
# averages, which are rebuilt from the reports in a few cycles (as Pulsar's own new leader does) and would
# not fit: the API server allows 256 KiB for all of an object's annotations.
COUNTERS_MAX_BYTES = 96 * 1024


def strategy_counters(strategy: StrategyState) -> str | None:
    """The annotation's value (JSON, zlib, base64), or None when it would exceed COUNTERS_MAX_BYTES."""
    doc = replace(strategy, bundle_data=StrategyState().bundle_data).to_json()
    raw = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    text = base64.b64encode(zlib.compress(raw, 9)).decode("ascii")
    return text if len(text) <= COUNTERS_MAX_BYTES else None


def read_strategy_counters(text: str) -> StrategyState:
    """The counters another leader published; StateError for anything else (never a silent reset)."""
    try:
        raw = zlib.decompressobj().decompress(base64.b64decode(text, validate=True), 16 * 1024 * 1024)
        return StrategyState.from_json(json.loads(raw))
    except (binascii.Error, zlib.error, ValueError) as exc:
        raise StateError(f"the strategy counters on the Lease are unreadable: {exc}") from None
