"""Load physics, simulated time, events, determinism and the shipped scenarios."""

import pytest

from pulsar_lb_operator.benchmarks.metrics import RunMetrics
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.scenario import ScenarioError, load_scenario, parse_scenario, shipped_scenarios
from tests.builders import SMALL_SCENARIO as SMALL


def cluster(**changes):
    return SimulatedCluster(parse_scenario({**SMALL, **changes}))


def test_unloading_moves_traffic_and_usage_after_the_report_period():
    sim = cluster()
    src, dst = sim.by_name("broker-0"), sim.by_name("broker-2")
    bundle = sim.owned_by(src.id)[0]
    traffic = sim.bundle_stats(bundle)[0].msg_rate
    before_src = sim.load_report(src.id)
    before_dst = sim.load_report(dst.id)
    sim.unload(bundle, dst.id)
    sim.advance(5)  # clients reconnected: the destination owns it, but no report has been written since
    assert sim.owner_of(bundle) == dst.id
    assert sim.load_report(dst.id)["msgRateIn"] == before_dst["msgRateIn"]  # stale, as in real life
    sim.advance(60)  # one report period later both reports show the move
    after_src, after_dst = sim.load_report(src.id), sim.load_report(dst.id)
    moved = after_dst["msgRateIn"] + after_dst["msgRateOut"] - before_dst["msgRateIn"] - before_dst["msgRateOut"]
    assert moved == pytest.approx(traffic)
    assert bundle not in after_src["lastStats"] and bundle in after_dst["lastStats"]
    assert after_src["cpu"]["usage"] < before_src["cpu"]["usage"]
    assert after_dst["cpu"]["usage"] > before_dst["cpu"]["usage"]
    assert sim.topics_disconnected == len(sim.topics_in(bundle)) and sim.unloads == 1


def test_same_seed_same_run_and_another_seed_differs():
    def run(seed):
        sim = cluster(
            seed=seed,
            namespaces=[
                {
                    "name": "t/ns",
                    "bundles": 8,
                    "topics": 64,
                    "rate": 150,
                    "rate_spread": 0.5,
                    "pattern": {"type": "jitter", "amplitude": 0.2},
                }
            ],
        )
        reports = []
        for bundle in sim.owned_by(sim.by_name("broker-0").id)[:2]:
            sim.unload(bundle)
        for _ in range(5):
            sim.advance(60)
            reports.append([sim.load_report(b) for b in sim.active_ids()])
        return reports, sorted(sim.ownership.items())

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_usage_physics_background_plus_traffic_cost():
    sim = cluster(
        brokers=[
            {"count": 2, "cores": 4, "cost_per_msg": 0.01, "cost_per_mib": 0.0, "background_cpu": 0.25, "jitter": 0.0}
        ],
        initial_owners={"broker-0": 1},
    )
    report = sim.load_report(sim.by_name("broker-0").id)
    rate = report["msgRateIn"] + report["msgRateOut"]
    assert report["cpu"] == {"usage": pytest.approx(100 + rate * 0.01, abs=0.01), "limit": 400}
    idle = sim.load_report(sim.by_name("broker-1").id)
    assert idle["cpu"]["usage"] == pytest.approx(100) and idle["bandwidthIn"]["limit"] == 10e6
    assert report["bandwidthIn"]["usage"] == pytest.approx(report["msgThroughputIn"] * 8 / 1000, rel=1e-3)


def test_traffic_patterns_and_events():
    sim = cluster(
        namespaces=[
            {
                "name": "t/ns",
                "bundles": 4,
                "topics": 16,
                "rate": 100,
                "pattern": {"type": "step", "factor": 3.0, "start_minute": 2},
            }
        ],
        events=[
            {"at_minute": 1, "type": "traffic", "factor": 0.5},
            {"at_minute": 3, "type": "add_broker", "broker": "broker-9", "spec": {"cores": 2}},
            {"at_minute": 4, "type": "crash_broker", "broker": "broker-0"},
        ],
    )
    total = lambda: sum(sim.bundle_stats(b)[0].msgRateIn for b in sim.all_bundles())  # noqa: E731
    assert total() == pytest.approx(1600)
    sim.advance(61)
    assert total() == pytest.approx(800)
    sim.advance(60)
    assert total() == pytest.approx(2400)
    sim.advance(60)
    assert "broker-9" in {b.name for b in sim.alive_brokers()}
    sim.advance(65)
    assert "broker-0" not in {b.name for b in sim.alive_brokers()}
    assert all(owner != sim.by_name("broker-0").id for owner in sim.ownership.values())
    assert len(sim.ownership) == 4  # every bundle reassigned after its clients reconnected


def test_rolling_restart_leaves_the_last_broker_idle():
    sim = SimulatedCluster(load_scenario("rolling-restart"))
    sim.advance(20 * 60)
    usage = RunMetrics().record(sim).usage
    last = max(usage, key=lambda n: sim.by_name(n).started_at_s)
    assert usage[last] < 10 and min(u for n, u in usage.items() if n != last) > 50


@pytest.mark.parametrize("name", shipped_scenarios())
def test_every_shipped_scenario_loads_and_runs(name):
    scenario = load_scenario(name)
    sim = SimulatedCluster(scenario)
    metrics = RunMetrics()
    metrics.record(sim)
    sim.advance(min(scenario.duration_s, 300))
    sample = metrics.record(sim)
    assert sample.usage and all(0 <= u < 200 for u in sample.usage.values())
    assert scenario.description


def test_scenario_files_are_validated(tmp_path):
    for bad, message in [
        ({**SMALL, "brokers": []}, "brokers: expected a non-empty list"),
        ({**SMALL, "namespaces": [{"name": "no-slash"}]}, "namespaces[0].name: expected 'tenant/namespace'"),
        ({**SMALL, "placement": "nearest"}, "placement: 'nearest' is not one of"),
        ({**SMALL, "events": [{"type": "crash_broker", "broker": "ghost"}]}, "events[0].broker: unknown broker"),
        ({**SMALL, "initial_owners": {"nobody-*": 1}}, "initial_owners: 'nobody-*' matches no broker"),
        ({**SMALL, "brokers": [{"cores": -1}]}, "brokers[0].cores: expected a number >= 0"),
        ({**SMALL, "colour": "blue"}, "scenario: unknown key 'colour'"),
    ]:
        with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("(", r"\(").replace("*", r"\*")):
            parse_scenario(bad)
    with pytest.raises(ScenarioError, match="cannot read scenario"):
        load_scenario(tmp_path / "missing.yaml")
    (tmp_path / "broken.yaml").write_text("brokers: [\n")
    with pytest.raises(ScenarioError, match="cannot be parsed"):
        load_scenario(tmp_path / "broken.yaml")


def test_the_readme_scenario_example_parses_as_documented():
    import re
    from pathlib import Path

    import yaml

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"```yaml\n(name: my-cluster.*?)```", readme, re.S).group(1)
    scenario = parse_scenario(yaml.safe_load(block))
    assert [b.name for b in scenario.brokers] == ["broker-0", "broker-1", "broker-2", "broker-3"]
    assert scenario.initial_owners == {"broker-0": 3.0, "broker-1": 1.0, "broker-2": 1.0, "broker-3": 1.0}
    assert scenario.namespaces[0].pattern.kind == "daily" and scenario.namespaces[0].hot_topics == {"payments": 5000}
    sim = SimulatedCluster(scenario)
    sim.advance(25 * 60)  # through the add, the rolling restart and the traffic change
    assert "broker-9" in {b.name for b in sim.alive_brokers()}
