"""With leader election a pause stops every replica: ``operator pause`` in any pod writes it on the Lease, so the
leader reads it within a renewal, a standby that takes over (a pod rescheduled onto an empty volume) starts paused,
and ``operator resume`` in any pod lifts it — real HTTP to the simulated cluster and to a fake Kubernetes API."""

from __future__ import annotations

import shutil
from contextlib import ExitStack

import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.records import Outcome
from pulsar_lb_operator.run import control_api, status_page
from pulsar_lb_operator.run.leadership import LeaseElector
from pulsar_lb_operator.run.lease_client import LeaseClient
from pulsar_lb_operator.run.lease_pause import PAUSE_ANNOTATION, SharedPause, note
from pulsar_lb_operator.store.statefile import InstanceLock
from tests.kube_api import FakeKubeApi
from tests.operator.test_workflows import cli_args, make, sent_unloads
from tests.operator.test_workflows import sim as sim

NS, NAME = "pulsar", "lb-pulsar-lb-operator"
TIMING = {"leaseDurationSeconds": 2.0, "renewDeadlineSeconds": 1.2, "retryPeriodSeconds": 0.2}
LEASE = ["--set", "leaderElection=true", "--set", f"leaseName={NAME}", "--set", f"leaseNamespace={NS}"]
LEASE += [a for key, value in TIMING.items() for a in ("--set", f"{key}={value}")]


@pytest.fixture
def api():
    with FakeKubeApi(tokens=("token-a", "token-b")) as server:
        yield server


@pytest.fixture
def pods(sim, api, tmp_path, monkeypatch):
    """Two replicas, each on a volume of its own, holding its state's lock as `operator run` does; the commands run
    in a pod reach the fake API server with that pod's token."""
    token = {"pod": "token-a"}
    monkeypatch.setattr(
        LeaseClient, "in_cluster", classmethod(lambda cls, **_: LeaseClient(api.url, token=token["pod"], timeout=1.0))
    )
    with ExitStack() as stack:
        replicas = {}
        for name in ("pod-a", "pod-b"):
            (tmp_path / name).mkdir()
            stack.enter_context(InstanceLock(tmp_path / name / "state.json"))
            client = LeaseClient(api.url, token=f"token-{name[-1]}", timeout=1.0)
            elector = LeaseElector(
                NAME, NS, client=client, identity=name, lease_duration=2.0, renew_deadline=1.2, retry_period=0.2
            )
            daemon = make(sim, tmp_path / name, leaderElection=True, leaseName=NAME, leaseNamespace=NS, **TIMING)
            daemon.elector = elector
            replicas[name] = daemon
        yield replicas, token
        for daemon in replicas.values():
            daemon.elector.stop(release=False)


def command(tmp_path, sim, token, pod, *args):
    token["pod"] = f"token-{pod[-1]}"
    return cli.main([*cli_args(tmp_path / pod, sim, *args), *LEASE])


def skipped_for(result, *words):
    return result.records and all(
        r.outcome is Outcome.SKIPPED and all(w in r.detail for w in words) for r in result.records
    )


def test_a_pause_in_the_leaders_pod_holds_when_a_standby_takes_over_on_its_own_volume(sim, api, tmp_path, pods, capsys):
    (replicas, token), before = pods, len(sim.requests)
    a, b = replicas["pod-a"], replicas["pod-b"]
    assert a.elector.try_acquire_or_renew() and not b.elector.try_acquire_or_renew()
    assert a.leads() and not b.leads()
    assert command(tmp_path, sim, token, "pod-a", "pause", "--reason", "incident 4211") == 0
    assert f"paused every instance through Lease {NS}/{NAME}: this one from its next call on" in capsys.readouterr().out
    assert skipped_for(a.run_once(), "paused by", "incident 4211")
    # the leader's pod is deleted: its volume, and the pause file on it, go with it
    a.elector.stop()
    shutil.rmtree(tmp_path / "pod-a")
    assert b.elector.try_acquire_or_renew() and b.leads()
    assert not (tmp_path / "pod-b" / "state.json.pause").exists()
    assert skipped_for(b.run_once(), f"Lease {NS}/{NAME} holds a pause", "incident 4211")
    switch = status_page.status(b)["killSwitch"]
    assert switch["on"] and switch["source"] == "lease" and switch["reason"] == "incident 4211"
    assert sent_unloads(sim, before) == []
    assert command(tmp_path, sim, token, "pod-b", "resume") == 0
    assert "resumed every instance" in capsys.readouterr().out
    assert b.elector.try_acquire_or_renew()  # its next renewal reads the Lease without the pause
    sim.cluster.advance(60)
    assert [r for r in b.run_once().records if r.outcome is Outcome.EXECUTED]


def test_a_pause_in_a_standbys_pod_stops_the_leader_within_one_renewal(sim, api, tmp_path, pods, capsys):
    (replicas, token), before = pods, len(sim.requests)
    a, b = replicas["pod-a"], replicas["pod-b"]
    a.elector.start()  # renews every 0.2 s, as in a pod
    assert a.elector.wait_until_leader(5) and not b.elector.try_acquire_or_renew()
    assert a.leads() and not b.leads()
    assert command(tmp_path, sim, token, "pod-b", "pause", "--reason", "from the standby") == 0
    assert "the leader pod-a has read it and sends nothing from its next call on" in capsys.readouterr().out
    assert not (tmp_path / "pod-a" / "state.json.pause").exists()  # nothing on the leader's volume: the Lease alone
    assert skipped_for(a.run_once(), f"Lease {NS}/{NAME} holds a pause", "from the standby")
    assert sent_unloads(sim, before) == []


