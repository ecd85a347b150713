"""What a simulated broker on the extensible load manager (ELM) publishes, and when: its BrokerLoadDataReporter and
TopBundleLoadDataReporter as Pulsar master runs them, without the I/O (simulator/elm.py sends the messages).

Every ``loadBalancerReportUpdateMinIntervalMillis`` (5 s; ``Cadence``) each broker runs both reporters:

* **BrokerLoadDataReporter.reportAsync(false)**: ``generateLoadData`` updates the broker's BrokerLoadData from its
  latest host usage and broker stats (``BrokerLoadData.update``): ``weightedMaxEMA`` and ``msgThroughputEMA``
  move by ``loadBalancerHistoryResourcePercentage`` at every check, so over the 5 s checks, not over what is
  published; ``updatedAt`` is the check's time. It is published only when ``needBrokerDataUpdate``: more than
  ``loadBalancerReportUpdateMaxIntervalMinutes`` since it was last written (``reportedAt``), or a change above
  ``loadBalancerReportUpdateThresholdPercentage`` against what was last written (``lastData``) — in max resource
  usage (points), msg rate in+out, throughput in+out or bundle count (percent);
* **TopBundleLoadDataReporter.reportAsync(false)**: publishes TopKBundles of the broker's bundle stats when they were
  updated since it last did (here: a new sample, every ``report_interval_seconds``): the
  ``loadBalancerMaxNumberOfBundlesInBundleLoadReport`` largest by NamespaceBundleStats.compareTo, smallest first,
  leaving out bundles without traffic, system namespaces, namespaces with policies (unless
  ``loadBalancerSheddingBundlesWithPoliciesEnabled``) and ``loadBalancerSheddingExcludedNamespaces``;
* **ownership changes** (``handleEvent``: Releasing or Splitting with the broker as source, Owned with it as
  destination — any change to the bundles it owns): both reporters write a tombstone (an empty value for the
  broker's key), at most one per ``TOMBSTONE_DELAY_MS``, and BrokerLoadData is cleared (``localData.clear()``):
  its EMAs restart from the next sample's values, and with ``reportedAt`` back to 0 the next check publishes it.
  Here the change is seen at the next check (at most 5 s late: the ownership's version per broker).

A restarted broker starts with new reporters (EMAs from scratch, both documents published at its first check).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pulsar_lb_operator.strategies import BundleStats, ResourceUsage, compare_bundle_stats
from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.policies import shedding_allowed

if TYPE_CHECKING:
    from pulsar_lb_operator.simulator.cluster import Broker, SimulatedCluster

BROKER_LOAD_DATA_TOPIC = "non-persistent://pulsar/system/loadbalancer-broker-load-data"
TOP_BUNDLES_TOPIC = "non-persistent://pulsar/system/loadbalancer-top-bundles-load-data"
TOPICS = (BROKER_LOAD_DATA_TOPIC, TOP_BUNDLES_TOPIC)
TOMBSTONE_DELAY_MS = 10_000  # the reporters' TOMBSTONE_DELAY_IN_MILLIS: one tombstone per 10 s at most


@dataclasses.dataclass(frozen=True)
class Cadence:
    """When the reporters check and BrokerLoadDataReporter writes (ServiceConfiguration's names and defaults)."""

    threshold_percentage: float = 10.0  # loadBalancerReportUpdateThresholdPercentage
    max_interval_minutes: float = 15.0  # loadBalancerReportUpdateMaxIntervalMinutes
    min_interval_ms: int = 5000  # loadBalancerReportUpdateMinIntervalMillis: the reporters' period

    def due(self, last: dict[str, Any] | None, local: dict[str, Any], now_ms: int, reported_at: int) -> bool:
        """BrokerLoadDataReporter.needBrokerDataUpdate: ``last`` as last written, ``local`` as now."""
        if last is None or now_ms - reported_at > self.max_interval_minutes * 60_000:
            return True

        def percent_change(key_a: str, key_b: str | None = None) -> float:
            old = last[key_a] + (last[key_b] if key_b else 0)
            new = local[key_a] + (local[key_b] if key_b else 0)
            if old == 0:
                return 0.0 if new == 0 else float("inf")
            return 100 * abs((old - new) / old)

        change = max(
            100 * abs(last["maxResourceUsage"] - local["maxResourceUsage"]),
            percent_change("msgRateIn", "msgRateOut"),
            percent_change("msgThroughputIn", "msgThroughputOut"),
            percent_change("bundleCount"),
        )
        return change > self.threshold_percentage


@dataclass
class Outgoing:
    """A message to publish: a document, or a tombstone (``payload`` empty). ``written``: for a BrokerLoadData,
    what its reporter took as written and when, undone if the send fails (Pulsar sets them only on success)."""

    broker: str
    topic: str
    payload: bytes
    written: tuple[Reporter, dict[str, Any] | None, int] | None = None  # (reporter, its lastData, reportedAt) before


@dataclass
class Reporter:
    """One broker's two reporters: localData, lastData, reportedAt, what its top bundles were made from, when it
    last wrote a tombstone, and the ownership version it last saw."""

    started_at_s: float
    owned_version: int
    local: dict[str, Any] | None = None  # None: new, or cleared by an ownership change (updatedAt 0)
    last: dict[str, Any] | None = None
    reported_at: int = 0
    stats_version: int | None = None
    tombstoned_at: int | None = None

    def check(
        self, cluster: SimulatedCluster, broker: Broker, cadence: Cadence, now_ms: int, force: bool = False
    ) -> tuple[list[Outgoing], bool]:
        """One run of both reporters (``force``: reportAsync(true)); (messages, whether BrokerLoadData was due)."""
        out: list[Outgoing] = []
        version = cluster.ownership.version_of(broker.id)
        if version != self.owned_version:  # handleEvent: Releasing/Splitting from it, Owned by it
            self.owned_version = version
            self.local, self.reported_at = None, 0  # localData.clear()
            if self.tombstoned_at is None or now_ms - self.tombstoned_at >= TOMBSTONE_DELAY_MS:
                self.tombstoned_at = now_ms
                out += [Outgoing(broker.id, topic, b"") for topic in TOPICS]
        self.local = broker_load_data(cluster, broker, self.local, now_ms)
        due = force or cadence.due(self.last, self.local, now_ms, self.reported_at)
        if due:
            doc = {**self.local, "reportedAt": self.reported_at}  # localData's reportedAt is set after the push
            if _release(cluster.scenario.broker_version) < (3, 1):  # as the first 3.0 releases wrote BrokerLoadData
                del doc["topics"], doc["msgThroughputEMA"]
            before = (self, self.last, self.reported_at)
            out.append(Outgoing(broker.id, BROKER_LOAD_DATA_TOPIC, json.dumps(doc).encode(), before))
            self.last, self.reported_at = dict(self.local), now_ms
        if force or broker.sample_version != self.stats_version:  # the broker stats were updated since
            self.stats_version = broker.sample_version
            top = top_bundles_load_data(cluster, broker)
            out.append(Outgoing(broker.id, TOP_BUNDLES_TOPIC, json.dumps(top).encode()))
        return out, due


def broker_load_data(
    cluster: SimulatedCluster, broker: Broker, previous: dict[str, Any] | None, now_ms: int
) -> dict[str, Any]:
    """BrokerLoadData.update over the broker's latest sample: the EMAs from ``previous`` (None: a new or cleared
    BrokerLoadData, whose EMAs start at the current values), ``updatedAt`` now."""
    host = broker.host_sample
    stats = broker.stats_sample
    usage = {k: ResourceUsage(u, limit) for k, (u, limit) in host.items()}
    weights = cluster.config.weights
    percent = {k: r.percent_usage() for k, r in usage.items()}
    max_usage = max(percent["cpu"], percent["directMemory"], percent["bandwidthIn"], percent["bandwidthOut"]) / 100
    weighted = (
        max(
            percent["cpu"] * weights.cpu,
            percent["memory"] * weights.memory,
            percent["directMemory"] * weights.direct_memory,
            percent["bandwidthIn"] * weights.bandwidth_in,
            percent["bandwidthOut"] * weights.bandwidth_out,
        )
        / 100
    )
    throughput = sum(s.msg_throughput for s in stats.values())
    history = cluster.config.loadBalancerHistoryResourcePercentage
    if previous is None:
        weighted_ema, throughput_ema = weighted, throughput
    else:
        weighted_ema = previous["weightedMaxEMA"] * history + (1 - history) * weighted
        throughput_ema = previous["msgThroughputEMA"] * history + (1 - history) * throughput
    return {
        **{k: {"usage": r.usage, "limit": r.limit} for k, r in usage.items()},
        "msgThroughputIn": sum(s.msgThroughputIn for s in stats.values()),
        "msgThroughputOut": sum(s.msgThroughputOut for s in stats.values()),
        "msgRateIn": sum(s.msgRateIn for s in stats.values()),
        "msgRateOut": sum(s.msgRateOut for s in stats.values()),
        "bundleCount": len(stats),
        "topics": sum(s.topics for s in stats.values()),
        "maxResourceUsage": max_usage,
        "weightedMaxEMA": weighted_ema,
        "msgThroughputEMA": throughput_ema,
        "updatedAt": now_ms,
    }


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``3.0.2`` or ``4.1.0-SNAPSHOT``; (99, 0) when unreadable."""
    parts = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(parts.group(1)), int(parts.group(2))) if parts else (99, 0)


def top_bundles_load_data(cluster: SimulatedCluster, broker: Broker) -> dict[str, Any]:
    """TopBundlesLoadData JSON: TopKBundles.update over the broker's last sample (smallest of the top k first)."""
    config = cluster.config
    policies = cluster.namespace_policies()
    with_policies = config.loadBalancerSheddingBundlesWithPoliciesEnabled
    excluded = frozenset(config.loadBalancerSheddingExcludedNamespaces)
    eligible = [
        (name, stats)
        for name, stats in sorted(broker.stats_sample.items())
        if stats.msgThroughputIn + stats.msgThroughputOut != 0
        and not bundle_names.is_system_namespace(namespace := bundle_names.namespace_of(name))
        and shedding_allowed(namespace, policies, with_policies)
        and namespace not in excluded
    ]
    by_stats = functools.cmp_to_key(compare_bundle_stats)
    top = sorted(eligible, key=lambda item: by_stats(item[1]), reverse=True)[
        : config.loadBalancerMaxNumberOfBundlesInBundleLoadReport
    ]
    return {"topBundlesLoadData": [{"bundleName": n, "stats": _stats(s)} for n, s in reversed(top)]}


def _stats(stats: BundleStats) -> dict[str, Any]:
    return {
        "msgRateIn": stats.msgRateIn,
        "msgThroughputIn": stats.msgThroughputIn,
        "msgRateOut": stats.msgRateOut,
        "msgThroughputOut": stats.msgThroughputOut,
        "consumerCount": stats.consumerCount,
        "producerCount": stats.producerCount,
        "topics": stats.topics,
        "cacheSize": stats.cacheSize,
    }
