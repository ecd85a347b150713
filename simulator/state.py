"""What the mixins of the simulated cluster share: its state, and the methods one mixin calls on another.

SimulatedCluster (cluster.py) is one class assembled from mixins, one job each (membership.py,
ownership.py, physics.py, reports.py, splits.py, clock.py); its constructor creates the state they all
read. Every mixin derives from ``ClusterState``, so the type checker checks each mixin's reads against
this one declaration. The methods here are abstract: one that no mixin defines leaves SimulatedCluster
abstract, and neither mypy nor Python will build one.
"""

from __future__ import annotations

import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

from pulsar_lb_operator.simulator import report_writes
from pulsar_lb_operator.simulator.model import Broker, Topic
from pulsar_lb_operator.simulator.ownership_index import Ownership
from pulsar_lb_operator.simulator.scenario import BrokerSpec, EventSpec, Scenario
from pulsar_lb_operator.simulator.traffic import TrafficPattern
from pulsar_lb_operator.strategies import (
    BrokerLoad,
    BundleData,
    BundleStats,
    ClusterSnapshot,
    LoadBalancerConfig,
    StrategyState,
    TopicStats,
)
from pulsar_lb_operator.strategies import policies as ns_policies

# A load report as the simulator builds it: LocalBrokerData's JSON object.
Report = dict[str, Any]


class Ticker(Protocol):
    """A task of its own period inside ``advance()``, under the cluster's lock (ELM's 5 s checks, elm.py)."""

    next_s: float  # simulated time of its next tick

    def tick(self, now_s: float) -> None: ...


class ClusterState(ABC):
    """The simulated cluster's shared state (created by SimulatedCluster's constructor) and cross-mixin methods."""

    scenario: Scenario
    epoch_ms: int  # the wall-clock time of simulated time 0
    lock: threading.RLock  # every public method takes it: the HTTP server calls in from its threads
    allocate_id: Callable[[str], str]  # broker name → its id (host:port when served over HTTP)
    rng: random.Random  # placement and the initial deal
    noise: random.Random  # jitter of traffic and host usage
    now_s: float  # simulated time
    config: LoadBalancerConfig  # the brokers' load-balancer settings (the scenario's, over Pulsar's defaults)
    dynamic_config: dict[str, str]
    # membership
    brokers: dict[str, Broker]  # id → broker, stopped ones included
    listeners: list[Callable[[str, Broker], None]]  # told of every broker ("added" | "removed")
    # physics: bundle boundaries per namespace, topics sorted by hash, and the traffic over time
    namespaces: dict[str, list[int]]
    topics: dict[str, list[Topic]]
    patterns: list[TrafficPattern]
    traffic_factor: dict[str, float]  # namespace (``*``: all) → factor of its rate
    topic_factor: dict[str, float]  # full topic name → factor (a traffic event naming topics)
    # ownership
    affinity: dict[str, str]  # the leader's remembered destinations (affinity_key → broker id)
    pending_lookups: dict[str, float]  # unowned bundle → when its clients look it up again
    unloading: dict[str, float]  # bundle → simulated time its unload's window ends
    released_from: dict[str, str]  # unowned bundle → the broker that last owned it
    preallocated: dict[str, list[str]]  # broker id → bundles assigned to it since its last sample
    moves: list[tuple[float, str, str, str]]  # (time, bundle, from, to) of completed moves
    unloads: int
    topics_disconnected: int
    anti_affinity_groups: dict[str, str]  # namespace → its anti-affinity group
    _policies: tuple[int, ns_policies.NamespacePolicies] | None  # (broker count, policies), built on demand
    # reports and the leader's view
    report_update_settings: report_writes.Settings
    _reports: dict[str, tuple[tuple[int, float], Report]]  # broker id → (what it was built from, report)
    _report_json: dict[str, tuple[Report, bytes]]  # broker id → (report, its JSON)
    _parsed: dict[str, tuple[Report, BrokerLoad]]  # broker id → (report, the leader's parse)
    _fresh_parsed: dict[str, tuple[Report, BrokerLoad]]  # broker id → (REST report, its parse)
    _view: ClusterSnapshot | None  # the leader's view, None once a change makes it stale
    _last_leader_sample_s: float
    leader_bundle_data: dict[str, BundleData]
    # the clock: scenario events still to come, periodic tasks, callbacks after each advance() (outside the lock)
    events: list[EventSpec]
    tickers: list[Ticker]
    after_advance: list[Callable[[], object]]
    # Pulsar's own shedder on the leader, active while loadBalancerSheddingEnabled is true
    builtin_state: StrategyState
    builtin_actions: int
    next_shed_s: float

    @property
    @abstractmethod
    def ownership(self) -> Ownership: ...

    @ownership.setter
    @abstractmethod
    def ownership(self, value: dict[str, str]) -> None: ...

    # membership.py
    @property
    @abstractmethod
    def leader(self) -> str | None: ...

    @abstractmethod
    def _add_broker(self, spec: BrokerSpec) -> Broker: ...

    @abstractmethod
    def alive_brokers(self) -> list[Broker]: ...

    @abstractmethod
    def active_ids(self) -> list[str]: ...

    @abstractmethod
    def by_name(self, name: str) -> Broker: ...

    @abstractmethod
    def owned_by(self, broker_id: str) -> list[str]: ...

    @abstractmethod
    def _stop(self, broker: Broker) -> None: ...

    @abstractmethod
    def _start(self, broker: Broker) -> None: ...

    # ownership.py
    @abstractmethod
    def _release(self, bundle: str) -> None: ...

    @abstractmethod
    def in_transition(self, bundle: str) -> bool: ...

    @abstractmethod
    def check_bundle(self, bundle: str) -> None: ...

    @abstractmethod
    def assign(self, bundle: str) -> str: ...

    @abstractmethod
    def unload(self, bundle: str, destination: str | None = None) -> None: ...

    @abstractmethod
    def namespace_policies(self) -> ns_policies.NamespacePolicies: ...

    # physics.py
    @abstractmethod
    def _bundles_of(self, namespace: str) -> list[str]: ...

    @abstractmethod
    def topics_in(self, bundle: str) -> list[Topic]: ...

    @abstractmethod
    def bundle_stats(self, bundle: str) -> tuple[BundleStats, dict[str, TopicStats]]: ...

    @abstractmethod
    def host_usage(
        self, broker: Broker, stats: dict[str, BundleStats], noise: float
    ) -> dict[str, tuple[float, float]]: ...

    @abstractmethod
    def balanced_deal(self) -> dict[str, str]: ...

    @abstractmethod
    def change_traffic(self, event: EventSpec) -> None: ...

    @abstractmethod
    def change_background(self, broker: Broker, fraction: float) -> None: ...

    # reports.py
    @abstractmethod
    def _sample(self, broker: Broker) -> None: ...

    @abstractmethod
    def _leader_sample(self) -> None: ...

    @abstractmethod
    def load_report(self, broker_id: str) -> Report: ...

    @abstractmethod
    def leader_view(self) -> ClusterSnapshot: ...

    # splits.py
    @abstractmethod
    def split(self, bundle: str, algorithm: str | None, positions: list[int] | None, unload: bool) -> None: ...

    # clock.py
    @property
    @abstractmethod
    def now_ms(self) -> int: ...
