"""Scenario files (YAML or JSON): brokers, namespaces, topics, traffic patterns, events and duration.

The schema is documented in docs/simulator.md ("Scenario files"); ``load_scenario`` validates a file and
names the offending key on any error.

About 550 lines because it is the schema's one reader: each key's parsing and its one-line error sit beside the
others of its section (brokers, namespaces, events, isolation policies, failure domains), as the docs list them.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from pulsar_lb_operator.simulator.errors import ScenarioError
from pulsar_lb_operator.simulator.faults import FaultRule, parse_faults
from pulsar_lb_operator.simulator.traffic import Pattern

ADDRESSES = ("ports", "distinct")
EVENT_TYPES = (
    "add_broker",
    "crash_broker",
    "remove_broker",
    "restart_broker",
    "rolling_restart",
    "traffic",
    "background",
)
PLACEMENTS = ("LeastLongTermMessageRate", "random")
LOAD_MANAGERS = ("modular", "extensible")  # loadManager: extensible — simulator/elm.py


@dataclass(frozen=True)
class BrokerSpec:
    name: str
    cores: float = 8
    nic_gbps: float = 10
    heap_mib: float = 4096
    direct_mib: float = 4096
    cost_per_msg: float = 0.004  # CPU, percent of one core per msg/s (in + out)
    cost_per_mib: float = 1.5  # CPU, percent of one core per MiB/s (in + out)
    background_cpu: float = 0.05  # fraction of the broker's CPU used by other processes
    jitter: float = 0.01  # relative noise on CPU usage per host sample


@dataclass(frozen=True)
class NamespaceSpec:
    name: str
    bundles: int = 4
    topics: int = 16
    partitions: int = 0  # >0: one partitioned topic per "topic", with this many partitions
    rate: float = 100.0  # median publish rate per topic, msg/s
    rate_spread: float = 0.0  # lognormal sigma of per-topic rates (0: all equal)
    msg_size: int = 1024
    fanout: float = 1.0  # msgRateOut = msgRateIn × fanout
    producers: int = 1
    consumers: int = 1
    pattern: Pattern = field(default_factory=Pattern)
    hot_topics: dict[str, float] = field(default_factory=dict)  # topic name → msg/s, added on top
    anti_affinity_group: str | None = None  # served by GET …/namespaces/{tenant}/{ns}/antiAffinity


@dataclass(frozen=True)
class IsolationPolicySpec:
    """A namespace isolation policy: ``namespaces`` are regexes over namespace names, as in Pulsar;
    ``primary``/``secondary`` name brokers (glob patterns allowed) and are served as regexes of their
    hosts, which Pulsar matches (so brokers need ``addresses: distinct``)."""

    name: str
    namespaces: tuple[str, ...]
    primary: tuple[str, ...]
    secondary: tuple[str, ...] = ()
    min_limit: int = 1
    usage_threshold: int = 100


@dataclass(frozen=True)
class EventSpec:
    at_s: float
    type: str
    broker: str | None = None
    spec: BrokerSpec | None = None
    namespace: str | None = None
    factor: float = 1.0
    interval_s: float = 120.0
    # traffic: only these topics of ``namespace`` (names as in the namespace, ``topic-3`` or a hot topic's;
    # a partitioned topic's every partition), as when one tenant's traffic surges into a few hot topics
    topics: tuple[str, ...] = ()
    # background: the fraction of the broker's CPU other processes on its machine use from then on (a noisy
    # neighbour starting, or stopping)
    background_cpu: float | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    cluster: str
    duration_s: float
    report_interval_s: float
    shedding_interval_s: float
    placement: str
    brokers: tuple[BrokerSpec, ...]
    namespaces: tuple[NamespaceSpec, ...]
    initial_owners: dict[str, float]
    events: tuple[EventSpec, ...]
    config: dict[str, Any]
    faults: tuple[FaultRule, ...] = ()  # injected faults (simulator/faults.py), armed when served over HTTP
    # how brokers are addressed when served: "ports" — 127.0.0.1, a port each; "distinct" — an address
    # each on the loopback network (127.0.0.1, 127.0.0.2, …), all on one port, like a real cluster's hosts
    addresses: str = "ports"
    # served by GET /admin/v2/clusters/{cluster}/namespaceIsolationPolicies
    isolation_policies: tuple[IsolationPolicySpec, ...] = ()
    # "extensible": the brokers run the extensible load manager — no load report, its class name in the runtime
    # config, and (with simulator/elm.py started) their load published on its system topics
    load_manager: str = "modular"
    broker_version: str = "4.0.4-sim"  # what GET /admin/v2/brokers/version answers (brokerVersion)
    # when a broker rewrites its LocalBrokerData (simulator/report_writes.py): Pulsar's
    # loadBalancerReportUpdateThresholdPercentage and loadBalancerReportUpdateMaxIntervalMinutes
    report_update_threshold_percentage: float = 10
    report_update_max_interval_minutes: float = 15
    # served by GET /admin/v2/clusters/{cluster}/failureDomains: domain → broker-name patterns; the
    # cluster's own placement spreads anti-affinity groups across them while failure_domains_enabled
    # (the brokers' failureDomainsEnabled, true by default when domains are given)
    failure_domains: tuple[tuple[str, tuple[str, ...]], ...] = ()
    failure_domains_enabled: bool = False
    # initial_owners: balanced — every bundle dealt, the largest first, to the broker it leaves least used: the
    # even start a balancer kept (a deal by weights leaves brokers a few bundles apart)
    balanced_start: bool = False

    @property
    def broker_names(self) -> set[str]:
        """Every broker name the scenario knows: its brokers and those its events add."""
        return {b.name for b in self.brokers} | {e.broker for e in self.events if e.type == "add_broker" and e.broker}


def _check_keys(data: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ScenarioError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _number(data: dict[str, Any], key: str, where: str, default: float, minimum: float = 0.0) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ScenarioError(f"{where}.{key}: expected a number >= {minimum:g}, got {value!r}")
    return float(value)


def _pattern(data: Any, where: str) -> Pattern:
    if data is None:
        return Pattern()
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: expected a mapping")
    _check_keys(
        data, {"type", "amplitude", "period_minutes", "phase", "factor", "start_minute", "duration_minutes"}, where
    )
    kind = data.get("type", "constant")
    if kind not in Pattern.KINDS:
        raise ScenarioError(f"{where}.type: {kind!r} is not one of {', '.join(Pattern.KINDS)}")
    return Pattern(
        kind=kind,
        amplitude=_number(data, "amplitude", where, 0.0),
        period_s=_number(data, "period_minutes", where, 1440.0, 0.001) * 60,
        phase=_number(data, "phase", where, 0.0),
        factor=_number(data, "factor", where, 1.0),
        start_s=_number(data, "start_minute", where, 0.0) * 60,
        duration_s=_number(data, "duration_minutes", where, 0.0) * 60,
    )


_BROKER_KEYS = {
    "name",
    "cores",
    "nic_gbps",
    "heap_mib",
    "direct_mib",
    "cost_per_msg",
    "cost_per_mib",
    "background_cpu",
    "jitter",
    "count",
}


def _broker(data: Any, where: str, name: str) -> BrokerSpec:
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: expected a mapping")
    _check_keys(data, _BROKER_KEYS, where)
    defaults = BrokerSpec(name)
    values = {k: _number(data, k, where, getattr(defaults, k)) for k in _BROKER_KEYS - {"name", "count"}}
    for key in ("cores", "nic_gbps", "heap_mib", "direct_mib"):
        if values[key] <= 0:
            raise ScenarioError(f"{where}.{key}: must be > 0")
    if values["background_cpu"] >= 1:
        raise ScenarioError(f"{where}.background_cpu: must be a fraction below 1")
    return BrokerSpec(name=name, **values)


def _brokers(items: Any) -> list[BrokerSpec]:
    if not isinstance(items, list) or not items:
        raise ScenarioError("brokers: expected a non-empty list")
    out: list[BrokerSpec] = []
    for i, item in enumerate(items):
        where = f"brokers[{i}]"
        if not isinstance(item, dict):
            raise ScenarioError(f"{where}: expected a mapping")
        count = int(_number(item, "count", where, 1, 1))
        for j in range(count):
            if "name" not in item:
                name = f"broker-{len(out)}"
            else:
                name = str(item["name"]) if count == 1 else f"{item['name']}-{j}"
            out.append(_broker(item, where, name))
    names = [b.name for b in out]
    if len(set(names)) != len(names):
        raise ScenarioError("brokers: broker names must be unique")
    return out


_NS_KEYS = {
    "name",
    "bundles",
    "topics",
    "partitions",
    "rate",
    "rate_spread",
    "msg_size",
    "fanout",
    "producers",
    "consumers",
    "pattern",
    "hot_topics",
    "count",
    "anti_affinity_group",
}


def _namespace(data: Any, where: str) -> NamespaceSpec:
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: expected a mapping")
    _check_keys(data, _NS_KEYS, where)
    name = data.get("name")
    if not isinstance(name, str) or name.count("/") != 1 or not all(name.split("/")):
        raise ScenarioError(f"{where}.name: expected 'tenant/namespace', got {name!r}")
    hot = data.get("hot_topics", {}) or {}
    if not isinstance(hot, dict) or not all(isinstance(v, int | float) and v >= 0 for v in hot.values()):
        raise ScenarioError(f"{where}.hot_topics: expected a mapping of topic name to msg/s")
    return NamespaceSpec(
        name=name,
        bundles=int(_number(data, "bundles", where, 4, 1)),
        topics=int(_number(data, "topics", where, 16, 0)),
        partitions=int(_number(data, "partitions", where, 0, 0)),
        rate=_number(data, "rate", where, 100.0),
        rate_spread=_number(data, "rate_spread", where, 0.0),
        msg_size=int(_number(data, "msg_size", where, 1024, 1)),
        fanout=_number(data, "fanout", where, 1.0),
        producers=int(_number(data, "producers", where, 1)),
        consumers=int(_number(data, "consumers", where, 1)),
        pattern=_pattern(data.get("pattern"), f"{where}.pattern"),
        hot_topics={str(k): float(v) for k, v in hot.items()},
        anti_affinity_group=_group(data.get("anti_affinity_group"), where),
    )


def _namespaces(items: Any) -> list[NamespaceSpec]:
    """The ``namespaces`` list; ``count: N`` repeats an entry as tenant/name-0 … tenant/name-(N-1)."""
    if not isinstance(items, list) or not items:
        raise ScenarioError("namespaces: expected a non-empty list")
    out: list[NamespaceSpec] = []
    for i, item in enumerate(items):
        where = f"namespaces[{i}]"
        if not isinstance(item, dict) or "count" not in item:
            out.append(_namespace(item, where))
            continue
        count = int(_number(item, "count", where, 1, 1))
        single = {k: v for k, v in item.items() if k != "count"}
        if count == 1:
            out.append(_namespace(single, where))
            continue
        template = _namespace(single, where)
        out.extend(dataclasses.replace(template, name=f"{template.name}-{j}") for j in range(count))
    names = [ns.name for ns in out]
    if len(set(names)) != len(names):
        raise ScenarioError("namespaces: namespace names must be unique")
    return out


def _event(data: Any, where: str, broker_names: set[str], namespaces: dict[str, NamespaceSpec]) -> EventSpec:
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: expected a mapping")
    allowed = {"at_minute", "type", "broker", "namespace", "factor", "interval_minutes", "spec", "topics"}
    _check_keys(data, allowed | {"background_cpu"}, where)
    kind = data.get("type")
    if kind not in EVENT_TYPES:
        raise ScenarioError(f"{where}.type: {kind!r} is not one of {', '.join(EVENT_TYPES)}")
    broker = data.get("broker")
    spec = None
    if kind == "add_broker":
        if not isinstance(broker, str):
            raise ScenarioError(f"{where}.broker: add_broker needs the new broker's name")
        spec = _broker(data.get("spec", {}), f"{where}.spec", broker)
        broker_names.add(broker)
    elif kind in ("crash_broker", "remove_broker", "restart_broker", "background") and broker not in broker_names:
        raise ScenarioError(f"{where}.broker: unknown broker {broker!r}")
    background = None
    if kind == "background":
        if "background_cpu" not in data:
            raise ScenarioError(f"{where}.background_cpu: a background event needs the new fraction")
        background = _number(data, "background_cpu", where, 0.0)
        if background >= 1:
            raise ScenarioError(f"{where}.background_cpu: must be a fraction below 1")
    elif "background_cpu" in data:
        raise ScenarioError(f"{where}.background_cpu: only a background event takes it")
    topics = _surge_topics(data, where, kind, namespaces)
    return EventSpec(
        at_s=_number(data, "at_minute", where, 0.0) * 60,
        type=kind,
        broker=broker,
        spec=spec,
        namespace=data.get("namespace"),
        factor=_number(data, "factor", where, 1.0),
        interval_s=_number(data, "interval_minutes", where, 2.0) * 60,
        topics=topics,
        background_cpu=background,
    )


def _surge_topics(data: dict[str, Any], where: str, kind: str, namespaces: dict[str, NamespaceSpec]) -> tuple[str, ...]:
    """A traffic event's ``topics``: names of topics its ``namespace`` has (``topic-N`` below its ``topics``, or one
    of its ``hot_topics``)."""
    if "topics" not in data:
        return ()
    topics = data["topics"]
    if kind != "traffic":
        raise ScenarioError(f"{where}.topics: only a traffic event takes topics")
    namespace = namespaces.get(data.get("namespace"))  # type: ignore[arg-type]
    if namespace is None:
        raise ScenarioError(f"{where}.namespace: topics need the namespace they are in, one of the scenario's")
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
        raise ScenarioError(f"{where}.topics: expected a non-empty list of topic names")
    for topic in topics:
        match = re.fullmatch(r"topic-(\d+)", topic)
        if topic not in namespace.hot_topics and not (match and int(match.group(1)) < namespace.topics):
            raise ScenarioError(f"{where}.topics: {namespace.name} has no topic {topic!r}")
    return tuple(topics)


_TOP_KEYS = {
    "name",
    "description",
    "seed",
    "cluster",
    "duration_minutes",
    "report_interval_seconds",
    "shedding_interval_minutes",
    "placement",
    "brokers",
    "namespaces",
    "initial_owners",
    "events",
    "config",
    "faults",
    "addresses",
    "isolation_policies",
    "loadManager",
    "brokerVersion",
    "report_update_threshold_percentage",
    "report_update_max_interval_minutes",
    "failure_domains",
    "failure_domains_enabled",
}


def _group(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "/" in value:
        raise ScenarioError(f"{where}.anti_affinity_group: expected a group name, got {value!r}")
    return value


def _isolation_policies(data: Any, broker_names: set[str], addresses: str) -> tuple[IsolationPolicySpec, ...]:
    """``isolation_policies``: name → {namespaces, primary, secondary, min_limit, usage_threshold}."""
    if data is None:
        return ()
    if not isinstance(data, dict):
        raise ScenarioError("isolation_policies: expected a mapping of policy names to policies")
    if data and addresses != "distinct":
        raise ScenarioError(
            "isolation_policies: Pulsar tells brokers apart by host, and with addresses: ports every broker is "
            "127.0.0.1: use addresses: distinct"
        )
    out = []
    for name, item in data.items():
        where = f"isolation_policies.{name}"
        if not isinstance(item, dict):
            raise ScenarioError(f"{where}: expected a mapping")
        _check_keys(item, {"namespaces", "primary", "secondary", "min_limit", "usage_threshold"}, where)
        lists = {}
        for key in ("namespaces", "primary", "secondary"):
            value = item.get(key, [] if key == "secondary" else None)
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise ScenarioError(f"{where}.{key}: expected a list of strings")
            lists[key] = tuple(value)
        if not lists["namespaces"] or not lists["primary"]:
            raise ScenarioError(f"{where}: namespaces and primary must not be empty")
        for regex in lists["namespaces"]:
            try:
                re.compile(regex)
            except re.error as exc:
                raise ScenarioError(f"{where}.namespaces: {regex!r} is not a regular expression ({exc})") from None
        for key in ("primary", "secondary"):
            for pattern in lists[key]:
                if not fnmatch.filter(sorted(broker_names), pattern):
                    raise ScenarioError(f"{where}.{key}: {pattern!r} matches no broker")
        out.append(
            IsolationPolicySpec(
                str(name),
                lists["namespaces"],
                lists["primary"],
                lists["secondary"],
                int(_number(item, "min_limit", where, 1)),
                int(_number(item, "usage_threshold", where, 100)),
            )
        )
    return tuple(out)


def _failure_domains(data: Any, broker_names: set[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``failure_domains``: domain name → broker names or glob patterns (each must match a broker)."""
    if data is None:
        return ()
    if not isinstance(data, dict):
        raise ScenarioError("failure_domains: expected a mapping of domain names to lists of brokers")
    out = []
    for name, patterns in data.items():
        where = f"failure_domains.{name}"
        if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
            raise ScenarioError(f"{where}: expected a list of broker names")
        for pattern in patterns:
            if not fnmatch.filter(sorted(broker_names), pattern):
                raise ScenarioError(f"{where}: {pattern!r} matches no broker")
        out.append((str(name), tuple(patterns)))
    return tuple(out)


