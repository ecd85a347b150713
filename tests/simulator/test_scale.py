"""A simulated cluster at scale: 1,000 brokers on their own addresses, reports linear in the cluster, a
clear error when the machine cannot serve what was asked, and the operator's cycle over 200 brokers."""

import io
import random
import resource
import socket
import statistics
import threading
import time
from contextlib import redirect_stderr
from importlib import resources

import pytest
import requests
import yaml

from pulsar_lb_operator import cli
from pulsar_lb_operator.act.executor import Executor, Outcome, Safety
from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.benchmarks import suite
from pulsar_lb_operator.benchmarks.metrics import RunMetrics
from pulsar_lb_operator.collect.collector import MAX_CONCURRENCY, collect, concurrency
from pulsar_lb_operator.run.cycle import CycleContext, OperatorState, run_cycle
from pulsar_lb_operator.sandbox import demo
from pulsar_lb_operator.simulator import loopback
from pulsar_lb_operator.simulator.cluster import Ownership, SimulatedCluster
from pulsar_lb_operator.simulator.connection import HttpConnection
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.loopback import ServeError, ensure_fd_limit, loopback_address
from pulsar_lb_operator.simulator.scenario import ScenarioError, load_scenario, parse_scenario
from pulsar_lb_operator.strategies import LoadBalancerConfig
from tests.builders import free_port

T = (5, 30)
QUIET = {"loadBalancerSheddingEnabled": False, "loadBalancerAutoBundleSplitEnabled": False}


def many(brokers, bundles=1000, **extra):
    """``brokers`` brokers and ``bundles`` bundles (one namespace), as light as can be."""
    data = {
        "cluster": "sim",
        "placement": "random",
        "brokers": [{"count": brokers, "cores": 8, "jitter": 0.0}],
        "namespaces": [{"name": "t/ns", "bundles": bundles, "topics": bundles, "rate": 10}],
        "config": QUIET,
        **extra,
    }
    return lambda allocate: SimulatedCluster(parse_scenario(data), allocate)


def test_a_thousand_brokers_each_on_its_own_address():
    started = time.monotonic()
    with serve(many(1000, addresses="distinct")) as sim:
        served_in = time.monotonic() - started
        listed = requests.get(f"{sim.admin_url}/admin/v2/brokers/sim", timeout=T).json()
        assert len(listed) == len(set(listed)) == len(sim.servers) == 1000
        hosts = {b.rsplit(":", 1)[0] for b in listed}
        ports = {b.rsplit(":", 1)[1] for b in listed}
        assert len(hosts) == 1000 and len(ports) == 1  # distinct hosts, one port: a real cluster's shape
        assert sim.admin_url.startswith("http://127.0.0.1:")
        assert sim.cluster.by_name("broker-999").host == loopback_address(999) == "127.0.3.238"
        for name in ("broker-1", "broker-254", "broker-999"):  # each answers as itself
            report = requests.get(f"{sim.url_of(name)}/admin/v2/broker-stats/load-report", timeout=T).json()
            assert report["webServiceUrl"] == sim.url_of(name)
            assert report["pulsarServiceUrl"].startswith(f"pulsar://{sim.cluster.by_name(name).host}:")
        assert served_in < 30, f"1,000 listeners took {served_in:.1f} s"
    with pytest.raises(requests.ConnectionError):  # stopped: every address refuses
        requests.get(f"{sim.url_of('broker-500')}/admin/v2/brokers/health", timeout=T)


def test_a_thousand_brokers_on_ports_never_share_one():
    """Free ports were found by binding and closing a socket: the OS could hand one out twice (960 served)."""
    with serve(many(1000)) as sim:
        ids = sim.cluster.active_ids()
        assert len(ids) == len(set(ids)) == len(sim.servers) == 1000
        assert {i.rsplit(":", 1)[0] for i in ids} == {"127.0.0.1"}
        last = sim.cluster.by_name("broker-999")
        assert requests.get(f"{last.web_url}/admin/v2/brokers/health", timeout=T).text == "ok"


def test_simulate_serves_every_broker_of_a_thousand_broker_scenario(tmp_path):
    scenario = tmp_path / "thousand.yaml"
    data = yaml.safe_load(
        (resources.files("pulsar_lb_operator.simulator") / "scenarios" / "large-1000.yaml").read_text()
    )
    data["namespaces"][0].update(count=10)  # 1,000 bundles: the brokers are what this is about
    scenario.write_text(yaml.safe_dump(data))
    stop, served, out = threading.Event(), {}, io.StringIO()
    thread = threading.Thread(
        target=demo.run_simulator,
        args=(str(scenario), None, 1.0, None, stop, lambda s: served.setdefault("sim", s), out),
    )
    thread.start()
    try:
        for _ in range(600):
            if "sim" in served or not thread.is_alive():
                break
            time.sleep(0.05)
        admin_url = served["sim"].admin_url
        listed = requests.get(f"{admin_url}/admin/v2/brokers/sim", timeout=T).json()
        assert len(listed) == len(set(listed)) == 1000
        last = requests.get(f"http://{listed[-1]}/admin/v2/broker-stats/load-report", timeout=T).json()
        assert last["webServiceUrl"] == f"http://{listed[-1]}"
    finally:
        stop.set()
        thread.join(30)
    assert f"admin URL {admin_url}" in out.getvalue() and "broker-999: http://127.0.3.238:" in out.getvalue()


