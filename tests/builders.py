"""Named builders for load reports and snapshots in the admin API's JSON shape.

Tests write what a broker would report (``broker_report``) and parse it through the same code the
CLI uses, so every strategy test also exercises the snapshot format.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from pulsar_lb_operator.strategies import parse_snapshot
from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot

MIB = 1024 * 1024
NOW = 1_750_000_000_000  # a fixed epoch-ms "now" for every test snapshot


def stats(
    rate_in: float = 0,
    rate_out: float = 0,
    thr_in: float = 0,
    thr_out: float = 0,
    *,
    topics: int = 1,
    consumers: int = 0,
    producers: int = 0,
) -> dict[str, Any]:
    return {
        "msgRateIn": rate_in,
        "msgRateOut": rate_out,
        "msgThroughputIn": thr_in,
        "msgThroughputOut": thr_out,
        "consumerCount": consumers,
        "producerCount": producers,
        "topics": topics,
        "cacheSize": 0,
    }


def usage(used: float, limit: float = 100.0) -> dict[str, float]:
    return {"usage": used, "limit": limit}


def broker_report(
    *,
    cpu: tuple[float, float] = (0, 0),
    memory: tuple[float, float] = (0, 0),
    direct_memory: tuple[float, float] = (0, 0),
    bw_in: tuple[float, float] = (0, 0),
    bw_out: tuple[float, float] = (0, 0),
    bundles: dict[str, dict[str, Any]] | None = None,
    extra_bundles: list[str] | None = None,
    rate_in: float | None = None,
    rate_out: float | None = None,
    thr_in: float | None = None,
    thr_out: float | None = None,
    last_update: int = NOW,
) -> dict[str, Any]:
    """A LocalBrokerData document; broker totals default to the sums over ``bundles`` as Pulsar's are."""
    last_stats = dict(bundles or {})

    def total(key: str, given: float | None) -> float:
        return given if given is not None else sum(s[key] for s in last_stats.values())

    return {
        "webServiceUrl": "http://broker:8080",
        "cpu": usage(*cpu),
        "memory": usage(*memory),
        "directMemory": usage(*direct_memory),
        "bandwidthIn": usage(*bw_in),
        "bandwidthOut": usage(*bw_out),
        "msgRateIn": total("msgRateIn", rate_in),
        "msgRateOut": total("msgRateOut", rate_out),
        "msgThroughputIn": total("msgThroughputIn", thr_in),
        "msgThroughputOut": total("msgThroughputOut", thr_out),
        "lastUpdate": last_update,
        "lastStats": last_stats,
        "bundles": sorted(set(last_stats) | set(extra_bundles or [])),
        "loadReportType": "LocalBrokerData",
    }


def elm_report(
    report: dict[str, Any],
    *,
    topics: int = 6,
    top: list[str] | None = None,
    owned: list[str] | None = None,
    weighted_max_ema: float | None = None,
    msg_throughput_ema: float | None = None,
    publishes_throughput_ema: bool = True,
    version: str | None = None,
) -> dict[str, Any]:
    """``report`` as the operator makes it of an extensible-load-manager broker's BrokerLoadData (operator/collect/
    elm.py): its EMAs those of a BrokerLoadData updated once (the current figures, as in TransferShedderTest's
    getCpuLoad), ``top`` its TopBundlesLoadData in the order published (default: its lastStats, smallest first),
    ``owned`` what ownedNamespaces says it owns (default: its bundles); ``publishes_throughput_ema`` False: a first
    3.0 release's BrokerLoadData, without msgThroughputEMA."""
    from functools import cmp_to_key

    from pulsar_lb_operator.strategies import LoadBalancerConfig
    from pulsar_lb_operator.strategies.shedding.transfer import compare_bundle_stats
    from pulsar_lb_operator.strategies.snapshots import parse_broker_load

    load = parse_broker_load("elm:8080", report)
    by_stats = cmp_to_key(lambda a, b: compare_bundle_stats(load.lastStats[a], load.lastStats[b]))
    published: dict[str, Any] = {
        "weightedMaxEMA": (
            load.max_resource_usage_with_weight(LoadBalancerConfig().weights)
            if weighted_max_ema is None
            else weighted_max_ema
        ),
        "topics": topics,
        "topBundles": top if top is not None else sorted(sorted(load.lastStats), key=by_stats),
        "ownedBundlesKnown": True,
    }
    if publishes_throughput_ema:
        published["msgThroughputEMA"] = load.msg_throughput if msg_throughput_ema is None else msg_throughput_ema
    doc = {**report, "extensibleLoadManager": published}
    if owned is not None:
        doc["bundles"] = sorted(owned)
    if version is not None:
        doc["brokerVersionString"] = version
    return doc


