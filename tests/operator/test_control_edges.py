"""The edges of the human controls a person meets first, end to end against the simulator over loopback: a pause
that arrives mid-cycle, an approval while paused or after the cluster moved, a drain the rails hold back, and the
emergency stop when the control file is broken."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

from prometheus_client import generate_latest

from pulsar_lb_operator import cli
from pulsar_lb_operator.records import Outcome
from pulsar_lb_operator.run import shutdown, status_page
from pulsar_lb_operator.store.control import ControlFile
from pulsar_lb_operator.strategies import Unload
from tests.operator.test_controls import Standby
from tests.operator.test_workflows import cli_args, running, sent_unloads, user_bundles
from tests.operator.test_workflows import sim as sim


class _PausedDuringTheRead:
    """Pulsar's balancer read right before the first call, with a person pausing the operator meanwhile."""

    def __init__(self, guard, pause_file):
        self.guard, self.pause_file = guard, pause_file

    def __getattr__(self, name):
        return getattr(self.guard, name)

    def engage(self):
        verdict = self.guard.engage()
        cli.main(["pause", "--set", f"stateFile={os.path.dirname(self.pause_file)}/state.json"])
        return verdict


def test_a_pause_that_arrives_while_the_first_call_is_prepared_stops_that_call(sim, tmp_path, capsys):
    with running(sim, tmp_path) as daemon:
        daemon.executor.guard = _PausedDuringTheRead(daemon.executor.guard, daemon.settings.kill_switch_file())
        result = daemon.run_once()
    assert result.records and sent_unloads(sim) == []
    assert all(r.outcome is Outcome.SKIPPED and "paused by" in r.detail for r in result.records)
    assert result.state.executor.pending == ()  # nothing left counted as sent


def _proposal(sim, tmp_path, daemon):
    result = daemon.run_once()
    unloads = [a for a in result.plan.actions if isinstance(a, Unload)]
    assert unloads and sim.mutating_requests() == []
    return result.cycle_id, unloads


def test_an_approval_while_paused_is_refused_and_the_proposal_waits(sim, tmp_path, capsys):
    with running(sim, tmp_path, approval="manual") as daemon:
        proposal, _ = _proposal(sim, tmp_path, daemon)
        assert cli.main(cli_args(tmp_path, sim, "pause")) == 0
        assert cli.main(cli_args(tmp_path, sim, "approve", proposal)) == 2
        assert "the kill switch is on" in capsys.readouterr().err
        control = ControlFile(tmp_path / "state.json")
        assert control.read().proposals[proposal]["status"] == "pending"
        assert cli.main(cli_args(tmp_path, sim, "resume")) == 0
        assert cli.main(cli_args(tmp_path, sim, "approve", proposal)) == 0
        # paused again between the approval and the daemon's turn: it waits, approved, and nothing is sent
        assert cli.main(cli_args(tmp_path, sim, "pause")) == 0
        daemon.approvals_due()
        assert sent_unloads(sim) == [] and control.read().proposals[proposal]["status"] == "approved"
        assert cli.main(cli_args(tmp_path, sim, "resume")) == 0
        daemon.approvals_due()
    assert sent_unloads(sim) and control.read().proposals[proposal]["status"] == "executed"


def test_an_approved_proposal_not_yet_run_can_be_withdrawn_while_paused(sim, tmp_path, capsys):
    """Approved, then paused before the daemon's turn: `operator reject` withdraws it, and the resume sends
    nothing; one that ran cannot be rejected."""
    with running(sim, tmp_path, approval="manual") as daemon:
        proposal, _ = _proposal(sim, tmp_path, daemon)
        assert cli.main(cli_args(tmp_path, sim, "approve", proposal)) == 0
        assert cli.main(cli_args(tmp_path, sim, "pause")) == 0
        assert cli.main(cli_args(tmp_path, sim, "reject", proposal)) == 0
        assert cli.main(cli_args(tmp_path, sim, "resume")) == 0
        daemon.approvals_due()
        control = ControlFile(tmp_path / "state.json")
        assert sent_unloads(sim) == [] and control.read().proposals[proposal]["status"] == "rejected"
        again, _ = _proposal(sim, tmp_path, daemon)
        assert cli.main(cli_args(tmp_path, sim, "approve", again)) == 0
        daemon.approvals_due()
        capsys.readouterr()
        assert cli.main(cli_args(tmp_path, sim, "reject", again)) == 2
        assert "is executed, not pending or approved" in capsys.readouterr().err


