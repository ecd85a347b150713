"""The simulator's load report against Pulsar master's LocalBrokerData and ModularLoadManagerImpl, over HTTP.

``lastUpdate`` changes only when the broker rewrites its data to the metadata store
(ModularLoadManagerImpl.writeBrokerDataOnZooKeeper when needBrokerDataUpdate: more than
loadBalancerReportUpdateThresholdPercentage change, or loadBalancerReportUpdateMaxIntervalMinutes elapsed);
the REST report (ModularLoadManagerWrapper.generateLoadReport = updateLocalBrokerData) shows the latest
sample with the last write's lastUpdate. §7 row 6 of shared/reference/pulsar-admin-api.md.
"""

import struct
from types import SimpleNamespace

import pytest
import requests

from pulsar_lb_operator.simulator import report_writes
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import parse_scenario
from pulsar_lb_operator.strategies import StrategyState
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.shedding import transfer
from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot, parse_broker_load

T = (2, 10)
STEADY = {
    "cluster": "sim",
    "report_interval_seconds": 60,
    "brokers": [{"count": 2, "cores": 4, "cost_per_msg": 0.01, "cost_per_mib": 1.0, "jitter": 0.0}],
    "namespaces": [{"name": "t/ns", "bundles": 8, "topics": 64, "rate": 150}],
    "config": {"loadBalancerSheddingEnabled": False, "loadBalancerAutoBundleSplitEnabled": False},
}
# Jackson's field set for LocalBrokerData (getters included, nulls left out) of a broker without TLS
LOCAL_BROKER_DATA_FIELDS = {
    "webServiceUrl",
    "pulsarServiceUrl",
    "persistentTopicsEnabled",
    "nonPersistentTopicsEnabled",
    "cpu",
    "memory",
    "directMemory",
    "bandwidthIn",
    "bandwidthOut",
    "msgThroughputIn",
    "msgThroughputOut",
    "msgRateIn",
    "msgRateOut",
    "lastUpdate",
    "lastStats",
    "numTopics",
    "numBundles",
    "numConsumers",
    "numProducers",
    "bundles",
    "lastBundleGains",
    "lastBundleLosses",
    "brokerVersionString",
    "loadReportType",  # getLoadReportType()
    "protocols",
    "advertisedListeners",
    "bundleStats",  # getBundleStats() = lastStats
    "maxResourceUsage",  # getMaxResourceUsage()
    "loadManagerClassName",
    "startTimestamp",
}


@pytest.fixture
def steady():
    with serve(lambda allocate: SimulatedCluster(parse_scenario(STEADY), allocate)) as served:
        served.cluster.advance(1)  # past the brokers' first samples (some are due at time 0)
        yield served


def report(sim, name="broker-0"):
    return requests.get(f"{sim.url_of(name)}/admin/v2/broker-stats/load-report", timeout=T).json()


def test_last_update_stays_while_load_is_steady_and_moves_after_the_max_interval(steady):
    """needBrokerDataUpdate: steady traffic (no jitter) changes less than 10 %: no write, the same lastUpdate,
    though the report's figures are the latest sample's; after 15 minutes the write happens anyway."""
    cluster = steady.cluster
    first = report(steady)
    for _ in range(5):
        cluster.advance(60)
        assert report(steady)["lastUpdate"] == first["lastUpdate"]
    cluster.advance(11 * 60)  # 16 minutes since the first write
    later = report(steady)
    assert later["lastUpdate"] > first["lastUpdate"]
    assert later["lastUpdate"] - first["lastUpdate"] > 15 * 60_000


def test_a_load_change_over_the_threshold_rewrites_the_report(steady):
    """maxChange > loadBalancerReportUpdateThresholdPercentage: msg rate doubled → written at the next sample."""
    cluster = steady.cluster
    broker = cluster.by_name("broker-0")
    first = report(steady)
    cluster.traffic_factor["*"] = 2.0
    cluster.advance(60)
    second = report(steady)
    assert second["lastUpdate"] > first["lastUpdate"]
    assert second["msgRateIn"] == pytest.approx(2 * first["msgRateIn"], rel=0.01)
    assert broker.written_report["msgRateIn"] == second["msgRateIn"]  # what the leader reads now


def test_lost_bundles_accumulate_until_the_next_write():
    """LocalBrokerData.updateBundleData adds to lastBundleLosses; writeBrokerDataOnZooKeeper clears it
    (cleanDeltas) — a small change is not written, so the loss stays in the report until a write."""
    scenario = {**STEADY, "namespaces": [{"name": "t/ns", "bundles": 32, "topics": 256, "rate": 150}]}
    with serve(lambda allocate: SimulatedCluster(parse_scenario(scenario), allocate)) as sim:
        cluster = sim.cluster
        cluster.advance(1)
        broker = cluster.by_name("broker-0")
        first = report(sim)
        bundle = cluster.owned_by(broker.id)[0]
        other = next(b.id for b in cluster.alive_brokers() if b.id != broker.id)
        # 1 of 16 bundles and its traffic: under 10 %, no write. With a destination, so the leader's placement
        # (whose ties follow the brokers' ports, free ports here) cannot hand it straight back to broker-0
        cluster.unload(bundle, other)
        cluster.advance(broker.next_sample_s - cluster.now_s + 0.1)
        after = report(sim)
        assert after["lastUpdate"] == first["lastUpdate"]
        assert after["lastBundleLosses"] == [bundle] and bundle not in after["bundles"]
        assert after["numBundles"] == first["numBundles"] - 1
        cluster.advance(16 * 60)  # the max interval: written, the deltas cleared
        written = report(sim)
        assert written["lastUpdate"] > first["lastUpdate"] and written["lastBundleLosses"] == []


