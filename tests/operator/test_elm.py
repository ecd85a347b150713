"""The extensible load manager (ELM): detected every cycle, its load read from its own system topics with
pulsar-client (a real binary-protocol broker, pulsar-lite, on loopback), balanced with the strategies that work on
its top-K data, and nothing changed on the cluster when that data cannot be read."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import subprocess
import threading
import time
from typing import ClassVar

import pulsar
import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.act.executor import Executor, Safety
from pulsar_lb_operator.adminapi import AdminClient, AdminError
from pulsar_lb_operator.collect import elm
from pulsar_lb_operator.records import Outcome
from pulsar_lb_operator.run.cycle import CycleContext, OperatorState, run_cycle
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.sandbox import demo
from pulsar_lb_operator.simulator import elm as sim_elm
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import parse_scenario
from pulsar_lb_operator.strategies import LoadBalancerConfig
from pulsar_lb_operator.strategies.snapshots import SnapshotError, parse_broker_load
from tests.builders import auth_settings, free_port, operator_script

ELM_SCENARIO = {
    "cluster": "sim",
    "loadManager": "extensible",
    "brokers": [{"count": 3, "cores": 4, "cost_per_msg": 0.01, "cost_per_mib": 1.0}],
    "namespaces": [{"name": "t/ns", "bundles": 16, "topics": 128, "rate": 150, "rate_spread": 0.3}],
    "initial_owners": {"broker-0": 3, "broker-1": 1},
    # Pulsar's own shedder is on (the guard has something to turn off), but never acts here on its own
    "config": {
        "loadBalancerSheddingEnabled": True,
        "loadBalancerSheddingConditionHitCountThreshold": 100000,
        "loadBalancerAutoBundleSplitEnabled": False,
    },
}
# the releases of the "Which Pulsar" table (docs/pulsar-versions.md), as the simulated brokers' brokerVersion
RELEASES = {"3.0": "3.0.0", "3.3": "3.3.2", "4.0": "4.0.4", "master": "4.2.0-SNAPSHOT"}
ACT_NOW = ["--set", "loadBalancerSheddingConditionHitCountThreshold=0", "--set", "pauseSeconds=0"]
TOPIC = "non-persistent://pulsar/system/loadbalancer-broker-load-data"


@contextlib.contextmanager
def elm_cluster(publish: bool = True, wall_clock: bool = True, **scenario):
    """An ELM cluster served on loopback with its brokers' reporters on a pulsar-lite broker."""
    doc = {**ELM_SCENARIO, **scenario}
    epoch = int(time.time() * 1000) if wall_clock else 1_750_000_000_000
    with serve(lambda allocate: SimulatedCluster(parse_scenario(doc), allocate, epoch)) as sim:
        reporters = sim_elm.ElmBrokers(sim.cluster).start() if publish else None
        try:
            yield sim, reporters
        finally:
            if reporters is not None:
                reporters.close()


@contextlib.contextmanager
def advancing(sim, step_s: float = 30.0, every_s: float = 0.1):
    """Simulated time running in the background (as ``operator simulate`` does): the brokers report."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every_s):
            sim.cluster.advance(step_s)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # state/operator-state.json and its lock
    for name in ("PULSAR_ADMIN_URL", "PULSAR_LB_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def rebalance(capsys, sim, *args):
    code = cli.main(["rebalance", "--admin-url", sim.admin_url, "--output", "json", *args])
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    return code, (json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}), err  # the "result" line


def posts(sim):
    return [r for r in sim.requests if r.method == "POST"]


def load_report_requests(sim):
    return [r for r in sim.requests if "load-report" in r.path]


# ------------------------------------------------------------------------------------------- end to end


def run_demo_command(monkeypatch, *args: str) -> str:
    printed, run_demo = io.StringIO(), demo.run_demo  # the demo prints to the sys.stdout of its import: catch it
    monkeypatch.setattr(demo, "run_demo", lambda *a, **kwargs: run_demo(*a, **{**kwargs, "out": printed}))
    assert cli.main(["demo", *args]) == 0
    return printed.getvalue()


def last_usage_row(text: str) -> list[float]:
    """The brokers' usage on the demo's last table row."""
    rows = [line for line in text.splitlines() if re.match(r"\s+\d+\s+\d\d:\d\d\s", line)]
    return [float(v) for v in re.findall(r"(\d+)%", rows[-1])]


def test_operator_demo_load_manager_extensible_balances_the_demo_cluster_from_its_topics(monkeypatch):
    """The operator's default strategy, AvgShedder, balances the ELM demo cluster as far as the modular one:
    its inputs are BrokerLoadData and each broker's top bundles, read with pulsar-client from pulsar-lite."""
    text = run_demo_command(monkeypatch, "--load-manager", "extensible")
    assert "Load manager: extensible (ExtensibleLoadManagerImpl)" in text and "pulsar://127.0.0.1:" in text
    assert "shedding AvgShedder" in text
    first, last = map(int, re.search(r"Spread (\d+) → (\d+) points", text).groups())
    assert first > 60 and last < demo.CONVERGED_SPREAD, text  # balanced: 84 → 7, as the modular demo
    usage = last_usage_row(text)
    assert len(usage) == 4 and max(usage) - min(usage) < demo.CONVERGED_SPREAD
    unloads = int(re.search(r"(\d+) unloads", text).group(1))
    assert unloads >= 10 and "executed (accepted)" in text and text.count("moved_as_planned") >= 10
    assert "failed" not in text and "not_moved" not in text and "moved_elsewhere" not in text


