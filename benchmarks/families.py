"""Scenario families: random clusters of one kind of trouble, for judging strategies on cases nobody tuned for.

``generate(family, run)`` makes one scenario of a family from its own random stream (the family's name and the
run number: the same pair, the same scenario). Everything is drawn: how many brokers and of which hardware
(cores, NIC, per-message and per-MiB CPU costs, other processes' CPU, sample noise), how many tenants, bundles,
topics and how their rates spread, message sizes and fan-out, how busy the cluster is, and what happens when.
Nothing is chosen for what a strategy does well; each family only fixes the kind of disturbance:

=================== ==========================================================================================
scale-out           busy brokers (two hardware kinds in some clusters); empty brokers join, alike or bigger
scale-in            a quiet cluster loses brokers; the cluster's own placement (least long-term msg rate, or
                    random) takes their bundles
heterogeneous       two or three hardware kinds, sometimes a co-tenanted machine, bundles dealt by count (a
                    count-based balancer's even): the smaller brokers run hot, the bigger ones idle
rolling-restart     every broker restarted one after another, each back empty
tenant-surge        one tenant's traffic surges into a few of its topics
hot-topic           one topic becomes hot, a large share of a broker on its own
isolation           a tenant isolated on brokers of its own (a namespace isolation policy), as busy as the rest;
                    a surge in either, or a noisy neighbour: each side is judged on its own
diurnal             tenants follow daily curves with their own phases (time zones), compressed: the load drifts
noisy-neighbour     other processes on one or two brokers' machines start using CPU; sometimes they stop again
mixed               heterogeneous hardware and daily curves, with two of the above one after the other
noise               a balanced cluster whose traffic and CPU samples jitter, nothing else: nothing to fix
=================== ==========================================================================================

The cluster's load is set by the draw of its mean usage: topic rates are scaled until the brokers' balanced level
(``bounds.balanced_level``) is that usage.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from pulsar_lb_operator.benchmarks.bounds import balanced_level, linear_usage
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.scenario import Scenario, parse_scenario
from pulsar_lb_operator.strategies import BundleStats, UserError
from pulsar_lb_operator.strategies import bundles as bundle_names

QUIET = {"loadBalancerSheddingEnabled": False, "loadBalancerAutoBundleSplitEnabled": False}  # the operator is alone
AFTER = 40  # minutes a scenario runs after its last disturbance: room for a large floor and to see it holds
TENANT_SURGE = (4.0, 15.0)  # points of the smallest broker's CPU each surging topic rises to: a few hot topics
HOT_TOPIC = (12.0, 30.0)  # one topic: a large share of a broker, yet under the balanced level (it cannot be split)


Size = tuple[int, int]  # the fewest and the most brokers a family's clusters start with


class UnknownFamilyError(UserError, ValueError):
    """A --family that names no family."""


class FamilySizeError(UserError, ValueError):
    """A --brokers no family's clusters can have."""


def _hardware(rng: random.Random, cores: float | None = None) -> dict[str, Any]:
    """One kind of machine: cores, NIC, what a message and a MiB cost its CPU, other processes, sample noise."""
    return {
        "cores": cores or rng.choice([4, 8, 8, 16, 16, 32]),
        "nic_gbps": rng.choice([10, 10, 25, 40]),
        "cost_per_msg": round(rng.uniform(0.006, 0.014), 4),
        "cost_per_mib": round(rng.uniform(0.6, 1.6), 3),
        "background_cpu": round(rng.uniform(0.02, 0.08), 3),
        "jitter": round(rng.uniform(0.005, 0.03), 4),
    }


def _tenants(rng: random.Random, brokers: int, pattern: Callable[[random.Random], dict] | None = None) -> list[dict]:
    """One to four tenants' namespaces, 8 to 24 bundles a broker in all, 3 to 12 topics a bundle (a quarter of the
    namespaces with partitioned topics); rates are relative (``_calibrate`` scales them)."""
    count = rng.randint(1, 4)
    total = brokers * rng.randint(8, 24)
    weights = [rng.uniform(0.5, 2.0) for _ in range(count)]
    out = []
    for i, weight in enumerate(weights):
        bundles = max(2, min(128, round(total * weight / sum(weights))))
        namespace = {
            "name": f"tenant-{i}/ns",
            "bundles": bundles,
            "topics": bundles * rng.randint(3, 12),
            "rate": round(rng.uniform(0.5, 2.0), 3),
            "rate_spread": round(rng.uniform(0.2, 0.9), 2),
            "msg_size": rng.choice([256, 512, 1024, 2048, 4096]),
            "fanout": round(rng.uniform(1.0, 3.0), 2),
        }
        if rng.random() < 0.25:
            namespace["partitions"] = rng.randint(2, 4)
        if pattern is not None:
            namespace["pattern"] = pattern(rng)
        out.append(namespace)
    return out


