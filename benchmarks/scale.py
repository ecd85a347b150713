"""Benchmark: a cycle over 1,000 brokers and up to 100,000 bundles, served by the simulator over loopback.

    python benchmarks/scale.py                        # 1,000 brokers; 10k, 50k and 100k bundles
    python benchmarks/scale.py --bundles 100000 --profile
    python benchmarks/scale.py --balance              # the operator's cycle on large-1000: dry run, then real

For each size it generates the cluster (the shipped ``large-1000`` scenario with as many 100-bundle
namespaces as needed and the per-topic rate scaled so every size loads the brokers alike), serves it in
a process of its own — one asyncio server, every broker on its own loopback address — and measures, in
another process, against the same brokers and reports:

* **bare**: the concurrent fetch and JSON parse of every broker's load report with nothing else —
  ``requests`` (one Session, its pools sized for the brokers) and ``json.loads`` on as many threads as
  the collector uses: what the plain way costs over this network; and **lean bare**, the same with two
  of collect's own savings (the Session does not scan the environment at every request, the cyclic
  garbage collector is paused) — collect has a third, its reports decoded once into checked fields
  instead of by ``json.loads``;
* **collect**: the operator's ``collect`` (the admin client's deadlines, redirect and host checks, GET
  retries, each report's bytes decoded once into the checked fields of ``strategies/snapshots.py``'s
  strict parse, staleness checks, the namespace policies); and collect again with the reports decoded by
  ``json.loads`` and that parse swapped for a stand-in — the collector's own cost;
* **parse**: that decode and strict parse alone (``decode_load_report`` and ``parse_broker_load``) over
  the same bytes, on one thread, and ``json.loads`` alone (each the best of ``--repeat`` runs, the garbage
  collector paused for both as collect pauses it) — collect's cost that is not the network's;
* **decide** per shedding strategy with its default placement: ``strategies.plan_cycle`` on the
  collected snapshot, with the state an earlier cycle left (so AvgShedder's hit counters have a first
  hit, as in a running operator);
* **append**: the history append of the collected snapshot (``store/history.py``: its columns, then the
  Parquet files on local disk), beside the dict-per-row build it replaced (``pa.Table.from_pylist``);
* peak memory: the resident peak (``ru_maxrss``) of a fresh process doing what one operator cycle does
  before executing — collect, then decide (AvgShedder, twice) — and of the simulator's process.

Runs alternate bare, lean bare, collect and collect without the strict parse, ``--repeat`` times (default 5); each
figure is the best run (decide: the best of 3), the cost of the work without what other processes took
meanwhile, and the ratios compare figures of the same run. Then the slope: how each time grows per
10,000 bundles between consecutive sizes (linear growth keeps it flat). ``--profile`` prints where
collect's CPU time goes (cProfile on every collecting thread). Cores and load of the machine matter: the
simulator and the operator each want a core.

About 620 lines because it is one benchmark run as one script: the cluster's generator, the serving process, the
measuring process and the report's table, each only used by the others.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import itertools
import json
import multiprocessing
import os
import pstats
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from types import SimpleNamespace
from typing import Any, TypeVar
from unittest import mock

import yaml

T = TypeVar("T")

STRATEGIES = (
    "AvgShedder",
    "ThresholdShedder",
    "UniformLoadShedder",
    "OverloadShedder",
    "TransferShedder",
    "PredictivePairingShedder",
)
BUNDLES_PER_NAMESPACE = 100
SHIPPED_BUNDLES = 100_000  # large-1000.yaml: 1,000 namespaces of 100 bundles


def scenario_data(brokers: int, bundles: int) -> dict[str, Any]:
    """The shipped large-1000 scenario, resized: ``brokers`` brokers (the first and the last 0.5% as in
    it: overloaded, and just restarted) and ``bundles`` bundles, each broker carrying the same load."""
    from pulsar_lb_operator.simulator.scenario import load_scenario  # noqa: F401 - the shipped file sits beside it

    data = yaml.safe_load(
        (resources.files("pulsar_lb_operator.simulator") / "scenarios" / "large-1000.yaml").read_text()
    )
    data["brokers"][0]["count"] = brokers
    namespace = data["namespaces"][0]
    namespace["count"] = max(1, bundles // BUNDLES_PER_NAMESPACE)
    namespace["rate"] = namespace["rate"] * (SHIPPED_BUNDLES / bundles) * (brokers / 1000)
    few = max(1, brokers // 200)
    data["initial_owners"] = {
        "broker-*": 1,
        **{f"broker-{i}": 1.8 for i in range(few)},
        **{f"broker-{i}": 0 for i in range(brokers - few, brokers)},
    }
    data["name"] = f"scale-{brokers}-{bundles}"
    return data


# ---------------------------------------------------------------------------------------------- simulator


def _simulator(conn: Any, data: dict[str, Any]) -> None:
    """The simulator's process: build and serve the cluster, answer commands until "stop"."""
    from pulsar_lb_operator.simulator.cluster import SimulatedCluster
    from pulsar_lb_operator.simulator.http import serve
    from pulsar_lb_operator.simulator.scenario import parse_scenario

    started = time.perf_counter()
    sim = serve(lambda allocate: SimulatedCluster(parse_scenario(data), allocate))
    built = time.perf_counter() - started
    conn.send(
        {
            "admin_url": sim.admin_url,
            "brokers": sim.cluster.active_ids(),
            "served": len(sim.servers),
            "bundles": len(sim.cluster.ownership),
            "build_s": built,
            "now_ms": sim.cluster.now_ms,
        }
    )
    try:
        while True:
            command, argument = conn.recv()
            if command == "stop":
                break
            if command == "advance":
                sim.cluster.advance(argument)
                conn.send(sim.cluster.now_ms)
            elif command == "rss":
                conn.send(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
            elif command == "usage":
                from pulsar_lb_operator.benchmarks.metrics import RunMetrics

                sample = RunMetrics().record(sim.cluster)
                conn.send((sample.usage, sim.cluster.unloads, len(sim.mutating_requests())))
    finally:
        sim.stop()
        conn.send("stopped")


class Served:
    """A cluster served by the simulator in a process of its own."""

    def __init__(self, data: dict[str, Any]) -> None:
        forks = "fork" in multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork") if forks else multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_simulator, args=(child, data), daemon=True)
        self._process.start()
        self.info: dict[str, Any] = self._conn.recv()

    def ask(self, command: str, argument: Any = None) -> Any:
        self._conn.send((command, argument))
        return self._conn.recv()

    def stop(self) -> None:
        try:
            self.ask("stop")
        finally:
            self._process.join(30)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------- measures


def bare_fetch(broker_ids: list[str], workers: int, session: Any) -> list[Any]:
    """Every broker's load report: requests + json.loads, nothing else, on ``workers`` threads."""

    def one(broker_id: str) -> Any:
        return json.loads(session.get(f"http://{broker_id}/admin/v2/broker-stats/load-report", timeout=60).content)

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, broker_ids))