def test_the_elm_demo_with_transfershedder_moves_load_as_pulsar_would_and_stops_at_its_target_std(monkeypatch):
    """TransferShedder as Pulsar runs it, from the averages the brokers publish: after its hit count (3 cycles) it
    plans the transfers that bring the std of their weightedMaxEMA to about 0.10, of which the operator sends 5 (its
    cap per broker and cycle); each transfer makes the brokers involved start their averages over (a tombstone),
    and from then on the published std stays under loadBalancerBrokerLoadTargetStd (0.25): TransferShedder does
    nothing more, as Pulsar would not (tests/conformance/test_transfer_shedder_on_elm.py checks every cycle)."""
    text = run_demo_command(
        monkeypatch, "--load-manager", "extensible", "--strategy", "TransferShedder", "--minutes", "60"
    )
    assert "shedding TransferShedder" in text
    first, last = map(int, re.search(r"Spread (\d+) → (\d+) points", text).groups())
    assert first > 60 and last < first - 25, text
    rows = re.findall(r"^\s+(\d+)\s+\d\d:\d\d\s.*\s(\d+)$", text, re.M)  # (cycle, moves) per table row
    acting = [int(cycle) for cycle, moves in rows if int(moves)]
    assert acting == [4], acting  # the fourth cycle: hit count 3 passed
    assert int(re.search(r"; (\d+) unloads", text).group(1)) == 5 and text.count("moved_as_planned") == 5
    assert text.count("max unloads per broker (5) reached") == 3  # planned, not sent: the operator's cap
    usage = [u / 100 for u in last_usage_row(text)]
    mean = sum(usage) / len(usage)
    std = (sum((u - mean) ** 2 for u in usage) / len(usage)) ** 0.5
    assert std < LoadBalancerConfig().loadBalancerBrokerLoadTargetStd, text


def test_the_scenario_key_runs_the_demo_on_elm_and_balances_it_from_the_topics(tmp_path):
    scenario = tmp_path / "elm.yaml"
    scenario.write_text(
        "loadManager: extensible\nseed: 3\nduration_minutes: 12\n"
        "brokers: [{count: 3, cores: 4, cost_per_msg: 0.01, cost_per_mib: 1.0}]\n"
        "namespaces: [{name: t/ns, bundles: 24, topics: 240, rate: 120, rate_spread: 0.3}]\n"
        "initial_owners: {broker-0: 4, broker-1: 1, broker-2: 0}\n"
        "config: {loadBalancerSheddingEnabled: false, loadBalancerAutoBundleSplitEnabled: false,\n"
        "         loadBalancerSheddingConditionHitCountThreshold: 1, loadBalancerBrokerLoadTargetStd: 0.05}\n"
    )
    out = io.StringIO()
    assert demo.run_demo(str(scenario), out=out) == 0
    text = out.getvalue()
    first, last = map(int, re.search(r"Spread (\d+) → (\d+) points", text).groups())
    assert "Load manager: extensible" in text and last < first / 2, text
    assert "executed (accepted)" in text


@pytest.mark.parametrize("release", list(RELEASES))
def test_a_cycle_reads_brokerloaddata_and_top_bundles_with_pulsar_client_and_transfers_to_a_destination(release):
    brokers_k = {**ELM_SCENARIO["config"], "loadBalancerMaxNumberOfBundlesInBundleLoadReport": 4}
    version = RELEASES[release]
    with elm_cluster(wall_clock=False, config=brokers_k, brokerVersion=version) as (sim, reporters):
        cluster = sim.cluster
        client = AdminClient(sim.admin_url, retries=1)
        session = elm.Session(reporters.service_url, read_timeout_s=10.0)
        session.connect(client)  # before the brokers publish: the topics are non-persistent
        reporters.publish(force=True)
        assert session.reader.caught_up(reporters.sent, 10.0)
        config = LoadBalancerConfig().replace({"loadBalancerSheddingConditionHitCountThreshold": 0})
        owned_before = {b: set(cluster.owned_by(b)) for b in cluster.active_ids()}
        clock = lambda: cluster.now_ms / 1000  # noqa: E731
        executor = Executor(client, "sim", Safety(dry_run=False), clock=clock, sleep=lambda _s: None)
        try:
            context = CycleContext(client, "sim", config, executor, "TransferShedder", load_manager=session)
            result = run_cycle(context, OperatorState(), random.Random(1), now_ms=cluster.now_ms)
        finally:
            session.close()
            client.close()
        assert result.load_manager.kind == "extensible" and result.load_manager.version == version
        assert result.load_manager.class_name == elm.EXTENSIBLE
        assert result.plan.shedding == "TransferShedder" and result.plan.placement == "(transfer)"
        assert set(result.snapshot.brokers) == set(cluster.active_ids()) and not result.skipped_brokers
        for broker_id, load in result.snapshot.brokers.items():
            owned = owned_before[broker_id]
            heartbeat = {b for b in load.bundles if b.startswith("pulsar/")}  # as LocalBrokerData.bundles has them
            assert load.bundles - heartbeat == owned  # ownedNamespaces, served by ELM from its state channel
            assert set(load.lastStats) <= owned and len(load.lastStats) == min(4, len(owned))  # the brokers' top K
            sample = cluster.brokers[broker_id].host_sample
            assert load.cpu.usage == pytest.approx(sample["cpu"][0]) and load.cpu.limit == sample["cpu"][1]
            assert load.lastUpdate == cluster.brokers[broker_id].last_update_ms
            published = load.raw["extensibleLoadManager"]
            assert published["weightedMaxEMA"] > 0
            assert ("msgThroughputEMA" in published) == (release != "3.0")  # 3.0.0's BrokerLoadData had no such field
        assert not load_report_requests(sim), "ELM is never asked for a load report"
        moved = [r for r in result.records if r.outcome is Outcome.EXECUTED]
        assert moved and all(r.action.destination for r in moved)
        unloads = [r for r in sim.requests if r.method == "PUT" and r.path.endswith("/unload")]
        assert all("destinationBroker=" in r.query for r in unloads)
        cluster.advance(5)
        assert all(cluster.owner_of(r.action.bundle) == r.action.destination for r in moved)


