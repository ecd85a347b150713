"""Audit events: the spool's guarantees, then real pulsar-client against a real binary-protocol broker
(pulsar-lite) on loopback: a cycle's events arrive in order; with the broker down they wait in the
spool and arrive, once each, after it comes back and the operator restarts."""

import io
import json
import socket
import subprocess
import sys

import pytest

from pulsar_lb_operator.cli import main
from pulsar_lb_operator.record.audit import AuditPublisher, Spool, SpoolFullError
from pulsar_lb_operator.record.audit.events import FORMAT, KIND_OF_OUTCOME, CycleContext, record_event
from pulsar_lb_operator.records import Outcome, Record
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.sandbox.demo import run_demo
from pulsar_lb_operator.strategies.config import ConfigError
from pulsar_lb_operator.strategies.plans import Unload
from tests.operator.test_daemon import make_daemon
from tests.pulsar_broker import LiteBroker

TOPIC = "persistent://public/default/pulsar-lb-operator-audit"


def events(n, start=0):
    return [{"kind": "planned", "index": start + i} for i in range(n)]


# ---------------------------------------------------------------------------------------------- spool


def test_spool_resumes_after_the_last_acknowledged_event_on_restart(tmp_path):
    spool = Spool(tmp_path)
    assert spool.append(events(3)) == [1, 2, 3]
    assert [seq for seq, _ in spool.pending()] == [1, 2, 3]
    spool.acknowledge(2)

    again = Spool(tmp_path)  # the operator restarted
    assert [(seq, json.loads(p)["index"]) for seq, p in again.pending()] == [(3, 2)]
    assert again.append(events(1, start=3)) == [4]
    assert again.backlog() == 2


def test_a_fully_acknowledged_spool_is_emptied_and_numbering_goes_on(tmp_path):
    spool = Spool(tmp_path)
    spool.append(events(2))
    spool.acknowledge(2)
    assert (tmp_path / "events.jsonl").stat().st_size == 0
    assert Spool(tmp_path).append(events(1)) == [3]


def test_a_torn_last_line_from_a_crash_is_dropped_not_glued_to_the_next_event(tmp_path):
    Spool(tmp_path).append(events(2))
    with open(tmp_path / "events.jsonl", "ab") as handle:
        handle.write(b'{"kind":"planned","seq":3,"ind')
    spool = Spool(tmp_path)
    assert spool.append(events(1)) == [3]
    assert [seq for seq, _ in spool.pending()] == [1, 2, 3]
    assert all(json.loads(p) for _, p in spool.pending())


def test_a_full_spool_drops_and_counts_events_and_never_raises_into_the_cycle(tmp_path):
    dropped = []
    publisher = AuditPublisher(
        Spool(tmp_path, max_bytes=200), "pulsar://127.0.0.1:1", TOPIC, on_dropped=lambda: dropped.append(1)
    )
    publisher.publish(events(2))  # fits; the sender is not started, so nothing leaves the spool
    publisher.publish(events(5))
    assert len(dropped) == 5
    assert publisher.spool.backlog() == 2
    with pytest.raises(SpoolFullError):
        publisher.spool.append(events(5))


def test_the_brokers_last_sequence_id_is_not_sent_twice_and_a_wiped_spool_is_renumbered(tmp_path):
    spool = Spool(tmp_path)
    spool.append(events(5))
    spool.resume_after(3)  # the broker persisted 1..3 before a crash kept us from recording it
    assert [seq for seq, _ in spool.pending()] == [4, 5]

    wiped = Spool(tmp_path / "new")
    wiped.append(events(2))
    wiped.resume_after(40)  # deduplication remembers 40 from before the spool was lost
    assert [(seq, json.loads(p)["seq"]) for seq, p in wiped.pending()] == [(41, 41), (42, 42)]
    assert Spool(tmp_path / "new").append(events(1)) == [43]


