"""TransferShedder on a simulated ELM cluster decides, cycle after cycle, what Pulsar master's rules decide on the same
messages: every cycle's BrokerLoadData and TopBundlesLoadData as the operator's readers held them, the active
brokers and the ownership it read go through a plain re-statement of TransferShedder.java (java_transfer_shedder.py)
beside the operator's own shedder, whose decisions (and skip reasons) must be the same. The re-statement keeps
UnloadScheduler's maps from what the operator actually sent.

Two runs: ``operator demo --load-manager extensible --strategy TransferShedder`` (the demo cluster, brokers sampling
every minute), and a cluster whose brokers sample every 10 s with noisy CPU and bursts of traffic, so their
5-second averages move between what they publish (on a 10 % change, or every 15 minutes)."""

from __future__ import annotations

import io
import json

import pytest

from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.collect import elm
from pulsar_lb_operator.sandbox import demo
from pulsar_lb_operator.strategies import LoadBalancerConfig, Unload
from tests.conformance.java_transfer_shedder import JavaTransferShedder

FREQUENT_SAMPLES = """\
name: elm-frequent-samples
description: ELM brokers sampling every 10 s, publishing on a 10 % change or every 15 minutes.
loadManager: extensible
seed: 11
duration_minutes: 60
report_interval_seconds: 10
brokers:
  - {count: 4, cores: 8, cost_per_msg: 0.01, cost_per_mib: 1.0, background_cpu: 0.05, jitter: 0.04}
namespaces:
  - {name: public/default, bundles: 32, topics: 320, rate: 90, rate_spread: 0.4, msg_size: 1024,
     pattern: {type: jitter, amplitude: 0.2}}
  - {name: acme/bursty, bundles: 16, topics: 160, rate: 90, rate_spread: 0.4, msg_size: 2048,
     pattern: {type: burst, factor: 2.0, period_minutes: 15, duration_minutes: 4, start_minute: 9}}
initial_owners: {broker-0: 30, broker-1: 10, broker-2: 6, broker-3: 2}
config:
  loadBalancerSheddingEnabled: false
  loadBalancerAutoBundleSplitEnabled: false
  loadBalancerBrokerLoadTargetStd: 0.1
  loadBalancerSheddingConditionHitCountThreshold: 1
  loadBalanceSheddingDelayInSeconds: 120
"""


def java_conf(config: LoadBalancerConfig) -> dict:
    excluded = set(config.loadBalancerSheddingExcludedNamespaces)
    return {**config.to_json(), "loadBalancerSheddingExcludedNamespaces": excluded}


def replay(monkeypatch, scenario: str, minutes: float | None = None) -> list[tuple[str, set, set]]:
    """Run the ELM demo of ``scenario`` with TransferShedder, and each cycle's inputs through the re-statement:
    (cycle's time, the operator's decisions, Pulsar's), where a decision is (source, bundle, destination) and an
    empty cycle's is its skip reason."""
    inputs: dict = {}
    cycles: list[tuple[dict, object]] = []
    heard, owned, active = elm.SystemTopicReader.heard, AdminClient.owned_bundles, AdminClient.active_brokers
    monkeypatch.setattr(elm.SystemTopicReader, "heard", lambda self: inputs.setdefault("heard", heard(self)))

    def owned_bundles(self, cluster, broker):
        found = owned(self, cluster, broker)
        inputs.setdefault("owned", {})[broker] = set(found)
        return found

    def active_brokers(self, cluster):
        inputs["active"] = active(self, cluster)
        return inputs["active"]

    monkeypatch.setattr(AdminClient, "owned_bundles", owned_bundles)
    monkeypatch.setattr(AdminClient, "active_brokers", active_brokers)
    run_cycle = demo.run_cycle

    def recorded(*args, **kwargs):
        inputs.clear()
        result = run_cycle(*args, **kwargs)
        cycles.append((dict(inputs), result))
        return result

    monkeypatch.setattr(demo, "run_cycle", recorded)
    config = {}
    load_scenario = demo.load_scenario

    def scenario_config(name):
        loaded = load_scenario(name)
        config["config"] = LoadBalancerConfig().replace(loaded.config)
        return loaded

    monkeypatch.setattr(demo, "load_scenario", scenario_config)
    out = io.StringIO()
    demo.run_demo(scenario, strategy="TransferShedder", minutes=minutes, out=out, load_manager="extensible")
    java = JavaTransferShedder(java_conf(config["config"]))
    compared = []
    for taken, result in cycles:
        now = result.snapshot.taken_at
        java.expire(now)
        stores = {
            topic: {
                b: json.loads(h.payload) for b, h in taken["heard"][topic].items() if h.payload and b in taken["active"]
            }
            for topic in elm.TOPICS
        }
        owners = {bundle: broker for broker, bundles in taken["owned"].items() for bundle in bundles}

        def is_owner(bundle: str, broker: str, owners: dict = owners) -> bool:
            return owners.get(bundle) == broker

        decided, reason = java.find_bundles_for_unloading(
            now, taken["active"], stores[elm.BROKER_LOAD_DATA_TOPIC], stores[elm.TOP_BUNDLES_TOPIC], is_owner
        )
        pulsar = {d for d in decided if is_owner(d[1], d[0])} or {reason}  # the channel refuses a non-owner's unload
        planned = {
            (a.source, a.bundle, a.destination, a.reason.split(":")[0].removeprefix("TransferShedder "))
            for a in result.plan.actions
            if isinstance(a, Unload)
        }
        skip = [n for n in result.plan.notes if n.startswith("TransferShedder: skip (")]
        ours = planned or {skip[0].removeprefix("TransferShedder: skip (").split(":")[0].rstrip(")").split(" ")[0]}
        compared.append((now, ours, pulsar))
        for record in result.records:  # UnloadScheduler records what was unloaded
            if isinstance(record.action, Unload) and record.outcome.value in ("executed", "unknown"):
                java.unloaded(record.action.source, record.action.bundle, now)
    return compared


@pytest.mark.parametrize("scenario", ["demo", "frequent samples"])
def test_transfer_shedder_decides_on_elm_as_pulsar_masters_rules_do_on_the_same_messages(
    scenario, monkeypatch, tmp_path
):
    if scenario == "demo":
        compared = replay(monkeypatch, "demo", minutes=60)
    else:
        path = tmp_path / "elm-frequent-samples.yaml"
        path.write_text(FREQUENT_SAMPLES)
        compared = replay(monkeypatch, str(path))
    assert len(compared) >= 20
    differing = [(now, ours, pulsar) for now, ours, pulsar in compared if ours != pulsar]
    assert differing == []
    acting = [now for now, ours, _ in compared if all(isinstance(d, tuple) for d in ours)]
    reasons = {d for _, ours, _ in compared for d in ours if isinstance(d, str)}
    assert acting and {"HitCount", "CoolDown"} <= reasons, (acting, reasons)
