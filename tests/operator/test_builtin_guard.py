"""One balancer at a time: while Pulsar's own shedder (or splitter) is on, the operator plans and sends nothing.

Against the simulator over loopback: its runtime configuration is the brokers' effective configuration, and its
dynamic-configuration POST changes it as a broker does.
"""

import dataclasses

import pytest
import requests

from pulsar_lb_operator.act import guard
from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.collect.elm import EXTENSIBLE
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from pulsar_lb_operator.strategies import LoadBalancerConfig
from tests.builders import free_port

HELD = "pulsar_lb_operator_held_by_builtin_balancer"


def served_with(**pulsar):
    """The demo cluster with Pulsar's own balancer configured as given (the shipped scenario turns it off)."""
    scenario = load_scenario("demo")
    scenario = dataclasses.replace(scenario, config={**scenario.config, **pulsar})
    return serve(lambda allocate: SimulatedCluster(scenario, allocate))


def make_daemon(sim, tmp_path, **settings):
    base = {
        "dryRun": False,
        "pauseSeconds": 0,
        "metricsPort": free_port(),
        "metricsHost": "127.0.0.1",
        "stateFile": str(tmp_path / "state.json"),
        "historyUri": "",
        "profileUri": "",
        "aggregateEveryMinutes": 0,
    }
    config = LoadBalancerConfig().replace({"loadBalancerAvgShedderHitCountHighThreshold": 1})
    client = AdminClient(sim.admin_url, retries=1)
    return Daemon(OperatorSettings(**{**base, **settings}), config, client, "sim", clock_ms=lambda: sim.cluster.now_ms)


def calls(sim):
    return [r for r in sim.requests if r.method in ("PUT", "POST")]


def test_with_pulsars_shedder_on_the_daemon_sends_nothing_says_why_and_acts_once_it_is_off(tmp_path):
    with served_with(loadBalancerSheddingEnabled=True) as sim:
        daemon = make_daemon(sim, tmp_path)
        server = daemon._start_probe_server()
        url = f"http://127.0.0.1:{daemon.settings.metricsPort}"
        try:
            for _ in range(3):  # on simulated time standing still: Pulsar's own shedder has not run yet either
                result = daemon.run_once()
            assert result.plan.actions and calls(sim) == []  # planned, not sent: not even a configuration change
            held = result.held
            assert held.startswith("not acting: Pulsar's own shedder is on (loadBalancerSheddingEnabled=true)")
            assert {r.detail for r in result.records} == {held}
            assert daemon.metrics.registry.get_sample_value(HELD, {"cluster": "sim"}) == 1
            status = requests.get(f"{url}/api/status", timeout=5).json()
            assert status["builtinBalancer"] == {"state": "on", "held": held, "keys": ["loadBalancerSheddingEnabled"]}
            assert held.replace("'", "&#x27;") in requests.get(url, timeout=5).text

            AdminClient(sim.admin_url).set_dynamic_config("loadBalancerSheddingEnabled", "false")  # a person
            result = daemon.run_once()
            assert result.held is None and [r for r in result.records if r.outcome.value == "executed"]
            assert daemon.metrics.registry.get_sample_value(HELD, {"cluster": "sim"}) == 0
            assert requests.get(f"{url}/api/status", timeout=5).json()["builtinBalancer"]["state"] == "off"
        finally:
            daemon.close(0)
            server.shutdown()
            server.server_close()


def test_what_the_operator_turned_off_and_a_person_turned_back_on_stops_it_again(tmp_path):
    with served_with(loadBalancerSheddingEnabled=True) as sim:
        daemon = make_daemon(sim, tmp_path, disableBuiltinShedding=True, metricsPort=0)
        first = daemon.run_once()
        assert first.builtin.state == "turned off" and sim.cluster.config.loadBalancerSheddingEnabled is False
        posts = [r for r in sim.requests if r.method == "POST"]
        first_put = next(r for r in sim.requests if r.method == "PUT")
        assert len(posts) == 1 and sim.requests.index(posts[0]) < sim.requests.index(first_put)
        read_first = sim.requests[: sim.requests.index(posts[0])]  # never off before the load was read and planned
        assert any(r.path.endswith("/load-report") for r in read_first)
        sim.cluster.advance(31 * 60)  # past the grace period: there is something to move again
        AdminClient(sim.admin_url).set_dynamic_config("loadBalancerSheddingEnabled", "true")  # handed back
        before = len(calls(sim))
        second = daemon.run_once()
        assert second.builtin.state == "turned back on" and "turned back on by a person" in second.held
        assert second.plan.actions and len(calls(sim)) == before  # nothing sent, and not switched off again
        daemon.close(0)


def test_an_approved_proposal_meets_the_same_guard(tmp_path):
    with served_with(loadBalancerSheddingEnabled=True) as sim:
        daemon = make_daemon(sim, tmp_path, approval="manual", metricsPort=0)
        result = daemon.run_once()
        assert daemon.control.read().proposals[result.cycle_id]["status"] == "pending"
        daemon.control.update(lambda doc: doc.decide(result.cycle_id, True, daemon.executor.now_ms(), "test"))
        daemon.approvals_due()
        outcomes = daemon.control.read().proposals[result.cycle_id]["outcomes"]
        assert outcomes and {o["outcome"] for o in outcomes} == {"skipped"} and calls(sim) == []
        daemon.close(0)


@pytest.mark.parametrize("load_manager", ["modular", "extensible"])
def test_pulsars_splitter_counts_only_where_the_operator_splits_too(load_manager):
    scenario = dataclasses.replace(load_scenario("demo"), load_manager=load_manager)
    scenario = dataclasses.replace(scenario, config={**scenario.config, "loadBalancerAutoBundleSplitEnabled": True})
    with serve(lambda allocate: SimulatedCluster(scenario, allocate)) as sim:
        client = AdminClient(sim.admin_url)
        splitting = guard.BuiltinGuard(client, splits=True).check(dry_run=False)
        assert splitting.held.startswith(
            "not acting: Pulsar's own bundle splitter is on (loadBalancerAutoBundleSplitEnabled=true)"
        )
        assert guard.BuiltinGuard(client, splits=False).check(dry_run=False).state == "off"
        client.close()


class Runtime:
    """A client whose runtime configuration is given (``loadBalancerEnabled`` is static: the simulator's is true)."""

    def __init__(self, **runtime):
        self.runtime = {k: str(v).lower() if isinstance(v, bool) else v for k, v in runtime.items()}

    def runtime_config(self):
        return self.runtime


ELM = {"loadManagerClassName": EXTENSIBLE}
SHED, SPLIT = "loadBalancerSheddingEnabled", "loadBalancerAutoBundleSplitEnabled"


@pytest.mark.parametrize(
    ("runtime", "on"),
    [
        ({}, (SHED, SPLIT)),  # Pulsar's defaults
        ({SHED: False, SPLIT: False}, ()),
        ({SHED: None, SPLIT: "False "}, (SHED,)),  # an answer it cannot trust counts as on
        # modular: doLoadShedding asks loadBalancerEnabled too (isLoadSheddingEnabled), checkNamespaceBundleSplit not
        ({"loadBalancerEnabled": False}, (SPLIT,)),
        # extensible: UnloadScheduler and SplitScheduler both ask loadBalancerEnabled
        ({**ELM, "loadBalancerEnabled": False}, ()),
        ({**ELM, SHED: False}, (SPLIT,)),
    ],
)
def test_the_keys_that_gate_pulsars_own_balancer_on_either_load_manager(runtime, on):
    assert guard.BuiltinGuard(Runtime(**runtime)).read() == (on, None)
