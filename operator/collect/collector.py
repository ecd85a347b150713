"""Collect: list the active brokers, read every broker's own load report concurrently, build a snapshot.

A broker that fails, times out, answers garbage or whose report is older than
loadBalancerBrokerLoadDataTTLInSeconds is left out of the cycle and logged; the cycle goes on with
the others. Only the broker list itself is essential: without it there is nothing to plan.

Every cycle it also reads the namespace policies placement must honour: the cluster's isolation
policies (``GET /admin/v2/clusters/{cluster}/namespaceIsolationPolicies``; a 404 "NamespaceIsolationPolicies
for cluster … does not exist" means none was ever set, ClustersBase.internalGetNamespaceIsolationPolicies)
and each seen namespace's anti-affinity group (``GET /admin/v2/namespaces/{tenant}/{ns}/antiAffinity``:
the group as a plain string, 204 when none, Namespaces.getNamespaceAntiAffinityGroup; an answer is
kept ``GROUP_TTL_MS``). A read that fails never means "no policy": the namespaces it concerns are
marked unknown in the snapshot and nothing of them is placed this cycle (every namespace when the
isolation policies could not be read; every namespace of a group when one namespace's group could not).

Failure domains (``GET /admin/v2/clusters/{cluster}/failureDomains``) are read only when the brokers run with
``failureDomainsEnabled`` (their runtime configuration says so): Pulsar's anti-affinity filter spreads a group
across domains first only then (ModularLoadManagerImpl.refreshBrokerToFailureDomainMap returns at once
otherwise). Both answers are kept ``GROUP_TTL_MS``; when either cannot be read, the namespaces of anti-affinity
groups are marked unknown (their spread cannot be judged), the others are placed as usual.
"""

from __future__ import annotations

import json
import queue
import resource
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import quote

import structlog
from requests.adapters import HTTPAdapter
from requests.exceptions import InvalidSchema

from pulsar_lb_operator.adminapi import AdminClient, AdminError, BadResponse, NotFound, ServerError, TransportError
from pulsar_lb_operator.strategies import (
    BrokerLoad,
    ClusterSnapshot,
    Reader,
    SnapshotError,
    TopicStats,
    collector_paused,
    decode_load_report,
    parse_broker_load,
)
from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies import policies as ns_policies

log = structlog.get_logger(__name__)

GROUP_TTL_MS = 3 * 60_000  # an anti-affinity group read is reused this long (a change is seen this late)
NO_ISOLATION_POLICIES = "NamespaceIsolationPolicies for cluster"  # ClustersBase's 404 when none was ever set
_groups_read: weakref.WeakKeyDictionary[AdminClient, dict[str, tuple[int, str | None]]] = weakref.WeakKeyDictionary()
# per client: (when read, broker → domain — {} when failureDomainsEnabled is false)
_domains_read: weakref.WeakKeyDictionary[AdminClient, tuple[int, dict[str, str]]] = weakref.WeakKeyDictionary()
MAX_CONCURRENCY = 64  # reports read at once: enough to hide a network's latency, few enough for one process


def concurrency(brokers: int) -> int:
    """How many load reports are read at once: one per broker, up to MAX_CONCURRENCY."""
    return max(1, min(MAX_CONCURRENCY, brokers))


