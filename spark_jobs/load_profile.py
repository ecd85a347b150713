"""Load profile job: turns the history store into the small profile the daemon reads every cycle.

Run once, locally:
    operator aggregate --history history/ --out profile/ [--full] [--master local[2]]
or on a cluster (``operator spark-package --out pulsar_lb.zip`` builds what it needs; docs/history.md's "On a
cluster" section is the command):
    spark-submit --master spark://host:7077 --py-files pulsar_lb.zip pulsar_lb_job.py \\
        --history s3a://bucket/pulsar-lb/history --out s3a://bucket/pulsar-lb/profile

Input: ``<history>/broker_samples`` and ``<history>/bundle_samples`` (operator/store/history.py).
Output, each a small Parquet dataset under ``<out>``:
    bundle_averages   per bundle: short (10) and long (1000) sample averages, Pulsar's TimeAverageMessageData
    bundle_windows    per bundle and window: samples, p50/p95/max of msg rate and throughput (within 1%)
    broker_profile    per broker: mean/p95 of weighted max usage over the window, std and CV over the short window
    cost_model        per broker and resource: usage% = intercept + a·msg rate + b·throughput in + c·throughput out,
                      and the fit's sums about its means (``centred``: alike brokers' fits are pooled from them)
    hot_bundles       bundles over the split thresholds in a sustained share of recent samples

**Incremental.** The job keeps its state beside the profile (``state.py``): per bundle the averages and
the windows' histograms (``fold.py``), per broker and day the cost models' sums. A run reads the samples
since the last one (and, for the hot bundles, the last ``hot_window_minutes``), the samples that left
each window since, and the state — not the retention. ``--full`` (or a state missing, or of other
windows) recomputes from every sample on disk; both give the same profile (averages and counts exactly,
percentiles from the same histograms).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark import InheritableThread
from pyspark.errors import PythonException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from pulsar_lb_operator.spark_jobs import broker_usage, fold
from pulsar_lb_operator.spark_jobs.fold import arrow_map
from pulsar_lb_operator.spark_jobs.layout import DAY_MS, partition_span, stamp_of
from pulsar_lb_operator.spark_jobs.sources import HistoryFiles
from pulsar_lb_operator.spark_jobs.state import Generation, StateStore, read_bundles
from pulsar_lb_operator.strategies import COST_RESOURCES as RESOURCES
from pulsar_lb_operator.strategies import UserError
from pulsar_lb_operator.strategies import fit_cost_model as solve

BROKER_COLUMNS = (
    "time",
    "broker",
    *(f"{r}_{k}" for r in RESOURCES for k in ("usage", "limit")),
    "msg_rate_in",
    "msg_rate_out",
    "msg_throughput_in",
    "msg_throughput_out",
)
BUNDLE_COLUMNS = (
    "time",
    "bundle",
    "owner",
    "msg_rate_in",
    "msg_rate_out",
    "msg_throughput_in",
    "msg_throughput_out",
    "topics",
    "producers",
    "consumers",
)
COLUMNS = {"broker_samples": BROKER_COLUMNS, "bundle_samples": BUNDLE_COLUMNS}


class ProfileError(UserError, ValueError):
    """History that cannot be aggregated; the message says why."""


@dataclass(frozen=True)
class ProfileOptions:
    windows_minutes: tuple[int, ...] = (60, 1440)
    short_window_minutes: int = 30
    weights: dict[str, float] = field(default_factory=lambda: {"cpu": 1.0, "bandwidthIn": 1.0, "bandwidthOut": 1.0})
    max_msg_rate: float = 30000  # loadBalancerNamespaceBundleMaxMsgRate
    max_bandwidth_mbytes: float = 100  # loadBalancerNamespaceBundleMaxBandwidthMbytes
    max_topics: int = 1000  # loadBalancerNamespaceBundleMaxTopics
    max_sessions: int = 1000  # loadBalancerNamespaceBundleMaxSessions
    hot_share: float = 0.8  # share of recent samples a bundle must be over a threshold
    hot_window_minutes: int = 30
    retention_days: float = 14  # a bundle or broker day with no sample this recent leaves the profile


# ---------------------------------------------------------------------------------------------- extract


def _columns(frame: DataFrame, path: str, required: tuple[str, ...]) -> DataFrame:
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ProfileError(f"{path} is missing column(s) {', '.join(missing)}")
    return frame.select(*required)


def read_samples(
    files: HistoryFiles, kind: str, since_ms: int | None = None, until_ms: int | None = None
) -> DataFrame | None:
    """The samples of one kind with since < time ≤ until, read from the partitions that may hold them only."""
    return read_spans(files, kind, [(since_ms, until_ms)])[0]


def read_spans(files: HistoryFiles, kind: str, spans: list[tuple[int | None, int | None]]) -> list[DataFrame | None]:
    """The samples of one kind in each span (since < time ≤ until; None where no file may hold one), from one
    read of every file any span needs: each read costs Spark a listing of its files and a plan on the driver,
    where a filter costs nothing — Parquet's statistics skip a file or row group outside a span unread."""
    listed = [files.files(kind, since, until) for since, until in spans]
    paths = sorted(set().union(*listed))
    if not paths:
        return [None] * len(spans)
    try:
        frame = files.read(paths)
    except Exception as exc:  # AnalysisException: no Parquet among the files
        raise ProfileError(f"no history at {files.root}/{kind}: {str(exc).splitlines()[0]}") from None
    frame = _columns(frame, f"{files.root}/{kind}", COLUMNS[kind])
    out: list[DataFrame | None] = []
    for (since_ms, until_ms), own in zip(spans, listed):
        span = frame if own else None
        if span is not None and since_ms is not None:
            span = span.where(F.col("time") > F.lit(since_ms))
        if span is not None and until_ms is not None:
            span = span.where(F.col("time") <= F.lit(until_ms))
        out.append(span)
    return out


