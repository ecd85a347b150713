"""The simulator's admin API over real loopback HTTP: every behaviour of the reference's §7."""

import requests

from pulsar_lb_operator.simulator.cluster import UNLOAD_WINDOW_S
from pulsar_lb_operator.simulator.faults import FaultRule

T = (2, 10)


def owned(sim, name):
    return sim.cluster.owned_by(sim.cluster.by_name(name).id)


def split_path(bundle):
    namespace, _, bundle_range = bundle.rpartition("/")
    return f"/admin/v2/namespaces/{namespace}/{bundle_range}"


def test_every_broker_listens_on_its_own_loopback_port_and_answers_for_itself(sim):
    ids = requests.get(f"{sim.admin_url}/admin/v2/brokers/sim", timeout=T).json()
    assert ids == sorted(sim.cluster.active_ids()) and all(i.startswith("127.0.0.1:") for i in ids)
    assert requests.get(f"{sim.admin_url}/admin/v2/clusters", timeout=T).json() == ["sim"]
    reports = {b: requests.get(f"http://{b}/admin/v2/broker-stats/load-report", timeout=T).json() for b in ids}
    for broker_id, report in reports.items():  # §7.1 and §7.6: LocalBrokerData of the broker addressed
        assert report["webServiceUrl"] == f"http://{broker_id}"
        assert report["loadReportType"] == "LocalBrokerData"
        mine = set(sim.cluster.owned_by(broker_id))
        assert set(report["lastStats"]) == mine
        assert report["msgRateIn"] == sum(s["msgRateIn"] for s in report["lastStats"].values())
        assert f"pulsar/{broker_id}/0x00000000_0xffffffff" in report["bundles"]  # heartbeat bundle
    assert requests.get(f"{sim.admin_url}/admin/v2/brokers/health", timeout=T).text == "ok"
    assert requests.get(f"{sim.admin_url}/status.html", timeout=T).status_code == 200


def test_leader_and_owned_namespaces_redirect(sim):
    leader = requests.get(f"{sim.admin_url}/admin/v2/brokers/leaderBroker", timeout=T).json()
    assert leader == {"serviceUrl": sim.admin_url, "brokerId": sim.admin_url.removeprefix("http://")}
    other = sim.cluster.by_name("broker-1").id
    url = f"{sim.admin_url}/admin/v2/brokers/sim/{other}/ownedNamespaces"
    hop = requests.get(url, allow_redirects=False, timeout=T)
    assert hop.status_code == 307 and hop.headers["Location"].startswith(f"http://{other}/")
    bundles = requests.get(url, timeout=T).json()
    assert set(owned(sim, "broker-1")) <= set(bundles)
    assert bundles[owned(sim, "broker-1")[0]] == {
        "broker_assignment": "shared",
        "is_controlled": False,
        "is_active": True,
    }


def test_unload_with_destination_goes_through_the_leader_and_drops_the_destination_on_the_owner_hop(sim):
    bundle = owned(sim, "broker-1")[0]
    dest = sim.cluster.by_name("broker-2").id
    url = f"{sim.url_of('broker-2')}{split_path(bundle)}/unload?destinationBroker={dest}"
    first = requests.put(url, allow_redirects=False, timeout=T)  # broker-2 is not the leader
    assert first.status_code == 307
    assert first.headers["Location"].startswith(sim.admin_url) and "authoritative=false" in first.headers["Location"]
    second = requests.put(first.headers["Location"], allow_redirects=False, timeout=T)  # leader → owner
    location = second.headers["Location"]
    assert second.status_code == 307 and location.startswith(sim.url_of("broker-1"))
    assert "destinationBroker" not in location and "authoritative=true" in location
    assert requests.put(location, timeout=T).status_code == 204
    assert sim.cluster.owner_of(bundle) is None  # unowned until its clients look it up again
    sim.cluster.advance(5)
    assert sim.cluster.owner_of(bundle) == dest  # the leader's remembered destination, used once
    assert sim.cluster.affinity == {}


