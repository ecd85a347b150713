"""Load profile job: turns the history store into the small profile the daemon reads every cycle.

Run once, locally:
    operator aggregate --history history/ --out profile/ [--master local[2]]
or on a cluster (the driver needs pyspark, numpy and the project's ``strategies`` package for the final solve; no
Python code runs on the executors):
    spark-submit --master spark://host:7077 spark_jobs/load_profile.py \\
        --history s3a://bucket/pulsar-lb/history --out s3a://bucket/pulsar-lb/profile

Input: ``<history>/broker_samples`` and ``<history>/bundle_samples`` (operator/store/history.py).
Output, each a small Parquet dataset under ``<out>``:
    bundle_averages   per bundle: short (10) and long (1000) sample averages, Pulsar's TimeAverageMessageData
    bundle_windows    per bundle and window: samples, p50/p95/max of msg rate and throughput
    broker_profile    per broker: mean/p95 of weighted max usage over the window, std and CV over the short window
    cost_model        per broker and resource: usage% = intercept + a·msg rate + b·throughput in + c·throughput out
    hot_bundles       bundles over the split thresholds in a sustained share of recent samples
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pulsar_lb_operator.strategies import COST_RESOURCES as RESOURCES
from pulsar_lb_operator.strategies import fit_cost_model as solve

SHORT_SAMPLES = 10
LONG_SAMPLES = 1000
FEATURES = ("msg_rate", "msg_throughput_in", "msg_throughput_out")
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


class ProfileError(ValueError):
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


# ---------------------------------------------------------------------------------------------- extract


def read_history(spark: SparkSession, history: str) -> tuple[DataFrame, DataFrame]:
    frames = []
    for kind, required in (("broker_samples", BROKER_COLUMNS), ("bundle_samples", BUNDLE_COLUMNS)):
        path = f"{history.rstrip('/')}/{kind}"
        try:
            frame = spark.read.option("basePath", path).parquet(path)
        except Exception as exc:  # AnalysisException: path does not exist or holds no Parquet
            raise ProfileError(f"no history at {path}: {str(exc).splitlines()[0]}") from None
        missing = [c for c in required if c not in frame.columns]
        if missing:
            raise ProfileError(f"{path} is missing column(s) {', '.join(missing)}")
        frames.append(frame.select(*required))
    return frames[0], frames[1]


# ---------------------------------------------------------------------------------------------- transform


def time_average_weights(n_samples: int) -> F.Column:
    """Weight of sample k (1-based, by time) among n in TimeAverageMessageData with ``n_samples`` slots.

    The running mean is exact until n_samples, then an EMA with weight 1/N: sample k ≤ N ends up with
    (1/N)·r^(n−N) and k > N with (1/N)·r^(n−k), where r = 1 − 1/N; with n ≤ N every sample has 1/n.
    """
    big_n = float(n_samples)
    r = 1 - 1 / big_n
    k, n = F.col("k"), F.col("n")
    return (
        F.when(n <= big_n, 1 / n)
        .when(k <= big_n, (1 / big_n) * F.pow(F.lit(r), n - big_n))
        .otherwise((1 / big_n) * F.pow(F.lit(r), n - k))
    )


AVERAGED = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")
WINDOW_STATS = (
    "samples",
    "msg_rate_p50",
    "msg_rate_p95",
    "msg_rate_max",
    "msg_throughput_p50",
    "msg_throughput_p95",
    "msg_throughput_max",
)


def latest_time(samples: DataFrame) -> int:
    """The newest sample's time. On a history store only its newest date/hour partition is read."""
    files = samples.inputFiles()
    partitions = {m.groups() for f in files if (m := re.search(r"/date=([^/]+)/hour=([^/]+)/", f))}
    if partitions:
        date, hour = max(partitions)
        newest = [f for f in files if f"/date={date}/hour={hour}/" in f]
        return samples.sparkSession.read.parquet(*newest).agg(F.max("time")).first()[0]
    return samples.agg(F.max("time")).first()[0]


