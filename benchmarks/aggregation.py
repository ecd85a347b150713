"""Benchmark: the per-bundle aggregation on Spark local[2] vs a single-process pandas implementation.

    python benchmarks/aggregation.py --rows 1000000 10000000

For each size it writes a bundle-sample history (the history store's layout), then times, on the same
files: Spark's one-pass bundle_aggregates with its two views, bundle_averages and bundle_windows
(spark_jobs/load_profile.py), on local[2], and the same aggregates in one process with pyarrow + pandas,
checking both give the same numbers. It prints rows/s, peak memory (the Spark driver JVM's VmHWM; the
pandas run's own peak, in a fresh process) and the ratio.

The samples come from the simulator: the ``demo`` scenario (48 bundles) run for BASE_CYCLES simulated
minutes, then tiled over more namespaces and later time spans to reach the requested size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

BASE_CYCLES = 500
WINDOWS = (60, 1440)


def base_samples() -> pa.Table:
    from pulsar_lb_operator.simulator.cluster import SimulatedCluster
    from pulsar_lb_operator.simulator.scenario import load_scenario
    from pulsar_lb_operator.spark_jobs.load_profile import BUNDLE_COLUMNS
    from pulsar_lb_operator.store.history import bundle_row

    sim = SimulatedCluster(load_scenario("demo"))
    rows: dict[str, list] = {column: [] for column in BUNDLE_COLUMNS}
    for _ in range(BASE_CYCLES):
        sim.advance(60)
        for bundle, owner in sorted(sim.ownership.items()):
            stats, _ = sim.bundle_stats(bundle)
            sample = bundle_row(sim.now_ms, bundle, owner, stats)
            for column in BUNDLE_COLUMNS:
                rows[column].append(sample[column])
    return pa.table(rows)


def write_history(base: pa.Table, rows: int, folder: Path) -> int:
    """Tile ``base`` over namespaces (copies of every bundle) and time until ``rows`` rows; write by date/hour."""
    span = int(pc.max(base["time"]).as_py() - pc.min(base["time"]).as_py()) + 60_000
    per_copy = base.num_rows
    copies = max(1, int(np.ceil(rows / per_copy)))
    namespace_copies = max(1, int(np.sqrt(copies / 4)))  # more bundles and longer series, both
    written = 0
    for c in range(copies):
        ns, t = c % namespace_copies, c // namespace_copies
        table = base.set_column(0, "time", pc.add(base["time"], pa.scalar(t * span, pa.int64())))
        table = table.set_column(1, "bundle", pc.replace_substring(base["bundle"], "/", f"-{ns}/", max_replacements=1))
        take = min(per_copy, rows - written)
        table = table.slice(0, take)
        stamp = pc.cast(pc.cast(table["time"], pa.timestamp("ms")), pa.timestamp("ms"))
        table = table.append_column("date", pc.strftime(stamp, "%Y-%m-%d")).append_column(
            "hour", pc.strftime(stamp, "%H")
        )
        ds.write_dataset(
            table,
            folder / "bundle_samples",
            format="parquet",
            partitioning=["date", "hour"],
            partitioning_flavor="hive",
            existing_data_behavior="overwrite_or_ignore",
            basename_template=f"part-{c}-{{i}}.parquet",
        )
        written += take
        if written >= rows:
            break
    return written


def spark_run(history: Path) -> dict:
    from pyspark.sql import functions as F

    from pulsar_lb_operator.spark_jobs import load_profile
    from pulsar_lb_operator.spark_jobs.session import build_session

    spark = build_session("local[2]", "aggregation-benchmark")
    bundles = spark.read.parquet(str(history / "bundle_samples")).select(*load_profile.BUNDLE_COLUMNS)
    started = time.perf_counter()
    latest = load_profile.latest_time(bundles)
    per_bundle = load_profile.bundle_aggregates(bundles, WINDOWS, latest).cache()  # as build_profile does
    averages = load_profile.averages_of(per_bundle).orderBy("bundle").collect()
    windows = load_profile.windows_of(per_bundle, WINDOWS).orderBy("bundle", "window_minutes").collect()
    seconds = time.perf_counter() - started
    peak = _jvm_peak_mib()
    check = {
        "bundles": len(averages),
        "long_sum": float(sum(r.long_msg_rate_in for r in averages)),
        "p95_sum": float(sum(r.msg_rate_p95 for r in windows)),
        "count": int(bundles.agg(F.count("*")).first()[0]),
    }
    spark.stop()
    return {"seconds": seconds, "peak_mib": peak, **check}


def _jvm_peak_mib() -> float:
    """VmHWM of the JVM started by this process (the Spark driver, which runs the local executors)."""
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            if fields[1] != me:
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            continue
    return float("nan")


def pandas_run(history: Path) -> dict:
    """The same per-bundle aggregates in one process (pyarrow to read, pandas to aggregate)."""
    started = time.perf_counter()
    frame = (
        ds.dataset(history / "bundle_samples", format="parquet", partitioning="hive")
        .to_table(columns=["time", "bundle", "msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out"])
        .to_pandas()
    )
    frame = frame.sort_values(["bundle", "time"], kind="stable")
    groups = frame.groupby("bundle", sort=True)
    k = groups.cumcount().to_numpy() + 1.0
    n = groups["time"].transform("size").to_numpy().astype(float)
    out = {}
    for prefix, slots in (("short", 10.0), ("long", 1000.0)):
        r = 1 - 1 / slots
        weight = np.where(n <= slots, 1 / n, np.where(k <= slots, r ** (n - slots) / slots, r ** (n - k) / slots))
        for m in ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out"):
            out[f"{prefix}_{m}"] = frame[m].to_numpy() * weight
    weighted = frame[["bundle"]].assign(**out).groupby("bundle", sort=True).sum()
    latest = frame["time"].max()
    frame["msg_rate"] = frame["msg_rate_in"] + frame["msg_rate_out"]
    frame["msg_throughput"] = frame["msg_throughput_in"] + frame["msg_throughput_out"]
    p95_sum = 0.0
    for minutes in WINDOWS:
        recent = frame[frame["time"] > latest - minutes * 60_000].groupby("bundle", sort=True)
        stats = recent.agg(
            samples=("msg_rate", "size"),
            p50=("msg_rate", "median"),
            p95=("msg_rate", lambda s: s.quantile(0.95, interpolation="lower")),
            top=("msg_rate", "max"),
            tp50=("msg_throughput", "median"),
            tp95=("msg_throughput", lambda s: s.quantile(0.95, interpolation="lower")),
            tmax=("msg_throughput", "max"),
        )
        p95_sum += float(stats["p95"].sum())
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bundles": len(weighted),
        "long_sum": float(weighted["long_msg_rate_in"].sum()),
        "p95_sum": p95_sum,
        "count": len(frame),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--pandas-only", metavar="HISTORY", help=argparse.SUPPRESS)  # the fresh-process baseline
    args = parser.parse_args()
    if args.pandas_only:
        print(json.dumps(pandas_run(Path(args.pandas_only))))
        return 0
    print(f"generating base samples: demo scenario, {BASE_CYCLES} simulated minutes …", file=sys.stderr)
    base = base_samples()
    results = []
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as tmp:
            history = Path(tmp)
            written = write_history(base, rows, history)
            spark = spark_run(history)
            baseline = json.loads(
                subprocess.run(
                    [sys.executable, __file__, "--pandas-only", str(history)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
        same = (
            spark["count"] == baseline["count"] == written
            and spark["bundles"] == baseline["bundles"]
            and abs(spark["long_sum"] - baseline["long_sum"]) <= 1e-6 * max(1.0, abs(baseline["long_sum"]))
        )
        results.append(
            {
                "rows": written,
                "bundles": spark["bundles"],
                "spark_s": spark["seconds"],
                "spark_rows_per_s": written / spark["seconds"],
                "spark_peak_mib": spark["peak_mib"],
                "pandas_s": baseline["seconds"],
                "pandas_rows_per_s": written / baseline["seconds"],
                "pandas_peak_mib": baseline["peak_mib"],
                "ratio": spark["seconds"] / baseline["seconds"],
                "same_averages": same,
            }
        )
        print(json.dumps(results[-1]), file=sys.stderr)
    print(
        "| rows | bundles | Spark local[2] s | rows/s | driver JVM peak MiB | pandas s | rows/s | pandas peak MiB "
        "| Spark / pandas | same averages |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for r in results:
        print(
            f"| {r['rows']:,} | {r['bundles']} | {r['spark_s']:.1f} | {r['spark_rows_per_s']:,.0f} | "
            f"{r['spark_peak_mib']:.0f} | {r['pandas_s']:.1f} | {r['pandas_rows_per_s']:,.0f} | "
            f"{r['pandas_peak_mib']:.0f} | {r['ratio']:.2f}× | {'yes' if r['same_averages'] else 'NO'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
