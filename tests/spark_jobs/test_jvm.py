"""Spark's Java runtime, found as spark-submit finds it: none, or one too old, is one line saying to install a JRE 17
(or to run the daemon without Spark) — from ``operator aggregate`` (exit 2) and in the daemon's log, where the
daemon goes on — never PySpark's "Java gateway process exited" as an internal error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from pulsar_lb_operator.spark_jobs import jvm
from tests.builders import operator_script
from tests.daemon_runs import run_daemon

FIX = "install a JRE 17 (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) on the PATH or in JAVA_HOME"
WITHOUT_SPARK = "or set aggregateEveryMinutes: 0 to run the daemon without Spark"


def fake_java(folder: Path, version_line: str) -> Path:
    """A ``java`` that answers ``-version`` as the named runtime would (on stderr, as Java does)."""
    folder.mkdir(parents=True, exist_ok=True)
    java = folder / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return java


def test_no_java_home_java_and_none_on_the_path_each_say_how_to_install_one(tmp_path):
    with pytest.raises(jvm.JavaRuntimeError) as caught:
        jvm.require_java({"JAVA_HOME": str(tmp_path / "nowhere"), "PATH": os.environ["PATH"]})
    assert f"JAVA_HOME='{tmp_path / 'nowhere'}' holds no bin/java" in str(caught.value)
    assert FIX in str(caught.value) and WITHOUT_SPARK in str(caught.value)
    with pytest.raises(jvm.JavaRuntimeError, match="there is no java on the PATH"):
        jvm.require_java({"PATH": str(tmp_path)})


def test_a_java_older_than_17_is_refused_and_17_or_later_is_taken(tmp_path):
    old = fake_java(tmp_path / "old" / "bin", 'openjdk version "11.0.21" 2023-10-17')
    with pytest.raises(jvm.JavaRuntimeError, match=r"needs Java 17 or later, and '.*' is Java 11"):
        jvm.require_java({"JAVA_HOME": str(tmp_path / "old")})
    ancient = fake_java(tmp_path / "ancient", 'java version "1.8.0_392"')
    assert jvm.java_major(str(ancient)) == 8 and jvm.java_major(str(old)) == 11
    new = fake_java(tmp_path / "new", 'openjdk version "21.0.2" 2024-01-16')
    assert jvm.require_java({"PATH": str(tmp_path / "new")}) == str(new)
    broken = tmp_path / "broken" / "java"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(jvm.JavaRuntimeError, match="does not run"):
        jvm.require_java({"PATH": str(broken.parent)})


@pytest.mark.skipif(shutil.which("java") is None, reason="no Java runtime on this machine")
def test_the_java_on_this_machine_passes():
    assert jvm.java_major(jvm.require_java()) >= 17


@pytest.mark.parametrize("where", ["JAVA_HOME", "PATH"])
def test_operator_aggregate_without_java_is_one_line_and_exit_2(tmp_path, where):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    if where == "JAVA_HOME":
        env["JAVA_HOME"] = str(tmp_path / "no-jre")
    else:
        env["PATH"] = str(Path(sys.executable).parent)  # the venv's scripts, and no java
    (tmp_path / "history").mkdir()
    result = subprocess.run(
        [operator_script(), "aggregate", "--history", "history", "--out", "profile"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("operator:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1 and errors[0].startswith("operator: error: Spark needs Java")
    assert FIX in errors[0] and WITHOUT_SPARK in errors[0]
    assert not (tmp_path / "profile").exists()


def test_the_daemon_without_java_logs_the_same_line_and_goes_on(tmp_path):
    scenario = load_scenario("demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate, int(time.time() * 1000))) as sim:
        run = run_daemon(
            tmp_path,
            sim.admin_url,
            until=lambda line: '"load profile not built"' in line,
            timeout_s=120,
            after_s=2,  # cycles go on after it
            env={
                "JAVA_HOME": str(tmp_path / "no-jre"),
                "PULSAR_LB_CYCLE_INTERVAL_SECONDS": "0.5",
                "PULSAR_LB_AGGREGATE_EVERY_MINUTES": "0.02",
            },
        )
    assert run.reached and run.returncode == 0, run.lines[-5:]
    records = [json.loads(line) for line in run.lines]
    started = next(i for i, r in enumerate(records) if r["event"] == "load profile not built")
    first = records[started]
    assert first["level"] == "warning" and "Spark needs Java" in first["reason"] and FIX in first["reason"]
    assert not [r for r in records if r["level"] == "error" or "exception" in r]
    assert [r for r in records[started:] if r["event"] == "plan"], "the cycles go on"


JVM_ARGUMENTS = """
from pulsar_lb_operator.spark_jobs.session import build_session
spark = build_session("local[1]", "jit-test", short_lived=True)
print(list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()))
spark.stop()
"""


def test_a_short_lived_session_compiles_with_c1_only_and_the_long_lived_one_with_c2(spark):
    """``operator aggregate`` (an incremental run, tens of seconds) asks for C1 alone; the daemon's session, kept from
    run to run, and a full recompute keep C2's faster code (the tests' session is built as theirs is)."""
    arguments = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    assert "-XX:TieredStopAtLevel=1" not in list(arguments)
    done = subprocess.run([sys.executable, "-c", JVM_ARGUMENTS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "-XX:TieredStopAtLevel=1" in done.stdout.splitlines()[-1]


def test_a_history_uri_whose_filesystem_spark_lacks_is_one_line_and_exit_2(tmp_path, capsys):
    """s3a:// without Hadoop's AWS jar: Hadoop's ClassNotFoundException is no message for a user."""
    from pulsar_lb_operator import cli

    code = cli.main(
        ["aggregate", "--history", "s3a://bucket/history", "--out", str(tmp_path / "p"), "--master", "local[1]"]
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("operator:")]
    assert code == 2 and "Traceback" not in err and "at org.apache" not in err, err
    assert len(lines) == 1 and "s3a://bucket/history" in lines[0] and "hadoop-aws" in lines[0]
