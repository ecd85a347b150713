"""Cost models: one broker's fit, and the fits of alike brokers pooled into the cost the predictive shedder plans on."""

import dataclasses
import math
import random

import numpy as np
import pytest

from pulsar_lb_operator.strategies import costs
from pulsar_lb_operator.strategies.costs import CostLearner, pooled

TRUE = np.array([0.002, 2e-7, 1e-7])  # usage % per msg/s (in + out), per B/s in, per B/s out
# two tenants, each rising and falling over the day: msg/s in, bytes a message, fan-out, phase (radians)
TENANTS = [(4000.0, 256.0, 1.0, 0.0), (500.0, 4096.0, 3.0, 0.4)]
SHARES = {"a": (1.0, 0.2), "b": (0.3, 1.0), "c": (0.7, 0.6), "d": (0.1, 0.9)}  # each broker's share of each tenant


def _tenant(t: int, k: int) -> np.ndarray:
    rate, size, fanout, phase = TENANTS[t]
    f = 1 + 0.3 * math.sin(2 * math.pi * k / 48 + phase)
    return np.array([rate * (1 + fanout), rate * size, rate * size * fanout]) * f


def _fits(noise: float = 0.5, speeds: dict[str, float] | None = None):
    """A day of half-hourly samples of four alike brokers, each carrying the two tenants in its own shares (and
    paying ``speeds`` times the true cost: 1 unless given)."""
    rng = random.Random(1)
    learner = CostLearner()
    for k in range(48):
        for broker, (first, second) in SHARES.items():
            traffic = first * _tenant(0, k) + second * _tenant(1, k)
            cost = (speeds or {}).get(broker, 1.0) * TRUE @ traffic
            learner.add(broker, tuple(traffic), {"cpu": 5.0 + cost + rng.gauss(0, noise)})
    return {b: m for (b, resource), m in learner.models().items() if resource == "cpu"}


def test_alike_brokers_pooled_price_each_tenants_bundles_where_their_own_fits_cannot():
    """Each broker's tenants rise and fall nearly together, so its own fit trades the cost of a message against a
    byte's: right for its own mix, off by a fifth or more for a bundle of one tenant. Pooled, the brokers' different
    shares tell the costs apart."""
    models = _fits()
    bundles = [_tenant(t, 0) / 10 for t in range(len(TENANTS))]
    shared = pooled((m, 1.0) for m in models.values())
    assert shared is not None and (shared >= 0).all()
    for bundle in bundles:
        assert abs(shared @ bundle / (TRUE @ bundle) - 1) < 0.05
    averaged = np.mean([[m.per_msg_rate, m.per_byte_in, m.per_byte_out] for m in models.values()], axis=0)
    assert max(abs(averaged @ b / (TRUE @ b) - 1) for b in bundles) > 0.2  # what the fits' average said


def test_the_pool_is_per_core_and_never_prices_traffic_below_zero():
    models = _fits(noise=0.0)
    per_core = pooled((m, 400.0) for m in models.values())  # four cores each: their usage % × 400
    assert per_core is not None and (per_core >= 0).all()
    bundle = _tenant(0, 0)
    assert per_core @ bundle / 400.0 == pytest.approx(TRUE @ bundle, rel=1e-6)


def test_alike_brokers_at_two_speeds_share_one_split_of_their_cost(monkeypatch):
    """Two of four alike brokers pay 1.3 times the true cost for their traffic, the other two 0.8 times (two
    hardware generations), the slow ones carrying more of the large-message tenant. Pooled at one speed, the slow
    brokers' levels read as bytes costing more: a bundle of that tenant priced 40 % dearer against the other's than
    it is, which a fill would overshoot by. With a speed per broker the split is the true one (the shedder scales
    each broker to its own speed)."""
    models = _fits(noise=0.0, speeds={"a": 0.8, "b": 1.3, "c": 1.3, "d": 0.8})
    bundles = [_tenant(t, 0) / 10 for t in range(len(TENANTS))]

    def relative(cost):  # the second tenant's bundle against the first's, each against its true cost
        return (cost @ bundles[1] / (TRUE @ bundles[1])) / (cost @ bundles[0] / (TRUE @ bundles[0]))

    shared = pooled((m, 1.0) for m in models.values())
    assert shared is not None and relative(shared) == pytest.approx(1.0, abs=0.01)
    monkeypatch.setattr(costs, "_speeds_tell", lambda *_: False)  # the pool at one speed
    assert relative(pooled((m, 1.0) for m in models.values())) > 1.3


def test_a_profile_written_before_the_sums_were_kept_is_not_pooled():
    models = _fits()
    old = [dataclasses.replace(m, centred=()) for m in models.values()]
    assert pooled((m, 1.0) for m in old) is None
    assert pooled([]) is None
