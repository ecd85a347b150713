"""Commands against a live cluster: ``operator rebalance`` (one cycle) and ``operator snapshot``."""

from __future__ import annotations

import argparse
import concurrent.futures.thread
import contextlib
import dataclasses
import json
import os
import random
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from pulsar_lb_operator import hints, lifecycle
from pulsar_lb_operator.act.executor import Executor
from pulsar_lb_operator.adminapi import AdminClient, auth
from pulsar_lb_operator.collect import elm
from pulsar_lb_operator.collect.collector import with_namespaces_and_topics
from pulsar_lb_operator.record import render
from pulsar_lb_operator.record.audit import publisher as audit_publisher
from pulsar_lb_operator.records import Outcome, Record
from pulsar_lb_operator.run import daemon as daemon_module
from pulsar_lb_operator.run.cycle import CycleContext, CycleResult, run_cycle
from pulsar_lb_operator.run.settings import OperatorSettings, resolve
from pulsar_lb_operator.store import files, statefile
from pulsar_lb_operator.store.control import ControlFile
from pulsar_lb_operator.store.statefile import OperatorState
from pulsar_lb_operator.strategies import ClusterError, ConfigError, LoadBalancerConfig


def settings_from(args: argparse.Namespace, **flags: object) -> tuple[OperatorSettings, LoadBalancerConfig, set[str]]:
    file_settings = files.read_config_file(args.config) if args.config else {}
    file_settings.update(dict(args.overrides))
    flags = {"adminUrl": args.admin_url, "cluster": args.cluster, "tokenFile": args.token_file, **flags}
    settings, config, explicit = resolve(file_settings, os.environ, flags)
    if not settings.adminUrl:
        raise ConfigError("no cluster to talk to: give --admin-url or set PULSAR_ADMIN_URL (or --snapshot FILE)")
    return settings, config, explicit


def connect(settings: OperatorSettings) -> tuple[AdminClient, str]:
    if settings.caBundle:  # requests would only say so on the first call, with a traceback
        try:
            with open(settings.caBundle, "rb"):
                pass
        except OSError as exc:
            message = f"caBundle: cannot read {settings.caBundle!r}: {exc.strerror or exc}"
            raise ConfigError(hints.with_fix(message, hints.file_fix(exc, settings.caBundle))) from None
    client = AdminClient(
        settings.adminUrl or "",
        credentials=auth.from_settings(settings.auth()),  # token, TLS client certificate or OAuth2, files checked
        ca_bundle=settings.caBundle,
        verify=settings.tlsVerify,
        max_body_bytes=int(settings.maxResponseMegabytes * 2**20),
        broker_urls=settings.broker_web_service_urls(),
        broker_url_template=settings.brokerWebServiceUrlTemplate,
    )
    if settings.cluster:
        return client, _named_cluster(client, settings.cluster)
    clusters = [c for c in client.clusters() if c != "global"]
    if len(clusters) != 1:
        raise ConfigError(f"the admin API lists clusters {clusters}: choose one with --cluster")
    return client, clusters[0]


def _named_cluster(client: AdminClient, cluster: str) -> str:
    """A cluster name the admin API does not list is the user's error (exit 2), said before anything else is
    asked; were it left to the brokers' list, a misspelt name would read as the cluster's fault (a 404, exit 1),
    and a daemon would log it every cycle. Where the list cannot be read now, the cycle's own calls say what
    they meet."""
    try:
        clusters = client.clusters()
    except ClusterError:
        return cluster
    if cluster not in clusters:
        raise ConfigError(f"cluster {cluster!r}: the admin API lists clusters {clusters} (set --cluster or cluster)")
    return cluster


def rebalance(args: argparse.Namespace) -> int:
    """One live cycle. Dry run unless dryRun is false (file, environment or --no-dry-run), like the daemon;
    it shares the daemon's state (cooldowns, pending verifications) and its lock. A dry run while the daemon holds
    the lock previews on its state as the daemon last wrote it, and writes nothing.

    The plan is printed before the first mutating call, then each outcome as it happens. Ctrl-C (SIGINT) stops
    before the next call — what was sent is on disk, as the daemon's SIGTERM — and exits 130; a second Ctrl-C
    quits at once (a call in flight was recorded before it was sent)."""
    settings, config, explicit = settings_from(args, dryRun=args.dry_run)
    if settings.leaderElection and not settings.dryRun:
        raise ConfigError(
            f"leaderElection is on: the operator's replicas act through Lease {settings.leaseName}, and a live "
            "rebalance beside them would be a second actor without their cooldowns; preview it with a dry run, or, "
            "with every replica stopped, run it with --set leaderElection=false"
        )
    if args.state:  # the state named here is the one whose pause (``<stateFile>.pause``) and drains count
        settings = dataclasses.replace(settings, stateFile=args.state)
    state_path = settings.stateFile
    holder = statefile.InstanceLock.holder(state_path) if settings.dryRun else None
    if holder is not None:  # a preview beside the daemon: its state as it is on disk, nothing written back
        if args.reset_state:
            raise ConfigError(f"--reset-state: the daemon (pid {holder}) holds {state_path}; stop it first")
        print(
            f"the daemon (pid {holder}) holds {state_path}: this dry run reads its state and writes nothing",
            file=sys.stderr,
        )
        return _connected_cycle(args, settings, config, explicit, statefile.load(state_path), state_path)
    with statefile.InstanceLock(state_path):
        state = statefile.load(state_path, reset=args.reset_state)
        return _connected_cycle(args, settings, config, explicit, state, state_path, write=True)