def bundle_aggregates(bundles: DataFrame, windows_minutes: tuple[int, ...], latest: int | None = None) -> DataFrame:
    """Every per-bundle aggregate in one pass: one shuffle and sort by (bundle, time) ranks the samples
    for the time averages, and the same sorted partitions feed the windows' conditional aggregates.
    One row per bundle; ``bundle_averages`` and ``bundle_windows`` are its two views."""
    by_time = Window.partitionBy("bundle").orderBy("time")
    whole = by_time.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)  # same sort as by_time
    ranked = bundles.withColumn("k", F.row_number().over(by_time)).withColumn("n", F.count("*").over(whole))
    aggregates = [F.count("*").alias("samples"), F.max("time").alias("last_time")]
    for prefix, slots in (("short", SHORT_SAMPLES), ("long", LONG_SAMPLES)):
        ranked = ranked.withColumn(f"{prefix}_weight", time_average_weights(slots))  # once per row, not per sum
        aggregates += [F.sum(F.col(m) * F.col(f"{prefix}_weight")).alias(f"{prefix}_{m}") for m in AVERAGED]
    if windows_minutes:
        latest = latest_time(bundles) if latest is None else latest
    rate = F.col("msg_rate_in") + F.col("msg_rate_out")
    thr = F.col("msg_throughput_in") + F.col("msg_throughput_out")
    quantiles = F.array(F.lit(0.5), F.lit(0.95))  # one digest per column serves both percentiles
    for minutes in windows_minutes:
        inside = F.col("time") > F.lit(latest - minutes * 60_000)
        r, t = F.when(inside, rate), F.when(inside, thr)  # null outside the window: ignored by the aggregates
        aggregates += [
            F.sum(inside.cast("long")).alias(f"samples_{minutes}"),
            F.percentile_approx(r, quantiles, 10000).alias(f"msg_rate_q_{minutes}"),
            F.max(r).alias(f"msg_rate_max_{minutes}"),
            F.percentile_approx(t, quantiles, 10000).alias(f"msg_throughput_q_{minutes}"),
            F.max(t).alias(f"msg_throughput_max_{minutes}"),
        ]
    return ranked.groupBy("bundle").agg(*aggregates)


def averages_of(aggregates: DataFrame) -> DataFrame:
    averaged = [f"{prefix}_{m}" for prefix in ("short", "long") for m in AVERAGED]
    return aggregates.select("bundle", "samples", "last_time", *averaged)


def windows_of(aggregates: DataFrame, windows_minutes: tuple[int, ...]) -> DataFrame:
    def stats(m: int) -> list[F.Column]:
        return [
            F.col(f"samples_{m}").alias("samples"),
            F.col(f"msg_rate_q_{m}")[0].alias("msg_rate_p50"),
            F.col(f"msg_rate_q_{m}")[1].alias("msg_rate_p95"),
            F.col(f"msg_rate_max_{m}").alias("msg_rate_max"),
            F.col(f"msg_throughput_q_{m}")[0].alias("msg_throughput_p50"),
            F.col(f"msg_throughput_q_{m}")[1].alias("msg_throughput_p95"),
            F.col(f"msg_throughput_max_{m}").alias("msg_throughput_max"),
        ]

    per_window = F.array(*(F.struct(F.lit(m).alias("window_minutes"), *stats(m)) for m in windows_minutes))
    return (
        aggregates.select("bundle", F.explode(per_window).alias("w"))
        .select("bundle", "w.*")
        .where(F.col("samples") > 0)
    )


def bundle_averages(bundles: DataFrame) -> DataFrame:
    return averages_of(bundle_aggregates(bundles, ()))


def bundle_windows(bundles: DataFrame, windows_minutes: tuple[int, ...]) -> DataFrame:
    return windows_of(bundle_aggregates(bundles, windows_minutes), windows_minutes)


def _usage_percent(resource: str) -> F.Column:
    limit = F.col(f"{resource}_limit")
    return F.when(limit > 0, F.col(f"{resource}_usage") / limit * 100).otherwise(F.lit(0.0))


def broker_profile(brokers: DataFrame, options: ProfileOptions) -> DataFrame:
    weighted = F.greatest(*(_usage_percent(r) * F.lit(options.weights.get(r, 1.0)) for r in RESOURCES))
    latest = brokers.agg(F.max("time")).first()[0]
    window = brokers.where(F.col("time") > F.lit(latest - max(options.windows_minutes) * 60_000))
    short = brokers.where(F.col("time") > F.lit(latest - options.short_window_minutes * 60_000))
    overall = (
        window.withColumn("usage", weighted)
        .groupBy("broker")
        .agg(
            F.count("*").alias("samples"),
            F.mean("usage").alias("usage_mean"),
            F.percentile_approx("usage", 0.95, 10000).alias("usage_p95"),
        )
    )
    jitter = (
        short.withColumn("usage", weighted)
        .groupBy("broker")
        .agg(
            F.stddev_pop("usage").alias("usage_std_short"),
            (F.stddev_pop("usage") / F.mean("usage")).alias("usage_cv_short"),
        )
    )
    return overall.join(jitter, "broker", "left")


