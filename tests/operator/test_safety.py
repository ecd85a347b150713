"""The safety invariants (docs/safety.md), each against the simulator over loopback.

Caps counted at sending, unknown outcomes counted as done, the last-moment kill switch and stop,
write-ahead state, strict state files, one instance per state, dry run from every source.
"""

import json
import random

import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.act.executor import Executor, Safety
from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.records import ExecutorState, Outcome
from pulsar_lb_operator.run.cycle import CycleContext, OperatorState, run_cycle
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.faults import FaultRule
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import parse_scenario
from pulsar_lb_operator.store import statefile
from pulsar_lb_operator.strategies import LoadBalancerConfig, Plan, Unload
from tests.builders import SMALL_SCENARIO as SMALL


@pytest.fixture
def sim():
    with serve(lambda allocate: SimulatedCluster(parse_scenario(SMALL), allocate)) as served:
        yield served


def unloads(sim, count, src="broker-0", dst="broker-2"):
    source = sim.cluster.by_name(src).id
    owned = sim.cluster.owned_by(source)
    return tuple(Unload(b, source, sim.cluster.by_name(dst).id, "test") for b in owned[:count])


def executor_for(sim, sleep=lambda s: None, **safety):
    clock = lambda: sim.cluster.now_ms / 1000  # noqa: E731
    client = AdminClient(sim.admin_url, retries=1)
    return Executor(client, "sim", Safety(**{"dry_run": False, **safety}), clock=clock, sleep=sleep)


def put_unloads(sim):
    """The unload calls that reached the cluster (one per action: redirects are hops of one call)."""
    hops = [r for r in sim.requests if r.method == "PUT" and r.path.endswith("/unload")]
    return {r.path for r in hops}


def test_unknown_outcomes_count_toward_the_caps_at_sending(sim):
    """Every unload answers 500: still at most max_unloads_per_broker calls, each in cooldown."""
    for name in ("broker-0", "broker-1", "broker-2"):
        sim.add_fault(FaultRule(name, path="/unload", status=504, body="Gateway Timeout"))
    plan = Plan("t", "t", 0, unloads(sim, 3))
    records, state = executor_for(sim, max_unloads_per_broker=2).apply(plan, ExecutorState())
    assert [r.outcome for r in records] == [Outcome.UNKNOWN, Outcome.UNKNOWN, Outcome.SKIPPED]
    assert len(put_unloads(sim)) == 2
    assert state.awaiting() == {a.bundle for a in plan.actions[:2]} == set(state.last_moved)


def test_the_kill_switch_set_during_the_pause_stops_the_next_call(sim, tmp_path):
    switch = tmp_path / "PAUSE"
    executor = executor_for(sim, sleep=lambda s: switch.touch(), kill_switch_file=str(switch), pause_seconds=5)
    records, _ = executor.apply(Plan("t", "t", 0, unloads(sim, 3)), ExecutorState())
    assert [r.outcome for r in records] == [Outcome.EXECUTED, Outcome.SKIPPED, Outcome.SKIPPED]
    assert "kill switch" in records[1].detail and len(put_unloads(sim)) == 1


def test_a_stop_during_the_pause_sends_nothing_more(sim):
    stopped = []
    executor = executor_for(sim, sleep=lambda s: stopped.append(s) or True, pause_seconds=5)  # Event.wait → True
    executor.stop_requested = lambda: bool(stopped)
    records, _ = executor.apply(Plan("t", "t", 0, unloads(sim, 3)), ExecutorState())
    assert [r.outcome for r in records] == [Outcome.EXECUTED, Outcome.SKIPPED, Outcome.SKIPPED]
    assert records[1].detail == "shutting down" and len(put_unloads(sim)) == 1


def test_losing_leadership_stops_the_next_call(sim):
    leader = [True]
    executor = executor_for(sim, sleep=lambda s: leader.__setitem__(0, False), pause_seconds=1)
    executor.fence = lambda: None if leader[0] else "no longer the leader"
    records, _ = executor.apply(Plan("t", "t", 0, unloads(sim, 2)), ExecutorState())
    assert [r.outcome for r in records] == [Outcome.EXECUTED, Outcome.SKIPPED]
    assert records[1].detail == "no longer the leader"


def test_each_attempt_is_on_disk_before_it_is_sent(sim, tmp_path):
    """Write-ahead: at every PUT the simulator received, the state file already held that bundle."""
    path = tmp_path / "state.json"
    seen_at_send = []

    def persist(state):
        statefile.save(path, OperatorState(executor=state))

    original = sim.cluster.unload

    def unload_checking_disk(bundle, *args, **kwargs):
        on_disk = statefile.load(path).executor
        seen_at_send.append(bundle in on_disk.awaiting() and bundle in on_disk.last_moved)
        return original(bundle, *args, **kwargs)

    sim.cluster.unload = unload_checking_disk
    records, _ = executor_for(sim).apply(Plan("t", "t", 0, unloads(sim, 3)), ExecutorState(), persist=persist)
    assert [r.outcome for r in records] == [Outcome.EXECUTED] * 3 and seen_at_send == [True] * 3


def test_a_state_that_cannot_be_written_stops_the_cycle_before_sending(sim):
    def full_disk(_state):
        raise OSError(28, "No space left on device")

    records, state = executor_for(sim).apply(Plan("t", "t", 0, unloads(sim, 2)), ExecutorState(), persist=full_disk)
    assert [r.outcome for r in records] == [Outcome.SKIPPED] * 2 and "state could not be written" in records[0].detail
    assert sim.mutating_requests() == [] and state == ExecutorState()


