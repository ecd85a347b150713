"""The strategy protocol: the planner does what a strategy declares (protocol.py), whatever its name, and the
registry refuses a registration that a lookup by name could confuse or that names a placement it cannot find."""

import random
from dataclasses import replace

import pytest

from pulsar_lb_operator.strategies import Split, StrategyState, Unload, parse_snapshot, plan_cycle
from pulsar_lb_operator.strategies.loaddata import build_load_data
from pulsar_lb_operator.strategies.protocol import Placer, Shedder, SplitPlanningShedder
from pulsar_lb_operator.strategies.shedding.common import SheddingResult
from pulsar_lb_operator.strategies.shedding.transfer import NAME as TRANSFER_SHEDDER
from tests.builders import broker_report, bundle, cfg, snapshot_doc, stats

SOURCE, SHARED, PRIMARY = "s1.pulsar:8080", "s2.pulsar:8080", "a1.pulsar:8080"
MOVED = bundle("tenant-b/ns", 0)
HOT = bundle("tenant-b/ns", 1)  # over loadBalancerNamespaceBundleMaxTopics: the split trigger picks it


def cluster():
    """s1 owns two tenant-b bundles, one of them hot; s2 is shared; a1 is tenant-a's primary, so tenant-b's
    bundles may not go there (an unload whose shedder chose a1 is refused)."""
    doc = snapshot_doc(
        {
            SOURCE: broker_report(
                cpu=(60, 100), bundles={MOVED: stats(100, thr_in=1e5), HOT: stats(50, thr_in=5e4, topics=1500)}
            ),
            SHARED: broker_report(cpu=(30, 100), bundles={bundle("tenant-b/ns", 2): stats(80, thr_in=8e4)}),
            PRIMARY: broker_report(cpu=(10, 100)),
        }
    )
    doc["isolationPolicies"] = {
        "tenant-a": {
            "namespaces": ["tenant-a/.*"],
            "primary": ["a1\\.pulsar"],
            "secondary": [],
            "auto_failover_policy": {
                "policy_type": "min_available",
                "parameters": {"min_limit": "1", "usage_threshold": "100"},
            },
        }
    }
    return parse_snapshot(doc)


def to_primary(load, config, state):
    """Always the same unload, with a destination the isolation policy refuses."""
    return SheddingResult((Unload(MOVED, SOURCE, PRIMARY, "test: to a1"),), state)


def plan(shedding, config=None):
    return plan_cycle(cluster(), config or cfg(), StrategyState(), random.Random(0), shedding)


def test_a_refused_own_destination_is_dropped_or_placed_as_the_shedder_declares(registry_restored):
    registry_restored.register_shedding(
        Shedder(name="Skipping", shed=to_primary, places_itself=True, refused_destination="skip")
    )
    registry_restored.register_shedding(Shedder(name="Placing", shed=to_primary, places_itself=True))
    registry_restored.register_shedding(Shedder(name="Hinting", shed=to_primary))

    skipped, state = plan("Skipping")
    assert skipped.unloads == () and skipped.placement == "(transfer)"
    assert any(n.startswith(f"skip {MOVED}: {PRIMARY} is another namespace's primary") for n in skipped.notes)
    assert MOVED not in state.recently_unloaded  # never planned: no grace period

    placed, state = plan("Placing")
    (unload,) = placed.unloads
    assert (unload.destination, unload.source) == (SHARED, SOURCE)
    assert "destination by LeastLongTermMessageRate (the shedder's own choice a1.pulsar:8080 refused" in unload.reason
    assert MOVED in state.recently_unloaded

    # a shedder that does not place itself: its destination is no more than a hint, placement decides
    (hinted,) = plan("Hinting")[0].unloads
    assert hinted.destination == SHARED and hinted.reason.endswith("; destination by LeastLongTermMessageRate")


