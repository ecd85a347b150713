"""Commands against a live cluster: ``operator rebalance`` (one cycle) and ``operator snapshot``."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading

from pulsar_lb_operator import hints
from pulsar_lb_operator.act import guard
from pulsar_lb_operator.act.executor import Executor
from pulsar_lb_operator.adminapi import AdminClient, auth
from pulsar_lb_operator.collect import elm
from pulsar_lb_operator.collect.collector import with_namespaces_and_topics
from pulsar_lb_operator.record import render
from pulsar_lb_operator.record.audit import publisher as audit_publisher
from pulsar_lb_operator.run import daemon as daemon_module
from pulsar_lb_operator.run.cycle import OperatorState, run_cycle
from pulsar_lb_operator.run.settings import OperatorSettings, resolve
from pulsar_lb_operator.store import files, statefile
from pulsar_lb_operator.store.control import ControlFile
from pulsar_lb_operator.strategies import ConfigError, LoadBalancerConfig, Split


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
        credentials=auth.from_settings(settings),  # token, TLS client certificate or OAuth2, files checked
        ca_bundle=settings.caBundle,
        verify=settings.tlsVerify,
        max_body_bytes=int(settings.maxResponseMegabytes * 2**20),
        broker_urls=settings.broker_web_service_urls(),
        broker_url_template=settings.brokerWebServiceUrlTemplate,
    )
    if settings.cluster:
        return client, settings.cluster
    clusters = [c for c in client.clusters() if c != "global"]
    if len(clusters) != 1:
        raise ConfigError(f"the admin API lists clusters {clusters}: choose one with --cluster")
    return client, clusters[0]


def rebalance(args: argparse.Namespace) -> int:
    """One live cycle. Dry run unless dryRun is false (file, environment or --no-dry-run), like the daemon;
    it shares the daemon's state (cooldowns, pending verifications) and its lock."""
    settings, config, explicit = settings_from(args, dryRun=args.dry_run)
    state_path = args.state or settings.stateFile
    with statefile.InstanceLock(state_path):
        state = statefile.load(state_path, reset=args.reset_state)
        client, cluster = connect(settings)
        try:
            return _rebalance(args, settings, config, explicit, client, cluster, state, state_path)
        except elm.ElmDataUnreadable as exc:  # what could not be read, in one line; nothing was changed
            print(f"operator: error: {exc}", file=sys.stderr)
            return 1
        finally:
            client.close()


def _rebalance(
    args: argparse.Namespace,
    settings: OperatorSettings,
    config: LoadBalancerConfig,
    explicit: set[str],
    client: AdminClient,
    cluster: str,
    state: OperatorState,
    state_path: str,
) -> int:
    # the conflict guard runs in the cycle: at once on a modular cluster, after the load was read otherwise (elm.py)
    session = elm.Session.from_settings(
        settings,
        guard=lambda: guard.check_builtin_shedding(client, settings.disableBuiltinShedding, settings.dryRun),
        tell=sys.stderr,  # on ELM: how long the first read may wait, and why
    )
    placement = args.placement
    if placement is None and "loadBalancerLoadPlacementStrategy" in explicit:
        placement = config.loadBalancerLoadPlacementStrategy
    draining = frozenset(ControlFile(state_path).read().drains)  # `operator drain` requests
    executor = Executor(client, cluster, settings.safety(config), draining=lambda: draining)
    audit = audit_publisher.from_settings(settings)
    try:
        result = run_cycle(
            client,
            cluster,
            config,
            executor,
            state,
            random.Random(args.seed),
            args.strategy,
            placement,
            broker_timeout_s=settings.brokerTimeoutSeconds,
            audit=audit.publish if audit else None,
            save=lambda s: statefile.save(state_path, s),
            draining=draining,
            load_manager=session,
        )
    finally:
        session.close()
        if audit is not None and not audit.close(flush_s=10.0):
            print(
                f"{audit.spool.backlog()} audit events not yet delivered: they wait in "
                f"{audit.spool.directory} for the next run",
                file=sys.stderr,
            )
    statefile.save(state_path, result.state)
    if args.output == "json":
        doc = result.plan.to_json() if result.plan else {"actions": []}
        doc["outcomes"] = [r.to_json() for r in result.records]
        doc["skippedBrokers"] = result.skipped_brokers
        doc["loadManager"] = result.load_manager.to_json() if result.load_manager else None
        print(json.dumps(doc, indent=2))
    else:
        print(render.plan_table(result.plan, dry_run=settings.dryRun))
        for broker, why in sorted(result.skipped_brokers.items()):
            print(f"left out of this cycle: {broker}: {why}")
        if result.records:
            print("\nOutcomes:")
            for record in result.records:
                kind = "split" if isinstance(record.action, Split) else "unload"
                print(f"  {kind} {record.action.bundle}: {record.outcome.value} ({record.detail})")
    return 1 if result.failed else 0


def snapshot(args: argparse.Namespace) -> int:
    settings, config, _ = settings_from(args)
    client, cluster = connect(settings)
    session = elm.Session.from_settings(settings, tell=sys.stderr)
    try:
        collection = session.collect(client, cluster, config, guard=False)  # load reports, or ELM's topics
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
    if not getattr(settings, "leaderElection", False):
        return None
    from pulsar_lb_operator.run.leadership import elector_from_settings

    return elector_from_settings(settings)


def _exit_now_if_threads_linger(code: int, abandoned: bool) -> None:
    """A call that hung past the shutdown timeout lives on in a worker thread; the process must still end
    (its attempt is on disk). Python would join every non-daemon thread, and every executor's worker,
    at exit, so end here."""
    lingering = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if abandoned or lingering:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
