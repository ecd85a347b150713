"""Benchmark: the load-profile job at a real cluster's scale, on Spark local[2].

    python benchmarks/aggregation.py --bundles 7000 100000 --days 1          # 10M rows, then a day at 100k
    python benchmarks/aggregation.py --bundles 100000 --days 1 2             # and two days

For each size (bundles × minutes a day × days) it writes the history straight into the store's layout —
one file per cycle and dataset, as the daemon appends them (2,880 a day), with the store's own writer,
two processes, a cycle at a time (never the whole history in memory) — then measures, each Spark run in
a fresh process:

* **full**: ``operator aggregate --full`` from every cycle file — time per stage, rows/s, the JVM's peak
  resident memory (local mode: the driver and its executors are one JVM), files read;
* **pandas**: the per-bundle averages in one process (pyarrow + pandas), the single-process baseline,
  under a memory limit; a size it cannot do is reported as such in its row;
* **compaction**: ``operator compact`` of the closed hours (files a day after it);
* **incremental**: ``--incremental-minutes`` (15) more minutes of cycles, then the incremental run that
  reads them, the samples leaving each window and the job's state — as ``operator aggregate`` runs it, in a
  JVM started for it, and as the daemon runs it every 15 minutes, in the session it keeps (the same run
  done once before, unmeasured, from the same state);
* **on disk**: a compacted day (minute samples, the hourly rollup, broker samples), and from it 14 days as
  the store keeps them: ``historyMinuteHours`` (26) of minute samples, the rollups and broker samples for
  ``historyRetentionDays`` (14).

The samples: each bundle a log-normal base rate, a ±30% daily curve with its own phase, ±5% noise a
minute, fan-out and message size of its own; bundles spread over ``--brokers`` (1,000) brokers.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from pulsar_lb_operator.lifecycle import process_stat

START_MS = 1_750_032_000_000  # 2025-06-16 00:00 UTC
MINUTE_MS = 60_000
PANDAS_LIMIT_GIB = 16


# ---------------------------------------------------------------------------------------------- samples


class Cluster:
    """A synthetic cluster's samples, one cycle at a time (columns built whole, vectorised)."""

    def __init__(self, bundles: int, brokers: int, seed: int = 0) -> None:
        from pulsar_lb_operator.store.history import BROKER_SCHEMA, BUNDLE_SCHEMA

        self.bundles, self.brokers = bundles, min(brokers, bundles)
        rng = np.random.default_rng(seed)
        per_namespace = 100
        step = 0x100000000 // per_namespace
        index = np.arange(bundles)
        ranges = [f"0x{(i % per_namespace) * step:08x}_0x{(i % per_namespace + 1) * step - 1:08x}" for i in index]
        self.names = pa.array([f"tenant/ns-{i // per_namespace}/{r}" for i, r in zip(index, ranges)])
        self.namespaces = pa.array([f"tenant/ns-{i // per_namespace}" for i in index])
        self.owner_of = index % self.brokers
        broker_names = [f"broker-{b}.pulsar:8080" for b in range(self.brokers)]
        self.owners = pa.array([broker_names[b] for b in self.owner_of])
        self.broker_names = pa.array(broker_names)
        self.base = rng.lognormal(3.0, 1.2, bundles)
        self.phase = rng.uniform(0, 2 * math.pi, bundles)
        self.fanout = rng.uniform(0.5, 3.0, bundles)
        self.size = rng.lognormal(7.0, 1.0, bundles)
        self.topics = rng.integers(1, 50, bundles, dtype=np.int32)
        self.producers = (self.topics * 2).astype(np.int32)
        self.consumers = (self.topics * 3).astype(np.int32)
        self.cores = np.full(self.brokers, 16.0)
        self.bundle_schema, self.broker_schema = BUNDLE_SCHEMA, BROKER_SCHEMA
        self.seed = seed

    def cycle(self, minute: int) -> tuple[pa.Table, pa.Table]:
        rng = np.random.default_rng((self.seed, minute))
        now = START_MS + minute * MINUTE_MS
        day = 2 * math.pi * (minute % 1440) / 1440
        rate_in = self.base * (1 + 0.3 * np.sin(day + self.phase)) * (1 + 0.05 * rng.standard_normal(self.bundles))
        rate_in = np.maximum(rate_in, 0.0)
        rate_out = rate_in * self.fanout
        bundles = pa.table(
            {
                "time": np.full(self.bundles, now, np.int64),
                "bundle": self.names,
                "namespace": self.namespaces,
                "owner": self.owners,
                "msg_rate_in": rate_in,
                "msg_rate_out": rate_out,
                "msg_throughput_in": rate_in * self.size,
                "msg_throughput_out": rate_out * self.size,
                "topics": self.topics,
                "producers": self.producers,
                "consumers": self.consumers,
            },
            schema=self.bundle_schema,
        )
        per_broker = {
            name: np.bincount(self.owner_of, weights=values, minlength=self.brokers)
            for name, values in (
                ("msg_rate_in", rate_in),
                ("msg_rate_out", rate_out),
                ("msg_throughput_in", rate_in * self.size),
                ("msg_throughput_out", rate_out * self.size),
            )
        }
        cpu = 5 + (per_broker["msg_rate_in"] + per_broker["msg_rate_out"]) * 0.002 / self.cores * 100
        columns: dict[str, object] = {"time": np.full(self.brokers, now, np.int64), "broker": self.broker_names}
        for resource_name in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut"):
            usage = {"cpu": cpu, "bandwidthIn": per_broker["msg_throughput_in"] * 8 / 1024}.get(resource_name)
            usage = usage if usage is not None else np.full(self.brokers, 1024.0)
            columns[f"{resource_name}_usage"] = usage
            columns[f"{resource_name}_limit"] = np.full(self.brokers, 100.0 * 16 if resource_name == "cpu" else 1e7)
        columns.update(per_broker)
        columns["bundle_count"] = np.bincount(self.owner_of, minlength=self.brokers).astype(np.int32)
        return pa.table(columns, schema=self.broker_schema), bundles