def test_an_approved_proposal_moves_nothing_onto_a_broker_drained_since(sim, tmp_path, capsys):
    with running(sim, tmp_path, approval="manual") as daemon:
        proposal, unloads = _proposal(sim, tmp_path, daemon)
        target = unloads[0].destination
        assert cli.main(cli_args(tmp_path, sim, "drain", target)) == 0
        assert "proposed; nothing moves until they are approved" in capsys.readouterr().out
        assert cli.main(cli_args(tmp_path, sim, "approve", proposal)) == 0
        daemon.approvals_due()
    sent = sent_unloads(sim)
    assert not [r for r in sent if target in r.query.replace("%3A", ":")]
    outcomes = ControlFile(tmp_path / "state.json").read().proposals[proposal]["outcomes"]
    assert any("is being drained" in o["detail"] for o in outcomes)


def test_an_approved_action_whose_bundle_moved_since_is_not_sent(sim, tmp_path, capsys):
    with running(sim, tmp_path, approval="manual") as daemon:
        proposal, unloads = _proposal(sim, tmp_path, daemon)
        moved = unloads[0]
        elsewhere = next(b for b in sim.cluster.brokers.values() if b.id not in (moved.source, moved.destination))
        sim.cluster.unload(moved.bundle, elsewhere.id)  # someone moved it by hand meanwhile
        sim.cluster.assign(moved.bundle)  # and a client's lookup placed it there
        assert sim.cluster.owner_of(moved.bundle) == elsewhere.id
        assert cli.main(cli_args(tmp_path, sim, "approve", proposal)) == 0
        daemon.approvals_due()
    outcomes = ControlFile(tmp_path / "state.json").read().proposals[proposal]["outcomes"]
    (mine,) = [o for o in outcomes if o["bundle"] == moved.bundle]
    assert mine["outcome"] == "skipped" and "no longer owns the bundle" in mine["detail"]
    assert sim.cluster.owner_of(moved.bundle) == elsewhere.id
    assert [o for o in outcomes if o["outcome"] == "executed"]  # the rest went ahead


def test_an_approved_execution_is_on_the_status_page_and_in_the_metrics(sim, tmp_path, capsys):
    with running(sim, tmp_path, approval="manual") as daemon:
        proposal, _ = _proposal(sim, tmp_path, daemon)
        assert cli.main(cli_args(tmp_path, sim, "approve", proposal)) == 0
        daemon.approvals_due()
        shown = status_page.status(daemon)["cycles"][0]
        exported = generate_latest(daemon.metrics.registry).decode()
    assert shown["id"] == proposal and [a for a in shown["actions"] if a["outcome"] == "executed"]
    assert 'outcome="executed"' in exported and "pulsar_lb_operator_actions_total" in exported


def test_a_drain_moves_what_it_can_while_the_rails_hold_some_bundles_back(sim, tmp_path, capsys):
    busy = sim.cluster.by_name("broker-0").id
    namespaces = sorted({b.rsplit("/", 1)[0] for b in user_bundles(sim, busy)})
    held = namespaces[0]
    with running(sim, tmp_path, excludedNamespaces=[held], maxUnloadsPerBroker=3) as daemon:
        assert cli.main(cli_args(tmp_path, sim, "drain", busy)) == 0
        for _ in range(12):
            daemon.run_once()
            sim.cluster.advance(60)
    left = user_bundles(sim, busy)
    assert left and {b.rsplit("/", 1)[0] for b in left} == {held}  # only the excluded namespace stays


def test_the_emergency_stop_works_when_the_control_file_is_broken(sim, tmp_path, capsys):
    with running(sim, tmp_path) as daemon:
        (tmp_path / "state.json.control.json").write_text('{"format": "pulsar-lb-control/1", "proposals": []}')
        assert cli.main(cli_args(tmp_path, sim, "pause", "--reason", "incident")) == 0
        assert "paused" in capsys.readouterr().out
        with open(daemon.settings.kill_switch_file()) as pause:
            assert json.load(pause)["reason"] == "incident"
        assert cli.main(cli_args(tmp_path, sim, "resume")) == 0
        assert not os.path.exists(daemon.settings.kill_switch_file())


def test_drain_wait_follows_the_redirect_to_the_broker_being_drained(sim, tmp_path, capsys):
    other = next(b.id for b in sim.cluster.brokers.values() if b.id not in sim.admin_url)
    with running(sim, tmp_path) as daemon:
        stop = threading.Event()

        def cycles():
            while not stop.is_set():
                daemon.run_once()
                sim.cluster.advance(60)
                time.sleep(0.05)

        worker = threading.Thread(target=cycles, daemon=True)
        worker.start()
        try:
            code = cli.main(cli_args(tmp_path, sim, "drain", other, "--wait", "--timeout", "60"))
        finally:
            stop.set()
            worker.join(30)
    assert code == 0 and f"{other} is drained" in capsys.readouterr().out
    assert user_bundles(sim, other) == []


