"""Drain, review-and-approve and the status page, end to end against the simulator over loopback."""

from __future__ import annotations

import base64
import re
import time
from contextlib import contextmanager

import pytest
import requests

from pulsar_lb_operator import cli
from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.records import Outcome
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from pulsar_lb_operator.store.control import ControlFile
from pulsar_lb_operator.store.statefile import InstanceLock
from pulsar_lb_operator.strategies import LoadBalancerConfig
from pulsar_lb_operator.strategies import bundles as bundle_names
from tests.builders import free_port


@pytest.fixture
def sim():
    """The demo cluster on the wall clock: the commands judge a proposal's age by it, as in real life."""
    epoch_ms = int(time.time() * 1000)
    with serve(lambda allocate: SimulatedCluster(load_scenario("demo"), allocate, epoch_ms)) as served:
        yield served


def make(sim, tmp_path, **settings):
    base = {
        "dryRun": False,
        "pauseSeconds": 0,
        "metricsPort": 0,
        "stateFile": str(tmp_path / "state.json"),
        "historyUri": "",
        "profileUri": "",
        "verifyAfterSeconds": 60,
        "adminUrl": sim.admin_url,
        "cluster": "sim",
    }
    config = LoadBalancerConfig().replace(
        {**sim.cluster.scenario.config, "loadBalancerAvgShedderHitCountHighThreshold": 1}
    )
    client = AdminClient(sim.admin_url, retries=1)
    options = OperatorSettings(**{**base, **settings})
    return Daemon(options, config, client, "sim", clock_ms=lambda: sim.cluster.now_ms)


@contextmanager
def running(sim, tmp_path, **settings):
    """A daemon as `operator run` has it: holding its state's lock, its record in the control file (which its
    first cycle writes; written here at once, so a command may be run before the first cycle)."""
    with InstanceLock(tmp_path / "state.json"):
        daemon = make(sim, tmp_path, **settings)
        daemon.leads()
        yield daemon


CONTROL_TOKEN = "control-token-of-the-tests-0123456789"


def control_token_file(tmp_path):
    path = tmp_path / "control-token"
    path.write_text(CONTROL_TOKEN + "\n")
    return str(path)


def signed_in(port):
    """A browser-like session: signed in with the control token, every post from the page's own origin."""
    session = requests.Session()
    session.headers["Origin"] = f"http://127.0.0.1:{port}"
    answer = session.post(f"http://127.0.0.1:{port}/login", data={"token": CONTROL_TOKEN}, allow_redirects=False)
    assert answer.status_code == 303 and "HttpOnly" in answer.headers["Set-Cookie"]
    return session


def csrf_of(html):
    return re.search(r'name="csrf" value="([0-9a-f]+)"', html).group(1)


def user_bundles(sim, broker_id):
    return [b for b in sim.cluster.owned_by(broker_id) if not bundle_names.is_system_namespace(b.rsplit("/", 1)[0])]


def sent_unloads(sim, since=0):
    return [r for r in sim.requests[since:] if r.method == "PUT" and r.path.endswith("/unload") and r.status != 307]


def cli_args(tmp_path, sim, *args):
    return [*args, "--set", f"stateFile={tmp_path / 'state.json'}", "--set", f"adminUrl={sim.admin_url}"]


def test_drain_empties_a_broker_within_the_caps_and_keeps_it_empty_until_undrain(sim, tmp_path, capsys):
    busy = sim.cluster.by_name("broker-0").id  # 60 % of the bundles
    with running(sim, tmp_path) as daemon:
        assert cli.main(cli_args(tmp_path, sim, "drain", busy)) == 0
        assert "draining" in capsys.readouterr().out
        _drain_for_twelve_cycles(sim, tmp_path, daemon, busy)
    assert user_bundles(sim, busy) == []
    assert cli.main(cli_args(tmp_path, sim, "drain")) == 0 and busy in capsys.readouterr().out
    assert cli.main(cli_args(tmp_path, sim, "undrain", busy)) == 0
    assert ControlFile(tmp_path / "state.json").read().drains == {}


def _drain_for_twelve_cycles(sim, tmp_path, daemon, busy):
    for cycle in range(12):
        before, owners = len(sim.requests), dict(sim.cluster.ownership)
        daemon.run_once()
        made = sent_unloads(sim, before)
        from_busy = [r for r in made if owners.get(r.path.split("/namespaces/")[1].rsplit("/", 1)[0]) == busy]
        assert len(made) <= 10 and len(from_busy) <= 5  # the rails hold for a drain too
        assert not [r for r in made if f"destinationBroker={busy}" in r.query.replace("%3A", ":")]
        if cycle == 4:  # a restart half way: the drain goes on from the control file
            daemon = make(sim, tmp_path)
        sim.cluster.advance(60)


def test_drain_follows_dry_run_and_refuses_an_unknown_broker(sim, tmp_path, capsys):
    busy = sim.cluster.by_name("broker-0").id
    with running(sim, tmp_path, dryRun=True) as daemon:
        assert cli.main(cli_args(tmp_path, sim, "drain", "10.9.9.9:8080")) == 2
        assert "not an active broker" in capsys.readouterr().err
        assert cli.main(cli_args(tmp_path, sim, "drain", busy)) == 0
        assert "in dry run the daemon only logs the moves" in capsys.readouterr().out  # the daemon's dryRun, not ours
        result = daemon.run_once()
    drains = [r for r in result.records if r.action.reason.startswith(f"drain {busy}")]
    assert len(drains) == 5 and {r.outcome for r in drains} == {Outcome.DRY_RUN}
    assert sim.mutating_requests() == []


