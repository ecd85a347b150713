"""The simulator on the extensible load manager: no load report, ELM's class name in the runtime config, and
every broker's BrokerLoadData and TopBundlesLoadData published on a real pulsar-lite broker, keyed by broker id."""

from __future__ import annotations

import functools
import io
import json
import logging
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pulsar
import pytest
import requests

from pulsar_lb_operator import cli
from pulsar_lb_operator.sandbox import demo
from pulsar_lb_operator.simulator import elm as sim_elm
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.elm_reporters import Cadence, Reporter
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import ScenarioError, parse_scenario
from pulsar_lb_operator.strategies.shedding.transfer import compare_bundle_stats
from pulsar_lb_operator.strategies.snapshots import BundleStats
from tests.builders import SMALL_SCENARIO as SMALL

ELM = {**SMALL, "loadManager": "extensible"}
BROKER_LOAD_DATA_FIELDS = {
    "cpu",
    "memory",
    "directMemory",
    "bandwidthIn",
    "bandwidthOut",
    "msgThroughputIn",
    "msgThroughputOut",
    "msgRateIn",
    "msgRateOut",
    "bundleCount",
    "topics",
    "maxResourceUsage",
    "weightedMaxEMA",
    "msgThroughputEMA",
    "updatedAt",
    "reportedAt",
}
_quiet = logging.getLogger("tests.elm_client")
_quiet.setLevel("CRITICAL")


def test_the_scenario_key_and_its_values():
    scenario = parse_scenario(ELM)
    assert scenario.load_manager == "extensible"
    assert scenario.config["loadBalancerLoadSheddingStrategy"] == "TransferShedder"  # ELM's own shedder
    assert parse_scenario(SMALL).load_manager == "modular"
    with pytest.raises(ScenarioError, match="loadManager: 'elastic' is not one of modular, extensible"):
        parse_scenario({**SMALL, "loadManager": "elastic"})


def test_elm_brokers_give_no_load_report_and_name_their_load_manager():
    with serve(lambda allocate: SimulatedCluster(parse_scenario(ELM), allocate)) as sim:
        report = requests.get(f"{sim.admin_url}/admin/v2/broker-stats/load-report", timeout=5)
        assert report.status_code == 500 and report.headers["Content-Type"].startswith("text/plain")
        assert "--- An unexpected error occurred in the server ---" in report.text
        assert "java.lang.UnsupportedOperationException" in report.text
        runtime = requests.get(f"{sim.admin_url}/admin/v2/brokers/configuration/runtime", timeout=5).json()
        assert runtime["loadManagerClassName"] == sim_elm.EXTENSIBLE
        assert runtime["loadBalancerReportUpdateMaxIntervalMinutes"] == "15"  # BrokerLoadDataReporter's cadence
        assert runtime["loadBalancerReportUpdateThresholdPercentage"] == "10"
        # everything else is served as before: ownership, unload, lookups
        owned = requests.get(f"{sim.admin_url}/admin/v2/brokers/sim/{sim.cluster.active_ids()[0]}/ownedNamespaces")
        assert owned.status_code == 200 and owned.json()


