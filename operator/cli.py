"""The ``operator`` command. Thin: it parses arguments and calls the functions that do the work.

Exit codes: 0 ok, 1 some actions failed or had no clear answer, 2 bad input (with a one-line error, never
a traceback), 3 another operator instance is active on the same state. An error's exit code is its
class's ``exit_code`` in the tree under ``PulsarLbError`` (strategies/errors.py): a user error is 2, the
cluster's is 1, another instance is 3; this module keeps no list of its own.

Over 500 lines because it is the one place that lists every command with its flags and help as ``--help``
shows them (the parser, about 240 lines); each command's body is a few lines calling the stage that does it.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import random
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from pulsar_lb_operator import __version__, control_cli, hints, lifecycle
from pulsar_lb_operator.adminapi import AdminError, AuthenticationError
from pulsar_lb_operator.arguments import positive
from pulsar_lb_operator.collect import elm
from pulsar_lb_operator.record import logs, render
from pulsar_lb_operator.run.settings import resolve
from pulsar_lb_operator.sandbox import shipped_scenarios
from pulsar_lb_operator.store import files
from pulsar_lb_operator.strategies import (
    PLACEMENT,
    SHEDDING,
    InternalError,
    LoadBalancerConfig,
    PulsarLbError,
    Rails,
    StrategyState,
    UserError,
    plan_cycle,
)


class UsageError(UserError):
    """Bad command-line input."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