def test_settings_turn_audit_on_with_one_value_and_reject_a_bad_topic():
    settings = OperatorSettings(adminUrl="https://pulsar-broker:8443", auditEnabled=True)
    assert settings.audit().service_url == "pulsar+ssl://pulsar-broker:6651"
    assert settings.audit().spool_dir == "state/audit-spool"
    assert OperatorSettings(adminUrl="http://b:8080").audit().service_url == "pulsar://b:6650"
    with pytest.raises(ConfigError, match="auditTopic"):
        OperatorSettings(auditTopic="audit")
    with pytest.raises(ConfigError, match="auditServiceUrl"):
        OperatorSettings(auditServiceUrl="http://b:6650")


def test_every_outcome_has_an_event_kind_and_a_dry_run_says_so():
    assert set(KIND_OF_OUTCOME) == set(Outcome)
    context = CycleContext("c1", "east", "AvgShedder", dry_run=True)
    unload = Unload("acme/orders/0x00000000_0x40000000", "b1:8080", "b2:8080", "gap 30 points")
    event = record_event(context, Record(unload, Outcome.DRY_RUN, "dry run: no call made", 1000))
    assert event["kind"] == "dry_run" and event["dryRun"] is True and event["action"]["destination"] == "b2:8080"
    failed = record_event(context, Record(unload, Outcome.FAILED, "HTTP 500: boom", 2000))
    assert (failed["kind"], failed["detail"], failed["at"]) == ("failed", "HTTP 500: boom", 2000)


# ------------------------------------------------------------------------------- against a real broker


@pytest.fixture
def broker(tmp_path):
    lite = LiteBroker(tmp_path / "broker").start()
    yield lite
    lite.stop()


def expected_kinds(result):
    outcome = {Outcome.EXECUTED: "executed", Outcome.SKIPPED: "skipped", Outcome.MOVED_AS_PLANNED: "verified"}
    return (
        [outcome[r.outcome] for r in result.verifications]
        + ["plan"]
        + ["planned"] * len(result.plan.actions)
        + [outcome[r.outcome] for r in result.records]
    )


def test_a_consumer_receives_every_event_of_each_cycle_in_order(served, tmp_path, broker):
    daemon = make_daemon(
        served, tmp_path, auditEnabled=True, auditServiceUrl=broker.url, auditSpoolDir=str(tmp_path / "spool")
    )
    results = []
    try:
        for _ in range(4):  # AvgShedder acts on its second hit; the fourth cycle verifies the first moves
            results.append(daemon.run_once())
            served.cluster.advance(60)
        assert daemon.audit.flush(15)
    finally:
        daemon.close(flush_s=0)
    received = broker.read_all(TOPIC)

    assert [e["kind"] for e in received] == [kind for r in results for kind in expected_kinds(r)]
    assert [e["cycleId"] for e in received] == [r.cycle_id for r in results for _ in expected_kinds(r)]
    assert [e["seq"] for e in received] == list(range(1, len(received) + 1))
    assert all(e["format"] == FORMAT and e["cluster"] == "sim" and e["dryRun"] is False for e in received)
    acting = next(r for r in results if r.plan.actions)
    planned = [e["action"] for e in received if e["kind"] == "planned" and e["cycleId"] == acting.cycle_id]
    assert planned == [a.to_json() for a in acting.plan.actions]
    assert {"verified", "executed"} <= {e["kind"] for e in received}
    assert daemon.metrics.audit_published._value.get() == len(received)


def test_with_the_broker_down_events_spool_then_arrive_once_each_after_it_returns(served, tmp_path):
    broker = LiteBroker(tmp_path / "broker").start()
    spool_dir = tmp_path / "spool"
    daemon = make_daemon(served, tmp_path)

    def publisher():
        return AuditPublisher(Spool(spool_dir), broker.url, TOPIC, timeout_s=1, max_backoff_s=0.5).start()

    try:
        daemon.audit = publisher()  # the daemon's own, with short timeouts so the test does not wait
        first = daemon.run_once()
        assert daemon.audit.flush(15)
        delivered_before_outage = daemon.audit.spool.sent

        broker.stop()
        served.cluster.advance(60)
        second = daemon.run_once()
        assert second is not None and second.plan is not None, "the cycle ran although the broker is down"
        assert daemon.audit.spool.backlog() > 0 and not daemon.audit.flush(1)
        daemon.close(flush_s=0)  # the operator restarts while the broker is still down

        broker.start()
        daemon.audit = publisher()
        assert daemon.audit.flush(20)
        received = broker.read_all(TOPIC)
    finally:
        daemon.close(flush_s=0)
        broker.stop()
    assert [e["seq"] for e in received] == list(range(1, len(received) + 1)), "none lost, none twice"
    assert len(received) > delivered_before_outage
    assert [e["cycleId"] for e in received if e["kind"] == "plan"] == [first.cycle_id, second.cycle_id]


