"""``operator run`` as a process of its own against a simulated cluster: its stderr read line by line until a
line says what the test waits for, then SIGTERM. What it wrote, its exit code, and its child processes (Spark's
JVM) as they were while it ran."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.builders import operator_script


@dataclass
class DaemonRun:
    lines: list[str]
    reached: bool  # a line satisfied ``until`` within the time given
    returncode: int | None
    children: list[int]


def run_daemon(
    folder: Path,
    admin_url: str,
    until: Callable[[str], bool],
    timeout_s: float,
    env: Mapping[str, str],
    after_s: float = 0.0,
) -> DaemonRun:
    """Run the daemon in ``folder`` (state, history and profile there; JSON logs; no metrics port) with ``env``
    on top, until a stderr line satisfies ``until`` (or ``timeout_s``), ``after_s`` more, then stop it."""
    full_env = {
        **os.environ,
        "PULSAR_ADMIN_URL": admin_url,
        "PULSAR_LB_LOG_JSON": "true",
        "PULSAR_LB_METRICS_PORT": "0",
        "PULSAR_LB_STATE_FILE": str(folder / "state.json"),
        "PULSAR_LB_HISTORY_URI": str(folder / "history"),
        "PULSAR_LB_PROFILE_URI": str(folder / "profile"),
        **env,
    }
    lines: list[str] = []
    reached = threading.Event()
    with subprocess.Popen(
        [operator_script(), "run"],
        env=full_env,
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line)
                if until(line):
                    reached.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            reached.wait(timeout_s)
            time.sleep(after_s)
            children = children_of(proc.pid)
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            reader.join(10)
        finally:
            proc.kill()
    return DaemonRun(lines, reached.is_set(), proc.returncode, children)


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Alive, not a zombie waiting for whoever adopted it to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ended(pids: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while [pid for pid in pids if running(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    return not [pid for pid in pids if running(pid)]