def _best(runs: list[float]) -> float:
    """The best of several runs: what the work costs, without what other processes took meanwhile."""
    return min(runs)


def _timed(function: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def _profile_collect(collect_once: Callable[[], Any]) -> str:
    """Where one collect's CPU time goes: cProfile on every collecting thread (and the calling one), merged,
    timed by each thread's CPU clock (wall clocks would count every thread's waits for the GIL)."""
    import threading

    from pulsar_lb_operator.collect import collector

    profiles: list[cProfile.Profile] = []
    local = threading.local()
    original = collector._read_one

    def profiled(*args: Any, **kwargs: Any) -> Any:
        profile = getattr(local, "profile", None)
        if profile is None:
            profile = local.profile = cProfile.Profile(time.thread_time)  # CPU time: not the GIL's waits
            profiles.append(profile)
        profile.enable()
        try:
            return original(*args, **kwargs)
        finally:
            profile.disable()

    collector._read_one = profiled
    main = cProfile.Profile(time.thread_time)
    try:
        main.enable()
        collect_once()
        main.disable()
    finally:
        collector._read_one = original
    out = io.StringIO()
    stats = pstats.Stats(main, stream=out)
    for profile in profiles:
        stats.add(profile)
    stats.sort_stats("tottime").print_stats(25)
    return out.getvalue()


def _measure(conn: Any, info: dict[str, Any], scenario: dict[str, Any], options: dict[str, Any]) -> None:
    """The measuring process: bare fetch and collect alternately, the parse alone, decide per strategy."""
    import requests
    import structlog

    from pulsar_lb_operator.adminapi import AdminClient
    from pulsar_lb_operator.collect.collector import collect, concurrency
    from pulsar_lb_operator.strategies import (
        DecodedReport,
        LoadBalancerConfig,
        StrategyState,
        collector_paused,
        decode_load_report,
        parse_broker_load,
        plan_cycle,
    )

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # errors only
    brokers: list[str] = info["brokers"]
    workers = concurrency(len(brokers))
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_connections=len(brokers) + 1, pool_maxsize=workers))
    client = AdminClient(info["admin_url"])
    now_ms = info["now_ms"]

    def collect_once() -> Any:
        return collect(client, scenario.get("cluster", "sim"), now_ms=now_ms)

    def collect_unparsed() -> Any:
        """collect with the strict parse swapped for a stand-in — the reports decoded by json.loads, as bare
        does, and not checked: the collector's own cost over the network."""
        from pulsar_lb_operator.collect import collector

        def stand_in(_broker_id: str, report: Any, _path: str = "") -> Any:
            return SimpleNamespace(lastUpdate=report["lastUpdate"], owned_bundles=lambda: report["bundles"])

        with (
            mock.patch.object(collector, "parse_broker_load", stand_in),
            mock.patch.object(collector, "decode_load_report", lambda _content: None),
        ):
            return collect_once()

    lean = requests.Session()  # bare, with two of collect's own savings: see "lean" in the module's docstring
    lean.trust_env = False
    lean.mount("http://", requests.adapters.HTTPAdapter(pool_connections=len(brokers) + 1, pool_maxsize=workers))

    def lean_fetch() -> list[Any]:
        with collector_paused():
            return bare_fetch(brokers, workers, lean)

    bare_fetch(brokers, workers, session)  # warm up all: connections, the simulator's serialized reports
    lean_fetch()
    collection = collect_once()
    bare_runs, lean_runs, collect_runs, unparsed_runs = [], [], [], []
    for _ in range(options["repeat"]):
        seconds, _ = _timed(lambda: bare_fetch(brokers, workers, session))
        bare_runs.append(seconds)
        lean_runs.append(_timed(lean_fetch)[0])
        seconds, collection = _timed(collect_once)
        collect_runs.append(seconds)
        unparsed_runs.append(_timed(collect_unparsed)[0])
    assert len(collection.snapshot.brokers) == len(brokers), collection.skipped
    raw = [session.get(f"http://{b}/admin/v2/broker-stats/load-report", timeout=60).content for b in brokers]

    def decode_and_parse() -> list[Any]:  # what collect does with each answer's bytes (all take the fast path)
        return [parse_broker_load(b, decode_load_report(r), f"load-report of {b}") for b, r in zip(brokers, raw)]

    assert all(type(decode_load_report(r)) is DecodedReport for r in raw)  # every report takes the fast path
    with collector_paused():  # both as collect does it
        loads_s = _best([_timed(lambda: [json.loads(r) for r in raw])[0] for _ in range(options["repeat"])])
        parse_s = _best([_timed(decode_and_parse)[0] for _ in range(options["repeat"])])
    result: dict[str, Any] = {
        "workers": workers,
        "bare_s": _best(bare_runs),
        "lean_s": _best(lean_runs),
        "collect_s": _best(collect_runs),
        "unparsed_s": _best(unparsed_runs),
        "loads_s": loads_s,
        "parse_s": parse_s,
        "report_kib": sum(len(r) for r in raw) / len(raw) / 1024,
        "decide_s": {},
    }
    result.update(_append_times(collection.snapshot, options["repeat"]))
    if options["profile"]:
        result["profile"] = _profile_collect(collect_once)
    config = LoadBalancerConfig().replace(scenario.get("config", {}))
    snapshot = collection.snapshot
    for strategy in options["strategies"]:
        _, state = plan_cycle(snapshot, config, StrategyState(), random.Random(1), strategy)  # an earlier cycle
        runs = [
            _timed(functools.partial(plan_cycle, snapshot, config, state, random.Random(2), strategy)) for _ in range(3)
        ]
        seconds, (plan, _) = min(runs, key=lambda run: run[0])
        result["decide_s"][strategy] = seconds
        print(f"    decide {strategy}: {seconds:.2f} s, {len(plan.actions)} actions", file=sys.stderr, flush=True)
    client.close()
    conn.send(result)


