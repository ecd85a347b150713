"""What the status page, the control API and the workflows read of the running daemon, declared below them all.

``Daemon`` (daemon.py) serves these pages and runs these workflows, so they cannot import it without an import
cycle; they take a ``DaemonView`` instead, which the daemon is.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from pulsar_lb_operator.act.executor import Executor
from pulsar_lb_operator.run.cycle import CycleResult
from pulsar_lb_operator.run.lease_pause import SharedPause
from pulsar_lb_operator.run.metrics import Metrics
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.store.control import ControlFile


class Elector(Protocol):
    """Leader election (operator/run/leadership.py): only the leader acts, and it keeps its record on the Lease."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def is_leader(self) -> bool: ...

    def publish(self, key: str, value: str) -> bool: ...

    def inherited(self, key: str) -> str | None: ...

    def annotation(self, key: str) -> str | None: ...


class DaemonView(Protocol):
    settings: OperatorSettings
    cluster: str
    control: ControlFile
    executor: Executor
    elector: Elector | None
    metrics: Metrics
    recent: deque[CycleResult]  # the last cycles, newest last
    usage: deque[tuple[int, dict[str, float]]]  # (ms, broker → usage) per cycle
    failure: tuple[int, str] | None  # the last cycle's failure (ms, one line), until a cycle succeeds

    @property
    def shared_pause(self) -> SharedPause | None: ...

    def builtin_balancer(self) -> dict[str, Any] | None: ...

    def healthy(self) -> bool: ...

    def ready(self) -> bool: ...