def test_each_broker_publishes_brokerloaddata_and_its_top_bundles_keyed_by_its_id():
    k = 3
    doc = {**ELM, "config": {**ELM["config"], "loadBalancerMaxNumberOfBundlesInBundleLoadReport": k}}
    with serve(lambda allocate: SimulatedCluster(parse_scenario(doc), allocate)) as sim:
        reporters = sim_elm.ElmBrokers(sim.cluster).start()
        client = pulsar.Client(reporters.service_url, logger=_quiet)
        try:
            readers = {t: client.create_reader(t, pulsar.MessageId.latest) for t in sim_elm.TOPICS}
            reporters.publish(force=True)  # reportAsync(true): every broker writes both now
            got = {t: {key: value for key, value in _read_all(r)} for t, r in readers.items()}
        finally:
            client.close()
            reporters.close()
        cluster = sim.cluster
        assert set(got[sim_elm.BROKER_LOAD_DATA_TOPIC]) == set(cluster.active_ids())
        assert set(got[sim_elm.TOP_BUNDLES_TOPIC]) == set(cluster.active_ids())
        assert reporters.sent == {t: 3 for t in sim_elm.TOPICS} and reporters.failed == 0
        for broker_id, load in got[sim_elm.BROKER_LOAD_DATA_TOPIC].items():
            broker = cluster.brokers[broker_id]
            assert set(load) == BROKER_LOAD_DATA_FIELDS
            assert load["cpu"] == {"usage": broker.host_sample["cpu"][0], "limit": broker.host_sample["cpu"][1]}
            assert load["updatedAt"] == cluster.now_ms and load["bundleCount"] == len(broker.stats_sample)
            assert load["reportedAt"] == 0  # localData's, set once the first write is done
            assert load["weightedMaxEMA"] == pytest.approx(load["cpu"]["usage"] / load["cpu"]["limit"], rel=1e-6)
            top = got[sim_elm.TOP_BUNDLES_TOPIC][broker_id]["topBundlesLoadData"]
            assert len(top) == min(k, len(broker.stats_sample))
            stats = [BundleStats(**item["stats"]) for item in top]
            ordered = sorted(stats, key=functools.cmp_to_key(compare_bundle_stats))
            assert stats == ordered, "TopKBundles stores the top k smallest first"
            rest = [s for b, s in broker.stats_sample.items() if b not in {i["bundleName"] for i in top}]
            assert all(compare_bundle_stats(s, stats[0]) <= 0 for s in rest)


def test_the_cluster_metadata_names_the_binary_protocol_url_as_a_broker_answers_it():
    """ClustersBase.getCluster: ClusterData with Jackson's null fields left out and the builder's TLS defaults;
    brokerServiceUrl is where the system topics are (pulsar-lite), or the brokers' own pulsar:// otherwise."""
    with serve(lambda allocate: SimulatedCluster(parse_scenario(ELM), allocate)) as sim:
        reporters = sim_elm.ElmBrokers(sim.cluster).start()
        try:
            answer = requests.get(f"{sim.admin_url}/admin/v2/clusters/sim", timeout=5)
            other = requests.get(f"{sim.admin_url}/admin/v2/clusters/elsewhere", timeout=5)
        finally:
            reporters.close()
        assert answer.status_code == 200 and answer.json() == {
            "serviceUrl": sim.admin_url,
            "brokerServiceUrl": reporters.service_url,
            "brokerClientTlsEnabled": False,
            "tlsAllowInsecureConnection": False,
            "brokerClientTlsEnabledWithKeyStore": False,
            "brokerClientTlsTrustStoreType": "JKS",
            "brokerClientTlsKeyStoreType": "JKS",
        }
        assert other.status_code == 404 and other.json() == {"reason": "Cluster does not exist"}
    with serve(lambda allocate: SimulatedCluster(parse_scenario(SMALL), allocate)) as sim:
        modular = requests.get(f"{sim.admin_url}/admin/v2/clusters/sim", timeout=5).json()
        first = sim.cluster.by_name("broker-0")
        assert modular["brokerServiceUrl"] == f"pulsar://{first.host}:{first.port + 1}"


