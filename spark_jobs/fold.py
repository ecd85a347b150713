"""The per-bundle state — TimeAverageMessageData's averages and the windows' histograms — folded forward.

One function serves both modes: a full recompute folds every sample into an empty state, an incremental
run folds the samples since the last run into the last state (and takes out of each window the samples
that left it). The state is one row per bundle:

    bundle, samples, first_time, last_time, short_<m>, long_<m>    m: msg_rate_in/out, msg_throughput_in/out
    w<W>_samples, w<W>_rate, w<W>_thr                      per window W (minutes): count, histograms

**Averages.** TimeAverageMessageData updates avg ← avg + (x − avg)/m with m = min(samples, N): a running
mean up to N samples, then an EMA of weight 1/N. Over samples 1..n in time order that is a weighted sum
with closed-form weights (:func:`time_average_weights`). Its state (count, average) is exactly a run of
min(count, N) samples all equal to the average — every one of them inside the first N, where weights are
equal — so the last state enters the same sum as one row standing for that many samples, and the fold
is exact: incremental and full give the same averages (to floating-point rounding) and the same counts.

**Windows.** A window of W minutes holds the samples after ``latest − W``. Its histogram
(``digest.py``) gains the new samples inside it and loses the ones that left it since the last run:
counts are exact and p50/p95/max within the digest's 1%.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pulsar_lb_operator.spark_jobs import digest

SHORT_SAMPLES = 10
LONG_SAMPLES = 1000
AVERAGED = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")
PREFIXES = (("short", SHORT_SAMPLES), ("long", LONG_SAMPLES))


def time_average_weights(n_samples: int, k: Column, n: Column) -> Column:
    """Weight of sample k (1-based, by time) among n in TimeAverageMessageData with ``n_samples`` slots.

    The running mean is exact until n_samples, then an EMA with weight 1/N: sample k ≤ N ends up with
    (1/N)·r^(n−N) and k > N with (1/N)·r^(n−k), where r = 1 − 1/N; with n ≤ N every sample has 1/n.
    """
    big_n = float(n_samples)
    r = 1 - 1 / big_n
    return (
        F.when(n <= big_n, 1 / n)
        .when(k <= big_n, (1 / big_n) * F.pow(F.lit(r), n - big_n))
        .otherwise((1 / big_n) * F.pow(F.lit(r), n - k))
    )


def averages(samples: DataFrame, state: DataFrame | None) -> DataFrame:
    """bundle, samples, first and last time, and the short and long averages after folding ``samples`` (all newer than
    the state's) into ``state`` (None: from nothing). One shuffle and sort by (bundle, time)."""
    rows = samples.select(
        "bundle",
        "time",
        F.col("time").alias("first_time"),
        F.lit(1).cast("long").alias("count"),
        *(F.lit(1).cast("long").alias(f"{p}_mult") for p, _ in PREFIXES),
        *(F.col(m).alias(f"{p}_{m}") for p, _ in PREFIXES for m in AVERAGED),
    )
    if state is not None:  # the last state: one row standing for min(samples, N) samples at its averages
        rows = rows.unionByName(
            state.select(
                "bundle",
                F.col("last_time").alias("time"),
                "first_time",
                F.col("samples").alias("count"),
                *(F.least(F.col("samples"), F.lit(slots)).cast("long").alias(f"{p}_mult") for p, slots in PREFIXES),
                *(F.col(f"{p}_{m}") for p, _ in PREFIXES for m in AVERAGED),
            )
        )
    by_time = Window.partitionBy("bundle").orderBy("time")
    so_far = by_time.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = by_time.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)  # same sort as by_time
    aggregates = [
        F.sum("count").alias("samples"),
        F.min("first_time").alias("first_time"),
        F.max("time").alias("last_time"),
    ]
    for prefix, slots in PREFIXES:
        mult = F.col(f"{prefix}_mult")
        rows = rows.withColumn(f"{prefix}_k", F.sum(mult).over(so_far)).withColumn(
            f"{prefix}_n", F.sum(mult).over(whole)
        )
        weight = mult * time_average_weights(slots, F.col(f"{prefix}_k"), F.col(f"{prefix}_n"))
        rows = rows.withColumn(f"{prefix}_weight", weight)  # once per row, not per sum
        aggregates += [
            F.sum(F.col(f"{prefix}_{m}") * F.col(f"{prefix}_weight")).alias(f"{prefix}_{m}") for m in AVERAGED
        ]
    return rows.groupBy("bundle").agg(*aggregates)


def _rate(frame: DataFrame) -> Column:
    return frame["msg_rate_in"] + frame["msg_rate_out"]


def _thr(frame: DataFrame) -> Column:
    return frame["msg_throughput_in"] + frame["msg_throughput_out"]


def _buckets(frame: DataFrame, window: Column, sign: int) -> DataFrame:
    return frame.select(
        "bundle",
        window.alias("w"),
        F.lit(sign).cast("long").alias("sign"),
        digest.bucket(_rate(frame)).alias("r"),
        digest.bucket(_thr(frame)).alias("t"),
    )