def _one(frame: DataFrame) -> Row:
    """The row of a global aggregate (Spark gives one, even over no rows)."""
    row = frame.first()
    if row is None:
        raise ProfileError("an aggregate gave no row")
    return row


def _present(frame: DataFrame | None, files: HistoryFiles, kind: str) -> DataFrame:
    """Samples the listing said are there (a file removed since, by the retention: none)."""
    if frame is None:
        raise ProfileError(f"no history at {files.root}/{kind}: its files went while the job ran")
    return frame


def read_history(spark: SparkSession, history: str) -> tuple[DataFrame, DataFrame]:
    """Every broker and bundle sample of a history (as its readers see it: compacted hours once)."""
    files = HistoryFiles(spark, history)
    frames = []
    for kind in ("broker_samples", "bundle_samples"):
        frame = read_samples(files, kind)
        if frame is None:
            raise ProfileError(f"no history at {files.root}/{kind}")
        frames.append(frame)
    return frames[0], frames[1]


def newest_time(files: HistoryFiles, kind: str) -> int | None:
    """The newest sample's time: the newest stamp in the newest date/hour partition's file names (the store
    stamps a cycle's file with its samples' time and a compacted file with its newest input's), so no Spark
    job runs for it; that partition is read only when a file there carries no stamp (not the store's)."""
    in_partition = files.edge(kind, newest=True)
    if not in_partition:
        return None
    newest = partition_span(in_partition[-1])
    since = newest[0] - 1 if newest is not None else None
    stamps = [stamp_of(p.rsplit("/", 1)[-1]) for p in in_partition]
    if all(stamps):
        return max(stamps)
    frame = read_samples(files, kind, since)
    return _one(frame.agg(F.max("time")))[0] if frame is not None else None


# ---------------------------------------------------------------------------------------------- transform


def bundle_averages(bundles: DataFrame) -> DataFrame:
    """``bundle_averages`` of a frame of bundle samples, from nothing."""
    return fold.averages_view(fold.fold((), 0, bundles, None, {}, {}))


