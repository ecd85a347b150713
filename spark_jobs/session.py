"""One SparkSession factory, shared by the jobs and their tests."""

from __future__ import annotations

from pyspark.sql import SparkSession

from pulsar_lb_operator.spark_jobs import jvm


def build_session(master: str | None = "local[2]", app_name: str = "pulsar-lb-aggregate") -> SparkSession:
    """``master`` None: the one spark-submit was given (setting one here would override it)."""
    options = {"spark.app.name": app_name}
    if master is not None:
        options["spark.master"] = master
    if master is not None and master.startswith("local"):
        options |= {
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.driver.memory": "2g",
            # The history store writes a small file per cycle; opening one on a local disk costs far less
            # than the 4 MiB default assumes, so each task takes more of them (fewer, fuller tasks).
            "spark.sql.files.openCostInBytes": str(256 * 1024),
        }
    options |= {
        "spark.sql.files.ignoreCorruptFiles": "true",
        # the job names the history's files itself (spark_jobs/sources.py): Spark lists none of them again
        # in a job of its own, as it would from 32 paths on
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
        **jvm.session_options(),
    }
    # the JVM's output into the operator's log (one format on stderr), and a missing Java said in one line
    jvm.start_gateway(options)
    session = SparkSession.builder.config(map=options).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
