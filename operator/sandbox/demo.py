"""``operator demo`` and ``operator simulate``: a simulated Pulsar cluster on loopback.

The demo serves an unbalanced cluster and runs the operator's own cycle against it over HTTP (admin
client → collector → planner → executor with its safety rails), printing broker usage as it converges
and what became of every action. Simulated time runs in steps, so a run of many minutes takes
seconds and is the same on every machine.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from pulsar_lb_operator import hints
from pulsar_lb_operator.act.executor import Executor
from pulsar_lb_operator.act.guard import BuiltinGuard
from pulsar_lb_operator.act.safety import Safety
from pulsar_lb_operator.adminapi import AdminClient, AdminError
from pulsar_lb_operator.benchmarks.metrics import RunMetrics
from pulsar_lb_operator.collect import elm
from pulsar_lb_operator.record.audit import AuditPublisher, Spool
from pulsar_lb_operator.records import Outcome
from pulsar_lb_operator.run.cycle import CycleContext, run_cycle
from pulsar_lb_operator.simulator import elm as sim_elm
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import ServeError, SimulatedPulsar, serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from pulsar_lb_operator.store.statefile import OperatorState
from pulsar_lb_operator.strategies import ConfigError, LoadBalancerConfig, SnapshotError, Split

CONVERGED_SPREAD = 10.0  # points of usage between the busiest and the idlest broker
CONVERGED_CYCLES = 3


def _row(values: list[str], widths: list[int]) -> str:
    return "  ".join(v.rjust(w) for v, w in zip(values, widths))


def run_demo(
    scenario_name: str = "demo",
    strategy: str | None = None,
    placement: str | None = None,
    minutes: float | None = None,
    out: TextIO = sys.stdout,
    seed: int = 0,
    audit_url: str | None = None,
    audit_topic: str = "persistent://public/default/pulsar-lb-operator-audit",
    audit_spool: str = "state/audit-spool",
    load_manager: str | None = None,
    stop: threading.Event | None = None,
) -> int:
    """With ``audit_url`` (a pulsar:// URL), every cycle's audit events go to ``audit_topic`` as well.

    ``load_manager``: ``extensible`` serves the brokers as the extensible load manager's (no load report; their
    load on its system topics, on a pulsar-lite broker on loopback, read with pulsar-client); None: the scenario's.
    ``stop`` (set by a signal: see lifecycle.exit_on_signals) ends it after the cycle in progress, with 130.
    """
    own = load_scenario(scenario_name)
    scenario = sim_elm.with_load_manager(own, load_manager)
    delivered: list[int] = []
    audit = (
        AuditPublisher(Spool(audit_spool), audit_url, audit_topic, on_sent=lambda: delivered.append(1)).start()
        if audit_url
        else None
    )
    # The operator's settings are the scenario's, not what ``with_load_manager`` gave the cluster's own load
    # manager (TransferShedder under ELM): the operator runs its own default unless the scenario or --strategy
    # names another.
    config = LoadBalancerConfig().replace(own.config)
    sim = serve(lambda allocate: SimulatedCluster(scenario, allocate))
    cluster = sim.cluster
    metrics = RunMetrics()
    state = OperatorState()
    rng = random.Random(seed)
    client = AdminClient(sim.admin_url)
    session, reporters = elm.Session(read_timeout_s=10.0), None
    if sim_elm.is_extensible(cluster):  # the brokers publish their load; the operator reads it from the start
        try:
            reporters = sim_elm.ElmBrokers(cluster).start()
            session.service_url = reporters.service_url
            session.connect(client)  # before the first publication: the topics are non-persistent
            reporters.publish(force=True)
        except BaseException:
            session.close()
            if reporters is not None:
                reporters.close()
            client.close()
            sim.stop()
            raise
    sim_clock = lambda: cluster.now_ms / 1000  # noqa: E731 - the executor runs on simulated time
    safety = Safety(dry_run=False, cooldown_minutes=config.loadBalancerSheddingGracePeriodMinutes)
    # as a person going live does (disableBuiltinShedding: true): Pulsar's own balancer off before the first action
    guard = BuiltinGuard(client, disable=True, splits=config.loadBalancerAutoBundleSplitEnabled)
    executor = Executor(client, scenario.cluster, safety, clock=sim_clock, sleep=lambda _s: None, guard=guard)
    context = CycleContext(
        client,
        scenario.cluster,
        config,
        executor,
        strategy,
        placement,
        load_manager=session,
        audit=audit.publish if audit else None,
    )
    names = {b.id: b.name for b in cluster.brokers.values()}
    interval_s = config.loadBalancerSheddingIntervalMinutes * 60
    total_s = (minutes or scenario.duration_s / 60) * 60
    shown = sorted(names.values())
    widths = [6, 6] + [max(len(n), 6) for n in shown] + [6, 7]

    def name(broker_id: str | None) -> str:
        return names.get(broker_id or "", str(broker_id))

    try:
        print(
            f"Simulated Pulsar cluster {scenario.cluster!r} on {sim.admin_url} ({len(names)} brokers): "
            f"{scenario.description}",
            file=out,
        )
        print(
            f"Operator: shedding {strategy or config.loadBalancerLoadSheddingStrategy}, one cycle every "
            f"{interval_s / 60:g} simulated minute(s), at most {safety.max_unloads_per_cycle} unloads per cycle "
            f"and {safety.max_unloads_per_broker} per broker; usage = weighted max resource usage, true value.\n",
            file=out,
        )
        print(f"{_builtin_line(guard)}\n", file=out)
        if reporters is not None:
            print(
                f"Load manager: extensible (ExtensibleLoadManagerImpl): no load reports; each broker's load is read "
                f"from its system topics with pulsar-client at {reporters.service_url}.\n",
                file=out,
            )
        print(_row(["cycle", "time", *shown, "spread", "moves"], widths), file=out)
        calm = 0
        cycle = 0
        while cluster.now_s < total_s and not (stop is not None and stop.is_set()):
            cycle += 1
            if reporters is not None:  # what the brokers published has reached the operator's readers
                session.connect(client).caught_up(reporters.sent, 10.0)
            try:
                result = run_cycle(context, state, rng, now_ms=cluster.now_ms)
                state = result.state
            except (AdminError, SnapshotError, elm.ElmDataUnreadable) as exc:  # e.g. the admin URL's broker restarts
                result = None
                failure = str(exc)
            cluster.advance(interval_s)
            sample = metrics.record(cluster)
            for broker_name in sample.usage:
                if broker_name not in shown:
                    shown.append(broker_name)
                    widths.insert(-2, max(len(broker_name), 6))
            usage = [f"{sample.usage[n]:.0f}%" if n in sample.usage else "down" for n in shown]
            clock = f"{int(cluster.now_s // 60):02d}:{int(cluster.now_s % 60):02d}"
            moved = sum(1 for r in result.records if r.outcome is Outcome.EXECUTED) if result else 0
            print(_row([str(cycle), clock, *usage, f"{sample.spread:.0f}", str(moved)], widths), file=out)
            if result is None:
                print(f"        cycle failed, the next one tries again: {failure}", file=out)
            for record in (*result.verifications, *result.records) if result else ():
                action = record.action
                what = (
                    f"split  {action.bundle} by {action.algorithm}"
                    if isinstance(action, Split)
                    else (f"unload {action.bundle}  {name(action.source)} → {name(action.destination)}")
                )
                print(f"        {what}: {record.outcome.value} ({record.detail})", file=out)
            calm = calm + 1 if sample.spread < CONVERGED_SPREAD else 0
            if calm >= CONVERGED_CYCLES and minutes is None:
                break
        if metrics.samples:
            summary = metrics.summary(cluster)
            first = metrics.samples[0]
            print(
                f"\nSpread {first.spread:.0f} → {summary['final_spread']:.0f} points after {cycle} cycles; "
                f"{summary['unloads']} unloads, {summary['topics_disconnected']} topic reconnects, "
                f"{summary['flapping_bundles']} bundles moved twice within 30 min.",
                file=out,
            )
        if stop is not None and stop.is_set():
            print("Stopped by a signal.", file=out)
            return 130  # interrupted, as a Ctrl-C has always ended it
        if audit is not None:
            sent = audit.flush(10.0)
            print(
                f"Audit events on {audit_topic}: {len(delivered)} delivered"
                + ("." if sent else f", {audit.spool.backlog()} waiting in {audit_spool} for the next run."),
                file=out,
            )
        return 0
    finally:
        if audit is not None:
            audit.close()
        session.close()
        if reporters is not None:
            reporters.close()
        client.close()
        sim.stop()


def _builtin_line(guard: BuiltinGuard) -> str:
    """What the demo does about the simulated cluster's own balancer, in one line."""
    keys, _ = guard.read()
    if not keys:
        return (
            "Pulsar's own balancer is off on the simulated cluster where it would meet the operator (its scenario "
            "turns it off): the operator acts alone."
        )
    return (
        f"Pulsar's own balancer is on ({', '.join(f'{k}=true' for k in keys)}): the operator turns it off before its "
        "first action, as disableBuiltinShedding: true does."
    )


