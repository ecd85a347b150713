"""The operator's Prometheus metrics, fed by each cycle's result.

Every name starts with ``pulsar_lb_operator_`` and every series carries the ``cluster`` label; the
chart's dashboard and alerts read exactly these (``tests/deploy/test_monitoring.py`` holds them to it).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pulsar_lb_operator.records import Record
from pulsar_lb_operator.run.cycle import CycleResult
from pulsar_lb_operator.strategies import Plan, Split


class _PerCluster:
    """A metric whose first label, ``cluster``, is filled in: ``labels(*rest)``; ``clear()`` drops this cluster's."""

    def __init__(self, metric: Counter | Gauge, cluster: str) -> None:
        self.metric = metric
        self.cluster = cluster
        self._seen: set[tuple[str, ...]] = set()

    def labels(self, *values: str) -> Counter | Gauge:
        self._seen.add(values)
        return self.metric.labels(self.cluster, *values)

    def clear(self) -> None:
        for values in self._seen:
            self.metric.remove(self.cluster, *values)
        self._seen.clear()


class Metrics:
    """The operator's Prometheus metrics: every name starts with ``pulsar_lb_operator_`` (Pulsar's brokers
    export their own load balancer's as ``pulsar_lb_*``) and every series carries the ``cluster`` label."""

    PREFIX = "pulsar_lb_operator_"

    def __init__(self, cluster: str = "") -> None:
        self.registry = CollectorRegistry()
        self.cluster = cluster

        def metric(kind, name, doc, labels=()):  # one per cluster: bound to it when it has no other label
            made = kind(self.PREFIX + name, doc, ["cluster", *labels], registry=self.registry)
            return _PerCluster(made, cluster) if labels else made.labels(cluster)

        self.cycles = metric(Counter, "cycles", "Balancing cycles run, by result (ok, error)", ["result"])
        for result in ("ok", "error"):
            self.cycles.labels(result)
        self.duration = metric(Histogram, "cycle_duration_seconds", "Duration of a cycle")
        self.interval = metric(Gauge, "cycle_interval_seconds", "Seconds between two cycles")
        self.last_success = metric(
            Gauge,
            "last_success_timestamp_seconds",
            "End of the last successful cycle (epoch seconds); when this instance became the leader until then",
        )
        self.brokers_seen = metric(Gauge, "brokers_seen", "Brokers whose report was used")
        self.brokers_skipped = metric(Gauge, "brokers_skipped", "Brokers left out of the last cycle")
        self.planned = metric(Counter, "actions_planned", "Actions planned", ["type", "strategy"])
        self.outcomes = metric(Counter, "actions", "Actions by outcome", ["type", "strategy", "outcome"])
        self.score = metric(
            Gauge, "broker_usage_percent", "Weighted max resource usage per broker, last cycle", ["broker"]
        )
        self.leader = metric(Gauge, "leader", "1 while this instance leads (acts on the cluster), 0 on a standby")
        self.kill_switch = metric(
            Gauge,
            "kill_switch",
            "1 while the kill switch is on (operator pause, the pause file, or PULSAR_LB_KILL_SWITCH not an explicit "
            "false): nothing is sent",
        )
        self.prediction_error = metric(
            Gauge,
            "prediction_error_points",
            "PredictivePairingShedder: reported minus predicted usage after its moves, per broker (last measured)",
            ["broker"],
        )
        self.audit_published = metric(Counter, "audit_events_published", "Audit events the broker acknowledged")
        self.audit_dropped = metric(
            Counter, "audit_events_dropped", "Audit events lost: the spool was full or not writable"
        )
        self.audit_backlog = metric(Gauge, "audit_events_spooled", "Audit events waiting in the spool for the broker")
        self.held_by_builtin = metric(
            Gauge,
            "held_by_builtin_balancer",
            "1 while Pulsar's own shedder or splitter is on and the operator therefore sends nothing (the status page "
            "and /api/status say why); 0 otherwise",
        )
        self.history_skipped = metric(
            Counter,
            "history_appends_skipped",
            "Cycles whose samples were not written to the history: disk_full (no space left), over_bound "
            "(historyMaxMegabytes reached with nothing older left to delete); the cycle itself went on",
            ["reason"],
        )
        for reason in ("disk_full", "over_bound"):
            self.history_skipped.labels(reason)
        self.history_bytes = metric(Gauge, "history_bytes", "Bytes the history store holds, after the last append")
        self.load_manager = metric(
            Gauge,
            "load_manager_info",
            "1 for the cluster's load manager (modular, extensible, …) and broker version, as last detected",
            ["load_manager", "version"],
        )

    def names(self) -> set[str]:
        """Every series name the registry exposes (``_total``, ``_bucket``, … included)."""
        return {sample.name for family in self.registry.collect() for sample in family.samples}

    def observe(self, result: CycleResult, seconds: float) -> None:
        self.cycles.labels("ok").inc()
        self.duration.observe(seconds)
        self.last_success.set(time.time())
        plan = result.plan
        self.brokers_skipped.set(len(result.skipped_brokers))
        if result.builtin is not None:  # the conflict guard's verdict (every cycle asks it)
            self.held_by_builtin.set(1 if result.held else 0)
        if plan is None:
            return
        self.brokers_seen.set(len(plan.brokers))
        for action in plan.actions:
            self.planned.labels("split" if isinstance(action, Split) else "unload", plan.shedding).inc()
        self._count_outcomes(plan, (*result.records, *result.verifications))
        self.score.clear()
        for broker in plan.brokers:
            self.score.labels(broker.broker).set(broker.usage_before)
        for broker_id, error in result.state.strategy.prediction_errors.items():
            self.prediction_error.labels(broker_id).set(error)
        if result.load_manager is not None:  # operator/collect/elm.py detects it every cycle
            self.load_manager.clear()
            self.load_manager.labels(result.load_manager.kind, result.load_manager.version or "").set(1)

    def observe_outcomes(self, result: CycleResult) -> None:
        """An approved proposal's execution: its outcomes, under the strategy that planned it (not a cycle)."""
        if result.plan is not None:
            self._count_outcomes(result.plan, result.records)

    def _count_outcomes(self, plan: Plan, records: Iterable[Record]) -> None:
        for record in records:
            kind = "split" if isinstance(record.action, Split) else "unload"
            self.outcomes.labels(kind, plan.shedding, record.outcome.value).inc()

    def standby(self) -> None:
        """A standby reports no brokers and no usage: the leader's are the cluster's (dashboards take the max)."""
        self.score.clear()
        self.prediction_error.clear()
        self.brokers_seen.set(0)
        self.brokers_skipped.set(0)
