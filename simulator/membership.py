"""Membership: which brokers exist, which are alive, who leads; a broker stopping or coming back.

State it keeps on the cluster: ``brokers`` (id → Broker), ``listeners`` (told of every broker added or
removed: the HTTP server binds or closes its address). A stopped broker's bundles are released; a
restarted one comes back empty and gets load only from placement, as a real one.
"""

from __future__ import annotations

from pulsar_lb_operator.simulator import report_writes
from pulsar_lb_operator.simulator.model import (
    Broker,
)
from pulsar_lb_operator.simulator.scenario import BrokerSpec
from pulsar_lb_operator.simulator.state import ClusterState


class Membership(ClusterState):
    """Mixed into SimulatedCluster (cluster.py); the state it shares with the other mixins is ClusterState's."""

    def _add_broker(self, spec: BrokerSpec) -> Broker:
        broker_id = self.allocate_id(spec.name)
        if broker_id in self.brokers:  # never serve fewer brokers than asked: two on one address is a bug
            taken = self.brokers[broker_id].name
            raise ValueError(f"broker {spec.name}: id {broker_id} is already {taken}'s (the allocator reused it)")
        broker = Broker(spec.name, broker_id, spec, self.now_s)
        offset = (len(self.brokers) * self.scenario.report_interval_s / 7) % self.scenario.report_interval_s
        broker.next_sample_s = self.now_s + offset
        self.brokers[broker.id] = broker
        self._view = None
        for listener in self.listeners:
            listener("added", broker)
        return broker

    def alive_brokers(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b.alive]

    def active_ids(self) -> list[str]:
        return sorted(b.id for b in self.alive_brokers())

    @property
    def leader(self) -> str | None:
        """The longest-running live broker (ties: the first created), as after a leader election."""
        alive = self.alive_brokers()
        return min(alive, key=lambda b: b.started_at_s).id if alive else None

    def by_name(self, name: str) -> Broker:
        for broker in self.brokers.values():
            if broker.name == name:
                return broker
        raise KeyError(name)

    def owned_by(self, broker_id: str) -> list[str]:
        return sorted(self.ownership.owned(broker_id))

    def _stop(self, broker: Broker) -> None:
        broker.alive = False
        if self.leader is None or broker.id == self.leader:
            self.affinity.clear()  # the affinity map lives in the leader's memory
        for bundle in self.owned_by(broker.id):
            self._release(bundle)
        self.preallocated.pop(broker.id, None)
        self._view = None
        for listener in self.listeners:
            listener("removed", broker)

    def _start(self, broker: Broker) -> None:
        """A restarted broker comes back empty and reports at once; it gets load only from placement."""
        broker.alive = True
        broker.started_at_s = self.now_s
        broker.next_sample_s = self.now_s
        broker.stats_sample, broker.topic_sample = {}, {}
        report_writes.restart(broker)
        self._sample(broker)
        broker.next_sample_s = self.now_s + self.scenario.report_interval_s
        for listener in self.listeners:
            listener("added", broker)

    def crash(self, name: str) -> None:
        with self.lock:
            self._stop(self.by_name(name))