def run_simulator(
    scenario_name: str,
    port: int | None,
    speed: float,
    token: str | None,
    stop: threading.Event | None = None,
    ready: Callable[[SimulatedPulsar], None] | None = None,
    out: TextIO = sys.stdout,
    faults: list[str] | tuple[str, ...] = (),
    request_log: str | None = None,
    load_manager: str | None = None,
) -> int:
    """Serve a scenario until stopped, advancing simulated time ``speed`` × real time.

    ``faults``: --fault specs, armed after the scenario's own ``faults:``; ``request_log``: a file to
    append one JSON line per request to.
    """
    from pulsar_lb_operator.simulator.faults import parse_fault
    from pulsar_lb_operator.store.files import FileError

    scenario = sim_elm.with_load_manager(load_scenario(scenario_name), load_manager)
    rules = [*scenario.faults, *(parse_fault(f, scenario.broker_names, "--fault") for f in faults)]
    if request_log is not None:
        try:
            open(request_log, "a", encoding="utf-8").close()
        except OSError as exc:
            message = f"cannot write request log {request_log!r}: {exc.strerror or exc}"
            raise FileError(hints.with_fix(message, hints.file_fix(exc, request_log, writing=True))) from None
    epoch_ms = int(time.time() * 1000)  # report timestamps start at the wall clock, for a live operator
    try:
        sim = serve(
            lambda allocate: SimulatedCluster(scenario, allocate, epoch_ms),
            first_port=port,
            token=token,
            faults=rules,
            request_log=request_log,
        )
    except ServeError as exc:  # the simulator's one line (exit 2); the fix when it is about --port
        if port is None or f":{port} " not in str(exc):
            raise
        raise ServeError(f"{exc}: choose another --port, or leave --port out to take a free one") from None
    except OSError as exc:  # one line for the user (exit 2), never a traceback
        fix = "choose another with --port, or leave --port out to take a free one"
        raise ConfigError(hints.port_in_use("--port", "127.0.0.1", port or 0, exc, fix)) from None
    stop = stop or threading.Event()
    reporters = None
    try:
        if sim_elm.is_extensible(sim.cluster):  # ``sim.elm_brokers``: the brokers' ELM reporters
            reporters = sim.elm_brokers = sim_elm.ElmBrokers(sim.cluster).start()  # type: ignore[attr-defined]
        print(f"Simulated Pulsar cluster {scenario.cluster!r} ({scenario.name}): admin URL {sim.admin_url}", file=out)
        for broker in sim.cluster.brokers.values():
            print(f"  {broker.name}: {broker.web_url}", file=out)
        if reporters is not None:
            print(
                f"Load manager: extensible — no load reports; each broker publishes its load on its system topics "
                f"at {reporters.service_url}, the cluster's brokerServiceUrl (the operator finds it there)",
                file=out,
            )
        if rules:
            print(f"Injected faults ({len(rules)}):", file=out)
            for rule in rules:
                print(f"  {rule.spec}", file=out)
        else:
            print("Injected faults: none", file=out)
        if request_log is not None:
            print(f"Request log: {request_log} (one JSON line per request)", file=out)
        print(f"Simulated time runs at {speed:g}× real time. Ctrl-C stops.", file=out, flush=True)
        if ready is not None:
            ready(sim)
        last = time.monotonic()
        while not stop.wait(0.1):
            now = time.monotonic()
            sim.cluster.advance((now - last) * speed)
            last = now
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        if reporters is not None:
            reporters.close()
        sim.stop()
        if rules:
            print(f"Faults fired: {sim.faults_fired}", file=out, flush=True)
