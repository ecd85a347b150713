"""One SparkSession factory, shared by the jobs and their tests."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from pyspark.sql import SparkSession

from pulsar_lb_operator.spark_jobs import jvm
from pulsar_lb_operator.strategies import UserError

# A JVM that runs one incremental aggregation and exits lives tens of seconds: its C2 compiler threads spent
# 21 of its 64 CPU-seconds on 2 cores (an incremental run at 100,000 bundles) compiling code the run ends
# before using much. C1 alone compiles for a fraction of that and its code is fast enough for such a run.
SHORT_LIVED_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def build_session(
    master: str | None = "local[2]", app_name: str = "pulsar-lb-aggregate", short_lived: bool = False
) -> SparkSession:
    """``master`` None: the one spark-submit was given (setting one here would override it).

    ``short_lived``: the JVM (in local mode, the driver and its executors) runs one short job and exits, as
    ``operator aggregate`` does for an incremental run: its JIT compiler stops at C1
    (``SHORT_LIVED_JAVA_OPTIONS``). The daemon keeps its session from one run to the next, and a full
    recompute runs for minutes: both gain from C2's code, so neither asks for it."""
    options = {"spark.app.name": app_name}
    if master is not None:
        options["spark.master"] = master
    if master is not None and master.startswith("local"):
        # the fold's Python workers run here: this interpreter, which has numpy and pyarrow (the default is
        # whatever ``python3`` is on the PATH)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
        # the fold's rows go to its Python workers in Arrow batches cut by rows only: a byte limit makes
        # Spark measure the batch after every row, which costs time quadratic in a batch's list values
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
        "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
        **jvm.session_options(),
    }
    if short_lived and master is not None and master.startswith("local"):
        java = options["spark.driver.extraJavaOptions"]
        options["spark.driver.extraJavaOptions"] = f"{java} {SHORT_LIVED_JAVA_OPTIONS}"
    # the JVM's output into the operator's log (one format on stderr), and a missing Java said in one line
    jvm.start_gateway(options)
    conf: dict[str, bool | float | int | str | None] = {**options}
    session = SparkSession.builder.config(map=conf).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def hadoop_filesystem(spark: SparkSession, root: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem for ``root`` with the session's configuration (so ``s3a://``, ``hdfs://`` and local
    paths alike, with the job's credentials), and its Path class: py4j objects, which have no types."""
    jvm, jsc = spark.sparkContext._jvm, spark.sparkContext._jsc
    if jvm is None or jsc is None:
        raise RuntimeError("the Spark session is stopped")
    path = jvm.org.apache.hadoop.fs.Path
    try:
        return path(root).getFileSystem(jsc.hadoopConfiguration()), path
    except Exception as exc:  # py4j's Py4JJavaError: a Java stack trace is no message for a user
        if "ClassNotFoundException" not in str(exc):
            raise
        raise UserError(
            f"{root}: Spark has no filesystem for this scheme on its classpath: for s3a://, add Hadoop's AWS jar "
            "(spark.jars.packages org.apache.hadoop:hadoop-aws:3.5.0: the chart's spark.conf, or spark-submit "
            "--packages)"
        ) from None


class JobCancelled(KeyboardInterrupt):
    """The run was asked to stop (``JobGroup.cancel``) and did: the profile and the job's state are unchanged.

    A stop, not an error (as ``lifecycle.Interrupted``): no ``except Exception`` on its way out swallows it."""


class JobGroup:
    """The Spark jobs of one run under one job group, so another thread can stop them at once.

    A daemon that stops mid-aggregation must not wait minutes for a job to finish, nor leave Spark to kill
    running tasks as its JVM goes down (its scratch directories stay behind when that takes longer than the
    grace before SIGKILL). ``cancel`` cancels the group's running jobs — with ``interruptOnCancel``, a task
    blocked reading a file is interrupted too — and makes ``check`` raise :class:`JobCancelled`; the run calls
    ``check`` between its steps (``build_profile``'s progress), so a job it would start after the cancel is
    never started. Spark cancels only the jobs running at that moment: the canceller repeats ``cancel`` until
    the run has ended (``cancel_until``).

    Job groups are a thread's property: enter the group in the thread that runs the jobs."""

    def __init__(self, spark: SparkSession, name: str = "pulsar-lb-aggregate") -> None:
        self.spark = spark
        self.name = name
        self._cancelled = threading.Event()
        self._ended = threading.Event()

    def __enter__(self) -> JobGroup:
        self.spark.sparkContext.setJobGroup(self.name, "load profile", interruptOnCancel=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._ended.set()
        self.spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def check(self, _step: str = "") -> None:
        """Raise JobCancelled once ``cancel`` was called (usable as ``build_profile``'s progress)."""
        if self._cancelled.is_set():
            raise JobCancelled(f"Spark job group {self.name} cancelled")

    def cancel(self) -> None:
        self._cancelled.set()
        if not self._ended.is_set():
            self.spark.sparkContext.cancelJobGroup(self.name)

    def cancel_until(self, deadline: float, every_s: float = 0.2) -> bool:
        """Cancel, again every ``every_s``, until the run has left the group or ``deadline`` (time.monotonic)
        passes; True when it ended."""
        while not self._ended.is_set() and time.monotonic() < deadline:
            self.cancel()
            self._ended.wait(every_s)
        return self._ended.is_set()