def test_operator_simulate_load_manager_extensible_then_operator_rebalance_moves_bundles_where_it_planned(
    tmp_path, monkeypatch, capsys
):
    """As a user runs them: ``operator simulate demo --load-manager extensible`` in one terminal, ``operator
    rebalance --no-dry-run`` in the other with no ELM setting: the binary-protocol URL comes from the cluster's
    metadata, and every bundle sent ends on the destination the plan gave it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PULSAR_ADMIN_URL", raising=False)
    stop, served, out = threading.Event(), {}, io.StringIO()
    thread = threading.Thread(
        target=demo.run_simulator,
        args=("demo", None, 60.0, None, stop, lambda s: served.setdefault("sim", s), out),
        kwargs={"load_manager": "extensible"},
    )
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while "sim" not in served and time.monotonic() < deadline:
            time.sleep(0.05)
        sim = served["sim"]
        settings = ["pauseSeconds=0", "loadBalancerAvgShedderHitCountLowThreshold=1"]  # AvgShedder: act at once
        args = ["rebalance", "--admin-url", sim.admin_url, "--output", "json", "--no-dry-run"]
        code = cli.main([*args, *(arg for s in settings for arg in ("--set", s))])
        printed = capsys.readouterr()
        assert code == 0, printed.err
        doc = json.loads(printed.out.splitlines()[-1])  # the "result" line
        assert doc["loadManager"]["kind"] == "extensible" and doc["shedding"] == "AvgShedder"
        assert doc["skippedBrokers"] == {}
        sent = [o for o in doc["outcomes"] if o["outcome"] == "executed"]
        assert sent and all(o["destination"] for o in sent)
        assert all(sim.cluster.owner_of(o["bundle"]) == o["destination"] for o in sent)  # a transfer: at once
        assert "reading the load of 4 brokers from the extensible load manager's system topics" in printed.err
        assert not [r for r in sim.requests if "load-report" in r.path]
        metadata = f"/admin/v2/clusters/{sim.cluster.scenario.cluster}"
        assert [r for r in sim.requests if r.path == metadata]  # where the URL came from
    finally:
        stop.set()
        thread.join(30)
    assert "Load manager: extensible" in out.getvalue()


# ------------------------------------------------------------------------------------------- unload = transfer


@pytest.fixture
def elm_sim():
    """An ELM cluster's admin API on loopback (no system topics: the unload path needs none)."""
    with serve(lambda allocate: SimulatedCluster(parse_scenario(ELM), allocate)) as served:
        yield served


def _unload(sim, at: str, bundle: str, destination: str | None, follow: bool = False) -> requests.Response:
    namespace, _, bundle_range = bundle.rpartition("/")
    params = {"destinationBroker": destination} if destination is not None else {}
    url = f"{sim.cluster.brokers[at].web_url}/admin/v2/namespaces/{namespace}/{bundle_range}/unload"
    return requests.put(url, params=params, allow_redirects=follow, timeout=5)


def _lookup_owner(sim, topic: str) -> str:
    answer = requests.get(f"{sim.admin_url}/lookup/v2/topic/persistent/{topic}", timeout=5)
    assert answer.status_code == 200, answer.text
    return answer.json()["httpUrl"]


def _owned(sim, broker_id: str) -> set[str]:
    answer = requests.get(f"{sim.admin_url}/admin/v2/brokers/sim/{broker_id}/ownedNamespaces", timeout=5)
    return set(answer.json())


def test_an_unload_with_a_destination_is_a_transfer_done_by_the_owner_when_the_answer_comes(elm_sim):
    """ELM: no hop to the leader, the destination travels with the request to the owner, and the 204 comes once
    the state channel says Owned by the destination: lookups and ownedNamespaces name it at once."""
    cluster = elm_sim.cluster
    source, destination = cluster.by_name("broker-0").id, cluster.by_name("broker-2").id
    bundle = sorted(cluster.owned_by(source))[0]
    topic = next(t.name for t in cluster.topics_in(bundle)).removeprefix("persistent://")
    other = cluster.by_name("broker-1").id  # neither the owner nor (by construction) told anything
    hop = _unload(elm_sim, other, bundle, destination)
    assert hop.status_code == 307
    location = urlsplit(hop.headers["Location"])
    assert f"{location.scheme}://{location.netloc}" == cluster.brokers[source].web_url  # the owner, not the leader
    assert parse_qs(location.query)["destinationBroker"] == [destination]
    moves_before, reconnects_before = len(cluster.moves), cluster.topics_disconnected
    done = _unload(elm_sim, other, bundle, destination, follow=True)
    assert done.status_code == 204, done.text
    assert cluster.owner_of(bundle) == destination and bundle not in cluster.pending_lookups
    assert _lookup_owner(elm_sim, topic) == cluster.brokers[destination].web_url  # no lookup left to make
    assert bundle in _owned(elm_sim, destination) and bundle not in _owned(elm_sim, source)
    assert cluster.moves[moves_before:] == [(cluster.now_s, bundle, source, destination)]
    assert cluster.topics_disconnected > reconnects_before
    assert not cluster.affinity, "ELM keeps no destination map on a leader"


