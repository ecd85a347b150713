"""The daemon end to end against the simulator over loopback."""

import dataclasses
import os
import re
import signal
import subprocess
import threading
import time
import types

import pytest
import requests

from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.benchmarks.metrics import RunMetrics
from pulsar_lb_operator.records import Outcome
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.faults import FaultRule
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from pulsar_lb_operator.strategies import LoadBalancerConfig
from tests.builders import free_port, operator_script


def make_daemon(sim, tmp_path, pulsar=None, **settings):
    base = {
        "dryRun": False,
        "pauseSeconds": 0,
        "metricsPort": 0,
        "stateFile": str(tmp_path / "state.json"),
        "verifyAfterSeconds": 60,
        "historyUri": str(tmp_path / "history"),
        "profileUri": str(tmp_path / "profile"),
    }
    config = LoadBalancerConfig().replace({**sim.cluster.scenario.config, **(pulsar or {})})
    client = AdminClient(sim.admin_url, retries=1)
    return Daemon(OperatorSettings(**{**base, **settings}), config, client, "sim", clock_ms=lambda: sim.cluster.now_ms)


def drive(sim, daemon, cycles):
    metrics = RunMetrics()
    for _ in range(cycles):
        daemon.run_once()
        sim.cluster.advance(60)
        metrics.record(sim.cluster)
    return metrics


@pytest.mark.parametrize("served", ["threshold-over-unloading"], indirect=True)
def test_balances_the_over_unloading_case_without_over_unloading(served, tmp_path):
    metrics = drive(served, make_daemon(served, tmp_path), 20)
    first, last = metrics.samples[0], metrics.samples[-1]
    assert first.spread > 70 and last.spread < 15
    # never flipped: broker-0 (the 90% one) is never driven far below broker-1
    assert all(s.usage["broker-0"] >= s.usage["broker-1"] - 15 for s in metrics.samples)
    assert RunMetrics.flapping(served.cluster) == 0


@pytest.mark.parametrize("served", ["heterogeneous-10-50-70"], indirect=True)
def test_heterogeneous_load_goes_to_the_idle_alike_broker_never_to_the_busy_machine(served, tmp_path):
    """AvgShedder pairs 10 with 70 here (the 70 has nothing to give) and leaves 50 unpaired, PIP-364's
    "normal" rating; TransferShedder moves on from a broker without bundles to the next one."""
    daemon = make_daemon(served, tmp_path)
    daemon.cycle = dataclasses.replace(daemon.cycle, shedding="TransferShedder")
    before = RunMetrics().record(served.cluster).usage
    metrics = drive(served, daemon, 15)
    last = metrics.samples[-1].usage
    # TransferShedder stops once the load std is under its 0.25 target, so the gap shrinks, not closes
    assert last["broker-b"] - last["broker-a"] < 0.6 * (before["broker-b"] - before["broker-a"])
    assert not [m for m in served.cluster.moves if served.cluster.brokers[m[3]].name == "broker-c"]


@pytest.mark.parametrize("served", ["rolling-restart"], indirect=True)
def test_rolling_restart_the_last_broker_gets_its_share_back(served, tmp_path):
    daemon = make_daemon(served, tmp_path)
    served.cluster.advance(12 * 60)  # the rolling restart is over; the last broker is idle
    before = RunMetrics().record(served.cluster)
    metrics = drive(served, daemon, 20)
    assert before.spread > 40 and metrics.samples[-1].spread < 20


