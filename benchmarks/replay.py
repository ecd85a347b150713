"""Backtest: the traffic of a recorded history (operator/store/history.py), replayed through the simulator.

The first recorded sample fixes the brokers, the bundles and who owns them; each bundle becomes as
many topics as it had, spread over its hash range, and its recorded msg rate over time drives them.
Each broker's CPU physics comes from its fitted cost model (the intercept is its background usage),
so a strategy meets the cluster it would have met. Bundles that first appear later (splits during
the recording) are not replayed: their traffic is counted in the bundle they were split from.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass

from pulsar_lb_operator.simulator.cluster import MIB, SimulatedCluster, Topic
from pulsar_lb_operator.simulator.scenario import BrokerSpec, NamespaceSpec, Scenario
from pulsar_lb_operator.store.history import HistoryStore
from pulsar_lb_operator.strategies import CostLearner, UserError
from pulsar_lb_operator.strategies import bundles as bundle_names

MIN_FIT_R2 = 0.5  # below this the CPU model falls back to a proportional one


class ReplayError(UserError, ValueError):
    """A history that cannot be replayed; the message says why."""


@dataclass(frozen=True)
class RecordedPattern:
    """A bundle's recorded msg rate as a multiple of its first sample, held until the next sample."""

    times_s: tuple[float, ...]
    factors: tuple[float, ...]

    def multiplier(self, t_s: float, _rng: random.Random) -> float:
        return self.factors[max(bisect.bisect_right(self.times_s, t_s) - 1, 0)]


@dataclass(frozen=True)
class Recording:
    name: str
    brokers: tuple[BrokerSpec, ...]
    duration_s: float
    first: dict[str, dict]  # bundle → its first sample row
    series: dict[str, RecordedPattern]


def _cpu_percent(row: dict) -> float:
    return row["cpu_usage"] / max(row["cpu_limit"], 1e-9) * 100


def _broker_spec(name: str, rows: list[dict]) -> BrokerSpec:
    last = rows[-1]
    cores = max(last["cpu_limit"], 1.0) / 100
    learner = CostLearner()
    for r in rows:
        traffic = (r["msg_rate_in"] + r["msg_rate_out"], r["msg_throughput_in"], r["msg_throughput_out"])
        learner.add(name, traffic, {"cpu": _cpu_percent(r)})
    model = learner.models()[(name, "cpu")]
    if model.r2 >= MIN_FIT_R2 and model.samples >= 10:
        background = min(max(model.intercept / 100, 0.0), 0.95)
        per_msg = max(model.per_msg_rate, 0.0) * cores
        per_mib = max((model.per_byte_in + model.per_byte_out) / 2, 0.0) * MIB * cores
    else:  # no usable fit: 5% background and the rest proportional to msg rate
        background = 0.05
        rate = sum(r["msg_rate_in"] + r["msg_rate_out"] for r in rows) / len(rows)
        usage = sum(_cpu_percent(r) for r in rows) / len(rows)
        per_msg = max(usage - 5, 0.0) / rate * cores if rate > 0 else 0.0
        per_mib = 0.0
    return BrokerSpec(
        name=name,
        cores=cores,
        nic_gbps=max(last["bandwidthIn_limit"], 1.0) / 1e6,
        heap_mib=max(last["memory_limit"], 1.0),
        direct_mib=max(last["directMemory_limit"], 1.0),
        cost_per_msg=per_msg,
        cost_per_mib=per_mib,
        background_cpu=background,
        jitter=0.0,
    )


def read_recording(uri: str) -> Recording:
    store = HistoryStore(uri)
    brokers = store.read("broker_samples").to_pylist()
    bundles = store.read("bundle_samples").to_pylist()
    if not brokers or not bundles:
        raise ReplayError(f"the history at {uri} holds no samples to replay")
    brokers.sort(key=lambda r: r["time"])
    bundles.sort(key=lambda r: r["time"])
    start, end = bundles[0]["time"], max(bundles[-1]["time"], brokers[-1]["time"])
    per_broker: dict[str, list[dict]] = {}
    for row in brokers:
        per_broker.setdefault(row["broker"], []).append(row)
    first: dict[str, dict] = {}
    points: dict[str, list[tuple[float, float]]] = {}
    for row in bundles:
        if row["time"] == start:
            first[row["bundle"]] = row
        if row["bundle"] in first:
            base = first[row["bundle"]]["msg_rate_in"]
            factor = row["msg_rate_in"] / base if base > 0 else 0.0
            points.setdefault(row["bundle"], []).append(((row["time"] - start) / 1000, factor))
    series = {b: RecordedPattern(tuple(t for t, _ in p), tuple(f for _, f in p)) for b, p in points.items()}
    specs = tuple(_broker_spec(name, rows) for name, rows in sorted(per_broker.items()))
    return Recording(f"backtest:{uri}", specs, max((end - start) / 1000, 60.0), first, series)


def scenario_of(recording: Recording) -> Scenario:
    namespaces = sorted({bundle_names.namespace_of(b) for b in recording.first})
    owners = {r["owner"] for r in recording.first.values()}
    return Scenario(
        name=recording.name,
        description=f"Recorded traffic of {len(recording.first)} bundles on {len(recording.brokers)} brokers, "
        f"{recording.duration_s / 60:.0f} minutes.",
        seed=1,
        cluster="backtest",
        duration_s=recording.duration_s,
        report_interval_s=60.0,
        shedding_interval_s=60.0,
        placement="LeastLongTermMessageRate",
        brokers=recording.brokers,
        namespaces=tuple(NamespaceSpec(name=ns, bundles=1, topics=0) for ns in namespaces),
        initial_owners={b.name: 1.0 for b in recording.brokers if b.name in owners},
        events=(),
        config={"loadBalancerSheddingEnabled": False, "loadBalancerAutoBundleSplitEnabled": False},
    )


@dataclass(frozen=True)
class ClusterFactory:
    """Picklable: builds the replaying cluster inside a worker process."""

    recording: Recording

    def __call__(self, scenario: Scenario) -> SimulatedCluster:
        cluster = SimulatedCluster(scenario)
        ids = {b.name: b.id for b in cluster.brokers.values()}
        bounds: dict[str, set[int]] = {}
        topics: dict[str, list[Topic]] = {}
        ownership: dict[str, str] = {}
        patterns = []
        for index, (bundle, row) in enumerate(sorted(self.recording.first.items())):
            namespace, bundle_range = bundle_names.split_bundle_name(bundle)
            bounds.setdefault(namespace, set()).update((bundle_range.lower, bundle_range.upper))
            if row["owner"] in ids:
                ownership[bundle] = ids[row["owner"]]
            patterns.append(self.recording.series[bundle])
            n = max(int(row["topics"]), 1)
            rate = row["msg_rate_in"]
            width = (bundle_range.upper - bundle_range.lower) / n
            for k in range(n):
                topics.setdefault(namespace, []).append(
                    Topic(
                        f"persistent://{namespace}/replay-{index}-{k}",
                        namespace,
                        int(bundle_range.lower + (k + 0.5) * width),
                        rate / n,
                        max(int(row["msg_throughput_in"] / rate), 1) if rate > 0 else 1024,
                        row["msg_rate_out"] / rate if rate > 0 else 1.0,
                        math.ceil(row["producers"] / n),
                        math.ceil(row["consumers"] / n),
                        len(patterns) - 1,
                    )
                )
        namespaces = {ns: sorted(b) for ns, b in bounds.items()}
        cluster.replace_traffic(namespaces, topics, ownership, patterns)
        return cluster
