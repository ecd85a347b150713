"""The JVM behind an in-process Spark session: checked before it starts, and its output in the operator's log.

PySpark starts the JVM (``spark-submit``, then ``java``) with this process's stdout and stderr, so Spark's
log4j lines, the JVM's own warnings and a progress bar would land between the daemon's log lines in
another format. ``start_gateway`` starts it as PySpark would, with two differences: log4j2 writes one JSON
object a line (``log4j2.properties`` beside this module), and everything the JVM writes goes through a
pipe to a thread that logs each line through Python's ``logging`` — in the operator's format, JSON or
text (operator/record/logs.py). A JVM log4j record keeps its logger name and level; any other line
(``WARNING: Using incubator modules…``) is logged as a warning of the logger ``spark``.

Before that, ``require_java`` finds the runtime as ``spark-submit`` will (``$JAVA_HOME/bin/java``, else
``java`` on the PATH) and checks it is Java 17 or later, so a missing or old runtime is one line with the
fix instead of PySpark's "Java gateway process exited before sending its port number".
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from pulsar_lb_operator.strategies import UserError

LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
JAVA_MAJOR = 17  # Spark 4's minimum, and the Java the Docker image ships
RAW_LOGGER = "spark"  # lines the JVM writes outside log4j
INSTALL = (
    "install a JRE 17 (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) on the PATH or in JAVA_HOME, "
    "or set aggregateEveryMinutes: 0 to run the daemon without Spark"
)
LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING}
LEVELS |= {"ERROR": logging.ERROR, "FATAL": logging.CRITICAL}


class JavaRuntimeError(UserError):
    """No Java runtime Spark can use: the message says what was found and how to install one."""


def require_java(environ: Mapping[str, str] = os.environ) -> str:
    """The ``java`` spark-submit will run, checked: JavaRuntimeError when there is none or it is too old."""
    home = environ.get("JAVA_HOME")
    if home:  # spark-submit takes JAVA_HOME's java without looking further
        java = str(Path(home) / "bin" / "java")
        if not os.access(java, os.X_OK):
            raise JavaRuntimeError(f"Spark needs Java, and JAVA_HOME={home!r} holds no bin/java: {INSTALL}")
    else:
        found = shutil.which("java", path=environ.get("PATH", os.defpath))
        if found is None:
            raise JavaRuntimeError(f"Spark needs Java, and there is no java on the PATH (nor JAVA_HOME): {INSTALL}")
        java = found
    major = java_major(java)
    if major is None:
        raise JavaRuntimeError(f"Spark needs Java, and {java!r} does not run ('{java} -version' fails): {INSTALL}")
    if major < JAVA_MAJOR:
        raise JavaRuntimeError(f"Spark needs Java {JAVA_MAJOR} or later, and {java!r} is Java {major}: {INSTALL}")
    return java


@functools.lru_cache(maxsize=8)
def java_major(java: str) -> int | None:
    """The major version ``java -version`` prints (``"17.0.15"`` → 17, ``"1.8.0_292"`` → 8), None if it fails;
    a runtime that prints no version this understands passes as new enough (Spark then says what it lacks)."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if found is None:
        return JAVA_MAJOR
    first, second = int(found.group(1)), int(found.group(2) or 0)
    return second if first == 1 else first


def session_options() -> dict[str, str]:
    """Spark settings for a session whose JVM logs through ``start_gateway``: the log4j2 configuration
    above, and no console progress bar (it redraws one line in place, which no log can hold)."""
    return {
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}",
        "spark.ui.showConsoleProgress": "false",
    }


def start_gateway(options: Mapping[str, str]) -> None:
    """Start Spark's JVM with ``options`` (as ``--conf``), its output logged, unless one runs already.

    ``getOrCreate`` then uses this JVM, as it does the one it would have started. Under ``spark-submit``
    (PYSPARK_GATEWAY_PORT set) the JVM is spark-submit's own and its output is spark-submit's business.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
            return
        require_java()
        from pulsar_lb_operator import lifecycle  # not at the top: the spark-package artefact runs without it

        # Spark's scratch (``spark-…``, ``blockmgr-…``) in a directory of ours, removed at exit after the JVM
        # ended: Spark's shutdown hooks remove theirs, but not those a stop during its start-up leaves
        configured = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
        scratch = str(lifecycle.temp_dir("spark", parent=configured or None))
        java_options = f"{options.get('spark.driver.extraJavaOptions', '')} -Djava.io.tmpdir={scratch}".strip()
        conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
        conf.set("spark.driver.extraJavaOptions", java_options)
        read_end, write_end = os.pipe()
        reader = os.fdopen(read_end, "rb")
        threading.Thread(target=forward_lines, args=(reader,), name="spark-jvm-output", daemon=True).start()
        try:
            # the JVM (and the launcher scripts before it) write to the pipe; this process keeps only the read end
            with _environ("SPARK_LOCAL_DIRS", scratch):  # pyspark gives the JVM a copy of os.environ
                gateway = launch_gateway(conf, popen_kwargs={"stdout": write_end, "stderr": write_end})
        finally:
            os.close(write_end)
        SparkContext._ensure_initialized(gateway=gateway)


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """Meanwhile ``os.environ[name]`` is ``value``; as it was after."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def forward_lines(stream: IO[bytes]) -> None:
    """Log every line of the JVM's output until it exits (the pipe's end); runs on its own thread."""
    with stream:
        for raw in stream:
            log_jvm_line(raw.decode("utf-8", errors="replace").rstrip("\r\n"))


def log_jvm_line(line: str) -> None:
    """One line of the JVM's output as a log record: a log4j2 JSON record keeps its logger, level and stack
    trace; anything else is a warning of ``spark``, as written."""
    if not line.strip():
        return
    record = None
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
    if not isinstance(record, dict) or not isinstance(record.get("message"), str):
        logging.getLogger(RAW_LOGGER).warning(line.strip())
        return
    level = LEVELS.get(str(record.get("level")).upper(), logging.WARNING)
    logger = record.get("logger") if isinstance(record.get("logger"), str) and record.get("logger") else RAW_LOGGER
    trace = record.get("exception")
    extra = {"exception": trace.rstrip()} if isinstance(trace, str) and trace.strip() else None
    logging.getLogger(logger).log(level, record["message"], extra=extra)
