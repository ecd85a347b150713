"""``operator demo`` and ``operator simulate`` as a user runs them."""

import io
import re
import subprocess
import sys
import threading

import requests

from pulsar_lb_operator.sandbox import demo
from tests.builders import free_port, operator_script


def test_demo_converges_over_http():
    out = io.StringIO()
    assert demo.run_demo("demo", out=out) == 0
    text = out.getvalue()
    first, last = re.search(r"Spread (\d+) → (\d+) points", text).groups()
    assert int(first) > 60 and int(last) < 10  # converged: the demo stops after 3 calm cycles
    assert "broker-0 → broker-3: executed (accepted)" in text
    assert "moved_as_planned" in text and "not_moved" not in text and "failed" not in text
    assert "skipped (max unloads per broker (5) reached" in text  # the safety rail held some back


def test_demo_goes_on_when_its_admin_url_broker_restarts():
    """The demo talks to the first broker; the rolling restart takes it down for a while."""
    out = io.StringIO()
    assert demo.run_demo("rolling-restart", out=out) == 0
    text = out.getvalue()
    assert "cycle failed, the next one tries again" in text
    assert re.search(r"Spread \d+ → \d+ points", text)
    assert "executed (accepted)" in text.split("cycle failed")[-1], "it acts again once the broker is back"


def test_demo_console_script_exits_by_itself():
    result = subprocess.run([operator_script(), "demo", "--minutes", "3"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "cycle" in result.stdout and "Spread" in result.stdout


def test_simulate_serves_on_the_requested_port_until_stopped():
    port = free_port()
    stop = threading.Event()
    served = {}
    out = io.StringIO()
    thread = threading.Thread(
        target=demo.run_simulator,
        args=("scale-out", port, 600.0, None, stop, lambda s: served.setdefault("sim", s), out),
    )
    thread.start()
    try:
        for _ in range(100):
            if "sim" in served:
                break
            threading.Event().wait(0.05)
        brokers = requests.get(f"http://127.0.0.1:{port}/admin/v2/brokers/sim", timeout=5).json()
        assert f"127.0.0.1:{port}" in brokers and len(brokers) == 3
        threading.Event().wait(0.5)  # 600× real time: about five simulated minutes
        assert served["sim"].cluster.now_s > 60
    finally:
        stop.set()
        thread.join(10)
    assert f"admin URL http://127.0.0.1:{port}" in out.getvalue()


def test_simulate_rejects_an_unknown_scenario():
    result = subprocess.run(
        [sys.executable, "-m", "pulsar_lb_operator.cli", "simulate", "no-such-scenario"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "cannot read scenario 'no-such-scenario'" in result.stderr
