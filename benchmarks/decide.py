"""Benchmark: decision time at scale — reading a snapshot, every shedding strategy with its default
placement, the split trigger, peak memory, and how decide time grows with the number of bundles.

    python benchmarks/decide.py                              # 1,000 brokers; 10k, 50k and 100k bundles
    python benchmarks/decide.py --bundles 100000 --no-memory --repeat 5

For each size it generates a seeded ``pulsar-lb-snapshot/1`` document (``generate``), writes it as JSON
and measures:

* ``json.loads`` of the file's bytes, and the operator's own reading of the same bytes
  (``files.snapshot_from_bytes``: strict JSON, every field checked), and their ratio;
* ``plan_cycle`` per shedding strategy with its default placement (the decision of ``operator rebalance
  --snapshot``: sampling every bundle, shedding, placing each unload, the split trigger, the estimate);
* the split trigger alone (``find_bundles_to_split``);
* at the largest size, the peak of what the decide allocates (tracemalloc, in runs of their own: tracing
  slows everything down) and the resident peak of a fresh process that reads the file and plans.

Every time is the best of ``--repeat`` runs (default 3), as wall and as CPU seconds; the slope — CPU
seconds per 10,000 bundles between consecutive sizes — stays flat when the growth is linear.

The cluster: ``--brokers`` brokers (host:port ids), of which 5% just restarted and own nothing; the
others own bundles in proportion to a weight drawn between 0.2 and 1.8, so some are overloaded and
every strategy finds work. Namespaces of 100 bundles (Pulsar's default boundaries, listed in the
snapshot as ``operator snapshot`` writes them); each bundle 1 to 19 topics (10 on average: 1M topics
at 100k bundles) and log-normal msg rates of 2 KiB messages, scaled so that a broker carries the same
traffic whatever the number of bundles; one bundle in 2,000 is over a split threshold; every broker
owns its heartbeat namespace's bundle (a system namespace, never shed). CPU usage is a 5-point
background plus 50 points at the mean msg rate, so the busiest brokers are over the overload threshold.
The state is what the cycles of the ten minutes before left (every bundle sampled once a minute), and AvgShedder's and
TransferShedder's hit-count thresholds are set so they act on this cycle (as ``--set
loadBalancerAvgShedderHitCountHighThreshold=1`` does in docs/configuration.md's example); PredictivePairingShedder
gets every broker's cost model fitted on that CPU law, with the sums its machine kind's pooled cost is solved from
(``profile``), so it does not fall back to AvgShedder and pays for everything it does on a real profile.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import itertools
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from pulsar_lb_operator.strategies import (
    ClusterSnapshot,
    CostLearner,
    LoadBalancerConfig,
    LoadData,
    LoadProfile,
    Plan,
    Split,
    StrategyState,
    build_load_data,
    find_bundles_to_split,
    plan_cycle,
    update_bundle_data,
)
from pulsar_lb_operator.strategies.bundles import default_boundaries, format_boundary
from pulsar_lb_operator.strategies.registry import SHEDDING

T = TypeVar("T")

NOW = 1_750_000_000_000
BUNDLES_PER_NAMESPACE = 100
MESSAGE_BYTES = 2048
CPU_LIMIT = 800.0  # 8 cores, in percent-of-one-core units
NIC_KBIT = 10_000_000.0  # 10 Gbit/s
BROKER_MSG_RATE_IN = 10_000  # a broker's mean msg rate in, whatever the number of bundles
HOT_EVERY = 2000  # one bundle in 2,000 is over the split thresholds
FIT_SAMPLES = 100  # readings per broker's fit (the decide reads only their sums: any count times the same)
STRATEGIES = tuple(SHEDDING)  # in the registry's order
# Thresholds set so every strategy acts on the cycle timed (the defaults wait for 2 or 4 cycles).
CONFIG_OVERRIDES = {
    "loadBalancerAvgShedderHitCountHighThreshold": 1,
    "loadBalancerSheddingConditionHitCountThreshold": 0,
}


def broker_id(index: int) -> str:
    return f"broker-{index:04d}.broker.pulsar.svc.cluster.local:8080"


def _bundle_stats(rng: random.Random, median_rate: float, hot: bool) -> dict[str, Any]:
    topics = rng.randint(1, 19)
    rate_in = rng.lognormvariate(math.log(median_rate), 0.8)
    if hot:  # over the split trigger's thresholds: many topics, or a high msg rate
        if rng.random() < 0.5:
            topics = rng.randint(1001, 1500)
        else:
            rate_in = max(rate_in, rng.uniform(30_000, 40_000))
    rate_out = rate_in * rng.uniform(1, 2)
    producers = topics * rng.randint(1, 2)
    consumers = topics * rng.randint(1, 3)
    return {
        "msgRateIn": round(rate_in, 3),
        "msgRateOut": round(rate_out, 3),
        "msgThroughputIn": round(rate_in * MESSAGE_BYTES, 1),
        "msgThroughputOut": round(rate_out * MESSAGE_BYTES, 1),
        "consumerCount": consumers,
        "producerCount": producers,
        "topics": topics,
        "cacheSize": rng.randint(0, 1 << 20),
    }


def _usage(used: float, limit: float) -> dict[str, float]:
    return {"usage": round(used, 3), "limit": limit}


def generate(brokers: int, bundles: int, seed: int = 0) -> dict[str, Any]:
    """A seeded pulsar-lb-snapshot/1 document: ``brokers`` brokers owning ``bundles`` bundles (see the module doc)."""
    rng = random.Random(seed)
    median_rate = BROKER_MSG_RATE_IN * brokers / bundles / 1.4  # the same cluster's traffic, cut into more bundles
    ids = [broker_id(i) for i in range(brokers)]
    restarted = set(rng.sample(ids, max(1, brokers // 20))) if brokers > 2 else set()
    weights = [0.0 if b in restarted else rng.uniform(0.2, 1.8) for b in ids]
    namespaces: dict[str, list[int]] = {}
    owned: dict[str, dict[str, dict[str, Any]]] = {b: {} for b in ids}
    made = 0
    while made < bundles:
        ns = f"tenant-{len(namespaces) // 10:04d}/ns-{len(namespaces) % 10}"
        count = min(BUNDLES_PER_NAMESPACE, bundles - made)
        bounds = default_boundaries(count)
        namespaces[ns] = bounds
        owners = rng.choices(ids, weights=weights, k=count)
        for i, owner in enumerate(owners):
            name = f"{ns}/{format_boundary(bounds[i])}_{format_boundary(bounds[i + 1])}"
            owned[owner][name] = _bundle_stats(rng, median_rate, (made + i) % HOT_EVERY == HOT_EVERY // 2)
        made += count
    for b in ids:  # the heartbeat namespace (pulsar/host:port) of each broker: a system namespace
        owned[b][f"pulsar/{b}/0x00000000_0xffffffff"] = _bundle_stats(rng, 0.5, False)
    total_rate = sum(s["msgRateIn"] + s["msgRateOut"] for stats in owned.values() for s in stats.values())
    mean_rate = total_rate / max(1, brokers - len(restarted))
    reports = {}
    for b in ids:
        stats = owned[b]
        rate_in = sum(s["msgRateIn"] for s in stats.values())
        rate_out = sum(s["msgRateOut"] for s in stats.values())
        thr_in = sum(s["msgThroughputIn"] for s in stats.values())
        thr_out = sum(s["msgThroughputOut"] for s in stats.values())
        cpu_percent = min(5 + 50 * (rate_in + rate_out) / mean_rate, 100.0)
        reports[b] = {
            "webServiceUrl": f"http://{b}",
            "pulsarServiceUrl": f"pulsar://{b.replace(':8080', ':6650')}",
            "persistentTopicsEnabled": True,
            "nonPersistentTopicsEnabled": True,
            "cpu": _usage(cpu_percent * CPU_LIMIT / 100, CPU_LIMIT),
            "memory": _usage(rng.uniform(1000, 3000), 4096.0),
            "directMemory": _usage(rng.uniform(100, 1000), 4096.0),
            "bandwidthIn": _usage(thr_in * 8 / 1000, NIC_KBIT),
            "bandwidthOut": _usage(thr_out * 8 / 1000, NIC_KBIT),
            "msgRateIn": round(rate_in, 3),
            "msgRateOut": round(rate_out, 3),
            "msgThroughputIn": round(thr_in, 1),
            "msgThroughputOut": round(thr_out, 1),
            "lastUpdate": NOW - rng.randint(0, 30_000),
            "lastStats": stats,
            "bundles": sorted(stats),
            "loadReportType": "LocalBrokerData",
        }
    return {
        "format": "pulsar-lb-snapshot/1",
        "cluster": "scale",
        "takenAt": NOW,
        "brokers": reports,
        "namespaces": {ns: {"boundaries": [format_boundary(p) for p in bounds]} for ns, bounds in namespaces.items()},
    }


def config() -> LoadBalancerConfig:
    return LoadBalancerConfig().replace(CONFIG_OVERRIDES)


def earlier_state(snapshot: ClusterSnapshot, cycles: int = 10) -> StrategyState:
    """What the cycles of the ``cycles`` minutes before left: every bundle sampled once a minute (the daemon's steady
    state: each bundle's short-term average full, so the expected traffic is read from every one of them)."""
    data: dict = {}
    for k in range(cycles, 0, -1):
        data = update_bundle_data(data, dataclasses.replace(snapshot, taken_at=snapshot.taken_at - k * 60_000))
    return StrategyState().evolve(bundle_data=data)


def profile(snapshot: ClusterSnapshot, seed: int = 0) -> LoadProfile:
    """A cost model per broker, fitted by the least squares the Spark job's fits are solved with (``CostLearner``:
    the same sums, the pooled cost's included): what PredictivePairingShedder needs to act, at its full cost.

    The samples follow the generator's own CPU law (5 points of background, 50 points at the mean msg rate) with a
    point of noise, over ``FIT_SAMPLES`` readings of the broker's traffic scaled by the day's swing and each
    feature's own jitter (so the three features are not collinear); a broker that restarted empty is fitted on
    the mean broker's traffic (its history from before). Built outside the timed decide: the daemon reads it
    from a file the Spark job wrote."""
    rng = np.random.default_rng(seed)
    busy = [load.msg_rate for load in snapshot.brokers.values() if load.bundles and load.cpu.usage > 0.06 * CPU_LIMIT]
    per_msg = 50 / (sum(busy) / len(busy)) if busy else 0.0
    carried = [load.traffic for load in snapshot.brokers.values() if load.msg_rate > 0]
    mean = np.mean(carried, axis=0) if carried else np.ones(3)
    learner = CostLearner()
    for b, load in snapshot.brokers.items():
        traffic = np.array(load.traffic) if load.msg_rate > 0 else mean
        swing = rng.uniform(0.5, 1.5, (FIT_SAMPLES, 1))
        samples = traffic * swing * rng.uniform(0.9, 1.1, (FIT_SAMPLES, 3))
        usage = 5 + per_msg * samples[:, 0] + rng.normal(0, 1, FIT_SAMPLES)
        for x, y in zip(samples, usage):
            learner.add(b, tuple(x), {"cpu": float(y)})
    models = learner.models()
    return LoadProfile(cost_models=models)


def decide(
    snapshot: ClusterSnapshot, strategy: str, state: StrategyState, fits: LoadProfile, seed: int = 0
) -> tuple[Plan, StrategyState]:
    """One cycle of ``operator rebalance --snapshot`` after parsing: the plan and the next state (``fits``: the
    profile PredictivePairingShedder reads; the other strategies are given none)."""
    prof = fits if strategy == "PredictivePairingShedder" else None
    return plan_cycle(snapshot, config(), state, random.Random(seed), shedding=strategy, profile=prof)


def sampled(snapshot: ClusterSnapshot, state: StrategyState) -> LoadData:
    """The cycle's load data (what plan_cycle builds first), for the split trigger alone."""
    return build_load_data(snapshot, state.bundle_data, state.recently_unloaded, config().grace_period_ms)[0]


def split_trigger(load: LoadData) -> tuple[list[Split], list[str]]:
    return find_bundles_to_split(load, config())


def best_of(repeat: int, run: Callable[[], T]) -> tuple[tuple[float, float], T]:
    """(best wall seconds, best CPU seconds) of ``repeat`` runs (at least one), and the last result."""
    wall = cpu = math.inf
    for _ in range(repeat):
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        result = run()
        wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
    return (wall, cpu), result


def decide_peak_mib(run: Callable[[], Any]) -> float:
    """The peak of what ``run`` allocates (tracemalloc: everything made during the decide, on top of the
    snapshot and state that exist before it)."""
    gc.collect()
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()


def process_peak_mib(path: Path, strategy: str) -> float:
    """The resident peak of a fresh process that reads the snapshot file and plans one cycle with ``strategy``
    ("" : only reads it) — what ``operator rebalance --snapshot`` holds at most, interpreter included."""
    command = [sys.executable, __file__, "--child", str(path), strategy]
    return float(subprocess.run(command, check=True, capture_output=True, text=True).stdout.split()[-1])


def child(path: str, strategy: str) -> None:
    from pulsar_lb_operator.store import files

    snapshot = files.read_snapshot(path)
    if strategy:
        decide(snapshot, strategy, earlier_state(snapshot), profile(snapshot))
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def measure(brokers: int, bundles: int, repeat: int, seed: int, memory: bool) -> dict[str, Any]:
    from pulsar_lb_operator.store import files

    row: dict[str, Any] = {"brokers": brokers, "bundles": bundles, "decide_s": {}, "actions": {}}
    row.update(decide_mib={}, process_mib={})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.json"
        path.write_text(json.dumps(generate(brokers, bundles, seed)))
        raw = path.read_bytes()
        row["megabytes"] = len(raw) / 1e6
        row["json_s"], _ = best_of(repeat, lambda: json.loads(raw))
        row["parse_s"], snapshot = best_of(repeat, lambda: files.snapshot_from_bytes(raw, path))
        row["topics"] = sum(s.topics for b in snapshot.brokers.values() for s in b.lastStats.values())
        state, fits = earlier_state(snapshot), profile(snapshot, seed)
        if memory:
            row["process_mib"]["(reading only)"] = process_peak_mib(path, "")
        for name in STRATEGIES:
            seconds, (plan, _) = best_of(repeat, functools.partial(decide, snapshot, name, state, fits, seed))
            row["decide_s"][name] = seconds
            row["actions"][name] = (len(plan.unloads), len(plan.splits))
            if memory:
                row["decide_mib"][name] = decide_peak_mib(functools.partial(decide, snapshot, name, state, fits, seed))
                row["process_mib"][name] = process_peak_mib(path, name)
            print(f"  {bundles:,} bundles, {name}: {seconds[0]:.3f} s", file=sys.stderr, flush=True)
    load = sampled(snapshot, state)
    row["decide_s"]["split trigger"], (splits, _) = best_of(repeat, lambda: split_trigger(load))
    row["actions"]["split trigger"] = (0, len(splits))
    if memory:
        row["decide_mib"]["split trigger"] = decide_peak_mib(lambda: split_trigger(load))
    return row


def report(rows: list[dict[str, Any]], load: tuple[float, float]) -> str:
    """Markdown tables: wall seconds (what a user waits for) and CPU seconds (what the process needed, which
    other work on the machine does not inflate); the slopes and the ratios of the same run."""
    lines = [
        "| bundles | brokers | topics | snapshot MB | json.loads s | parse s | parse / json.loads | same, CPU time |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        (json_wall, json_cpu), (parse_wall, parse_cpu) = r["json_s"], r["parse_s"]
        lines.append(
            f"| {r['bundles']:,} | {r['brokers']:,} | {r['topics']:,} | {r['megabytes']:.0f} | {json_wall:.3f} | "
            f"{parse_wall:.3f} | {parse_wall / json_wall:.2f}× | {parse_cpu / json_cpu:.2f}× |"
        )
    last = rows[-1]
    size = f"{last['bundles'] // 1000}k"
    memory = bool(last["decide_mib"])
    head = ["decide s (unloads, splits)"] + [f"{r['bundles']:,} bundles" for r in rows] + [f"CPU s ({size})"]
    head += [
        f"CPU s per 10k bundles {a['bundles'] // 1000}k→{b['bundles'] // 1000}k" for a, b in itertools.pairwise(rows)
    ]
    if memory:
        head += [f"decide's own peak MiB ({size})", f"process peak MiB ({size})"]
    lines += ["", "| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for name in last["decide_s"]:
        cells = [name]
        for r in rows:
            unloads, splits = r["actions"][name]
            cells.append(f"{r['decide_s'][name][0]:.3f} ({unloads:,}, {splits})")
        cells.append(f"{last['decide_s'][name][1]:.3f}")
        for a, b in itertools.pairwise(rows):
            slope = (b["decide_s"][name][1] - a["decide_s"][name][1]) / (b["bundles"] - a["bundles"]) * 10_000
            cells.append(f"{slope:.3f}")
        if memory:
            process = last["process_mib"].get(name)
            cells += [f"{last['decide_mib'][name]:.0f}", "—" if process is None else f"{process:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if memory:
        only = last["process_mib"]["(reading only)"]
        lines.append(
            f"A fresh process that only reads the {last['bundles']:,}-bundle snapshot peaks at {only:.0f} MiB."
        )
    lines.append(f"Load average of the machine (1 min): {load[0]:.1f} at the start, {load[1]:.1f} at the end.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--bundles", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs per time (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory runs (tracemalloc, fresh processes)")
    parser.add_argument("--child", nargs=2, metavar=("SNAPSHOT", "STRATEGY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    largest, start = max(args.bundles), os.getloadavg()[0]
    rows = [measure(args.brokers, n, args.repeat, args.seed, not args.no_memory and n == largest) for n in args.bundles]
    print(report(rows, (start, os.getloadavg()[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