def test_manual_approval_proposes_then_executes_only_what_was_approved(sim, tmp_path, capsys):
    with running(sim, tmp_path, approval="manual") as daemon:
        _approve_and_reject(sim, tmp_path, capsys, daemon)


def _approve_and_reject(sim, tmp_path, capsys, daemon):
    result = daemon.run_once()
    assert result.plan.actions and sim.mutating_requests() == []  # proposed, not executed
    assert cli.main(cli_args(tmp_path, sim, "proposals")) == 0
    listing = capsys.readouterr().out
    assert result.cycle_id in listing and "pending" in listing and "spread" in listing
    assert cli.main(cli_args(tmp_path, sim, "reject", result.cycle_id)) == 0
    daemon.approvals_due()
    assert sim.mutating_requests() == []
    assert cli.main(cli_args(tmp_path, sim, "approve", result.cycle_id)) == 2  # already decided
    assert "is rejected" in capsys.readouterr().err
    sim.cluster.advance(60)
    second = make(sim, tmp_path, approval="manual").run_once()  # proposals survive a restart
    assert cli.main(cli_args(tmp_path, sim, "approve", second.cycle_id)) == 0
    daemon.approvals_due()
    executed = sent_unloads(sim)
    planned = [a for a in second.plan.actions if a.to_json()["type"] == "unload"]
    assert 0 < len(executed) <= min(len(planned), 10)
    proposal = ControlFile(tmp_path / "state.json").read().proposals[second.cycle_id]
    assert proposal["status"] == "executed" and {o["outcome"] for o in proposal["outcomes"]} <= {"executed", "skipped"}


def test_a_proposal_expires_after_one_shedding_interval(sim, tmp_path, capsys):
    with running(sim, tmp_path, approval="manual") as daemon:
        result = daemon.run_once()
        sim.cluster.advance(daemon.period_s + 1)
        assert cli.main(cli_args(tmp_path, sim, "approve", result.cycle_id)) == 0  # not yet too old by the wall clock
        capsys.readouterr()
        control = ControlFile(tmp_path / "state.json")
        assert control.read().proposals[result.cycle_id]["status"] in ("approved", "expired")
        daemon.approvals_due()  # the daemon's clock says it is too late: nothing is sent
    assert sim.mutating_requests() == []
    assert control.read().proposals[result.cycle_id]["status"] == "expired"


def page(port, auth=None):
    return requests.get(f"http://127.0.0.1:{port}/", auth=auth, timeout=5)


def test_the_status_page_shows_brokers_cycles_proposals_and_drains_and_its_buttons_work(sim, tmp_path):
    port = free_port()
    settings = {"approval": "manual", "metricsPort": port, "metricsHost": "127.0.0.1"}
    with running(sim, tmp_path, controlTokenFile=control_token_file(tmp_path), **settings) as daemon:
        server = daemon._start_probe_server()
        try:
            result = daemon.run_once()
            sim.cluster.advance(60)
            html = page(port).text
            for broker in sim.cluster.active_ids():
                assert broker in html
            assert result.cycle_id in html and "<svg" not in html  # one point: no line yet
            assert "Approve" not in html and "Sign in" in html  # buttons only for the control credential
            browser = signed_in(port)
            html = browser.get(f"http://127.0.0.1:{port}/", timeout=5).text
            assert "Approve" in html and "Sign out" in html
            latest = daemon.run_once()  # the first proposal has expired by now: one interval later
            html = browser.get(f"http://127.0.0.1:{port}/", timeout=5).text
            assert "<svg" in html  # the last hour now has two points per broker
            csrf = csrf_of(html)
            expired = f"http://127.0.0.1:{port}/proposals/{result.cycle_id}/approve"
            assert browser.post(expired, data={"csrf": csrf}, timeout=5).status_code == 409
            url = f"http://127.0.0.1:{port}/proposals/{latest.cycle_id}/reject"
            assert browser.post(url, data={"csrf": "forged"}, timeout=5).status_code == 403
            answer = browser.post(url, data={"csrf": csrf}, timeout=5, allow_redirects=False)
            assert answer.status_code == 303
            assert ControlFile(tmp_path / "state.json").read().proposals[latest.cycle_id]["status"] == "rejected"
            busy = sim.cluster.by_name("broker-0").id
            browser.post(f"http://127.0.0.1:{port}/drains", data={"csrf": csrf, "broker": busy}, timeout=5)
            daemon.run_once()
            status = requests.get(f"http://127.0.0.1:{port}/api/status", timeout=5).json()
            assert status["drains"][busy]["bundlesLeft"] > 0 and status["cycles"][0]["actions"] is not None
            assert status["drains"][busy]["by"] == "status page (127.0.0.1)"
        finally:
            server.shutdown()
            server.server_close()


def test_the_status_page_needs_the_token_when_one_is_configured(sim, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-admin-token\n")
    port = free_port()
    daemon = make(sim, tmp_path, metricsPort=port, metricsHost="127.0.0.1", tokenFile=str(token_file))
    server = daemon._start_probe_server()
    try:
        assert page(port).status_code == 401 and "Basic" in page(port).headers["WWW-Authenticate"]
        assert page(port, auth=("admin", "wrong")).status_code == 401
        assert page(port, auth=("anyone", "s3cret-admin-token")).status_code == 200
        bearer = {"Authorization": "Bearer s3cret-admin-token"}
        assert requests.get(f"http://127.0.0.1:{port}/api/status", headers=bearer, timeout=5).status_code == 200
        assert requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200  # probes stay open
        basic = base64.b64encode(b"x:s3cret-admin-token").decode()
        assert "s3cret" not in page(port, auth=("x", "s3cret-admin-token")).text and basic
    finally:
        server.shutdown()
        server.server_close()
