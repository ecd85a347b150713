"""The operator as a process under the faults only a process has: SIGKILL, SIGTERM mid-call, a twin, a hang.

Each test runs the installed ``operator`` command against a simulated cluster on loopback.
"""

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from pulsar_lb_operator.sandbox.processes import pending_on_disk, wait_until
from tests.builders import operator_script

ACT = [
    "--no-dry-run",
    "--set",
    "loadBalancerAvgShedderHitCountHighThreshold=1",
    "--set",
    "pauseSeconds=0",
    "--set",
    "cycleIntervalSeconds=1",
    "--set",
    "metricsPort=0",
    "--set",
    "historyUri=",
    "--set",
    "profileUri=",
    "--set",
    "aggregateEveryMinutes=0",
]


def env_for(sim, tmp_path, **extra):
    return {
        **os.environ,
        "PULSAR_ADMIN_URL": sim.admin_url,
        "PULSAR_LB_STATE_FILE": str(tmp_path / "state.json"),
        "PULSAR_LB_LOG_JSON": "true",
        "TMPDIR": str(tmp_path),  # what a process killed with SIGKILL cannot remove stays in the test's directory
        **extra,
    }


class Operator:
    """``operator …`` as a child process; its stderr (JSON log lines) is collected by a thread."""

    def __init__(self, sim, tmp_path, *args, **extra):
        self.proc = subprocess.Popen(
            [operator_script(), *args],
            env=env_for(sim, tmp_path, **extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        self.lines: list[str] = []
        self.out = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def events(self, name):
        return sum(f'"event": "{name}"' in line for line in self.lines)

    def finish(self, sig=None, timeout_s=30.0):
        """Signal (optionally), wait, and return (exit code, stdout, stderr)."""
        if sig is not None:
            self.proc.send_signal(sig)
        try:
            self.out = self.proc.stdout.read()
            self.proc.wait(timeout_s)
        finally:
            self.proc.kill()
            self._reader.join(5)
            self.proc.stdout.close()
            self.proc.stderr.close()
            self.proc.wait()
        return self.proc.returncode, self.out, "".join(self.lines)


def wait_for(condition, timeout_s=20.0):
    value = wait_until(condition, timeout_s)
    assert value, "condition not met in time"
    return value


def unload_calls(sim):
    """Logical unload calls (the last hop of each redirect chain) per bundle."""
    calls = {}
    for r in sim.requests:
        if r.method == "PUT" and r.path.endswith("/unload") and r.status != 307:
            bundle = r.path.removeprefix("/admin/v2/namespaces/").removesuffix("/unload")
            calls[bundle] = calls.get(bundle, 0) + 1
    return calls


def hang_unloads(sim, seconds=30.0):
    for broker in sim.cluster.brokers.values():
        sim.add_fault(f"{broker.name}:*:/unload:delay={seconds}")


def test_sigterm_during_a_hung_unload_exits_within_the_shutdown_timeout(live_served, tmp_path):
    hang_unloads(live_served)
    daemon = Operator(live_served, tmp_path, "run", *ACT, "--set", "shutdownTimeoutSeconds=3")
    wait_for(lambda: pending_on_disk(tmp_path / "state.json"))  # an unload is in flight
    time.sleep(0.3)
    stopped_at = time.monotonic()
    code, _, err = daemon.finish(signal.SIGTERM)
    took = time.monotonic() - stopped_at
    assert code == 0, err
    assert took < 3 + 3, f"exited {took:.1f} s after SIGTERM"  # the timeout, plus interpreter teardown
    assert "exiting with a call still in flight" in err and "Traceback" not in err


def test_kill_9_right_after_an_unload_was_sent_then_restart_never_moves_it_again(live_served, tmp_path):
    hang_unloads(live_served)
    state = tmp_path / "state.json"
    first = Operator(live_served, tmp_path, "run", *ACT)
    in_flight = wait_for(lambda: pending_on_disk(state))
    time.sleep(0.3)  # the call has reached the broker, which is sitting on it
    first.finish(signal.SIGKILL)
    sent = {p["bundle"] for p in in_flight}
    live_served.clear_faults()
    second = Operator(live_served, tmp_path, "run", *ACT)
    wait_for(lambda: second.events("plan") >= 3)
    code, _, err = second.finish(signal.SIGTERM)
    assert code == 0, err
    assert second.events("state restored") == 1
    doc = json.loads(state.read_text())
    assert sent <= set(doc["executor"]["lastMoved"])  # still in cooldown after the restart
    again = [b for b in sent if unload_calls(live_served).get(b, 0) > 1]
    assert again == [], f"moved again within the grace period: {again}"


def test_two_instances_on_one_state_only_one_acts(live_served, tmp_path):
    first = Operator(live_served, tmp_path, "run", *ACT)
    wait_for(lambda: first.events("plan") >= 1)
    code, _, err = Operator(live_served, tmp_path, "run", *ACT).finish()
    assert code == 3 and "another operator instance is active" in err
    wait_for(lambda: first.events("plan") >= 3)
    assert first.finish(signal.SIGTERM)[0] == 0
    assert live_served.mutating_requests()  # the first one acted
    agents = {r.user_agent for r in live_served.mutating_requests()}
    assert len(agents) <= 1, agents


def test_a_hung_broker_does_not_keep_rebalance_alive(live_served, tmp_path):
    live_served.add_fault("broker-1:*:/broker-stats/load-report:delay=60")
    started = time.monotonic()
    code, out, err = Operator(
        live_served, tmp_path, "rebalance", "--dry-run", "--set", "brokerTimeoutSeconds=1"
    ).finish()
    took = time.monotonic() - started
    assert code == 0, err
    assert f"left out of this cycle: {live_served.cluster.by_name('broker-1').id}" in out
    assert took < 15, f"rebalance took {took:.1f} s with a broker hung for 60 s"


@pytest.mark.parametrize("kind", ["file", "removed"])
def test_the_audit_spool_directory_problems(live_served, tmp_path, kind):
    if kind == "file":
        (tmp_path / "spool").write_text("not a directory")
        code, _, err = Operator(
            live_served,
            tmp_path,
            "rebalance",
            "--dry-run",
            "--set",
            "auditEnabled=true",
            "--set",
            f"auditSpoolDir={tmp_path / 'spool'}",
            "--set",
            "auditServiceUrl=pulsar://127.0.0.1:1",
        ).finish()
        assert code == 2 and "auditSpoolDir" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
    else:
        from pulsar_lb_operator.record.audit import Spool

        spool = Spool(tmp_path / "spool")
        spool.append([{"kind": "plan"}])
        import shutil

        shutil.rmtree(tmp_path / "spool")
        assert spool.append([{"kind": "planned"}]) == [2]  # written again, numbering goes on
        assert [seq for seq, _ in spool.pending()] == [2]


def test_operator_run_against_simulate_with_a_500_after_each_unload(tmp_path):
    """The issue's own check: `operator simulate demo --fault 'broker-0:PUT:/unload:status-after=500'` and
    `operator run --no-dry-run` against it: no cap exceeded, and every bundle it moved is in cooldown."""
    from tests.builders import free_port

    port, log = free_port(), tmp_path / "requests.jsonl"
    fault = ["--fault", "broker-0:PUT:/unload:status-after=500", "--request-log", str(log)]
    simulate = subprocess.Popen(
        [operator_script(), "simulate", "demo", "--port", str(port), "--speed", "60", *fault],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: log.exists() or simulate.poll() is not None)
        env = {"PULSAR_ADMIN_URL": f"http://127.0.0.1:{port}"}
        daemon = Operator(_Served(port), tmp_path, "run", *ACT, **env)
        wait_for(lambda: daemon.events("plan") >= 4, 60)
        code, _, err = daemon.finish(signal.SIGTERM)
    finally:
        simulate.terminate()
        simulate.communicate(timeout=30)
    assert code == 0, err
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    fired = [e for e in entries if e["fault"]]
    calls = [e for e in entries if e["method"] == "PUT" and e["path"].endswith("/unload") and e["status"] != 307]
    assert fired and all(e["status"] == 500 for e in fired)  # the unloads took effect, then answered 500
    actions = [json.loads(line) for line in daemon.lines if '"event": "action"' in line]
    sent = [a for a in actions if a["result"] in ("executed", "unknown", "failed") and a["reason"] != "verification"]
    assert len(sent) == len(calls)  # every call the cluster saw is one the operator counted
    per_cycle: dict[str, list[dict]] = {}
    for action in sent:
        per_cycle.setdefault(action["cycle_id"], []).append(action)
    for cycle_actions in per_cycle.values():
        assert len(cycle_actions) <= 10
        sources = [a["source"] for a in cycle_actions]
        assert max(sources.count(s) for s in sources) <= 5
    state = json.loads((tmp_path / "state.json").read_text())
    assert {a["bundle"] for a in sent} <= set(state["executor"]["lastMoved"])


class _Served:
    """What Operator() needs of a served cluster: its admin URL (here, an ``operator simulate`` process)."""

    def __init__(self, port):
        self.admin_url = f"http://127.0.0.1:{port}"
