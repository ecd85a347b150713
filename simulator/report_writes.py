"""How a modular-load-manager broker writes its LocalBrokerData, and what its load report looks like.

A real broker keeps its LocalBrokerData in memory and refreshes it from each stats and host-usage sample
(``ModularLoadManagerImpl.updateLocalBrokerData``); it *writes* it to the metadata store — and only then
sets ``lastUpdate`` — when ``ModularLoadManagerImpl.needBrokerDataUpdate`` says so:

* more than ``loadBalancerReportUpdateMaxIntervalMinutes`` (15) since the last write, or
* the largest of: 100 × |Δ maxResourceUsage|, and the percent changes (``percentChange``: 0 → 0 is 0,
  0 → x is infinite) of msgRateIn+Out, msgThroughputIn+Out and numBundles, above
  ``loadBalancerReportUpdateThresholdPercentage`` (10).

After a write (``writeBrokerDataOnZooKeeper``) the deltas are cleared (``LocalBrokerData.cleanDeltas``) and
the figures just written become ``lastData``. ``GET /admin/v2/broker-stats/load-report`` answers
``ModularLoadManagerWrapper.generateLoadReport`` = ``updateLocalBrokerData()``: the latest sample, with the
``lastUpdate`` of the last write; the leader reads the written copy. The simulator checks at each sample
(every ``report_interval_seconds``), where Pulsar's writer task checks every
``loadBalancerReportUpdateMinIntervalMillis`` (5 s): the data changes only at samples, so only the
max-interval write can come up to one report interval later than on a real broker.

The report's fields are those Jackson writes for LocalBrokerData with Pulsar's ObjectMapper (NON_NULL):
every getter (``getBundleStats`` gives ``bundleStats``, ``getMaxResourceUsage`` ``maxResourceUsage``,
``getLoadReportType`` ``loadReportType``), ``webServiceUrlTls``/``pulsarServiceUrlTls`` only when set, and
``advertisedListeners`` ``{}`` for a broker without ``advertisedListeners``
(``MultipleListenerValidator.validateAndAnalysisAdvertisedListener`` returns an empty map).
``maxResourceUsage`` is computed as Java does: ``ResourceUsage.percentUsage`` in float, the float
``max(float...)`` overload, then ``/ 100`` in float — and it counts memory (JVM heap), unlike the extensible
manager's BrokerLoadData, whose maxResourceUsage leaves memory out (``BrokerLoadData.updateMaxResourceUsage``,
see simulator/elm.py).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# ServiceConfiguration defaults
REPORT_UPDATE_THRESHOLD_PERCENTAGE = 10  # loadBalancerReportUpdateThresholdPercentage
REPORT_UPDATE_MAX_INTERVAL_MINUTES = 15  # loadBalancerReportUpdateMaxIntervalMinutes
MODULAR = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"


@dataclass(frozen=True)
class Settings:
    """The two settings needBrokerDataUpdate reads (scenario keys ``report_update_threshold_percentage`` and
    ``report_update_max_interval_minutes``; Pulsar's defaults otherwise)."""

    threshold_percentage: float = REPORT_UPDATE_THRESHOLD_PERCENTAGE
    max_interval_minutes: float = REPORT_UPDATE_MAX_INTERVAL_MINUTES

    @classmethod
    def of(cls, scenario: Any) -> Settings:
        return cls(
            getattr(scenario, "report_update_threshold_percentage", REPORT_UPDATE_THRESHOLD_PERCENTAGE),
            getattr(scenario, "report_update_max_interval_minutes", REPORT_UPDATE_MAX_INTERVAL_MINUTES),
        )

    def runtime(self) -> dict[str, str]:
        """Their values as ``GET /admin/v2/brokers/configuration/runtime`` gives them (String.valueOf)."""
        return {
            "loadBalancerReportUpdateThresholdPercentage": _java_number(self.threshold_percentage),
            "loadBalancerReportUpdateMaxIntervalMinutes": _java_number(self.max_interval_minutes),
        }


def _java_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def f32(value: float) -> float:
    """A Java float: ``value`` rounded to single precision."""
    return struct.unpack("f", struct.pack("f", value))[0]


def percent_usage(usage: float, limit: float) -> float:
    """ResourceUsage.percentUsage: ``(float) usage / (float) limit * 100`` in float, 0 when limit ≤ 0."""
    proportion = f32(f32(usage) / f32(limit)) if limit > 0 else 0.0
    return f32(proportion * 100)


def max_resource_usage(host: dict[str, tuple[float, float]]) -> float:
    """LocalBrokerData.getMaxResourceUsage: the float max of the five percents (memory included), / 100 in float."""
    percents = [percent_usage(*host[k]) for k in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")]
    return f32(max(percents) / 100)


def shown(host: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Host usage as the report shows it (usage rounded to 3 decimals)."""
    return {k: (round(u, 3), lim) for k, (u, lim) in host.items()}


def percent_change(old: float, new: float) -> float:
    """ModularLoadManagerImpl.percentChange."""
    if old == 0:
        return 0.0 if new == 0 else math.inf
    return 100 * abs((old - new) / old)


def figures(broker: Any) -> tuple[float, float, float, int]:
    """What needBrokerDataUpdate compares: maxResourceUsage, msg rate in+out, throughput in+out, numBundles."""
    stats = broker.stats_sample.values()
    rate = sum(s.msgRateIn for s in stats) + sum(s.msgRateOut for s in stats)
    throughput = sum(s.msgThroughputIn for s in stats) + sum(s.msgThroughputOut for s in stats)
    return max_resource_usage(shown(broker.host_sample)), rate, throughput, len(broker.stats_sample)


def need_broker_data_update(broker: Any, now_ms: int, settings: Settings) -> bool:
    """ModularLoadManagerImpl.needBrokerDataUpdate (the first write, lastData still empty, always happens)."""
    if broker.written_figures is None:
        return True
    if now_ms - broker.written_ms > settings.max_interval_minutes * 60_000:
        return True
    old, new = broker.written_figures, figures(broker)
    max_change = max(
        100.0 * abs(old[0] - new[0]),
        percent_change(old[1], new[1]),
        percent_change(old[2], new[2]),
        percent_change(old[3], new[3]),
    )
    return max_change > settings.threshold_percentage


def track_bundles(broker: Any, before: set[str]) -> None:
    """LocalBrokerData.updateBundleData: bundles lost and gained since the last write accumulate."""
    after = set(broker.stats_sample)
    broker.bundle_losses |= before - after
    broker.bundle_gains |= after - before


def write(broker: Any, now_ms: int, build: Callable[[], dict]) -> None:
    """writeBrokerDataOnZooKeeper: lastUpdate set, the report written (what the leader reads), deltas cleared,
    lastData updated."""
    broker.written_ms = now_ms
    broker.written_report = build()
    broker.written_figures = figures(broker)
    broker.bundle_gains, broker.bundle_losses = set(), set()
    broker.sample_version += 1  # the report the REST endpoint builds changed: no deltas any more


def restart(broker: Any) -> None:
    """A restarted broker starts from a new LocalBrokerData: nothing written yet, no deltas."""
    broker.written_figures = None
    broker.written_report = None
    broker.bundle_gains, broker.bundle_losses = set(), set()


def local_broker_data(
    broker: Any, *, pulsar_service_url: str, extra_bundles: Iterable[str], version: str, start_ms: int
) -> dict[str, Any]:
    """The JSON of LocalBrokerData, in its getters' names; see the module docstring."""
    last_stats = {b: vars(s).copy() for b, s in sorted(broker.stats_sample.items())}
    host = shown(broker.host_sample)

    def total(key: str) -> float:
        return sum(s[key] for s in last_stats.values())

    report: dict[str, Any] = {
        "webServiceUrl": broker.web_url,
        **({"webServiceUrlTls": broker.web_url_tls} if broker.web_url_tls else {}),
        "pulsarServiceUrl": pulsar_service_url,
        "persistentTopicsEnabled": True,
        "nonPersistentTopicsEnabled": True,
        **{k: {"usage": u, "limit": lim} for k, (u, lim) in host.items()},
        "msgThroughputIn": total("msgThroughputIn"),
        "msgThroughputOut": total("msgThroughputOut"),
        "msgRateIn": total("msgRateIn"),
        "msgRateOut": total("msgRateOut"),
        "lastUpdate": broker.written_ms,
        "lastStats": last_stats,
        "bundleStats": last_stats,  # getBundleStats() returns lastStats
        "numTopics": int(total("topics")),
        "numBundles": len(last_stats),
        "numConsumers": int(total("consumerCount")),
        "numProducers": int(total("producerCount")),
        "bundles": sorted(set(last_stats) | set(extra_bundles)),
        "lastBundleGains": sorted(broker.bundle_gains),
        "lastBundleLosses": sorted(broker.bundle_losses),
        "brokerVersionString": version,
        "protocols": {},
        "advertisedListeners": {},
        "loadManagerClassName": MODULAR,
        "startTimestamp": start_ms,
        "maxResourceUsage": max_resource_usage(host),
        "loadReportType": "LocalBrokerData",
    }
    return report
