"""One SparkSession factory, shared by the jobs and their tests."""

from __future__ import annotations

from pyspark.sql import SparkSession


def build_session(master: str | None = "local[2]", app_name: str = "pulsar-lb-aggregate") -> SparkSession:
    """``master`` None: the one spark-submit was given (setting one here would override it)."""
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.memory", "2g")
            # The history store writes a small file per cycle; opening one on a local disk costs far less
            # than the 4 MiB default assumes, so each task takes more of them (fewer, fuller tasks).
            .config("spark.sql.files.openCostInBytes", str(256 * 1024))
        )
    session = (
        builder.config("spark.sql.files.ignoreCorruptFiles", "true")
        # the job names the history's files itself (spark_jobs/sources.py): Spark lists none of them again
        # in a job of its own, as it would from 32 paths on
        .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "1000000")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