def test_sighup_stops_the_daemons_work_as_sigterm_does_unless_the_process_was_started_ignoring_it():
    before = signal.getsignal(signal.SIGHUP)
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # started from a terminal
        stop = threading.Event()
        with shutdown.on_signals(stop):
            os.kill(os.getpid(), signal.SIGHUP)
            assert stop.wait(5)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # started under nohup: it stays ignored
        stop = threading.Event()
        with shutdown.on_signals(stop):
            os.kill(os.getpid(), signal.SIGHUP)
            assert not stop.wait(1)
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_drain_nobody_can_check_says_so_and_the_daemon_names_it(sim, tmp_path, capsys):
    state = ["--set", f"stateFile={tmp_path / 'state.json'}"]
    with running(sim, tmp_path) as daemon:
        assert cli.main(["drain", "10.9.9.9:8080", *state]) == 0  # no admin URL: the command cannot tell
        assert "not checked against the active brokers" in capsys.readouterr().out
        result = daemon.run_once()
    assert "drain 10.9.9.9:8080: not an active broker, nothing to move" in result.plan.notes
    assert "not an active broker" in capsys.readouterr().err  # the daemon's log, at warning


def test_the_proposals_listing_marks_the_actions_the_rails_would_hold_back(sim, tmp_path, capsys):
    with running(sim, tmp_path, approval="manual") as daemon:
        daemon.run_once()
        capsys.readouterr()
        assert cli.main(cli_args(tmp_path, sim, "proposals")) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("    unload")]
    held = [line for line in listed if "held back when proposed: max unloads per broker (5)" in line]
    assert len(listed) > 5 and len(held) == len(listed) - 5  # the per-broker cap of 5 holds back the rest


def test_draining_the_last_broker_that_could_take_bundles_is_refused(sim, tmp_path, capsys):
    brokers = sorted(b.id for b in sim.cluster.alive_brokers())
    *first, last = brokers
    with running(sim, tmp_path):
        for broker in first:
            assert cli.main(cli_args(tmp_path, sim, "drain", broker)) == 0
        capsys.readouterr()
        assert cli.main(cli_args(tmp_path, sim, "drain", last)) == 2
        err = capsys.readouterr().err
        assert f"draining {last} would leave no active broker to take its bundles" in err
        assert "Traceback" not in err
        assert last not in ControlFile(tmp_path / "state.json").read().drains  # nothing written
        assert cli.main(cli_args(tmp_path, sim, "undrain", first[0])) == 0
        assert cli.main(cli_args(tmp_path, sim, "drain", last)) == 0  # one broker left to take them again


def test_an_approval_in_dry_run_says_it_only_logs(sim, tmp_path, capsys):
    with running(sim, tmp_path, approval="manual", dryRun=True) as daemon:
        proposal = daemon.run_once().cycle_id
        capsys.readouterr()
        assert cli.main(cli_args(tmp_path, sim, "approve", proposal)) == 0
        assert "in dry run the daemon only logs its actions" in capsys.readouterr().out
        daemon.approvals_due()
    assert sent_unloads(sim) == []


def test_undrain_is_refused_by_a_standby_and_kept_for_the_next_daemon_where_none_runs(sim, tmp_path, capsys):
    broker = sim.cluster.by_name("broker-0").id
    control = ControlFile(tmp_path / "state.json")
    with running(sim, tmp_path) as daemon:
        assert cli.main(cli_args(tmp_path, sim, "drain", broker)) == 0
        daemon.elector = Standby()
        daemon.leads()
        capsys.readouterr()
        assert cli.main(cli_args(tmp_path, sim, "undrain", broker)) == 2
        assert "standby" in capsys.readouterr().err and broker in control.read().drains
        assert cli.main(cli_args(tmp_path, sim, "pause")) == 0
        assert "but pulsar-lb-operator-7d9f-abcde leads and still acts" in capsys.readouterr().out
        assert cli.main(cli_args(tmp_path, sim, "resume")) == 0
        assert "it acts only once it leads" in capsys.readouterr().out
    assert cli.main(cli_args(tmp_path, sim, "undrain", broker)) == 0  # nobody runs: kept for the next daemon
    assert "the next daemon on it starts without this drain" in capsys.readouterr().out
    assert control.read().drains == {}


def test_a_rebalance_on_another_state_file_honours_that_states_pause(sim, tmp_path, capsys):
    other = tmp_path / "elsewhere.json"
    rebalance = ["rebalance", "--admin-url", sim.admin_url, "--state", str(other)]
    rebalance += ["--set", f"stateFile={tmp_path / 'state.json'}"]  # the settings' own state is another
    assert cli.main([*rebalance, "--dry-run"]) == 0
    assert cli.main(["pause", "--set", f"stateFile={other}"]) == 0
    capsys.readouterr()
    assert cli.main([*rebalance, "--no-dry-run"]) == 0  # the second cycle completes AvgShedder's hit count
    assert sent_unloads(sim) == [] and "kill switch: paused by" in capsys.readouterr().out
