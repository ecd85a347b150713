"""Simulated time: events, reconnect lookups, periodic samples and Pulsar's own shedder, in time order."""

from __future__ import annotations

from pulsar_lb_operator.simulator.model import (
    RECONNECT_DELAY_S,
    Broker,
    SimError,
)
from pulsar_lb_operator.simulator.scenario import EventSpec
from pulsar_lb_operator.simulator.state import ClusterState
from pulsar_lb_operator.strategies import Split, Unload, plan_cycle


class Clock(ClusterState):
    """Mixed into SimulatedCluster (cluster.py); the state it shares with the other mixins is ClusterState's."""

    @property
    def now_ms(self) -> int:
        return self.epoch_ms + int(self.now_s * 1000)

    def advance(self, seconds: float) -> None:
        """Run simulated time forward: events, reconnect lookups and periodic samples, in time order."""
        with self.lock:
            end = self.now_s + seconds
            while True:
                due = [b.next_sample_s for b in self.alive_brokers()]
                due += list(self.pending_lookups.values())
                due += [e.at_s for e in self.events[:1]]
                due.append(self.next_shed_s)
                due += [ticker.next_s for ticker in self.tickers]
                next_t = min([t for t in due if t <= end], default=None)
                if next_t is None:
                    break
                self.now_s = max(self.now_s, next_t)
                while self.events and self.events[0].at_s <= self.now_s:
                    self._apply_event(self.events.pop(0))
                for bundle, t in sorted(self.pending_lookups.items()):
                    if t <= self.now_s:
                        try:
                            self.assign(bundle)
                        except SimError:  # no broker may own it now: its clients look it up again later
                            self.pending_lookups[bundle] = self.now_s + RECONNECT_DELAY_S
                sampled = False
                for broker in self.alive_brokers():
                    if broker.next_sample_s <= self.now_s:
                        self._sample(broker)
                        broker.next_sample_s += self.scenario.report_interval_s
                        sampled = True
                if sampled:
                    self._leader_sample()
                for ticker in list(self.tickers):  # after the samples of the same instant
                    if ticker.next_s <= self.now_s:
                        ticker.tick(self.now_s)
                if self.next_shed_s <= self.now_s:
                    self._builtin_cycle()
                    self.next_shed_s += self.config.loadBalancerSheddingIntervalMinutes * 60
            self.now_s = end
        for callback in list(self.after_advance):
            callback()

    def _builtin_cycle(self) -> None:
        """The leader's doLoadShedding and checkNamespaceBundleSplit, when Pulsar's own balancer is on."""
        shedding = self.config.loadBalancerSheddingEnabled
        splitting = self.config.loadBalancerAutoBundleSplitEnabled
        if not (shedding or splitting) or self.leader is None:
            return
        plan, self.builtin_state = plan_cycle(self.leader_view(), self.config, self.builtin_state, self.rng)
        for action in plan.actions:
            if (
                isinstance(action, Unload)
                and shedding
                and action.destination in self.active_ids()
                and not self.in_transition(action.bundle)
            ):
                self.unload(action.bundle, action.destination)
                self.builtin_actions += 1
            elif isinstance(action, Split) and splitting and action.bundle in self.ownership:
                self.split(action.bundle, action.algorithm, list(action.boundaries) or None, action.unload)
                self.builtin_actions += 1

    def _apply_event(self, event: EventSpec) -> None:
        if event.type == "add_broker":
            if event.spec is None:
                raise ValueError(f"the add_broker event at {event.at_s:g} s has no broker spec")
            self._sample(self._add_broker(event.spec))
        elif event.type in ("crash_broker", "remove_broker"):
            self._stop(self._named(event))
        elif event.type == "restart_broker":
            broker = self._named(event)
            self._stop(broker)
            self.events.append(EventSpec(at_s=self.now_s + event.interval_s, type="start_broker", broker=event.broker))
            self.events.sort(key=lambda e: e.at_s)
        elif event.type == "start_broker":
            self._start(self._named(event))
        elif event.type == "rolling_restart":
            names = sorted(b.name for b in self.alive_brokers())
            for i, name in enumerate(names):
                when = self.now_s + i * event.interval_s
                self.events.append(
                    EventSpec(at_s=when, type="restart_broker", broker=name, interval_s=min(event.interval_s / 2, 60.0))
                )
            self.events.sort(key=lambda e: e.at_s)
        elif event.type == "traffic":
            self.change_traffic(event)
        elif event.type == "background":
            self.change_background(self._named(event), event.background_cpu or 0.0)

    def _named(self, event: EventSpec) -> Broker:
        """The broker an event names (the scenario reader lets no broker event through without one)."""
        if event.broker is None:
            raise ValueError(f"the {event.type} event at {event.at_s:g} s names no broker")
        return self.by_name(event.broker)
