"""Two daemons, one Lease: only the leader acts, its record lives on the Lease, and a standby that takes
over inherits it — real HTTP to the simulated cluster and to a fake Kubernetes API server."""

from __future__ import annotations

import json

import pytest

from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.records import ExecutorState, Outcome
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.leadership import STATE_ANNOTATION, LeaseElector
from pulsar_lb_operator.run.lease_client import LeaseClient
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from pulsar_lb_operator.strategies import LoadBalancerConfig, Plan, Unload
from tests.kube_api import FakeKubeApi

NS, NAME = "pulsar", "lb-pulsar-lb-operator"


@pytest.fixture
def api():
    with FakeKubeApi(tokens=("token-a", "token-b")) as server:
        yield server


@pytest.fixture
def sim():
    with serve(lambda allocate: SimulatedCluster(load_scenario("demo"), allocate)) as served:
        yield served


def elector(api, identity):
    client = LeaseClient(api.url, token=f"token-{identity[-1]}", timeout=1.0)
    return LeaseElector(
        NAME, NS, client=client, identity=identity, lease_duration=2.0, renew_deadline=1.2, retry_period=0.2
    )


def daemon(sim, tmp_path, name, api):
    settings = OperatorSettings(
        dryRun=False,
        pauseSeconds=0,
        metricsPort=0,
        stateFile=str(tmp_path / name / "state.json"),  # each replica its own volume
        historyUri="",
        profileUri="",
        verifyAfterSeconds=60,
    )
    config = LoadBalancerConfig().replace(
        {**sim.cluster.scenario.config, "loadBalancerAvgShedderHitCountHighThreshold": 1}
    )
    client = AdminClient(sim.admin_url, retries=1)
    return Daemon(settings, config, client, "sim", clock_ms=lambda: sim.cluster.now_ms, elector=elector(api, name))


def moved(result):
    return [r.action.bundle for r in (result.records if result else ()) if r.outcome is Outcome.EXECUTED]


def test_only_the_leader_acts_and_its_record_is_on_the_lease(sim, api, tmp_path):
    a, b = daemon(sim, tmp_path, "pod-a", api), daemon(sim, tmp_path, "pod-b", api)
    assert a.elector.try_acquire_or_renew() and not b.elector.try_acquire_or_renew()
    assert b.run_once() is None and b.ready()  # the standby is ready, and does nothing
    result = a.run_once()
    sent = moved(result)
    assert sent and sim.mutating_requests()
    record = ExecutorState.from_json(json.loads(api.lease(NS, NAME)["metadata"]["annotations"][STATE_ANNOTATION]))
    assert set(sent) <= set(record.last_moved) and set(sent) <= record.awaiting()
    assert b.run_once() is None and a.metrics.leader._value.get() == 1 and b.metrics.leader._value.get() == 0
    # what `operator drain` in each pod reads before it answers: the standby knows who leads
    assert a.control.read().daemon.leading and not b.control.read().daemon.leading
    assert b.control.read().daemon.leader == "pod-a"


def test_a_standby_taking_over_inherits_cooldowns_and_verifies_what_the_leader_sent(sim, api, tmp_path):
    a, b = daemon(sim, tmp_path, "pod-a", api), daemon(sim, tmp_path, "pod-b", api)
    assert a.elector.try_acquire_or_renew()
    sent = moved(a.run_once())
    assert sent
    a.elector.stop()  # a clean stop releases the Lease, keeping the record on it
    assert b.elector.try_acquire_or_renew() and b.leads()
    assert set(sent) <= set(b.state.executor.last_moved) and set(sent) <= b.state.executor.awaiting()
    # the new leader never touches those bundles within the grace period …
    source = sim.cluster.owner_of(sent[0])
    again = Plan("t", "t", 0, (Unload(sent[0], source or "x", sim.cluster.active_ids()[0], "again"),))
    records, _ = b.executor.apply(again, b.state.executor)
    assert records[0].outcome is Outcome.SKIPPED
    # … and verifies where they went, as the old leader would have
    sim.cluster.advance(120)
    result = b.run_once()
    verified = {r.action.bundle for r in result.verifications}
    assert set(sent) & verified