def bundle_windows(bundles: DataFrame, windows_minutes: tuple[int, ...]) -> DataFrame:
    """``bundle_windows`` of a frame of bundle samples, from nothing."""
    latest = _one(bundles.agg(F.max("time")))[0]
    rebuilt: dict[int, DataFrame | None] = {w: None for w in windows_minutes}
    return fold.windows_view(fold.fold(windows_minutes, latest, bundles, None, {}, rebuilt), windows_minutes)


def _usage_percent(resource: str) -> F.Column:
    limit = F.col(f"{resource}_limit")
    return F.when(limit > 0, F.col(f"{resource}_usage") / limit * 100).otherwise(F.lit(0.0))


def broker_profile(brokers: DataFrame, options: ProfileOptions, latest: int | None = None) -> DataFrame:
    weighted = F.greatest(*(_usage_percent(r) * F.lit(options.weights.get(r, 1.0)) for r in RESOURCES))
    latest = _one(brokers.agg(F.max("time")))[0] if latest is None else latest
    window = brokers.where(F.col("time") > F.lit(latest - max(options.windows_minutes) * 60_000))
    usage = window.select("broker", "time", weighted.alias("usage"))
    short_since = latest - options.short_window_minutes * 60_000
    # a partition per core, by number: by column, Spark coalesces the day's few MB into one task on one core
    cores = brokers.sparkSession.sparkContext.defaultParallelism
    return arrow_map(
        usage.repartition(cores, "broker"),
        functools.partial(broker_usage.profile_partition, short_since=short_since),
        broker_usage.SCHEMA,
    )


SUMS = [f"xx_{i}_{j}" for i in range(4) for j in range(i, 4)] + [f"xy_{i}" for i in range(4)] + ["yy", "y_sum"]


def cost_model_sums(brokers: DataFrame) -> DataFrame:
    """Per broker, resource and day, the sums of the normal equations of y = X·β with X = [1, features]:
    additive, so a run adds its new samples' and the retention drops a day's."""
    x = [
        F.lit(1.0),
        F.col("msg_rate_in") + F.col("msg_rate_out"),
        F.col("msg_throughput_in"),
        F.col("msg_throughput_out"),
    ]
    day = F.floor(F.col("time") / F.lit(DAY_MS)).cast("long").alias("day")
    # one pass over the samples: the features' sums are the same for every resource, the target's are not
    shared = [F.sum(x[i] * x[j]).alias(f"xx_{i}_{j}") for i in range(4) for j in range(i, 4)]
    own = []
    for r, resource in enumerate(RESOURCES):
        y = _usage_percent(resource)
        own += [F.sum(x[i] * y).alias(f"xy_{i}_{r}") for i in range(4)]
        own += [F.sum(y * y).alias(f"yy_{r}"), F.sum(y).alias(f"y_sum_{r}")]
    summed = brokers.groupBy("broker", day).agg(
        F.count("*").alias("samples"), F.max("time").alias("last_time"), *shared, *own
    )
    per_resource = F.array(
        *(
            F.struct(
                F.lit(resource).alias("resource"),
                *(F.col(f"{c}_{r}").alias(c) for c in ("xy_0", "xy_1", "xy_2", "xy_3", "yy", "y_sum")),
            )
            for r, resource in enumerate(RESOURCES)
        )
    )
    shared_names = [c for c in SUMS if c.startswith("xx_")]
    exploded = summed.select("broker", "day", "samples", "last_time", *shared_names, F.explode(per_resource).alias("r"))
    return exploded.select("broker", "day", "samples", "last_time", *shared_names, "r.*")


def add_sums(a: DataFrame, b: DataFrame | None) -> DataFrame:
    """Two sets of per-day sums added (the same broker, resource and day in both: a day that spans two runs)."""
    if b is None:
        return a
    return (
        a.unionByName(b)
        .groupBy("broker", "resource", "day")
        .agg(
            F.sum("samples").alias("samples"),
            F.max("last_time").alias("last_time"),
            *(F.sum(c).alias(c) for c in SUMS),
        )
    )


