"""Nothing the operator or the simulator starts outlives it: each command, each signal, real subprocesses.

Every process of ours carries a mark in its environment (inherited by whatever it starts: pulsar-lite, Spark's
JVM), and its temporary directory is one of the test's own (``TMPDIR``; Spark's scratch space through
``SPARK_LOCAL_DIRS`` and ``java.io.tmpdir``). The moment the command has exited, no marked process may run and
the temporary directory must be empty.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.builders import operator_script

MARK = "PULSAR_LB_TEST_MARK"


def processes_marked(mark: str) -> list[str]:
    """Command lines of the live processes whose environment holds ``MARK=mark`` (zombies have none)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes().split(b"\0")
            command = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{MARK}={mark}".encode() in environ:
            found.append(f"{entry.name}: {command[:150]}")
    return found


class Command:
    """``operator ARGS`` as a child process, marked, with its own temporary directory; output collected."""

    def __init__(self, tmp_path: Path, *args: str, **env: str) -> None:
        self.mark = secrets.token_hex(8)
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        self.proc = subprocess.Popen(
            [operator_script(), *args],
            env={**os.environ, MARK: self.mark, "TMPDIR": str(self.tmp), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout or ()), daemon=True)
        self._reader.start()

    def wait_for(self, condition, what: str, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert self.proc.poll() is None, (
                f"exited {self.proc.returncode} before {what}: {''.join(self.lines)[-2000:]}"
            )
            assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s: {''.join(self.lines)[-2000:]}"
            time.sleep(0.1)

    def running(self, name: str) -> bool:
        return any(name in line for line in processes_marked(self.mark) if str(self.proc.pid) != line.split(":")[0])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def stop(self, signum: int) -> int:
        """Send ``signum``, wait for the exit; then nothing of it may be left, at that very moment."""
        self.proc.send_signal(signum)
        try:
            code = self.proc.wait(60)
        finally:
            self.close()
        left, files = processes_marked(self.mark), sorted(p.name for p in self.tmp.iterdir())
        for line in left:  # never leave them to the next test
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        assert left == [], f"still running after the exit: {left}"
        assert files == [], f"left in the temporary directory: {files}"
        return code


SIGNALS = [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="SIGINT")]


@pytest.mark.parametrize("signum", SIGNALS)
@pytest.mark.parametrize("load_manager", ["modular", "extensible"])
def test_operator_simulate_leaves_nothing_behind(tmp_path, signum, load_manager):
    simulate = Command(tmp_path, "simulate", "demo", "--load-manager", load_manager)
    simulate.wait_for(lambda: any("Ctrl-C stops" in line for line in simulate.lines), "the simulator's banner")
    if load_manager == "extensible":
        assert simulate.running("pulsar-lite")
        assert [p.name[:18] for p in simulate.tmp.iterdir()] == ["pulsar-lb-sim-elm-"]
    assert simulate.stop(signum) == 0  # stopping is how it ends


@pytest.mark.parametrize("signum", SIGNALS)
def test_operator_demo_leaves_nothing_behind(tmp_path, signum):
    demo = Command(tmp_path, "demo", "--load-manager", "extensible", "--minutes", "100000")
    demo.wait_for(lambda: sum(line.strip()[:1].isdigit() for line in demo.lines) >= 2, "two cycles")
    assert demo.running("pulsar-lite")
    assert demo.stop(signum) == 130  # interrupted, as Ctrl-C has always said


@pytest.mark.parametrize("signum", SIGNALS)
def test_operator_run_leaves_no_spark_jvm_during_an_aggregation(live_served, tmp_path, signum):
    """The daemon's in-process aggregation starts Spark's JVM (pyspark launches it); a signal mid-job ends it too,
    and Spark's scratch directories with it."""
    settings = {
        "cycleIntervalSeconds": 1,
        "metricsPort": 0,
        "historyUri": str(tmp_path / "history"),
        "profileUri": str(tmp_path / "profile"),
        "aggregateEveryMinutes": 0.05,
        "shutdownTimeoutSeconds": 20,
    }
    args = [part for key, value in settings.items() for part in ("--set", f"{key}={value}")]
    tmp = str(tmp_path / "tmp")
    run = Command(
        tmp_path,
        "run",
        "--dry-run",
        *args,
        PULSAR_ADMIN_URL=live_served.admin_url,
        PULSAR_LB_STATE_FILE=str(tmp_path / "state.json"),
        SPARK_LOCAL_DIRS=tmp,
        JAVA_TOOL_OPTIONS=f"-Djava.io.tmpdir={tmp}",
    )
    run.wait_for(lambda: run.running("java"), "Spark's JVM", timeout_s=120)
    time.sleep(2)  # the job is under way
    assert run.stop(signum) == 0


def test_a_child_dies_with_its_parent_even_when_the_parent_is_killed(tmp_path):
    """SIGKILL runs no cleanup: the kernel ends pulsar-lite (PR_SET_PDEATHSIG). Only its directory stays."""
    simulate = Command(tmp_path, "simulate", "demo", "--load-manager", "extensible")
    simulate.wait_for(lambda: simulate.running("pulsar-lite"), "pulsar-lite")
    simulate.proc.kill()
    simulate.close()
    deadline = time.monotonic() + 5
    while processes_marked(simulate.mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = processes_marked(simulate.mark)
    for line in left:  # never leave them to the next test
        os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert left == []
    assert [p.name[: len("pulsar-lb-sim-elm-")] for p in simulate.tmp.iterdir()] == ["pulsar-lb-sim-elm-"]


SHORT_LIVED_THREAD = """
import sys, threading, time
from pulsar_lb_operator import lifecycle
started = []
worker = threading.Thread(target=lambda: started.append(lifecycle.spawn(["sleep", "60"])))
worker.start()
worker.join()
time.sleep(0.5)
print(started[0].pid, started[0].poll(), lifecycle.temp_dir("test"), flush=True)
"""


def test_a_child_forked_by_a_short_lived_thread_outlives_that_thread_but_not_the_process(tmp_path):
    """PR_SET_PDEATHSIG watches the forking thread: children are forked by one long-lived thread instead, and
    a normal exit ends them (atexit) and removes the directories."""
    mark = secrets.token_hex(8)
    env = {**os.environ, MARK: mark, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", SHORT_LIVED_THREAD], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    pid, poll, directory = done.stdout.split()
    assert poll == "None"  # alive after the thread that asked for it ended
    assert processes_marked(mark) == [] and not Path(f"/proc/{pid}").exists() and list(tmp_path.iterdir()) == []
    assert Path(directory).name.startswith("pulsar-lb-test-")