def _two_tenants_at_least(
    rng: random.Random, tenants: list[dict], brokers: int, pattern: Callable[[random.Random], dict] | None = None
) -> list[dict]:
    """``tenants``, with a second one (``tenant-x/ns``, drawn from a stream of its own) where ``_tenants`` drew one:
    a family whose trouble is between tenants needs two."""
    if len(tenants) == 1:
        tenants += _tenants(random.Random(rng.random()), brokers, pattern)[:1]
        tenants[-1]["name"] = "tenant-x/ns"
    return tenants


def _brokers(rng: random.Random, count: int, kinds: int = 1, prefix: str = "broker") -> list[dict]:
    """``count`` brokers of ``kinds`` hardware kinds (each a ``_hardware`` draw)."""
    hardware = [_hardware(rng) for _ in range(kinds)]
    return [
        {"name": f"{prefix}-{i}", **hardware[i % kinds if i < kinds else rng.randrange(kinds)]} for i in range(count)
    ]


def _calibrate(data: dict, usage: float, members: set[str] | None = None, namespaces: set[str] | None = None) -> dict:
    """``data`` with every topic rate (of ``namespaces``, default all) scaled so that the brokers (``members``,
    default all at the start) would all be at ``usage`` % with that traffic spread evenly by capacity."""
    cluster = SimulatedCluster(parse_scenario(data))
    brokers = [b for b in cluster.alive_brokers() if members is None or b.name in members]
    bundles = [b for b in cluster.all_bundles() if namespaces is None or bundle_names.namespace_of(b) in namespaces]
    traffic = np.array([cluster.bundle_stats(b)[0].traffic for b in bundles]).sum(axis=0)
    lines = [linear_usage(cluster, b) for b in brokers]
    low, high = 0.0, 1.0
    while balanced_level(lines, traffic * high) < usage:
        high *= 2
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if balanced_level(lines, traffic * middle) < usage else (low, middle)
    scale = (low + high) / 2
    for namespace in data["namespaces"]:
        if namespaces is None or namespace["name"] in namespaces:
            namespace["rate"] = namespace["rate"] * scale
    return data


def _base(rng: random.Random, name: str, brokers: list[dict], tenants: list[dict], **extra: Any) -> dict:
    return {
        "name": name,
        "seed": rng.randrange(1_000_000, 2**31),
        "brokers": brokers,
        "namespaces": tenants,
        "initial_owners": "balanced",
        "placement": "LeastLongTermMessageRate",
        "config": dict(QUIET),
        **extra,
    }


def _when(rng: random.Random) -> int:
    return rng.randint(3, 8)


def scale_out(rng: random.Random, name: str, size: Size) -> dict:
    count = rng.randint(*size)
    brokers = _brokers(rng, count, kinds=rng.choice([1, 1, 2]))
    joining = rng.randint(1, max(1, round(count * rng.uniform(0.25, 0.8))))
    kind = dict(rng.choice(brokers))
    kind.pop("name")
    if rng.random() < 0.5:
        kind["cores"] = kind["cores"] * 2  # scale out into bigger machines
    at, apart = _when(rng), rng.choice([0, 0, 1])
    events: list[dict[str, Any]] = [
        {"at_minute": at + i * apart, "type": "add_broker", "broker": f"new-{i}", "spec": kind} for i in range(joining)
    ]
    data = _base(rng, name, brokers, _tenants(rng, count), events=events)
    data["duration_minutes"] = events[-1]["at_minute"] + AFTER
    return _calibrate(data, rng.uniform(55, 80))


