"""Injected faults over real loopback HTTP: every kind, the matching rules, the request log and the CLI."""

import io
import json
import threading
import time

import pytest
import requests

from pulsar_lb_operator import cli
from pulsar_lb_operator.sandbox import demo
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.faults import FaultRule, FaultSpecError, parse_fault
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import ScenarioError, load_scenario, parse_scenario
from tests.builders import SMALL_SCENARIO as SMALL

T = (2, 10)


def owned(sim, name):
    return sim.cluster.owned_by(sim.cluster.by_name(name).id)


def unload_url(sim, broker, bundle):
    namespace, _, bundle_range = bundle.rpartition("/")
    return f"{sim.url_of(broker)}/admin/v2/namespaces/{namespace}/{bundle_range}/unload"


def served(rules=None, request_log=None, **scenario):
    """SMALL with ``scenario``'s keys on top; ``rules``: SimulatedPulsar's faults (None: the scenario's)."""
    data = {**SMALL, **scenario}
    return serve(
        lambda allocate: SimulatedCluster(parse_scenario(data), allocate), faults=rules, request_log=request_log
    )


def test_status_answers_without_doing_anything(sim):
    bundle = owned(sim, "broker-1")[0]
    owner = sim.cluster.owner_of(bundle)
    sim.add_fault("broker-1:PUT:/unload:status=500")
    resp = requests.put(unload_url(sim, "broker-1", bundle), timeout=T)
    assert resp.status_code == 500 and resp.json() == {"reason": "injected fault"}
    assert sim.cluster.owner_of(bundle) == owner  # not moved
    assert sim.faults_fired == 1


def test_status_after_does_the_work_then_answers_the_code(sim):
    bundle = owned(sim, "broker-1")[0]
    sim.add_fault("broker-1:PUT:/unload:status-after=500")
    resp = requests.put(unload_url(sim, "broker-1", bundle), timeout=T)
    assert resp.status_code == 500 and resp.json() == {"reason": "injected fault"}
    assert sim.cluster.owner_of(bundle) is None  # the unload happened
    assert sim.faults_fired == 1


def test_after_kinds_let_redirects_and_errors_through_uncounted(sim):
    bundle = owned(sim, "broker-1")[0]
    sim.add_fault("*:PUT:/unload:status-after=503")
    hop = requests.put(unload_url(sim, "broker-0", bundle), allow_redirects=False, timeout=T)
    assert hop.status_code == 307 and sim.faults_fired == 0  # broker-0 only redirects: no effect to come after
    missing = requests.put(unload_url(sim, "broker-1", "t/ns/0x00000000_0x00000001"), timeout=T)
    assert missing.status_code in (404, 412) and sim.faults_fired == 0
    resp = requests.put(hop.headers["Location"], timeout=T)  # the owner does the work, then fails
    assert resp.status_code == 503 and sim.cluster.owner_of(bundle) is None and sim.faults_fired == 1


def test_reset_drops_the_connection_without_effect_and_reset_after_with_it(sim):
    first, second = owned(sim, "broker-1")[:2]
    owner = sim.cluster.owner_of(first)
    sim.add_fault("broker-1:PUT:/unload:reset@1")
    with pytest.raises(requests.ConnectionError):
        requests.put(unload_url(sim, "broker-1", first), timeout=T)
    assert sim.cluster.owner_of(first) == owner
    sim.add_fault("broker-1:PUT:/unload:reset-after")
    with pytest.raises(requests.ConnectionError):
        requests.put(unload_url(sim, "broker-1", second), timeout=T)
    assert sim.cluster.owner_of(second) is None  # the broker unloaded it, then died before answering
    assert [r.status for r in sim.requests[-2:]] == [0, 0]
    assert requests.get(f"{sim.url_of('broker-1')}/admin/v2/brokers/health", timeout=T).text == "ok"


def test_garbage_is_not_json(sim):
    sim.add_fault("broker-2:GET:/load-report:garbage")
    resp = requests.get(f"{sim.url_of('broker-2')}/admin/v2/broker-stats/load-report", timeout=T)
    assert resp.status_code == 200 and resp.headers["Content-Type"] == "application/json"
    with pytest.raises(UnicodeDecodeError):
        resp.content.decode("utf-8")
    with pytest.raises(requests.JSONDecodeError):
        resp.json()


def test_html401_is_jettys_page(sim):
    sim.add_fault("broker-0:*:/admin/v2/brokers/configuration:html401")
    resp = requests.get(f"{sim.admin_url}/admin/v2/brokers/configuration/values", timeout=T)
    assert resp.status_code == 401 and resp.headers["Content-Type"] == "text/html"
    assert "HTTP ERROR 401" in resp.text