def test_the_addressing_mode_comes_from_the_scenario_or_the_caller():
    with serve(many(3, 8, addresses="distinct")) as sim:
        assert [b.host for b in sim.cluster.brokers.values()] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    with serve(many(3, 8, addresses="distinct"), addresses="ports") as sim:
        assert {b.host for b in sim.cluster.brokers.values()} == {"127.0.0.1"}
    with pytest.raises(ScenarioError, match="addresses: 'hosts' is not one of ports, distinct"):
        many(3, 8, addresses="hosts")(None)


def test_a_restarted_broker_listens_on_its_own_address_again():
    events = [{"at_minute": 1, "type": "restart_broker", "broker": "broker-1", "interval_minutes": 1}]
    with serve(many(3, 8, addresses="distinct", events=events)) as sim:
        url = sim.url_of("broker-1")
        assert url.startswith("http://127.0.0.2:")
        sim.cluster.advance(61)  # stopped: its address refuses connections, the others answer
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{url}/admin/v2/brokers/health", timeout=T)
        assert requests.get(f"{sim.url_of('broker-2')}/admin/v2/brokers/health", timeout=T).text == "ok"
        sim.cluster.advance(60)  # back, on the same address and port
        assert requests.get(f"{url}/admin/v2/brokers/health", timeout=T).text == "ok"
        assert len(requests.get(f"{sim.admin_url}/admin/v2/brokers/sim", timeout=T).json()) == 3


def test_a_port_in_use_is_an_error_naming_the_broker_and_nothing_is_left_listening():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServeError, match=rf"cannot listen on 127\.0\.0\.1:{port} for broker broker-0: .*in use"):
            serve(many(3, 8), first_port=port)
    port = free_port()
    with socket.socket() as taken:  # distinct addresses share one port: the third broker's is taken
        taken.bind(("127.0.0.3", port))
        taken.listen()
        with pytest.raises(ServeError, match=rf"127\.0\.0\.3:{port} for broker broker-2"):
            serve(many(5, 8, addresses="distinct"), first_port=port)
    for host in ("127.0.0.1", "127.0.0.2"):  # the sockets bound before the failure were closed
        with socket.socket() as again:
            again.bind((host, port))


def test_a_port_another_process_has_on_one_of_the_distinct_addresses_is_passed_over(monkeypatch):
    """Distinct addresses share the first broker's port, one the OS found free on 127.0.0.1; another process can
    have it on 127.0.0.2 (another simulated cluster closing down). The cluster starts on another port; it failed
    to start before ("cannot listen on 127.0.0.2:…": ``operator rehearse`` counted a case as crashed)."""
    taken: list[socket.socket] = []
    listen = loopback.listen

    def another_process_first(host, port, name):
        if host == "127.0.0.2" and not taken:  # the first port tried is in use there: a real socket holds it
            sock = socket.socket()
            sock.bind((host, port))
            sock.listen()
            taken.append(sock)
        return listen(host, port, name)

    monkeypatch.setattr(loopback, "listen", another_process_first)
    try:
        with serve(many(3, 8, addresses="distinct")) as sim:
            urls = [sim.url_of(f"broker-{i}") for i in range(3)]
            assert len({u.rsplit(":", 1)[1] for u in urls}) == 1  # one port, as before
            assert urls[1].startswith("http://127.0.0.2:") and not urls[1].endswith(f":{taken[0].getsockname()[1]}")
            assert requests.get(f"{urls[1]}/admin/v2/brokers/health", timeout=T).text == "ok"
    finally:
        for sock in taken:
            sock.close()


def test_simulate_says_which_address_is_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = io.StringIO()
        with redirect_stderr(err):
            code = cli.main(["simulate", "demo", "--port", str(port)])
    assert code == 2
    assert f"operator: error: cannot listen on 127.0.0.1:{port} for broker broker-0" in err.getvalue()


