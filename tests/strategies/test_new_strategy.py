"""A new shedding strategy is one module that registers itself (bundle_count_shedder.py): the planner plans with it
by name and from the configuration, and ``operator rebalance --snapshot … --strategy NAME`` runs it, with nothing
else changed."""

from __future__ import annotations

import importlib
import json
import random
import sys

import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.strategies import StrategyState, UnknownStrategyError, parse_snapshot, plan_cycle
from tests.builders import broker_report, bundle, cfg, isolation_policy, snapshot_doc, stats

MODULE = "tests.strategies.bundle_count_shedder"
NAME = "BundleCountShedder"
CROWDED, MIDDLE, EMPTY = "b1.pulsar:8080", "b2.pulsar:8080", "b3.pulsar:8080"
LIGHTEST = bundle("tenant-b/ns", 2)


def cluster_doc(isolated_empty: bool = False):
    """b1 owns four bundles (the third the lightest), b2 two, b3 none; with ``isolated_empty`` b3 is tenant-a's
    primary broker, where tenant-b's bundles may not go."""
    rates = {CROWDED: [300, 200, 10, 400], MIDDLE: [50, 60]}
    brokers = {}
    index = 0
    for broker in (CROWDED, MIDDLE, EMPTY):
        owned = {}
        for rate in rates.get(broker, []):
            owned[bundle("tenant-b/ns", index)] = stats(rate, thr_in=rate * 1000)
            index += 1
        brokers[broker] = broker_report(cpu=(10 + len(owned) * 10, 100), bundles=owned)
    doc = snapshot_doc(brokers)
    if isolated_empty:
        doc["isolationPolicies"] = {"tenant-a": isolation_policy("tenant-a/.*", "b3\\.pulsar")}
    return doc


def plan(shedding=None, config=None, doc=None):
    snap = parse_snapshot(doc or cluster_doc())
    return plan_cycle(snap, config or cfg(), StrategyState(), random.Random(0), shedding)[0]


@pytest.fixture
def new_strategy(registry_restored):
    """The module imported afresh, as a user's program imports it; unregistered afterwards."""
    sys.modules.pop(MODULE, None)
    yield importlib.import_module(MODULE)
    sys.modules.pop(MODULE, None)


def test_it_is_unknown_until_its_module_registers_it(registry_restored):
    sys.modules.pop(MODULE, None)
    with pytest.raises(UnknownStrategyError, match="unknown shedding strategy 'BundleCountShedder'"):
        plan(NAME)
    importlib.import_module(MODULE)
    try:
        assert plan(NAME).shedding == NAME
    finally:
        sys.modules.pop(MODULE, None)


def test_the_planner_plans_with_it_by_name_and_from_the_configuration(new_strategy):
    by_name = plan(NAME)
    by_config = plan(config=cfg(loadBalancerLoadSheddingStrategy=f"com.example.{NAME}"))
    for planned in (by_name, by_config):
        assert (planned.shedding, planned.placement) == (NAME, "(transfer)")  # it places itself
        (unload,) = planned.actions
        assert (unload.bundle, unload.source, unload.destination) == (LIGHTEST, CROWDED, EMPTY)
        assert unload.reason.endswith("its lightest moves; destination chosen by the shedder")
    assert [b.bundles_after for b in by_name.brokers] == [3, 2, 1]


def test_a_destination_the_policies_refuse_is_placed_by_its_default_placement(new_strategy):
    (unload,) = plan(NAME, doc=cluster_doc(isolated_empty=True)).actions
    assert (unload.bundle, unload.source, unload.destination) == (LIGHTEST, CROWDED, MIDDLE)
    assert "destination by LeastLongTermMessageRate (the shedder's own choice b3.pulsar:8080 refused" in unload.reason


def test_operator_rebalance_plans_with_it(new_strategy, tmp_path, capsys):
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps(cluster_doc()))
    args = ["rebalance", "--snapshot", str(snapshot), "--strategy", NAME]
    assert cli.main([*args, "--output", "json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["shedding"] == NAME
    assert [(a["type"], a["bundle"], a["destination"]) for a in planned["actions"]] == [("unload", LIGHTEST, EMPTY)]
    assert cli.main(args) == 0
    table = capsys.readouterr().out
    assert NAME in table and LIGHTEST in table