def test_elm_refuses_a_transfer_to_the_owner_itself_with_masters_500(elm_sim):
    cluster = elm_sim.cluster
    owner = cluster.by_name("broker-0").id
    bundle = sorted(cluster.owned_by(owner))[0]
    answer = _unload(elm_sim, owner, bundle, f"http://{owner}")  # the http:// prefix is stripped first
    assert answer.status_code == 500 and answer.headers["Content-Type"].startswith("text/plain")
    assert f"Namespace bundle: {bundle} own by {owner}, cannot be transfer to same broker." in answer.text
    assert "java.lang.IllegalArgumentException" in answer.text
    assert cluster.owner_of(bundle) == owner and not cluster.moves


@pytest.mark.parametrize("destination", ["unknown", "stopped"])
def test_elm_refuses_an_unknown_or_inactive_destination_with_409_before_any_redirect(elm_sim, destination):
    cluster = elm_sim.cluster
    owner = cluster.by_name("broker-0").id
    bundle = sorted(cluster.owned_by(owner))[0]
    target = "10.0.0.9:8080"
    if destination == "stopped":
        target = cluster.by_name("broker-2").id
        cluster.crash("broker-2")
    answer = _unload(elm_sim, cluster.by_name("broker-1").id, bundle, target)
    assert answer.status_code == 409
    assert answer.json() == {"reason": "Not allowed unload namespace bundle to inactive destination broker"}
    assert cluster.owner_of(bundle) == owner


def test_an_elm_unload_without_a_destination_frees_the_bundle_for_the_next_lookup(elm_sim):
    cluster = elm_sim.cluster
    owner = cluster.by_name("broker-0").id
    bundle = sorted(cluster.owned_by(owner))[0]
    assert _unload(elm_sim, owner, bundle, None).status_code == 204
    assert cluster.owner_of(bundle) is None  # Releasing → Free
    topic = next(t.name for t in cluster.topics_in(bundle)).removeprefix("persistent://")
    assert _lookup_owner(elm_sim, topic) in {b.web_url for b in cluster.alive_brokers()}
    assert cluster.owner_of(bundle) is not None


def test_an_elm_unload_of_a_bundle_nobody_owns_is_a_204_that_does_nothing(elm_sim):
    cluster = elm_sim.cluster
    owner = cluster.by_name("broker-0").id
    bundle = sorted(cluster.owned_by(owner))[0]
    assert _unload(elm_sim, owner, bundle, None).status_code == 204
    moves, unloads = list(cluster.moves), cluster.unloads
    answer = _unload(elm_sim, cluster.by_name("broker-1").id, bundle, cluster.by_name("broker-2").id)
    assert answer.status_code == 204 and cluster.owner_of(bundle) is None  # isBundleOwnedByAnyBroker: false
    assert cluster.moves == moves and cluster.unloads == unloads


# ------------------------------------------------------------------------------------------- reporting cadence


def _read_all(reader, timeout_ms: int = 300) -> list[tuple[str, dict | None]]:
    got = []
    while True:
        try:
            message = reader.read_next(timeout_ms)
        except pulsar.Timeout:
            return got
        data = message.data()
        got.append((message.partition_key(), json.loads(data) if data else None))


@pytest.fixture
def publishing():
    """An ELM cluster whose brokers publish on pulsar-lite, with readers on both topics from now."""
    with serve(lambda allocate: SimulatedCluster(parse_scenario(ELM), allocate)) as sim:
        reporters = sim_elm.ElmBrokers(sim.cluster).start()
        client = pulsar.Client(reporters.service_url, logger=_quiet)
        try:
            readers = {t: client.create_reader(t, pulsar.MessageId.latest) for t in sim_elm.TOPICS}
            yield sim.cluster, reporters, readers
        finally:
            client.close()
            reporters.close()


