"""Every human control does exactly what it says or fails loudly: the kill switch fails safe, an unknown
PULSAR_LB_* variable stops the command, the commands reach the running daemon's state (or say they cannot)
and ``operator pause`` / ``resume`` stop and restart it — end to end against the simulator over loopback."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from prometheus_client import generate_latest
from structlog.testing import capture_logs

from pulsar_lb_operator import cli
from pulsar_lb_operator.act.safety import OFF_VALUES, Safety, switch_on
from pulsar_lb_operator.records import Outcome
from pulsar_lb_operator.run import control_api, status_page
from pulsar_lb_operator.run.settings import OTHER_ENVIRONMENT, resolve
from pulsar_lb_operator.store.control import ControlError, ControlFile
from pulsar_lb_operator.store.statefile import InstanceLock
from pulsar_lb_operator.strategies.config import ConfigError
from tests.operator.test_workflows import cli_args, make, running, sent_unloads
from tests.operator.test_workflows import sim as sim

ACT_NOW = ["--set", "loadBalancerAvgShedderHitCountHighThreshold=1", "--set", "pauseSeconds=0"]


def live_rebalance(sim, capsys):
    code = cli.main(["rebalance", "--no-dry-run", "--admin-url", sim.admin_url, *ACT_NOW])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------- the kill switch


@pytest.mark.parametrize("command", [["rebalance", "--no-dry-run"], ["run", "--no-dry-run"], ["drain", "b:8080"]])
def test_a_typo_of_the_kill_switch_variable_is_exit_2_and_nothing_is_sent(sim, tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PULSAR_LB_KILLSWITCH", "1")
    assert cli.main([*command, "--admin-url", sim.admin_url, *ACT_NOW]) == 2
    err = capsys.readouterr().err
    assert err.startswith("operator: error: unknown environment variable PULSAR_LB_KILLSWITCH (did you mean ")
    assert "PULSAR_LB_KILL_SWITCH?" in err and len(err.strip().splitlines()) == 1
    assert sim.mutating_requests() == []


@pytest.mark.parametrize(
    ("value", "stops"),
    [(v, True) for v in ("enabled", "1", "TRUE", "stop", " y ")]
    + [(v, False) for v in ("0", "false", "No", " off ", "")],
)
def test_any_value_but_an_explicit_false_stops_every_call(sim, tmp_path, monkeypatch, capsys, value, stops):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PULSAR_LB_KILL_SWITCH", value)
    code, out, _ = live_rebalance(sim, capsys)
    assert code == 0 and ("kill switch: environment variable PULSAR_LB_KILL_SWITCH is set" in out) is stops
    assert bool(sent_unloads(sim)) is not stops


def test_the_switch_is_read_fail_safe():
    assert [v for v in OFF_VALUES if switch_on(v)] == [] and not switch_on(None)
    assert all(switch_on(v) for v in ("1", "on", "yes", "enabled", "of", "flase", "-"))  # a typo of off stops


def test_a_pause_file_that_cannot_be_checked_stops_too(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "PAUSE").write_text("not even JSON")
    assert "file" in Safety(kill_switch_file=str(locked / "PAUSE")).killed()  # any content: on
    assert Safety(kill_switch_file=str(locked)).killed()  # a directory: on, never opened
    if os.getuid() != 0:  # root reads through any permission
        locked.chmod(0)
        try:
            assert "cannot be checked" in Safety(kill_switch_file=str(locked / "PAUSE")).killed()
        finally:
            locked.chmod(0o755)
    assert Safety(kill_switch_file=str(tmp_path / "absent")).killed() is None


def test_the_legitimate_non_setting_variables_are_accepted_and_listed_once():
    environ = {name: "x" for name in OTHER_ENVIRONMENT} | {"PULSAR_LB_DRY_RUN": "true", "OPS_JWT": "t"}
    # a Service named pulsar-lb-operator in the namespace: Kubernetes' link variables, set together
    environ |= {
        "PULSAR_LB_OPERATOR_SERVICE_HOST": "10.0.0.1",
        "PULSAR_LB_OPERATOR_SERVICE_PORT": "8090",
        "PULSAR_LB_OPERATOR_SERVICE_PORT_HTTP": "8090",
        "PULSAR_LB_OPERATOR_PORT": "tcp://10.0.0.1:8090",
        "PULSAR_LB_OPERATOR_PORT_8090_TCP_ADDR": "10.0.0.1",
    }
    assert resolve({}, environ, {})[0].dryRun is True
    assert resolve({"tokenEnv": "PULSAR_LB_ADMIN_JWT"}, {"PULSAR_LB_ADMIN_JWT": "t"}, {})[0].tokenEnv
    for typo in ("PULSAR_LB_METRIC_PORT", "PULSAR_LB_DRYRUN", "PULSAR_LB_OPERATOR_PORT_8090_TCP"):
        with pytest.raises(ConfigError, match=f"unknown environment variable {typo}"):
            resolve({}, {typo: "1"}, {})  # without its service's SERVICE_HOST it is no link variable


# ---------------------------------------------------------------------------------------------- reaching the daemon


def test_drain_from_another_directory_is_an_error_not_a_request_nobody_reads(sim, tmp_path, monkeypatch, capsys):
    """The daemon was started in its own directory with the default stateFile (state/operator-state.json)."""
    home, elsewhere = tmp_path / "daemon", tmp_path / "elsewhere"
    elsewhere.mkdir()
    state = home / "state" / "operator-state.json"
    busy = sim.cluster.by_name("broker-0").id
    with InstanceLock(state):
        make(sim, tmp_path, stateFile=str(state)).leads()
        monkeypatch.chdir(elsewhere)
        monkeypatch.setenv("PULSAR_ADMIN_URL", sim.admin_url)
        for command in (["drain", busy], ["approve", "3f2a9c1b7e01"], ["pause"], ["proposals"]):
            assert cli.main(command) == 2
            err = capsys.readouterr().err
            assert f"no operator state at {elsewhere}/state/operator-state.json (stateFile is relative to" in err
        assert not (elsewhere / "state").exists() and ControlFile(state).read().drains == {}
        # the daemon's own settings reach it from anywhere: PULSAR_LB_CONFIG, as the chart sets it in the pod
        (tmp_path / "settings.yaml").write_text(f"stateFile: {state}\n")
        monkeypatch.setenv("PULSAR_LB_CONFIG", str(tmp_path / "settings.yaml"))
        assert cli.main(["drain", busy]) == 0
        assert "the daemon moves its bundles" in capsys.readouterr().out
        assert busy in ControlFile(state).read().drains


class Standby:
    """Another replica holds the Lease."""

    def is_leader(self) -> bool:
        return False

    holder = "pulsar-lb-operator-7d9f-abcde"  # LeaseElector.holder: the holder last seen in the Lease

    def annotation(self, key: str) -> None:  # nothing on its Lease (no shared pause)
        return None


def test_a_request_nobody_will_carry_out_is_an_error(sim, tmp_path, capsys):
    busy = sim.cluster.by_name("broker-0").id

    def refused(*command):
        assert cli.main(cli_args(tmp_path, sim, *command)) == 2
        return capsys.readouterr().err

    with running(sim, tmp_path) as daemon:  # approval: auto
        result = daemon.run_once()
        assert "approval is auto" in refused("approve", result.cycle_id)
        daemon.elector = Standby()
        daemon.leads()
        assert "standby (pulsar-lb-operator-7d9f-abcde leads)" in refused("drain", busy)
    # the daemon has stopped: its state is there, nobody holds the lock
    assert "no daemon runs on" in refused("drain", busy)
    # another process holds it (a one-shot rebalance, which reads no drain after its start): the record left
    # behind names the daemon's pid, not this one's
    control = ControlFile(tmp_path / "state.json")
    control.update(lambda doc: setattr(doc, "daemon", dataclasses.replace(doc.daemon, pid=os.getpid() + 1)))
    with InstanceLock(tmp_path / "state.json"):
        assert "not a daemon that has started cycling" in refused("drain", busy)
    assert ControlFile(tmp_path / "state.json").read().drains == {}


def test_pause_and_resume_stop_and_restart_the_running_daemon(sim, tmp_path, capsys):
    with running(sim, tmp_path) as daemon:
        assert cli.main(cli_args(tmp_path, sim, "pause", "--reason", "incident 4211")) == 0
        assert f"paused: the daemon (pid {os.getpid()}) sends nothing" in capsys.readouterr().out
        exported = generate_latest(daemon.metrics.registry).decode()
        assert 'pulsar_lb_operator_kill_switch{cluster="sim"} 1.0' in exported  # at once, not at the next cycle
        switch = status_page.status(daemon)["killSwitch"]
        assert switch["on"] and switch["reason"] == "incident 4211" and "@" in switch["by"] and switch["since"]
        result = daemon.run_once()
        assert result.records and not sent_unloads(sim)
        assert all("paused by" in r.detail and "incident 4211" in r.detail for r in result.records)
        assert cli.main(cli_args(tmp_path, sim, "resume")) == 0
        assert "acts again" in capsys.readouterr().out
        assert status_page.status(daemon)["killSwitch"] == {"on": False}
        sim.cluster.advance(60)
        assert [r for r in daemon.run_once().records if r.outcome is Outcome.EXECUTED]


def test_a_second_pause_keeps_the_first_ones_note(sim, tmp_path, capsys):
    """The first pause's reason is the incident's: a second `operator pause` (or the page's) while paused says so
    and changes nothing; one resume ends the pause."""
    with running(sim, tmp_path) as daemon:
        assert cli.main(cli_args(tmp_path, sim, "pause", "--reason", "incident 4211")) == 0
        first = status_page.status(daemon)["killSwitch"]
        capsys.readouterr()
        assert cli.main(cli_args(tmp_path, sim, "pause", "--reason", "me too")) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"already paused by {first['by']} (incident 4211): its note is kept; paused:")
        assert status_page.status(daemon)["killSwitch"] == first
        said = control_api._carry_out(daemon, "pause", "", {"reason": "from the page"}, "127.0.0.1")
        assert said.startswith("already paused by") and status_page.status(daemon)["killSwitch"] == first
        assert cli.main(cli_args(tmp_path, sim, "resume")) == 0
        assert status_page.status(daemon)["killSwitch"] == {"on": False}


def test_the_emergency_stop_goes_through_settings_with_an_error_elsewhere(sim, tmp_path, capsys, monkeypatch):
    """A ConfigMap edited badly while the daemon runs on the one it read: `operator pause` still finds the daemon's
    pause by its stateFile and says what it left out; other commands refuse the settings as before."""
    config = tmp_path / "settings.yaml"
    errors = "maxUnloadPerCycle: 3\nloadBalancerSheddingIntervalMinutes: 0\n"
    config.write_text(f"stateFile: {tmp_path / 'state.json'}\n{errors}")
    monkeypatch.setenv("PULSAR_LB_MAX_UNLOADS_PER_CYCLE", "ten")
    with running(sim, tmp_path) as daemon:
        assert cli.main(["pause", "--config", str(config), "--reason", "incident 4211"]) == 0
        out, err = capsys.readouterr()
        assert "unknown configuration key 'maxUnloadPerCycle'" in err and "going on with stateFile" in err
        assert "paused: the daemon" in out
        assert status_page.status(daemon)["killSwitch"]["reason"] == "incident 4211"
        assert cli.main(["drain", "broker-0", "--config", str(config)]) == 2  # the rest still needs good settings
        assert cli.main(["resume", "--config", str(config)]) == 0
        assert status_page.status(daemon)["killSwitch"] == {"on": False}
    config.write_text("stateFile: 7\nkillSwitchFile: []\n")  # where the pause is itself: no guess
    assert cli.main(["pause", "--config", str(config)]) == 2


def test_a_dry_run_beside_the_running_daemon_previews_on_its_state_and_writes_nothing(sim, tmp_path, capsys):
    """In the daemon's pod (its settings, its state), `operator rebalance` previews: it reads the daemon's state
    without its lock and writes nothing back; a live one is still exit 3, and --reset-state is refused."""
    with running(sim, tmp_path) as daemon:
        daemon.run_once()
        state = tmp_path / "state.json"
        before, sent = state.read_bytes(), len(sim.mutating_requests())
        assert cli.main(cli_args(tmp_path, sim, "rebalance")) in (0, 1)
        out, err = capsys.readouterr()
        assert f"the daemon (pid {os.getpid()}) holds" in err and "writes nothing" in err and "Plan (dry run)" in out
        assert state.read_bytes() == before and len(sim.mutating_requests()) == sent
        assert cli.main(cli_args(tmp_path, sim, "rebalance", "--reset-state")) == 2
        assert cli.main(cli_args(tmp_path, sim, "rebalance", "--no-dry-run")) == 3
        assert state.read_bytes() == before and len(sim.mutating_requests()) == sent


def test_a_control_file_that_is_not_json_stops_the_start_and_fails_each_cycle_in_one_line(sim, tmp_path):
    """At start, exit 2 naming the file (as an unusable state file); broken while the daemon runs, each cycle fails
    with that one line, on the page too, instead of a traceback a cycle ("cycle crashed") balancing nothing."""
    broken = '{"format": "pulsar-lb-control/1", "proposals": {}, "drains": {}'
    control = tmp_path / "state.json.control.json"
    control.write_text(broken)
    with pytest.raises(ControlError, match=r"is not valid JSON.*repair or remove it") as refused:
        make(sim, tmp_path)
    assert refused.value.exit_code == 2
    control.unlink()
    with running(sim, tmp_path, approval="manual") as daemon, capture_logs() as logs:
        control.write_text(broken)
        assert daemon.run_once() is None
        daemon.approvals_due()
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["cycle failed"]
    assert "is not valid JSON" in daemon.failure[1] and not any("exc_info" in e for e in logs)


def test_resume_cannot_lift_the_environments_switch_and_says_so(sim, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PULSAR_LB_KILL_SWITCH", "1")
    with running(sim, tmp_path):
        assert cli.main(cli_args(tmp_path, sim, "pause")) == 0
        monkeypatch.delenv("PULSAR_LB_KILL_SWITCH")  # the command's environment is not the daemon's
        assert cli.main(cli_args(tmp_path, sim, "resume")) == 2
    err = capsys.readouterr().err
    assert "pause removed, but the environment variable PULSAR_LB_KILL_SWITCH still stops every action" in err


def test_a_pause_without_a_running_daemon_holds_for_the_next_start(sim, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["pause"]) == 2  # no operator state here at all: nobody would ever read it
    assert "no operator state at" in capsys.readouterr().err
    assert live_rebalance(sim, capsys)[0] == 0  # now a state is here (the cycle also acted)
    before = len(sim.requests)
    assert cli.main(["pause", "--reason", "maintenance"]) == 0
    assert "no daemon runs on" in capsys.readouterr().out
    code, out, _ = live_rebalance(sim, capsys)
    assert code == 0 and "paused by" in out and sent_unloads(sim, before) == []
    assert json.loads((tmp_path / "state" / "operator-state.json.pause").read_text())["reason"] == "maintenance"