def test_the_open_file_limit_is_raised_or_the_shortfall_named(monkeypatch):
    calls = []
    monkeypatch.setattr(resource, "setrlimit", lambda which, limits: calls.append(limits))
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 65536))
    assert ensure_fd_limit(1000) == 3256 and calls == [(3256, 65536)]  # a socket and a connection each, both ends
    calls.clear()
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 2000))
    assert ensure_fd_limit(1000) == 2000 and calls == [(2000, 2000)]  # as far as the hard limit goes
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 1100))
    with pytest.raises(ServeError, match=r"serving 1000 brokers needs at least 1256 open files.*ulimit -n 3256"):
        ensure_fd_limit(1000)
    with pytest.raises(ServeError, match="needs at least 1256 open files"):  # before a single socket is bound
        serve(many(1000))


def test_a_broker_report_reads_its_own_bundles_not_the_whole_map(monkeypatch):
    sim = SimulatedCluster(parse_scenario({**_large(20, 2000), "placement": "LeastLongTermMessageRate"}))
    broker = sim.by_name("broker-3").id

    def no_scan(*_args):
        raise AssertionError("the whole ownership map was scanned")

    for method in ("__iter__", "items", "values", "keys"):
        monkeypatch.setattr(Ownership, method, no_scan)
    first = sim.load_report(broker)
    assert sim.load_report(broker) is first  # nothing changed: not rebuilt
    bundle = sim.owned_by(broker)[0]
    sim.unload(bundle)
    assert sim.load_report(broker) is first  # bundles and lastStats come from the sample: until the next one,
    assert bundle in first["bundles"] and bundle in first["lastStats"]  # both still show it, as in real life
    sim.advance(sim.scenario.report_interval_s)
    after = sim.load_report(broker)
    assert after is not first and bundle not in after["bundles"] and bundle in after["lastBundleLosses"]
    assert sim.load_report_json(broker) is sim.load_report_json(broker)  # serialized once per report
    monkeypatch.undo()
    for _ in range(3):  # moves, placements, splits, a crash and a restart: the index matches a scan
        sim.advance(60)
        for owned in list(sim.ownership)[:5]:
            sim.unload(owned)
    sim.split(sim.owned_by(broker)[0], None, None, unload=True)
    sim.crash("broker-5")
    sim.advance(120)
    for b in sim.brokers:
        assert sim.owned_by(b) == sorted(k for k, v in dict(sim.ownership).items() if v == b)


def test_ownership_is_a_dict_that_keeps_its_index():
    owners = Ownership({"a/b/1": "x", "a/b/2": "y"})
    owners["a/b/3"] = "x"
    owners["a/b/1"] = "y"
    del owners["a/b/2"]
    assert owners.pop("a/b/3") == "x" and owners.pop("nope", None) is None
    owners.update({"a/b/4": "x"})
    owners.setdefault("a/b/5", "z")
    assert dict(owners) == {"a/b/1": "y", "a/b/4": "x", "a/b/5": "z"}
    assert owners.owned("x") == {"a/b/4"} and owners.owned("y") == {"a/b/1"} and owners.owned("z") == {"a/b/5"}
    version = owners.version_of("x")
    owners["a/b/4"] = "x"  # no change: no new version
    assert owners.version_of("x") == version
    owners.clear()
    assert not owners and owners.owned("x") == set() and owners.version_of("x") > version


def test_namespaces_repeat_with_count():
    scenario = parse_scenario(
        {"brokers": [{"count": 2}], "namespaces": [{"name": "t/ns", "count": 3, "bundles": 4}, {"name": "t/other"}]}
    )
    assert [ns.name for ns in scenario.namespaces] == ["t/ns-0", "t/ns-1", "t/ns-2", "t/other"]
    assert {ns.bundles for ns in scenario.namespaces[:3]} == {4}
    with pytest.raises(ScenarioError, match="namespace names must be unique"):
        parse_scenario({"brokers": [{}], "namespaces": [{"name": "t/ns-0"}, {"name": "t/ns", "count": 2}]})


def test_the_shipped_large_scenario():
    scenario = load_scenario("large-1000")
    assert len(scenario.brokers) == 1000 and scenario.addresses == "distinct"
    assert sum(ns.bundles for ns in scenario.namespaces) == 100_000
    assert scenario.initial_owners["broker-0"] == 1.8 and scenario.initial_owners["broker-999"] == 0
    _, by_name = suite.scenario_tasks([], suite.combinations()[:1], [0], 10.0)  # the strategy benchmark skips it
    assert "large-1000" not in by_name and "demo" in by_name


