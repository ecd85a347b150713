"""``operator rehearse``: the daemon against a matrix of injected faults, and a count of what went wrong.

A user's proof, before going live, that the rails hold whatever the cluster does. Each case serves a
simulated cluster on loopback with faults armed (simulator/faults.py: every kind on every admin
endpoint the operator calls), runs the operator's own cycles against it over HTTP with a token, and
then judges it from the outside — the simulator's request log, the state file on disk and the
operator's log lines — never from what the operator says about itself:

- **daemon crashes**: an exception out of a cycle, a ``cycle crashed`` log line, or a process that
  died of anything but the signal it was sent;
- **rail violations**: more mutating calls in a cycle than ``maxUnloadsPerCycle``, or from one
  broker than ``maxUnloadsPerBroker``; any mutating call in a dry run, under the kill switch, or
  toward a destination that had crashed;
- **double actions**: a bundle called again within the grace period after a call that may have
  acted (2xx, 5xx, 409, or no answer), or mutating calls from two instances;
- **state lost**: a bundle such a call went to that is not in the state file afterwards;
- **secrets in logs**: the token anywhere in what the operator printed.

Like ``demo`` and ``simulate``, this is a command above both the operator and the simulator.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import io
import json
import multiprocessing
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pulsar_lb_operator.adminapi import AdminClient, Timeouts
from pulsar_lb_operator.record import logs
from pulsar_lb_operator.run.cycle import OperatorState
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import Request, SimulatedPulsar, serve
from pulsar_lb_operator.simulator.scenario import IsolationPolicySpec, Scenario, load_scenario
from pulsar_lb_operator.store import files
from pulsar_lb_operator.strategies import LoadBalancerConfig, StateError, UserError

KINDS = (
    "status=500",
    "status-after=500",
    "status-after=504",
    "status=409",
    "delay=1.2@3",
    "reset",
    "reset-after",
    "garbage",
    "html401",
)
QUICK_KINDS = ("status-after=500", "reset-after", "garbage", "delay=1.2@3")
MAYBE_ACTED = (0, 409)  # no answer, or a conflict: as unknown as a 5xx
MUTATING = ("/unload", "/split")


def endpoints(cluster: str) -> tuple[tuple[str, str, str], ...]:
    """(label, method, path substring) of every admin endpoint a cycle calls."""
    return (
        ("broker list", "GET", f"/admin/v2/brokers/{cluster}"),
        ("load report", "GET", "/broker-stats/load-report"),
        ("owned bundles", "GET", "/ownedNamespaces"),
        ("namespace bundles", "GET", "/bundles"),
        ("isolation policies", "GET", "/namespaceIsolationPolicies"),
        ("anti-affinity group", "GET", "/antiAffinity"),
        ("runtime config", "GET", "/configuration/runtime"),
        ("dynamic config", "POST", "/admin/v2/brokers/configuration/"),
        ("unload", "PUT", "/unload"),
        ("split", "PUT", "/split"),
    )


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
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    COLUMNS = (
        "faults_injected",
        "daemon_crashes",
        "rail_violations",
        "double_actions",
        "state_lost",
        "secrets_in_logs",
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


# ---------------------------------------------------------------------------------------------- judging


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
    acted = {bundle_of(r) for r in calls(requests) if maybe_acted(r)}
    if not acted:
        return []
    try:
        remembered = set(OperatorState.from_json(files.read_json(state_file, "state file")).executor.last_moved)
    except (files.FileError, StateError) as exc:
        return [f"state file unreadable: {exc}"]
    return [f"{b}: not in the state file" for b in sorted(acted - remembered)]


def secrets_in(text: str, token: str) -> int:
    return text.count(token)


# ---------------------------------------------------------------------------------------------- cases


def rehearsal_scenario(name: str) -> Scenario:
    """The scenario, with splits switched on at a threshold its hot bundles cross and Pulsar's own shedder
    on (so the operator's conflict guard has a configuration call to make)."""
    scenario = load_scenario(name)
    config = {
        **scenario.config,
        "loadBalancerSheddingEnabled": True,
        "loadBalancerAutoBundleSplitEnabled": True,
        "loadBalancerNamespaceBundleMaxMsgRate": 1500,
        "loadBalancerAvgShedderHitCountHighThreshold": 1,
    }
    # Policies, so the collector's reads of them answer 200 and every fault kind fires there too: a policy
    # whose namespace does not exist and whose primary is the busiest broker (it still sheds; nothing new
    # is placed on it), and acme's namespaces in one anti-affinity group.
    isolated = IsolationPolicySpec("rehearsal", ("rehearsal/isolated",), ("broker-0",))
    namespaces = tuple(
        dataclasses.replace(n, anti_affinity_group="rehearsal") if n.name.startswith("acme/") else n
        for n in scenario.namespaces
    )
    return dataclasses.replace(
        scenario,
        config=config,
        faults=(),
        addresses="distinct",
        isolation_policies=(isolated,),
        namespaces=namespaces,
    )


def _settings(tmp: Path, **overrides: Any) -> OperatorSettings:
    base: dict[str, Any] = {
        "dryRun": False,
        "pauseSeconds": 0,
        "metricsPort": 0,
        "stateFile": str(tmp / "state.json"),
        "historyUri": "",
        "profileUri": "",
        "aggregateEveryMinutes": 0,
        "verifyAfterSeconds": 60,
        "brokerTimeoutSeconds": 2,
        "disableBuiltinShedding": True,
        "killSwitchFile": str(tmp / "PAUSE"),
    }
    return OperatorSettings(**{**base, **overrides})


def run_case(
    scenario: Scenario,
    label: str,
    faults: tuple[str, ...] = (),
    cycles: int = 6,
    settings: dict[str, Any] | None = None,
    during: Callable[[int, SimulatedPulsar, Path], None] | None = None,
    forbidden: Callable[[list[Request], SimulatedPulsar], list[str]] | None = None,
) -> Tally:
    """One in-process case: the daemon's own cycles on simulated time, judged from the outside."""
    tally = Tally(label)
    token = "rehearsal-" + secrets.token_hex(12)
    logs.configure("debug", json=True)  # every line, so a secret in any of them is found
    with tempfile.TemporaryDirectory(prefix="pulsar-lb-rehearse-") as tmp_dir:
        tmp = Path(tmp_dir)
        captured = io.StringIO()
        with serve(lambda allocate: SimulatedCluster(scenario, allocate), token=token, faults=faults) as sim:
            config = LoadBalancerConfig().replace(scenario.config)
            options = _settings(tmp, **(settings or {}))
            client = AdminClient(sim.admin_url, token=token, timeouts=Timeouts(1.0, 1.0, 2.0), retries=2)
            windows: list[Window] = []
            with contextlib.redirect_stderr(captured):
                try:
                    daemon = Daemon(options, config, client, scenario.cluster, clock_ms=lambda: sim.cluster.now_ms)
                    for number in range(cycles):
                        if during is not None:
                            during(number, sim, tmp)
                        owners = dict(sim.cluster.ownership)
                        start, at_ms = len(sim.requests), sim.cluster.now_ms
                        try:
                            daemon.run_once()
                        except Exception as exc:  # the daemon promises never to raise
                            tally.daemon_crashes += 1
                            tally.notes.append(f"cycle {number + 1} raised {type(exc).__name__}: {exc}")
                        windows.append(Window(start, len(sim.requests), at_ms, owners))
                        sim.cluster.advance(config.loadBalancerSheddingIntervalMinutes * 60)
                finally:
                    client.close()
            requests = list(sim.requests)
            tally.faults_injected = sim.faults_fired
        printed = captured.getvalue()
        crashed = printed.count("cycle crashed")
        tally.daemon_crashes += crashed
        if crashed:
            tally.notes.append(f"{crashed} cycle(s) crashed")
        violations = rail_violations(requests, windows, options.maxUnloadsPerCycle, options.maxUnloadsPerBroker)
        if forbidden is not None:
            violations += forbidden(requests, sim)
        doubles = double_actions(requests, windows, config.loadBalancerSheddingGracePeriodMinutes * 60_000)
        lost = state_lost(requests, Path(options.stateFile))
        tally.rail_violations, tally.double_actions, tally.state_lost = len(violations), len(doubles), len(lost)
        tally.notes += violations + doubles + lost
        state_text = Path(options.stateFile).read_text() if Path(options.stateFile).exists() else ""
        tally.secrets_in_logs = secrets_in(printed + state_text, token)
    return tally


def _any_mutating_call(why: str, after: int = 0) -> Callable[[list[Request], SimulatedPulsar], list[str]]:
    def check(requests: list[Request], _sim: SimulatedPulsar) -> list[str]:
        made = calls(requests[after:]) + [r for r in requests[after:] if r.method == "POST"]
        return [f"{why}: {r.method} {r.path}" for r in made]

    return check


def crash_mid_cycle(scenario: Scenario) -> Tally:
    """The destination of the first move crashes right after it; nothing more may be sent toward it."""
    crashed: dict[str, Any] = {}

    def during(number: int, sim: SimulatedPulsar, _tmp: Path) -> None:
        if number:
            return
        original = sim.cluster.unload

        def unload_then_crash(bundle: str, destination: str | None = None, *args: Any, **kwargs: Any) -> Any:
            # the owner's hop carries no destination: the leader remembered it (modular load manager)
            target = destination or sim.cluster.affinity.get(sim.cluster.affinity_key(bundle))
            result = original(bundle, destination, *args, **kwargs)
            if not crashed and target:
                crashed["id"] = target
                crashed["after"] = len(sim.requests) + 1
                sim.cluster.crash(sim.cluster.brokers[target].name)
            return result

        sim.cluster.unload = unload_then_crash  # type: ignore[method-assign]

    def toward_the_dead(requests: list[Request], _sim: SimulatedPulsar) -> list[str]:
        if not crashed:
            return ["the rehearsal could not crash a destination (no unload was sent)"]
        return [
            f"unload toward crashed {crashed['id']}: {r.path}"
            for r in calls(requests[crashed["after"] :])
            if f"destinationBroker={crashed['id']}" in r.query.replace("%3A", ":")
        ]

    tally = run_case(scenario, SPECIAL_NAMES["crash"], during=during, forbidden=toward_the_dead)
    tally.faults_injected += 1 if crashed else 0
    return tally


def dry_run(scenario: Scenario) -> Tally:
    """Faults armed, dryRun on: not one mutating call, not even the conflict guard's."""
    return run_case(
        scenario,
        SPECIAL_NAMES["dry-run"],
        faults=("*:PUT:/unload:status-after=500", "broker-1:GET:/load-report:status=500"),
        settings={"dryRun": True},
        forbidden=_any_mutating_call("sent in a dry run"),
    )


def kill_switch(scenario: Scenario) -> Tally:
    """The kill switch file appears after two cycles: nothing mutating after that."""
    set_at: dict[str, int] = {}

    def during(number: int, sim: SimulatedPulsar, tmp: Path) -> None:
        if number == 2:
            (tmp / "PAUSE").touch()
            set_at["index"] = len(sim.requests)

    def after_switch(requests: list[Request], sim: SimulatedPulsar) -> list[str]:
        return _any_mutating_call("sent under the kill switch", set_at.get("index", 0))(requests, sim)

    tally = run_case(scenario, SPECIAL_NAMES["kill-switch"], during=during, forbidden=after_switch)
    tally.faults_injected += 1 if set_at else 0
    return tally


# ---------------------------------------------------------------------------------------------- processes


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
    }
    command = [sys.executable, "-m", "pulsar_lb_operator.cli", "run", "--no-dry-run", *args]
    for key, value in {
        "pauseSeconds": 0,
        "cycleIntervalSeconds": 1,
        "metricsPort": 0,
        "historyUri": "",
        "profileUri": "",
        "aggregateEveryMinutes": 0,
        "loadBalancerAvgShedderHitCountHighThreshold": 1,
        "shutdownTimeoutSeconds": 5,
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
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out + err


def _wall_clock_scenario(scenario: Scenario) -> Callable[[Callable[[str], str]], SimulatedCluster]:
    epoch_ms = int(time.time() * 1000)
    return lambda allocate: SimulatedCluster(scenario, allocate, epoch_ms)


def sigkill_and_restart(scenario: Scenario) -> Tally:
    """``kill -9`` while an unload hangs on the broker, then a restart: nothing sent may be forgotten."""
    tally = Tally(SPECIAL_NAMES["sigkill"])
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
            time.sleep(6)  # a few cycles after the restart
            code2, text2 = _finish(second, signal.SIGTERM)
            if code2 != 0:
                tally.daemon_crashes += 1
                tally.notes.append(f"restarted process exited {code2}")
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
    tally = Tally(SPECIAL_NAMES["twins"])
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
            time.sleep(5)  # both run for a few cycles, or one is refused at once
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


# ---------------------------------------------------------------------------------------------- command


SPECIAL_NAMES = {
    "crash": "a destination broker crashes mid-cycle",
    "dry-run": "dry run (with faults on unload)",
    "kill-switch": "kill switch set after two cycles",
    "sigkill": "kill -9 mid-unload, then restart",
    "twins": "two instances at once",
}
SPECIALS: dict[str, Callable[[Scenario], Tally]] = {
    "crash": crash_mid_cycle,
    "dry-run": dry_run,
    "kill-switch": kill_switch,
    "sigkill": sigkill_and_restart,
    "twins": two_instances,
}


@dataclass(frozen=True)
class Case:
    """One rehearsal: endpoint faults (``faults``) or a special fault (``special``); picklable for workers."""

    name: str
    faults: tuple[str, ...] = ()
    special: str | None = None


def matrix(cluster: str, quick: bool = False) -> list[Case]:
    kinds = QUICK_KINDS if quick else KINDS
    cases = [
        Case(f"{label} ({method}) {kind}", (f"*:{method}:{path}:{kind}",))
        for label, method, path in endpoints(cluster)
        for kind in kinds
    ]
    return cases + [Case(name, special=key) for key, name in SPECIAL_NAMES.items()]


def run(scenario_name: str, case: Case) -> Tally:
    """Run one case (in a worker process: everything it needs comes in by name)."""
    scenario = rehearsal_scenario(scenario_name)
    started = time.monotonic()
    tally = SPECIALS[case.special](scenario) if case.special else run_case(scenario, case.name, case.faults)
    tally.seconds = round(time.monotonic() - started, 1)
    return tally


def render(tallies: list[Tally]) -> str:
    headers = ("case", "faults injected", "daemon crashes", "rail violations", "double actions", "state lost")
    headers += ("secrets in logs",)
    total = Tally("total")
    for tally in tallies:
        total.add(tally)
    rows = [(t.case, *(str(getattr(t, c)) for c in Tally.COLUMNS)) for t in [*tallies, total]]
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    for index, row in enumerate(rows):
        if index == len(rows) - 1:
            lines.append("  ".join("-" * w for w in widths))
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def rehearse(
    scenario_name: str = "demo",
    quick: bool = False,
    out: TextIO | None = None,
    as_json: bool = False,
    only: str | None = None,
    jobs: int = 4,
) -> tuple[int, list[Tally]]:
    """Run the matrix, ``jobs`` cases at a time in worker processes (a case mostly waits on timeouts).

    Returns the exit code — 0 when every column but "faults injected" is 0, else 1 — and the rows.
    """
    out = out or sys.stdout
    load_scenario(scenario_name)  # a bad name fails here, with one line, before any worker starts
    cluster = rehearsal_scenario(scenario_name).cluster
    cases = [c for c in matrix(cluster, quick) if not only or only in c.name]
    if not cases:
        raise UserError(f"no rehearsal case matches {only!r}")
    started = time.monotonic()
    tallies: dict[Case, Tally] = {}
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = {pool.submit(run, scenario_name, case): case for case in cases}
        for done in concurrent.futures.as_completed(futures):
            case = futures[done]
            try:
                tally = done.result()
            except Exception as exc:  # the rehearsal's own failure is a crash too, never a clean row
                tally = Tally(case.name, daemon_crashes=1, notes=[f"the case itself failed: {exc!r}"])
            tallies[case] = tally
            if not as_json:
                mark = "ok" if tally.clean else "PROBLEM"
                print(f"[{len(tallies):3d}/{len(cases)}] {mark:7s} {tally.case}", file=sys.stderr, flush=True)
                for note in tally.notes[:5] if not tally.clean else ():
                    print(f"          {note}", file=sys.stderr)
    rows = [tallies[c] for c in cases]
    if as_json:
        print(json.dumps([t.to_json() for t in rows], indent=1), file=out)
    else:
        print(render(rows), file=out)
        print(f"\n{len(cases)} cases in {time.monotonic() - started:.0f} s ({jobs} at a time)", file=out)
    return (0 if all(t.clean for t in rows) else 1), rows