def test_a_pause_the_lease_cannot_take_says_whom_it_stops_and_fails(sim, api, tmp_path, pods, capsys):
    replicas, token = pods
    a, b = replicas["pod-a"], replicas["pod-b"]
    assert a.elector.try_acquire_or_renew() and a.leads() and not b.leads()
    api.outage = "error"
    assert command(tmp_path, sim, token, "pod-b", "pause") == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("operator: error: paused this standby only") and "the leader still acts" in err
    assert command(tmp_path, sim, token, "pod-a", "pause") == 2
    err = capsys.readouterr().err
    assert "paused this pod only" in err and "a standby that takes over would act" in err
    assert (tmp_path / "pod-a" / "state.json.pause").exists()  # the leader itself is stopped at once
    api.outage = None
    assert command(tmp_path, sim, token, "pod-a", "resume") == 0
    assert "was not paused" not in capsys.readouterr().out


def test_the_status_pages_pause_on_a_standby_goes_to_the_lease_and_its_resume_lifts_it(sim, api, tmp_path, pods):
    (replicas, _), before = pods, len(sim.requests)
    a, b = replicas["pod-a"], replicas["pod-b"]
    a.elector.start()
    assert a.elector.wait_until_leader(5) and a.leads() and not b.leads()
    said = control_api._carry_out(b, "pause", "", {"reason": "page"}, "127.0.0.1")
    assert said.startswith(f"paused every instance through Lease {NS}/{NAME}: the leader pod-a has read it")
    assert skipped_for(a.run_once(), "status page (127.0.0.1)", "page")
    assert control_api._carry_out(b, "resume", "", {}, "127.0.0.1") == "resumed"
    assert PAUSE_ANNOTATION not in (api.lease(NS, NAME)["metadata"].get("annotations") or {})
    assert sent_unloads(sim, before) == []


def test_a_renewal_that_meets_a_pause_written_in_between_keeps_leading_and_reads_it(api):
    """The leader renews every two seconds and a pause is a write of the same Lease: the renewal's 409 is the pause,
    not a rival, so the leader reads the Lease again instead of stepping down."""
    writer = SharedPause(LeaseClient(api.url, token=api.token), NS, NAME)

    class PausedInBetween(LeaseClient):
        armed = False

        def get(self, namespace, name, timeout=None):
            lease = super().get(namespace, name, timeout)
            if self.armed:
                self.armed = False
                writer.pause(note("someone@pod-b", "between", 1))
            return lease

    client = PausedInBetween(api.url, token=api.token)
    elector = LeaseElector(
        NAME, NS, client=client, identity="pod-a", lease_duration=2, renew_deadline=1.2, retry_period=0.2
    )
    assert elector.try_acquire_or_renew() and elector.annotation(PAUSE_ANNOTATION) is None
    client.armed = True
    assert elector.try_acquire_or_renew() and elector.is_leader()
    assert '"between"' in elector.annotation(PAUSE_ANNOTATION)
    assert api.lease(NS, NAME)["spec"]["holderIdentity"] == "pod-a"
    assert writer.resume() and not writer.resume()


def test_a_live_rebalance_beside_the_replicas_is_refused_and_a_dry_run_previews(sim, tmp_path, monkeypatch, capsys):
    """With leader election the replicas are the actors: a one-shot beside them would be a second one, without the
    cooldowns they keep on the Lease (and a pause there)."""
    monkeypatch.chdir(tmp_path)
    lease = ["--admin-url", sim.admin_url, "--set", "leaderElection=true", "--set", "pauseSeconds=0"]
    assert cli.main(["rebalance", "--no-dry-run", *lease]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("operator: error: leaderElection is on") and "--set leaderElection=false" in err
    assert len(err.splitlines()) == 1 and sim.mutating_requests() == []
    assert cli.main(["rebalance", *lease]) == 0
    assert "DRY RUN" in capsys.readouterr().out.upper() and sim.mutating_requests() == []


def test_a_second_pause_in_another_pod_keeps_the_leases_first_note(sim, api, tmp_path, pods, capsys):
    replicas, token = pods
    a, b = replicas["pod-a"], replicas["pod-b"]
    a.elector.start()
    assert a.elector.wait_until_leader(5) and not b.elector.try_acquire_or_renew()
    assert command(tmp_path, sim, token, "pod-a", "pause", "--reason", "incident 4211") == 0
    first = api.lease(NS, NAME)["metadata"]["annotations"][PAUSE_ANNOTATION]
    capsys.readouterr()
    assert command(tmp_path, sim, token, "pod-b", "pause", "--reason", "me too") == 0
    assert "(incident 4211): its note is kept; paused every instance" in capsys.readouterr().out
    assert api.lease(NS, NAME)["metadata"]["annotations"][PAUSE_ANNOTATION] == first
    assert "incident 4211" in (tmp_path / "pod-b" / "state.json.pause").read_text()  # the same note in its pod
    assert command(tmp_path, sim, token, "pod-b", "resume") == 0
    assert PAUSE_ANNOTATION not in (api.lease(NS, NAME)["metadata"].get("annotations") or {})
