"""``operator demo`` and ``operator simulate``: a simulated Pulsar cluster on loopback.

The demo serves an unbalanced cluster, and each shedding interval reads every broker's load report
over HTTP, plans a cycle and sends the unloads (with their destination) and splits to the admin API,
printing broker usage as it converges. Simulated time runs in steps, so a run of many minutes takes
seconds and is the same on every machine.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO
from urllib.parse import quote

import requests

from simulator.cluster import SimulatedCluster
from simulator.http import SimulatedPulsar, serve
from simulator.metrics import RunMetrics
from simulator.scenario import load_scenario
from strategies import LoadBalancerConfig, Split, StrategyState, Unload, parse_snapshot, plan_cycle
from strategies.plans import Plan
from strategies.snapshots import SNAPSHOT_FORMAT

TIMEOUT = (5, 70)  # connect, read: an unload may take up to namespaceBundleUnloadingTimeoutMs (60 s)
CONVERGED_SPREAD = 10.0  # points of usage between the busiest and the idlest broker
CONVERGED_CYCLES = 3


def collect(admin_url: str, cluster: str, session: requests.Session) -> dict:
    """A pulsar-lb-snapshot/1 document read from the admin API, one load report per broker."""
    brokers = session.get(f"{admin_url}/admin/v2/brokers/{cluster}", timeout=TIMEOUT).json()
    reports = {b: session.get(f"http://{b}/admin/v2/broker-stats/load-report", timeout=TIMEOUT).json() for b in brokers}
    taken_at = max((r["lastUpdate"] for r in reports.values()), default=0)
    return {"format": SNAPSHOT_FORMAT, "cluster": cluster, "takenAt": taken_at, "brokers": reports}


def apply(admin_url: str, plan: Plan, session: requests.Session) -> list[str]:
    """Send each action to the admin API; returns one line per action with its HTTP status."""
    lines = []
    for action in plan.actions:
        namespace, _, bundle_range = action.bundle.rpartition("/")
        base = f"{admin_url}/admin/v2/namespaces/{namespace}/{bundle_range}"
        if isinstance(action, Unload):
            url = f"{base}/unload" + (f"?destinationBroker={quote(action.destination)}" if action.destination else "")
            status = session.put(url, timeout=TIMEOUT).status_code
        elif isinstance(action, Split):
            query = f"?unload={str(action.unload).lower()}&splitAlgorithmName={action.algorithm}"
            status = session.put(
                f"{base}/split{query}", json=list(action.boundaries) or None, timeout=TIMEOUT
            ).status_code
        lines.append((action, status))
    return lines


def _row(values: list[str], widths: list[int]) -> str:
    return "  ".join(v.rjust(w) for v, w in zip(values, widths))


def run_demo(
    scenario_name: str = "demo",
    strategy: str | None = None,
    placement: str | None = None,
    minutes: float | None = None,
    out: TextIO = sys.stdout,
    seed: int = 0,
) -> int:
    scenario = load_scenario(scenario_name)
    config = LoadBalancerConfig().replace(scenario.config)
    sim = serve(lambda allocate: SimulatedCluster(scenario, allocate))
    cluster = sim.cluster
    metrics = RunMetrics()
    state = StrategyState()
    rng = random.Random(seed)
    session = requests.Session()
    names = {b.id: b.name for b in cluster.brokers.values()}
    interval_s = config.loadBalancerSheddingIntervalMinutes * 60
    total_s = (minutes or scenario.duration_s / 60) * 60
    shown = sorted(names.values())
    widths = [6, 6] + [max(len(n), 6) for n in shown] + [6, 7]
    try:
        print(
            f"Simulated Pulsar cluster {scenario.cluster!r} on {sim.admin_url} ({len(names)} brokers): "
            f"{scenario.description}",
            file=out,
        )
        print(
            f"Operator: shedding {strategy or config.loadBalancerLoadSheddingStrategy}, one cycle every "
            f"{interval_s / 60:g} simulated minute(s); usage = weighted max resource usage, true value.\n",
            file=out,
        )
        print(_row(["cycle", "time", *shown, "spread", "actions"], widths), file=out)
        calm = 0
        cycle = 0
        while cluster.now_s < total_s:
            cycle += 1
            snapshot = parse_snapshot(collect(sim.admin_url, scenario.cluster, session))
            plan, state = plan_cycle(snapshot, config, state, rng, shedding=strategy, placement=placement)
            results = apply(sim.admin_url, plan, session)
            cluster.advance(interval_s)
            sample = metrics.record(cluster)
            for name in sample.usage:
                if name not in shown:
                    shown.append(name)
                    widths.insert(-2, max(len(name), 6))
            usage = [f"{sample.usage[n]:.0f}%" if n in sample.usage else "down" for n in shown]
            clock = f"{int(cluster.now_s // 60):02d}:{int(cluster.now_s % 60):02d}"
            print(_row([str(cycle), clock, *usage, f"{sample.spread:.0f}", str(len(results))], widths), file=out)
            for action, status in results:
                if isinstance(action, Unload):
                    print(
                        f"        unload {action.bundle}  {names.get(action.source, action.source)} → "
                        f"{names.get(action.destination, action.destination)}  (HTTP {status})",
                        file=out,
                    )
                else:
                    print(f"        split  {action.bundle} by {action.algorithm}  (HTTP {status})", file=out)
            calm = calm + 1 if sample.spread < CONVERGED_SPREAD else 0
            if calm >= CONVERGED_CYCLES and minutes is None:
                break
        summary = metrics.summary(cluster)
        first = metrics.samples[0]
        print(
            f"\nSpread {first.spread:.0f} → {summary['final_spread']:.0f} points after {cycle} cycles; "
            f"{summary['unloads']} unloads, {summary['topics_disconnected']} topic reconnects, "
            f"{summary['flapping_bundles']} bundles moved twice within 30 min.",
            file=out,
        )
        return 0
    finally:
        session.close()
        sim.stop()


def run_simulator(
    scenario_name: str,
    port: int | None,
    speed: float,
    token: str | None,
    stop: threading.Event | None = None,
    ready: Callable[[SimulatedPulsar], None] | None = None,
    out: TextIO = sys.stdout,
) -> int:
    """Serve a scenario until stopped, advancing simulated time ``speed`` × real time."""
    scenario = load_scenario(scenario_name)
    sim = serve(lambda allocate: SimulatedCluster(scenario, allocate), first_port=port, token=token)
    stop = stop or threading.Event()
    try:
        print(f"Simulated Pulsar cluster {scenario.cluster!r} ({scenario.name}): admin URL {sim.admin_url}", file=out)
        for broker in sim.cluster.brokers.values():
            print(f"  {broker.name}: {broker.web_url}", file=out)
        print(f"Simulated time runs at {speed:g}× real time. Ctrl-C stops.", file=out, flush=True)
        if ready is not None:
            ready(sim)
        last = time.monotonic()
        while not stop.wait(0.1):
            now = time.monotonic()
            sim.cluster.advance((now - last) * speed)
            last = now
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        sim.stop()