def test_a_consumer_sees_the_audit_events_of_a_demo_run(tmp_path, broker):
    out = io.StringIO()
    assert run_demo(out=out, audit_url=broker.url, audit_spool=str(tmp_path / "spool")) == 0
    text = out.getvalue()
    received = broker.read_all(TOPIC)
    cycles = [e for e in received if e["kind"] == "plan"]
    executed = [e for e in received if e["kind"] == "executed"]
    assert f"{len(received)} delivered." in text
    assert len(cycles) == int(text.split(" cycles;")[0].rsplit(" ", 1)[1])
    assert len(executed) == int(text.split(" unloads,")[0].rsplit(" ", 1)[1]) > 0
    assert all(e["action"]["destination"] for e in executed), "every unload names its destination"


def test_a_manual_rebalance_publishes_its_cycle_when_audit_is_on(live_served, tmp_path, broker, monkeypatch):
    monkeypatch.chdir(tmp_path)  # state/operator-state.json and its lock
    argv = ["rebalance", "--admin-url", live_served.admin_url, "--dry-run", "--strategy", "UniformLoadShedder"]
    for setting in (f"auditServiceUrl={broker.url}", "auditEnabled=true", f"auditSpoolDir={tmp_path / 'spool'}"):
        argv += ["--set", setting]
    assert main(argv) == 0
    received = broker.read_all(TOPIC)
    assert received[0]["kind"] == "plan" and received[0]["strategy"] == "UniformLoadShedder"
    assert {e["kind"] for e in received[1:]} == {"planned", "dry_run", "skipped"}  # the per-broker cap holds 6
    assert all(e["dryRun"] is True for e in received)
    planned = {e["actionId"]: e for e in received if e["kind"] == "planned"}
    outcomes = [e for e in received if e["kind"] in ("dry_run", "skipped")]
    assert len(planned) == len(outcomes) == received[0]["plan"]["actionCount"]
    for outcome in outcomes:  # each outcome names its planned action, which said in advance whether it would wait
        deferred = planned[outcome["actionId"]]["deferred"]
        assert (outcome["kind"], outcome["detail"]) == (
            ("skipped", deferred) if deferred else ("dry_run", outcome["detail"])
        )
    assert received[0]["plan"]["deferredCount"] == sum(1 for e in outcomes if e["kind"] == "skipped") == 6


def test_a_broker_that_accepts_and_never_answers_does_not_abort_the_command_at_exit(live_served, tmp_path):
    """pulsar-client left inside a call: the interpreter's exit would abort the process (status 134) with the C++
    runtime's ``terminate called without an active exception``; the command ends as it would otherwise."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (the kernel's backlog) and says nothing
        argv = ["rebalance", "--admin-url", live_served.admin_url, "--dry-run", "--strategy", "UniformLoadShedder"]
        for setting in (
            f"auditServiceUrl=pulsar://127.0.0.1:{silent.getsockname()[1]}",
            "auditEnabled=true",
            f"auditSpoolDir={tmp_path / 'spool'}",
            f"stateFile={tmp_path / 'state.json'}",
        ):
            argv += ["--set", setting]
        done = subprocess.run(
            [sys.executable, "-m", "pulsar_lb_operator.cli", *argv], capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stderr[-600:]
    assert "terminate called" not in done.stderr
    assert "UniformLoadShedder" in done.stdout  # the plan was printed before the end
    assert "audit events not yet delivered" in done.stderr and any((tmp_path / "spool").iterdir())
