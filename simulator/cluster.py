"""The simulated cluster: brokers, bundles, topics, ownership and load physics, in simulated time.

Behaviour follows the modular load manager (shared/reference/pulsar-admin-api.md §3.13, §3.14, §7):
an unloaded bundle is unowned until its clients reconnect and look it up; the leader then assigns it
to the destination remembered for it (once) or by the cluster's own placement. Brokers sample host
usage and bundle stats every ``report_interval_s``, so a report lags a move, as in real life.

Thread-safe: the HTTP server calls in from its threads; every public method takes the lock.

Linear in the cluster: ownership is indexed by owner (a broker's bundles without a scan of the whole
map), a broker's load report is built once per change of its sample or of its bundles, and the
leader's view re-parses only the reports that changed.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from pulsar_lb_operator.simulator import report_writes
from pulsar_lb_operator.simulator.clock import Clock
from pulsar_lb_operator.simulator.membership import Membership
from pulsar_lb_operator.simulator.model import (  # re-exported: the simulator's vocabulary
    EPOCH_MS,
    LEADER_SAMPLE_S,
    MIB,
    RECONNECT_DELAY_S,
    UNLOAD_WINDOW_S,
    Broker,
    SimError,
    Topic,
    unexpected,
    virtual_ids,
)
from pulsar_lb_operator.simulator.ownership import OwnershipJobs
from pulsar_lb_operator.simulator.ownership_index import Ownership
from pulsar_lb_operator.simulator.physics import Physics
from pulsar_lb_operator.simulator.reports import Reports
from pulsar_lb_operator.simulator.scenario import Scenario
from pulsar_lb_operator.simulator.splits import Splits
from pulsar_lb_operator.strategies import LoadBalancerConfig, StrategyState

__all__ = [
    "EPOCH_MS",
    "LEADER_SAMPLE_S",
    "MIB",
    "RECONNECT_DELAY_S",
    "UNLOAD_WINDOW_S",
    "Broker",
    "Ownership",
    "SimError",
    "SimulatedCluster",
    "Topic",
    "unexpected",
    "virtual_ids",
]


class SimulatedCluster(Membership, OwnershipJobs, Physics, Reports, Splits, Clock):
    """One simulated Pulsar cluster. Its jobs are in their own modules, one class each, mixed in here:
    membership.py (brokers, leader, stop/start), ownership.py (owners, unloads, assignment, namespace
    policies), physics.py (topics, traffic, host usage), reports.py (samples, load reports, the leader's
    view), splits.py, clock.py (simulated time, events, Pulsar's own shedder). This class makes the state
    they share (declared, with what each part holds, on ClusterState in state.py) and the lock every public
    method takes.
    """

    def __init__(
        self, scenario: Scenario, allocate_id: Callable[[str], str] | None = None, epoch_ms: int = EPOCH_MS
    ) -> None:
        """``epoch_ms``: the wall-clock time of simulated time 0 (fixed by default, so runs repeat exactly)."""
        self.scenario = scenario
        self.epoch_ms = epoch_ms
        self.lock = threading.RLock()
        self.allocate_id = allocate_id or virtual_ids()
        prepare = getattr(self.allocate_id, "prepare", None)
        if prepare is not None:  # e.g. the HTTP server's allocator: addressing mode, file descriptor limit
            prepare(scenario)
        self.rng = random.Random(scenario.seed)
        self.noise = random.Random(scenario.seed + 1)
        self.now_s = 0.0
        self.config = LoadBalancerConfig().replace(scenario.config)
        self.dynamic_config = {}
        self.brokers = {}
        self.listeners = []
        self.namespaces = {}
        self.topics = {}
        self.patterns = [ns.pattern for ns in scenario.namespaces]
        self.traffic_factor = {}
        self.topic_factor = {}
        self._ownership = Ownership()
        self.affinity = {}
        self.pending_lookups = {}
        self.unloading = {}
        self.released_from = {}
        self.preallocated = {}
        self.moves = []
        self.unloads = 0
        self.topics_disconnected = 0
        self.anti_affinity_groups = {
            ns.name: ns.anti_affinity_group for ns in scenario.namespaces if ns.anti_affinity_group
        }
        self._policies = None
        self.report_update_settings = report_writes.Settings.of(scenario)
        self._reports = {}
        self._report_json = {}
        self._parsed = {}
        self._fresh_parsed = {}
        self._view = None
        self._last_leader_sample_s = -LEADER_SAMPLE_S
        self.leader_bundle_data = {}
        self.events = list(scenario.events)
        self.tickers = []
        self.after_advance = []
        self.builtin_state = StrategyState()
        self.builtin_actions = 0
        self.next_shed_s = scenario.shedding_interval_s
        for spec in scenario.brokers:
            self._add_broker(spec)
        self._create_namespaces()
        self._initial_assignment()
        for broker in self.brokers.values():
            self._sample(broker)
        self._leader_sample()

    @property
    def ownership(self) -> Ownership:
        """bundle → owner broker id (indexed by owner; assigning a plain dict re-indexes it)."""
        return self._ownership

    @ownership.setter
    def ownership(self, value: dict[str, str]) -> None:
        self._ownership = value if isinstance(value, Ownership) else Ownership(value)
