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
- **secrets in logs**: the token anywhere in what the operator printed;
- **sent astray**: requests that reached an origin the operator must not call — a redirect to another port
  of the admin URL's host, to plain http from https, to a URL with a user name (``redirected_astray``);
- **left behind**: processes and temporary directories still there the moment a command ended on a signal
  (``operator simulate`` and ``demo`` with their pulsar-lite broker, ``operator run`` with Spark's JVM).

Judging lives in judging.py, the cases that need the operator as a process in processes.py. Like ``demo``
and ``simulate``, this is a command above both the operator and the simulator.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import http.server
import io
import json
import multiprocessing
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pulsar_lb_operator.adminapi import AdminClient, Timeouts
from pulsar_lb_operator.record import logs
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.sandbox import processes
from pulsar_lb_operator.sandbox.judging import (
    Tally,
    Window,
    calls,
    double_actions,
    rail_violations,
    secrets_in,
    state_lost,
)
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import Request, SimulatedPulsar, serve
from pulsar_lb_operator.simulator.listeners import TLS
from pulsar_lb_operator.simulator.scenario import IsolationPolicySpec, Scenario, load_scenario
from pulsar_lb_operator.strategies import LoadBalancerConfig, UserError

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
    tls: bool = False,
    entry: Callable[[SimulatedPulsar], str] | None = None,
) -> Tally:
    """One in-process case: the daemon's own cycles on simulated time, judged from the outside.

    ``tls``: the brokers serve https too, and the operator calls them over it; ``entry``: the admin URL (by
    default the first broker's)."""
    tally = Tally(label)
    token = "rehearsal-" + secrets.token_hex(12)
    logs.configure("debug", json=True)  # every line, so a secret in any of them is found
    with tempfile.TemporaryDirectory(prefix="pulsar-lb-rehearse-") as tmp_dir:
        tmp = Path(tmp_dir)
        captured = io.StringIO()
        cluster = lambda allocate: SimulatedCluster(scenario, allocate)  # noqa: E731
        with serve(cluster, token=token, faults=faults, tls=tls) as sim:
            config = LoadBalancerConfig().replace(scenario.config)
            options = _settings(tmp, **(settings or {}))
            admin_url = entry(sim) if entry else sim.admin_url
            ca = sim.tls.ca_file if sim.tls is not None else None
            client = AdminClient(admin_url, token=token, timeouts=Timeouts(1.0, 1.0, 2.0), retries=2, ca_bundle=ca)
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


class Stray:
    """An origin the operator does not know, on loopback: it answers 204 to anything and keeps what it got."""

    def __init__(self, host: str, tls: TLS | None = None) -> None:
        self.seen: list[tuple[str, str, str | None]] = []  # method, path, Authorization
        stray = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self) -> None:
                stray.seen.append((self.command, self.path, self.headers.get("Authorization")))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(204)
                self.end_headers()

            do_GET = do_PUT = do_POST = do_DELETE = _record

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        if tls is not None:
            self.server.socket = tls.context.wrap_socket(self.server.socket, server_side=True)
        self.origin = f"{'https' if tls is not None else 'http'}://{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# Where the leader's registration sends the entry broker's redirects: (scheme of the stray, user name and password)
STRAYS = {
    "redirect-port": ("https", ""),  # another port of the admin URL's host, over TLS with the cluster's certificate
    "redirect-http": ("http", ""),  # plain http, while the admin URL is https
    "redirect-userinfo": ("https", "rehearsal:s3cret@"),  # a user name and password the operator was never given
}


def redirected_astray(scenario: Scenario, how: str) -> Tally:
    """From the second cycle on, the leader's lookup data names a stray origin as its https web URL (see
    STRAYS), so every unload — sent to a broker that is not the leader, which redirects it to the leader, as
    the modular load manager does with a destination — is redirected there. The brokers serve TLS and the
    admin URL is that other broker's https URL. ``sent astray`` counts the requests the stray got: none may."""
    scheme, userinfo = STRAYS[how]
    state: dict[str, Any] = {}

    def entry(sim: SimulatedPulsar) -> str:
        leader = sim.cluster.leader
        state["entry"] = next(b for b in sim.cluster.alive_brokers() if b.id != leader)
        return sim.reachable_url(state["entry"])

    def during(number: int, sim: SimulatedPulsar, _tmp: Path) -> None:
        if number == 0:  # the operator learns the brokers' real https URLs in its first cycle
            state["stray"] = Stray(state["entry"].host, sim.tls if scheme == "https" else None)
        elif number == 1:
            stray = state["stray"].origin.replace("://", f"://{userinfo}", 1)
            sim.cluster.brokers[sim.cluster.leader or ""].web_url_tls = stray
            state["at"] = len(sim.requests)

    def redirects(requests: list[Request], _sim: SimulatedPulsar) -> list[str]:
        after = requests[state.get("at", len(requests)) :]
        state["redirected"] = sum(1 for r in after if r.method == "PUT" and r.status == 307)
        return []  # what went astray is a column of its own

    try:
        tally = run_case(scenario, how, during=during, forbidden=redirects, tls=True, entry=entry)
    finally:
        if "stray" in state:
            state["stray"].close()
    tally.faults_injected += state.get("redirected", 0)
    seen = state["stray"].seen if "stray" in state else []
    tally.sent_astray = len(seen)
    tally.notes += [
        f"{method} {path} reached {state['stray'].origin} ({auth or 'no'} credentials)"[:200]
        for method, path, auth in seen[:3]
    ]
    return tally


# ---------------------------------------------------------------------------------------------- command


SPECIAL_NAMES = {
    "crash": "a destination broker crashes mid-cycle",
    "dry-run": "dry run (with faults on unload)",
    "kill-switch": "kill switch set after two cycles",
    "sigkill": "kill -9 mid-unload, then restart",
    "twins": "two instances at once",
    "redirect-port": "redirect to another port of the admin host",
    "redirect-http": "redirect from https to plain http",
    "redirect-userinfo": "redirect to a URL with a user name",
    "simulate-sigterm": "SIGTERM to simulate (extensible)",
    "demo-sigint": "SIGINT to demo (extensible)",
    "run-sigterm": "SIGTERM to run mid-aggregation",
}
SPECIALS: dict[str, Callable[[Scenario], Tally]] = {
    "crash": crash_mid_cycle,
    "dry-run": dry_run,
    "kill-switch": kill_switch,
    "sigkill": processes.sigkill_and_restart,
    "twins": processes.two_instances,
    **{key: functools.partial(redirected_astray, how=key) for key in STRAYS},
    "simulate-sigterm": processes.simulate_signalled,
    "demo-sigint": processes.demo_signalled,
    "run-sigterm": processes.run_signalled_mid_aggregation,
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
    tally.case = case.name
    tally.seconds = round(time.monotonic() - started, 1)
    return tally


def render(tallies: list[Tally]) -> str:
    headers: tuple[str, ...] = (
        "case",
        "faults injected",
        "daemon crashes",
        "rail violations",
        "double actions",
        "state lost",
    )
    headers += ("secrets in logs", "sent astray", "left behind")
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
