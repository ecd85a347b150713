"""``operator rebalance`` and ``operator snapshot`` against a live (simulated) cluster."""

import json

import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.simulator.faults import FaultRule

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


def test_rebalance_executes_and_reports_outcomes(sim, capsys):
    code, out, _ = run(capsys, "rebalance", "--no-dry-run", "--output", "json", *ACT_NOW, "--set", "pauseSeconds=0")
    doc = json.loads(out)
    executed = [o for o in doc["outcomes"] if o["outcome"] == "executed"]
    assert code == 0 and len(executed) == 5  # the per-broker cap of 5 holds back the rest
    sim.cluster.advance(5)
    assert all(sim.cluster.owner_of(o["bundle"]) == o["destination"] for o in executed)


def test_failed_actions_exit_1(sim, capsys):
    sim.add_fault(
        FaultRule("broker-0", path="/unload", status=500, body="--- An unexpected error occurred in the server ---")
    )
    code, out, _ = run(capsys, "rebalance", "--no-dry-run", *ACT_NOW, "--set", "pauseSeconds=0")
    assert code == 1 and "unknown (HTTP 500" in out


def test_conflict_guard_warns_or_turns_the_builtin_shedder_off(sim, capsys):
    sim.cluster.dynamic_config["loadBalancerSheddingEnabled"] = "true"
    sim.cluster.config = sim.cluster.config.replace({"loadBalancerSheddingEnabled": True})
    code, _, err = run(capsys, "rebalance", "--dry-run")
    assert code == 0 and "PULSAR'S OWN SHEDDER IS ON" in err
    code, _, err = run(capsys, "rebalance", "--dry-run", "--set", "disableBuiltinShedding=true")
    assert code == 0 and "dry run: would turn Pulsar's own shedder off" in err
    assert sim.mutating_requests() == []  # a dry run changes no configuration either
    code, _, err = run(capsys, "rebalance", "--no-dry-run", "--set", "disableBuiltinShedding=true")
    assert code == 0 and "turned Pulsar's own shedder off" in err
    assert sim.cluster.dynamic_config["loadBalancerSheddingEnabled"] == "false"


def test_snapshot_then_plan_offline(sim, capsys, tmp_path):
    out_file = tmp_path / "snap.json"
    code, _, err = run(capsys, "snapshot", "--out", str(out_file), "--with-topics")
    assert code == 0 and "4 brokers, 2 namespaces" in err
    doc = json.loads(out_file.read_text())
    assert doc["format"] == "pulsar-lb-snapshot/1" and doc["namespaces"]["acme/orders"]["boundaries"][0] == "0x00000000"
    assert doc["topics"]
    code, out, _ = run(capsys, "rebalance", "--snapshot", str(out_file), "--output", "json", *ACT_NOW)
    assert code == 0 and json.loads(out)["actions"]


def test_missing_or_unreachable_cluster(capsys, monkeypatch):
    monkeypatch.delenv("PULSAR_ADMIN_URL", raising=False)
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
