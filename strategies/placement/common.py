"""What a placement strategy sees: the cycle's load data plus the bundles it already placed this cycle."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData


@dataclass
class PlacementContext:
    """Mutable only within one planning cycle; the planner copies state in and out."""

    load: LoadData
    config: LoadBalancerConfig
    rng: random.Random
    # broker -> bundles assigned to it this cycle but not yet in its report (PreallocatedBundleData)
    preallocated: dict[str, list[str]] = field(default_factory=dict)
    # LeastResourceUsageWithWeight's own history map
    placement_ema: dict[str, float] = field(default_factory=dict)
    # AvgShedder's plan: bundle -> the low broker of the pair that shed it
    planned: dict[str, str] = field(default_factory=dict)
    # a placement strategy's own tables over this cycle's load data, made once per context (by strategy name)
    memo: dict[str, Any] = field(default_factory=dict)

    def preallocate(self, broker: str, bundle: str) -> None:
        self.preallocated.setdefault(broker, []).append(bundle)
