"""The history a production operator has before it acts, for a benchmark run: one simulated day.

A benchmark run starts from a cold cluster, but the operator in production has days of history and
a profile fitted from them. Here that is 48 samples over 24 hours of the same brokers, bundles and
owners, with traffic following a ±30% daily curve (with each broker's own sample noise), fed to the
same least-squares fit the Spark job uses. It runs on its own copy of the cluster, so the run
itself sees exactly what it would without it. Strategies without cost models ignore the profile.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.scenario import Scenario
from pulsar_lb_operator.strategies import COST_RESOURCES, CostLearner, LoadProfile

SAMPLES = 48
AMPLITUDE = 0.3
TRAFFIC_FIELDS = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")


def day_of_history_profile(
    scenario: Scenario, cluster_factory: Callable[[Scenario], SimulatedCluster] = SimulatedCluster
) -> LoadProfile:
    cluster = cluster_factory(scenario)
    noise = random.Random(scenario.seed + 7)
    learner = CostLearner()
    base = {b: cluster.bundle_stats(b)[0] for b in cluster.ownership}
    for k in range(SAMPLES):
        factor = 1 + AMPLITUDE * math.sin(2 * math.pi * k / SAMPLES)
        for broker in cluster.alive_brokers():
            stats = {
                b: dataclasses.replace(s, **{f: getattr(s, f) * factor for f in TRAFFIC_FIELDS})
                for b, s in base.items()
                if cluster.ownership.get(b) == broker.id
            }
            usage = cluster.host_usage(broker, stats, noise.gauss(0, broker.spec.jitter))
            traffic = tuple(sum(column) for column in zip((0.0, 0.0, 0.0), *(s.traffic for s in stats.values())))
            learner.add(broker.id, traffic, {r: usage[r][0] / usage[r][1] * 100 for r in COST_RESOURCES})
    return LoadProfile(cost_models=learner.models())