def _rows_as_dicts(snapshot: Any) -> list[Any]:
    """The history append's earlier way, the baseline: a dict per bundle, then ``pa.Table.from_pylist``."""
    import pyarrow as pa

    from pulsar_lb_operator.store.history import BUNDLE_SCHEMA

    rows = []
    for broker_id, load in sorted(snapshot.brokers.items()):
        for bundle, stats in sorted(load.lastStats.items()):
            rows.append(
                {
                    "time": snapshot.taken_at,
                    "bundle": bundle,
                    "namespace": bundle.rpartition("/")[0],
                    "owner": broker_id,
                    "msg_rate_in": stats.msgRateIn,
                    "msg_rate_out": stats.msgRateOut,
                    "msg_throughput_in": stats.msgThroughputIn,
                    "msg_throughput_out": stats.msgThroughputOut,
                    "topics": stats.topics,
                    "producers": stats.producerCount,
                    "consumers": stats.consumerCount,
                }
            )
    return [pa.Table.from_pylist(rows, schema=BUNDLE_SCHEMA)]


def _append_times(snapshot: Any, repeat: int) -> dict[str, float]:
    """The history append of one cycle (operator/store/history.py): building its columns, and the whole append
    (columns and the Parquet files, on local disk) — beside the dict-per-row build it replaced."""
    import tempfile

    from pulsar_lb_operator.store.history import HistoryStore, snapshot_tables

    with tempfile.TemporaryDirectory() as tmp:
        store = HistoryStore(tmp)
        build_s = _best([_timed(lambda: snapshot_tables(snapshot))[0] for _ in range(repeat)])
        dicts_s = _best([_timed(lambda: _rows_as_dicts(snapshot))[0] for _ in range(repeat)])
        append_s = _best([_timed(lambda: store.append(snapshot))[0] for _ in range(repeat)])
    return {"append_columns_s": build_s, "append_dicts_s": dicts_s, "append_s": append_s}


