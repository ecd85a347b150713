"""The per-bundle state — TimeAverageMessageData's averages and the windows' histograms — folded forward.

One function serves both modes: a full recompute folds every sample into an empty state, an incremental
run folds the samples since the last run into the last state (and takes out of each window the samples
that left it). The state is one row per bundle, its windows' histograms and their read-out included:

    bundle, samples, first_time, last_time, short_<m>, long_<m>    m: msg_rate_in/out, msg_throughput_in/out
    h<W>_samples, h<W>_msg_rate_p50, …      window W (minutes): what the run read from its histograms
    packed                                  what the next run starts from, in one binary value: the counts,
                                            the averages and every window's histograms (``partition_fold``)

**Averages.** TimeAverageMessageData updates avg ← avg + (x − avg)/m with m = min(samples, N): a running
mean up to N samples, then an EMA of weight 1/N. Over samples 1..n in time order that is a weighted sum
with closed-form weights: with n ≤ N every sample has 1/n; else sample k ≤ N has (1/N)·r^(n−N) and k > N
(1/N)·r^(n−k), r = 1 − 1/N. Its state (count, average) is exactly a run of min(count, N) samples all equal
to the average — every one of them inside the first N, where weights are equal — so the last state enters
the same sum as one row standing for that many samples, and the fold is exact: incremental and full give
the same averages (to floating-point rounding) and the same counts.

**Windows.** A window of W minutes holds the samples after ``latest − W``. Its histogram
(``digest.py``) gains the new samples inside it and loses the ones that left it since the last run:
counts are exact and p50/p95/max within the digest's 1%.

**Where the work is done.** Spark brings a bundle's rows — its state row, new samples, the histograms of
the samples that left each window (counted by the executors that read them: a row per bundle, not per
sample) — to one partition (one shuffle, hashed by bundle); ``partition_fold`` does the
arithmetic of all of a partition's bundles at once in numpy (``mapInArrow``). Spark's own expressions
did it per bundle in interpreted lambdas and laid each histogram out one element per sample to read a
rank: a 15-minute run at 100,000 bundles spent most of its time there.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from pulsar_lb_operator.spark_jobs import partition_fold
from pulsar_lb_operator.spark_jobs.partition_fold import AVERAGED, METRICS, PACKED, PREFIXES


def _samples(frame: DataFrame, kind: int) -> DataFrame:
    return frame.where(F.col("time").isNotNull()).select(
        "bundle", "time", *AVERAGED, F.lit(kind).cast("int").alias("kind")
    )


def _leaving(frame: DataFrame, kind: int) -> DataFrame:
    """Samples leaving a window as their histograms per bundle, counted on the executors that read them, so
    the shuffle carries a row per bundle, not per sample (``partition_fold.leaving_table``). The sums are
    those the fold takes (nulls as 0; a double's sum is the same in the JVM and numpy): the same buckets."""
    summed = [(F.coalesce(f"{m}_in", F.lit(0.0)) + F.coalesce(f"{m}_out", F.lit(0.0))).alias(m) for m in METRICS]
    narrow = frame.where(F.col("time").isNotNull()).select("bundle", *summed)
    return arrow_map(
        narrow, functools.partial(partition_fold.leaving_partition, kind=kind), partition_fold.LEAVING_SCHEMA
    )


def fold(
    windows: tuple[int, ...],
    latest: int,
    samples: DataFrame,
    state: DataFrame | None,
    leaving: dict[int, DataFrame],
    rebuilt: dict[int, DataFrame | None],
    partitions: int | None = None,
) -> DataFrame:
    """The next state, one row per bundle: ``samples`` (all newer than ``state``) folded into the averages
    and into every window the state keeps (all of them are inside it), less the samples that left it
    (``leaving[W]``); a window in ``rebuilt`` (every one, without a state) is built from the new samples
    inside it and the older ones given for it (None: none). Read out: each window's sample count and
    p50/p95/max. ``partitions``: how many the rows are spread over (each is held whole by a Python worker)."""
    if state is None and set(rebuilt) != set(windows):
        raise ValueError("without a state's histogram, every window must be rebuilt from its samples")
    plan = partition_fold.Plan(
        windows, tuple(latest - w * 60_000 for w in windows), tuple(w not in rebuilt for w in windows)
    )
    rows = _samples(samples, partition_fold.NEW)
    for i, w in enumerate(windows):
        extra = leaving.get(w) if plan.kept[i] else rebuilt.get(w)
        if extra is not None:
            more = _leaving(extra, plan.leaving(i)) if plan.kept[i] else _samples(extra, plan.older(i))
            rows = rows.unionByName(more, allowMissingColumns=True)
    if state is not None:
        own = state.select(
            "bundle", F.col("last_time").alias("time"), F.lit(partition_fold.STATE).alias("kind"), PACKED
        )
        rows = rows.unionByName(own, allowMissingColumns=True)
    spread = rows.repartition(partitions, "bundle") if partitions else rows.repartition("bundle")
    return arrow_map(
        spread, functools.partial(partition_fold.fold_partition, plan=plan), partition_fold.state_schema(windows)
    )


def arrow_map(
    frame: DataFrame, function: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], schema: pa.Schema
) -> DataFrame:
    """``frame``'s partitions through ``function`` (on the executors, over Arrow batches), rows of ``schema``."""
    with warnings.catch_warnings():
        # mapInArrow builds its UDF with pandas_udf, which warns of pandas 3 though no pandas is used here
        warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
        return frame.mapInArrow(function, from_arrow_schema(schema))


def averages_view(state: DataFrame) -> DataFrame:
    """``bundle_averages``: the state's averages."""
    return state.select("bundle", "samples", "last_time", *(f"{p}_{m}" for p, _ in PREFIXES for m in AVERAGED))


WINDOW_STATS = tuple(f"{n}_{s}" for n in ("msg_rate", "msg_throughput") for s in ("p50", "p95", "max"))


def windows_view(state: DataFrame, windows: tuple[int, ...]) -> DataFrame:
    """``bundle_windows``: per bundle and window holding samples, the count and p50/p95/max of msg rate and
    throughput, as the fold read them out."""
    per_window = F.array(
        *(
            F.struct(
                F.lit(w).alias("window_minutes"),
                F.col(f"h{w}_samples").alias("samples"),
                *(F.col(f"h{w}_{s}").alias(s) for s in WINDOW_STATS),
            )
            for w in windows
        )
    )
    return state.select("bundle", F.explode(per_window).alias("w")).select("bundle", "w.*").where(F.col("samples") > 0)