def test_a_shedder_that_plans_splits_gets_the_split_strategys_picks_first(registry_restored):
    given = []

    def keep_halves(load, config, state, splits):
        given.extend(splits)
        return SheddingResult((), state, ("test: halves kept",), tuple(replace(s, unload=False) for s in splits))

    def nothing(load, config, state):
        return SheddingResult((), state)

    registry_restored.register_shedding(SplitPlanningShedder(name="SplitPlanner", shed=keep_halves))
    registry_restored.register_shedding(Shedder(name="NoSplits", shed=nothing))

    planned, _ = plan("SplitPlanner")
    assert [s.bundle for s in given] == [HOT]  # the trigger ran before the shedder, and once
    assert [(s.bundle, s.unload) for s in planned.splits] == [(HOT, False)]  # what the shedder returned

    after, _ = plan("NoSplits")
    assert [(s.bundle, s.unload) for s in after.splits] == [(HOT, True)]  # the trigger, after shedding


def test_a_placement_that_follows_a_plan_is_kept_only_with_the_shedder_it_belongs_to(registry_restored):
    registry_restored.register_shedding(
        Shedder(name="Paired", shed=to_primary, default_placement="AvgShedder", own_placement="AvgShedder")
    )
    registry_restored.register_shedding(Shedder(name="Unpaired", shed=to_primary))
    kept, _ = plan_cycle(cluster(), cfg(), StrategyState(), random.Random(0), "Paired", "AvgShedder")
    assert kept.placement == "AvgShedder"
    fallen, _ = plan_cycle(cluster(), cfg(), StrategyState(), random.Random(0), "Unpaired", "AvgShedder")
    assert fallen.placement == "LeastLongTermMessageRate"
    assert any("with Unpaired Pulsar places with LeastLongTermMessageRate" in n for n in fallen.notes)


def test_transfer_shedder_keeps_its_declared_behaviour_under_another_name(registry_restored):
    """Its traits are what the planner reads: the same function and declaration under a new name plans the same."""
    original = registry_restored.SHEDDING[TRANSFER_SHEDDER]
    registry_restored.register_shedding(
        Shedder(
            name="Renamed",
            shed=original.shed,
            default_placement=original.default_placement,
            places_itself=True,
            refused_destination="skip",
        )
    )
    config = cfg(loadBalancerSheddingConditionHitCountThreshold=0)
    ours, theirs = plan("Renamed", config)[0], plan(TRANSFER_SHEDDER, config)[0]
    assert ours.actions and ours.actions == theirs.actions and ours.notes == theirs.notes


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        (Shedder(name="avgshedder", shed=to_primary), "a shedding strategy named AvgShedder is already registered"),
        (Shedder(name="org.example.Mine", shed=to_primary), "without package or spaces"),
        (Shedder(name=" Mine", shed=to_primary), "without package or spaces"),
        (Shedder(name="Mine", shed=to_primary, default_placement="Nowhere"), "'Nowhere', which is not registered"),
        (Shedder(name="Mine", shed=to_primary, own_placement="Nowhere"), "'Nowhere', which is not registered"),
        (Shedder(name="Mine", shed=to_primary, refused_destination="drop"), "must be 'skip' or 'place'"),
    ],
)
def test_a_registration_a_lookup_could_confuse_is_refused(registry_restored, strategy, message):
    with pytest.raises(ValueError, match=message):
        registry_restored.register_shedding(strategy)
    assert "Mine" not in registry_restored.SHEDDING


def test_a_placement_strategy_registers_and_is_found_by_its_full_class_name(registry_restored):
    def last(candidates, bundle, ctx):
        return max(candidates, default=None)

    registry_restored.register_placement(Placer(name="LastBroker", select=last))
    with pytest.raises(ValueError, match="a placement strategy named LastBroker is already registered"):
        registry_restored.register_placement(Placer(name="lastbroker", select=last))
    registry_restored.register_shedding(Shedder(name="Hint", shed=to_primary, default_placement="LastBroker"))
    by_default, _ = plan("Hint")
    named, _ = plan_cycle(cluster(), cfg(), StrategyState(), random.Random(0), "Hint", "com.example.LastBroker")
    for planned in (by_default, named):
        assert planned.placement == "LastBroker"
        assert [(u.destination, u.reason) for u in planned.unloads] == [
            (SHARED, "test: to a1; destination by LastBroker")
        ]


def test_a_shedder_that_does_not_plan_splits_refuses_them():
    load = build_load_data(cluster(), {}, {}, 0)[0]
    split = Split(HOT, SOURCE, "range_equally_divide", (), "test")
    with pytest.raises(ValueError, match="NoSplits does not plan splits"):
        Shedder(name="NoSplits", shed=to_primary)(load, cfg(), StrategyState(), [split])
