"""The load-profile job on a real standalone Spark master, submitted as docs/history.md's "On a cluster" says.

A master and one worker start from the installed pyspark (``spark-class``) on 127.0.0.1, on free ports;
``operator spark-package`` builds the zip and launcher; ``spark-submit`` runs them from a Python that does
not have the operator installed — a venv without system site-packages, holding only numpy, pyarrow and
pandas (linked from this interpreter, as ``pip install numpy pyarrow pandas`` would put them: no network
needed); pyspark and py4j come with Spark itself. The driver and the executors run that Python (the fold's
arithmetic runs on the executors, in numpy over Arrow batches). The profile must equal the one ``local[2]``
writes from the same history. Both JVMs (and the executors the worker starts) are stopped whatever happens, and the test
checks none is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.scenario import parse_scenario
from pulsar_lb_operator.spark_jobs import load_profile
from pulsar_lb_operator.store.compaction import compact
from pulsar_lb_operator.store.history import HistoryStore
from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot, parse_broker_load
from tests.spark_jobs.test_load_profile import COST_SCENARIO

pytestmark = [
    pytest.mark.spark_cluster,
    pytest.mark.skipif(shutil.which("java") is None, reason="a standalone Spark master needs Java"),
]
SPARK_HOME = Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, seconds: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    tails = "\n".join(p.read_text(errors="replace")[-2000:] for p in logs if p.exists())
    raise AssertionError(f"{what} within {seconds:.0f} s; logs:\n{tails}")


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the JVM's whole process group (a worker's executors too), SIGKILL after 20 s; returns once
    no process of the group is left."""
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if process.poll() is not None and not group_members(process.pid):
                return
            time.sleep(0.2)


def die_with_the_test() -> None:
    """In the child before exec: SIGKILL it when the test's process dies, even by SIGKILL (Linux)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def spark_class(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() reaches the executors too
            preexec_fn=die_with_the_test,
        )


@pytest.fixture
def standalone(tmp_path):
    """spark://127.0.0.1:PORT with one worker (2 cores, 1 GiB); yields the URL, stops both JVMs after."""
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_NO_DAEMONIZE": "1",
    }
    port = free_port()
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    url = f"spark://127.0.0.1:{port}"
    master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
    worker = ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port", str(free_port())]
    worker += ["--cores", "2", "--memory", "1g", "--work-dir", str(tmp_path / "work")]
    started: list[subprocess.Popen] = []
    try:
        started.append(spark_class([*master, "--webui-port", str(free_port())], env, master_log))
        elected = lambda: "I have been elected leader" in master_log.read_text(errors="replace")  # noqa: E731
        wait_for(elected, 90, "no master", [master_log])
        started.append(spark_class([*worker, "--webui-port", str(free_port())], env, worker_log))
        registered = lambda: "Successfully registered with master" in worker_log.read_text(errors="replace")  # noqa: E731
        wait_for(registered, 90, "no worker registered", [master_log, worker_log])
        yield url, env
    finally:
        for process in reversed(started):
            stop(process)
        assert not any(group_members(p.pid) for p in started), "a Spark JVM of the test outlived it"


@pytest.fixture
def driver_python(tmp_path):
    """A venv without system site-packages: numpy, pyarrow and pandas only, with pandas' own dependencies
    (pyspark and py4j come from Spark's own python/lib)."""
    venv = tmp_path / "driver-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for name in ("numpy", "pyarrow", "pandas", "dateutil", "six", "tzdata", "pytz"):  # pandas and what it imports
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue  # a dependency of pandas this interpreter's versions do without
        installed = Path(spec.origin)
        source = installed.parent if installed.name == "__init__.py" else installed
        for path in (source, source.parent / f"{name}.libs"):
            if path.exists():
                (site / path.name).symlink_to(path)
    probe = subprocess.run([str(python), "-c", "import pulsar_lb_operator"], capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'pulsar_lb_operator'" in probe.stderr
    return python


def test_the_job_on_a_standalone_master_writes_the_local_profile(standalone, driver_python, spark, tmp_path):
    url, env = standalone
    history = tmp_path / "history"
    store = HistoryStore(str(history))
    sim = SimulatedCluster(parse_scenario(COST_SCENARIO))
    for _ in range(150):  # two and a half simulated hours: windows slide, and two closed hours to compact
        sim.advance(60)
        store.append(
            ClusterSnapshot("sim", sim.now_ms, {b: parse_broker_load(b, sim.load_report(b)) for b in sim.active_ids()})
        )
    assert compact(store, sim.now_ms).hours >= 2 * 2  # the cluster reads compacted hours and cycle files

    dist = tmp_path / "dist"
    assert cli.main(["spark-package", "--out", str(dist / "pulsar_lb.zip")]) == 0
    conf = ["spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1", "spark.ui.enabled=false"]
    conf += ["spark.executor.memory=512m"]
    job = ["--history", str(history), "--out", str(tmp_path / "cluster-profile")]
    submitted = subprocess.run(
        [
            str(SPARK_HOME / "bin" / "spark-submit"),
            *("--master", url),
            *(a for c in conf for a in ("--conf", c)),
            *("--py-files", str(dist / "pulsar_lb.zip"), str(dist / "pulsar_lb_job.py")),
            *job,
        ],
        env={**env, "PYSPARK_PYTHON": str(driver_python), "PYSPARK_DRIVER_PYTHON": str(driver_python)},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert submitted.returncode == 0, submitted.stderr[-4000:]
    summary = json.loads(submitted.stdout.strip().splitlines()[-1])
    assert summary["mode"] == "full" and summary["bundle_samples"] == 150 * 18
    assert "app-" in (tmp_path / "master.log").read_text(errors="replace")  # the master ran it, not local mode

    local = tmp_path / "local-profile"
    load_profile.build_profile(spark, str(history), str(local), load_profile.ProfileOptions())
    for name, key in (
        ("bundle_averages", "bundle"),
        ("bundle_windows", ("bundle", "window_minutes")),
        ("hot_bundles", "bundle"),
        ("broker_profile", "broker"),
        ("cost_model", ("broker", "resource")),
    ):
        ours = rows_by(spark, tmp_path / "cluster-profile" / name, key)
        theirs = rows_by(spark, local / name, key)
        assert ours.keys() == theirs.keys() and (ours or name == "hot_bundles"), name
        for k, row in ours.items():
            mine, centred = dict(row), theirs[k].pop("centred", None)
            if centred is not None:  # the cost models' list: pytest 9.2's approx takes none inside a mapping
                assert mine.pop("centred") == pytest.approx(centred, rel=1e-9), (name, k)
            assert mine == pytest.approx(theirs[k], rel=1e-9), (name, k)


def rows_by(spark, path: Path, key) -> dict:
    rows = spark.read.parquet(str(path)).collect()
    keys = (key,) if isinstance(key, str) else key
    return {tuple(r[k] for k in keys): {c: v for c, v in r.asDict().items() if c not in keys} for r in rows}
