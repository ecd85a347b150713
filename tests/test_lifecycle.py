"""Nothing the operator or the simulator starts outlives it: each command, each signal, real subprocesses.

``processes.left_behind`` (the rehearsal's judge) starts the command with a mark in its environment —
inherited by whatever it starts: pulsar-lite, Spark's JVM — and a temporary directory of its own (``TMPDIR``;
Spark's scratch space through ``SPARK_LOCAL_DIRS`` and ``java.io.tmpdir``), sends the signal once it is up, and
counts, the moment it has exited, the marked processes still running and what is left in that directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pulsar_lb_operator.sandbox.processes import MARK, left_behind, processes_marked

SIGNALS = [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="SIGINT")]


def up_for(seconds: float, condition):
    """A ``ready`` that holds once ``condition(output, others)`` has held for ``seconds``."""
    since: list[float] = []

    def ready(output: str, others: str) -> bool:
        if not condition(output, others):
            return False
        since[:] = since or [time.monotonic()]
        return time.monotonic() - since[0] >= seconds

    return ready


def assert_nothing_left(tally) -> None:
    assert tally.daemon_crashes == 0 and tally.left_behind == 0, tally.notes


@pytest.mark.parametrize("signum", [*SIGNALS, pytest.param(signal.SIGHUP, id="SIGHUP")])  # HUP: its terminal closed
@pytest.mark.parametrize("load_manager", ["modular", "extensible"])
def test_operator_simulate_leaves_nothing_behind(signum, load_manager):
    started = "pulsar-lite" if load_manager == "extensible" else ""
    ready = lambda output, others: "Ctrl-C stops" in output and started in others  # noqa: E731
    # stopping is how it ends: exit 0
    assert_nothing_left(left_behind(["simulate", "demo", "--load-manager", load_manager], signum, ready, 0))


@pytest.mark.parametrize("signum", SIGNALS)
def test_operator_demo_leaves_nothing_behind(signum):
    cycles = lambda output, others: sum(line.strip()[:1].isdigit() for line in output.splitlines()) >= 2  # noqa: E731
    args = ["demo", "--load-manager", "extensible", "--minutes", "100000"]
    assert_nothing_left(left_behind(args, signum, cycles, 130))  # interrupted, as Ctrl-C has always said


@pytest.mark.parametrize("signum", [*SIGNALS, pytest.param(signal.SIGHUP, id="SIGHUP")])
def test_operator_run_leaves_no_spark_jvm_during_an_aggregation(live_served, tmp_path, signum):
    """The daemon's in-process aggregation starts Spark's JVM (pyspark launches it); a signal while the job
    runs ends it too, and Spark's scratch directories with it."""
    settings = {
        "cycleIntervalSeconds": 1,
        "metricsPort": 0,
        "historyUri": str(tmp_path / "history"),
        "profileUri": str(tmp_path / "profile"),
        "aggregateEveryMinutes": 0.05,
        "stateFile": str(tmp_path / "state.json"),
        "shutdownTimeoutSeconds": 10,
    }
    args = ["run", "--dry-run", *(part for key, value in settings.items() for part in ("--set", f"{key}={value}"))]
    jvm = up_for(2.0, lambda _output, others: "java" in others)  # the job is under way
    assert_nothing_left(left_behind(args, signum, jvm, 0, env={"PULSAR_ADMIN_URL": live_served.admin_url}))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_operator_aggregate_leaves_no_spark_jvm(tmp_path, signum):
    """The one-shot aggregation ends as Ctrl-C ends it (130): Spark stopped, its JVM and scratch space gone."""
    (tmp_path / "history").mkdir()  # there, though empty: a local history that is not there is refused before Spark
    args = ["aggregate", "--history", str(tmp_path / "history"), "--out", str(tmp_path / "profile")]
    jvm = up_for(0.5, lambda _output, others: "java" in others)  # Spark is starting
    assert_nothing_left(left_behind(args, signum, jvm, 130))