def parse_scenario(data: Any, default_name: str = "scenario") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError("scenario: expected a mapping at the top level")
    _check_keys(data, _TOP_KEYS, "scenario")
    brokers = _brokers(data.get("brokers"))
    names = {b.name for b in brokers}
    namespaces = _namespaces(data.get("namespaces"))
    owners_raw = data.get("initial_owners", {}) or {}
    balanced_start = owners_raw == "balanced"
    if balanced_start:
        owners_raw = {}
    if not isinstance(owners_raw, dict):
        raise ScenarioError(
            "initial_owners: expected 'balanced' or a mapping of broker names (or glob patterns) to weights"
        )
    owners: dict[str, float] = {}
    # glob patterns first, so a broker named exactly keeps its own weight
    for pattern, weight in sorted(owners_raw.items(), key=lambda kv: not any(c in str(kv[0]) for c in "*?[")):
        matched = fnmatch.filter(sorted(names), str(pattern))
        if not matched:
            raise ScenarioError(f"initial_owners: {pattern!r} matches no broker")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
            raise ScenarioError(f"initial_owners.{pattern}: expected a weight >= 0, got {weight!r}")
        owners.update({name: float(weight) for name in matched})
    by_name = {ns.name: ns for ns in namespaces}
    events = [_event(e, f"events[{i}]", names, by_name) for i, e in enumerate(data.get("events", []) or [])]
    placement = data.get("placement", "LeastLongTermMessageRate")
    if placement not in PLACEMENTS:
        raise ScenarioError(f"placement: {placement!r} is not one of {', '.join(PLACEMENTS)}")
    addresses = data.get("addresses", "ports")
    if addresses not in ADDRESSES:
        raise ScenarioError(f"addresses: {addresses!r} is not one of {', '.join(ADDRESSES)}")
    config = data.get("config", {}) or {}
    if not isinstance(config, dict):
        raise ScenarioError("config: expected a mapping of Pulsar settings")
    faults = parse_faults(data.get("faults"), names)  # names now include the brokers events add
    isolation = _isolation_policies(data.get("isolation_policies"), names, addresses)
    load_manager = data.get("loadManager", "modular")
    if load_manager not in LOAD_MANAGERS:
        raise ScenarioError(f"loadManager: {load_manager!r} is not one of {', '.join(LOAD_MANAGERS)}")
    if load_manager == "extensible":  # ELM's UnloadScheduler falls back to TransferShedder for the modular shedders
        config = {"loadBalancerLoadSheddingStrategy": "TransferShedder", **config}
    domains = _failure_domains(data.get("failure_domains"), names)
    domains_enabled = data.get("failure_domains_enabled", bool(domains))
    if not isinstance(domains_enabled, bool):
        raise ScenarioError(f"failure_domains_enabled: expected true or false, got {domains_enabled!r}")
    broker_version = data.get("brokerVersion", "4.0.4-sim")
    if not isinstance(broker_version, str) or not re.fullmatch(r"\d+\.\d+\S*", broker_version):
        raise ScenarioError(f"brokerVersion: expected a version such as 3.0.0, got {broker_version!r}")
    return Scenario(
        name=str(data.get("name", default_name)),
        description=str(data.get("description", "")),
        seed=int(_number(data, "seed", "scenario", 1)),
        cluster=str(data.get("cluster", "sim")),
        duration_s=_number(data, "duration_minutes", "scenario", 60, 1) * 60,
        report_interval_s=_number(data, "report_interval_seconds", "scenario", 60, 1),
        shedding_interval_s=_number(data, "shedding_interval_minutes", "scenario", 1, 0.1) * 60,
        placement=placement,
        brokers=tuple(brokers),
        namespaces=tuple(namespaces),
        initial_owners=owners,
        balanced_start=balanced_start,
        events=tuple(sorted(events, key=lambda e: e.at_s)),
        config=dict(config),
        faults=faults,
        addresses=addresses,
        isolation_policies=isolation,
        load_manager=load_manager,
        broker_version=broker_version,
        report_update_threshold_percentage=_number(data, "report_update_threshold_percentage", "scenario", 10),
        report_update_max_interval_minutes=_number(data, "report_update_max_interval_minutes", "scenario", 15, 0.0),
        failure_domains=domains,
        failure_domains_enabled=domains_enabled,
    )


def load_scenario(path: str | Path) -> Scenario:
    """A scenario file by path, or a shipped one by name (``rolling-restart``)."""
    candidate = Path(path)
    if not candidate.exists() and not candidate.suffix:
        shipped = resources.files("pulsar_lb_operator.simulator") / "scenarios" / f"{path}.yaml"
        if shipped.is_file():
            return parse_scenario(yaml.safe_load(shipped.read_text()), str(path))
    try:
        text = candidate.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {str(path)!r}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if candidate.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ScenarioError(f"scenario {str(path)!r} cannot be parsed: {str(exc).splitlines()[0]}") from None
    return parse_scenario(data, candidate.stem)


def shipped_scenarios() -> list[str]:
    folder = resources.files("pulsar_lb_operator.simulator") / "scenarios"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))