def test_a_leader_fenced_off_mid_cycle_sends_nothing_more(sim, api, tmp_path):
    """The Lease write before each call is the fence: once another instance holds the Lease, it fails."""
    a = daemon(sim, tmp_path, "pod-a", api)
    assert a.elector.try_acquire_or_renew()
    original = sim.cluster.unload

    def unload_then_lose_the_lease(bundle, *args, **kwargs):
        api.put_lease(NS, NAME, {"holderIdentity": "pod-b", "leaseDurationSeconds": 15})
        return original(bundle, *args, **kwargs)

    sim.cluster.unload = unload_then_lose_the_lease
    assert a.run_once() is None  # the cycle ends as failed: its record could not go on the Lease
    assert len([r for r in sim.mutating_requests() if r.status != 307]) == 1  # nothing after the first
    assert not a.leads() and a.metrics.cycles.labels("error")._value.get() == 1
    local = json.loads((tmp_path / "pod-a" / "state.json").read_text())
    assert len(local["executor"]["pending"]) == 1  # what was sent is still on its own disk


def test_a_replaced_single_pod_inherits_cooldowns_from_the_lease_not_from_its_empty_volume(sim, api, tmp_path):
    """An upgrade or a rescheduling with one replica: the old pod stops (SIGTERM releases the Lease), and a new
    pod with a new name and an empty volume starts after it. Its only memory of what was sent is the Lease."""
    old = daemon(sim, tmp_path, "pod-a", api)
    assert old.elector.try_acquire_or_renew()
    sent = moved(old.run_once())
    assert sent
    old.elector.stop()
    new = daemon(sim, tmp_path, "pod-b", api)  # its own, empty stateFile directory
    assert not (tmp_path / "pod-b" / "state.json").exists()
    assert new.elector.try_acquire_or_renew() and new.leads()
    assert set(sent) <= set(new.state.executor.last_moved) and set(sent) <= new.state.executor.awaiting()
    result = new.run_once()  # its first cycle leaves the bundles in their grace period alone
    assert not set(sent) & set(moved(result))


def test_the_strategy_counters_on_the_lease_round_trip_and_refuse_garbage():
    """What a new leader inherits: the counters exactly, never the per-bundle averages (too large for a Lease);
    anything else on the annotation is a StateError (logged and ignored by the daemon), never a reset."""
    import base64
    import zlib
    from types import MappingProxyType

    from pulsar_lb_operator.store import statefile
    from pulsar_lb_operator.strategies import StateError, StrategyState
    from pulsar_lb_operator.strategies.loaddata import BundleData

    brokers = [f"broker-{i}.broker.pulsar.svc.cluster.local:8080" for i in range(1000)]
    state = StrategyState(
        bundle_data=MappingProxyType({"t/ns/0x00000000_0xffffffff": BundleData.new()}),
        avg_hits_high=MappingProxyType({b: i % 3 for i, b in enumerate(brokers)}),
        threshold_ema=MappingProxyType({b: i / 10 for i, b in enumerate(brokers)}),
    )
    text = statefile.strategy_counters(state)
    assert text is not None and len(text) <= statefile.COUNTERS_MAX_BYTES  # a thousand brokers fit
    back = statefile.read_strategy_counters(text)
    assert back.avg_hits_high == state.avg_hits_high and back.threshold_ema == state.threshold_ema
    assert not back.bundle_data
    for garbage in (
        "",
        "not base64!",
        base64.b64encode(b"not zlib").decode(),
        base64.b64encode(zlib.compress(b"[1]")).decode(),
    ):
        with pytest.raises(StateError):
            statefile.read_strategy_counters(garbage)