def test_brokerloaddata_is_checked_every_5_s_and_published_on_a_10_percent_change_or_every_15_minutes(publishing):
    """BrokerLoadDataReporter (master): a check every loadBalancerReportUpdateMinIntervalMillis (5 s); a steady broker
    writes its BrokerLoadData once at start and then every loadBalancerReportUpdateMaxIntervalMinutes (15); a change
    above loadBalancerReportUpdateThresholdPercentage (10) is written at the next check. TopBundleLoadDataReporter
    writes after every stats update (a sample, every report_interval_seconds)."""
    cluster, reporters, readers = publishing
    reporters.publish(force=True)  # the brokers start: reportedAt is 0, so each writes at once
    start = {t: _read_all(r) for t, r in readers.items()}
    assert sorted(k for k, _ in start[sim_elm.BROKER_LOAD_DATA_TOPIC]) == cluster.active_ids()
    samples = {b.id: b.sample_version for b in cluster.alive_brokers()}
    for _ in range(10):  # ten minutes of a steady cluster: 120 checks a broker, top bundles at each sample
        cluster.advance(cluster.scenario.report_interval_s)
    steady = {t: _read_all(r) for t, r in readers.items()}
    assert steady[sim_elm.BROKER_LOAD_DATA_TOPIC] == [] and reporters.unchanged == 3 * 120
    taken = sum(b.sample_version - samples[b.id] for b in cluster.alive_brokers())
    assert len(steady[sim_elm.TOP_BUNDLES_TOPIC]) == taken >= 3 * 10
    steady_broker = cluster.by_name("broker-1").id
    for _ in range(6):  # past 15 minutes since the start: each writes again, once
        cluster.advance(cluster.scenario.report_interval_s)
    late = _read_all(readers[sim_elm.BROKER_LOAD_DATA_TOPIC])
    assert sorted(k for k, _ in late) == cluster.active_ids()
    first = next(doc for key, doc in start[sim_elm.BROKER_LOAD_DATA_TOPIC] if key == steady_broker)
    again = next(doc for key, doc in late if key == steady_broker)
    assert 15 * 60_000 < again["updatedAt"] - first["updatedAt"] <= 15 * 60_000 + 5_000  # at the first check after
    assert again["reportedAt"] == first["updatedAt"]  # when it last wrote


def test_an_ownership_change_writes_tombstones_then_a_brokerloaddata_whose_averages_start_over(publishing):
    """BrokerLoadDataReporter and TopBundleLoadDataReporter.handleEvent: Releasing from a broker, or Owned by it, makes
    both write a tombstone (an empty value for its key, at most one per 10 s) and clears its BrokerLoadData
    (localData.clear()): the next check publishes it with EMAs from the current sample alone. Its top bundles come
    back with the next stats update."""
    cluster, reporters, readers = publishing
    reporters.publish(force=True)
    for _ in range(3):
        cluster.advance(cluster.scenario.report_interval_s)
    for reader in readers.values():
        _read_all(reader)
    busy, idle, steady = (cluster.by_name(n).id for n in ("broker-0", "broker-2", "broker-1"))
    first, second = sorted(cluster.owned_by(busy))[:2]
    sim_elm.transfer(cluster, first, busy, idle)
    cluster.advance(5)  # the next check
    loads = _read_all(readers[sim_elm.BROKER_LOAD_DATA_TOPIC])
    tops = _read_all(readers[sim_elm.TOP_BUNDLES_TOPIC])
    assert sorted(k for k, v in tops if v is None) == sorted([busy, idle]) and all(v is None for _, v in tops)
    for broker_id in (busy, idle):
        mine = [doc for key, doc in loads if key == broker_id]
        assert mine[0] is None and mine[1] is not None, mine  # the tombstone, then the data
        broker = cluster.brokers[broker_id]
        usage, limit = broker.host_sample["cpu"]
        assert mine[1]["weightedMaxEMA"] == pytest.approx(usage / limit, rel=1e-6)  # from this sample only
        assert mine[1]["reportedAt"] == 0
    assert steady not in {k for k, _ in loads}
    sim_elm.transfer(cluster, second, busy, idle)  # 5 s later: cleared again, but no second tombstone yet
    cluster.advance(5)
    again = _read_all(readers[sim_elm.BROKER_LOAD_DATA_TOPIC])
    assert all(doc is not None for _, doc in again) and sorted(k for k, _ in again) == sorted([busy, idle])
    cluster.advance(cluster.scenario.report_interval_s)
    assert {k for k, v in _read_all(readers[sim_elm.TOP_BUNDLES_TOPIC]) if v} >= {busy, idle}