def size_pools(client: AdminClient, hosts: int, per_host: int) -> None:
    """Let the admin client's session keep a connection to each of ``hosts`` hosts between cycles and up
    to ``per_host`` to one host (the admin URL's, which every thread may call at once).

    requests pools 10 hosts and 10 connections a host by default: over 10 brokers every cycle opened a new
    connection to every broker. Grown only, never shrunk; at most half the open-file limit's hosts.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        hosts = max(10, min(hosts, soft // 2))
    for prefix in ("http://", "https://"):
        try:
            adapter = client.session.get_adapter(prefix)
        except (AttributeError, InvalidSchema):  # not a requests Session, or no adapter for it: nothing to size
            continue
        if not isinstance(adapter, HTTPAdapter):
            continue
        have_hosts, have_size = getattr(adapter, "_pool_connections", 0), getattr(adapter, "_pool_maxsize", 0)
        if have_hosts >= hosts and have_size >= per_host:
            continue
        adapter.init_poolmanager(
            max(hosts, have_hosts), max(per_host, have_size), block=getattr(adapter, "_pool_block", False)
        )


@dataclass(frozen=True)
class Collection:
    snapshot: ClusterSnapshot
    skipped: dict[str, str] = field(default_factory=dict)  # broker id → why it was left out


def _read_one(client: AdminClient, broker_id: str, deadline_s: float) -> BrokerLoad:
    """One broker's report, its bytes decoded once: straight into checked fields when plainly valid
    (``decode_load_report``, in C), else as JSON read field by field, which names what is wrong."""
    report = client.load_report(broker_id, deadline_s=deadline_s, decode=decode_load_report)
    return parse_broker_load(broker_id, report, f"load-report of {broker_id}")


_Answer = TypeVar("_Answer")


def _fetch_all(
    broker_ids: list[str], fetch: Callable[[str], _Answer], workers: int, timeout_s: float
) -> dict[str, _Answer | Exception]:
    """Run ``fetch`` for every broker on ``workers`` daemon threads; what has not answered by the
    deadline is simply missing. Daemon threads, so a hung broker never keeps a finished command alive."""
    todo: queue.SimpleQueue[str] = queue.SimpleQueue()
    for broker_id in broker_ids:
        todo.put(broker_id)
    results: dict[str, _Answer | Exception] = {}
    finished = threading.Condition()

    def work() -> None:
        while True:
            try:
                broker_id = todo.get_nowait()
            except queue.Empty:
                return
            try:
                outcome: _Answer | Exception = fetch(broker_id)
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
    max_workers: int | None = None,
    broker_timeout_s: float = 20.0,
    now_ms: int | None = None,
) -> Collection:
    """One snapshot of the cluster. Raises AdminError only when the broker list itself can't be read.

    ``max_workers``: reports read at once (default: ``concurrency(brokers)``, one per broker up to 64).
    The cyclic garbage collector is paused meanwhile (strategies/heap.py): a snapshot is made of acyclic
    objects only, and its walks of the whole heap while 100,000 bundles are built find nothing to free.
    """
    with collector_paused():
        return _collect(client, cluster, stale_after_s, max_workers, broker_timeout_s, now_ms)


def _collect(
    client: AdminClient,
    cluster: str,
    stale_after_s: float,
    max_workers: int | None,
    broker_timeout_s: float,
    now_ms: int | None,
) -> Collection:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    broker_ids = client.active_brokers(cluster)
    workers = max_workers or concurrency(len(broker_ids))
    size_pools(client, len(broker_ids) + 1, workers)
    loads: dict[str, BrokerLoad] = {}
    skipped: dict[str, str] = {}
    answers = _fetch_all(broker_ids, lambda b: _read_one(client, b, broker_timeout_s), workers, broker_timeout_s + 1.0)
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
    namespaces = seen_namespaces(loads.values())
    policies = read_policies(client, cluster, namespaces, now_ms, workers, broker_timeout_s)
    snapshot = ClusterSnapshot(cluster, now_ms, MappingProxyType(loads), policies=policies)
    return Collection(snapshot, skipped)


def seen_namespaces(loads: Iterable[BrokerLoad]) -> list[str]:
    """The namespaces of every bundle the brokers report, system namespaces left out (never moved)."""
    names = {bundle_names.namespace_of(b) for load in loads for b in load.owned_bundles()}
    return sorted(n for n in names if not bundle_names.is_system_namespace(n))


def read_isolation_policies(client: AdminClient, cluster: str) -> tuple[ns_policies.IsolationPolicy, ...]:
    """The cluster's namespace isolation policies; () when none was ever set (ClustersBase answers 404
    "NamespaceIsolationPolicies for cluster … does not exist"). Raises AdminError or SnapshotError."""
    path = f"/admin/v2/clusters/{quote(cluster, safe='')}/namespaceIsolationPolicies"
    try:
        doc = client.get_json(path)
    except NotFound as exc:
        if NO_ISOLATION_POLICIES in exc.reason:
            return ()
        raise
    return ns_policies.parse_isolation_policies(Reader(doc, "namespaceIsolationPolicies", SnapshotError))


def read_failure_domains(client: AdminClient, cluster: str) -> dict[str, str]:
    """broker → failure domain when the brokers run with failureDomainsEnabled, else {} (Pulsar ignores
    domains then). Raises AdminError or SnapshotError."""
    runtime = client.runtime_config()
    if str(runtime.get("failureDomainsEnabled", "false")).strip().lower() != "true":
        return {}
    path = f"/admin/v2/clusters/{quote(cluster, safe='')}/failureDomains"
    doc = client.get_json(path)
    return ns_policies.parse_failure_domains(Reader(doc, "failureDomains", SnapshotError))


def cached_failure_domains(client: AdminClient, cluster: str, now_ms: int) -> dict[str, str]:
    """read_failure_domains, reused for GROUP_TTL_MS (a failed read is not kept)."""
    cached = _domains_read.get(client)
    if cached is not None and 0 <= now_ms - cached[0] < GROUP_TTL_MS:
        return cached[1]
    domains = read_failure_domains(client, cluster)
    _domains_read[client] = (now_ms, domains)
    return domains


def read_anti_affinity_group(client: AdminClient, namespace: str, deadline_s: float | None = None) -> str | None:
    """Namespaces.getNamespaceAntiAffinityGroup: the group as a plain string (a JSON string is accepted
    too); 204 or blank: none. Retried once on a connection error or a 5xx. Raises AdminError."""
    path = f"/admin/v2/namespaces/{namespace}/antiAffinity"
    try:
        answer = client.request("GET", path, deadline_s=deadline_s)
    except (TransportError, ServerError):
        answer = client.request("GET", path, deadline_s=deadline_s)
    try:
        text = answer.content.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise BadResponse(answer.url, "antiAffinity: the answer is not UTF-8 text") from None
    if text.startswith('"'):
        try:
            decoded: Any = json.loads(text)
        except ValueError:
            decoded = None
        if not isinstance(decoded, str):
            raise BadResponse(answer.url, "antiAffinity: expected the group's name")
        text = decoded.strip()
    return text or None


def read_policies(
    client: AdminClient,
    cluster: str,
    namespaces: list[str],
    now_ms: int,
    max_workers: int = 8,
    timeout_s: float = 20.0,
) -> ns_policies.NamespacePolicies:
    """Isolation policies and the groups of ``namespaces``; whatever cannot be read is marked unknown."""
    unknown: dict[str, str] = {}
    try:
        isolation = read_isolation_policies(client, cluster)
    except (AdminError, SnapshotError) as exc:
        isolation = ()
        unknown[ns_policies.ALL] = f"namespace isolation policies: {exc}"
    cache = _groups_read.setdefault(client, {})
    for namespace in [n for n, (at, _) in cache.items() if now_ms - at >= GROUP_TTL_MS or now_ms < at]:
        del cache[namespace]
    groups: dict[str, str] = {}
    todo = [n for n in namespaces if n not in cache]
    for namespace in namespaces:
        known = cache[namespace][1] if namespace in cache else None
        if known is not None:
            groups[namespace] = known
    answers = _fetch_all(todo, lambda n: read_anti_affinity_group(client, n, timeout_s), max_workers, timeout_s + 1.0)
    failed: dict[str, str] = {}
    for namespace in todo:
        if namespace not in answers:
            failed[namespace] = f"no answer within {timeout_s:g} s"
            continue
        answer = answers[namespace]
        if isinstance(answer, Exception):
            failed[namespace] = str(answer) if isinstance(answer, AdminError) else f"{type(answer).__name__}: {answer}"
        else:
            cache[namespace] = (now_ms, answer)
            if answer is not None:
                groups[namespace] = answer
    for namespace, why in failed.items():
        unknown[namespace] = f"anti-affinity group: {why}"
    if failed:  # a group's spread cannot be counted without knowing every namespace's group
        first = sorted(failed)[0]
        for namespace, group in groups.items():
            unknown.setdefault(
                namespace, f"the anti-affinity group of {first} could not be read: group {group} cannot be counted"
            )
    domains: dict[str, str] = {}
    if groups:  # domains only change where anti-affinity groups are placed
        try:
            domains = cached_failure_domains(client, cluster, now_ms)
        except (AdminError, SnapshotError) as exc:
            for namespace in groups:
                unknown.setdefault(namespace, f"failure domains: {exc}")
    for namespace, why in sorted(unknown.items()):
        log.warning("namespace policies not known: nothing of it is placed", namespace=namespace, reason=why)
    return ns_policies.NamespacePolicies(
        isolation, MappingProxyType(groups), MappingProxyType(unknown), MappingProxyType(domains)
    )


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
        snapshot.policies,
        snapshot.missing,
    )


def _topics_by_bundle(doc: dict[str, Any]) -> dict[str, dict[str, TopicStats]]:
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
