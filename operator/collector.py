"""Collect: list the active brokers, read every broker's own load report concurrently, build a snapshot.

A broker that fails, times out, answers garbage or whose report is older than
loadBalancerBrokerLoadDataTTLInSeconds is left out of the cycle and logged; the cycle goes on with
the others. Only the broker list itself is essential: without it there is nothing to plan.
"""

from __future__ import annotations

import concurrent.futures
import time
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


def _read_one(client: AdminClient, broker_id: str) -> BrokerLoad:
    return parse_broker_load(broker_id, client.load_report(broker_id), f"load-report of {broker_id}")


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
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(broker_ids) or 1)))
    try:
        futures = {b: pool.submit(_read_one, client, b) for b in broker_ids}
        deadline = time.monotonic() + broker_timeout_s
        for broker_id, future in futures.items():
            try:
                load = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                skipped[broker_id] = f"no load report within {broker_timeout_s:g} s"
                continue
            except (AdminError, SnapshotError) as exc:
                skipped[broker_id] = str(exc)
                continue
            age_s = (now_ms - load.lastUpdate) / 1000
            if age_s > stale_after_s:
                skipped[broker_id] = f"load report is stale: last updated {age_s:.0f} s ago (> {stale_after_s:g} s)"
                continue
            loads[broker_id] = load
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
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
