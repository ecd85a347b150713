"""The rails the executor holds every action to, as the settings resolve them, and the kill switch.

Its own module so the settings can build it without importing the executor; the caps' defaults come
from ``strategies.rails`` so the planner and the executor can never disagree on them.

The kill switch fails safe. The environment variable is on for any value but an explicit false (``0``,
``false``, ``no``, ``off`` or empty), so a value nobody foresaw (``enabled``, ``stop``, ``Y``) stops the
operator rather than being ignored. The pause file (``operator pause``, or any ``touch``) stops it while
it exists, whatever it holds; a file that cannot be checked stops it too. With leader election the pause is
also on the Lease every replica reads (``shared_pause``), so a standby that takes over is paused too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pulsar_lb_operator.strategies import DEFAULT_RAILS, Rails

KILL_SWITCH_ENV = "PULSAR_LB_KILL_SWITCH"
OFF_VALUES = ("", "0", "false", "no", "off")  # the only values that leave the environment's switch off
NOTE_MAX_BYTES = 4096  # what `operator pause` writes is a few fields; a larger pause file is read no further


def switch_on(value: str | None) -> bool:
    """The environment's kill switch: unset, or one of OFF_VALUES, is off; anything else is on."""
    return value is not None and value.strip().lower() not in OFF_VALUES


@dataclass(frozen=True)
class KillSwitch:
    """Why nothing is sent: where the switch is (the environment or the pause file) and, for a pause
    written by ``operator pause`` or the status page, who set it, why and since when."""

    where: str  # "environment variable PULSAR_LB_KILL_SWITCH is set" | "file <path> exists" | …
    # "environment" (lifted only by a restart without it) | "file" | "lease" (both: operator resume)
    source: str = "file"
    by: str = ""
    reason: str = ""
    since_ms: int | None = None

    def line(self) -> str:
        """One line for an action's detail and the logs."""
        who = f"paused by {self.by}" + (f": {self.reason}" if self.reason else "") + "; " if self.by else ""
        return f"kill switch: {who}{self.where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "on": True,
            "where": self.where,
            "source": self.source,
            "by": self.by,
            "reason": self.reason,
            "since": self.since_ms,
        }


def read_pause_file(path: str) -> KillSwitch | None:
    """The pause file's switch; None when there is no such file. Fail-safe: a file that exists is on
    whatever it holds, and a path that cannot be checked (permissions, I/O) is on too."""
    try:
        found = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return KillSwitch(f"file {path} cannot be checked ({exc.strerror or exc}): nothing is sent until it can")
    switch = KillSwitch(f"file {path} exists", since_ms=int(found.st_mtime * 1000))
    if not stat.S_ISREG(found.st_mode):  # a directory, a FIFO: on, and never opened
        return switch
    try:
        with open(path, "rb") as handle:
            return noted(switch, handle.read(NOTE_MAX_BYTES))
    except OSError:
        return switch


def noted(switch: KillSwitch, note: bytes | str) -> KillSwitch:
    """``switch`` with who, why and since when from the pause's note (``operator pause`` writes it: in the pause
    file, or on the Lease). On whatever the note holds: empty, text or a half-written note only give no details."""
    try:
        doc = json.loads(note[:NOTE_MAX_BYTES])
    except ValueError:  # UnicodeDecodeError included
        return switch
    if not isinstance(doc, dict):
        return switch
    since = doc.get("since")
    return dataclasses.replace(
        switch,
        by=str(doc.get("by") or "")[:200],
        reason=str(doc.get("reason") or "")[:500],
        since_ms=since if isinstance(since, int) and not isinstance(since, bool) else switch.since_ms,
    )


@dataclass(frozen=True)
class Safety:
    """Rails checked before each action; the defaults are deliberately conservative."""

    dry_run: bool = True
    max_unloads_per_cycle: int = DEFAULT_RAILS.max_unloads_per_cycle
    max_unloads_per_broker: int = DEFAULT_RAILS.max_unloads_per_broker
    cooldown_minutes: float = 30  # loadBalancerSheddingGracePeriodMinutes
    excluded_namespaces: tuple[str, ...] = ()  # regular expressions, matched against tenant/namespace
    excluded_brokers: tuple[str, ...] = ()
    kill_switch_file: str | None = None  # the pause file: settings resolve it beside the state file
    kill_switch_env: str = KILL_SWITCH_ENV
    pause_seconds: float = 0.0
    verify_after_seconds: float = 120.0
    # the pause every replica shares (run/lease_pause.py: the Lease's, as the elector last read it); None: none
    shared_pause: Callable[[], KillSwitch | None] | None = field(default=None, compare=False, repr=False)

    def kill_switch(self) -> KillSwitch | None:
        """The switch as it is now, read at every call: the environment first, then the pause file, then the
        shared pause."""
        if switch_on(os.environ.get(self.kill_switch_env)):
            return KillSwitch(f"environment variable {self.kill_switch_env} is set", source="environment")
        found = read_pause_file(self.kill_switch_file) if self.kill_switch_file else None
        return found or (self.shared_pause() if self.shared_pause is not None else None)

    def killed(self) -> str | None:
        switch = self.kill_switch()
        return switch.line() if switch else None

    @property
    def rails(self) -> Rails:
        """The caps as the strategies see them: a plan they make fits what the executor will send."""
        return Rails(self.max_unloads_per_cycle, self.max_unloads_per_broker)

    def excludes_namespace(self, namespace: str) -> bool:
        return any(re.fullmatch(p, namespace) for p in self.excluded_namespaces)