def test_operator_rebalance_on_elm_reads_the_topics_then_turns_elms_shedder_off_and_moves_bundles(capsys):
    with elm_cluster() as (sim, reporters), advancing(sim):
        code, doc, err = rebalance(
            capsys,
            sim,
            "--no-dry-run",
            "--set",
            f"elmServiceUrl={reporters.service_url}",
            "--set",
            "elmReadTimeoutSeconds=20",
            "--set",
            "disableBuiltinShedding=true",
            "--set",
            "loadBalancerAvgShedderHitCountLowThreshold=1",
            *ACT_NOW,
        )
        assert code == 0, err
        assert doc["loadManager"] == {"kind": "extensible", "className": elm.EXTENSIBLE, "version": "4.0.4-sim"}
        assert doc["shedding"] == "AvgShedder" and doc["skippedBrokers"] == {}
        assert [o for o in doc["outcomes"] if o["outcome"] == "executed"]
        assert sim.cluster.dynamic_config["loadBalancerSheddingEnabled"] == "false"  # after ELM's data was read
        assert not load_report_requests(sim)


@pytest.mark.parametrize("unreachable", ["pulsar-lite stopped", "wrong service URL"])
def test_unreadable_system_topics_stop_the_cycle_with_one_line_and_change_nothing(capsys, unreachable):
    with elm_cluster() as (sim, reporters):
        url = reporters.service_url
        if unreachable == "pulsar-lite stopped":
            reporters.stop_system_topics()
        else:
            url = f"pulsar://127.0.0.1:{free_port()}"
        code, _, err = rebalance(
            capsys,
            sim,
            "--no-dry-run",
            "--set",
            f"elmServiceUrl={url}",
            "--set",
            "elmReadTimeoutSeconds=2",
            "--set",
            "disableBuiltinShedding=true",
            *ACT_NOW,
        )
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 1, err
        assert lines[0].startswith(f"operator: error: cannot read {TOPIC} at {url}: "), lines[0]
        assert posts(sim) == [] and sim.mutating_requests() == []  # the guard did not run: nothing changed
        runtime = AdminClient(sim.admin_url).runtime_config()
        assert runtime["loadBalancerSheddingEnabled"] == "true"
        assert runtime["loadManagerClassName"] == elm.EXTENSIBLE