def _write_cycles(args: tuple[str, int, int, int, int, int]) -> int:
    """One writer process: cycles first, first + step, …, below last; returns bytes written."""
    from pulsar_lb_operator.store.history import HistoryStore

    root, bundles, brokers, first, last, step = args
    store = HistoryStore(root)
    cluster = Cluster(bundles, brokers)
    for minute in range(first, last, step):
        broker_table, bundle_table = cluster.cycle(minute)
        for kind, table in (("broker_samples", broker_table), ("bundle_samples", bundle_table)):
            store.write_samples(kind, START_MS + minute * MINUTE_MS, table)
    return 0


def write_history(root: Path, bundles: int, brokers: int, first: int, last: int, processes: int = 2) -> float:
    """Cycles [first, last) (minutes) into the store at ``root``; returns the seconds it took."""
    started = time.perf_counter()
    context = multiprocessing.get_context("fork")
    with context.Pool(processes) as pool:
        pool.map(_write_cycles, [(str(root), bundles, brokers, first + p, last, processes) for p in range(processes)])
    return time.perf_counter() - started


def tree(root: Path, under: str = "") -> tuple[int, int]:
    files = [p for p in (root / under).rglob("*") if p.is_file()] if (root / under).exists() else []
    return len(files), sum(p.stat().st_size for p in files)


# ---------------------------------------------------------------------------------------------- runs


