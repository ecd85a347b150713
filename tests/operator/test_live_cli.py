"""``operator rebalance`` and ``operator snapshot`` against a live (simulated) cluster."""

import contextlib
import io
import json
import os
import signal
import subprocess
import time

import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.records import ExecutorState, Pending
from pulsar_lb_operator.run.cycle import OperatorState
from pulsar_lb_operator.simulator.faults import FaultRule
from pulsar_lb_operator.store import statefile
from tests.builders import operator_script

ACT_NOW = ["--set", "loadBalancerAvgShedderHitCountHighThreshold=1"]


@pytest.fixture
def sim(live_served, monkeypatch, tmp_path):
    monkeypatch.setenv("PULSAR_ADMIN_URL", live_served.admin_url)
    monkeypatch.chdir(tmp_path)  # the state file (state/operator-state.json) and its lock go here
    return live_served


def run(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_prints_the_plan_and_mutates_nothing(sim, capsys):
    code, out, _ = run(capsys, "rebalance", "--dry-run", *ACT_NOW)
    assert code == 0 and "Plan (dry run)" in out and "dry_run (dry run: no call made)" in out
    assert sim.mutating_requests() == []


def lines_of(out):
    """``--output json``: one object a line — plan, an outcome per action, then the result."""
    return [json.loads(line) for line in out.splitlines()]


def unload_calls(sim):
    """The unload calls that reached the cluster: one per action (the 307 hops of a call are not counted)."""
    return [r for r in sim.requests if r.method == "PUT" and r.path.endswith("/unload") and r.status != 307]


def test_rebalance_executes_and_reports_outcomes(sim, capsys):
    code, out, _ = run(capsys, "rebalance", "--no-dry-run", "--output", "json", *ACT_NOW, "--set", "pauseSeconds=0")
    lines = lines_of(out)
    assert [d["kind"] for d in lines] == ["plan", *["outcome"] * len(lines[0]["actions"]), "result"]
    doc = lines[-1]
    executed = [o for o in doc["outcomes"] if o["outcome"] == "executed"]
    assert code == 0 and len(executed) == 5  # the per-broker cap of 5 holds back the rest
    sim.cluster.advance(5)
    assert all(sim.cluster.owner_of(o["bundle"]) == o["destination"] for o in executed)
    planned = {a["actionId"]: a for a in lines[0]["actions"]}
    assert len(planned) == len(doc["outcomes"]) and {o["actionId"] for o in doc["outcomes"]} == set(planned)


def test_failed_actions_exit_1(sim, capsys):
    sim.add_fault(
        FaultRule("broker-0", path="/unload", status=500, body="--- An unexpected error occurred in the server ---")
    )
    code, out, _ = run(capsys, "rebalance", "--no-dry-run", *ACT_NOW, "--set", "pauseSeconds=0")
    assert code == 1 and "unknown (HTTP 500" in out


def builtin_shedder_on(sim):
    sim.cluster.dynamic_config["loadBalancerSheddingEnabled"] = "true"
    sim.cluster.config = sim.cluster.config.replace({"loadBalancerSheddingEnabled": True})


def test_with_pulsars_shedder_on_nothing_is_sent_and_rebalance_says_why_and_exits_1(sim, capsys):
    builtin_shedder_on(sim)
    for mode in ("--dry-run", "--no-dry-run"):
        code, out, _ = run(capsys, "rebalance", mode, "--output", "json", *ACT_NOW, "--set", "pauseSeconds=0")
        plan, *_, result = lines_of(out)
        held = result["builtinBalancer"]["held"]
        assert code == 1 and held.startswith(
            "not acting: Pulsar's own shedder is on (loadBalancerSheddingEnabled=true)"
        )
        assert "disableBuiltinShedding: true" in held and "coexistWithBuiltinShedding: true" in held
        assert plan["actions"] and {a["deferred"] for a in plan["actions"]} == {held}  # the preview says so too
        assert {(o["outcome"], o["detail"]) for o in result["outcomes"]} == {("skipped", held)}
    assert sim.mutating_requests() == []  # not an unload, not a configuration change
    code, out, _ = run(capsys, "rebalance", "--no-dry-run", *ACT_NOW, "--set", "pauseSeconds=0")
    assert code == 1 and out.strip().splitlines()[-1] == f"N{held[1:]}"  # "Not acting: …", with the fix


def test_disable_builtin_shedding_turns_it_off_right_before_the_first_unload_never_in_a_dry_run(sim, capsys):
    builtin_shedder_on(sim)
    disable = ["--set", "disableBuiltinShedding=true", "--set", "pauseSeconds=0", *ACT_NOW]
    code, _, err = run(capsys, "rebalance", "--dry-run", *disable)
    assert code == 0 and "dry run: would turn Pulsar's own balancer off" in err
    assert sim.mutating_requests() == []  # a dry run changes no configuration either
    code, out, err = run(capsys, "rebalance", "--no-dry-run", "--output", "json", *disable)
    assert code == 0 and "turned Pulsar's own balancer off: loadBalancerSheddingEnabled=false" in err
    assert sim.cluster.dynamic_config["loadBalancerSheddingEnabled"] == "false"
    first_put = next(i for i, r in enumerate(sim.requests) if r.method == "PUT")
    assert [r.method for r in sim.requests[:first_put] if r.method != "GET"] == ["POST"]  # the switch, then unloads
    assert [o for o in lines_of(out)[-1]["outcomes"] if o["outcome"] == "executed"]


def test_coexist_with_builtin_shedding_acts_beside_it_and_says_so(sim, capsys):
    builtin_shedder_on(sim)
    coexist = ["--set", "coexistWithBuiltinShedding=true", "--set", "pauseSeconds=0", *ACT_NOW]
    code, out, err = run(capsys, "rebalance", "--no-dry-run", "--output", "json", *coexist)
    assert code == 0 and "acting beside it, as coexistWithBuiltinShedding: true asks" in err
    assert lines_of(out)[-1]["builtinBalancer"] == {
        "state": "coexisting",
        "held": None,
        "keys": ["loadBalancerSheddingEnabled"],
    }
    assert unload_calls(sim) and not [r for r in sim.requests if r.method == "POST"]
    code, _, err = run(
        capsys, "rebalance", "--set", "coexistWithBuiltinShedding=true", "--set", "disableBuiltinShedding=1"
    )
    assert code == 2 and "coexistWithBuiltinShedding: contradicts disableBuiltinShedding: true" in err


def test_snapshot_then_plan_offline(sim, capsys, tmp_path):
    out_file = tmp_path / "snap.json"
    code, _, err = run(capsys, "snapshot", "--out", str(out_file), "--with-topics")
    assert code == 0 and "4 brokers, 2 namespaces" in err
    doc = json.loads(out_file.read_text())
    assert doc["format"] == "pulsar-lb-snapshot/1" and doc["namespaces"]["acme/orders"]["boundaries"][0] == "0x00000000"
    assert doc["topics"]
    code, out, _ = run(capsys, "rebalance", "--snapshot", str(out_file), "--output", "json", *ACT_NOW)
    assert code == 0 and json.loads(out)["actions"]  # offline: one document, the strategy's plan


def test_missing_or_unreachable_cluster(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("PULSAR_ADMIN_URL", raising=False)
    monkeypatch.chdir(tmp_path)  # the lock is taken before the cluster is reached
    code, _, err = run(capsys, "rebalance")
    assert code == 2 and "give --admin-url or set PULSAR_ADMIN_URL" in err and err.count("\n") == 1
    code, _, err = run(capsys, "rebalance", "--admin-url", "http://127.0.0.1:1")
    assert code == 1 and "the cluster's admin API" in err and "cannot reach" in err
    code, _, err = run(capsys, "rebalance", "--admin-url", "ftp://nowhere")
    assert code == 2 and "adminUrl" in err


def test_action_logs_are_json_with_the_cycle_and_the_decision(sim, capsys, monkeypatch):
    monkeypatch.setenv("PULSAR_LB_LOG_LEVEL", "info")
    monkeypatch.setenv("PULSAR_LB_LOG_JSON", "1")
    code, _, err = run(capsys, "rebalance", "--dry-run", *ACT_NOW)
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    actions = [entry for entry in lines if entry["event"] == "action"]
    assert code == 0 and actions
    keys = {"cycle_id", "strategy", "bundle", "source", "destination", "dry_run", "reason", "result"}
    assert all(keys <= set(entry) for entry in actions)
    assert {entry["dry_run"] for entry in actions} == {True} and actions[0]["strategy"] == "AvgShedder"
    assert len({entry["cycle_id"] for entry in actions}) == 1


# ------------------------------------------------------------------------------------ plans that tell the truth


def fresh_state(path, cooled, waiting):
    """An operator state: one bundle moved a moment ago (in cooldown), one whose last unload is not verified yet."""
    now = int(time.time() * 1000)
    unverified = Pending("unload", waiting["bundle"], waiting["source"], None, now)
    executor = ExecutorState({cooled["bundle"]: now}, (unverified,))
    statefile.save(str(path), OperatorState(executor=executor))
    return str(path)


@pytest.mark.parametrize("cap", ["maxUnloadsPerBroker=2", "maxUnloadsPerCycle=2"])
def test_the_dry_run_plan_is_what_the_live_cycle_then_executes(sim, capsys, tmp_path, cap):
    """Every rail on the same cluster state — a cap, a cooldown, a pending verification, an excluded namespace: the
    actions a dry run says it would send are the ones the live cycle sends, each deferred one is skipped by the
    rail the dry run named, and the estimate is that of the actions sent."""
    rails = [*ACT_NOW, "--set", "pauseSeconds=0", "--set", cap, "--set", "excludedNamespaces=acme/orders"]
    _, out, _ = run(
        capsys, "rebalance", "--dry-run", "--output", "json", "--state", str(tmp_path / "probe.json"), *ACT_NOW
    )
    planned = [a for a in lines_of(out)[0]["actions"] if a["bundle"].startswith("public/")]
    assert len(planned) >= 5
    for name in ("dry.json", "live.json"):
        fresh_state(tmp_path / name, cooled=planned[0], waiting=planned[1])
    code, out, _ = run(
        capsys, "rebalance", "--dry-run", "--output", "json", "--state", str(tmp_path / "dry.json"), *rails
    )
    dry_plan = lines_of(out)[0]
    assert code == 0 and sim.mutating_requests() == []
    code, out, _ = run(
        capsys, "rebalance", "--no-dry-run", "--output", "json", "--state", str(tmp_path / "live.json"), *rails
    )
    live = lines_of(out)[-1]
    assert code == 0

    would_send = [(a["bundle"], a["destination"]) for a in dry_plan["actions"] if not a["deferred"]]
    executed = [(o["bundle"], o["destination"]) for o in live["outcomes"] if o["outcome"] == "executed"]
    assert would_send and would_send == executed
    called = [r.path.removeprefix("/admin/v2/namespaces/").removesuffix("/unload") for r in unload_calls(sim)]
    assert called == [bundle for bundle, _ in would_send]  # as the cluster saw it
    deferred = {a["bundle"]: a["deferred"] for a in dry_plan["actions"] if a["deferred"]}
    skipped = {o["bundle"]: o["detail"] for o in live["outcomes"] if o["outcome"] == "skipped"}
    assert deferred == skipped
    why = set(deferred.values())
    assert any("cooldown" in w for w in why) and any("awaits verification" in w for w in why)
    assert "namespace acme/orders is excluded" in why and any(w.startswith("max unloads per") for w in why)
    assert dry_plan["brokers"] == live["brokers"]  # the same estimate, made over the same actions
    source = next(b for b in dry_plan["brokers"] if b["broker"] == planned[0]["source"])
    assert source["bundlesAfter"] == source["bundlesBefore"] - len(would_send)  # after what is sent, not all


# ------------------------------------------------------------------------------------------- streamed output


class Recorder(io.StringIO):
    """stdout that notes, for every line written, how many unload calls had reached the cluster by then."""

    def __init__(self, sim):
        super().__init__()
        self.sim, self.lines = sim, []

    def write(self, text):
        self.lines += [(line, len(unload_calls(self.sim))) for line in text.splitlines() if line.strip()]
        return super().write(text)


@pytest.mark.parametrize("output", ["table", "json"])
def test_the_plan_is_printed_before_the_first_call_and_each_outcome_as_it_happens(sim, output):
    recorder = Recorder(sim)
    with contextlib.redirect_stdout(recorder):
        code = cli.main(["rebalance", "--no-dry-run", "--output", output, "--set", "pauseSeconds=0", *ACT_NOW])
    assert code == 0 and len(unload_calls(sim)) == 5
    first = next(i for i, (line, _) in enumerate(recorder.lines) if executed(line))
    assert all(calls == 0 for _, calls in recorder.lines[:first])  # the whole plan, before any call
    assert [calls for line, calls in recorder.lines if executed(line)] == [1, 2, 3, 4, 5]  # each before the next call


def executed(line):
    """An outcome line of an unload the cluster accepted, as text or as JSON."""
    return "executed (accepted)" in line or ('"kind": "outcome"' in line and '"outcome": "executed"' in line)


def test_ctrl_c_between_actions_stops_before_the_next_call_with_what_was_sent_on_disk(sim, tmp_path):
    """A person reads the plan and the first outcome, and presses Ctrl-C during the pause before the second."""
    env = {**os.environ, "PULSAR_ADMIN_URL": sim.admin_url}
    args = [operator_script(), "rebalance", "--no-dry-run", "--output", "json", "--set", "pauseSeconds=30", *ACT_NOW]
    proc = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        plan = json.loads(proc.stdout.readline())
        first = json.loads(proc.stdout.readline())
        assert plan["kind"] == "plan" and len([a for a in plan["actions"] if not a["deferred"]]) == 5
        assert first["kind"] == "outcome" and first["outcome"] == "executed"
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130 and time.monotonic() - started < 10  # the pause ended at once
    assert "interrupted: no further call is sent" in err and "Traceback" not in err
    result = json.loads(out.splitlines()[-1])
    assert result["interrupted"] is True
    assert [o["outcome"] for o in result["outcomes"]].count("executed") == 1
    assert {o["detail"] for o in result["outcomes"][1:5]} == {"shutting down"}
    assert len(unload_calls(sim)) == 1
    state = statefile.load(tmp_path / "state" / "operator-state.json")
    assert [p.bundle for p in state.executor.pending] == [first["bundle"]]  # sent, so verified next time
