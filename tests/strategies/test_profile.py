"""Strategies with an aggregated load profile: long-term rates, sustained hotness, cost models."""

import random
from types import MappingProxyType

from pulsar_lb_operator.strategies import StrategyState, plan_cycle
from pulsar_lb_operator.strategies.loaddata import MessageAverage, build_load_data
from pulsar_lb_operator.strategies.placement import least_long_term_message_rate as lltmr
from pulsar_lb_operator.strategies.placement.common import PlacementContext
from pulsar_lb_operator.strategies.profile import CostModel, HotBundle, LoadProfile
from tests.builders import broker_report, cfg, snapshot, stats


def test_least_long_term_message_rate_uses_the_profiles_long_term_rates():
    snap = snapshot(
        {
            "quiet-now:8080": broker_report(bundles={"t/a/0x00000000_0x00000001": stats(rate_in=100)}),
            "busy-now:8080": broker_report(bundles={"t/b/0x00000000_0x00000001": stats(rate_in=300)}),
        }
    )
    load, _, _ = build_load_data(snap, {}, {}, 0)
    ctx = PlacementContext(load, cfg(), random.Random(0))
    assert lltmr.select(sorted(snap.brokers), "t/c/0x0_0x1", ctx) == "quiet-now:8080"
    # over the last hours the "quiet" broker's bundle averaged 5000 msg/s: it is not the least loaded
    history = {"t/a/0x00000000_0x00000001": MessageAverage(1000, 1000, 5000, 0, 0, 0)}
    ctx = PlacementContext(load.with_profile(LoadProfile(long_term=history)), cfg(), random.Random(0))
    assert lltmr.select(sorted(snap.brokers), "t/c/0x0_0x1", ctx) == "busy-now:8080"


def test_split_trigger_needs_sustained_hotness_when_a_profile_is_present():
    hot = "t/ns/0x00000000_0x80000000"
    snap = snapshot(
        {
            "b:8080": broker_report(bundles={hot: stats(rate_in=40000, topics=5)}),
            "c:8080": broker_report(bundles={"t/x/0x00000000_0x00000001": stats(rate_in=1)}),
        }
    )
    no_hot = LoadProfile(hot=MappingProxyType({}))  # the Spark job found nothing sustained-hot
    plan, _ = plan_cycle(snap, cfg(), StrategyState(), random.Random(0), profile=no_hot)
    assert plan.splits == () and any("not in most recent samples" in n for n in plan.notes)
    profile = LoadProfile(hot=MappingProxyType({hot: HotBundle(0.9, 0x40000000)}))
    plan, _ = plan_cycle(snap, cfg(), StrategyState(), random.Random(0), profile=profile)
    [split] = plan.splits
    assert split.bundle == hot and "hot in 90% of recent samples" in split.reason
    plan, _ = plan_cycle(snap, cfg(), StrategyState(), random.Random(0))  # no profile: the snapshot decides
    assert len(plan.splits) == 1
    plan, _ = plan_cycle(snap, cfg(), StrategyState(), random.Random(0), profile=LoadProfile())  # no hotness info
    assert len(plan.splits) == 1


def test_cost_model_predicts_usage():
    model = CostModel(intercept=40.0, per_msg_rate=0.001, per_byte_in=1e-7, per_byte_out=2e-7, r2=0.99, samples=100)
    assert model.predict(10000, 1e7, 1e7) == 40 + 10 + 1 + 2