def test_failures_mid_cycle_never_crash_and_never_act_unsafely(served, tmp_path):
    daemon = make_daemon(served, tmp_path, pulsar={"loadBalancerAvgShedderHitCountHighThreshold": 1})
    # a 500 on every unload: each is an unknown outcome, counted toward the caps; the daemon goes on
    served.add_fault(
        FaultRule("broker-0", path="/unload", status=500, body="--- An unexpected error occurred in the server ---")
    )
    result = daemon.run_once()
    outcomes = [r.outcome for r in result.records] if result else []
    assert outcomes and set(outcomes) <= {Outcome.UNKNOWN, Outcome.SKIPPED}
    assert outcomes.count(Outcome.UNKNOWN) <= daemon.settings.maxUnloadsPerBroker
    served.clear_faults()
    # a slow broker is left out of the cycle, the others are still planned
    served.add_fault("broker-1:*:/broker-stats/load-report:delay=2")
    daemon.cycle = dataclasses.replace(daemon.cycle, broker_timeout_s=0.5)
    result = daemon.run_once()
    assert result is not None and len(result.skipped_brokers) == 1
    served.clear_faults()
    # the destination crashes between planning and execution: nothing is sent to it
    original = daemon.executor.apply

    def crash_then_apply(plan, state, *args):
        for action in plan.actions:
            if getattr(action, "destination", None):
                served.cluster.crash(served.cluster.brokers[action.destination].name)
                break
        return original(plan, state, *args)

    daemon.executor.apply = crash_then_apply
    served.cluster.advance(60)
    result = daemon.run_once()
    assert result is not None
    dead = {b.id for b in served.cluster.brokers.values() if not b.alive}
    assert all(r.outcome is Outcome.SKIPPED for r in result.records if r.action.destination in dead)
    assert not [q for q in served.requests if q.method == "PUT" and any(d in q.query for d in dead)]
    # the admin URL itself unreachable: the cycle fails, the daemon does not
    daemon.executor.apply = original
    daemon.cycle = dataclasses.replace(daemon.cycle, client=AdminClient("http://127.0.0.1:1", retries=1))
    assert daemon.run_once() is None and daemon.metrics.cycles.labels("error")._value.get() == 1


def test_a_restart_keeps_hit_counters_and_cooldowns(served, tmp_path):
    first = make_daemon(served, tmp_path)
    result = first.run_once()
    assert result.records == () and first.state.strategy.avg_hits_high  # hit 1 of 2
    served.cluster.advance(60)
    second = make_daemon(served, tmp_path)  # a new process reading the same state file
    assert dict(second.state.strategy.avg_hits_high) == dict(first.state.strategy.avg_hits_high)
    result = second.run_once()
    moved = [r.action.bundle for r in result.records if r.outcome is Outcome.EXECUTED]
    assert moved  # the second consecutive hit acted
    third = make_daemon(served, tmp_path)
    assert set(moved) <= set(third.state.executor.last_moved)  # cooldowns survived too
    assert {p.bundle for p in third.state.executor.pending} == set(moved)


