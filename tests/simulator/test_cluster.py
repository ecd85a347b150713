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


def test_steady_traffic_holds_jittering_topics_at_their_mean_and_draws_nothing():
    """A jitter is drawn anew at each reading; within ``steady`` a jittering namespace runs at its mean rate, every
    reading the same, the noise left as it was; other patterns (here a step) are as they are."""
    sim = cluster(
        namespaces=[
            {
                "name": "t/jitter",
                "bundles": 2,
                "topics": 8,
                "rate": 100,
                "pattern": {"type": "jitter", "amplitude": 0.3},
            },
            {"name": "t/step", "bundles": 2, "topics": 8, "rate": 100, "pattern": {"type": "step", "factor": 3.0}},
        ]
    )
    total = lambda ns: sum(sim.bundle_stats(b)[0].msgRateIn for b in sim.all_bundles() if b.startswith(ns))  # noqa: E731
    assert total("t/jitter/") != total("t/jitter/")  # two draws
    noise = sim.noise.getstate()
    with sim.steady():
        assert total("t/jitter/") == total("t/jitter/") == pytest.approx(800)
        assert total("t/step/") == pytest.approx(2400)
    assert sim.noise.getstate() == noise
    assert total("t/jitter/") != pytest.approx(800)  # drawn again once outside


def test_a_surge_into_a_few_topics_raises_only_theirs():
    """A tenant's traffic surging into a few hot topics: a traffic event naming topics multiplies only those (every
    partition of a partitioned one), from its time on; the bundles holding them carry it, the others do not."""
    sim = cluster(
        namespaces=[
            {"name": "t/ns", "bundles": 8, "topics": 64, "rate": 100},
            {"name": "t/parts", "bundles": 4, "topics": 4, "partitions": 3, "rate": 90, "hot_topics": {"pay": 10}},
        ],
        events=[{"at_minute": 1, "type": "traffic", "namespace": "t/parts", "topics": ["topic-2", "pay"], "factor": 5}],
    )

    def rates():
        return {
            t.name: s.msgRateIn
            for b in sim.all_bundles()
            for t, s in zip(sim.topics_in(b), sim.bundle_stats(b)[1].values())
        }

    before = rates()
    sim.advance(61)
    after = rates()
    surged = {f"persistent://t/parts/topic-2-partition-{p}" for p in range(3)} | {"persistent://t/parts/pay"}
    assert {n for n in after if after[n] != before[n]} == surged
    assert all(after[n] == pytest.approx(5 * before[n]) for n in surged)
    assert before["persistent://t/parts/topic-2-partition-0"] == pytest.approx(30)


def test_a_noisy_neighbour_raises_a_brokers_cpu_without_its_traffic():
    """A background event: from its time on, other processes use that fraction of the broker's CPU; its next sample
    shows it, its traffic is the same."""
    quiet = {"count": 2, "cores": 4, "cost_per_msg": 0.01, "cost_per_mib": 0.0, "background_cpu": 0.05, "jitter": 0}
    sim = cluster(
        brokers=[quiet],
        initial_owners={"broker-0": 1, "broker-1": 1},
        events=[{"at_minute": 1, "type": "background", "broker": "broker-1", "background_cpu": 0.4}],
    )
    broker = sim.by_name("broker-1")
    before = sim.load_report(broker.id)
    sim.advance(120)
    after = sim.load_report(broker.id)
    assert after["cpu"]["usage"] - before["cpu"]["usage"] == pytest.approx(400 * (0.4 - 0.05), abs=0.01)
    assert after["msgRateIn"] == pytest.approx(before["msgRateIn"])
    assert sim.true_usage(broker.id) == pytest.approx(after["cpu"]["usage"] / 4)


def test_a_balanced_start_deals_bundles_so_brokers_of_any_size_are_even():
    """``initial_owners: balanced``: each bundle, the largest first, to the broker it leaves least used, by each
    broker's own cores: a 16-core broker gets about twice an 8-core broker's traffic, every broker ends within a
    bundle of the others' usage. A deal by weights (the default) leaves them farther apart."""
    brokers = [
        {"count": 3, "cores": 8, "cost_per_msg": 0.01, "cost_per_mib": 1.0, "jitter": 0},
        {"name": "big", "count": 2, "cores": 16, "cost_per_msg": 0.01, "cost_per_mib": 1.0, "jitter": 0},
    ]
    namespaces = [{"name": "t/ns", "bundles": 64, "topics": 640, "rate": 60, "rate_spread": 0.5}]

    def usage(owners):
        sim = cluster(brokers=brokers, namespaces=namespaces, initial_owners=owners)
        return sim, {b.name: sim.true_usage(b.id) for b in sim.alive_brokers()}

    sim, even = usage("balanced")
    largest = max(sim.weighted_usage(sim.by_name("broker-0"), {b: sim.bundle_stats(b)[0]}) for b in sim.all_bundles())
    assert max(even.values()) - min(even.values()) <= largest
    rates = {b.name: sum(sim.bundle_stats(x)[0].msg_rate for x in sim.owned_by(b.id)) for b in sim.alive_brokers()}
    assert rates["big-0"] == pytest.approx(2 * rates["broker-0"], rel=0.15)
    _, dealt = usage({"*": 1})
    assert max(dealt.values()) - min(dealt.values()) > max(even.values()) - min(even.values())
    with pytest.raises(ScenarioError, match="expected 'balanced' or a mapping"):
        parse_scenario({**SMALL, "initial_owners": "even"})


def test_surge_and_background_events_are_validated():
    for event, message in [
        ({"type": "traffic", "namespace": "t/ns", "topics": ["topic-64"]}, "t/ns has no topic 'topic-64'"),
        ({"type": "traffic", "topics": ["topic-1"]}, "topics need the namespace"),
        ({"type": "background", "broker": "broker-0"}, "a background event needs the new fraction"),
        ({"type": "background", "broker": "broker-0", "background_cpu": 1.2}, "must be a fraction below 1"),
        ({"type": "background", "broker": "ghost", "background_cpu": 0.2}, "unknown broker 'ghost'"),
        ({"type": "add_broker", "broker": "b", "background_cpu": 0.2}, "only a background event takes it"),
    ]:
        with pytest.raises(ScenarioError, match=message):
            parse_scenario({**SMALL, "events": [{"at_minute": 1, **event}]})


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


def test_the_docs_scenario_example_parses_as_documented():
    import re
    from pathlib import Path

    import yaml

    page = (Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text()
    block = re.search(r"```yaml\n(name: my-cluster.*?)```", page, re.S).group(1)
    scenario = parse_scenario(yaml.safe_load(block))
    assert [b.name for b in scenario.brokers] == ["broker-0", "broker-1", "broker-2", "broker-3"]
    assert scenario.initial_owners == {"broker-0": 3.0, "broker-1": 1.0, "broker-2": 1.0, "broker-3": 1.0}
    assert scenario.namespaces[0].pattern.kind == "daily" and scenario.namespaces[0].hot_topics == {"payments": 5000}
    sim = SimulatedCluster(scenario)
    sim.advance(25 * 60)  # through the add, the rolling restart and the traffic change
    assert "broker-9" in {b.name for b in sim.alive_brokers()}