def test_the_leader_reads_the_written_report_not_the_fresher_one(steady):
    """The leader's view (updateAllBrokerData) is what was written to the metadata store."""
    cluster = steady.cluster
    broker = cluster.by_name("broker-0")
    cluster.traffic_factor["*"] = 1.05  # a 5 % change: sampled, not written
    cluster.advance(broker.next_sample_s - cluster.now_s + 0.1)
    fresh = report(steady)
    seen = cluster.leader_view().brokers[broker.id]
    assert seen.lastUpdate == fresh["lastUpdate"]
    assert broker.written_report is not None and broker.written_report["cpu"] != fresh["cpu"]
    assert seen.cpu.usage == broker.written_report["cpu"]["usage"]


def test_field_set_is_jacksons_and_nulls_are_left_out(steady):
    """LocalBrokerData's getters as ObjectMapperFactory writes them (NON_NULL): no webServiceUrlTls or
    pulsarServiceUrlTls without TLS; advertisedListeners {} (validateAndAnalysisAdvertisedListener: none set);
    bundles are exactly lastStats' keys plus the heartbeat bundles."""
    doc = report(steady)
    assert set(doc) == LOCAL_BROKER_DATA_FIELDS
    assert doc["advertisedListeners"] == {} and doc["protocols"] == {}
    assert doc["bundleStats"] == doc["lastStats"]
    heartbeat = {b for b in doc["bundles"] if b.startswith("pulsar/")}
    assert set(doc["bundles"]) - heartbeat == set(doc["lastStats"])
    assert doc["numBundles"] == len(doc["lastStats"])
    assert set(next(iter(doc["lastStats"].values()))) == {
        "msgRateIn",
        "msgThroughputIn",
        "msgRateOut",
        "msgThroughputOut",
        "consumerCount",
        "producerCount",
        "topics",
        "cacheSize",
    }


def test_max_resource_usage_counts_memory_in_java_float(steady):
    """LocalBrokerData.getMaxResourceUsage: max of the five ResourceUsage.percentUsage (floats; memory — JVM
    heap — included) / 100 in float. The extensible manager's BrokerLoadData leaves memory out
    (BrokerLoadData.updateMaxResourceUsage; simulator/elm.py)."""
    doc = report(steady)

    def f32(x):
        return struct.unpack("f", struct.pack("f", x))[0]

    percents = []
    for key in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut"):
        usage, limit = doc[key]["usage"], doc[key]["limit"]
        percents.append(f32(f32(f32(usage) / f32(limit)) * 100) if limit > 0 else 0.0)
    assert doc["maxResourceUsage"] == f32(max(percents) / 100)
    # memory counts: a broker whose heap is its busiest resource reports the heap's share
    host = {"cpu": (10.0, 400.0), "memory": (900.0, 1000.0), "directMemory": (1.0, 100.0)}
    host |= {"bandwidthIn": (0.0, 1e7), "bandwidthOut": (0.0, 1e7)}
    assert report_writes.max_resource_usage(host) == pytest.approx(0.9, abs=1e-6)


def test_runtime_config_says_the_cadence(steady):
    runtime = requests.get(f"{steady.admin_url}/admin/v2/brokers/configuration/runtime", timeout=T).json()
    assert runtime["loadBalancerReportUpdateThresholdPercentage"] == "10"
    assert runtime["loadBalancerReportUpdateMaxIntervalMinutes"] == "15"
    assert runtime["failureDomainsEnabled"] == "false"


def test_transfer_shedder_samples_once_per_written_report(steady):
    """TransferShedder's EMAs take a new sample per new lastUpdate: on the real cadence a steady broker adds no
    sample between writes, and a written report adds exactly one."""
    cluster = steady.cluster
    config = LoadBalancerConfig(loadBalancerLoadSheddingStrategy="TransferShedder")

    def load():
        loads = {b: parse_broker_load(b, report(steady, cluster.brokers[b].name)) for b in cluster.active_ids()}
        return SimpleNamespace(snapshot=ClusterSnapshot("sim", cluster.now_ms, loads))

    emas = transfer.update_emas(load(), config, StrategyState())
    cluster.advance(120)  # steady: two samples, no write
    assert transfer.update_emas(load(), config, StrategyState(transfer_ema=emas)) == emas
    cluster.traffic_factor["*"] = 2.0
    cluster.advance(60)  # every broker writes once
    moved = transfer.update_emas(load(), config, StrategyState(transfer_ema=emas))
    history = config.loadBalancerHistoryResourcePercentage
    for broker, ema in moved.items():
        assert ema.updated_at > emas[broker].updated_at
        data = parse_broker_load(broker, report(steady, cluster.brokers[broker].name))
        weighted = data.max_resource_usage_with_weight(config.weights)
        expected = emas[broker].weighted_max_ema * history + (1 - history) * weighted
        assert ema.weighted_max_ema == pytest.approx(expected)  # one sample, not one per REST read