def snapshot_doc(
    brokers: dict[str, dict[str, Any]],
    *,
    taken_at: int = NOW,
    namespaces: dict[str, list[str]] | None = None,
    topics: dict[str, dict[str, dict[str, float]]] | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {"format": "pulsar-lb-snapshot/1", "cluster": "test", "takenAt": taken_at, "brokers": brokers}
    if namespaces:
        doc["namespaces"] = {ns: {"boundaries": b} for ns, b in namespaces.items()}
    if topics:
        doc["topics"] = topics
    return doc


def isolation_policy(namespaces: str, primary: str) -> dict[str, Any]:
    """One entry of a snapshot's ``isolationPolicies``, as the admin API answers: ``namespaces`` and ``primary`` are
    regexes (of namespaces, of broker hosts), no secondary, the min_available failover of Pulsar's default."""
    failover = {"policy_type": "min_available", "parameters": {"min_limit": "1", "usage_threshold": "100"}}
    return {"namespaces": [namespaces], "primary": [primary], "secondary": [], "auto_failover_policy": failover}


def snapshot(brokers: dict[str, dict[str, Any]], **kwargs: Any) -> ClusterSnapshot:
    return parse_snapshot(snapshot_doc(brokers, **kwargs))


def write_snapshot(path: Path, brokers: dict[str, dict[str, Any]], **kwargs: Any) -> Path:
    path.write_text(json.dumps(snapshot_doc(brokers, **kwargs)))
    return path


def bundle(ns: str, index: int, count: int = 16) -> str:
    """The index-th of ``count`` default bundles of a namespace, e.g. ``ns/0x10000000_0x20000000``."""
    segment = (1 << 32) // count
    lower = index * segment
    upper = 0xFFFFFFFF if index == count - 1 else (index + 1) * segment
    return f"{ns}/0x{lower:08x}_0x{upper:08x}"


def run_shedder(name: str, snap: ClusterSnapshot, config: Any = None, state: Any = None) -> Any:
    """Run one shedding strategy alone, as Pulsar's unit tests do (no placement, no split)."""
    from pulsar_lb_operator.strategies import SHEDDING, LoadBalancerConfig, StrategyState
    from pulsar_lb_operator.strategies.loaddata import build_load_data

    config = config or LoadBalancerConfig()
    state = state or StrategyState()
    load, _, _ = build_load_data(snap, state.bundle_data, state.recently_unloaded, config.grace_period_ms)
    return SHEDDING[name](load, config, state)


def cfg(**overrides: Any) -> Any:
    from pulsar_lb_operator.strategies import LoadBalancerConfig

    return LoadBalancerConfig().replace(overrides)


def cli_shedder(workdir: Path, name: str, snap: ClusterSnapshot, config: Any = None, state: Any = None) -> Any:
    """The same as ``run_shedder``, but through ``operator rebalance`` with snapshot, config and state files.

    Returns an object shaped like a SheddingResult. Unlike the bare shedder, the CLI also places each
    bundle, records grace periods and may split; scenarios that assert only what the shedder decides
    (sources, bundles, counters) hold both ways.
    """
    import contextlib
    import io
    from types import SimpleNamespace

    from pulsar_lb_operator import cli
    from pulsar_lb_operator.strategies import LoadBalancerConfig, StrategyState, Unload

    workdir.mkdir(parents=True, exist_ok=True)
    index = len(list(workdir.glob("snapshot-*.json")))
    snap_file = workdir / f"snapshot-{index}.json"
    snap_file.write_text(json.dumps(snap.to_json()))
    config_file = workdir / "config.json"
    defaults = LoadBalancerConfig().to_json()
    changed = {k: v for k, v in (config or LoadBalancerConfig()).to_json().items() if defaults[k] != v}
    config_file.write_text(json.dumps(changed))
    state_file = workdir / "state.json"
    state_file.write_text(json.dumps((state or StrategyState()).to_json()))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(
            [
                "rebalance",
                "--snapshot",
                str(snap_file),
                "--strategy",
                name,
                "--config",
                str(config_file),
                "--state",
                str(state_file),
                "--output",
                "json",
            ]
        )
    assert code == 0
    plan = json.loads(out.getvalue())
    unloads = tuple(
        Unload(a["bundle"], a["source"], a["destination"], a["reason"])
        for a in plan["actions"]
        if a["type"] == "unload"
    )
    return SimpleNamespace(
        unloads=unloads, notes=tuple(plan["notes"]), state=StrategyState.from_json(json.loads(state_file.read_text()))
    )


def operator_script() -> str:
    """The installed ``operator`` console script of the interpreter running the tests."""
    import shutil
    import sys

    return shutil.which("operator", path=str(Path(sys.executable).parent)) or "operator"


def free_port() -> int:
    """A port nobody listens on right now, on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def auth_settings(plugin: str, folder: Path, token: str = "s3cret") -> dict[str, str]:
    """The operator's settings for one authentication method, with the files it names written in ``folder``."""
    (folder / "token").write_text(token)
    for name in ("c.pem", "k.pem", "creds.json"):
        (folder / name).write_text('{"client_id": "i", "client_secret": "s"}')
    return {
        "token": {"tokenFile": str(folder / "token")},
        "tls": {"authPlugin": "tls", "tlsCertFile": str(folder / "c.pem"), "tlsKeyFile": str(folder / "k.pem")},
        "oauth2": {
            "authPlugin": "oauth2",
            "oauth2IssuerUrl": "https://idp.example",
            "oauth2Audience": "urn:pulsar",
            "oauth2CredentialsFile": str(folder / "creds.json"),
        },
    }[plugin]


# A three-broker cluster, broker-0 carrying three times broker-1's bundles and broker-2 none, with Pulsar's own
# balancer off: the simulator's tests and its conformance tests start from it.
SMALL_SCENARIO: dict[str, Any] = {
    "cluster": "sim",
    "brokers": [{"count": 3, "cores": 4, "cost_per_msg": 0.01, "cost_per_mib": 1.0}],
    "namespaces": [{"name": "t/ns", "bundles": 8, "topics": 64, "rate": 150}],
    "initial_owners": {"broker-0": 3, "broker-1": 1},
    "config": {"loadBalancerSheddingEnabled": False, "loadBalancerAutoBundleSplitEnabled": False},
}