def cost_model_sums(brokers: DataFrame) -> DataFrame:
    """Per broker and resource, the sums of the normal equations of y = X·β with X = [1, features]."""
    x = [
        F.lit(1.0),
        F.col("msg_rate_in") + F.col("msg_rate_out"),
        F.col("msg_throughput_in"),
        F.col("msg_throughput_out"),
    ]
    frames = []
    for resource in RESOURCES:
        y = _usage_percent(resource)
        sums = [F.sum(x[i] * x[j]).alias(f"xx_{i}_{j}") for i in range(4) for j in range(i, 4)]
        sums += [F.sum(x[i] * y).alias(f"xy_{i}") for i in range(4)]
        frames.append(
            brokers.groupBy("broker").agg(
                F.lit(resource).alias("resource"),
                F.count("*").alias("samples"),
                F.sum(y * y).alias("yy"),
                F.sum(y).alias("y_sum"),
                *sums,
            )
        )
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def solve_cost_model(row: dict) -> dict:
    """The tiny solve is done on the driver, with the same code the online learner uses."""
    return {"broker": row["broker"], "resource": row["resource"], **asdict(solve(row))}


def hot_bundles(bundles: DataFrame, options: ProfileOptions, latest: int | None = None) -> DataFrame:
    latest = latest_time(bundles) if latest is None else latest
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
    stats = recent.groupBy("bundle").agg(
        F.count("*").alias("samples"),
        F.avg(over.cast("double")).alias("hot_share"),
        F.max("topics").alias("topics"),
        F.avg(rate).alias("msg_rate_mean"),
        F.avg(thr).alias("msg_throughput_mean"),
        F.max_by("owner", "time").alias("owner"),
    )
    return (
        stats.where((F.col("hot_share") >= options.hot_share) & (F.col("topics") >= 2))
        .withColumn("algorithm", F.lit("range_equally_divide"))
        .withColumn("boundary", lower + F.floor((upper - lower) / 2).cast("long"))
    )


# ---------------------------------------------------------------------------------------------- load


def build_profile(spark: SparkSession, history: str, out: str, options: ProfileOptions, progress=None) -> dict:
    """Read the history, compute every part of the profile, write it; returns a summary."""
    step = progress or (lambda _msg: None)
    step("reading history")
    brokers, bundles = read_history(spark, history)
    brokers = brokers.cache()
    bundles = bundles.cache()
    counts = {"broker_samples": brokers.count(), "bundle_samples": bundles.count()}
    if not counts["broker_samples"] or not counts["bundle_samples"]:
        raise ProfileError(f"the history at {history} holds no samples")
    latest = latest_time(bundles)
    per_bundle = bundle_aggregates(bundles, options.windows_minutes, latest).cache()  # one row per bundle
    parts = {
        "bundle_averages": lambda: averages_of(per_bundle),
        "bundle_windows": lambda: windows_of(per_bundle, options.windows_minutes),
        "broker_profile": lambda: broker_profile(brokers, options),
        "hot_bundles": lambda: hot_bundles(bundles, options, latest),
    }
    for name, build in parts.items():
        step(f"computing {name}")
        build().coalesce(1).write.mode("overwrite").parquet(f"{out.rstrip('/')}/{name}")
    step("fitting cost models")
    models = [solve_cost_model(r.asDict()) for r in cost_model_sums(brokers).collect()]
    spark.createDataFrame(models).coalesce(1).write.mode("overwrite").parquet(f"{out.rstrip('/')}/cost_model")
    summary = {**counts, "generated_from": history, "options": asdict(options), "cost_models": len(models)}
    step("done")
    per_bundle.unpersist()
    brokers.unpersist()
    bundles.unpersist()
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="load_profile", description="Aggregate the history into a load profile.")
    parser.add_argument("--history", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--master", default=None, help="Spark master (spark-submit sets it; default local[2])")
    args = parser.parse_args(argv)
    from pulsar_lb_operator.spark_jobs.session import build_session

    spark = build_session(args.master or "local[2]")
    try:
        summary = build_profile(
            spark,
            args.history,
            args.out,
            ProfileOptions(),
            progress=lambda m: print(f"[load_profile] {m}", file=sys.stderr),
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