@pytest.mark.parametrize("body", ["null", "42", '"busy"', "[]", "<html>oops</html>"])
def test_verification_survives_any_answer_from_owned_namespaces(sim, body):
    executor = executor_for(sim, verify_after_seconds=60)
    _, state = executor.apply(Plan("t", "t", 0, unloads(sim, 1)), ExecutorState())
    sim.cluster.advance(90)
    for name in ("broker-0", "broker-1", "broker-2"):
        sim.add_fault(FaultRule(name, path="/ownedNamespaces", status=200, body=body, content_type="application/json"))
    records, later = executor.verify(state)
    assert records == [] and later.pending == state.pending  # postponed, not lost
    sim.clear_faults()
    records, later = executor.verify(later)
    assert [r.outcome for r in records] == [Outcome.MOVED_AS_PLANNED] and later.pending == ()


@pytest.mark.parametrize(
    "content, problem",
    [
        ("[]", "not a pulsar-lb-operator-state/1 document"),
        ("{}", "not a pulsar-lb-operator-state/1 document"),
        ('{"format": "pulsar-lb-operator-state/1", "strategy": 3}', "pulsar-lb-state/1"),
        ("{not json", "is not valid JSON"),
        (
            '{"format": "pulsar-lb-operator-state/1", "strategy": {"format": "pulsar-lb-state/1"}, '
            '"executor": {"lastMoved": {"a/b/0x0_0x1": "yesterday"}, "pending": []}}',
            "lastMoved['a/b/0x0_0x1'] is not a time",
        ),
    ],
)
def test_a_corrupt_state_file_is_refused_never_reset(tmp_path, content, problem):
    path = tmp_path / "state.json"
    path.write_text(content)
    with pytest.raises(statefile.StateFileError) as caught:
        statefile.load(path)
    assert problem in str(caught.value) and "--reset-state" in str(caught.value) and str(path) in str(caught.value)
    assert statefile.load(path, reset=True) == OperatorState()
    assert not path.exists() and len(list(tmp_path.glob("state.json.reset-*"))) == 1  # kept aside


def test_run_and_rebalance_refuse_a_corrupt_state_with_one_line_and_exit_2(live_served, tmp_path, capsys, monkeypatch):
    sim = live_served
    monkeypatch.setenv("PULSAR_ADMIN_URL", sim.admin_url)
    state = tmp_path / "state.json"
    state.write_bytes(b"\xff\xfe garbage")
    for command in ("run", "rebalance"):
        code = cli.main([command, "--set", f"stateFile={state}", "--set", "metricsPort=0"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert str(state) in err and "--reset-state" in err
    assert sim.mutating_requests() == []


def test_a_second_instance_on_the_same_state_exits_3(live_served, tmp_path, capsys, monkeypatch):
    sim = live_served
    monkeypatch.setenv("PULSAR_ADMIN_URL", sim.admin_url)
    state = tmp_path / "state.json"
    with statefile.InstanceLock(state):
        for command in ("run", "rebalance"):
            code = cli.main([command, "--no-dry-run", "--set", f"stateFile={state}", "--set", "metricsPort=0"])
            err = capsys.readouterr().err
            assert code == 3 and "another operator instance is active" in err and err.count("\n") == 1
    assert sim.mutating_requests() == []
    with statefile.InstanceLock(state):  # released by the holder: free again
        pass


@pytest.mark.parametrize("source", ["file", "env", "default"])
def test_dry_run_from_any_source_sends_nothing(live_served, tmp_path, capsys, monkeypatch, source):
    """A dry run calls no mutating endpoint: not an unload, not the builtin shedder's config."""
    sim = live_served
    monkeypatch.setenv("PULSAR_ADMIN_URL", sim.admin_url)
    monkeypatch.chdir(tmp_path)
    sim.cluster.dynamic_config["loadBalancerSheddingEnabled"] = "true"
    args = ["rebalance", "--set", "loadBalancerAvgShedderHitCountHighThreshold=1"]
    args += ["--set", "disableBuiltinShedding=true", "--set", "pauseSeconds=0"]
    if source == "file":
        (tmp_path / "settings.yaml").write_text("dryRun: true\n")
        args += ["--config", str(tmp_path / "settings.yaml")]
    elif source == "env":
        monkeypatch.setenv("PULSAR_LB_DRY_RUN", "true")
    code = cli.main(args)
    out = capsys.readouterr().out
    assert code == 0 and "dry_run (dry run: no call made)" in out
    assert sim.mutating_requests() == []


def test_the_state_of_a_cycle_is_saved_before_each_action_and_after(sim, tmp_path):
    config = LoadBalancerConfig().replace({"loadBalancerAvgShedderHitCountHighThreshold": 1})
    saved = []
    save = lambda s: saved.append(json.loads(json.dumps(s.to_json())))  # noqa: E731
    context = CycleContext(AdminClient(sim.admin_url), "sim", config, executor_for(sim), save=save)
    result = run_cycle(context, OperatorState(), random.Random(1), now_ms=sim.cluster.now_ms)
    sent = [r for r in result.records if r.outcome is Outcome.EXECUTED]
    assert sent and len(saved) == 2 * len(sent)  # one before each call, one after its answer
    first_before = saved[0]["executor"]["pending"]
    assert [p["bundle"] for p in first_before] == [sent[0].action.bundle]
    # mid-cycle, only the unloads already attempted are in the strategy's grace period
    assert set(saved[0]["strategy"]["recentlyUnloaded"]) == {sent[0].action.bundle}
