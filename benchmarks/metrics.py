"""What a run did to the cluster, recorded by the simulator itself (not by the operator under test)."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypedDict

from pulsar_lb_operator.simulator.cluster import SimulatedCluster

OVERLOAD_PERCENT = 85.0
FLAP_WINDOW_S = 30 * 60.0


def flapping_bundles(moves: Iterable[tuple[str, float]], window_s: float = FLAP_WINDOW_S) -> int:
    """Bundles among (bundle, time s) moves, in time order, moved twice within ``window_s``."""
    times: dict[str, list[float]] = {}
    for bundle, t in moves:
        times.setdefault(bundle, []).append(t)
    return sum(1 for ts in times.values() if any(b - a <= window_s for a, b in itertools.pairwise(ts)))


class RunSummary(TypedDict):
    """What a run left behind: the final spread, what it cost the clients, and where the bundles went."""

    final_spread: float
    final_std: float
    unloads: int
    topics_disconnected: int
    flapping_bundles: int
    broker_cycles_over_85: int
    moves_by_destination: dict[str, int]  # broker name → bundles moved onto it


@dataclass(frozen=True)
class Sample:
    """The cluster at one moment: true usage per broker (no report lag, no noise) and totals so far."""

    time_s: float
    usage: dict[str, float]
    unloads: int
    topics_disconnected: int

    @property
    def spread(self) -> float:
        return max(self.usage.values()) - min(self.usage.values()) if self.usage else 0.0

    @property
    def std(self) -> float:
        return statistics.pstdev(self.usage.values()) if len(self.usage) > 1 else 0.0

    @property
    def overloaded(self) -> int:
        return sum(1 for u in self.usage.values() if u > OVERLOAD_PERCENT)


def broker_usage(cluster: SimulatedCluster) -> dict[str, float]:
    """Every live broker's true usage, as a sample keeps it (rounded to a thousandth of a point)."""
    return {b.name: round(cluster.true_usage(b.id), 3) for b in cluster.alive_brokers()}


@dataclass
class RunMetrics:
    samples: list[Sample] = field(default_factory=list)

    def record(self, cluster: SimulatedCluster) -> Sample:
        with cluster.lock:
            sample = Sample(
                cluster.now_s,
                broker_usage(cluster),
                cluster.unloads,
                cluster.topics_disconnected,
            )
        self.samples.append(sample)
        return sample

    @staticmethod
    def flapping(cluster: SimulatedCluster, window_s: float = FLAP_WINDOW_S) -> int:
        """Bundles moved more than once within ``window_s`` of each other."""
        return flapping_bundles(((bundle, t) for t, bundle, _, _ in cluster.moves), window_s)

    def broker_cycles_overloaded(self) -> int:
        return sum(s.overloaded for s in self.samples)

    def summary(self, cluster: SimulatedCluster) -> RunSummary:
        last = self.samples[-1] if self.samples else self.record(cluster)
        return {
            "final_spread": round(last.spread, 2),
            "final_std": round(last.std, 2),
            "unloads": cluster.unloads,
            "topics_disconnected": cluster.topics_disconnected,
            "flapping_bundles": self.flapping(cluster),
            "broker_cycles_over_85": self.broker_cycles_overloaded(),
            "moves_by_destination": dict(Counter(cluster.brokers[m[3]].name for m in cluster.moves)),
        }