def totals(sums: DataFrame) -> DataFrame:
    """Per broker and resource, the sums over every day kept."""
    return sums.groupBy("broker", "resource").agg(F.sum("samples").alias("samples"), *(F.sum(c).alias(c) for c in SUMS))


def solve_cost_model(row: dict) -> dict:
    """The tiny solve is done on the driver, with the same code the online learner uses."""
    return {"broker": row["broker"], "resource": row["resource"], **asdict(solve(row))}


def hot_bundles(bundles: DataFrame, options: ProfileOptions, latest: int | None = None) -> DataFrame:
    latest = _one(bundles.agg(F.max("time")))[0] if latest is None else latest
    recent = bundles.where(F.col("time") > F.lit(latest - options.hot_window_minutes * 60_000))
    max_bw = options.max_bandwidth_mbytes * 1024 * 1024
    rate = F.col("msg_rate_in") + F.col("msg_rate_out")
    thr = F.col("msg_throughput_in") + F.col("msg_throughput_out")
    sessions = F.col("producers") + F.col("consumers")
    over = (
        (F.col("topics") > options.max_topics)
        | ((F.lit(options.max_sessions) > 0) & (sessions > options.max_sessions))
        | (rate > options.max_msg_rate)
        | (thr > max_bw)
    )
    range_text = F.element_at(F.split("bundle", "/"), -1)
    lower = F.conv(F.substring(F.split(range_text, "_")[0], 3, 8), 16, 10).cast("long")
    upper = F.conv(F.substring(F.split(range_text, "_")[1], 3, 8), 16, 10).cast("long")
    # fixed-width sums only, so Spark aggregates by hash; the owner (a string: max_by would make Spark sort
    # every recent sample by bundle) is looked up for the few hot bundles afterwards, at their newest sample
    stats = recent.groupBy("bundle").agg(
        F.count("*").alias("samples"),
        F.avg(over.cast("double")).alias("hot_share"),
        F.max("topics").alias("topics"),
        F.avg(rate).alias("msg_rate_mean"),
        F.avg(thr).alias("msg_throughput_mean"),
        F.max("time").alias("newest"),
    )
    # kept once computed: it is read twice below, and each read would be another pass over the recent samples
    hot = stats.where((F.col("hot_share") >= options.hot_share) & (F.col("topics") >= 2)).cache()
    if hot.isEmpty():  # the usual case: no pass over the samples for owners
        owners = hot.select("bundle", F.lit(None).cast("string").alias("owner"))
    else:
        newest = F.broadcast(hot.select("bundle", F.col("newest").alias("time")))
        owners = recent.join(newest, ["bundle", "time"]).groupBy("bundle").agg(F.max("owner").alias("owner"))
    return (
        hot.drop("newest")
        .join(owners, "bundle")
        .withColumn("algorithm", F.lit("range_equally_divide"))
        .withColumn("boundary", lower + F.floor((upper - lower) / 2).cast("long"))
    )


# ---------------------------------------------------------------------------------------------- load


@dataclass
class _Inputs:
    """What one run folds in: the new bundle samples and the recent ones (hot bundles), the samples that left
    each window (or, for a window rebuilt, its samples older than the new ones: None, none), the new broker
    samples and those of the broker profile's window, and the state it starts from."""

    new: DataFrame
    recent: DataFrame
    leaving: dict[int, DataFrame]
    rebuilt: dict[int, DataFrame | None]
    brokers_new: DataFrame | None
    brokers_window: DataFrame  # the broker profile's
    state: DataFrame | None
    costs: DataFrame | None
    partitions: int = 0  # what the fold spreads its rows over


# Parquet bytes per fold partition: ~1.5M samples, which a Python worker holds as a few hundred MB of columns
PARTITION_BYTES = 64 * 1024 * 1024


