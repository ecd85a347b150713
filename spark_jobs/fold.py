"""The per-bundle state — TimeAverageMessageData's averages and the windows' histograms — folded forward.

One function serves both modes: a full recompute folds every sample into an empty state, an incremental
run folds the samples since the last run into the last state (and takes out of each window the samples
that left it). The state is one row per bundle, and the windows' histograms rows of their own:

    bundle, samples, first_time, last_time, short_<m>, long_<m>    m: msg_rate_in/out, msg_throughput_in/out
    bundle, w, m, b, c       window W (minutes), metric (rate, throughput), bucket, samples in it (c > 0)

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
RATE, THR = 0, 1  # a histogram row's metric: msg rate (in + out), msg throughput (in + out)
HISTOGRAM = ("bundle", "w", "m", "b", "c")  # window (minutes), metric, bucket (digest.py), samples in it
HISTOGRAM_SCHEMA = "bundle string, w int, m tinyint, b int, c bigint"
QUANTILES = (0.5, 0.95)


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
    """Histogram rows (``HISTOGRAM``) of the change in each window W: +1 for each sample of ``samples``
    after ``starts[W]`` (one scan for every window) and of ``rebuilt[W]``, −1 for each of ``leaving[W]``
    — not yet added up."""
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
    both = F.array(
        *(F.struct(F.lit(m).cast("byte").alias("m"), F.col(c).alias("b")) for m, c in ((RATE, "r"), (THR, "t")))
    )
    return rows.select("bundle", "w", "sign", F.explode(both).alias("e")).select(
        "bundle", "w", "e.m", "e.b", F.col("sign").alias("c")
    )


def fold(
    samples: DataFrame,
    state: DataFrame | None,
    histograms: DataFrame | None,
    starts: dict[int, int],
    leaving: dict[int, DataFrame],
    rebuilt: dict[int, DataFrame] | None = None,
) -> tuple[DataFrame, DataFrame]:
    """The next state and histograms: ``samples`` (all newer than ``state``) folded into the averages, and
    those after ``starts[W]`` into window W's histogram, less the samples that left it (``leaving[W]``). A
    window in ``rebuilt`` drops its histogram for one built from the samples given for it (all inside it).

    The histograms are rows added up by (bundle, window, metric, bucket): plain sums Spark runs as generated
    code, where a map per bundle is merged by lambdas it interprets (at 100,000 bundles the fold with maps
    took 1.8 times as long)."""
    rebuilt = rebuilt or {}
    changes = window_changes(samples, {w: s for w, s in starts.items() if w not in rebuilt}, leaving, rebuilt)
    parts = [] if changes is None else [changes]
    kept = [w for w in starts if w not in rebuilt]
    if histograms is not None and kept:
        parts.append(histograms.where(F.col("w").isin(kept)).select(*HISTOGRAM))
    rows = parts[0] if parts else samples.sparkSession.createDataFrame([], HISTOGRAM_SCHEMA)
    for part in parts[1:]:
        rows = rows.unionByName(part)
    merged = rows.groupBy("bundle", "w", "m", "b").agg(F.sum("c").alias("c")).where(F.col("c") > 0)
    return averages(samples, state), merged


def averages_view(state: DataFrame) -> DataFrame:
    """``bundle_averages``: the state's averages."""
    return state.select("bundle", "samples", "last_time", *(f"{p}_{m}" for p, _ in PREFIXES for m in AVERAGED))


def windows_view(histograms: DataFrame) -> DataFrame:
    """``bundle_windows``: per bundle and window holding samples, the count and p50/p95/max of msg rate and
    throughput. One sort by (bundle, window, metric, bucket) gives each bucket the count up to it; a
    percentile is the first bucket whose count reaches its rank (``digest.rank``)."""
    by_bucket = Window.partitionBy("bundle", "w", "m").orderBy("b")
    rows = histograms.withColumn(
        "upto", F.sum("c").over(by_bucket.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    ).withColumn("n", F.sum("c").over(by_bucket.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)))
    per_metric = rows.groupBy("bundle", "w", "m").agg(
        F.max("n").alias("n"),
        *(
            F.min(F.when(F.col("upto") >= digest.rank(F.col("n"), q), F.col("b"))).alias(f"q{i}")
            for i, q in enumerate(QUANTILES)
        ),
        F.max("b").alias("top"),
    )

    def of(metric: int, column: Column) -> Column:
        return F.max(F.when(F.col("m") == metric, column))

    stats = []
    for metric, name in ((RATE, "msg_rate"), (THR, "msg_throughput")):
        stats += [
            of(metric, digest.value_of(F.col("q0"))).alias(f"{name}_p50"),
            of(metric, digest.value_of(F.col("q1"))).alias(f"{name}_p95"),
            of(metric, digest.value_of(F.col("top"))).alias(f"{name}_max"),
        ]
    out = per_metric.groupBy("bundle", F.col("w").alias("window_minutes")).agg(
        of(RATE, F.col("n")).alias("samples"), *stats
    )
    return out.select(
        "bundle",
        "window_minutes",
        "samples",
        *(f"{n}_{s}" for n in ("msg_rate", "msg_throughput") for s in ("p50", "p95", "max")),
    )