def test_the_averages_move_at_every_5_s_check_and_bundles_without_traffic_are_not_top_bundles():
    """BrokerLoadData.update at each check: weightedMaxEMA and msgThroughputEMA move by
    loadBalancerHistoryResourcePercentage (0.9) every 5 s, whatever is published; TopKBundles leaves out bundles
    without traffic."""
    doc = {**ELM, "namespaces": [*ELM["namespaces"], {"name": "t/idle", "bundles": 4, "topics": 8, "rate": 0}]}
    cluster = SimulatedCluster(parse_scenario(doc))
    broker = cluster.by_name("broker-0")
    reporter = Reporter(broker.started_at_s, cluster.ownership.version_of(broker.id))
    out, due = reporter.check(cluster, broker, Cadence(), cluster.now_ms)
    first = json.loads(out[0].payload)
    usage, limit = broker.host_sample["cpu"]
    assert due and first["weightedMaxEMA"] == pytest.approx(usage / limit)
    top = json.loads(out[-1].payload)["topBundlesLoadData"]
    assert top and not [i for i in top if i["bundleName"].startswith("t/idle/")]
    assert [b for b in broker.stats_sample if b.startswith("t/idle/")]  # it owns idle bundles
    broker.host_sample["cpu"] = (usage + 0.2 * limit, limit)  # 20 points more CPU from the next sample on
    dues = [reporter.check(cluster, broker, Cadence(), cluster.now_ms + 5_000 * i)[1] for i in range(1, 5)]
    assert dues == [True, False, False, False]  # 20 points > 10: written at once, then within the threshold
    out, _ = reporter.check(cluster, broker, Cadence(), cluster.now_ms + 25_000, force=True)
    published = json.loads(next(m.payload for m in out if m.topic == sim_elm.BROKER_LOAD_DATA_TOPIC))
    now = usage / limit + 0.2
    assert published["weightedMaxEMA"] == pytest.approx(now + (first["weightedMaxEMA"] - now) * 0.9**5)
    assert published["updatedAt"] == cluster.now_ms + 25_000


def test_an_elm_split_keeps_both_halves_on_the_owner_even_when_asked_to_unload_them():
    """NamespaceService.splitAndOwnBundle hands the split to ExtensibleLoadManagerImpl.splitNamespaceBundleAsync,
    which has no unload flag: both halves stay Owned by the source. The modular manager unloads them."""
    for doc, stays in ((ELM, True), (SMALL, False)):
        with serve(lambda allocate, d=doc: SimulatedCluster(parse_scenario(d), allocate)) as sim:
            cluster = sim.cluster
            owner = cluster.by_name("broker-0").id
            bundle = sorted(cluster.owned_by(owner))[0]
            namespace, bundle_range = bundle.rsplit("/", 1)
            url = f"{sim.admin_url}/admin/v2/namespaces/{namespace}/{bundle_range}/split?unload=true"
            assert requests.put(url, timeout=5, allow_redirects=True).status_code == 204
            low, high = (f"{namespace}/{r}" for r in _halves(bundle_range))
            owners = {cluster.owner_of(low), cluster.owner_of(high)}
            assert owners == ({owner} if stays else {None}), (doc is ELM, owners)


def _halves(bundle_range: str) -> tuple[str, str]:
    lower, upper = (int(x, 16) for x in bundle_range.split("_"))
    middle = lower + (upper - lower) // 2
    return f"0x{lower:08x}_0x{middle:08x}", f"0x{middle:08x}_0x{upper:08x}"
