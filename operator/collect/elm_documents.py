"""The extensible load manager's (ELM) documents, checked, and the report the snapshot model parses made of them.

Each broker's ``BrokerLoadData`` (cpu, memory, directMemory, bandwidthIn, bandwidthOut as ResourceUsage
``{usage, limit}``; msgThroughputIn/Out, msgRateIn/Out, bundleCount, topics, maxResourceUsage, weightedMaxEMA,
msgThroughputEMA, updatedAt, reportedAt — ``topics`` and ``msgThroughputEMA`` are missing in the first 3.0
releases) becomes a LocalBrokerData-shaped report (``lastUpdate`` = updatedAt) whose ``lastStats`` are only its
**top bundles** (TopBundlesLoadData), whose ``bundles`` are what ``ownedNamespaces`` lists (ELM serves it from its
state channel), and whose ``extensibleLoadManager`` object keeps what the broker published itself — its EMAs, its
topic count, its top bundles in their published order, whether its ownership was read — for TransferShedder
(strategies/snapshots.PublishedLoad).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pulsar_lb_operator.strategies import MAX_BROKER_TOTAL, Reader, SnapshotError, describe


def _reader(value: Any, path: str) -> Reader:
    return Reader(value, path, SnapshotError)


def _json(payload: bytes, path: str) -> Any:
    try:
        return json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise SnapshotError(f"{path}: not JSON ({describe(payload[:60].decode('utf-8', 'replace'))})") from None


def parse_broker_load_data(payload: bytes, path: str) -> dict[str, Any]:
    """BrokerLoadData JSON, checked field by field (SnapshotError naming the field); returns the document."""
    reader = _reader(_json(payload, path), path)
    doc = reader.obj()
    for key in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut"):
        usage = reader.child(key)
        usage.child("usage").number()
        usage.child("limit").number()
    for key in ("msgThroughputIn", "msgThroughputOut", "msgRateIn", "msgRateOut", "weightedMaxEMA"):
        reader.child(key).number(maximum=MAX_BROKER_TOTAL)
    reader.child("updatedAt").integer()
    for key in ("bundleCount", "topics", "reportedAt"):
        reader.child(key, required=False, default=0).integer()
    for key in ("maxResourceUsage", "msgThroughputEMA"):
        reader.child(key, required=False, default=0.0).number(maximum=MAX_BROKER_TOTAL)
    return doc


def parse_top_bundles(payload: bytes | None, path: str) -> list[tuple[str, dict[str, Any]]]:
    """TopBundlesLoadData JSON (``{"topBundlesLoadData": [{"bundleName", "stats"}, …]}``) as (bundle, stats) in
    the order published; a tombstone (empty value) is no bundles."""
    if not payload:
        return []
    reader = _reader(_json(payload, path), path)
    out = []
    for item in reader.child("topBundlesLoadData").items():
        name = item.child("bundleName").string()
        stats = item.child("stats", required=False, default={})
        stats.obj()
        out.append((name, dict(stats.value)))
    return out


def local_broker_data(
    load_data: Mapping[str, Any],
    top_bundles: list[tuple[str, dict[str, Any]]],
    owned: list[str] | None,
    version: str | None,
    class_name: str | None,
) -> dict[str, Any]:
    """A LocalBrokerData-shaped report (what the snapshot model parses) from one broker's ELM data.

    ``lastStats`` holds only the top bundles; ``bundles`` is the ownership list when known (ownedNamespaces),
    else the top bundles' names; ``version`` the broker's own when it was asked (else the cluster's).
    """
    stats = {name: dict(values) for name, values in top_bundles}
    names = sorted(set(owned) if owned is not None else set(stats))

    def total(key: str) -> int:
        return int(sum(float(s.get(key, 0) or 0) for s in stats.values()))

    return {
        **{k: dict(load_data[k]) for k in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")},
        **{k: load_data[k] for k in ("msgThroughputIn", "msgThroughputOut", "msgRateIn", "msgRateOut")},
        "lastUpdate": int(load_data["updatedAt"]),
        "lastStats": stats,
        "bundleStats": stats,
        "bundles": names,
        "numBundles": int(load_data.get("bundleCount", len(names)) or 0),
        "numTopics": int(load_data.get("topics", 0) or total("topics")),
        "numConsumers": total("consumerCount"),
        "numProducers": total("producerCount"),
        "brokerVersionString": version,
        "loadManagerClassName": class_name,
        "maxResourceUsage": load_data.get("maxResourceUsage", 0.0),
        "loadReportType": "LocalBrokerData",
        "extensibleLoadManager": {
            "topBundles": list(dict.fromkeys(name for name, _ in top_bundles)),
            "ownedBundlesKnown": owned is not None,
            **{
                k: load_data[k]
                for k in ("weightedMaxEMA", "msgThroughputEMA", "updatedAt", "reportedAt", "bundleCount", "topics")
                if k in load_data
            },
        },
    }