def window_changes(
    samples: DataFrame, starts: dict[int, int], leaving: dict[int, DataFrame], rebuilt: dict[int, DataFrame]
) -> DataFrame | None:
    """Per bundle and window W: the change in sample count and in each histogram — +1 for each sample of
    ``samples`` after ``starts[W]`` (one scan for every window) and of ``rebuilt[W]``, −1 for each of
    ``leaving[W]``."""
    parts = []
    if starts:
        inside = F.array(*(F.when(F.col("time") > F.lit(start), F.lit(w)) for w, start in starts.items()))
        parts.append(_buckets(samples, F.explode(F.filter(inside, lambda w: w.isNotNull())), 1))
    parts += [_buckets(frame, F.lit(w), 1) for w, frame in rebuilt.items()]
    parts += [_buckets(frame, F.lit(w), -1) for w, frame in leaving.items()]
    if not parts:
        return None
    rows = parts[0]
    for part in parts[1:]:
        rows = rows.unionByName(part)
    both = F.array(*(F.struct(F.lit(m).alias("m"), F.col(m).alias("b")) for m in ("r", "t")))
    per_metric = rows.select("bundle", "w", "sign", F.explode(both).alias("e"))
    counts = per_metric.groupBy("bundle", "w", F.col("e.m").alias("m"), F.col("e.b").alias("b")).agg(
        F.sum("sign").alias("c")
    )
    aggregates = []
    for minutes in sorted({*starts, *rebuilt, *leaving}):
        for metric, name in (("r", "rate"), ("t", "thr")):
            mine = (F.col("w") == minutes) & (F.col("m") == metric)
            aggregates.append(
                F.map_from_entries(F.collect_list(F.when(mine, F.struct("b", "c")))).alias(f"d{minutes}_{name}")
            )
        aggregates.append(
            F.sum(F.when((F.col("w") == minutes) & (F.col("m") == "r"), F.col("c"))).alias(f"d{minutes}_samples")
        )
    return counts.groupBy("bundle").agg(*aggregates)


def fold(
    samples: DataFrame,
    state: DataFrame | None,
    starts: dict[int, int],
    leaving: dict[int, DataFrame],
    rebuilt: dict[int, DataFrame] | None = None,
) -> DataFrame:
    """The next state: ``samples`` (all newer than ``state``) folded into the averages, and those after
    ``starts[W]`` into window W's histogram, less the samples that left it (``leaving[W]``). A window in
    ``rebuilt`` drops the state's histogram for one built from the samples given for it (all inside it)."""
    rebuilt = rebuilt or {}
    windows = tuple(starts)
    averaged = averages(samples, state)
    changes = window_changes(samples, {w: s for w, s in starts.items() if w not in rebuilt}, leaving, rebuilt)
    out = averaged
    if state is not None:
        kept = []
        for w in windows:
            if w in rebuilt or f"w{w}_rate" not in state.columns:
                continue
            kept += [f"w{w}_samples", f"w{w}_rate", f"w{w}_thr"]
        if kept:
            out = out.join(state.select("bundle", *kept), "bundle", "left")
    if changes is not None:
        out = out.join(changes, "bundle", "left")
    columns = [F.col(c) for c in averaged.columns]
    for w in windows:
        old = (lambda c: F.col(c)) if f"w{w}_rate" in out.columns else (lambda _c: F.lit(None))
        delta = (lambda c: F.col(c)) if changes is not None else (lambda _c: F.lit(None))
        columns += [
            (F.coalesce(old(f"w{w}_samples"), F.lit(0)) + F.coalesce(delta(f"d{w}_samples"), F.lit(0)))
            .cast("long")
            .alias(f"w{w}_samples"),
            digest.merged(old(f"w{w}_rate"), delta(f"d{w}_rate")).alias(f"w{w}_rate"),
            digest.merged(old(f"w{w}_thr"), delta(f"d{w}_thr")).alias(f"w{w}_thr"),
        ]
    return out.select(*columns)


def averages_view(state: DataFrame) -> DataFrame:
    """``bundle_averages``: the state's averages."""
    return state.select("bundle", "samples", "last_time", *(f"{p}_{m}" for p, _ in PREFIXES for m in AVERAGED))


def windows_view(state: DataFrame, windows: tuple[int, ...]) -> DataFrame:
    """``bundle_windows``: per bundle and window holding samples, the count and p50/p95/max of msg rate and
    throughput, read from the histograms."""

    def stats(w: int) -> list[Column]:
        n, rate, thr = F.col(f"w{w}_samples"), F.col(f"w{w}_rate"), F.col(f"w{w}_thr")
        return [
            n.alias("samples"),
            digest.quantile(rate, n, 0.5).alias("msg_rate_p50"),
            digest.quantile(rate, n, 0.95).alias("msg_rate_p95"),
            digest.maximum(rate).alias("msg_rate_max"),
            digest.quantile(thr, n, 0.5).alias("msg_throughput_p50"),
            digest.quantile(thr, n, 0.95).alias("msg_throughput_p95"),
            digest.maximum(thr).alias("msg_throughput_max"),
        ]

    per_window = F.array(*(F.struct(F.lit(w).alias("window_minutes"), *stats(w)) for w in windows))
    return state.select("bundle", F.explode(per_window).alias("w")).select("bundle", "w.*").where(F.col("samples") > 0)
