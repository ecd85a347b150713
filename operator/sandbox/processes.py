"""The rehearsal's cases that need the operator as a process: ``kill -9`` mid-unload and a restart, two
instances at once (``operator run`` against a cluster served here, on the wall clock), and a signal to a
command that starts processes of its own, after which nothing of it may be left (``left_behind``)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pulsar_lb_operator.sandbox.judging import Tally, bundle_of, calls, secrets_in
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import SimulatedPulsar, serve
from pulsar_lb_operator.simulator.scenario import Scenario

OPERATOR = [sys.executable, "-m", "pulsar_lb_operator.cli"]  # the ``operator`` command of this interpreter


class _Clock(threading.Thread):
    """Advances a served cluster's simulated time with the wall clock × ``speed`` (as ``simulate`` does)."""

    def __init__(self, sim: SimulatedPulsar, speed: float) -> None:
        super().__init__(daemon=True)
        self.sim, self.speed, self.stop = sim, speed, threading.Event()

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(0.1):
            now = time.monotonic()
            self.sim.cluster.advance((now - last) * self.speed)
            last = now


def _operator(sim: SimulatedPulsar, tmp: Path, token: str, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PULSAR_ADMIN_URL": sim.admin_url,
        "PULSAR_LB_TOKEN": token,
        "PULSAR_LB_STATE_FILE": str(tmp / "state.json"),
        "PULSAR_LB_LOG_JSON": "true",
        "PULSAR_LB_LOG_LEVEL": "debug",
        "TMPDIR": str(tmp),  # what a process killed with SIGKILL cannot remove goes with the case
    }
    command = [*OPERATOR, "run", "--no-dry-run", *args]
    for key, value in {
        "pauseSeconds": 0,
        "cycleIntervalSeconds": 1,
        "metricsPort": 0,
        "historyUri": "",
        "profileUri": "",
        "aggregateEveryMinutes": 0,
        "loadBalancerAvgShedderHitCountHighThreshold": 1,
        "shutdownTimeoutSeconds": 5,
        "disableBuiltinShedding": "true",  # the rehearsal's cluster runs Pulsar's own shedder, as _settings says
    }.items():
        command += ["--set", f"{key}={value}"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp)