def test_unload_of_an_unowned_bundle_is_a_no_op_but_remembers_the_destination(sim):
    bundle = owned(sim, "broker-0")[0]
    sim.cluster.unload(bundle)
    sim.cluster.advance(UNLOAD_WINDOW_S)  # its topics are closed: unowned, not looked up again yet
    dest = sim.cluster.by_name("broker-2").id
    resp = requests.put(f"{sim.admin_url}{split_path(bundle)}/unload?destinationBroker={dest}", timeout=T)
    assert resp.status_code == 204 and sim.cluster.affinity == {sim.cluster.affinity_key(bundle): dest}
    topic = next(t.name for t in sim.cluster.topics_in(bundle))
    lookup = requests.get(f"{sim.admin_url}/lookup/v2/topic/persistent/{topic.split('://')[1]}", timeout=T).json()
    assert lookup["httpUrl"] == f"http://{dest}" and sim.cluster.owner_of(bundle) == dest


def test_unload_errors(sim):
    bundle = owned(sim, "broker-0")[0]
    path = f"{sim.admin_url}{split_path(bundle)}/unload"
    inactive = requests.put(f"{path}?destinationBroker=10.0.0.9:8080", timeout=T)
    assert inactive.status_code == 409
    assert inactive.json() == {"reason": "Not allowed unload namespace bundle to inactive destination broker"}
    malformed = requests.put(f"{sim.admin_url}/admin/v2/namespaces/t/ns/0xzz_0x1/unload", timeout=T)
    assert malformed.status_code == 500 and malformed.headers["Content-Type"] == "text/plain"  # RestException(e)
    assert 'Message: For input string: "zz" under radix 16' in malformed.text
    unknown = requests.put(f"{sim.admin_url}/admin/v2/namespaces/t/ns/0x00000000_0x00000005/unload", timeout=T)
    assert unknown.status_code == 412 and unknown.json() == {"reason": "Invalid upper boundary for bundle"}
    missing = requests.put(f"{sim.admin_url}/admin/v2/namespaces/t/nope/0x00000000_0xffffffff/unload", timeout=T)
    assert missing.status_code == 404 and missing.json()["reason"] == "Namespace does not exist"
    assert requests.get(f"{sim.admin_url}/admin/v2/nothing/here", timeout=T).status_code == 404


def test_split_updates_boundaries_and_keeps_children_on_the_owner(sim):
    bundle = owned(sim, "broker-0")[0]
    owner = sim.cluster.by_name("broker-0").id
    resp = requests.put(f"{sim.url_of('broker-1')}{split_path(bundle)}/split?unload=false", timeout=T)
    assert resp.status_code == 204  # redirected to the owner, which splits
    bounds = requests.get(f"{sim.admin_url}/admin/v2/namespaces/t/ns/bundles", timeout=T).json()
    assert bounds["numBundles"] == 9
    lower, upper = (int(x, 16) for x in bundle.rsplit("/", 1)[1].split("_"))
    middle = lower + (upper - lower) // 2
    assert f"0x{middle:08x}" in bounds["boundaries"]
    children = [f"t/ns/0x{lower:08x}_0x{middle:08x}", f"t/ns/0x{middle:08x}_0x{upper:08x}"]
    assert [sim.cluster.owner_of(c) for c in children] == [owner, owner]


def test_split_with_unload_and_the_topic_algorithms(sim):
    bundle = owned(sim, "broker-0")[0]
    owner_url = sim.url_of("broker-0")
    assert (
        requests.put(
            f"{owner_url}{split_path(bundle)}/split?unload=true&splitAlgorithmName=topic_count_equally_divide",
            timeout=T,
        ).status_code
        == 204
    )
    namespace_bundles = sim.cluster._bundles_of("t/ns")
    assert len(namespace_bundles) == 9 and bundle not in namespace_bundles
    assert sum(1 for b in namespace_bundles if sim.cluster.owner_of(b) is None) == 2  # both children unloaded
    other = owned(sim, "broker-0")[0]
    lo, hi = (int(x, 16) for x in other.rsplit("/", 1)[1].split("_"))
    inside = lo + (hi - lo) // 3
    resp = requests.put(
        f"{owner_url}{split_path(other)}/split?splitAlgorithmName=specified_positions_divide", json=[inside], timeout=T
    )
    assert resp.status_code == 204
    assert any(f"0x{inside:08x}" in b for b in sim.cluster.all_bundles())


