"""``operator rehearse``: the shipped (quick) matrix is clean, and each column catches what it names.

The negative tests break one safety mechanism on purpose and check that the rehearsal, judging only
from the outside (request log, state file, log lines), reports it: a rehearsal that cannot fail would
prove nothing.
"""

import sys

import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.act.executor import Executor
from pulsar_lb_operator.sandbox import rehearse

UNLOAD_500 = ("*:PUT:/unload:status-after=500",)


@pytest.fixture(scope="module")
def scenario():
    return rehearse.rehearsal_scenario("demo")


@pytest.fixture(scope="module")
def quick_matrix():
    code, tallies = rehearse.rehearse("demo", quick=True)
    return code, tallies


def test_the_quick_matrix_covers_every_endpoint_and_every_process_fault(quick_matrix):
    _, tallies = quick_matrix
    names = " | ".join(t.case for t in tallies)
    for label, method, _ in rehearse.endpoints("sim"):
        for kind in rehearse.QUICK_KINDS:
            assert f"{label} ({method}) {kind}" in names
    for special in rehearse.SPECIAL_NAMES.values():
        assert special in names


def test_every_case_really_injected_faults(quick_matrix):
    """A case whose faults never fired rehearsed nothing."""
    _, tallies = quick_matrix
    assert [t.case for t in tallies if t.faults_injected == 0] == []


@pytest.mark.parametrize("column", rehearse.Tally.COLUMNS[1:])
def test_the_quick_matrix_is_clean(quick_matrix, column):
    code, tallies = quick_matrix
    dirty = {t.case: t.notes[:3] for t in tallies if getattr(t, column)}
    assert dirty == {} and code == 0


def test_an_operator_without_rails_is_caught(scenario, monkeypatch):
    monkeypatch.setattr(Executor, "_rail", lambda self, *args: None)
    tally = rehearse.run_case(scenario, "no rails", UNLOAD_500)
    assert tally.rail_violations > 0 and any("(cap 5)" in n for n in tally.notes)
    assert tally.double_actions > 0  # the same bundles again, one cycle after a 500


def test_an_operator_that_forgets_is_caught(scenario, monkeypatch):
    from pulsar_lb_operator.store import statefile

    monkeypatch.setattr(statefile, "save", lambda path, state: None)
    tally = rehearse.run_case(scenario, "no state", UNLOAD_500)
    assert tally.state_lost > 0


def test_an_operator_that_logs_its_token_is_caught(scenario, monkeypatch):
    from pulsar_lb_operator.run import daemon

    original = daemon.Daemon.run_once

    def leaky(self):
        print(f"connecting with {self.client._token}", file=sys.stderr)
        return original(self)

    monkeypatch.setattr(daemon.Daemon, "run_once", leaky)
    tally = rehearse.run_case(scenario, "leaky", ())
    assert tally.secrets_in_logs == 6  # one per cycle


def test_a_crashing_cycle_is_caught(scenario, monkeypatch):
    from pulsar_lb_operator.run import cycle

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(cycle, "plan_cycle", broken)
    tally = rehearse.run_case(scenario, "bug", ())
    assert tally.daemon_crashes == 6


def test_a_dry_run_that_sends_is_caught(scenario, monkeypatch):
    from pulsar_lb_operator.run.settings import OperatorSettings

    original = OperatorSettings.safety
    monkeypatch.setattr(OperatorSettings, "safety", lambda self, config, dry_run=None: original(self, config, False))
    tally = rehearse.dry_run(scenario)
    assert tally.rail_violations > 0 and "sent in a dry run" in tally.notes[0]


def _pre_fix_origin_check(monkeypatch):
    """The admin client as it was before origins were compared: any port and scheme of a known host."""
    from pulsar_lb_operator.adminapi import origins

    def host_only(self, url):
        host = origins.parse(url).origin.host
        return (None, None) if host in self._hosts else (f"host {host} is not known", None)

    monkeypatch.setattr(origins.KnownOrigins, "_judge", host_only)


@pytest.mark.parametrize("how", sorted(rehearse.STRAYS))
def test_a_client_that_follows_redirects_anywhere_on_a_known_host_is_caught(scenario, monkeypatch, how):
    tally = rehearse.redirected_astray(scenario, how)
    assert tally.sent_astray == 0 and tally.faults_injected > 0  # with the origin check
    _pre_fix_origin_check(monkeypatch)
    tally = rehearse.redirected_astray(scenario, how)
    assert tally.sent_astray > 0 and "reached" in tally.notes[0]
    if how != "redirect-userinfo":  # there requests sends the URL's user name and password in place of the token
        assert "Bearer rehearsal-" in tally.notes[0]


# The lifecycle module as if it were not there: children started plainly and never stopped, directories never
# removed, signals left to kill the process outright.
WITHOUT_LIFECYCLE = """
import atexit, contextlib, runpy, subprocess, sys
from pulsar_lb_operator import lifecycle
atexit.unregister(lifecycle.finish)
lifecycle.spawn = lambda argv, **popen: subprocess.Popen(argv, **popen)
lifecycle.stop = lifecycle.remove = lambda *args, **kwargs: None
lifecycle.cleanup = lifecycle.finish = lambda: None
lifecycle.exit_on_signals = contextlib.nullcontext
sys.argv = ["operator", *sys.argv[1:]]
runpy.run_module("pulsar_lb_operator.cli", run_name="__main__")
"""


@pytest.mark.parametrize("special", ["simulate-sigterm", "demo-sigint", "run-sigterm"])
def test_an_operator_that_leaves_processes_or_directories_behind_is_caught(scenario, monkeypatch, special):
    from pulsar_lb_operator.sandbox import processes

    monkeypatch.setattr(processes, "OPERATOR", [sys.executable, "-c", WITHOUT_LIFECYCLE])
    tally = rehearse.SPECIALS[special](scenario)
    assert tally.left_behind > 0 and any(n.startswith(("still running", "left in")) for n in tally.notes)


def test_the_command_prints_the_table_and_exits_0(capsys):
    code = cli.main(["rehearse", "--only", "unload (PUT) status-after=500"])
    out, err = capsys.readouterr()
    assert code == 0, err
    header, row = out.splitlines()[:2]
    assert header.split("  ")[0] == "case" and header.endswith("secrets in logs  sent astray  left behind")
    assert row.startswith("unload (PUT) status-after=500") and row.split()[-7:] == ["0"] * 7
    assert cli.main(["rehearse", "--only", "no such case"]) == 2
