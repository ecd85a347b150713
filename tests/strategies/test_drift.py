"""Where a broker's level is going: its drift read from its steady levels, and the plan's horizon."""

import math

import pytest

from pulsar_lb_operator.strategies.shedding.predictive import drift
from tests.builders import cfg

RAMP = tuple(50.0 + 0.5 * i for i in range(9))  # half a point a report, as a tenant's daily curve climbs


def test_a_steady_climb_is_its_drift_and_a_move_or_a_surge_among_it_is_not():
    assert drift.per_cycle(RAMP) == pytest.approx(0.5)
    moved = (*RAMP[:5], *(v - 6.0 for v in RAMP[5:]))  # a move took 6 points off at the sixth report
    assert drift.per_cycle(moved) == pytest.approx(0.5)
    surged = (50.0,) * 4 + (62.0,) * 5  # a surge: one step, flat either side
    assert drift.per_cycle(surged) == 0.0


def test_levels_that_only_jitter_have_no_drift():
    assert drift.per_cycle((50.5, 49.5, 50.25, 49.75, 50.0, 50.5, 49.5, 50.0, 50.0)) == 0.0
    assert drift.per_cycle((50.0, 50.6, 49.8, 50.9, 50.1, 50.8, 50.2, 50.7, 50.3)) == 0.0


def test_too_few_levels_or_one_not_a_number_say_nothing():
    assert drift.per_cycle(RAMP[:3]) == 0.0  # two differences: a move's step would be half of them
    assert drift.per_cycle((*RAMP[:4], math.nan, *RAMP[5:])) == 0.0


def test_the_horizon_and_the_window_come_from_the_low_hit_count():
    config = cfg(loadBalancerAvgShedderHitCountLowThreshold=6)
    assert drift.window(config) == 7 and drift.horizon(config) == 3
    history = {"a:1": RAMP, "b:1": (40.0,) * 9, "c:1": tuple(60.0 - 3 * i for i in range(9))}
    # c sinks 3 points a report: 9 in three reports, held to the band
    assert drift.offsets(history, {"a:1", "b:1", "c:1", "d:1"}, config, 4.5, 0.5) == {"a:1": 1.5, "c:1": -4.5}
    # a's 1.5 points in three reports is within a noise of 2: the band allows for it already
    assert drift.offsets(history, {"a:1", "c:1"}, config, 4.5, 2.0) == {"c:1": -4.5}
    # five levels from a broker's first reports, its bundles' averages still filling: too few to read a drift from
    assert drift.offsets({"a:1": RAMP[:5]}, {"a:1"}, config, 4.5, 0.5) == {}


def test_the_record_keeps_the_window_drops_brokers_gone_and_restarts_on_a_level_not_a_number():
    config = cfg()  # low hit count 8: nine levels
    history = {"a:1": RAMP, "gone:1": RAMP, "b:1": (40.0, 41.0)}
    kept = drift.remembered(history, {"a:1": 54.5, "b:1": math.inf, "new:1": 30.0}, config)
    assert kept == {"a:1": (*RAMP[1:], 54.5), "b:1": (), "new:1": (30.0,)}


def test_a_fill_over_several_cycles_is_no_drift():
    """A broker that joined empty is filled ten points a cycle by the shedder's own moves: its record moves with each
    fill carried out, and reads flat."""
    config, history, level = cfg(), {}, 2.0
    for _ in range(5):
        history = drift.carried(drift.remembered(history, {"new:1": level}, config), {"new:1": 10.0})
        level += 10.0  # the next report shows the fill
    assert history["new:1"] == (52.0,) * 5  # as if it had carried its five fills all along
    assert drift.per_cycle(history["new:1"]) == 0.0


def test_a_step_where_bundles_moved_that_the_shedder_did_not_move_is_no_drift():
    """A rolling restart: a StatefulSet restarts its brokers one a minute, and each that leaves has its bundles placed
    on the rest, a step of 3 points on a at each of five reports. Read as they come, the steps are a climb of 3
    points a report; continued across each, a's record reads flat."""
    config, history, as_read, level = cfg(), {}, (), 40.0
    for report in range(9):
        if report >= 4:
            level += 3.0  # the next broker left, and some of its bundles landed on a
            history = drift.continued(history, {"a:1": level})
        history = drift.remembered(history, {"a:1": level}, config)
        as_read = (*as_read, level)
    assert drift.per_cycle(as_read) == 3.0
    assert history["a:1"] == (55.0,) * 9
    assert drift.offsets(history, {"a:1"}, config, 4.5, 0.5) == {}