def wait_until(condition: Callable[[], Any], timeout_s: float) -> Any:
    """The condition's first true value within ``timeout_s``, else None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    return None


def pending_on_disk(path: Path) -> list[dict[str, Any]] | None:
    try:
        return json.loads(path.read_text())["executor"]["pending"] or None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _finish(proc: subprocess.Popen[str], sig: int | None, timeout_s: float = 30.0) -> tuple[int, str]:
    if sig is not None and proc.poll() is None:
        proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # the operator prints every thread's stack (cli.run): where it hangs
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=2)
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out + err


def _where_it_was(text: str) -> list[str]:
    """The last lines a process printed, then each thread's innermost frames when it had to be killed (the
    SIGUSR1 dump ``_finish`` asks for: a "Thread 0x… (most recent call first):" line, then its frames)."""
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.endswith("(most recent call first):")]
    said = [line[:300] for line in lines[: heads[0] if heads else len(lines)][-3:]]
    return said + [" / ".join(line.strip() for line in lines[i : i + 4]) for i in heads]


def _wall_clock_scenario(scenario: Scenario) -> Callable[[Callable[[str], str]], SimulatedCluster]:
    epoch_ms = int(time.time() * 1000)
    return lambda allocate: SimulatedCluster(scenario, allocate, epoch_ms)


def sigkill_and_restart(scenario: Scenario) -> Tally:
    """``kill -9`` while an unload hangs on the broker, then a restart: nothing sent may be forgotten."""
    tally = Tally("")  # named by the command
    token = "rehearsal-" + secrets.token_hex(12)
    hang = tuple(f"{name}:PUT:/unload:delay=30@1" for name in sorted(scenario.broker_names))
    with (
        tempfile.TemporaryDirectory(prefix="pulsar-lb-rehearse-") as tmp_dir,
        serve(_wall_clock_scenario(scenario), token=token, faults=hang) as sim,
    ):
        tmp = Path(tmp_dir)
        clock = _Clock(sim, 60.0)
        clock.start()
        try:
            first = _operator(sim, tmp, token)
            in_flight = wait_until(lambda: pending_on_disk(tmp / "state.json"), 60)
            time.sleep(0.3)  # the call has reached the broker, which sits on it
            code, text = _finish(first, signal.SIGKILL)
            if code != -signal.SIGKILL:
                tally.daemon_crashes += 1
                tally.notes.append(f"first process ended with {code} before the kill")
            if not in_flight:
                tally.notes.append("no unload was in flight when the process was killed")
                tally.rail_violations += 1  # the rehearsal itself did not happen: never report a clean row
            sim.clear_faults()
            second = _operator(sim, tmp, token)
            before = len(sim.requests)
            wait_until(lambda: len(sim.requests) > before + 40, 60)  # a few cycles after the restart, however slow
            time.sleep(1)
            code2, text2 = _finish(second, signal.SIGTERM)
            if code2 != 0:
                tally.daemon_crashes += 1
                tally.notes.append(f"restarted process exited {code2}; its last lines: {_where_it_was(text2)}")
            text += text2
        finally:
            clock.stop.set()
        requests = list(sim.requests)
        tally.faults_injected = sim.faults_fired + 1  # the hangs, plus the SIGKILL itself
        doc = json.loads((tmp / "state.json").read_text()) if (tmp / "state.json").exists() else {}
    sent = {p["bundle"] for p in in_flight or []}
    remembered = set(doc.get("executor", {}).get("lastMoved", {}))
    lost = sorted(sent - remembered)
    tally.state_lost = len(lost)
    tally.notes += [f"{b}: forgotten after the restart" for b in lost]
    per_bundle: dict[str, int] = {}
    for request in calls(requests):
        per_bundle[bundle_of(request) or ""] = per_bundle.get(bundle_of(request) or "", 0) + 1
    doubles = [b for b in sent if per_bundle.get(b, 0) > 1]
    tally.double_actions = len(doubles)
    tally.notes += [f"{b}: moved again after the restart" for b in doubles]
    tally.daemon_crashes += text.count("Traceback")
    tally.secrets_in_logs = secrets_in(text, token)
    return tally


def two_instances(scenario: Scenario) -> Tally:
    """Two ``operator run`` on one state at once (a second replica, a CronJob beside the daemon)."""
    tally = Tally("")
    token = "rehearsal-" + secrets.token_hex(12)
    with (
        tempfile.TemporaryDirectory(prefix="pulsar-lb-rehearse-") as tmp_dir,
        serve(_wall_clock_scenario(scenario), token=token, faults=()) as sim,
    ):
        tmp = Path(tmp_dir)
        clock = _Clock(sim, 60.0)
        clock.start()
        try:
            first = _operator(sim, tmp, token)
            second = _operator(sim, tmp, token)
            # the lock refuses one (it exits by itself), however slowly they start; both running is the failure
            wait_until(lambda: first.poll() is not None or second.poll() is not None, 60)
            time.sleep(2)  # the other runs a cycle or two meanwhile
            code2, text2 = _finish(second, signal.SIGTERM)
            code1, text1 = _finish(first, signal.SIGTERM)
        finally:
            clock.stop.set()
        requests = list(sim.requests)
    codes = sorted((code1, code2))
    if codes != [0, 3]:
        tally.notes.append(f"exit codes {code1} and {code2} (expected one 0, one 3: the lock refused it)")
        tally.daemon_crashes += sum(1 for c in codes if c not in (0, 3))
    agents = {r.user_agent for r in calls(requests)}
    if len(agents) > 1:
        tally.double_actions += len(agents) - 1
        tally.notes.append(f"mutating calls from {len(agents)} instances")
    tally.faults_injected = 1  # the twin
    text = text1 + text2
    tally.daemon_crashes += text.count("Traceback")
    tally.secrets_in_logs = secrets_in(text, token)
    return tally


# ---------------------------------------------------------------------------------------------- left behind

MARK = "REHEARSAL_MARK_OF_PULSAR_LB"  # not PULSAR_LB_*: those are settings, and an unknown one is exit 2


def processes_marked(mark: str) -> list[str]:
    """``<pid>: <command line>`` of every live process whose environment holds ``MARK=mark`` (a zombie's is
    empty): a command started with the mark, and whatever it started, whoever started it (Linux's /proc)."""
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


def _as_from_a_terminal() -> None:
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def left_behind(
    args: list[str],
    signum: int,
    ready: Callable[[str, str], bool],
    exit_code: int,
    env: dict[str, str] | None = None,
    timeout_s: float = 120.0,
    settle_s: float = 0.0,
) -> Tally:
    """``operator ARGS`` as a subprocess, marked, with a temporary directory of its own; ``signum`` once
    ``ready(output, marked processes)``; then, the moment it has exited, the processes still carrying its mark
    and what is left in its temporary directory (its ``TMPDIR``, and Spark's through ``SPARK_LOCAL_DIRS`` and
    ``java.io.tmpdir``). Anything left is killed and removed here, after it was counted. ``settle_s``: how long
    processes on their way out may take (a child the kernel kills with its parent dies a moment after it)."""
    tally = Tally("", faults_injected=1)  # the signal
    mark = secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="pulsar-lb-rehearse-") as work:
        tmp = Path(work, "tmp")
        tmp.mkdir()
        extra = {MARK: mark, "TMPDIR": str(tmp), "SPARK_LOCAL_DIRS": str(tmp)}
        extra["JAVA_TOOL_OPTIONS"] = f"-Djava.io.tmpdir={tmp}"
        command = [*OPERATOR, *args]
        proc = subprocess.Popen(
            command,
            env={**os.environ, **extra, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",  # the reader must never stop: a full pipe would block the command's next write
            cwd=work,
            # as from a terminal, even when the rehearsal itself runs as a shell's background job (SIGINT ignored)
            # or under nohup (SIGHUP ignored: the operator keeps a signal it was started ignoring ignored)
            preexec_fn=_as_from_a_terminal,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
        reader.start()
        others = lambda: [p for p in processes_marked(mark) if not p.startswith(f"{proc.pid}:")]  # noqa: E731
        up = wait_until(lambda: proc.poll() is not None or ready("".join(lines), " ".join(others())), timeout_s)
        if up and proc.poll() is None:
            proc.send_signal(signum)
        try:
            code = proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        wait_until(lambda: not processes_marked(mark), settle_s)
        left, files = processes_marked(mark), sorted(p.name for p in tmp.iterdir())
        for line in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
        reader.join(10)
        if proc.stdout is not None:
            proc.stdout.close()
    text = "".join(lines)
    if not up or code != exit_code or "Traceback" in text:
        tally.daemon_crashes += 1
        why = "never got ready" if not up else f"exited {code} (expected {exit_code})"
        last = text.strip().splitlines()[-1] if text.strip() else "no output"
        tally.notes.append(f"{why}: {last[:200]}")
    tally.left_behind = len(left) + len(files)
    tally.notes += [f"still running: {line}" for line in left] + [
        f"left in its temporary directory: {f}" for f in files
    ]
    return tally


def simulate_signalled(_scenario: Scenario) -> Tally:
    """SIGTERM to ``operator simulate`` on the extensible load manager (pulsar-lite, its directory)."""
    return left_behind(
        ["simulate", "demo", "--load-manager", "extensible"],
        signal.SIGTERM,
        lambda output, others: "Ctrl-C stops" in output and "pulsar-lite" in others,
        exit_code=0,
    )


def demo_signalled(_scenario: Scenario) -> Tally:
    """Ctrl-C (SIGINT) to ``operator demo`` on the extensible load manager, a few cycles in."""
    return left_behind(
        ["demo", "--load-manager", "extensible", "--minutes", "100000"],
        signal.SIGINT,
        lambda output, others: sum(line.strip()[:1].isdigit() for line in output.splitlines()) >= 2,
        exit_code=130,
    )


def run_signalled_mid_aggregation(scenario: Scenario) -> Tally:
    """SIGTERM to ``operator run`` while its in-process aggregation runs (Spark's JVM, its scratch space)."""
    with (
        tempfile.TemporaryDirectory(prefix="pulsar-lb-rehearse-") as work,
        serve(_wall_clock_scenario(scenario)) as sim,
    ):
        settings = {
            "cycleIntervalSeconds": 1,
            "metricsPort": 0,
            "historyUri": str(Path(work, "history")),
            "profileUri": str(Path(work, "profile")),
            "aggregateEveryMinutes": 0.05,
            "stateFile": str(Path(work, "state.json")),
            "shutdownTimeoutSeconds": 10,
        }
        args = ["run", "--dry-run", *(part for k, v in settings.items() for part in ("--set", f"{k}={v}"))]
        return left_behind(
            args,
            signal.SIGTERM,
            lambda _output, others: "java" in others,
            exit_code=0,
            env={"PULSAR_ADMIN_URL": sim.admin_url},
        )