def test_the_scheduled_daemon_serves_probes_and_stops_cleanly(tmp_path):
    scenario = load_scenario("demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate, int(time.time() * 1000))) as sim:
        port = free_port()
        settings = OperatorSettings(
            adminUrl=sim.admin_url,
            metricsPort=port,
            metricsHost="127.0.0.1",
            stateFile=str(tmp_path / "s.json"),
            cycleIntervalSeconds=0.2,
            historyUri=str(tmp_path / "history"),
        )
        daemon = Daemon(settings, LoadBalancerConfig().replace(scenario.config), AdminClient(sim.admin_url), "sim")
        thread = threading.Thread(target=daemon.serve)
        thread.start()
        try:
            for _ in range(100):
                if daemon.cycles >= 3:
                    break
                time.sleep(0.05)
            base = f"http://127.0.0.1:{port}"
            assert requests.get(f"{base}/healthz", timeout=5).text == "ok"
            assert requests.get(f"{base}/readyz", timeout=5).status_code == 200
            metrics = requests.get(f"{base}/metrics", timeout=5).text
            assert 'pulsar_lb_operator_cycles_total{cluster="sim",result="ok"}' in metrics
            assert 'pulsar_lb_operator_broker_usage_percent{broker="' in metrics and 'cluster="sim"' in metrics
            assert 'pulsar_lb_operator_kill_switch{cluster="sim"} 0.0' in metrics
            assert "\npulsar_lb_cycles" not in metrics  # Pulsar's brokers export pulsar_lb_*: never ours
            assert daemon.cycles >= 3 and sim.mutating_requests() == []  # dryRun is the default
        finally:
            daemon.stop.set()
            thread.join(10)
        assert not thread.is_alive()


def test_operator_run_exits_cleanly_on_sigterm(tmp_path):
    scenario = load_scenario("demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate, int(time.time() * 1000))) as sim:
        env = {
            **os.environ,
            "PULSAR_ADMIN_URL": sim.admin_url,
            "PULSAR_LB_METRICS_PORT": "0",
            "PULSAR_LB_STATE_FILE": str(tmp_path / "state.json"),
            "PULSAR_LB_LOG_JSON": "true",
            "PULSAR_LB_HISTORY_URI": str(tmp_path / "history"),
        }
        proc = subprocess.Popen(
            [operator_script(), "run"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            for _ in range(200):
                if (tmp_path / "state.json").exists():
                    break
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=20)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        assert '"event": "daemon stopped"' in err and '"dry_run": true' in err
        assert (tmp_path / "state.json").exists()


def test_every_cycle_appends_to_the_history(served, tmp_path):
    daemon = make_daemon(served, tmp_path)
    drive(served, daemon, 3)
    rows = daemon.history.read("broker_samples").to_pylist()
    assert len(rows) == 3 * 4 and len({r["time"] for r in rows}) == 3
    assert daemon.history.read("bundle_samples").num_rows == 3 * 48


def write_profile(root, models):
    """A load profile in the Spark job's layout, holding only cost models."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir()
    rows = [{"broker": b, "resource": r, **vars(m)} for (b, r), m in models.items()]
    pq.write_table(pa.Table.from_pylist(rows), root / "cost_model")
    averages = ["bundle", "samples", *(f"long_{k}" for k in ("msg_rate_in", "msg_rate_out"))]
    averages += ["long_msg_throughput_in", "long_msg_throughput_out"]
    pq.write_table(pa.table({c: pa.array([], pa.float64()) for c in averages}), root / "bundle_averages")
    pq.write_table(
        pa.table({c: pa.array([], pa.float64()) for c in ("bundle", "hot_share", "boundary")}), root / "hot_bundles"
    )


def test_a_profile_keeps_the_cost_sums_and_one_written_before_them_still_loads(tmp_path):
    """The sums alike brokers' fits are pooled from round-trip through the profile's Parquet; a profile an earlier
    version wrote has no such column, and its models load without them (the shedder then averages the fits)."""
    from pulsar_lb_operator.store.profile import read_profile
    from pulsar_lb_operator.strategies import CostModel

    model = CostModel(5.0, 0.002, 2e-7, 1e-7, 0.99, 48, tuple(float(v) for v in range(9)))
    write_profile(tmp_path / "now", {("b1", "cpu"): model})
    assert read_profile(str(tmp_path / "now")).cost_models[("b1", "cpu")] == model
    old = {k: v for k, v in vars(model).items() if k != "centred"}
    write_profile(tmp_path / "before", {("b1", "cpu"): types.SimpleNamespace(**old)})
    assert read_profile(str(tmp_path / "before")).cost_models[("b1", "cpu")].centred == ()


@pytest.mark.parametrize("served", ["heterogeneous-10-50-70"], indirect=True)
def test_predictive_pairing_closes_the_heterogeneous_gap_over_http(served, tmp_path):
    """Where AvgShedder is stuck and TransferShedder only narrows the gap, the cost models close it."""
    from prometheus_client import generate_latest

    from pulsar_lb_operator.benchmarks.warmup import day_of_history_profile

    write_profile(
        tmp_path / "profile", day_of_history_profile(served.cluster.scenario, lambda _s: served.cluster).cost_models
    )
    daemon = make_daemon(served, tmp_path, profileUri=str(tmp_path / "profile"))
    daemon.cycle = dataclasses.replace(daemon.cycle, shedding="PredictivePairingShedder")
    before = RunMetrics().record(served.cluster).usage
    metrics = drive(served, daemon, 8)
    last = metrics.samples[-1].usage
    assert before["broker-b"] - before["broker-a"] > 35
    assert abs(last["broker-b"] - last["broker-a"]) < 10
    assert not [m for m in served.cluster.moves if served.cluster.brokers[m[3]].name == "broker-c"]
    assert "AvgShedder's behaviour" not in " ".join(r.action.reason for r in daemon.run_once().records)
    exported = generate_latest(daemon.metrics.registry).decode()
    assert 'pulsar_lb_operator_prediction_error_points{broker="' in exported


def test_the_kill_switch_gauge_follows_the_switch_at_once(served, tmp_path):
    """Read at every scrape: a pause shows before the next cycle, which may be an interval away."""
    from prometheus_client import generate_latest

    switch = tmp_path / "PAUSE"
    daemon = make_daemon(served, tmp_path, killSwitchFile=str(switch), historyUri="", profileUri="")

    def gauge() -> str:
        exported = generate_latest(daemon.metrics.registry).decode()
        return re.search(r'^pulsar_lb_operator_kill_switch\{cluster="sim"\} (\S+)$', exported, re.M).group(1)

    assert daemon.run_once() is not None and gauge() == "0.0"
    switch.touch()
    assert gauge() == "1.0"
    result = daemon.run_once()
    assert not [r for r in result.records if r.outcome is Outcome.EXECUTED]
    switch.unlink()
    assert gauge() == "0.0"
