"""The history a production operator has before it acts, for a benchmark run: one simulated day.

A benchmark run starts from a cold cluster, but the operator in production has days of history and
a profile fitted from them. Here that is 48 samples over 24 hours of the same brokers, bundles and
owners, each namespace's traffic following a ±30% daily curve that peaks up to three hours before or
after the others' (tenants do not all peak at the same hour), with each broker's own sample noise,
fed to the same least-squares fit the Spark job uses. Were every tenant's traffic to rise and fall
together, a broker's message rate and bytes would too, and the fit could not tell what a message
costs from what a byte does (a bundle of another tenant's mix was mispredicted by 21 % at the
median). It runs on its own copy of the cluster, so the run itself sees exactly what it would
without it. Strategies without cost models ignore the profile.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.scenario import Scenario
from pulsar_lb_operator.strategies import COST_RESOURCES, CostLearner, LoadProfile
from pulsar_lb_operator.strategies.bundles import namespace_of

SAMPLES = 48
AMPLITUDE = 0.3
PEAKS_APART = 3 / 24  # of a day: each tenant peaks up to three hours before or after the others (time zones)
TRAFFIC_FIELDS = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")


def day_of_history_profile(
    scenario: Scenario, cluster_factory: Callable[[Scenario], SimulatedCluster] = SimulatedCluster
) -> LoadProfile:
    cluster = cluster_factory(scenario)
    noise = random.Random(scenario.seed + 7)
    learner = CostLearner()
    base = {b: cluster.bundle_stats(b)[0] for b in cluster.ownership}
    phase = {ns: noise.uniform(-PEAKS_APART, PEAKS_APART) for ns in sorted(cluster.namespaces)}
    for k in range(SAMPLES):
        factor = {ns: 1 + AMPLITUDE * math.sin(2 * math.pi * (k / SAMPLES + p)) for ns, p in phase.items()}
        for broker in cluster.alive_brokers():
            stats = {
                b: dataclasses.replace(s, **{f: getattr(s, f) * factor[namespace_of(b)] for f in TRAFFIC_FIELDS})
                for b, s in base.items()
                if cluster.ownership.get(b) == broker.id
            }
            usage = cluster.host_usage(broker, stats, noise.gauss(0, broker.spec.jitter))
            traffic = tuple(sum(column) for column in zip((0.0, 0.0, 0.0), *(s.traffic for s in stats.values())))
            learner.add(broker.id, traffic, {r: usage[r][0] / usage[r][1] * 100 for r in COST_RESOURCES})
    return LoadProfile(cost_models=learner.models())