def test_a_child_dies_with_its_parent_even_when_the_parent_is_killed():
    """SIGKILL runs no cleanup: the kernel ends pulsar-lite (PR_SET_PDEATHSIG). Only its directory stays."""
    ready = lambda output, others: "pulsar-lite" in others  # noqa: E731
    args = ["simulate", "demo", "--load-manager", "extensible"]
    tally = left_behind(args, signal.SIGKILL, ready, -signal.SIGKILL, settle_s=5.0)
    assert tally.daemon_crashes == 0 and tally.left_behind == 1, tally.notes
    (note,) = tally.notes
    assert note.startswith("left in its temporary directory: pulsar-lb-sim-elm-")


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


def finishing(script: str, tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -c script args`` as a process of its own (``finish`` ends what it started and exits), with ``tmp`` as
    its temporary directory and ``env`` added to its environment; run in ``tmp``'s parent."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        env={**os.environ, "TMPDIR": str(tmp), **env},
        cwd=tmp.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )


CHILD_STOPS = """
import subprocess, sys, time
from pulsar_lb_operator import lifecycle
scratch = lifecycle.temp_dir("test")
# a child we did not spawn (as pyspark starts Spark's JVM) that runs sys.argv[1] as it stops
stopping = sys.argv[1].replace("SCRATCH", str(scratch))
subprocess.Popen(["sh", "-c", f"trap '{stopping}' TERM; sleep 30 & wait"])
time.sleep(0.3)
lifecycle.finish()
"""


def test_a_directory_a_stopping_child_writes_in_is_removed_after_it_ended(tmp_path):
    """Spark's JVM, stopped during its start-up, can make its scratch directory (with its parents) after
    ``cleanup`` removed ours: ``finish`` removes our directories again once every child has ended."""
    tmp, marker = tmp_path / "tmp", tmp_path / "stopped"
    tmp.mkdir()
    done = finishing(CHILD_STOPS, tmp, f"mkdir -p SCRATCH/spark-x && touch {marker}; exit 0")
    assert done.returncode == 0, done.stderr
    assert marker.exists()  # the child wrote in our directory as it stopped
    assert list(tmp.iterdir()) == []


def test_what_a_stopping_child_leaves_running_is_ended_before_the_directories_go(tmp_path):
    """A descendant orphaned by the process ``finish`` stopped is found and ended too, so it cannot make our
    directory again after the last removal."""
    tmp, started, mark = tmp_path / "tmp", tmp_path / "orphan-started", secrets.token_hex(8)
    tmp.mkdir()
    # it leaves a process of its own behind, which writes in our directory a moment later: the orphan's parent is
    # gone by then, and a search from parent to child cannot see it
    orphan = f"(touch {started}; sleep 0.5; mkdir -p SCRATCH/late) & exit 0"
    done = finishing(CHILD_STOPS, tmp, orphan, **{MARK: mark})
    assert done.returncode == 0, done.stderr
    assert started.exists()  # the stopping child did leave a process behind
    time.sleep(1.5)  # past the moment the orphan would have written
    assert processes_marked(mark) == [] and list(tmp.iterdir()) == []


ASKS_WHILE_FINISHING = """
import subprocess, threading, time
from pulsar_lb_operator import lifecycle
lifecycle.STOP_GRACE_S = 1.0
subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 30"])  # finish waits for it: SIGKILL after the grace
answers = []

def late():  # a thread still at work as the process ends: a Spark session starting when the stop came
    time.sleep(0.5)
    try:
        answers.append(str(lifecycle.temp_dir("late")))
    except lifecycle.Finishing as exc:
        answers.append(str(exc))

threading.Thread(target=late).start()
time.sleep(0.1)
lifecycle.finish()
print(answers[0], file=open("answer", "w"))
"""


