"""Pure load-balancing algorithms: Pulsar's shedding, placement and split strategies, and ours.

Nothing here does I/O, reads a clock or uses global randomness: a strategy takes an immutable
snapshot, the configuration and its own small state, and returns a plan and its next state.
"""

from pulsar_lb_operator.strategies.config import ConfigError, LoadBalancerConfig
from pulsar_lb_operator.strategies.errors import ClusterError, InternalError, PulsarLbError, UserError
from pulsar_lb_operator.strategies.planner import plan_cycle
from pulsar_lb_operator.strategies.plans import Plan, Split, Unload
from pulsar_lb_operator.strategies.registry import PLACEMENT, SHEDDING, UnknownStrategyError
from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot, SnapshotError, parse_snapshot
from pulsar_lb_operator.strategies.state import StateError, StrategyState

__all__ = [
    "PLACEMENT",
    "SHEDDING",
    "ClusterError",
    "ClusterSnapshot",
    "ConfigError",
    "InternalError",
    "LoadBalancerConfig",
    "Plan",
    "PulsarLbError",
    "SnapshotError",
    "Split",
    "StateError",
    "StrategyState",
    "UnknownStrategyError",
    "Unload",
    "UserError",
    "parse_snapshot",
    "plan_cycle",
]