def _processes() -> dict[int, tuple[int, float, float]]:
    """pid -> (parent pid, VmHWM, VmRSS in MiB) of every process readable in /proc."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            parent = process_stat(f"/proc/{pid}")[1]
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
        except (OSError, ValueError):
            continue
        memory = {line.split(":")[0]: int(line.split()[1]) / 1024 for line in status if line.startswith("Vm")}
        out[int(pid)] = (parent, memory.get("VmHWM", 0.0), memory.get("VmRSS", 0.0))
    return out


class _Memory(threading.Thread):
    """Polls the JVM this process started (local mode: the driver, running the executors) and its Python
    workers (the fold's arithmetic runs there, in processes that come and go): the JVM's VmHWM, and the
    highest sum of the workers' resident memory seen at one moment."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.jvm_mib = self.workers_mib = float("nan")
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            processes = _processes()
            jvms = {pid for pid, (parent, _, _) in processes.items() if parent == os.getpid()}
            if not jvms:
                continue
            below = set(jvms)
            for _ in range(4):  # the JVM, pyspark's daemon, its workers
                below |= {pid for pid, (parent, _, _) in processes.items() if parent in below}
            workers = sum(processes[pid][2] for pid in below - jvms)
            self.jvm_mib = max(processes[pid][1] for pid in jvms)
            self.workers_mib = workers if math.isnan(self.workers_mib) else max(self.workers_mib, workers)


def spark_run(history: str, out: str, full: bool, warm: bool = False) -> dict:
    """One build_profile on local[2], in this (fresh) process: seconds per stage, peak, files read.

    ``warm``: as the daemon runs it, whose session (and JVM) ran the job before: the same run is done once
    unmeasured, the profile and the job's state put back as they were, then measured. Otherwise as
    ``operator aggregate`` runs it, in a JVM started for it."""
    from pulsar_lb_operator.spark_jobs.load_profile import ProfileOptions, build_profile
    from pulsar_lb_operator.spark_jobs.session import build_session

    spark = build_session("local[2]", "aggregation-benchmark", short_lived=not (full or warm))
    if warm:
        kept = f"{out}.kept"
        shutil.copytree(out, kept)
        build_profile(spark, history, out, ProfileOptions(), full=full)
        shutil.rmtree(out)
        os.rename(kept, out)
    memory = _Memory()
    memory.start()
    stages: list[tuple[str, float]] = []
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    summary = build_profile(
        spark, history, out, ProfileOptions(), lambda step: stages.append((step, time.perf_counter())), full=full
    )
    seconds = time.perf_counter() - started
    time.sleep(1)  # one more poll
    memory.done.set()
    memory.join()
    spark.stop()
    ends = [t for _, t in stages[1:]] + [started + seconds]
    per_stage = {name: round(end - t, 2) for (name, t), end in zip(stages, ends) if name != "done"}
    load = f"{load_before:.1f}–{os.getloadavg()[0]:.1f}"  # the machine's, before and after: others' work too
    return {
        "seconds": seconds,
        "peak_mib": memory.jvm_mib,
        "workers_peak_mib": memory.workers_mib,
        "load": load,
        "stages": per_stage,
        **summary,
    }


def pandas_run(history: str) -> dict:
    """TimeAverageMessageData's averages per bundle in one process, pyarrow + pandas (the baseline)."""
    import pyarrow.dataset as ds

    started = time.perf_counter()
    columns = ["time", "bundle", "msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out"]
    frame = ds.dataset(Path(history) / "bundle_samples", format="parquet").to_table(columns=columns).to_pandas()
    frame = frame.sort_values(["bundle", "time"], kind="stable")
    groups = frame.groupby("bundle", sort=True)
    k = groups.cumcount().to_numpy() + 1.0
    n = groups["time"].transform("size").to_numpy().astype(float)
    out = {}
    for prefix, slots in (("short", 10.0), ("long", 1000.0)):
        r = 1 - 1 / slots
        weight = np.where(n <= slots, 1 / n, np.where(k <= slots, r ** (n - slots) / slots, r ** (n - k) / slots))
        out[f"{prefix}_msg_rate_in"] = frame["msg_rate_in"].to_numpy() * weight
    weighted = frame[["bundle"]].assign(**out).groupby("bundle", sort=True).sum()
    return {
        "seconds": time.perf_counter() - started,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bundles": len(weighted),
        "long_sum": float(weighted["long_msg_rate_in"].sum()),
    }


def in_fresh_process(args: list[str], limit_gib: float | None = None, timeout_s: float = 3600) -> dict:
    """Run this file with ``args`` in a new process; its JSON answer, or {"error": why} — never a traceback."""

    def limit() -> None:
        if limit_gib:
            cap = int(limit_gib * 1024**3)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    try:
        done = subprocess.run(
            [sys.executable, __file__, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout_s:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = [line for line in done.stderr.strip().splitlines() if line.strip()][-1:] or [f"exit {done.returncode}"]
    if "MemoryError" in done.stderr or "Cannot allocate" in done.stderr or "bad_alloc" in done.stderr:
        return {"error": f"out of memory under a {limit_gib:g} GiB limit"}
    return {"error": tail[0][:200]}


# ---------------------------------------------------------------------------------------------- one size


def measure(bundles: int, minutes: int, brokers: int, incremental_minutes: int, workdir: Path, pandas: bool) -> dict:
    from pulsar_lb_operator.store.compaction import compact
    from pulsar_lb_operator.store.history import HistoryStore

    workdir.mkdir(parents=True, exist_ok=True)  # a --workdir not there yet is made, as the history's folders are
    root = Path(tempfile.mkdtemp(prefix="aggregation-", dir=workdir))
    history, profile = root / "history", root / "profile"
    try:
        rows = bundles * minutes
        print(f"{bundles:,} bundles × {minutes:,} minutes = {rows:,} rows: writing …", file=sys.stderr, flush=True)
        written_s = write_history(history, bundles, brokers, 0, minutes)
        files, size = tree(history)
        print(f"  written in {written_s:.0f} s: {files:,} files, {size / 1e9:.2f} GB", file=sys.stderr, flush=True)
        full = in_fresh_process(["--run", "full", str(history), str(profile)])
        print(f"  full: {json.dumps(full)}", file=sys.stderr, flush=True)
        baseline = in_fresh_process(["--run", "pandas", str(history)], PANDAS_LIMIT_GIB) if pandas else None
        print(f"  pandas: {json.dumps(baseline)}", file=sys.stderr, flush=True)
        store = HistoryStore(str(history))
        started = time.perf_counter()
        compacted = compact(store, START_MS + (minutes + 10) * MINUTE_MS, linger_ms=0)
        compact(store, START_MS + (minutes + 10) * MINUTE_MS, linger_ms=0)  # its inputs, now unlisted
        compact_s = time.perf_counter() - started
        days = minutes / 1440
        disk = {kind: tree(history, kind) for kind in ("broker_samples", "bundle_samples", "bundle_hours")}
        print(f"  compacted {compacted.hours} hours in {compact_s:.0f} s: {disk}", file=sys.stderr, flush=True)
        write_history(history, bundles, brokers, minutes, minutes + incremental_minutes)
        shutil.copytree(profile, root / "profile-warm")  # the same state, for the daemon's case
        incremental = in_fresh_process(["--run", "incremental", str(history), str(profile)])
        print(f"  incremental: {json.dumps(incremental)}", file=sys.stderr, flush=True)
        warm = in_fresh_process(["--run", "warm", str(history), str(root / "profile-warm")])
        print(f"  incremental, warm session: {json.dumps(warm)}", file=sys.stderr, flush=True)
        per_day = {kind: size / days for kind, (_, size) in disk.items()}
        fourteen_days = per_day["bundle_samples"] * 26 / 24 + 14 * (per_day["bundle_hours"] + per_day["broker_samples"])
        return {
            "bundles": bundles,
            "minutes": minutes,
            "rows": rows,
            "write_s": written_s,
            "files": files,
            "bytes": size,
            "full": full,
            "pandas": baseline,
            "compact_s": compact_s,
            "files_per_day_compacted": sum(n for n, _ in disk.values()) / math.ceil(days),
            "disk_per_day": per_day,
            "fourteen_days_bytes": fourteen_days,
            "incremental": incremental,
            "incremental_warm": warm,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- report


def _cell(run: dict | None, key: str, fmt: str) -> str:
    if run is None:
        return "not run"
    if "error" in run:
        return f"failed: {run['error']}"
    return format(run[key], fmt)


def report(results: list[dict]) -> str:
    lines = [
        "| bundles × minutes | rows | files | full s | rows/s | JVM peak MiB | Python workers' peak MiB "
        "| files read | stages (s) "
        "| time / first row's | rows / first row's | pandas s | pandas peak MiB | compacted files a day "
        "| incremental s | its files read | incremental s, warm session | 14 days on disk GiB "
        "| load average (full; incremental; warm) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    first = results[0]
    for r in results:
        full, inc, warm = r["full"], r["incremental"], r["incremental_warm"]
        ok = "error" not in full and "error" not in first["full"]
        stages = ", ".join(f"{k} {v}" for k, v in full.get("stages", {}).items() if v >= 0.5) or "—"
        lines.append(
            f"| {r['bundles']:,} × {r['minutes']:,} | {r['rows']:,} | {r['files']:,} | {_cell(full, 'seconds', '.1f')} "
            f"| {(r['rows'] / full['seconds']) if ok else float('nan'):,.0f} | {_cell(full, 'peak_mib', '.0f')} "
            f"| {_cell(full, 'workers_peak_mib', '.0f')} "
            f"| {_cell(full, 'files_read', ',')} | {stages} "
            f"| {(full['seconds'] / first['full']['seconds']) if ok else float('nan'):.2f}× "
            f"| {r['rows'] / first['rows']:.2f}× | {_cell(r['pandas'], 'seconds', '.1f')} "
            f"| {_cell(r['pandas'], 'peak_mib', '.0f')} | {r['files_per_day_compacted']:.0f} "
            f"| {_cell(inc, 'seconds', '.1f')} | {_cell(inc, 'files_read', ',')} | {_cell(warm, 'seconds', '.1f')} "
            f"| {r['fourteen_days_bytes'] / 1024**3:.1f} "
            f"| {full.get('load', '—')}; {inc.get('load', '—')}; {warm.get('load', '—')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundles", type=int, nargs="+", default=[7_000, 100_000])
    parser.add_argument("--minutes", type=int, default=1440, help="samples a day, one a minute (default 1440)")
    parser.add_argument("--days", type=float, nargs="+", default=[1.0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--incremental-minutes", type=int, default=15)
    parser.add_argument("--workdir", default=tempfile.gettempdir(), help="where the histories are written")
    parser.add_argument("--no-pandas", action="store_true", help="skip the single-process baseline")
    parser.add_argument("--run", nargs="+", help=argparse.SUPPRESS)  # one measured run, in a fresh process
    args = parser.parse_args(argv)
    if args.run:
        kind, *paths = args.run
        if kind == "pandas":
            result = pandas_run(paths[0])
        else:
            result = spark_run(paths[0], paths[1], kind == "full", warm=kind == "warm")
        print(json.dumps(result))
        return 0
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    results = []
    for bundles in args.bundles:
        for days in args.days:
            minutes = int(args.minutes * days)
            results.append(
                measure(
                    bundles, minutes, args.brokers, args.incremental_minutes, Path(args.workdir), not args.no_pandas
                )
            )
    print(report(results))
    print(f"\nload at the end: {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