class _Formatter(argparse.HelpFormatter):
    """Wraps descriptions as usual, and prints the "example:" epilogs line by line, as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.lower().startswith("example"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


# Shown at the end of each command's --help.
EXAMPLES = {
    "rebalance": [
        "operator rebalance --snapshot examples/unbalanced-after-restart.json        # offline, from a snapshot",
        "operator rebalance --admin-url http://127.0.0.1:8080                       # one live cycle, dry run",
        "operator rebalance --admin-url http://pulsar-broker:8080 --token-file /pulsar/tokens/admin/token --no-dry-run",
    ],
    "snapshot": ["operator snapshot --admin-url http://127.0.0.1:8080 --out snap.json --with-topics"],
    "run": [
        "operator run --config /etc/pulsar-lb-operator/settings.yaml",
        "operator run --admin-url http://127.0.0.1:8080 --no-dry-run --set metricsPort=8090",
    ],
    "aggregate": [
        "operator aggregate --history history/ --out profile/          # incremental from the last run's state",
        "operator aggregate --history history/ --out profile/ --full   # from every sample on disk",
    ],
    "compact": ["operator compact --history history/"],
    "spark-package": ["operator spark-package --out dist/pulsar_lb.zip   # and dist/pulsar_lb_job.py beside it"],
    "demo": [
        "operator demo",
        "operator demo --scenario heterogeneous-10-50-70 --strategy ThresholdShedder --minutes 15",
    ],
    "simulate": [
        "operator simulate demo --port 8080 --speed 60      # then: export PULSAR_ADMIN_URL=http://127.0.0.1:8080"
    ],
    "rehearse": ["operator rehearse --quick"],
    "benchmark": [
        "operator benchmark --scenario demo --strategy AvgShedder --no-plots",
        "operator benchmark --family scale-out --family hot-topic --runs 10 --strategy PredictivePairingShedder",
    ],
}


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number: choose one from 1 to 65535")
    return port


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="operator",
        description="Keeps an Apache Pulsar cluster's brokers evenly loaded.",
        epilog="example: operator demo      # a simulated, unbalanced cluster balanced on this machine",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    rebalance = commands.add_parser(
        "rebalance",
        help="plan one shedding cycle and print it",
        description="Plan one cycle. With --snapshot it plans offline from a captured snapshot (always a dry run).",
    )
    rebalance.add_argument("--snapshot", metavar="FILE", help="plan offline from a pulsar-lb-snapshot/1 file")
    _live_options(rebalance)
    rebalance.add_argument(
        "--dry-run",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="live: print the plan, call no mutating endpoint (the default unless dryRun: false)",
    )
    _reset_state_option(rebalance)
    _strategy_options(rebalance)
    _config_options(rebalance)
    rebalance.add_argument(
        "--state",
        metavar="FILE",
        help="strategy state (hit counters, history, grace periods): read if it exists, written back after planning",
    )
    rebalance.add_argument("--output", choices=("table", "json"), default="table")
    rebalance.add_argument("--seed", type=int, default=0, help="seed of the placement RNG (default 0)")

    snapshot = commands.add_parser("snapshot", help="write a pulsar-lb-snapshot/1 file from a live cluster")
    snapshot.add_argument("--out", required=True, metavar="FILE")
    snapshot.add_argument("--with-topics", action="store_true", help="include per-topic stats (broker-stats/topics)")
    _live_options(snapshot)
    _config_options(snapshot)

    run = commands.add_parser(
        "run",
        help="the daemon: balance the cluster every loadBalancerSheddingIntervalMinutes",
        description="Run collect → plan → execute on a schedule until SIGTERM. Dry run unless dryRun is false "
        "(--no-dry-run). Serves /healthz, /readyz and /metrics on metricsPort.",
    )
    _live_options(run)
    _config_options(run)
    _strategy_options(run)
    run.add_argument(
        "--dry-run",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="log intended actions only (the default unless dryRun: false)",
    )
    _reset_state_option(run)

    aggregate = commands.add_parser(
        "aggregate",
        help="run the Spark load-profile job once over a history store",
        description="Aggregate the history (Parquet) into the load profile the daemon reads.",
    )
    aggregate.add_argument("--history", required=True, metavar="URI", help="the history store (historyUri)")
    aggregate.add_argument("--out", required=True, metavar="URI", help="where to write the profile (profileUri)")
    aggregate.add_argument("--master", default="local[2]", help="Spark master: local[N], spark://, k8s://, yarn")
    aggregate.add_argument(
        "--full", action="store_true", help="recompute from every sample on disk, not from the job's last state"
    )

    compact = commands.add_parser(
        "compact",
        help="compact a history store's closed hours into one file each (the daemon does it every 10 minutes)",
        description="Rewrite each closed hour's cycle files as one file sorted by time and bundle, roll its bundle "
        "samples up per bundle and hour, and delete what age and the byte bound say must go.",
    )
    compact.add_argument("--history", required=True, metavar="URI", help="the history store (historyUri)")
    compact.add_argument("--retention-days", type=positive, default=14.0, help="historyRetentionDays (default 14)")
    compact.add_argument(
        "--minute-hours", type=positive, default=26.0, help="historyMinuteHours: bundle minute samples kept (26)"
    )

    package = commands.add_parser(
        "spark-package",
        help="build the zip and launcher spark-submit runs the load-profile job with",
        description="Write the job's package (pulsar_lb_operator/spark_jobs and strategies) as a zip, and the "
        "launcher spark-submit takes as its application beside it.",
    )
    package.add_argument("--out", default="pulsar_lb.zip", metavar="ZIP", help="the zip to write (pulsar_lb.zip)")

    demo = commands.add_parser(
        "demo",
        help="run the operator against a simulated, unbalanced cluster on loopback",
        description="Serve a simulated Pulsar cluster on 127.0.0.1 and balance it over HTTP, printing broker "
        "usage each cycle. Exits by itself when the cluster has converged or the scenario ends.",
    )
    demo.add_argument("--scenario", default="demo", help="a shipped scenario name or a scenario file (default: demo)")
    _strategy_options(demo)
    demo.add_argument("--minutes", type=positive, help="simulated minutes to run (default: until converged)")
    demo.add_argument("--audit-url", metavar="URL", help="also publish audit events to this pulsar:// broker")
    demo.add_argument(
        "--audit-topic",
        default="persistent://public/default/pulsar-lb-operator-audit",
        help="topic of the audit events (default: %(default)s)",
    )
    demo.add_argument("--audit-spool", default="state/audit-spool", help="audit spool directory (default: %(default)s)")
    demo.add_argument(
        "--load-manager",
        choices=("modular", "extensible"),
        help="the brokers' load manager (default: the scenario's loadManager, else modular); extensible: no load "
        "reports, their load on its system topics on a pulsar-lite broker on loopback",
    )

    simulate = commands.add_parser(
        "simulate",
        help="serve a simulated Pulsar cluster's admin API until stopped",
        description="Serve a scenario's brokers on 127.0.0.1 for your own experiments.",
    )
    simulate.add_argument("scenario", help=f"a scenario file or a shipped one: {', '.join(shipped_scenarios())}")
    simulate.add_argument("--port", type=_port, help="port of the first broker (the others take free ports)")
    simulate.add_argument("--speed", type=positive, default=60.0, help="simulated seconds per real second (default 60)")
    simulate.add_argument("--token", help="require 'Authorization: Bearer TOKEN' on admin calls")
    simulate.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="inject a fault, BROKER:METHOD:PATH-SUBSTRING:KIND[@COUNT] (BROKER and METHOD may be *); KIND: "
        "status=CODE, status-after=CODE, delay=SECONDS, reset, reset-after, garbage, html401; repeatable",
    )
    simulate.add_argument("--request-log", metavar="FILE", help="append one JSON line per request served to FILE")
    simulate.add_argument(
        "--load-manager",
        choices=("modular", "extensible"),
        help="the brokers' load manager (default: the scenario's loadManager, else modular); extensible: no load "
        "reports, their load on its system topics on a pulsar-lite broker on loopback",
    )

    control_cli.add_commands(commands, _config_options)

    rehearse = commands.add_parser(
        "rehearse",
        help="run the operator against a matrix of injected faults and count what went wrong",
        description="Serve a simulated cluster with faults (every kind on every admin endpoint the operator "
        "calls, a broker crash mid-cycle, the kill switch, a dry run, kill -9 and restart, two instances, redirects "
        "to origins it does not know, signals to commands that start processes) and run the operator's cycles "
        "against each. Prints faults injected, daemon crashes, rail violations, double actions, state lost, secrets "
        "in logs, sent astray and left behind; exits 0 only if all but the first are 0. "
        "Example: operator rehearse --quick",
    )
    rehearse.add_argument("--scenario", default="demo", help="a shipped scenario name or a file (default: demo)")
    rehearse.add_argument("--quick", action="store_true", help="four fault kinds per endpoint instead of nine")
    rehearse.add_argument("--only", metavar="TEXT", help="run only the cases whose name contains TEXT")
    rehearse.add_argument("--json", action="store_true", help="print the rows as JSON")
    rehearse.add_argument("--jobs", type=int, default=4, help="cases run at once, in worker processes (default 4)")

    bench = commands.add_parser(
        "benchmark",
        help="compare every strategy on every scenario (PIP-364's table, measured)",
        description="Run every strategy combination over the shipped scenarios (or a recorded history) in "
        "simulated time, print PIP-364's table with verdicts and write a report with plots.",
    )
    bench.add_argument("--scenario", action="append", default=[], help="a scenario name or file; repeatable")
    bench.add_argument(
        "--strategy", action="append", default=[], help="a combination's label or shedding name; repeatable"
    )
    bench.add_argument("--history", metavar="URI", help="backtest: replay this history store's traffic instead")
    bench.add_argument(
        "--family",
        action="append",
        default=[],
        metavar="NAME",
        help="generated scenarios of this family instead (scale-out, scale-in, heterogeneous, rolling-restart, "
        "tenant-surge, hot-topic, diurnal, noisy-neighbour, mixed, noise, isolation, or all); repeatable",
    )
    bench.add_argument(
        "--runs", type=int, default=None, help="with --family: scenarios per family, numbered from --seed (default 5)"
    )
    bench.add_argument(
        "--brokers",
        metavar="COUNT",
        help="with --family: how many brokers its clusters start with, N or LOW-HIGH (default each family's own)",
    )
    bench.add_argument(
        "--no-sample-noise",
        action="store_true",
        help="with --family: every broker's CPU samples exact, to tell what part of a strategy's misses the samples' "
        "noise makes",
    )
    bench.add_argument("--seed", type=int, default=0, help="the first seed (default 0: the scenarios as written)")
    bench.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="run every scenario with this many seeds, from --seed on (default 1); verdicts are the worst seed's",
    )
    bench.add_argument("--target", type=float, default=10.0, help="spread (points) that counts as balanced")
    bench.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    bench.add_argument("--out", default="benchmark-report", help="report directory (default benchmark-report)")
    bench.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    for name, command in commands.choices.items():  # every command's --help ends with an example
        command.formatter_class = _Formatter
        if name in EXAMPLES and not command.epilog:
            command.epilog = "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[name])
    return parser


def _reset_state_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--reset-state",
        action="store_true",
        help="start with no cooldowns, hit counters or pending verifications (the old state file is kept aside); "
        "only for a state file the operator refuses to read",
    )


def _strategy_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--strategy", metavar="NAME", help=f"shedding strategy: {', '.join(SHEDDING)}")
    command.add_argument("--placement", metavar="NAME", help=f"placement strategy: {', '.join(PLACEMENT)}")


def _config_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--config",
        metavar="FILE",
        # the chart sets it, so a command run in the pod reads the daemon's own settings
        default=os.environ.get("PULSAR_LB_CONFIG") or None,
        help="YAML/TOML/JSON file of settings (Pulsar key names); default: $PULSAR_LB_CONFIG",
    )
    command.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="override one setting (Pulsar key name); repeatable",
    )


def _live_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--admin-url", metavar="URL", help="any broker's or the proxy's web URL (env PULSAR_ADMIN_URL)"
    )
    command.add_argument("--cluster", help="cluster name (default: the only one the admin API lists)")
    command.add_argument("--token-file", metavar="FILE", help="file holding the admin token (or env PULSAR_LB_TOKEN)")


def load_config(
    config_file: str | None, overrides: Sequence[tuple[str, str]]
) -> tuple[LoadBalancerConfig, set[str], Rails]:
    """Pulsar's keys from the same settings file the live commands read, then ``--set``; returns the config,
    the Pulsar keys set explicitly, and the caps a live cycle would hold the plan to (maxUnloadsPer*)."""
    settings: dict[str, Any] = files.read_config_file(config_file) if config_file else {}
    settings.update(dict(overrides))
    ours, config, explicit = resolve(settings, {}, {})
    return config, explicit, ours.safety(config).rails


def cmd_rebalance(args: argparse.Namespace) -> int:
    if not args.snapshot:
        from pulsar_lb_operator.run import live

        return live.rebalance(args)
    live_only = {
        "--no-dry-run": args.dry_run is False,
        "--admin-url": args.admin_url,
        "--cluster": args.cluster,
        "--token-file": args.token_file,
        "--reset-state": args.reset_state,
    }
    if given := [flag for flag, value in live_only.items() if value]:  # asked for, and silently not done: refused
        raise UsageError(f"{', '.join(given)}: a live cycle's, not --snapshot's (offline, always a dry run)")
    config, explicit, rails = load_config(args.config, args.overrides)
    snapshot = files.read_snapshot(args.snapshot)
    state = files.read_state(args.state) if args.state else StrategyState()
    placement = args.placement
    if placement is None and "loadBalancerLoadPlacementStrategy" in explicit:
        placement = config.loadBalancerLoadPlacementStrategy
    # a snapshot of a cluster on the extensible load manager holds only its brokers' top bundles (collect/elm.py)
    shedding, placement, notes = elm.resolve_strategies(elm.of_snapshot(snapshot), config, args.strategy, placement)
    plan, next_state = plan_cycle(
        snapshot,
        config,
        state,
        random.Random(args.seed),
        shedding=shedding,
        placement=placement,
        rails=rails,
    )
    plan = elm.with_notes(plan, notes)
    if args.state:
        files.write_state(args.state, next_state)
    if args.output == "json":
        print(json.dumps(plan.to_json(), indent=2))
    else:
        print(render.plan_table(plan, dry_run=True))
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from pulsar_lb_operator.run import live

    files.check_output_file(args.out, "--out")  # before the cluster is asked anything
    return live.snapshot(args)


def cmd_run(args: argparse.Namespace) -> int:
    from pulsar_lb_operator.run import live

    # until the daemon hears the signals itself, they end it in order too (and exit 0, as the daemon does);
    # pyspark's temporary files go with ours
    with lifecycle.exit_on_signals(), lifecycle.temp_files_inside("run"):
        try:
            return live.run_daemon(args)
        except KeyboardInterrupt:
            return 0


def cmd_aggregate(args: argparse.Namespace) -> int:
    import time

    from pulsar_lb_operator.spark_jobs.load_profile import ProfileOptions, build_profile
    from pulsar_lb_operator.spark_jobs.session import build_session

    # a local history that is not there is said at once, not after the seconds Spark takes to start and list it
    if "://" not in args.history and not os.path.isdir(args.history):
        raise UsageError(f"no history at {args.history}: no such directory (--history: the daemon's historyUri)")
    started = time.monotonic()

    def progress(step: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {step}", file=sys.stderr, flush=True)

    progress(f"starting Spark ({args.master})")
    # a signal ends it as Ctrl-C does: Spark is stopped and its scratch space removed (its JVM would outlive us)
    with lifecycle.exit_on_signals(), lifecycle.temp_files_inside("aggregate"):
        spark = build_session(args.master, short_lived=not args.full)  # a full recompute runs for minutes
        try:
            summary = build_profile(spark, args.history, args.out, ProfileOptions(), progress, full=args.full)
        finally:
            spark.stop()
    print(json.dumps(summary))
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    import time

    from pulsar_lb_operator.store.compaction import compact
    from pulsar_lb_operator.store.history import HistoryStore

    if args.minute_hours < 25:
        raise UsageError("--minute-hours must be at least 25 (the profile's 24 h window and what leaves it)")
    store = HistoryStore(args.history, args.retention_days, minute_hours=args.minute_hours)
    if not store.partitions("broker_samples") and not store.partitions("bundle_samples"):
        raise UsageError(f"--history {args.history}: no history store there (no broker_samples, bundle_samples)")
    now_ms = int(time.time() * 1000)
    before = store.used_bytes()
    done = compact(store, now_ms)
    expired = store.expire(now_ms)
    print(
        json.dumps(
            {
                "hours_compacted": done.hours,
                "files_compacted": done.files_in,
                "rows": done.rows,
                "superseded_files_deleted": done.deleted,
                "partitions_expired": expired,
                "bytes_before": before,
                "bytes_after": store.used_bytes(),
            }
        )
    )
    return 0


def cmd_spark_package(args: argparse.Namespace) -> int:
    from pulsar_lb_operator.spark_jobs import package

    try:
        archive, launcher = package.build(args.out)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {archive} and {launcher}; on a cluster:")
    print(
        f"  spark-submit --master spark://HOST:7077 --py-files {archive} {launcher} "
        "--history s3a://BUCKET/pulsar-lb/history --out s3a://BUCKET/pulsar-lb/profile"
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from pulsar_lb_operator.sandbox import demo

    if args.audit_url and not args.audit_url.startswith(("pulsar://", "pulsar+ssl://")):
        raise UsageError(f"--audit-url {args.audit_url!r} is not a pulsar:// or pulsar+ssl:// URL")
    stop = threading.Event()  # SIGTERM, SIGINT, SIGHUP: the demo ends, what it started is stopped and removed
    with lifecycle.exit_on_signals(stop):
        return demo.run_demo(
            args.scenario,
            args.strategy,
            args.placement,
            args.minutes,
            audit_url=args.audit_url,
            audit_topic=args.audit_topic,
            audit_spool=args.audit_spool,
            load_manager=args.load_manager,
            stop=stop,
        )


def cmd_simulate(args: argparse.Namespace) -> int:
    from pulsar_lb_operator.sandbox import demo

    stop = threading.Event()  # SIGTERM, SIGINT, SIGHUP: it stops, what it started is stopped and removed
    with lifecycle.exit_on_signals(stop):
        return demo.run_simulator(
            args.scenario,
            args.port,
            args.speed,
            args.token,
            stop=stop,
            faults=args.fault,
            request_log=args.request_log,
            load_manager=args.load_manager,
        )


def cmd_benchmark(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.jobs < 1 or args.target <= 0 or args.seeds < 1 or (args.runs is not None and args.runs < 1):
        raise UsageError("--jobs, --seeds, --runs and --target must be positive")
    if args.family and (args.scenario or args.history or args.seeds != 1):
        raise UsageError("--family generates its scenarios: it takes --runs, not --scenario, --history or --seeds")
    if args.runs is not None and not args.family:
        raise UsageError("--runs counts generated scenarios: it needs --family")
    if args.no_sample_noise and not args.family:
        raise UsageError("--no-sample-noise changes generated scenarios: it needs --family")
    size = _broker_range(args.brokers) if args.brokers is not None else None
    if size is not None and not args.family:
        raise UsageError("--brokers sizes generated scenarios: it needs --family")
    # its progress bar and plots are not in the daemon's image
    hints.require_extra("bench", "operator benchmark", ["tqdm"] if args.no_plots else ["tqdm", "matplotlib"])
    from pulsar_lb_operator.sandbox import benchmark

    command = "operator " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["benchmark"] else "operator benchmark"
    seeds = range(args.seed, args.seed + ((args.runs or 5) if args.family else args.seeds))
    options = (args.scenario, args.strategy, seeds, args.target, args.jobs, Path(args.out), not args.no_plots)
    with lifecycle.exit_on_signals():  # SIGTERM ends it as Ctrl-C does: the pool's workers are stopped with it
        return benchmark.benchmark_command(
            *options, args.history, command, family=args.family, sample_noise=not args.no_sample_noise, size=size
        )


def _broker_range(text: str) -> tuple[int, int]:
    """``--brokers``: N, or LOW-HIGH (each run draws its count between them, as the families draw theirs; the
    families say how few they take)."""
    low, _, high = text.partition("-")
    try:
        return int(low), int(high or low)
    except ValueError:
        raise UsageError(f"--brokers takes N or LOW-HIGH, not {text!r}") from None


def cmd_rehearse(args: argparse.Namespace) -> int:
    from pulsar_lb_operator.sandbox import rehearse

    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    code, _ = rehearse.rehearse(args.scenario, args.quick, as_json=args.json, only=args.only, jobs=args.jobs)
    return code


DATA_ON_STDOUT = {"rebalance", "benchmark", "rehearse"}  # plans, JSON lines, tables a script may read


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    logs.configure(
        os.environ.get("PULSAR_LB_LOG_LEVEL", "warning"),
        os.environ.get("PULSAR_LB_LOG_JSON", "").lower() in ("1", "true", "yes"),
    )
    args: argparse.Namespace | None = None
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version print and end here
            return exc.code if isinstance(exc.code, int) else 0
        commands = {
            "rebalance": cmd_rebalance,
            "snapshot": cmd_snapshot,
            "run": cmd_run,
            "aggregate": cmd_aggregate,
            "compact": cmd_compact,
            "spark-package": cmd_spark_package,
            "demo": cmd_demo,
            "simulate": cmd_simulate,
            "benchmark": cmd_benchmark,
            "rehearse": cmd_rehearse,
            **control_cli.dispatch(),
        }
        # a C library's stray line goes to stderr, not into the data
        data = lifecycle.stdout_for_python_alone() if args.command in DATA_ON_STDOUT else contextlib.nullcontext()
        with data:
            return commands[args.command](args)
    except PulsarLbError as exc:
        if isinstance(exc, InternalError):
            return _internal_error(exc)
        print(f"operator: error: {_error_text(exc, args)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `operator … | head`: the reader has gone; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:  # a port, a file, a directory the command needs: one line, never a traceback
        where = f" ({exc.filename})" if exc.filename else ""
        fix = hints.file_fix(exc, exc.filename) if exc.filename else ""
        print(hints.with_fix(f"operator: error: {exc.strerror or exc}{where}", fix), file=sys.stderr)
        return 2
    except Exception as exc:  # a bug: still one line for the user; PULSAR_LB_TRACEBACK=1 shows where
        return _internal_error(exc)


def _internal_error(exc: Exception) -> int:
    if os.environ.get("PULSAR_LB_TRACEBACK"):
        raise exc
    print(
        f"operator: internal error: {type(exc).__name__}: {exc} — this is a bug; please report it with the "
        "output of the same command run with PULSAR_LB_TRACEBACK=1",
        file=sys.stderr,
    )
    return InternalError.exit_code


def _error_text(exc: PulsarLbError, args: argparse.Namespace | None) -> str:
    """The one line after "operator: error: ", with what only the CLI knows (the --help, the token's source)."""
    if isinstance(exc, UsageError):
        return f"{exc} (see 'operator --help')"
    if isinstance(exc, AuthenticationError):  # no credentials to send: no call reached the cluster
        return f"credentials: {exc}"
    if isinstance(exc, AdminError):
        return f"the cluster's admin API: {_admin_error(exc, args)}"
    return str(exc)


def _admin_error(exc: AdminError, args: argparse.Namespace | None) -> str:
    """Pulsar's meaning of a 401/403 and where the token came from (never the token); else the error as is."""
    if args is None:  # failed before the arguments were parsed: no token was read
        return str(exc)
    try:
        from pulsar_lb_operator.run import live

        settings = live.settings_from(args)[0]  # the same inputs the command read
    except Exception:
        return str(exc)
    meaning = hints.admin_auth(exc, settings.auth().token_source())
    return f"{meaning} ({exc.url})" if meaning else str(exc)


def run() -> NoReturn:
    # `kill -USR1 <pid>` prints every thread's stack on stderr and the command goes on: a hang can be diagnosed
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    code = main()
    lifecycle.end_if_stranded(code)  # a broker that never answered holds a native call: no abort at exit
    sys.exit(code)


if __name__ == "__main__":
    run()
