"""A shedding strategy written outside the package, as a user would write one: this module is all of it.

BundleCountShedder evens out bundle counts: when the broker owning the most bundles owns at least two more than
the one owning the fewest, it moves its lightest bundle (short-term msg rate) there, choosing that destination
itself. It registers itself through the public surface when imported; the planner and ``operator rebalance``
then plan with it by name (tests/strategies/test_new_strategy.py).
"""

from __future__ import annotations

from pulsar_lb_operator.strategies import (
    LoadBalancerConfig,
    LoadData,
    Shedder,
    SheddingResult,
    StrategyState,
    Unload,
    register_shedding,
)

NAME = "BundleCountShedder"


def shed(load: LoadData, config: LoadBalancerConfig, state: StrategyState) -> SheddingResult:
    counts = {broker: len(report.bundles) for broker, report in sorted(load.snapshot.brokers.items())}
    most = max(counts, key=counts.__getitem__)
    fewest = min(counts, key=counts.__getitem__)
    if counts[most] - counts[fewest] < 2:
        return SheddingResult((), state, (f"{NAME}: {most} owns {counts[most]} bundles, {fewest} {counts[fewest]}",))
    movable = sorted(load.shedding_candidates(most), key=lambda item: (item[1].short.msg_rate, item[0]))
    if not movable:
        return SheddingResult((), state, (f"{NAME}: no bundle of {most} may move",))
    bundle = movable[0][0]
    why = f"{NAME}: {most} owns {counts[most]} bundles, {fewest} {counts[fewest]}; its lightest moves"
    return SheddingResult((Unload(bundle, most, fewest, why),), state)


STRATEGY = register_shedding(Shedder(name=NAME, shed=shed, places_itself=True))
