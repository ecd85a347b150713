"""Collector and executor end to end against the simulator over loopback."""

import random

import pytest

from pulsar_lb_operator.act.executor import Executor, Safety
from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.collect.collector import collect
from pulsar_lb_operator.records import ExecutorState, Outcome
from pulsar_lb_operator.run.cycle import CycleContext, OperatorState, run_cycle
from pulsar_lb_operator.simulator.cluster import UNLOAD_WINDOW_S, SimulatedCluster
from pulsar_lb_operator.simulator.faults import FaultRule
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import parse_scenario
from pulsar_lb_operator.strategies import LoadBalancerConfig, Plan, Split, Unload
from tests.builders import SMALL_SCENARIO as SMALL


@pytest.fixture
def sim():
    with serve(lambda allocate: SimulatedCluster(parse_scenario(SMALL), allocate)) as served:
        yield served


def client_for(sim, **kwargs):
    return AdminClient(sim.admin_url, **{"retries": 2, **kwargs})


def executor_for(sim, **safety):
    clock = lambda: sim.cluster.now_ms / 1000  # noqa: E731
    return Executor(client_for(sim), "sim", Safety(**{"dry_run": False, **safety}), clock=clock, sleep=lambda s: None)


def test_collect_reads_every_broker_and_skips_the_bad_ones(sim):
    good = collect(client_for(sim), "sim", now_ms=sim.cluster.now_ms)
    assert set(good.snapshot.brokers) == set(sim.cluster.active_ids()) and not good.skipped
    sim.add_fault(
        FaultRule("broker-0", path="/broker-stats/load-report", status=500, body="--- An unexpected error ---")
    )
    sim.add_fault(
        FaultRule(
            "broker-1",
            path="/broker-stats/load-report",
            status=200,
            body='{"cpu": "lots"}',
            content_type="application/json",
        )
    )
    sim.add_fault("broker-2:*:/broker-stats/load-report:delay=1.5")
    result = collect(client_for(sim), "sim", now_ms=sim.cluster.now_ms, broker_timeout_s=0.7)
    ids = {n: sim.cluster.by_name(n).id for n in ("broker-0", "broker-1", "broker-2")}
    assert result.snapshot.brokers == {}
    assert "HTTP 500" in result.skipped[ids["broker-0"]]
    assert "lastStats: missing" in result.skipped[ids["broker-1"]]  # the garbage report is named
    slow = result.skipped[ids["broker-2"]]
    assert "no load report within 0.7 s" in slow or "timed out" in slow


def test_collect_skips_stale_reports_and_crashed_brokers(sim):
    late = sim.cluster.now_ms + 3_600_000  # an hour after the last reports were written
    stale = collect(client_for(sim), "sim", now_ms=late, stale_after_s=1800)
    assert not stale.snapshot.brokers and all("stale" in why for why in stale.skipped.values())
    sim.cluster.crash("broker-1")
    after = collect(client_for(sim), "sim", now_ms=sim.cluster.now_ms)
    assert sim.cluster.by_name("broker-1").id not in after.snapshot.brokers
    assert len(after.snapshot.brokers) == 2


def test_collect_pauses_the_garbage_collector_and_always_resumes_it(sim, monkeypatch):
    """Paused while the reports are read (a snapshot is acyclic), on again afterwards, even after a failure."""
    import gc

    from pulsar_lb_operator.adminapi import TransportError
    from pulsar_lb_operator.collect import collector

    seen = []
    original = collector._read_one
    monkeypatch.setattr(collector, "_read_one", lambda *a: (seen.append(gc.isenabled()), original(*a))[1])
    assert gc.isenabled()
    collect(client_for(sim), "sim", now_ms=sim.cluster.now_ms)
    assert seen and not any(seen) and gc.isenabled()
    with pytest.raises(TransportError):
        collect(AdminClient("http://127.0.0.1:1", retries=1), "sim")
    assert gc.isenabled()


def _unload(sim, src="broker-0", dst="broker-2", index=0):
    bundle = sim.cluster.owned_by(sim.cluster.by_name(src).id)[index]
    return Unload(bundle, sim.cluster.by_name(src).id, sim.cluster.by_name(dst).id, "test")


def test_dry_run_calls_no_mutating_endpoint(sim):
    config = LoadBalancerConfig().replace({"loadBalancerAvgShedderHitCountHighThreshold": 1})
    executor = Executor(client_for(sim), "sim", Safety(dry_run=True), clock=lambda: sim.cluster.now_ms / 1000)
    state = OperatorState()
    for _ in range(3):
        context = CycleContext(client_for(sim), "sim", config, executor)
        result = run_cycle(context, state, random.Random(1), now_ms=sim.cluster.now_ms)
        state = result.state
        sim.cluster.advance(60)
    assert any(r.outcome is Outcome.DRY_RUN for r in result.records)  # there was something to do
    assert sim.mutating_requests() == []
    assert sim.cluster.unloads == 0


def test_caps_per_cycle_and_per_broker(sim):
    plan = Plan("test", "test", 0, tuple(_unload(sim, index=i) for i in range(4)))
    records, _ = executor_for(sim, max_unloads_per_cycle=3, max_unloads_per_broker=2).apply(plan, ExecutorState())
    assert [r.outcome for r in records] == [Outcome.EXECUTED] * 2 + [Outcome.SKIPPED] * 2
    assert "max unloads per broker (2)" in records[2].detail
    records, _ = executor_for(sim, max_unloads_per_cycle=1).apply(
        Plan("t", "t", 0, (_unload(sim, index=0), _unload(sim, index=1))), ExecutorState()
    )
    assert [r.outcome for r in records] == [Outcome.EXECUTED, Outcome.SKIPPED]
    assert "max unloads per cycle (1)" in records[1].detail