def test_delay_then_normal_answer(sim):
    sim.add_fault("broker-0:GET:/brokers/health:delay=0.3")
    started = time.monotonic()
    resp = requests.get(f"{sim.admin_url}/admin/v2/brokers/health", timeout=T)
    assert time.monotonic() - started >= 0.3
    assert resp.status_code == 200 and resp.text == "ok"


def test_method_broker_and_path_must_all_match(sim):
    bundle = owned(sim, "broker-1")[0]
    sim.add_fault("broker-1:PUT:/unload:status=500")
    assert requests.get(unload_url(sim, "broker-1", bundle), timeout=T).status_code == 405  # a GET: not matched
    health = "/admin/v2/brokers/health"
    assert requests.get(f"{sim.url_of('broker-1')}{health}", timeout=T).status_code == 200  # another path
    sim.clear_faults()
    sim.add_fault(parse_fault("*:get:/load-report:status=503", sim.broker_names))
    for name in ("broker-0", "broker-1", "broker-2"):
        resp = requests.get(f"{sim.url_of(name)}/admin/v2/broker-stats/load-report", timeout=T)
        assert resp.status_code == 503
    assert sim.faults_fired == 3


def test_count_limit_and_runtime_changes(sim):
    rule = sim.add_fault("broker-0:GET:/brokers/health:status=500@2")
    url = f"{sim.admin_url}/admin/v2/brokers/health"
    assert [requests.get(url, timeout=T).status_code for _ in range(3)] == [500, 500, 200]
    assert sim.fault_counts() == [(rule, 2)] and sim.faults_fired == 2
    sim.add_fault(FaultRule("broker-0", "GET", "/brokers/health", "status", 502))
    assert requests.get(url, timeout=T).status_code == 502
    assert sim.remove_fault("broker-0:GET:/brokers/health:status=502") is True
    assert requests.get(url, timeout=T).status_code == 200
    assert sim.active_faults == [rule] and sim.faults_fired == 3
    with pytest.raises(FaultSpecError, match="unknown broker 'broker-7'"):
        sim.add_fault(FaultRule("broker-7", "GET", "/", "reset"))


def test_a_rule_may_carry_its_own_body(sim):
    """A rule made in code may answer any body: text/plain by default, or the type it names."""
    sim.add_fault(FaultRule("broker-1", path="/brokers/health", kind="delay", delay_s=0.2))
    sim.add_fault(FaultRule("broker-2", path="/load-report", status=500, body="--- boom"))
    sim.add_fault(
        FaultRule("broker-0", "GET", "/ownedNamespaces", status=200, body="[]", content_type="application/json")
    )
    started = time.monotonic()
    assert requests.get(f"{sim.url_of('broker-1')}/admin/v2/brokers/health", timeout=T).text == "ok"
    assert time.monotonic() - started >= 0.2
    resp = requests.get(f"{sim.url_of('broker-2')}/admin/v2/broker-stats/load-report", timeout=T)
    assert resp.status_code == 500 and resp.text == "--- boom" and resp.headers["Content-Type"] == "text/plain"
    owned = f"{sim.admin_url}/admin/v2/brokers/sim/{sim.cluster.by_name('broker-0').id}/ownedNamespaces"
    resp = requests.get(owned, timeout=T)
    assert resp.json() == [] and resp.headers["Content-Type"] == "application/json"


def test_request_log_has_one_json_line_per_request_with_user_agent_and_fault(tmp_path):
    log = tmp_path / "requests.jsonl"
    before_ms = int(time.time() * 1000)
    with served(["broker-1:GET:/load-report:reset", "broker-2:*:/health:status=500@1"], request_log=log) as sim:
        headers = {"User-Agent": "rehearsal/1"}
        assert requests.get(f"{sim.admin_url}/admin/v2/brokers/health", headers=headers, timeout=T).status_code == 200
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{sim.url_of('broker-1')}/admin/v2/broker-stats/load-report", headers=headers, timeout=T)
        resp = requests.get(f"{sim.url_of('broker-2')}/admin/v2/brokers/health?x=1", headers=headers, timeout=T)
        assert resp.status_code == 500
        assert [r.user_agent for r in sim.requests] == ["rehearsal/1"] * 3
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(x["broker"], x["method"], x["path"], x["status"], x["fault"]) for x in lines] == [
        ("broker-0", "GET", "/admin/v2/brokers/health", 200, None),
        ("broker-1", "GET", "/admin/v2/broker-stats/load-report", 0, "broker-1:GET:/load-report:reset"),
        ("broker-2", "GET", "/admin/v2/brokers/health", 500, "broker-2:*:/health:status=500@1"),
    ]
    assert all(x["userAgent"] == "rehearsal/1" and x["at"] >= before_ms for x in lines)
    assert lines[2]["query"] == "x=1" and lines[2]["brokerId"].startswith("127.0.0.1:")