def test_the_operator_process_says_it_in_one_line_on_stderr_and_exits_1(tmp_path):
    """The console script, as a user runs it: nothing of pulsar-client's own logging, no abort at exit."""
    with elm_cluster(publish=False) as (sim, _):
        url = f"pulsar://127.0.0.1:{free_port()}"
        settings = [f"elmServiceUrl={url}", "elmReadTimeoutSeconds=2", "disableBuiltinShedding=true"]
        result = subprocess.run(
            [operator_script(), "rebalance", "--admin-url", sim.admin_url, "--no-dry-run"]
            + [arg for setting in settings for arg in ("--set", setting)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert result.returncode == 1 and result.stdout == "", result
        assert result.stderr.splitlines() == [
            f"operator: error: cannot read {TOPIC} at {url}: no connection within 2 s (Pulsar error: TimeOut)"
        ]
        assert posts(sim) == []


def test_no_brokerloaddata_within_the_report_interval_is_one_line_too(capsys):
    """The topics are reachable, but no broker publishes (simulated time stands still)."""
    with elm_cluster() as (sim, reporters):
        code, _, err = rebalance(
            capsys,
            sim,
            "--no-dry-run",
            "--set",
            f"elmServiceUrl={reporters.service_url}",
            "--set",
            "elmReadTimeoutSeconds=1",
            "--set",
            "disableBuiltinShedding=true",
        )
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 2, err  # how long it may wait, and why; then what went wrong
        assert lines[0].startswith("reading the load of 3 brokers from the extensible load manager's system topics")
        assert "waiting up to 1 s for the 3 not heard yet" in lines[0] and "loadBalancerReportUpdateMax" in lines[0]
        assert lines[1].startswith("operator: error: cannot read the extensible load manager's load data")
        assert "no active broker's BrokerLoadData" in lines[1] and TOPIC in lines[1] and "within 1 s" in lines[1]
        assert posts(sim) == []


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--strategy", "PredictivePairingShedder"], "strategy PredictivePairingShedder"),
        (["--set", "loadBalancerLoadSheddingStrategy=PredictivePairingShedder"], "strategy PredictivePairingShedder"),
        (["--strategy", "TransferShedder", "--placement", "LeastLongTermMessageRate"], "LeastLongTermMessageRate"),
        (["--strategy", "ThresholdShedder", "--placement", "LeastLongTermMessageRate"], "LeastLongTermMessageRate"),
    ],
    ids=["PredictivePairingShedder", "PredictivePairingShedder-in-settings", "LeastLongTermMessageRate", "LLTMR-2"],
)
def test_strategies_whose_inputs_elm_does_not_publish_are_refused_naming_them_and_the_load_manager(capsys, args, named):
    with elm_cluster(publish=False) as (sim, _):
        code, _, err = rebalance(capsys, sim, "--no-dry-run", "--set", "disableBuiltinShedding=true", *args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert named in lines[0] and "ExtensibleLoadManagerImpl" in lines[0] and "top 10 bundles" in lines[0]
        assert posts(sim) == []


# ------------------------------------------------------------------------------------------- detection


def test_detection_reads_the_class_name_and_version_never_the_load_reports_status(served):
    client = AdminClient(served.admin_url)
    found = elm.detect(client)
    assert (found.kind, found.version, found.short_name) == ("modular", "4.0.4-sim", "ModularLoadManagerImpl")
    assert found.report_interval_s == 15 * 60  # the modular simulator does not serve it: Pulsar's default
    with elm_cluster(publish=False) as (sim, _):
        other = AdminClient(sim.admin_url)
        found = elm.detect(other)
        assert found.extensible and found.report_interval_s == 900  # loadBalancerReportUpdateMaxIntervalMinutes
        answer = other.session.get(f"{sim.admin_url}/admin/v2/broker-stats/load-report", timeout=5)
        assert answer.status_code == 500 and "UnsupportedOperationException" in answer.text
        other.close()
    client.close()


@pytest.mark.parametrize("release", list(RELEASES))
def test_a_modular_cluster_keeps_its_load_reports(release):
    doc = {**ELM_SCENARIO, "loadManager": "modular", "brokerVersion": RELEASES[release]}
    with serve(lambda allocate: SimulatedCluster(parse_scenario(doc), allocate)) as served:
        check_modular(served, RELEASES[release])


def check_modular(served, version):
    client = AdminClient(served.admin_url)
    session = elm.Session()
    executor = Executor(client, "sim", Safety(dry_run=True), sleep=lambda _s: None)
    context = CycleContext(client, "sim", LoadBalancerConfig(), executor, load_manager=session)
    result = run_cycle(context, OperatorState(), random.Random(1), now_ms=served.cluster.now_ms)
    assert result.load_manager.kind == "modular" and result.load_manager.version == version
    brokers = result.snapshot.brokers.values()
    assert len(brokers) == 3 and sum(len(b.lastStats) for b in brokers) == 16  # every bundle's stats: load reports
    assert session.reader is None  # no pulsar-client on a modular cluster
    client.close()


def test_the_daemon_exposes_the_load_manager_as_an_info_metric(served, tmp_path):
    settings = OperatorSettings(
        adminUrl=served.admin_url,
        stateFile=str(tmp_path / "state.json"),
        historyUri="",
        profileUri="",
        metricsPort=0,
        aggregateEveryMinutes=0,
    )
    daemon = Daemon(
        settings, LoadBalancerConfig(), AdminClient(served.admin_url), "sim", clock_ms=lambda: served.cluster.now_ms
    )
    try:
        result = daemon.run_once()
        assert result is not None and result.load_manager.kind == "modular"
        value = daemon.metrics.registry.get_sample_value(
            "pulsar_lb_operator_load_manager_info",
            {"cluster": "sim", "load_manager": "modular", "version": "4.0.4-sim"},
        )
        assert value == 1
    finally:
        daemon.close(0)


# ------------------------------------------------------------------------------------------- ELM's documents

# BrokerLoadData as a 3.1 broker published it (pulsar-site's "check load report from system topics" example)
BROKER_LOAD_DATA_31 = (
    '{"cpu":{"usage":14.397985201479854,"limit":800.0},"memory":{"usage":300.0,"limit":2096.0},'
    '"directMemory":{"usage":40.0,"limit":256.0},"bandwidthIn":{"usage":0.7817884878178855,"limit":1.0E7},'
    '"bandwidthOut":{"usage":0.7213945272139455,"limit":1.0E7},"msgThroughputIn":3.000538680274058,'
    '"msgThroughputOut":3.0005621893825616,"msgRateIn":0.03333931866971176,"msgRateOut":0.033339579882028465,'
    '"bundleCount":3,"topics":3,"maxResourceUsage":0.15625,"weightedMaxEMA":0.15625,'
    '"msgThroughputEMA":38.88925615962549,"updatedAt":1691043751060,"reportedAt":1691043631073}'
)
TOP_BUNDLES = json.dumps(
    {
        "topBundlesLoadData": [
            {"bundleName": "my-tenant/my-ns/0x00000000_0x40000000", "stats": {"msgRateIn": 5.0, "topics": 2}},
            {"bundleName": "my-tenant/my-ns/0x40000000_0x80000000", "stats": {"msgRateIn": 9.0, "topics": 2}},
        ]
    }
)


@pytest.mark.parametrize("release", ["3.1+", "3.0.0"])
def test_brokerloaddata_of_each_release_maps_onto_the_snapshot_model(release):
    doc = json.loads(BROKER_LOAD_DATA_31)
    if release == "3.0.0":  # BrokerLoadData before `topics` and `msgThroughputEMA` were added
        del doc["topics"], doc["msgThroughputEMA"]
    payload = json.dumps(doc).encode()
    load_data = elm.parse_broker_load_data(payload, "BrokerLoadData of broker-1:8080")
    top = elm.parse_top_bundles(TOP_BUNDLES.encode(), "TopBundlesLoadData of broker-1:8080")
    version, manager = "3.1.0", elm.EXTENSIBLE
    owned = [
        "my-tenant/my-ns/0x00000000_0x40000000",
        "my-tenant/my-ns/0x40000000_0x80000000",
        "a/b/0x80000000_0xffffffff",
    ]
    load = parse_broker_load("broker-1:8080", elm.local_broker_data(load_data, top, owned, version, manager))
    assert load.cpu.usage == pytest.approx(14.397985201479854) and load.cpu.limit == 800.0
    assert load.lastUpdate == 1691043751060 and load.msgRateIn == pytest.approx(0.0333, rel=1e-2)
    assert set(load.lastStats) == {t[0] for t in top} and load.bundles == frozenset(owned)
    assert load.lastStats["my-tenant/my-ns/0x40000000_0x80000000"].msgRateIn == 9.0
    assert load.raw["numTopics"] == (3 if release == "3.1+" else 4)  # 3.0.0: summed from the top bundles
    published = load.published  # what the broker published itself, for TransferShedder
    assert published.weightedMaxEMA == 0.15625 and published.ownedBundlesKnown
    assert published.topBundles == tuple(t[0] for t in top)  # in the order published: smallest first
    assert published.msgThroughputEMA == (pytest.approx(38.889, rel=1e-3) if release == "3.1+" else None)
    assert published.topics == (3 if release == "3.1+" else 0) and published.brokerVersion == "3.1.0"
    without_owned = parse_broker_load("b:1", elm.local_broker_data(load_data, top, None, version, manager))
    assert without_owned.bundles == frozenset(t[0] for t in top)  # ownedNamespaces unread: the top bundles only
    assert not without_owned.published.ownedBundlesKnown  # so TransferShedder unloads none of them
    assert elm.parse_top_bundles(None, "tombstone") == [] and elm.parse_top_bundles(b"", "tombstone") == []


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        (b"\xff\xfenot json", "BrokerLoadData of b:1: not JSON"),
        (b'{"cpu": "lots"}', "BrokerLoadData of b:1.cpu: expected an object"),
        (BROKER_LOAD_DATA_31.replace('"updatedAt":1691043751060,', "").encode(), "BrokerLoadData of b:1.updatedAt"),
        (BROKER_LOAD_DATA_31.replace("800.0", "-1").encode(), "BrokerLoadData of b:1.cpu.limit: must not be negative"),
    ],
    ids=["not-json", "cpu-not-an-object", "no-updatedAt", "negative-limit"],
)
def test_a_brokerloaddata_that_cannot_be_used_is_named_field_by_field(payload, named):
    with pytest.raises(SnapshotError, match=re.escape(named)):
        elm.parse_broker_load_data(payload, "BrokerLoadData of b:1")