def test_cooldown_survives_in_the_executor_state(sim):
    action = _unload(sim)
    executor = executor_for(sim, cooldown_minutes=30)
    _, state = executor.apply(Plan("t", "t", 0, (action,)), ExecutorState())
    sim.cluster.advance(600)
    restored = ExecutorState.from_json(state.to_json())  # as after a daemon restart
    verified, restored = executor.verify(restored)
    assert [r.outcome for r in verified] == [Outcome.MOVED_AS_PLANNED] and not restored.pending
    records, _ = executor.apply(Plan("t", "t", 0, (action,)), restored)
    assert records[0].outcome is Outcome.SKIPPED and "cooldown 30 min" in records[0].detail


def test_destination_must_be_active_at_execution_time(sim):
    action = _unload(sim, dst="broker-2")
    sim.cluster.crash("broker-2")
    records, _ = executor_for(sim).apply(Plan("t", "t", 0, (action,)), ExecutorState())
    assert records[0].outcome is Outcome.SKIPPED and "not an active broker" in records[0].detail
    assert sim.mutating_requests() == []


def test_exclusions_and_kill_switch(sim, tmp_path, monkeypatch):
    action = _unload(sim)
    records, _ = executor_for(sim, excluded_namespaces=("t/.*",)).apply(Plan("t", "t", 0, (action,)), ExecutorState())
    assert "namespace t/ns is excluded" in records[0].detail
    records, _ = executor_for(sim, excluded_brokers=(action.destination,)).apply(
        Plan("t", "t", 0, (action,)), ExecutorState()
    )
    assert "is excluded" in records[0].detail
    switch = tmp_path / "STOP"
    switch.touch()
    records, _ = executor_for(sim, kill_switch_file=str(switch)).apply(Plan("t", "t", 0, (action,)), ExecutorState())
    assert records[0].outcome is Outcome.SKIPPED and "kill switch" in records[0].detail
    monkeypatch.setenv("PULSAR_LB_KILL_SWITCH", "1")
    records, _ = executor_for(sim).apply(Plan("t", "t", 0, (action,)), ExecutorState())
    assert "PULSAR_LB_KILL_SWITCH" in records[0].detail
    assert sim.mutating_requests() == []


def test_a_500_on_unload_is_an_unknown_outcome_counted_as_done_and_not_retried(sim):
    """A 500 may come after the broker acted: cooldown, pending verification, counted toward the caps."""
    sim.add_fault(
        FaultRule("broker-0", path="/unload", status=500, body="--- An unexpected error occurred in the server ---")
    )
    action = _unload(sim)
    records, state = executor_for(sim).apply(Plan("t", "t", 0, (action, _unload(sim, index=1))), ExecutorState())
    assert [r.outcome for r in records] == [Outcome.UNKNOWN, Outcome.UNKNOWN] and "HTTP 500" in records[0].detail
    assert {p.bundle for p in state.pending} == {action.bundle, _unload(sim, index=1).bundle}
    assert set(state.last_moved) == state.awaiting()
    unload_calls = [r for r in sim.requests if r.method == "PUT" and r.path.endswith("/unload")]
    assert len(unload_calls) == 2  # one attempt each
    again, _ = executor_for(sim, cooldown_minutes=0).apply(Plan("t", "t", 0, (action,)), state)
    assert again[0].outcome is Outcome.SKIPPED and "awaits verification" in again[0].detail


def test_an_explicit_refusal_is_a_failure_and_leaves_no_cooldown(sim):
    sim.add_fault(FaultRule("broker-0", path="/unload", status=412, body='{"reason": "Invalid bundle range"}'))
    records, state = executor_for(sim).apply(Plan("t", "t", 0, (_unload(sim),)), ExecutorState())
    assert records[0].outcome is Outcome.FAILED and "412" in records[0].detail
    assert state.pending == () and state.last_moved == {}


def test_verification_records_where_each_bundle_went(sim):
    planned = _unload(sim, index=0)
    elsewhere = _unload(sim, index=1)
    executor = executor_for(sim, verify_after_seconds=60)
    records, state = executor.apply(Plan("t", "t", 0, (planned, elsewhere)), ExecutorState())
    assert all(r.outcome is Outcome.EXECUTED for r in records)
    sim.cluster.advance(UNLOAD_WINDOW_S)  # past the window in which another unload of it would answer 500
    sim.cluster.unload(elsewhere.bundle, sim.cluster.by_name("broker-1").id)  # someone else moves it again
    sim.cluster.advance(90)
    verified, state = executor.verify(state)
    outcomes = {r.action.bundle: r.outcome for r in verified}
    assert outcomes == {planned.bundle: Outcome.MOVED_AS_PLANNED, elsewhere.bundle: Outcome.MOVED_ELSEWHERE}
    assert state.pending == ()


def test_split_checks_the_bundle_still_exists(sim):
    bundle = sim.cluster.owned_by(sim.cluster.by_name("broker-0").id)[0]
    split = Split(bundle, sim.cluster.by_name("broker-0").id, "range_equally_divide", (), "hot")
    records, _ = executor_for(sim).apply(Plan("t", "t", 0, (split,)), ExecutorState())
    assert records[0].outcome is Outcome.EXECUTED and bundle not in sim.cluster.all_bundles()
    records, _ = executor_for(sim, cooldown_minutes=0).apply(Plan("t", "t", 0, (split,)), ExecutorState())
    assert records[0].outcome is Outcome.SKIPPED and "no longer exists" in records[0].detail