def test_split_errors(sim):
    bundle = owned(sim, "broker-0")[0]
    url = f"{sim.url_of('broker-0')}{split_path(bundle)}/split"
    bad = requests.put(f"{url}?splitAlgorithmName=specified_positions_divide", timeout=T)
    assert bad.status_code == 412
    assert bad.json()["reason"] == "With specified_positions_divide split algorithm, splitBoundaries must not be empty"
    requests.post(
        f"{sim.admin_url}/admin/v2/brokers/configuration/supportedNamespaceBundleSplitAlgorithms/range_equally_divide",
        timeout=T,
    )
    unsupported = requests.put(f"{url}?splitAlgorithmName=topic_count_equally_divide", timeout=T)
    assert unsupported.status_code == 412 and "Unsupported namespace bundle split algorithm" in unsupported.text
    assert requests.put(url, data=b"[1, 2", headers={"Content-Type": "application/json"}, timeout=T).status_code == 412
    before = sim.cluster.all_bundles()
    everything = "range_equally_divide,topic_count_equally_divide,specified_positions_divide"
    requests.post(  # a deleted override stays in effect until a restart: set the list again
        f"{sim.admin_url}/admin/v2/brokers/configuration/supportedNamespaceBundleSplitAlgorithms/{everything}",
        timeout=T,
    )
    outside = requests.put(f"{url}?splitAlgorithmName=specified_positions_divide", json=[0], timeout=T)
    assert outside.status_code == 204 and sim.cluster.all_bundles() == before  # no valid boundary: nothing changes


def test_topic_hash_positions_and_topic_bundle(sim):
    bundle = owned(sim, "broker-1")[0]
    resp = requests.get(f"{sim.admin_url}{split_path(bundle)}/topicHashPositions", timeout=T)
    body = resp.json()
    assert body["bundle"] == bundle.rsplit("/", 1)[1] and body["topicHashPositions"]
    topic, position = next(iter(body["topicHashPositions"].items()))
    assert position == __import__("zlib").crc32(topic.encode())
    plain = requests.get(f"{sim.admin_url}/lookup/v2/topic/persistent/{topic.split('://')[1]}/bundle", timeout=T)
    assert plain.text == bundle.rsplit("/", 1)[1]
    sim.cluster.unload(bundle)
    assert requests.get(f"{sim.admin_url}{split_path(bundle)}/topicHashPositions", timeout=T).status_code == 412


def test_lookup_of_an_unowned_bundle_assigns_it_via_the_leader(sim):
    bundle = owned(sim, "broker-2")[0] if owned(sim, "broker-2") else owned(sim, "broker-0")[0]
    sim.cluster.unload(bundle)
    topic = next(t.name for t in sim.cluster.topics_in(bundle)).split("://")[1]
    hop = requests.get(f"{sim.url_of('broker-2')}/lookup/v2/topic/persistent/{topic}", allow_redirects=False, timeout=T)
    assert hop.status_code == 307 and hop.headers["Location"].startswith(sim.admin_url)  # to the leader
    data = requests.get(f"{sim.url_of('broker-2')}/lookup/v2/topic/persistent/{topic}", timeout=T).json()
    owner = sim.cluster.owner_of(bundle)
    assert owner is not None and data["httpUrl"] == f"http://{owner}" and data["brokerUrl"].startswith("pulsar://")


def test_dynamic_configuration(sim):
    base = f"{sim.admin_url}/admin/v2/brokers/configuration"
    assert "loadBalancerSheddingEnabled" in requests.get(base, timeout=T).json()
    assert requests.post(f"{base}/loadBalancerSheddingEnabled/true", timeout=T).status_code == 200
    assert requests.get(f"{base}/values", timeout=T).json() == {"loadBalancerSheddingEnabled": "true"}
    runtime = requests.get(f"{sim.url_of('broker-2')}/admin/v2/brokers/configuration/runtime", timeout=T).json()
    assert runtime["loadBalancerSheddingEnabled"] == "true" and runtime["loadManagerClassName"].endswith(
        "ModularLoadManagerImpl"
    )
    bad = requests.post(f"{base}/loadManagerClassName/com.example.NoSuchManager", timeout=T)
    assert bad.status_code == 412 and bad.json() == {"reason": " Invalid dynamic-config value"}
    unknown = requests.post(f"{base}/noSuchKey/1", timeout=T)
    assert unknown.status_code == 412 and unknown.json() == {"reason": "Can't update non-dynamic configuration"}
    assert requests.delete(f"{base}/loadBalancerSheddingEnabled", timeout=T).status_code == 200
    assert requests.get(f"{base}/values", timeout=T).json() == {}