def test_a_snapshot_of_an_elm_cluster_is_captured_from_its_topics_and_planned_offline_as_elm(capsys, tmp_path):
    out_file = tmp_path / "elm-snapshot.json"
    with elm_cluster() as (sim, reporters), advancing(sim):
        elm_settings = ["--set", f"elmServiceUrl={reporters.service_url}", "--set", "elmReadTimeoutSeconds=20"]
        code = cli.main(["snapshot", "--admin-url", sim.admin_url, "--out", str(out_file), *elm_settings])
        assert code == 0, capsys.readouterr().err
    doc = json.loads(out_file.read_text())
    assert len(doc["brokers"]) == 3 and doc["namespaces"]["t/ns"]["boundaries"][0] == "0x00000000"
    assert all(b["loadManagerClassName"] == elm.EXTENSIBLE for b in doc["brokers"].values())
    capsys.readouterr()
    code = cli.main(["rebalance", "--snapshot", str(out_file), "--output", "json"])
    plan = json.loads(capsys.readouterr().out)
    assert (
        code == 0
        and plan["shedding"] == "AvgShedder"
        and "AvgShedder chooses among each broker's top 10" in (plan["notes"][0])
    )
    code = cli.main(["rebalance", "--snapshot", str(out_file), "--strategy", "UniformLoadShedder", "--output", "json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["shedding"] == "UniformLoadShedder"
    assert (
        plan["placement"] == "LeastResourceUsageWithWeight"
        and "placing with LeastResourceUsageWithWeight" in (plan["notes"][1])
    )
    code = cli.main(["rebalance", "--snapshot", str(out_file), "--strategy", "PredictivePairingShedder"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "PredictivePairingShedder" in err[0]
    assert "ExtensibleLoadManagerImpl" in err[0]


def test_the_daemon_keeps_reading_elms_topics_between_cycles_and_labels_its_metric(tmp_path):
    with elm_cluster(wall_clock=False) as (sim, reporters):
        settings = OperatorSettings(
            adminUrl=sim.admin_url,
            elmServiceUrl=reporters.service_url,
            elmReadTimeoutSeconds=10,
            dryRun=True,
            stateFile=str(tmp_path / "state.json"),
            historyUri="",
            profileUri="",
            metricsPort=0,
            aggregateEveryMinutes=0,
        )
        client = AdminClient(sim.admin_url)
        daemon = Daemon(settings, LoadBalancerConfig(), client, "sim", clock_ms=lambda: sim.cluster.now_ms)
        try:
            reader = daemon.load_manager.connect(client)
            reporters.publish(force=True)
            assert reader.caught_up(reporters.sent, 10)
            first = daemon.run_once()
            sim.cluster.advance(60)  # checks every 5 s: top bundles after each sample, BrokerLoadData if it changed
            assert reader.caught_up(reporters.sent, 10)
            second = daemon.run_once()
            assert first.load_manager.extensible and second.load_manager.extensible
            assert daemon.load_manager.reader is reader  # the same readers: no second wait
            assert reader.received == reporters.sent and reporters.unchanged == 3 * 12
            assert len(second.snapshot.brokers) == 3 and second.plan.shedding == "AvgShedder"
            labels = {"cluster": "sim", "load_manager": "extensible", "version": "4.0.4-sim"}
            assert daemon.metrics.registry.get_sample_value("pulsar_lb_operator_load_manager_info", labels) == 1
        finally:
            daemon.close(0)
            client.close()
        assert daemon.load_manager.reader is None
        assert sim.mutating_requests() == []  # a dry run: the guard would turn the shedder off, and says so


def test_a_bundle_that_left_its_brokers_top_bundles_is_not_unloaded_for_the_rates_it_had_then():
    """ELM stops publishing a bundle's stats when it leaves its broker's top K: the averages kept from before
    are forgotten (elm.top_bundles_only), so AvgShedder picks from what is published now."""
    from pulsar_lb_operator.strategies import StrategyState
    from pulsar_lb_operator.strategies.planner import plan_cycle
    from tests.builders import NOW, broker_report, bundle, snapshot, stats

    hot, quiet, gone = bundle("t/ns", 0), bundle("t/ns", 1), bundle("t/ns", 2)
    config = LoadBalancerConfig().replace(
        {"loadBalancerAvgShedderHitCountLowThreshold": 1, "loadBalancerAvgShedderHitCountHighThreshold": 1}
    )
    earlier = snapshot(
        {"b0:8080": broker_report(cpu=(90, 100), bundles={gone: stats(0, 0, 9e6, 9e6)}), "b1:8080": broker_report()},
        taken_at=NOW - 60_000,
    )
    _, state = plan_cycle(earlier, config, StrategyState(), random.Random(0))  # ``gone`` was in b0's top bundles
    now = snapshot(
        {
            "b0:8080": broker_report(
                cpu=(90, 100), bundles={hot: stats(0, 0, 4e6, 4e6)}, extra_bundles=[quiet, gone], thr_in=40e6
            ),
            "b1:8080": broker_report(cpu=(10, 100)),
        }
    )
    stale_plan, _ = plan_cycle(now, config, state, random.Random(0))  # b0 is to shed 40 MB/s × 0.5
    assert [a.bundle for a in stale_plan.actions] == [gone]  # what the kept averages (18 MB/s) alone would do
    plan, _ = plan_cycle(now, config, elm.top_bundles_only(state, now), random.Random(0))
    assert [a.bundle for a in plan.actions] == [hot] and plan.actions[0].destination == "b1:8080"


@contextlib.contextmanager
def transfer_cycles(dry_run: bool = False):
    """An ELM cluster whose brokers published once, and ``cycle()``: one TransferShedder cycle of the operator (hit
    count threshold 0) against it, over real HTTP and the readers of a session kept across cycles."""
    with elm_cluster(wall_clock=False) as (sim, reporters):
        cluster = sim.cluster
        client = AdminClient(sim.admin_url, retries=1)
        session = elm.Session(reporters.service_url, read_timeout_s=2.0)
        config = LoadBalancerConfig().replace({"loadBalancerSheddingConditionHitCountThreshold": 0})
        executor = Executor(
            client, "sim", Safety(dry_run=dry_run), clock=lambda: cluster.now_ms / 1000, sleep=lambda _s: None
        )
        state = [OperatorState()]

        def cycle():
            context = CycleContext(client, "sim", config, executor, "TransferShedder", load_manager=session)
            result = run_cycle(context, state[0], random.Random(1), now_ms=cluster.now_ms)
            state[0] = result.state
            return result

        try:
            session.connect(client)
            reporters.publish(force=True)
            assert session.reader.caught_up(reporters.sent, 10)
            yield sim, session, cycle
        finally:
            session.close()
            client.close()


def _wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.02)


def test_a_broker_whose_load_data_is_a_tombstone_stops_transfershedders_cycle_until_it_writes_again():
    """A broker's reporter removes its BrokerLoadData (a tombstone) when its ownership changes: until it writes again
    the broker has no load data, and TransferShedder, as Pulsar's, skips the whole cycle (NoLoadData) — here on a
    cluster it would otherwise rebalance at once. Nothing is sent; once the broker writes, the cycle acts."""
    with transfer_cycles() as (sim, session, cycle):
        busy = sim.cluster.by_name("broker-0").id
        client = pulsar.Client(
            sim.cluster.elm_brokers.service_url, logger=pulsar.FileLogger(pulsar.LoggerLevel.Error, os.devnull)
        )
        try:
            client.create_producer(TOPIC).send(b"", partition_key=busy)  # as the broker's reporter does
        finally:
            client.close()
        _wait_until(lambda: session.reader.heard()[TOPIC][busy].payload is None)
        result = cycle()
        assert result.plan.actions == () and not [r for r in sim.requests if r.method == "PUT"]
        assert result.skipped_brokers == {busy: f"its BrokerLoadData on {TOPIC} was removed (a tombstone)"}
        assert result.plan.notes[0] == (
            f"TransferShedder: skip (NoLoadData: no load data of {busy}: its BrokerLoadData on {TOPIC} was removed "
            "(a tombstone))"
        )
        sim.cluster.elm_brokers.publish(force=True)
        assert session.reader.caught_up(sim.cluster.elm_brokers.sent, 10)
        assert [r.outcome for r in cycle().records] and [r for r in sim.requests if r.method == "PUT"]


def test_a_top_bundle_that_moved_after_its_broker_published_it_is_not_unloaded_from_that_broker():
    """TransferShedder checks each of the max broker's top bundles against its owner (the state channel; here
    ownedNamespaces): the top bundles broker-0 published have since moved to broker-2, before it published again,
    so none of them is unloaded from broker-0."""
    with transfer_cycles(dry_run=True) as (sim, session, cycle):
        cluster = sim.cluster
        busy, idle = cluster.by_name("broker-0").id, cluster.by_name("broker-2").id
        published = json.loads(session.reader.heard()[elm.TOP_BUNDLES_TOPIC][busy].payload)["topBundlesLoadData"]
        moved = [item["bundleName"] for item in published]
        for bundle in moved:
            sim_elm.transfer(cluster, bundle, busy, idle)  # the brokers' next check has not come yet
        result = cycle()
        assert moved and not [a for a in result.plan.actions if a.bundle in moved and a.source == busy]
        assert result.snapshot.brokers[busy].published.topBundles == tuple(moved)  # still what busy published


def test_a_dry_run_records_no_cooldown():
    """Only an unload that was sent puts its source in recentlyUnloadedBrokers (and its bundle in the grace period):
    a dry run plans, sends nothing, and leaves both empty — the next cycle may act on the same brokers."""
    with transfer_cycles(dry_run=True) as (sim, _session, cycle):
        result = cycle()
        outcomes = {r.outcome for r in result.records}  # what would be sent, and what the per-broker cap defers
        assert result.plan.actions and Outcome.DRY_RUN in outcomes and outcomes <= {Outcome.DRY_RUN, Outcome.SKIPPED}
        assert dict(result.state.strategy.transfer_recent_brokers) == {}
        assert dict(result.state.strategy.recently_unloaded) == {}
        again = cycle()
        assert [a.bundle for a in again.plan.actions] == [a.bundle for a in result.plan.actions]  # no CoolDown
        assert not [r for r in sim.requests if r.method == "PUT"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_only_the_first_read_waits_and_says_so_up_front_with_a_progress_line_on_a_terminal():
    """Readers kept across cycles: the first cycle waits for every broker (at most elmReadTimeoutSeconds from when
    they connected), said up front with why, and shown on a terminal as it goes (brokers heard, time left); a later
    cycle does not wait again. Here no broker publishes (simulated time stands still), so both cycles end with the
    one-line error. The readers are at the cluster's brokerServiceUrl: no ELM setting."""
    with elm_cluster() as (sim, _):
        client = AdminClient(sim.admin_url, retries=1)
        tell, terminal = io.StringIO(), _Terminal()
        session = elm.Session(read_timeout_s=2.0, tell=tell, progress=elm.WaitLine(terminal))
        found = session.detect(client)
        try:
            for _ in range(2):
                with pytest.raises(elm.ElmDataUnreadable, match="no active broker's BrokerLoadData"):
                    session.collect(client, "sim", LoadBalancerConfig(), found)
        finally:
            session.close()
            client.close()
    said = tell.getvalue().splitlines()
    assert len(said) == 1 and "waiting up to 2 s for the 3 not heard yet" in said[0]  # the first cycle only
    shown = terminal.getvalue()
    assert "\rwaiting for the extensible load manager's load data: 0 of 3 brokers heard, up to 2 s left" in shown
    assert shown.endswith("\r") and shown.rstrip("\r").endswith(" ")  # the line is cleared when the wait ends
    assert elm.WaitLine.on_terminal(io.StringIO()) is None  # not a terminal: no line at all


def test_the_executor_transfers_on_elm_and_verifies_the_destination_owns_it_and_names_a_transfer_to_the_owner():
    """ELM's transfer as the operator observes it: the unload goes to the owner with destinationBroker (no leader
    hop), the destination owns the bundle when the 204 comes; the verification a cycle later says so. An unload
    whose bundle reached the destination in between gets ELM's 500, named as such, and verifies as planned."""
    from pulsar_lb_operator.records import ExecutorState
    from pulsar_lb_operator.strategies.plans import Plan, Unload

    with elm_cluster(publish=False) as (sim, _):
        cluster = sim.cluster
        client = AdminClient(sim.admin_url, retries=1)
        executor = Executor(
            client, "sim", Safety(dry_run=False), clock=lambda: cluster.now_ms / 1000, sleep=lambda _s: None
        )
        source, destination = cluster.by_name("broker-0").id, cluster.by_name("broker-2").id
        first, second = sorted(cluster.owned_by(source))[:2]
        try:
            plan = Plan("TransferShedder", "(transfer)", cluster.now_ms, (Unload(first, source, destination, "t"),))
            records, state = executor.apply(plan, ExecutorState())
            assert [r.outcome for r in records] == [Outcome.EXECUTED]
            assert cluster.owner_of(first) == destination and not cluster.affinity  # done when the 204 came
            puts = [r for r in sim.requests if r.method == "PUT"]
            assert puts and puts[-1].broker == source and puts[-1].status == 204  # answered by the owner
            assert all(f"destinationBroker={destination.replace(':', '%3A')}" in r.query for r in puts), puts
            sim_elm.transfer(cluster, second, source, destination)  # moved by someone else in between
            plan = Plan("TransferShedder", "(transfer)", cluster.now_ms, (Unload(second, source, destination, "t"),))
            records, state = executor.apply(plan, state)
            assert [r.outcome for r in records] == [Outcome.UNKNOWN]
            assert f"already owned by {destination}" in records[0].detail, records[0].detail
            cluster.advance(executor.safety.verify_after_seconds + 1)
            verified, state = executor.verify(state)
        finally:
            client.close()
        assert {(r.action.bundle, r.outcome) for r in verified} == {
            (first, Outcome.MOVED_AS_PLANNED),
            (second, Outcome.MOVED_AS_PLANNED),
        }
        assert state.pending == ()


def test_on_elms_reporting_cadence_kept_readers_hold_every_broker_and_the_rest_are_skipped_by_name():
    """Real ELM brokers write BrokerLoadData only on a 10 % change or every 15 minutes, on non-persistent topics.
    Readers kept open across cycles hold each broker's latest, checked for age; a broker not heard from, or
    heard too long ago, is skipped with its reason; when none is usable the cycle stops with one error."""
    with elm_cluster(wall_clock=False) as (sim, reporters):
        cluster, bld = sim.cluster, elm.BROKER_LOAD_DATA_TOPIC
        client = AdminClient(sim.admin_url, retries=1)
        kept, fresh = elm.Session(reporters.service_url, read_timeout_s=2.0), None
        config = LoadBalancerConfig()
        try:
            found = kept.detect(client)
            kept.connect(client)
            reporters.publish(force=True)  # the brokers start: each writes once
            assert kept.reader.caught_up(reporters.sent, 10)
            first = kept.collect(client, "sim", config, found, now_ms=cluster.now_ms)
            assert set(first.snapshot.brokers) == set(cluster.active_ids()) and not first.skipped
            written = reporters.sent[bld]
            for _ in range(6):  # six steady minutes: top bundles every sample, no BrokerLoadData
                cluster.advance(60)
            assert kept.reader.caught_up(reporters.sent, 10) and reporters.sent[bld] == written
            second = kept.collect(client, "sim", config, found, now_ms=cluster.now_ms)
            assert set(second.snapshot.brokers) == set(cluster.active_ids()) and not second.skipped
            assert all(cluster.now_ms - load.lastUpdate >= 360_000 for load in second.snapshot.brokers.values())

            strict = config.replace({"loadBalancerBrokerLoadDataTTLInSeconds": 120})  # older than this: stale
            with pytest.raises(elm.ElmDataUnreadable, match=r"3 active brokers, 0 not heard, 3 unusable: .* stale"):
                kept.collect(client, "sim", strict, found, now_ms=cluster.now_ms)

            fresh = elm.Session(reporters.service_url, read_timeout_s=2.0)  # an operator started just now
            fresh.connect(client)
            before = dict(reporters.sent)  # what the fresh readers never saw
            busy, idle = cluster.by_name("broker-0").id, cluster.by_name("broker-2").id
            steady = cluster.by_name("broker-1").id
            for bundle in sorted(cluster.owned_by(busy))[:2]:
                sim_elm.transfer(cluster, bundle, busy, idle)  # an ownership change: a tombstone, then new data
            cluster.advance(60)
            assert kept.reader.caught_up(reporters.sent, 10)
            assert fresh.reader.caught_up({t: n - before[t] for t, n in reporters.sent.items()}, 10)
            # busy's and idle's tombstones; their BrokerLoadData at the next check (the averages start over, from the
            # sample before the move); again after their next sample (their throughput changed by more than 10 %)
            assert reporters.sent[bld] == written + 6
            heard_now = fresh.collect(client, "sim", config, found, now_ms=cluster.now_ms)
            assert set(heard_now.snapshot.brokers) == {busy, idle}
            assert heard_now.skipped == {steady: f"no BrokerLoadData on {bld} within 2 s of reading it"}
            held = kept.collect(client, "sim", strict, found, now_ms=cluster.now_ms)
            assert set(held.snapshot.brokers) == {busy, idle}
            assert set(held.skipped) == {steady}
            assert "BrokerLoadData is stale: updated 420 s ago" in held.skipped[steady]
        finally:
            kept.close()
            if fresh is not None:
                fresh.close()
            client.close()


class _FakePulsar:
    """Stands in for pulsar.Client: records how it was made; its readers never receive anything."""

    made: ClassVar[list] = []

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs, self.readers = args, kwargs, []
        _FakePulsar.made.append(self)

    def create_reader(self, topic, start, **kwargs):
        self.readers.append((topic, start, kwargs))
        return self

    def read_next(self, timeout_ms):
        import pulsar

        time.sleep(timeout_ms / 1000)
        raise pulsar.Timeout()

    def close(self):
        pass


CLUSTER_DATA = {
    "serviceUrl": "http://pulsar-broker.pulsar.svc:8080",
    "serviceUrlTls": "https://pulsar-broker.pulsar.svc:8443",
    "brokerServiceUrl": "pulsar://pulsar-broker.pulsar.svc:6650",
    "brokerServiceUrlTls": "pulsar+ssl://pulsar-broker.pulsar.svc:6651",
}


@pytest.mark.parametrize("plugin", ["token", "tls", "oauth2"])
def test_elms_readers_authenticate_as_the_admin_client_does_at_the_clusters_own_service_url(
    plugin, tmp_path, monkeypatch
):
    """pulsar-lite has no authentication, so the readers' credentials are checked where they are handed over:
    pulsar.Client's construction arguments (the same credentials object as the admin client's). The URL is the
    cluster's, from its metadata: brokerServiceUrlTls, the admin URL being https."""
    import pulsar

    from pulsar_lb_operator.run import live

    made = {}
    for name in ("AuthenticationToken", "AuthenticationTLS", "AuthenticationOauth2"):
        monkeypatch.setattr(pulsar, name, lambda *a, _n=name, **k: made.setdefault(_n, (a, k)) and _n)
    monkeypatch.setattr(pulsar, "Client", _FakePulsar)
    _FakePulsar.made = []
    (tmp_path / "ca.pem").write_text("-")
    values = auth_settings(plugin, tmp_path)
    settings = OperatorSettings(
        adminUrl="https://pulsar-broker.pulsar.svc:8443", cluster="c", caBundle=str(tmp_path / "ca.pem"), **values
    )
    client, _ = live.connect(settings)
    asked = []
    monkeypatch.setattr(client, "get_json", lambda path, **_: asked.append(path) or CLUSTER_DATA)
    session = elm.Session.from_settings(settings.elm())
    try:
        session.connect(client, "c")
    finally:
        session.close()
        client.close()
    assert asked == ["/admin/v2/clusters/c"]
    (made_client,) = _FakePulsar.made
    assert made_client.args == ("pulsar+ssl://pulsar-broker.pulsar.svc:6651",)
    assert made_client.kwargs["tls_trust_certs_file_path"] == str(tmp_path / "ca.pem")
    assert made_client.kwargs["tls_allow_insecure_connection"] is False
    assert made_client.kwargs["tls_validate_hostname"] is True
    assert {topic for topic, _, _ in made_client.readers} == set(elm.TOPICS)
    assert all(start == pulsar.MessageId.latest for _, start, _ in made_client.readers)  # non-persistent: from now
    expected = {"token": "AuthenticationToken", "tls": "AuthenticationTLS", "oauth2": "AuthenticationOauth2"}[plugin]
    assert made_client.kwargs["authentication"] == expected and set(made) == {expected}
    args, _ = made[expected]
    if plugin == "token":
        assert args[0]() == "s3cret"  # read from the file at each (re)connection: rotation reaches the reader
    elif plugin == "tls":
        assert args == (str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    else:
        assert json.loads(args[0])["issuer_url"] == "https://idp.example"


@pytest.mark.parametrize(
    ("admin_url", "metadata", "expected"),
    [
        ("http://pulsar-broker.pulsar.svc:8080", CLUSTER_DATA, "pulsar://pulsar-broker.pulsar.svc:6650"),
        (
            "https://pulsar-broker.pulsar.svc:8443",
            {"brokerServiceUrl": "pulsar://pulsar-broker.pulsar.svc:6650"},
            "is plain pulsar:// and the admin URL is https",
        ),
        (
            "http://pulsar-broker.pulsar.svc:8080",
            {"brokerServiceUrl": "pulsar://pulsar-broker.pulsar.svc.:6650,PULSAR-BROKER.pulsar.svc:6651"},
            "pulsar://pulsar-broker.pulsar.svc.:6650,PULSAR-BROKER.pulsar.svc:6651",
        ),
        ("http://pulsar-broker.pulsar.svc:8080", {"serviceUrl": "http://x:8080"}, "has no brokerServiceUrl"),
        ("http://pulsar-broker.pulsar.svc:8080", {"brokerServiceUrl": "http://x:6650"}, "is not a pulsar://"),
        (
            "http://pulsar-broker.pulsar.svc:8080",
            {"brokerServiceUrl": "pulsar://elsewhere.example:6650"},
            "on elsewhere.example:6650, a host neither the admin URL nor the broker list names",
        ),
        ("http://pulsar-broker.pulsar.svc:8080", None, "the cluster's service URL is unknown"),
    ],
    ids=[
        "http-plain",
        "https-without-tls-url",
        "several-hosts-any-port",
        "no-url",
        "not-pulsar",
        "unknown-host-with-a-token",
        "unreadable",
    ],
)
def test_the_service_url_is_the_clusters_brokerserviceurl_or_a_one_line_reason_to_set_elmserviceurl(
    admin_url, metadata, expected, monkeypatch
):
    client = AdminClient(admin_url, token="s3cret")

    def get_json(path, **_):
        if metadata is None:
            raise AdminError(path, "HTTP 403: Forbidden")
        return metadata

    monkeypatch.setattr(client, "get_json", get_json)
    if expected.startswith("pulsar"):
        assert elm.cluster_service_url(client, "c") == expected
    else:
        with pytest.raises(elm.ElmDataUnreadable, match=re.escape(expected)) as raised:
            elm.cluster_service_url(client, "c")
        assert "set elmServiceUrl" in str(raised.value) and "\n" not in str(raised.value)