def scale_in(rng: random.Random, name: str, size: Size) -> dict:
    count = rng.randint(*size)
    brokers = _brokers(rng, count, kinds=rng.choice([1, 1, 2]))
    leaving = rng.sample([b["name"] for b in brokers], rng.randint(1, max(1, count // 3)))
    at, apart = _when(rng), rng.choice([0, 0, 1])
    events = [{"at_minute": at + i * apart, "type": "remove_broker", "broker": b} for i, b in enumerate(leaving)]
    placement = rng.choice(["LeastLongTermMessageRate", "random"])
    data = _base(rng, name, brokers, _tenants(rng, count), events=events, placement=placement)
    data["duration_minutes"] = events[-1]["at_minute"] + AFTER
    # about 40 to 70 % once they are gone (background aside): the quiet cluster before it is that much less busy
    return _calibrate(data, rng.uniform(40, 70) * (count - len(leaving)) / count)


def heterogeneous(rng: random.Random, name: str, size: Size) -> dict:
    count = rng.randint(*size)
    brokers = _brokers(rng, count, kinds=rng.randint(2, 3))
    if rng.random() < 0.3:  # a machine shared with another process (PIP-364's 70 % co-tenant)
        rng.choice(brokers)["background_cpu"] = round(rng.uniform(0.3, 0.6), 2)
    data = _base(rng, name, brokers, _tenants(rng, count), initial_owners={"*": 1}, duration_minutes=AFTER + 5)
    return _calibrate(data, rng.uniform(35, 65))


def rolling_restart(rng: random.Random, name: str, size: Size) -> dict:
    count = rng.randint(*size)
    brokers = _brokers(rng, count, kinds=rng.choice([1, 1, 2]))
    at, interval = rng.randint(3, 6), rng.randint(1, 6)
    events = [{"at_minute": at, "type": "rolling_restart", "interval_minutes": interval}]
    placement = rng.choice(["LeastLongTermMessageRate", "random"])
    data = _base(rng, name, brokers, _tenants(rng, count), events=events, placement=placement)
    data["duration_minutes"] = at + count * interval + AFTER
    return _calibrate(data, rng.uniform(40, 65))


def _surge(rng: random.Random, data: dict, topics: int, points: tuple[float, float], at: int) -> dict:
    """A traffic event at minute ``at``: ``topics`` topics of one tenant each rise to a draw from ``points`` (a
    range) of the smallest broker's CPU (all its partitions together). Call after ``_calibrate``: the factor comes
    from the rates it set; where the topics differ, the one the draw asks least of sets it."""
    namespace = rng.choice(data["namespaces"])
    cluster = SimulatedCluster(parse_scenario(data))
    smallest = min(cluster.alive_brokers(), key=lambda b: b.spec.cores)
    chosen = rng.sample(range(namespace["topics"]), min(topics, namespace["topics"]))
    factors = []
    for t in chosen:
        name = f"persistent://{namespace['name']}/topic-{t}"
        own = [
            topic.stats(1.0)
            for topic in cluster.topics[namespace["name"]]
            if topic.name == name or topic.name.startswith(f"{name}-partition-")
        ]
        stats = BundleStats(
            msgRateIn=sum(s.msgRateIn for s in own),
            msgRateOut=sum(s.msgRateOut for s in own),
            msgThroughputIn=sum(s.msgThroughputIn for s in own),
            msgThroughputOut=sum(s.msgThroughputOut for s in own),
        )
        cost = cluster.weighted_usage(smallest, {"topic": stats}) - cluster.weighted_usage(smallest, {})
        factors.append(rng.uniform(*points) / cost if cost > 0 else 1.0)
    return {
        "at_minute": at,
        "type": "traffic",
        "namespace": namespace["name"],
        "topics": [f"topic-{t}" for t in chosen],
        "factor": round(max(min(factors), 1.5), 2),
    }


def _surged(rng: random.Random, name: str, count: int, topics: int, points: tuple[float, float]) -> dict:
    data = _base(rng, name, _brokers(rng, count, kinds=rng.choice([1, 1, 2])), _tenants(rng, count))
    data = _calibrate(data, rng.uniform(35, 55))
    event = _surge(rng, data, topics, points, _when(rng))
    data["events"] = [event]
    data["duration_minutes"] = event["at_minute"] + AFTER
    return data


def tenant_surge(rng: random.Random, name: str, size: Size) -> dict:
    return _surged(rng, name, rng.randint(*size), rng.randint(1, 4), TENANT_SURGE)


def hot_topic(rng: random.Random, name: str, size: Size) -> dict:
    return _surged(rng, name, rng.randint(*size), 1, HOT_TOPIC)


def _daily(amplitude: tuple[float, float], shortest: int) -> Callable[[random.Random], dict]:
    """A tenant's daily curve: an amplitude in ``amplitude``, a "day" of ``shortest`` to 720 minutes, any phase."""

    def draw(r: random.Random) -> dict:
        return {
            "type": "daily",
            "amplitude": round(r.uniform(*amplitude), 2),
            "period_minutes": r.randint(shortest, 720),
            "phase": round(r.random(), 3),
        }

    return draw


def isolation(rng: random.Random, name: str, size: Size) -> dict:
    """A tenant isolated on two to a third of the brokers (a namespace isolation policy: its primaries, which the
    other tenants may not use), both sides equally busy; then a surge in either tenant or a noisy neighbour."""
    count = rng.randint(*size)
    brokers = _brokers(rng, count, kinds=rng.choice([1, 1, 2]))
    tenants = _two_tenants_at_least(rng, _tenants(rng, count), count)
    isolated = rng.choice(tenants)["name"]
    primary = {b["name"] for b in rng.sample(brokers, rng.randint(2, max(2, count // 3)))}
    policy = {"namespaces": [f"^{isolated}$"], "primary": sorted(primary)}
    data = _base(rng, name, brokers, tenants, addresses="distinct", isolation_policies={"isolated": policy})
    usage, others = rng.uniform(35, 55), {t["name"] for t in tenants} - {isolated}
    data = _calibrate(data, usage, primary, {isolated})
    data = _calibrate(data, usage, {b["name"] for b in brokers} - primary, others)
    at = _when(rng)
    if rng.random() < 0.6:
        surged = isolated if rng.random() < 0.5 else rng.choice(sorted(others))
        chosen = {"namespaces": [t for t in data["namespaces"] if t["name"] == surged]}  # _surge draws among these
        event = _surge(rng, {**data, **chosen}, rng.randint(1, 3), TENANT_SURGE, at)
    else:
        event = {
            "at_minute": at,
            "type": "background",
            "broker": rng.choice(brokers)["name"],
            "background_cpu": round(rng.uniform(0.15, 0.4), 2),
        }
    data["events"] = [event]
    data["duration_minutes"] = at + AFTER
    return data


def diurnal(rng: random.Random, name: str, size: Size) -> dict:
    count = rng.randint(*size)
    daily = _daily((0.2, 0.6), 180)
    tenants = _two_tenants_at_least(rng, _tenants(rng, count, daily), count, daily)
    data = _base(rng, name, _brokers(rng, count, kinds=rng.choice([1, 1, 2])), tenants)
    data["duration_minutes"] = rng.randint(90, 120)
    return _calibrate(data, rng.uniform(35, 60))


def noisy_neighbour(rng: random.Random, name: str, size: Size) -> dict:
    count = rng.randint(*size)
    brokers = _brokers(rng, count, kinds=rng.choice([1, 1, 2]))
    at = _when(rng)
    noisy = rng.sample([b["name"] for b in brokers], rng.randint(1, min(2, count - 1)))
    events = [
        {"at_minute": at, "type": "background", "broker": b, "background_cpu": round(rng.uniform(0.15, 0.5), 2)}
        for b in noisy
    ]
    last = at
    if rng.random() < 0.5:  # the other process ends
        last = at + rng.randint(15, 30)
        events += [
            {
                "at_minute": last,
                "type": "background",
                "broker": b,
                "background_cpu": next(x for x in brokers if x["name"] == b)["background_cpu"],
            }
            for b in noisy
        ]
    data = _base(rng, name, brokers, _tenants(rng, count), events=events)
    data["duration_minutes"] = last + AFTER
    return _calibrate(data, rng.uniform(35, 55))


def mixed(rng: random.Random, name: str, size: Size) -> dict:
    """Heterogeneous hardware, some tenants on daily curves, and two disturbances of other families, apart."""
    parts = rng.sample(["scale-out", "scale-in", "tenant-surge", "noisy-neighbour", "hot-topic"], 2)
    count = rng.randint(*size)
    brokers = _brokers(rng, count, kinds=rng.randint(2, 3))
    tenants = _tenants(rng, count, _daily((0.05, 0.25), 240) if rng.random() < 0.5 else None)
    data = _base(rng, name, brokers, tenants, events=[])
    data = _calibrate(data, rng.uniform(40, 60))
    at = _when(rng)
    for part in parts:
        if part == "scale-out":
            kind = {k: v for k, v in rng.choice(brokers).items() if k != "name"}
            data["events"] += [
                {"at_minute": at, "type": "add_broker", "broker": f"new-{i}", "spec": kind}
                for i in range(rng.randint(1, 3))
            ]
        elif part == "scale-in":
            data["events"].append({"at_minute": at, "type": "remove_broker", "broker": rng.choice(brokers)["name"]})
        elif part == "noisy-neighbour":
            data["events"].append(
                {
                    "at_minute": at,
                    "type": "background",
                    "broker": rng.choice(brokers)["name"],
                    "background_cpu": round(rng.uniform(0.15, 0.4), 2),
                }
            )
        else:
            hot = part == "hot-topic"
            data["events"].append(
                _surge(rng, data, 1 if hot else rng.randint(1, 3), HOT_TOPIC if hot else TENANT_SURGE, at)
            )
        at += rng.randint(20, 30)
    data["duration_minutes"] = at - 20 + AFTER
    return data


def noise(rng: random.Random, name: str, size: Size) -> dict:
    count = rng.randint(*size)
    brokers = _brokers(rng, count, kinds=rng.choice([1, 1, 2]))
    for broker in brokers:
        broker["jitter"] = round(rng.uniform(0.02, 0.06), 3)

    def jitter(r: random.Random) -> dict:
        return {"type": "jitter", "amplitude": round(r.uniform(0.1, 0.3), 2)}

    data = _base(rng, name, brokers, _tenants(rng, count, jitter), duration_minutes=60)
    return _calibrate(data, rng.uniform(35, 65))


FAMILIES: dict[str, Callable[[random.Random, str, Size], dict]] = {
    "scale-out": scale_out,
    "scale-in": scale_in,
    "heterogeneous": heterogeneous,
    "rolling-restart": rolling_restart,
    "tenant-surge": tenant_surge,
    "hot-topic": hot_topic,
    "isolation": isolation,
    "diurnal": diurnal,
    "noisy-neighbour": noisy_neighbour,
    "mixed": mixed,
    "noise": noise,
}


# how many brokers each family's clusters start with, unless asked otherwise (``generate``'s ``size``): a few to a
# dozen or so, where each broker's share of a disturbance is large; isolation needs room for two sides, scale-in for
# brokers to lose, mixed for two disturbances
SIZES: dict[str, Size] = {
    "scale-out": (3, 14),
    "scale-in": (4, 16),
    "heterogeneous": (3, 14),
    "rolling-restart": (3, 12),
    "tenant-surge": (3, 16),
    "hot-topic": (3, 12),
    "isolation": (5, 14),
    "diurnal": (3, 14),
    "noisy-neighbour": (3, 12),
    "mixed": (4, 12),
    "noise": (3, 12),
}
FEWEST_BROKERS = 3  # every family's trouble is between brokers: a pair has no spread but its own two


def family_names(names: list[str]) -> list[str]:
    """The families asked for (``all``: every one), in the table's order; an unknown name raises."""
    if not names or "all" in names:
        return list(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise UnknownFamilyError(f"unknown scenario family {unknown[0]!r} (known: all, {', '.join(FAMILIES)})")
    return [n for n in FAMILIES if n in names]


def without_sample_noise(scenario: Scenario) -> Scenario:
    """The scenario with every broker's CPU samples exact (``jitter`` 0), its traffic as it was: what the strategy
    would do if a sample were the broker's true usage, to tell the part of its misses the samples' noise makes."""
    brokers = tuple(dataclasses.replace(spec, jitter=0.0) for spec in scenario.brokers)
    events = tuple(
        e if e.spec is None else dataclasses.replace(e, spec=dataclasses.replace(e.spec, jitter=0.0))
        for e in scenario.events
    )
    return dataclasses.replace(scenario, brokers=brokers, events=events)


def generate(family: str, run: int, size: Size | None = None) -> Scenario:
    """Run ``run`` of ``family``: drawn from a stream of its own (the family's name and the run number), with
    ``size`` brokers at the start (fewest, most; default the family's ``SIZES``): the same draws but the count, so
    a cluster the size of the user's is judged as the families are."""
    rng = random.Random(f"{family}/{run}")
    name = f"{family}#{run}"
    low, high = size or SIZES[family]
    if not FEWEST_BROKERS <= low <= high:
        raise FamilySizeError(
            f"--brokers: a family's clusters start with {FEWEST_BROKERS} brokers or more, the fewest first "
            f"(got {low} to {high})"
        )
    data = FAMILIES[family](rng, name, (low, high))
    data.setdefault("description", f"generated: family {family}, run {run}, {low} to {high} brokers")
    return parse_scenario(data)
