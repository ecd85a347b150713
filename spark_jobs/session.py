"""One SparkSession factory, shared by the jobs and their tests."""

from __future__ import annotations

from pyspark.sql import SparkSession

from pulsar_lb_operator.spark_jobs import jvm


def build_session(master: str = "local[2]", app_name: str = "pulsar-lb-aggregate") -> SparkSession:
    options = {"spark.master": master, "spark.app.name": app_name}
    if master.startswith("local"):
        options |= {
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.driver.memory": "2g",
            # The history store writes a small file per cycle; opening one on a local disk costs far less
            # than the 4 MiB default assumes, so each task takes more of them (fewer, fuller tasks).
            "spark.sql.files.openCostInBytes": str(256 * 1024),
        }
    options |= {"spark.sql.files.ignoreCorruptFiles": "true", **jvm.session_options()}
    # the JVM's output into the operator's log (one format on stderr), and a missing Java said in one line
    jvm.start_gateway(options)
    session = SparkSession.builder.config(map=options).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