def _one_cycle_peak(conn: Any, info: dict[str, Any], scenario: dict[str, Any]) -> None:
    """A fresh process that does what one operator cycle does before executing — collect, then decide
    (AvgShedder, twice: the second acts) — and reports its resident peak."""
    import structlog

    from pulsar_lb_operator.adminapi import AdminClient
    from pulsar_lb_operator.collect.collector import collect
    from pulsar_lb_operator.strategies import LoadBalancerConfig, StrategyState, plan_cycle

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    client = AdminClient(info["admin_url"])
    config = LoadBalancerConfig().replace(scenario.get("config", {}))
    state = StrategyState()
    for seed in range(2):
        snapshot = collect(client, scenario.get("cluster", "sim"), now_ms=info["now_ms"]).snapshot
        _, state = plan_cycle(snapshot, config, state, random.Random(seed))
    conn.send(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def _in_process(context: Any, target: Callable[..., None], *args: Any) -> Any:
    conn, child = context.Pipe()
    process = context.Process(target=target, args=(child, *args))
    process.start()
    result = conn.recv()
    process.join()
    return result


def measure(brokers: int, bundles: int, options: dict[str, Any]) -> dict[str, Any]:
    """Serve a cluster of ``brokers`` and ``bundles`` and measure it from another process."""
    data = scenario_data(brokers, bundles)
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with Served(data) as served:
        info = served.info
        if info["served"] != brokers or len(set(info["brokers"])) != brokers:
            raise SystemExit(f"asked for {brokers} brokers, the simulator serves {info['served']}")
        print(f"  {brokers} brokers, {info['bundles']:,} bundles served in {info['build_s']:.1f} s", file=sys.stderr)
        result = _in_process(context, _measure, info, data, options)
        result["peak_mib"] = _in_process(context, _one_cycle_peak, info, data)
        result["simulator_mib"] = served.ask("rss")
    result.update(brokers=brokers, bundles=info["bundles"], build_s=info["build_s"])
    return result


# ---------------------------------------------------------------------------------------------- report


def _decide_s(strategy: str) -> Callable[[dict[str, Any]], float]:
    """A row's decide seconds for ``strategy``."""
    return lambda row: row["decide_s"][strategy]


def _slopes(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], float]) -> list[str]:
    """ms per 10,000 bundles between consecutive sizes."""
    out = []
    for a, b in itertools.pairwise(rows):
        out.append(f"{(key(b) - key(a)) / ((b['bundles'] - a['bundles']) / 10_000) * 1000:.0f}")
    return out