def _connected_cycle(
    args: argparse.Namespace,
    settings: OperatorSettings,
    config: LoadBalancerConfig,
    explicit: set[str],
    state: OperatorState,
    state_path: str,
    write: bool = False,
) -> int:
    """The cycle, connected; ``write``: the state and the audit are this command's to write (it holds the lock)."""
    client, cluster = connect(settings)
    try:
        with _interruptible() as stop:
            return _rebalance(args, settings, config, explicit, client, cluster, state, state_path, stop, write)
    except elm.ElmDataUnreadable as exc:  # what could not be read, in one line; nothing was changed
        print(f"operator: error: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()


@contextlib.contextmanager
def _interruptible() -> Iterator[threading.Event]:
    """The first SIGINT sets the event (the executor sends nothing more), the next one interrupts as usual."""
    stop = threading.Event()

    def heard() -> None:  # on lifecycle.relayed's thread: a handler setting ``stop`` could wait on the main thread
        if not stop.is_set():  # the second Ctrl-C is KeyboardInterrupt's
            stop.set()
            print("interrupted: no further call is sent (Ctrl-C again to quit at once)", file=sys.stderr, flush=True)

    def first(_signum: int, _frame: Any) -> None:  # ``heard`` runs on lifecycle.relayed's thread
        signal.signal(signal.SIGINT, signal.default_int_handler)

    # off the main thread neither is set, and the event stays as it is
    with lifecycle.relayed(heard, (signal.SIGINT,)), lifecycle.handlers({signal.SIGINT: first}):
        yield stop


def _rebalance(
    args: argparse.Namespace,
    settings: OperatorSettings,
    config: LoadBalancerConfig,
    explicit: set[str],
    client: AdminClient,
    cluster: str,
    state: OperatorState,
    state_path: str,
    stop: threading.Event,
    write: bool,
) -> int:
    session = elm.Session.from_settings(settings.elm(), tell=sys.stderr)  # on ELM: how long the first read may wait
    placement = args.placement
    if placement is None and "loadBalancerLoadPlacementStrategy" in explicit:
        placement = config.loadBalancerLoadPlacementStrategy
    draining = frozenset(ControlFile(state_path).read().drains)  # `operator drain` requests
    executor = Executor(
        client,
        cluster,
        settings.safety(config),
        sleep=stop.wait,
        stop_requested=stop.is_set,
        draining=lambda: draining,
        guard=settings.builtin_guard(client, config),
    )
    audit = audit_publisher.from_settings(settings.audit()) if write else None  # a preview's plan is not the daemon's
    report = _JsonLines(settings.dryRun) if args.output == "json" else _Text(settings.dryRun)
    try:
        context = CycleContext(
            client,
            cluster,
            config,
            executor,
            args.strategy,
            placement,
            broker_timeout_s=settings.brokerTimeoutSeconds,
            load_manager=session,
            audit=audit.publish if audit else None,
            save=lambda s: statefile.save(state_path, s) if write else None,
            on_plan=report.plan,
            on_outcome=report.outcome,
        )
        result = run_cycle(context, state, random.Random(args.seed), draining=draining)
    finally:
        session.close()
        if audit is not None and not audit.close(flush_s=10.0):
            print(
                f"{audit.spool.backlog()} audit events not yet delivered: they wait in "
                f"{audit.spool.directory} for the next run",
                file=sys.stderr,
            )
    if write:
        statefile.save(state_path, result.state)
    report.end(result, interrupted=stop.is_set(), state_path=state_path)
    if stop.is_set():
        return 130
    return 1 if result.failed or result.held else 0


def _print(line: str) -> None:
    print(line, flush=True)  # as it happens, also through a pipe


class _Text:
    """For people: the plan, then one line per outcome as it comes."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run

    def plan(self, result: CycleResult) -> None:
        if result.plan is not None:
            _print(render.plan_table(result.plan, dry_run=self.dry_run, deferred=result.deferred))
        for broker, why in sorted(result.skipped_brokers.items()):
            _print(f"left out of this cycle: {broker}: {why}")
        if result.plan is not None and result.plan.actions:
            _print("\nOutcomes:")

    def outcome(self, _result: CycleResult, record: Record) -> None:
        _print(f"  {render.outcome_line(record)}")

    def end(self, result: CycleResult, interrupted: bool, state_path: str) -> None:
        if result.held:  # one line: why, and the fix
            _print(f"\n{result.held[0].upper()}{result.held[1:]}")
        if interrupted:
            unsent = sum(1 for r in result.records if r.outcome is Outcome.SKIPPED and r.detail == "shutting down")
            _print(f"\nInterrupted: {unsent} action(s) not sent; what was sent is recorded in {state_path}")


class _JsonLines:
    """For programs: one JSON object a line — ``plan`` (before the first call), one ``outcome`` per action as it
    happens, then ``result``: the whole cycle (plan, outcomes, …), the one line to read for a summary."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run

    @staticmethod
    def document(result: CycleResult) -> dict[str, Any]:
        doc = result.plan.to_json() if result.plan else {"actions": []}
        for action, action_id, why in zip(doc["actions"], result.action_ids, result.deferred):
            action.update(actionId=action_id, deferred=why)
        doc["cycleId"] = result.cycle_id
        doc["skippedBrokers"] = result.skipped_brokers
        doc["loadManager"] = result.load_manager.to_json() if result.load_manager else None
        doc["builtinBalancer"] = result.builtin.to_json() if result.builtin else None
        return doc

    def plan(self, result: CycleResult) -> None:
        _print(json.dumps({"kind": "plan", "dryRun": self.dry_run, **self.document(result)}))

    def outcome(self, result: CycleResult, record: Record) -> None:
        doc = {"kind": "outcome", "cycleId": result.cycle_id, "actionId": result.action_id(record.action)}
        _print(json.dumps({**doc, **record.to_json()}))

    def end(self, result: CycleResult, interrupted: bool, state_path: str) -> None:
        doc = {"kind": "result", "dryRun": self.dry_run, **self.document(result)}
        doc["outcomes"] = [{"actionId": result.action_id(r.action), **r.to_json()} for r in result.records]
        doc["interrupted"] = interrupted
        _print(json.dumps(doc))


def snapshot(args: argparse.Namespace) -> int:
    settings, config, _ = settings_from(args)
    client, cluster = connect(settings)
    session = elm.Session.from_settings(settings.elm(), tell=sys.stderr)
    try:
        collection = session.collect(client, cluster, config)  # load reports, or ELM's topics
        snap = with_namespaces_and_topics(client, collection.snapshot, topics=args.with_topics)
        files.write_json_atomically(args.out, snap.to_json())
        print(
            f"wrote {args.out}: {len(snap.brokers)} brokers, {len(snap.namespaces)} namespaces"
            + (f", topics of {len(snap.topics)} bundles" if args.with_topics else ""),
            file=sys.stderr,
        )
        for broker, why in sorted(collection.skipped.items()):
            print(f"left out: {broker}: {why}", file=sys.stderr)
        return 0
    except elm.ElmDataUnreadable as exc:
        print(f"operator: error: {exc}", file=sys.stderr)
        return 1
    finally:
        session.close()
        client.close()


def run_daemon(args: argparse.Namespace) -> int:
    from pulsar_lb_operator.record import logs

    settings, config, explicit = settings_from(args, dryRun=args.dry_run)
    logs.configure(settings.logLevel, settings.logJson)
    placement = args.placement
    if placement is None and "loadBalancerLoadPlacementStrategy" in explicit:
        placement = config.loadBalancerLoadPlacementStrategy
    with statefile.InstanceLock(settings.stateFile):
        client, cluster = connect(settings)
        try:
            runner = daemon_module.Daemon(
                settings,
                config,
                client,
                cluster,
                args.strategy,
                placement,
                elector=_elector(settings),
                reset_state=args.reset_state,
            )
            code = runner.serve()
        finally:
            client.close()
    _exit_now_if_threads_linger(code, runner.abandoned)
    return code


def _elector(settings: OperatorSettings) -> daemon_module.Elector | None:
    if not settings.leaderElection:
        return None
    from pulsar_lb_operator.run.leadership import elector_from_settings

    return elector_from_settings(settings.lease())


def _exit_now_if_threads_linger(code: int, abandoned: bool) -> None:
    """A call that hung past the shutdown timeout lives on in a worker thread; the process must still end
    (its attempt is on disk). Python would join every non-daemon thread, and every executor's worker — a
    daemon thread too (the scheduler's are: an aggregation in flight would hold the exit for its whole run) —
    at exit, so end here."""
    workers = set(getattr(concurrent.futures.thread, "_threads_queues", ()))
    lingering = [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread() and t.is_alive() and (not t.daemon or t in workers)
    ]
    if abandoned or lingering:
        lifecycle.exit_now(code)  # Spark's JVM and the temporary directories ended first, as atexit would