def test_no_directory_is_made_once_the_process_is_ending(tmp_path):
    """A thread asking for a directory while ``finish`` runs is refused: one made then would outlive us."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = finishing(ASKS_WHILE_FINISHING, tmp)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "answer").read_text().strip() == "not making a late directory: the process is ending"
    assert list(tmp.iterdir()) == []


@contextlib.contextmanager
def simulate_demo(tmp_path: Path, **popen):
    """``operator simulate demo`` as a subprocess, once it serves; killed after, if it has not ended."""
    from tests.builders import operator_script

    proc = subprocess.Popen(
        [operator_script(), "simulate", "demo"], stdout=subprocess.PIPE, text=True, cwd=tmp_path, **popen
    )
    try:
        assert proc.stdout is not None
        while "Ctrl-C stops" not in proc.stdout.readline():
            assert proc.poll() is None
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_a_signal_the_command_was_started_ignoring_stays_ignored(tmp_path):
    """``nohup operator simulate …``: SIGHUP stays ignored; SIGTERM still stops it, in order."""
    as_nohup_starts_it = lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)  # noqa: E731
    with simulate_demo(tmp_path, stderr=subprocess.STDOUT, preexec_fn=as_nohup_starts_it) as proc:
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


@pytest.mark.parametrize("signum", SIGNALS)
def test_operator_benchmark_leaves_no_worker_behind(signum, tmp_path):
    """The benchmark runs its scenarios in a pool of worker processes: a signal once two are working ends them all."""
    workers = lambda output, others: len(others.split()) >= 2  # noqa: E731
    args = ["benchmark", "--seeds", "3", "--jobs", "2", "--no-plots", "--out", str(tmp_path / "report")]
    assert_nothing_left(left_behind(args, signum, up_for(2.0, workers), 130))


WAITS_WITH_ITS_STOP = """
import sys, threading
from pulsar_lb_operator import lifecycle
from pulsar_lb_operator.run import shutdown

stop = threading.Event()
hears = lifecycle.exit_on_signals if sys.argv[1] == "exit_on_signals" else shutdown.on_signals
with hears(stop):
    print("ready", flush=True)
    while not stop.wait(0):  # the main thread inside the Event's lock as often as a loop can be
        pass
print("stopped", flush=True)
"""


ANOTHER_THREAD_GETS_IT = """
import signal, sys, threading, time
from pulsar_lb_operator import lifecycle
from pulsar_lb_operator.run import shutdown

threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a thread the kernel may give the signal to
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # not to the main thread, then
stop = threading.Event()
hears = lifecycle.exit_on_signals if sys.argv[1] == "exit_on_signals" else shutdown.on_signals
with hears(stop):
    print("ready", flush=True)
    stop.wait()  # no timeout: the main thread runs no handler before it wakes
print("stopped", flush=True)
"""


@pytest.mark.parametrize("hears", ["exit_on_signals", "on_signals"])
@pytest.mark.parametrize(
    "script",
    [
        # a handler that set the Event itself waited forever on its lock in about half of these starts
        pytest.param(WAITS_WITH_ITS_STOP, id="main-thread-inside-the-event"),
        # a handler that wrote to a pipe itself never ran: the main thread never woke to run it
        pytest.param(ANOTHER_THREAD_GETS_IT, id="another-thread-gets-the-signal"),
    ],
)
def test_a_signal_is_heard_whatever_the_main_thread_is_doing(hears, script):
    """Each way the command ignored SIGTERM until it was killed (CPython 3.11, 2 cores)."""
    for _ in range(12 if script is WAITS_WITH_ITS_STOP else 2):
        proc = subprocess.Popen([sys.executable, "-c", script, hears], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0
            assert proc.stdout.read() == "stopped\n"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def test_sigusr1_prints_where_every_thread_is_and_the_command_goes_on(tmp_path):
    with simulate_demo(tmp_path, stderr=subprocess.PIPE) as proc:
        proc.send_signal(signal.SIGUSR1)
        assert "(most recent call first):" in proc.stderr.readline()
        time.sleep(0.5)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_a_c_librarys_stray_line_goes_to_stderr_and_python_keeps_stdout():
    """HiGHS prints a debug line on file descriptor 1 now and then; in `rebalance --output json` it would have been
    a line of the JSON stream that is not JSON."""
    script = """
import ctypes, json
from pulsar_lb_operator import lifecycle
libc = ctypes.CDLL(None)
with lifecycle.stdout_for_python_alone():
    print(json.dumps({"kind": "plan"}))
    libc.printf(b"HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();\\n")
    print(json.dumps({"kind": "result"}))
print("after")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['{"kind": "plan"}', '{"kind": "result"}', "after"]
    assert "tmpSolver.run();" in done.stderr