def _partitions(spark: SparkSession, input_bytes: int) -> int:
    """The fold's partitions: enough that each worker's share stays small, at least two per core."""
    return max(2 * spark.sparkContext.defaultParallelism, -(-input_bytes // PARTITION_BYTES))


def _inputs(
    spark: SparkSession,
    files: HistoryFiles,
    latest: int,
    brokers_latest: int,
    options: ProfileOptions,
    generation: Generation | None,
    states: StateStore,
) -> _Inputs:
    starts = {w: latest - w * 60_000 for w in options.windows_minutes}
    hot_since = latest - options.hot_window_minutes * 60_000
    brokers_since = brokers_latest - max(options.windows_minutes) * 60_000  # the broker profile's window
    if generation is None:  # full: every sample on disk, each window built from those inside it
        every = _present(read_samples(files, "bundle_samples"), files, "bundle_samples")
        rebuild: dict[int, DataFrame | None] = {w: None for w in starts}
        brokers, window = read_spans(files, "broker_samples", [(None, brokers_latest), (brokers_since, brokers_latest)])
        partitions = _partitions(spark, files.bytes_read())
        return _Inputs(
            every, every, {}, rebuild, brokers, _present(window, files, "broker_samples"), None, None, partitions
        )
    then = generation.latest
    # one read for both (and one for the samples that left the windows): Parquet's statistics skip a cycle
    # file (one time) or a compacted hour's row group (minutes) outside a span unread, and caching cost more
    new, recent = read_spans(files, "bundle_samples", [(then, latest), (hot_since, latest)])
    leaving: dict[int, DataFrame] = {}
    rebuilt: dict[int, DataFrame | None] = {}
    oldest = files.edge("bundle_samples", newest=False)[:1]
    kept_from = (partition_span(oldest[0]) or (0, 0))[0] if oldest else latest
    left: dict[int, tuple[int, int]] = {}
    for w, start in starts.items():
        start_then = then - w * 60_000
        if start >= then:  # every sample of the last window has left it: the new ones are all it holds
            rebuilt[w] = None
        elif start < generation.first:  # none of the samples the state holds has left
            pass
        elif kept_from <= max(start_then + 1, generation.first):  # those that left are still on disk
            left[w] = (start_then, start)
        else:  # they are not (a long outage): the window again from its samples
            rebuilt[w] = read_samples(files, "bundle_samples", start, then)
    # the rows the fold's workers hold: the samples that left a window reach them as histograms per bundle
    fold_bytes = files.bytes_read() + states.size(generation)
    for w, gone in zip(left, read_spans(files, "bundle_samples", list(left.values()))):
        if gone is not None:
            leaving[w] = gone
    costs = generation.costs(spark)
    brokers_then = generation.brokers_latest
    if brokers_then is None:  # not recorded: the newest in the sums
        brokers_then = _one(costs.agg(F.max("last_time")))[0]
    brokers_new, window = read_spans(
        files, "broker_samples", [(brokers_then, brokers_latest), (brokers_since, brokers_latest)]
    )
    return _Inputs(
        _present(new, files, "bundle_samples"),
        _present(recent, files, "bundle_samples"),
        leaving,
        rebuilt,
        brokers_new,
        _present(window, files, "broker_samples"),
        generation.bundles(spark),
        costs,
        _partitions(spark, fold_bytes),
    )


def build_profile(
    spark: SparkSession,
    history: str,
    out: str,
    options: ProfileOptions,
    progress: Callable[[str], None] | None = None,
    full: bool = False,
) -> dict[str, Any]:
    """Bring the profile at ``out`` up to the history's newest sample; returns a summary.

    Incremental from the job's state when it has one of these windows (and ``full`` is not asked for), else
    a full recompute from every sample on disk. Executors whose Python lacks what the fold imports are one
    clear error, not a worker's traceback. What the run cached (``hot_bundles``) is dropped when it ends, however
    it ends: the daemon keeps its session from one run to the next, and each run's plans differ (its times)."""
    try:
        return _build_profile(spark, history, out, options, progress, full)
    except PythonException as exc:
        missing = re.search(r"No module named '([^']+)'", str(exc))
        if missing is None:
            raise
        raise ProfileError(
            f"the Spark executors' Python cannot import {missing[1]}: it needs numpy, pyarrow, pandas and the job's "
            "package (operator spark-package; docs/history.md, 'On a cluster')"
        ) from None
    finally:
        with contextlib.suppress(Py4JError):  # a JVM that is gone holds no cache; the run's own error stands
            spark.catalog.clearCache()


def _build_profile(
    spark: SparkSession,
    history: str,
    out: str,
    options: ProfileOptions,
    progress: Callable[[str], None] | None,
    full: bool,
) -> dict[str, Any]:
    step = progress or (lambda _msg: None)
    out = out.rstrip("/")
    files = HistoryFiles(spark, history)
    step("listing the history")
    brokers_latest = newest_time(files, "broker_samples")
    latest = newest_time(files, "bundle_samples")
    if latest is None or brokers_latest is None:
        raise ProfileError(f"no history at {history}: no broker and bundle samples there")
    states = StateStore(spark, out, options.windows_minutes)
    generation = None if full else states.current()
    if generation is not None and generation.latest >= latest:
        step("up to date")
        return {
            "mode": "unchanged",
            "latest": latest,
            "bundle_samples": 0,
            "broker_samples": 0,
            "generated_from": history,
        }
    mode = "incremental" if generation is not None else "full"
    why = "asked for" if full else "no state yet"
    if generation is None and not full and states.others():
        why = "the job's state is of another version or other windows"  # said in the summary the daemon logs
    step(f"reading history ({mode}: {why})" if mode == "full" else f"reading history ({mode})")
    inputs = _inputs(spark, files, latest, brokers_latest, options, generation, states)
    keep_after = latest - int(options.retention_days * DAY_MS)

    # the broker profile, the hot bundles and the cost models take nothing the fold makes: their jobs run beside
    # it, on the cores the fold's jobs leave idle while the driver plans the next one and writes the views
    scratch = states.scratch()
    lanes: dict[str, Callable[[], Any]] = {
        "broker_profile and hot_bundles": lambda: _write(
            out,
            {
                "broker_profile": lambda: broker_profile(inputs.brokers_window, options, brokers_latest),
                "hot_bundles": lambda: hot_bundles(inputs.recent, options, latest),
            },
        ),
        "cost models": lambda: _cost_models(spark, inputs, keep_after, scratch, out, history),
    }
    with _Beside(lanes) as beside:
        step("folding bundle samples (broker profile, hot bundles and cost models beside it)")
        counted = _fold(spark, options, inputs, latest, keep_after, scratch, out, step)
        step("waiting for broker_profile, hot_bundles and cost models")
        brokers_counted, models = beside.join()["cost models"]
    folded = inputs.new.count() if mode == "incremental" else int(counted[0] or 0)
    states.commit(scratch, latest, counted[2] if counted[2] is not None else latest, brokers_latest)
    summary_out = {
        "mode": mode,
        **({"why": why} if mode == "full" else {}),
        "latest": latest,
        "bundle_samples": folded,  # folded in by this run
        "broker_samples": int(brokers_counted),  # in the cost models' days
        "bundles": int(counted[1]),
        "files_read": len(files.read_paths),
        "generated_from": history,
        "options": asdict(options),
        "cost_models": models,
    }
    step("done")
    return summary_out


class _Beside:
    """Lanes of work done by threads of their own while the run goes on, each an ``InheritableThread``: their
    jobs are in the run's job group, so a cancel stops them too. Leaving the block waits for every thread (no
    job of the run outlives it); ``join`` returns what each lane returned, or raises what one raised."""

    def __init__(self, lanes: dict[str, Callable[[], Any]]) -> None:
        self.results: dict[str, Any] = {}
        self.errors: list[BaseException] = []
        self.threads = [InheritableThread(self._run, args=(name, lane)) for name, lane in lanes.items()]

    def _run(self, name: str, lane: Callable[[], Any]) -> None:
        try:
            self.results[name] = lane()
        except BaseException as exc:  # raised in the run's thread, by join
            self.errors.append(exc)

    def __enter__(self) -> _Beside:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for thread in self.threads:
            thread.join()

    def join(self) -> dict[str, Any]:
        self.__exit__()
        if self.errors:
            raise self.errors[0]
        return self.results


def _write(out: str, parts: dict[str, Callable[[], DataFrame]]) -> None:
    """Each part of the profile to ``out``, one after the other."""
    for name, build in parts.items():
        build().coalesce(1).write.mode("overwrite").parquet(f"{out}/{name}")


def _cost_models(
    spark: SparkSession, inputs: _Inputs, keep_after: int, scratch: str, out: str, history: str
) -> tuple[int, int]:
    """The cost sums (the state's, plus the new broker samples') written to the state's scratch and the cost models
    solved from them to ``out``; returns the broker samples in the sums and the number of models."""
    costs = inputs.costs
    if inputs.brokers_new is not None:
        costs = add_sums(cost_model_sums(inputs.brokers_new), inputs.costs)
    if costs is None:
        raise ProfileError(f"no history at {history}/broker_samples")
    costs.where(F.col("day") >= F.lit(keep_after // DAY_MS)).coalesce(1).write.parquet(f"{scratch}/costs")
    costs = spark.read.parquet(f"{scratch}/costs")
    summed = [r.asDict() for r in totals(costs).collect()]
    models = [solve_cost_model(r) for r in summed]
    if models:
        # from Arrow: a list of dicts would go through a Python worker, row by row
        models_frame = spark.createDataFrame(pa.Table.from_pylist(models))
        models_frame.coalesce(1).write.mode("overwrite").parquet(f"{out}/cost_model")
    return sum(r["samples"] for r in summed if r["resource"] == RESOURCES[0]), len(models)


def _fold(
    spark: SparkSession,
    options: ProfileOptions,
    inputs: _Inputs,
    latest: int,
    keep_after: int,
    scratch: str,
    out: str,
    step: Callable[[str], None],
) -> Row:
    """The fold and the state written to the state's scratch, the views to ``out``; returns the state's
    (samples, bundles, first time)."""
    state = fold.fold(
        options.windows_minutes, latest, inputs.new, inputs.state, inputs.leaving, inputs.rebuilt, inputs.partitions
    )
    # a bundle past the retention has no sample left in any window (windows are shorter): it goes
    state.where(F.col("last_time") > F.lit(keep_after)).write.parquet(f"{scratch}/bundles")
    state = read_bundles(spark, f"{scratch}/bundles", options.windows_minutes)  # the views read what was written
    for name, build in (
        ("bundle_averages", lambda: fold.averages_view(state)),
        ("bundle_windows", lambda: fold.windows_view(state, options.windows_minutes)),
    ):
        step(f"computing {name}")
        build().coalesce(1).write.mode("overwrite").parquet(f"{out}/{name}")
    return _one(state.agg(F.sum("samples"), F.count("*"), F.min("first_time")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="load_profile", description="Aggregate the history into a load profile.")
    parser.add_argument("--history", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[2])")
    parser.add_argument("--full", action="store_true", help="recompute from every sample, not from the job's state")
    parser.add_argument("--retention-days", type=float, default=14.0, help="the history's (historyRetentionDays)")
    args = parser.parse_args(argv)
    from pulsar_lb_operator.spark_jobs.session import build_session

    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started this driver and its JVM
    spark = build_session(args.master or (None if submitted else "local[2]"), short_lived=not args.full)
    try:
        summary = build_profile(
            spark,
            args.history,
            args.out,
            ProfileOptions(retention_days=args.retention_days),
            progress=lambda m: print(f"[load_profile] {m}", file=sys.stderr),
            full=args.full,
        )
        print(json.dumps(summary))
        return 0
    except ProfileError as exc:
        print(f"load_profile: error: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
