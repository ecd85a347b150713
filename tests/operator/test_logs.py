"""One log format on stderr: with ``logJson`` every line is one JSON object — structlog's events, every library's
``logging`` records (APScheduler, urllib3, Python warnings), Spark's JVM while an aggregation runs — and in text
mode the same records stay readable lines. The daemon is run for real (a subprocess against the simulator)
through cycles and an in-process aggregation; the rest in-process."""

from __future__ import annotations

import json
import logging
import threading
import time
import warnings

import pytest
import structlog

from pulsar_lb_operator.record import logs
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from pulsar_lb_operator.spark_jobs import jvm
from tests.daemon_runs import ended, run_daemon


@pytest.fixture
def restore_logging():
    """configure() sets process-wide state: the root logger's handler and level, structlog, warnings' capture."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)
    structlog.reset_defaults()


def test_every_line_of_a_daemon_run_with_an_aggregation_is_one_json_object(tmp_path):
    scenario = load_scenario("demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate, int(time.time() * 1000))) as sim:
        run = run_daemon(
            tmp_path,
            sim.admin_url,
            until=lambda line: '"load profile written"' in line,
            timeout_s=300,  # Spark's JVM takes 15-60 s to start on 2 busy cores
            env={
                "PULSAR_LB_LOG_LEVEL": "debug",  # the libraries' own records too
                "PULSAR_LB_CYCLE_INTERVAL_SECONDS": "1",
                "PULSAR_LB_AGGREGATE_EVERY_MINUTES": "0.05",  # every 3 s: the first finds the cycles' history
            },
        )
    assert run.reached and run.returncode == 0, "".join(run.lines[-20:])
    records = []
    for number, line in enumerate(run.lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"stderr line {number} is not JSON: {line!r}")
        assert isinstance(record, dict) and {"event", "level", "timestamp"} <= set(record), line
        records.append(record)
    events = {r["event"] for r in records}
    assert {"daemon started", "load profile written", "daemon stopped"} <= events
    loggers = {r.get("logger", "").split(".")[0] for r in records}
    assert {"apscheduler", "urllib3"} <= loggers  # the libraries' records, in the same format
    # Spark's JVM ends with the daemon: it reads its stdin, a pipe from the daemon, and exits at its end
    assert run.children and ended(run.children, within_s=60)


def test_json_lines_hold_tracebacks_warnings_and_the_jvm_s_records(restore_logging, capsys):
    logs.configure("info", json=True)
    logs.configure("info", json=True)  # again: still one handler, one line per record
    log = structlog.get_logger("pulsar_lb_operator.run.daemon")
    try:
        raise RuntimeError("cycle broke")
    except RuntimeError:
        log.exception("cycle crashed", cycle_id="c-1")
    logging.getLogger("apscheduler.scheduler").info("Added job")  # a library's INFO: shown only at debug
    logging.getLogger("apscheduler.executors.default").error("Job raised an exception")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("the old way is deprecated", UserWarning, stacklevel=1)
    jvm.log_jvm_line(
        '{"level":"ERROR","logger":"org.apache.spark.executor.Executor","message":"Exception in task 0.0",'
        '"exception":"java.lang.IllegalStateException: boom\\n\\tat X.run(X.java:1)"}'
    )
    jvm.log_jvm_line("WARNING: Using incubator modules: jdk.incubator.vector")
    jvm.log_jvm_line('{"level":"INFO","logger":"org.apache.spark.SparkContext","message":"Running Spark"}')
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    crashed, scheduler, warned, task, raw = records
    assert crashed["event"] == "cycle crashed" and crashed["cycle_id"] == "c-1" and crashed["level"] == "error"
    assert "Traceback" in crashed["exception"] and "RuntimeError: cycle broke" in crashed["exception"]
    assert scheduler == {**scheduler, "event": "Job raised an exception", "logger": "apscheduler.executors.default"}
    assert warned["logger"] == "py.warnings" and "the old way is deprecated" in warned["event"]
    assert task["logger"] == "org.apache.spark.executor.Executor" and task["level"] == "error"
    assert task["exception"].startswith("java.lang.IllegalStateException: boom")
    assert raw == {**raw, "event": "WARNING: Using incubator modules: jdk.incubator.vector", "logger": "spark"}


def test_threads_logging_at_once_never_share_a_line(restore_logging, capsys):
    logs.configure("info", json=True)
    ours = structlog.get_logger("pulsar_lb_operator.test")
    theirs = logging.getLogger("urllib3.connectionpool")

    def burst(number: int) -> None:
        for i in range(200):
            if i % 2:
                ours.info("ours", thread=number, i=i, padding="x" * 200)
            else:
                theirs.warning("theirs %d %d %s", number, i, "y" * 200)

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 8 * 200 and all(isinstance(json.loads(line), dict) for line in lines)


def test_text_mode_stays_readable_and_names_the_library(restore_logging, capsys):
    logs.configure("debug", json=False)
    structlog.get_logger("pulsar_lb_operator.run.daemon").warning("cycle failed", reason="timed out")
    logging.getLogger("apscheduler.scheduler").info("Added job %r", "Daemon.run_once")
    jvm.log_jvm_line('{"level":"ERROR","logger":"org.apache.spark.util.Utils","message":"Uncaught","exception":""}')
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and not any(line.startswith("{") for line in lines)
    assert "[warning  ] cycle failed" in lines[0] and "reason='timed out'" in lines[0]
    assert "Added job 'Daemon.run_once'" in lines[1] and "[apscheduler.scheduler]" in lines[1]
    assert "[error    ] Uncaught" in lines[2] and "[org.apache.spark.util.Utils]" in lines[2]


def test_at_debug_a_new_event_loop_says_nothing_but_asyncio_s_errors_still_show(restore_logging, capsys):
    """The simulator's event loop made every ``operator rehearse`` print "Using selector: EpollSelector"."""
    import asyncio

    logs.configure("debug", json=True)
    asyncio.new_event_loop().close()
    logging.getLogger("asyncio").error("Task exception was never retrieved")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["event"] for line in lines] == ["Task exception was never retrieved"]
