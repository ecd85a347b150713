"""Collect: list the active brokers, read every broker's own load report concurrently, build a snapshot.

A broker that fails, times out, answers garbage or whose report is older than
loadBalancerBrokerLoadDataTTLInSeconds is left out of the cycle and logged; the cycle goes on with
the others. Only the broker list itself is essential: without it there is nothing to plan.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

import structlog

from pulsar_lb_operator.adminapi import AdminClient, AdminError
from strategies import bundles as bundle_names
from strategies.snapshots import BrokerLoad, ClusterSnapshot, SnapshotError, TopicStats, parse_broker_load

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Collection:
    snapshot: ClusterSnapshot
    skipped: dict[str, str] = field(default_factory=dict)  # broker id → why it was left out


def _read_one(client: AdminClient, broker_id: str, deadline_s: float) -> BrokerLoad:
    report = client.load_report(broker_id, deadline_s=deadline_s)
    return parse_broker_load(broker_id, report, f"load-report of {broker_id}")


def _fetch_all(
    broker_ids: list[str], fetch: Callable[[str], BrokerLoad], workers: int, timeout_s: float
) -> dict[str, BrokerLoad | Exception]:
    """Run ``fetch`` for every broker on ``workers`` daemon threads; what has not answered by the
    deadline is simply missing. Daemon threads, so a hung broker never keeps a finished command alive."""
    todo: queue.SimpleQueue[str] = queue.SimpleQueue()
    for broker_id in broker_ids:
        todo.put(broker_id)
    results: dict[str, BrokerLoad | Exception] = {}
    finished = threading.Condition()

    def work() -> None:
        while True:
            try:
                broker_id = todo.get_nowait()
            except queue.Empty:
                return
            try:
                outcome: BrokerLoad | Exception = fetch(broker_id)
            except Exception as exc:  # handed to the caller, who decides what is an expected failure
                outcome = exc
            with finished:
                results[broker_id] = outcome
                finished.notify_all()

    for i in range(max(1, min(workers, len(broker_ids)))):
        threading.Thread(target=work, name=f"collect-{i}", daemon=True).start()
    deadline = time.monotonic() + timeout_s
    with finished:
        while len(results) < len(broker_ids):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            finished.wait(left)
        return dict(results)


def collect(
    client: AdminClient,
    cluster: str,
    *,
    stale_after_s: float = 1800,
    max_workers: int = 8,
    broker_timeout_s: float = 20.0,
    now_ms: int | None = None,
) -> Collection:
    """One snapshot of the cluster. Raises AdminError only when the broker list itself can't be read."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    broker_ids = client.active_brokers(cluster)
    loads: dict[str, BrokerLoad] = {}
    skipped: dict[str, str] = {}
    answers = _fetch_all(
        broker_ids, lambda b: _read_one(client, b, broker_timeout_s), max_workers, broker_timeout_s + 1.0
    )
    for broker_id in broker_ids:
        answer = answers.get(broker_id)
        if answer is None:
            skipped[broker_id] = f"no load report within {broker_timeout_s:g} s"
            continue
        if isinstance(answer, AdminError | SnapshotError):
            skipped[broker_id] = str(answer)
            continue
        if isinstance(answer, Exception):  # a bug in parsing must cost one broker, not the cycle
            skipped[broker_id] = f"load report not usable: {type(answer).__name__}: {answer}"
            continue
        age_s = (now_ms - answer.lastUpdate) / 1000
        if age_s > stale_after_s:
            skipped[broker_id] = f"load report is stale: last updated {age_s:.0f} s ago (> {stale_after_s:g} s)"
            continue
        loads[broker_id] = answer
    for broker_id, why in sorted(skipped.items()):
        log.warning("broker skipped", broker=broker_id, reason=why)
    snapshot = ClusterSnapshot(cluster, now_ms, MappingProxyType(loads))
    return Collection(snapshot, skipped)


def with_namespaces_and_topics(client: AdminClient, snapshot: ClusterSnapshot, topics: bool) -> ClusterSnapshot:
    """The snapshot plus every seen namespace's boundaries and, when asked, per-topic stats per bundle."""
    namespaces: dict[str, tuple[int, ...]] = {}
    seen = {bundle_names.namespace_of(b) for load in snapshot.brokers.values() for b in load.owned_bundles()}
    for namespace in sorted(n for n in seen if not bundle_names.is_system_namespace(n)):
        try:
            namespaces[namespace] = tuple(bundle_names.parse_boundary(b) for b in client.bundles(namespace))
        except (AdminError, bundle_names.BundleNameError) as exc:
            log.warning("namespace skipped", namespace=namespace, reason=str(exc))
    per_bundle: dict[str, dict[str, TopicStats]] = {}
    if topics:
        for broker_id in sorted(snapshot.brokers):
            try:
                per_bundle.update(_topics_by_bundle(client.topic_stats(broker_id)))
            except (AdminError, ValueError, TypeError, AttributeError) as exc:
                log.warning("topic stats skipped", broker=broker_id, reason=str(exc))
    return ClusterSnapshot(
        snapshot.cluster,
        snapshot.taken_at,
        snapshot.brokers,
        MappingProxyType(namespaces),
        MappingProxyType({b: MappingProxyType(t) for b, t in per_bundle.items()}),
    )


def _topics_by_bundle(doc: dict) -> dict[str, dict[str, TopicStats]]:
    """broker-stats/topics (namespace → range → domain → topic → stats) as bundle → topic → stats."""
    out: dict[str, dict[str, TopicStats]] = {}
    for namespace, ranges in doc.items():
        for bundle_range, domains in ranges.items():
            bundle = f"{namespace}/{bundle_range}"
            for topics in domains.values():
                for topic, stats in topics.items():
                    out.setdefault(bundle, {})[topic] = TopicStats(
                        *(
                            float(stats.get(k, 0.0))
                            for k in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")
                        )
                    )
    return out