def test_builtin_shedder_runs_while_shedding_is_enabled(sim):
    requests.post(f"{sim.admin_url}/admin/v2/brokers/configuration/loadBalancerSheddingEnabled/true", timeout=T)
    requests.post(
        f"{sim.admin_url}/admin/v2/brokers/configuration/loadBalancerAvgShedderHitCountHighThreshold/1", timeout=T
    )
    sim.cluster.advance(180)
    assert sim.cluster.builtin_actions > 0 and sim.cluster.unloads > 0


def test_token_auth(secured):
    url = f"{secured.admin_url}/admin/v2/brokers/sim"
    missing = requests.get(url, timeout=T)
    assert missing.status_code == 401 and "text/html" in missing.headers["Content-Type"]
    assert requests.get(url, headers={"Authorization": "Bearer wrong"}, timeout=T).status_code == 401
    assert requests.get(url, headers={"Authorization": "Bearer s3cret"}, timeout=T).status_code == 200
    assert requests.get(f"{secured.admin_url}/status.html", timeout=T).status_code == 200  # unauthenticated
    reader = requests.get(url, headers={"Authorization": "Bearer reader"}, timeout=T)
    assert reader.status_code == 401 and reader.json() == {"reason": "This operation requires super-user access"}


def test_an_unexpected_error_is_a_text_500_and_the_broker_keeps_serving(sim, monkeypatch):
    def broken(broker_id):
        raise RuntimeError("boom")

    monkeypatch.setattr(sim.cluster, "load_report", broken)
    resp = requests.get(f"{sim.admin_url}/admin/v2/broker-stats/load-report", timeout=T)
    assert resp.status_code == 500 and resp.headers["Content-Type"] == "text/plain"
    assert resp.text.startswith("--- An unexpected error occurred in the server ---") and "boom" in resp.text
    assert requests.get(f"{sim.admin_url}/admin/v2/brokers/sim", timeout=T).status_code == 200


def test_faults_and_bad_input_never_take_a_broker_down(sim):
    sim.add_fault(FaultRule("broker-1", path="/broker-stats/load-report", status=500, body="--- An unexpected error"))
    sim.add_fault(
        FaultRule(
            "broker-2", path="/broker-stats/load-report", status=200, body="{garbage", content_type="application/json"
        )
    )
    assert requests.get(f"{sim.url_of('broker-1')}/admin/v2/broker-stats/load-report", timeout=T).status_code == 500
    assert requests.get(f"{sim.url_of('broker-2')}/admin/v2/broker-stats/load-report", timeout=T).text == "{garbage"
    for path in (
        "/admin/v2/namespaces/%ZZ/x/y/unload",
        "/admin/v2/namespaces/t/ns/0x1_0x0/split",
        "/lookup/v2/topic/persistent/nope/ns/t",
    ):
        assert requests.put(sim.admin_url + path, timeout=T).status_code in (404, 405, 412)
    assert requests.put(f"{sim.admin_url}/admin/v2/brokers/sim", timeout=T).status_code == 405
    sim.clear_faults()
    assert requests.get(f"{sim.url_of('broker-1')}/admin/v2/broker-stats/load-report", timeout=T).status_code == 200


def test_a_crashed_broker_refuses_connections_and_its_bundles_move(sim):
    lost = owned(sim, "broker-1")
    url = sim.url_of("broker-1")
    sim.cluster.crash("broker-1")
    sim.cluster.advance(5)
    try:
        requests.get(f"{url}/admin/v2/broker-stats/load-report", timeout=T)
        raise AssertionError("a crashed broker must not answer")
    except requests.ConnectionError:
        pass
    assert all(sim.cluster.owner_of(b) not in (None, url.removeprefix("http://")) for b in lost)
    assert url.removeprefix("http://") not in requests.get(f"{sim.admin_url}/admin/v2/brokers/sim", timeout=T).json()


def test_broker_resource_availability_is_not_supported_by_the_modular_manager(sim):
    resp = requests.get(f"{sim.admin_url}/admin/v2/broker-stats/broker-resource-availability/t/ns", timeout=T)
    assert resp.status_code == 409 and "does not support" in resp.json()["reason"]


def test_broker_stats_topics_shape(sim):
    body = requests.get(f"{sim.admin_url}/admin/v2/broker-stats/topics", timeout=T).json()
    ranges = body["t/ns"]
    some_range, by_domain = next(iter(ranges.items()))
    assert f"t/ns/{some_range}" in owned(sim, "broker-0")
    stats = next(iter(by_domain["persistent"].values()))
    assert {"msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut"} <= set(stats)