def _large(brokers, bundles):
    """The shipped large-1000 scenario at another size, each broker loaded alike (as benchmarks/scale.py)."""
    data = yaml.safe_load(
        (resources.files("pulsar_lb_operator.simulator") / "scenarios" / "large-1000.yaml").read_text()
    )
    data["brokers"][0]["count"] = brokers
    data["namespaces"][0].update(
        count=bundles // 100, rate=data["namespaces"][0]["rate"] * 100_000 / bundles * brokers / 1000
    )
    few = max(1, brokers // 200)
    data["initial_owners"] = {"broker-*": 1, **{f"broker-{i}": 1.8 for i in range(few)}}
    data["initial_owners"].update({f"broker-{i}": 0 for i in range(brokers - few, brokers)})
    return data


def test_collect_reads_as_many_brokers_at_once_as_it_may_and_reuses_connections(monkeypatch):
    assert concurrency(3) == 3 and concurrency(1000) == MAX_CONCURRENCY == 64 and concurrency(0) == 1
    accepted = []
    original = HttpConnection.connection_made
    monkeypatch.setattr(
        HttpConnection, "connection_made", lambda self, t: (accepted.append(self.broker_id), original(self, t))
    )
    with serve(lambda allocate: SimulatedCluster(parse_scenario(_large(100, 2000)), allocate)) as sim:
        client = AdminClient(sim.admin_url)
        first = collect(client, "sim", now_ms=sim.cluster.now_ms)
        assert len(first.snapshot.brokers) == 100 and not first.skipped
        adapter = client.session.get_adapter("http://")
        assert adapter._pool_connections >= 101 and adapter._pool_maxsize >= 64
        opened = len(accepted)
        again = collect(client, "sim", now_ms=sim.cluster.now_ms)
        assert len(again.snapshot.brokers) == 100
        assert len(accepted) - opened <= 5, "the second cycle reconnected instead of reusing its connections"
        client.close()


def test_the_operator_balances_200_brokers_over_http_in_dry_run_then_for_real():
    """The operator's own cycle (verify → collect → plan → execute) against 200 brokers and 10,000 bundles,
    one cycle per simulated minute: a dry run sends nothing, the real run moves load off the hot brokers
    onto the restarted one, each move verified where it landed, at most 10 unloads a cycle and 5 from one
    broker, until the cluster is balanced — every broker inside the band the untouched brokers spanned at
    the start, as ``benchmarks/scale.py --balance`` counts it — within 12 real cycles."""
    data = _large(200, 10_000)
    config = LoadBalancerConfig().replace(data["config"])
    with serve(lambda allocate: SimulatedCluster(parse_scenario(data), allocate)) as sim:
        cluster = sim.cluster
        client = AdminClient(sim.admin_url)
        assert len(client.active_brokers("sim")) == 200
        clock = lambda: cluster.now_ms / 1000  # noqa: E731 - the executor runs on simulated time
        state, rng = OperatorState(), random.Random(0)
        metrics = RunMetrics()
        before = metrics.record(cluster)
        untouched = [u for name, u in before.usage.items() if name not in ("broker-0", "broker-199")]
        low, high = min(untouched), max(untouched)
        assert not low <= min(before.usage.values()) and not max(before.usage.values()) <= high
        results, balanced_after = [], None
        for cycle in range(2 + 12):
            dry = cycle < 2
            safety = Safety(dry_run=dry, cooldown_minutes=config.loadBalancerSheddingGracePeriodMinutes)
            executor = Executor(client, "sim", safety, clock=clock, sleep=lambda _s: None)
            result = run_cycle(CycleContext(client, "sim", config, executor), state, rng, now_ms=cluster.now_ms)
            assert not result.skipped_brokers and len(result.snapshot.brokers) == 200
            state = result.state
            results.append(result)
            if dry:
                assert sim.mutating_requests() == [] and cluster.unloads == 0
            cluster.advance(config.loadBalancerSheddingIntervalMinutes * 60)
            sources = [r.action.source for r in result.records if r.outcome is Outcome.EXECUTED]
            assert len(sources) <= 10 and all(sources.count(s) <= 5 for s in sources)  # the default rails
            usage = metrics.record(cluster).usage.values()
            if not dry and low <= min(usage) and max(usage) <= high:
                balanced_after = cycle - 1
                break
        assert balanced_after is not None, "not balanced within 12 real cycles"
        after = metrics.record(cluster)
        dry_run = [r for result in results[:2] for r in result.records]
        would = [r.action.source for r in dry_run if r.outcome is Outcome.DRY_RUN]  # AvgShedder's second hit
        assert would and len(would) <= 10 and all(would.count(s) <= 5 for s in would)  # as the execution counts
        assert all(r.detail.startswith("max unloads per") for r in dry_run if r.outcome is not Outcome.DRY_RUN)
        executed = [r for result in results[2:] for r in result.records if r.outcome is Outcome.EXECUTED]
        assert len(executed) >= 10 and cluster.unloads == len(executed)
        verified = [r.outcome for result in results[2:] for r in result.verifications]
        assert verified and set(verified) == {Outcome.MOVED_AS_PLANNED}
        assert after.usage["broker-0"] < before.usage["broker-0"] - 10  # the hot broker gave load away
        assert after.usage["broker-199"] > before.usage["broker-199"] + 5  # the restarted one took some
        assert statistics.pstdev(after.usage.values()) < statistics.pstdev(before.usage.values())
        client.close()
