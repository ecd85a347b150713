"""Pure load-balancing algorithms: Pulsar's shedding, placement and split strategies, and ours.

Nothing here does I/O, reads a clock or uses global randomness: a strategy takes an immutable
snapshot, the configuration and its own small state, and returns a plan and its next state.

This module is the package's public surface: the layers above (the operator, the simulator, the Spark
job, the benchmarks) import what is in ``__all__`` from here, never from a submodule, so the inside can be
split and renamed without touching them (tests/strategies/test_public_surface.py holds them to it). Three
submodules are public whole, being namespaces of many small functions: ``bundles`` (Pulsar's bundle names and
hash ranges), ``policies`` (namespace isolation, anti-affinity, failure domains) and ``registry``
(strategies by name).

A new strategy is one module: a function wrapped in a ``Shedder`` (or ``Placer``) that says what the strategy
does, passed to ``register_shedding`` (``register_placement``); see protocol.py.
"""

from pulsar_lb_operator.strategies import bundles, policies, registry
from pulsar_lb_operator.strategies.averages import NUM_LONG_SAMPLES, MessageAverage
from pulsar_lb_operator.strategies.config import ALIASES as CONFIG_ALIASES
from pulsar_lb_operator.strategies.config import (
    YEAR_MINUTES,
    ConfigError,
    LoadBalancerConfig,
    config_keys,
    convert_value,
    did_you_mean,
)
from pulsar_lb_operator.strategies.costs import RESOURCES as COST_RESOURCES
from pulsar_lb_operator.strategies.costs import CostLearner
from pulsar_lb_operator.strategies.costs import solve as fit_cost_model
from pulsar_lb_operator.strategies.documents import MAX_BROKER_TOTAL, Reader, StateError, describe, type_name
from pulsar_lb_operator.strategies.drain import plan_drain
from pulsar_lb_operator.strategies.errors import ClusterError, InternalError, PulsarLbError, UserError
from pulsar_lb_operator.strategies.heap import collector_paused
from pulsar_lb_operator.strategies.loaddata import (
    BundleData,
    LoadData,
    build_load_data,
    update_bundle_data,
)
from pulsar_lb_operator.strategies.placement.common import PlacementContext
from pulsar_lb_operator.strategies.planner import estimate_after, plan_cycle, select_broker
from pulsar_lb_operator.strategies.plans import Action, BrokerScore, Plan, Split, Unload, action_from_json
from pulsar_lb_operator.strategies.profile import CostModel, HotBundle, LoadProfile
from pulsar_lb_operator.strategies.protocol import (
    PlacementStrategy,
    Placer,
    RefusedDestination,
    Shedder,
    SheddingStrategy,
    SplitPlanningShedder,
    SplitStrategy,
)
from pulsar_lb_operator.strategies.rails import DEFAULT_RAILS, Rails
from pulsar_lb_operator.strategies.registry import (
    PLACEMENT,
    SHEDDING,
    UnknownStrategyError,
    register_placement,
    register_shedding,
)
from pulsar_lb_operator.strategies.shedding.common import SheddingResult
from pulsar_lb_operator.strategies.shedding.transfer import compare_bundle_stats
from pulsar_lb_operator.strategies.snapshots import (
    RESOURCE_FIELDS,
    BrokerLoad,
    BundleStats,
    ClusterSnapshot,
    DecodedReport,
    ResourceUsage,
    SnapshotError,
    TopicStats,
    decode_load_report,
    parse_broker_load,
    parse_snapshot,
)
from pulsar_lb_operator.strategies.splitting.algorithms import (
    RANGE_EQUALLY_DIVIDE,
    SPECIFIED_POSITIONS_DIVIDE,
    TOPIC_COUNT_EQUALLY_DIVIDE,
    SplitError,
    flow_or_qps_equally_divide,
    range_equally_divide,
    specified_positions_divide,
    topic_count_equally_divide,
)
from pulsar_lb_operator.strategies.splitting.trigger import find_bundles_to_split
from pulsar_lb_operator.strategies.state import StrategyState

# planning: a cycle, a drain, one placement, the estimate of a plan's effect
__all__ = [
    "Action",
    "BrokerScore",
    "Plan",
    "Split",
    "Unload",
    "action_from_json",
    "estimate_after",
    "plan_cycle",
    "plan_drain",
    "select_broker",
]
# the strategy protocol and the registry (protocol.py, registry.py)
__all__ += [
    "PLACEMENT",
    "SHEDDING",
    "PlacementContext",
    "PlacementStrategy",
    "Placer",
    "RefusedDestination",
    "Shedder",
    "SheddingResult",
    "SheddingStrategy",
    "SplitPlanningShedder",
    "SplitStrategy",
    "UnknownStrategyError",
    "register_placement",
    "register_shedding",
    "registry",
]
# what strategies read: the cycle's load data, the configuration, the profile, the caps, their state
__all__ += [
    "CONFIG_ALIASES",
    "DEFAULT_RAILS",
    "NUM_LONG_SAMPLES",
    "YEAR_MINUTES",
    "BundleData",
    "ConfigError",
    "CostModel",
    "HotBundle",
    "LoadBalancerConfig",
    "LoadData",
    "LoadProfile",
    "MessageAverage",
    "Rails",
    "StateError",
    "StrategyState",
    "build_load_data",
    "config_keys",
    "convert_value",
    "did_you_mean",
    "update_bundle_data",
]
# the snapshot: Pulsar's load reports, bundle names, namespace policies
__all__ += [
    "RESOURCE_FIELDS",
    "BrokerLoad",
    "BundleStats",
    "ClusterSnapshot",
    "DecodedReport",
    "ResourceUsage",
    "SnapshotError",
    "TopicStats",
    "bundles",
    "decode_load_report",
    "parse_broker_load",
    "parse_snapshot",
    "policies",
]
# Pulsar's own algorithms the simulator's brokers run too: splits, the extensible manager's top bundles
__all__ += [
    "RANGE_EQUALLY_DIVIDE",
    "SPECIFIED_POSITIONS_DIVIDE",
    "TOPIC_COUNT_EQUALLY_DIVIDE",
    "SplitError",
    "compare_bundle_stats",
    "find_bundles_to_split",
    "flow_or_qps_equally_divide",
    "range_equally_divide",
    "specified_positions_divide",
    "topic_count_equally_divide",
]
# shared with the layers above, this being the lowest: strict JSON reading, the cost-model fit the Spark
# job runs too, the collector's pause
__all__ += [
    "COST_RESOURCES",
    "MAX_BROKER_TOTAL",
    "CostLearner",
    "Reader",
    "collector_paused",
    "describe",
    "fit_cost_model",
    "type_name",
]
# the one exception tree every layer raises from (errors.py): its branch gives the command's exit code
__all__ += [
    "ClusterError",
    "InternalError",
    "PulsarLbError",
    "UserError",
]