def report(rows: list[dict[str, Any]], strategies: list[str]) -> str:
    lines = [
        "| brokers | bundles | served in s | report KiB | bare s | lean bare s | collect s | collect / bare "
        "| collect / lean bare "
        "| collect without the strict parse / bare | json.loads s | decode + strict parse s | that / json.loads "
        "| one cycle's peak MiB | simulator peak MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['brokers']:,} | {r['bundles']:,} | {r['build_s']:.1f} | {r['report_kib']:.0f} | {r['bare_s']:.2f} "
            f"| {r['lean_s']:.2f} | {r['collect_s']:.2f} | {r['collect_s'] / r['bare_s']:.2f}× "
            f"| {r['collect_s'] / r['lean_s']:.2f}× | {r['unparsed_s'] / r['bare_s']:.2f}× "
            f"| {r['loads_s']:.2f} | {r['parse_s']:.2f} | {r['parse_s'] / r['loads_s']:.1f}× | {r['peak_mib']:.0f} "
            f"| {r['simulator_mib']:.0f} |"
        )
    lines += [
        "",
        "| bundles | collect s | history append s (columns + Parquet) | its columns s | a dict per row s (before) "
        "| dicts / columns |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['bundles']:,} | {r['collect_s']:.2f} | {r['append_s']:.2f} | {r['append_columns_s']:.2f} "
            f"| {r['append_dicts_s']:.2f} | {r['append_dicts_s'] / r['append_columns_s']:.1f}× |"
        )
    if strategies:
        lines += [
            "",
            "| bundles | " + " | ".join(f"{s} decide s | (collect + decide) / bare" for s in strategies) + " |",
            "|---:|" + "---:|---:|" * len(strategies),
        ]
        for r in rows:
            cells = []
            for s in strategies:
                decide = r["decide_s"][s]
                cells.append(f"{decide:.2f} | {(r['collect_s'] + decide) / r['bare_s']:.2f}×")
            lines.append(f"| {r['bundles']:,} | " + " | ".join(cells) + " |")
    if len(rows) > 1:
        spans = [f"{a['bundles'] // 1000}k → {b['bundles'] // 1000}k" for a, b in itertools.pairwise(rows)]
        lines += ["", "| ms per 10,000 bundles | " + " | ".join(spans) + " |", "|---|" + "---:|" * len(spans)]
        lines.append("| bare fetch | " + " | ".join(_slopes(rows, lambda r: r["bare_s"])) + " |")
        lines.append("| collect | " + " | ".join(_slopes(rows, lambda r: r["collect_s"])) + " |")
        lines.append("| decode + strict parse | " + " | ".join(_slopes(rows, lambda r: r["parse_s"])) + " |")
        lines.append("| history append | " + " | ".join(_slopes(rows, lambda r: r["append_s"])) + " |")
        for s in strategies:
            lines.append(f"| decide {s} | " + " | ".join(_slopes(rows, _decide_s(s))) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- balance


def balance(brokers: int, bundles: int, dry_cycles: int, real_cycles: int, strategy: str | None) -> int:
    """The operator's own cycle (run_cycle: verify → collect → plan → execute) against the served cluster,
    over HTTP, one cycle per simulated minute: ``dry_cycles`` in dry run (nothing mutating may be sent),
    then real cycles until the cluster is balanced, at most ``real_cycles``. Prints each cycle that planned,
    sent or verified something: its time, actions and the brokers' true usage.

    Balanced: every broker's true usage inside the band the untouched brokers (all but the hot and the
    restarted ones) spanned at the start — the restart undone, the cluster as even as it was before it.
    Returns 1 when a dry run sent a mutating call or the cluster was not balanced in time."""
    import structlog

    from pulsar_lb_operator.act.executor import Executor
    from pulsar_lb_operator.act.safety import Safety
    from pulsar_lb_operator.adminapi import AdminClient
    from pulsar_lb_operator.records import Outcome
    from pulsar_lb_operator.run.cycle import CycleContext, CycleResult, run_cycle
    from pulsar_lb_operator.store.statefile import OperatorState
    from pulsar_lb_operator.strategies import LoadBalancerConfig

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    data = scenario_data(brokers, bundles) if (brokers, bundles) != (1000, SHIPPED_BUNDLES) else None
    data = data or yaml.safe_load(
        (resources.files("pulsar_lb_operator.simulator") / "scenarios" / "large-1000.yaml").read_text()
    )
    config = LoadBalancerConfig().replace(data.get("config", {}))
    few = max(1, brokers // 200)
    hot = [f"broker-{i}" for i in range(few)]
    empty = [f"broker-{i}" for i in range(brokers - few, brokers)]
    mean = statistics.mean
    with Served(data) as served:
        info = served.info
        print(
            f"{data['name']}: {info['served']:,} brokers served (the broker list says {len(info['brokers']):,}), "
            f"{info['bundles']:,} bundles, built and served in {info['build_s']:.1f} s; admin URL {info['admin_url']}"
        )
        clock = {"now_ms": info["now_ms"]}
        client = AdminClient(info["admin_url"])
        state = OperatorState()
        rng = random.Random(0)
        start, _, _ = served.ask("usage")
        untouched = [u for name, u in start.items() if name not in hot and name not in empty]
        low, high = min(untouched), max(untouched)
        print(
            f"strategy {strategy or config.loadBalancerLoadSheddingStrategy}; the {len(untouched):,} untouched brokers "
            f"span {low:.1f}–{high:.1f}% (spread {high - low:.1f}, standard deviation "
            f"{statistics.pstdev(untouched):.1f}): balanced when every broker is inside that band"
        )
        print(
            "\ncycle  mode     collect+decide+execute s  planned  dry run  sent  verified as planned  "
            f"hot ({len(hot)}) %  restarted ({len(empty)}) %  min %  max %  spread  sd"
        )
        totals = {"sent": 0, "verified": 0, "dry_mutating": 0}
        balanced_at = None
        usage = start
        for cycle in range(1, dry_cycles + real_cycles + 1):
            dry = cycle <= dry_cycles
            safety = Safety(dry_run=dry, cooldown_minutes=config.loadBalancerSheddingGracePeriodMinutes)
            executor = Executor(
                client, data.get("cluster", "sim"), safety, clock=lambda: clock["now_ms"] / 1000, sleep=lambda _s: None
            )

            def one_cycle(executor: Executor = executor, state: OperatorState = state) -> CycleResult:
                context = CycleContext(client, data.get("cluster", "sim"), config, executor, strategy)
                return run_cycle(context, state, rng, now_ms=clock["now_ms"])

            seconds, result = _timed(one_cycle)
            state = result.state
            clock["now_ms"] = served.ask("advance", config.loadBalancerSheddingIntervalMinutes * 60)
            usage, _unloads, mutating = served.ask("usage")
            sent = sum(1 for r in result.records if r.outcome in (Outcome.EXECUTED, Outcome.UNKNOWN))
            dry_run = sum(1 for r in result.records if r.outcome is Outcome.DRY_RUN)
            verified = sum(1 for r in result.verifications if r.outcome is Outcome.MOVED_AS_PLANNED)
            values = sorted(usage.values())
            balanced = not dry and low <= values[0] and values[-1] <= high
            planned = len(result.plan.actions) if result.plan is not None else 0  # no plan: nothing was planned
            if dry or planned or sent or verified or balanced or cycle == dry_cycles + real_cycles:
                print(
                    f"{cycle:>5}  {'dry run' if dry else 'real':<7}  {seconds:>24.1f}  {planned:>7}  "
                    f"{dry_run:>7}  {sent:>4}  {verified:>19}  "
                    f"{mean(usage[n] for n in hot):>9.1f}  {mean(usage[n] for n in empty):>15.1f}  "
                    f"{values[0]:>5.1f}  {values[-1]:>5.1f}  {values[-1] - values[0]:>6.1f}  "
                    f"{statistics.pstdev(values):>3.1f}",
                    flush=True,
                )
            totals["sent"] += sent
            totals["verified"] += verified
            if dry:
                totals["dry_mutating"] = mutating
            if balanced:
                balanced_at = cycle
                break
        client.close()
    print(
        "(cycles that planned, sent and verified nothing are not shown)\n"
        f"\ndry run: {totals['dry_mutating']} mutating calls sent (must be 0); real run: {totals['sent']} unloads "
        f"sent, {totals['verified']} verified where planned; hot brokers {mean(start[n] for n in hot):.1f}% → "
        f"{mean(usage[n] for n in hot):.1f}%, restarted ones {mean(start[n] for n in empty):.1f}% → "
        f"{mean(usage[n] for n in empty):.1f}%; spread {max(start.values()) - min(start.values()):.1f} → "
        f"{max(usage.values()) - min(usage.values()):.1f}"
    )
    if balanced_at is not None:
        print(f"balanced at cycle {balanced_at} ({balanced_at - dry_cycles} real cycles, one a simulated minute)")
    else:
        print(f"NOT balanced after {real_cycles} real cycles")
    return 1 if totals["dry_mutating"] or balanced_at is None else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--bundles", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5, help="bare/collect runs per size (the best counts)")
    parser.add_argument(
        "--strategy", action="append", dest="strategies", help=f"decide only these (default: {', '.join(STRATEGIES)})"
    )
    parser.add_argument("--profile", action="store_true", help="print where collect's time goes (cProfile)")
    parser.add_argument("--balance", action="store_true", help="run the operator's cycle on the cluster instead")
    parser.add_argument("--dry-cycles", type=int, default=2)
    parser.add_argument(
        "--cycles", type=int, default=150, help="real cycles at most after the dry run ones, until balanced (--balance)"
    )
    args = parser.parse_args(argv)
    if args.balance:
        bundles = args.bundles[-1] if args.bundles != parser.get_default("bundles") else SHIPPED_BUNDLES
        return balance(args.brokers, bundles, args.dry_cycles, args.cycles, (args.strategies or [None])[0])
    strategies = args.strategies or list(STRATEGIES)
    options = {"repeat": args.repeat, "strategies": strategies, "profile": args.profile}
    print(
        f"{os.cpu_count()} cores; {args.brokers:,} brokers; bundles {', '.join(f'{b:,}' for b in args.bundles)}; "
        f"best of {args.repeat} runs",
        file=sys.stderr,
    )
    rows = []
    for bundles in sorted(args.bundles):
        rows.append(measure(args.brokers, bundles, options))
        if args.profile:
            print(f"\nwhere collect's time goes at {bundles:,} bundles (cProfile, all threads):\n", file=sys.stderr)
            print(rows[-1]["profile"], file=sys.stderr)
    print(report(rows, strategies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