def test_scenario_faults_load_and_are_armed_when_served():
    faults = [
        "broker-1:PUT:/unload:status-after=500@1",
        {"broker": "broker-2", "path": "/load-report", "kind": "garbage", "count": 2},
        {"method": "GET", "path": "/health", "kind": "delay=0.1"},
    ]
    with served(faults=faults) as sim:
        assert [r.spec for r in sim.active_faults] == [
            "broker-1:PUT:/unload:status-after=500@1",
            "broker-2:*:/load-report:garbage@2",
            "*:GET:/health:delay=0.1",
        ]
        resp = requests.get(f"{sim.url_of('broker-2')}/admin/v2/broker-stats/load-report", timeout=T)
        assert resp.status_code == 200 and not resp.content.startswith(b"{")
    with served(rules=(), faults=faults) as sim:
        assert sim.active_faults == []  # faults=() serves the scenario without its faults


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        (["broker-9:PUT:/unload:reset"], "faults[0] 'broker-9:PUT:/unload:reset': unknown broker 'broker-9'"),
        (["broker-0:PUT:/unload:explode"], "faults[0] 'broker-0:PUT:/unload:explode': unknown kind 'explode'"),
        ([{"path": "/unload", "kind": "reset", "when": 1}], "faults[0]: unknown key 'when'"),
        ([{"path": "/unload"}], "faults[0].kind: expected a non-empty string"),
        ("broker-0:PUT:/unload:reset", "faults: expected a list"),
    ],
)
def test_bad_scenario_faults_name_the_entry(faults, message):
    with pytest.raises(ScenarioError, match=r"^" + message.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario({**SMALL, "faults": faults})


def test_a_fault_may_target_a_broker_an_event_adds_later():
    events = [{"at_minute": 1, "type": "add_broker", "broker": "late"}]
    scenario = parse_scenario({**SMALL, "events": events, "faults": ["late:*:/:reset"]})
    assert scenario.faults[0].broker == "late"


def test_cli_rejects_a_bad_fault_with_one_line(capsys):
    assert cli.main(["simulate", "demo", "--fault", "bad"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("operator: error: --fault 'bad': expected BROKER:METHOD:")
    assert cli.main(["simulate", "demo", "--fault", "broker-9:PUT:/unload:reset"]) == 2
    assert "unknown broker 'broker-9'" in capsys.readouterr().err


def test_cli_rejects_an_unwritable_request_log(tmp_path, capsys):
    assert cli.main(["simulate", "demo", "--request-log", str(tmp_path / "missing" / "log.jsonl")]) == 2
    assert capsys.readouterr().err.startswith("operator: error: cannot write request log ")


def test_simulate_prints_the_faults_and_writes_the_request_log(tmp_path):
    scenario = tmp_path / "faulty.yaml"
    scenario.write_text(
        "brokers: [{count: 2}]\n"
        "namespaces: [{name: t/ns, bundles: 2, topics: 4}]\n"
        'faults: ["broker-0:GET:/brokers/health:status=500@1"]\n'
    )
    assert [r.spec for r in load_scenario(scenario).faults] == ["broker-0:GET:/brokers/health:status=500@1"]
    log = tmp_path / "requests.jsonl"
    out = io.StringIO()
    stop = threading.Event()

    seen = {}

    def ready(sim):  # called once the brokers listen; run_simulator returns as soon as stop is set
        url = f"{sim.admin_url}/admin/v2/brokers/health"
        seen["statuses"] = [requests.get(url, timeout=T).status_code for _ in range(2)]
        stop.set()

    faults = ["*:PUT:/unload:reset-after"]
    code = demo.run_simulator(str(scenario), None, 60.0, None, stop, ready, out, faults=faults, request_log=str(log))
    assert code == 0 and seen["statuses"] == [500, 200]
    text = out.getvalue()
    assert "Injected faults (2):\n  broker-0:GET:/brokers/health:status=500@1\n  *:PUT:/unload:reset-after\n" in text
    assert "Faults fired: 1" in text
    assert [json.loads(line)["status"] for line in log.read_text().splitlines()] == [500, 200]
