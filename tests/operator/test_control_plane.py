"""The status page's mutating endpoints need the control token, whatever the cluster's auth, and from wherever
the request comes: over real HTTP on loopback, from 127.0.0.2 as well as 127.0.0.1 (Linux routes all of 127/8
on loopback, so a client bound to 127.0.0.2 is a caller the page has never seen)."""

from __future__ import annotations

import http.client
import json
import re
from urllib.parse import urlencode

import pytest
from structlog.testing import capture_logs

from pulsar_lb_operator.run import endpoints
from pulsar_lb_operator.simulator.faults import FaultRule
from pulsar_lb_operator.strategies.config import ConfigError
from tests.builders import free_port
from tests.operator.test_controls import Standby
from tests.operator.test_workflows import CONTROL_TOKEN, control_token_file, running
from tests.operator.test_workflows import sim as sim

FORM = "application/x-www-form-urlencoded"


def call(port, method, path, fields=None, headers=None, source="127.0.0.2", raw=None):
    """One request, from ``source``: (status, body, headers)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        body = raw if raw is not None else (urlencode(fields).encode() if fields is not None else None)
        sent = {"Content-Type": FORM, **(headers or {})} if body is not None else dict(headers or {})
        connection.request(method, path, body=body, headers=sent)
        answer = connection.getresponse()
        return answer.status, answer.read().decode(), dict(answer.getheaders())
    finally:
        connection.close()


@pytest.fixture
def daemon(sim, tmp_path, request):
    """A daemon acting (approval manual unless the test says otherwise) with its page on a free port."""
    settings = {"metricsPort": free_port(), "metricsHost": "127.0.0.1", "approval": "manual"}
    settings |= getattr(request, "param", {})
    if "controlTokenFile" not in settings:
        settings["controlTokenFile"] = control_token_file(tmp_path)
    with running(sim, tmp_path, **{k: v for k, v in settings.items() if v is not None}) as running_daemon:
        server = running_daemon._start_probe_server()
        running_daemon.port = settings["metricsPort"]
        try:
            yield running_daemon
        finally:
            endpoints.stop(server)


def unchanged(daemon, pending):
    control = daemon.control.read()
    assert control.drains == {} and control.proposals[pending]["status"] == "pending"
    assert daemon.executor.safety.kill_switch() is None


def every_change(daemon, pending, busy, fields):
    """Each mutating route with its form, and ``fields`` added (a CSRF value an attacker scraped, …)."""
    return [
        (f"/proposals/{pending}/approve", fields),
        (f"/proposals/{pending}/reject", fields),
        ("/drains", {**fields, "broker": busy}),
        (f"/drains/{busy}/undrain", fields),
        ("/pause", {**fields, "reason": "x"}),
        ("/resume", fields),
    ]


def test_an_unauthenticated_post_from_another_address_changes_nothing(sim, daemon):
    """The page is readable without the admin token (none is configured here), so an attacker can load it and
    take every value its forms carry: still 403, nothing changed, each refusal logged with the address."""
    pending = daemon.run_once().cycle_id
    busy = sim.cluster.by_name("broker-0").id
    status, page, _ = call(daemon.port, "GET", "/")
    assert status == 200 and pending in page
    scraped = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page))
    origin = {"Origin": f"http://127.0.0.1:{daemon.port}"}
    with capture_logs() as logs:
        for path, fields in every_change(daemon, pending, busy, scraped):
            assert call(daemon.port, "POST", path, fields, origin)[0] == 403, path
    unchanged(daemon, pending)
    refusals = [e for e in logs if e["event"] == "control request"]
    assert len(refusals) == 6 and {e["remote"] for e in refusals} == {"127.0.0.2"}
    assert {e["outcome"] for e in refusals} == {"refused"} and {e["action"] for e in refusals} >= {"drain", "pause"}


def test_the_control_token_as_a_bearer_works_from_any_address_and_is_logged(sim, daemon):
    daemon.run_once()
    busy = sim.cluster.by_name("broker-0").id
    bearer = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    with capture_logs() as logs:
        status, text, _ = call(daemon.port, "POST", "/drains", {"broker": busy}, bearer)
    assert status == 200 and text.startswith(f"draining {busy}")
    assert daemon.control.read().drains[busy]["by"] == "status page (127.0.0.2)"
    assert [(e["action"], e["target"], e["remote"], e["outcome"]) for e in logs if e["event"] == "control request"] == [
        ("drain", busy, "127.0.0.2", "done")
    ]
    assert CONTROL_TOKEN not in str(logs)
    assert call(daemon.port, "POST", "/pause", {"reason": "deploy freeze"}, bearer)[0] == 200
    assert daemon.executor.safety.kill_switch().by == "status page (127.0.0.2)"
    assert call(daemon.port, "POST", "/resume", {}, bearer)[0] == 200
    assert daemon.executor.safety.kill_switch() is None


@pytest.mark.parametrize("daemon", [{"tokenFile": "admin-token"}], indirect=True)
def test_the_admin_token_reads_but_does_not_control(sim, daemon, tmp_path):
    """Whatever the cluster's auth: the admin token opens the page, only the control token changes anything."""
    pending = daemon.run_once().cycle_id
    busy = sim.cluster.by_name("broker-0").id
    admin = {"Authorization": "Bearer admin-secret"}
    assert call(daemon.port, "GET", "/")[0] == 401
    assert call(daemon.port, "GET", "/api/status", headers=admin)[0] == 200
    assert call(daemon.port, "GET", "/metrics")[0] == 200 and call(daemon.port, "GET", "/healthz")[0] == 200
    for path, fields in every_change(daemon, pending, busy, {}):
        assert call(daemon.port, "POST", path, fields, admin)[0] == 403
    unchanged(daemon, pending)
    control = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    assert call(daemon.port, "GET", "/api/status", headers=control)[0] == 200  # the control token reads too


@pytest.fixture(autouse=True)
def _admin_token(tmp_path, monkeypatch):
    (tmp_path / "admin-token").write_text("admin-secret\n")
    monkeypatch.chdir(tmp_path)  # tokenFile: admin-token


def sign_in(port, source="127.0.0.1"):
    origin = {"Origin": f"http://127.0.0.1:{port}"}
    status, _, headers = call(port, "POST", "/login", {"token": CONTROL_TOKEN}, origin, source)
    assert status == 303
    cookie = headers["Set-Cookie"].split(";")[0]
    page = call(port, "GET", "/", headers={"Cookie": cookie}, source=source)[1]
    return cookie, re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)


def test_a_session_post_needs_its_csrf_value_and_the_pages_own_origin(sim, daemon, tmp_path):
    pending = daemon.run_once().cycle_id
    busy = sim.cluster.by_name("broker-0").id
    cookie, csrf = sign_in(daemon.port)
    own = f"http://127.0.0.1:{daemon.port}"
    refused = [
        ({"Cookie": cookie, "Origin": own}, {}),  # no CSRF value
        ({"Cookie": cookie, "Origin": own}, {"csrf": "0" * 32}),  # a wrong one
        ({"Cookie": cookie, "Origin": "http://127.0.0.1:1"}, {"csrf": csrf}),  # another origin, same host
        ({"Cookie": cookie, "Origin": "null"}, {"csrf": csrf}),  # a sandboxed frame, a data: page
        ({"Cookie": cookie}, {"csrf": csrf}),  # neither Origin nor Referer
        ({"Cookie": cookie, "Referer": "http://evil.example/x"}, {"csrf": csrf}),
    ]
    for headers, fields in refused:
        for path, form in every_change(daemon, pending, busy, fields):
            assert call(daemon.port, "POST", path, form, headers)[0] == 403, (headers, path)
    unchanged(daemon, pending)
    ok = call(daemon.port, "POST", "/drains", {"csrf": csrf, "broker": busy}, {"Cookie": cookie, "Referer": own + "/"})
    assert ok[0] == 303 and busy in daemon.control.read().drains
    # a new control token ends every session
    (tmp_path / "control-token").write_text("another-control-token-0123456789\n")
    answer = call(daemon.port, "POST", f"/drains/{busy}/undrain", {"csrf": csrf}, {"Cookie": cookie, "Origin": own})
    assert answer[0] == 403 and busy in daemon.control.read().drains


def test_signing_out_ends_the_session_on_the_daemon_not_only_in_the_browser(sim, daemon):
    """Sign out clears the browser's cookie; a copy of it (a shared screen's devtools, a proxy's log) controls
    nothing after, though it is still signed and unexpired. Another session goes on."""
    own = {"Origin": f"http://127.0.0.1:{daemon.port}"}
    cookie, csrf = sign_in(daemon.port)
    other, other_csrf = sign_in(daemon.port)
    status, _, headers = call(daemon.port, "POST", "/logout", {"csrf": csrf}, {"Cookie": cookie, **own})
    assert status == 303 and "Max-Age=0" in headers["Set-Cookie"]
    assert call(daemon.port, "POST", "/pause", {"csrf": csrf}, {"Cookie": cookie, **own})[0] == 403
    assert "Sign in" in call(daemon.port, "GET", "/", headers={"Cookie": cookie})[1]
    assert daemon.executor.safety.kill_switch() is None
    assert call(daemon.port, "POST", "/pause", {"csrf": other_csrf}, {"Cookie": other, **own})[0] == 303
    assert daemon.executor.safety.kill_switch() is not None


def test_an_unreadable_control_file_leaves_the_kill_switch_on_the_page(sim, daemon):
    """Proposals and drains cannot be shown; the page says why, and still shows the kill switch and its Pause,
    which works whatever that file holds (before, the page and /api/status were a bare 500)."""
    daemon.run_once()
    daemon.control.path.write_text('{"format": "pulsar-lb-control/1", "proposals": [], "drains": {}}')
    cookie, csrf = sign_in(daemon.port)
    status, page, _ = call(daemon.port, "GET", "/", headers={"Cookie": cookie})
    assert status == 200 and 'id="kill-switch"' in page and ">Pause</button>" in page
    assert "unknown: " in page and "repair or remove it" in page
    api = json.loads(call(daemon.port, "GET", "/api/status")[1])
    assert "repair or remove it" in api["controlFile"]["error"] and api["killSwitch"] == {"on": False}
    own = {"Origin": f"http://127.0.0.1:{daemon.port}"}
    assert call(daemon.port, "POST", "/pause", {"csrf": csrf, "reason": "x"}, {"Cookie": cookie, **own})[0] == 303
    assert daemon.executor.safety.kill_switch() is not None


def test_a_failed_cycle_is_on_the_page_with_the_time_of_its_figures(sim, daemon):
    """The cluster stops answering: the page and /api/status say that the last cycle failed, when and why, and
    from when the figures they still show are; the next good cycle clears it."""
    daemon.run_once()
    taken = json.loads(call(daemon.port, "GET", "/api/status")[1])["usageAt"]
    assert taken and json.loads(call(daemon.port, "GET", "/api/status")[1])["lastFailure"] is None
    rule = sim.add_fault(FaultRule(path="/admin/v2", status=503))
    assert daemon.run_once() is None
    api = json.loads(call(daemon.port, "GET", "/api/status")[1])
    assert api["lastFailure"]["reason"] and api["usageAt"] == taken
    page = call(daemon.port, "GET", "/")[1]
    assert 'id="failure"' in page and "the last cycle failed at" in page and "the figures below are from" in page
    sim.remove_fault(rule)
    sim.cluster.advance(60)
    assert daemon.run_once() is not None
    assert json.loads(call(daemon.port, "GET", "/api/status")[1])["lastFailure"] is None
    assert 'id="failure"' not in call(daemon.port, "GET", "/")[1]


@pytest.mark.parametrize("daemon", [{"statusPageHosts": ["lb.example.com"]}], indirect=True)
def test_the_page_answers_only_to_names_it_knows(daemon):
    """A page of another site that re-points its own name at this address (DNS rebinding) asks under that name:
    the page and /api/status refuse it, and so does every control, whatever it carries; the probes and /metrics
    (Prometheus scrapes an address) answer under any name."""
    bearer = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    port = daemon.port
    for host in (f"rebind.attacker.example:{port}", "lb.example.com.evil:80", "attacker.example"):
        assert call(port, "GET", "/", headers={"Host": host})[0] == 421
        assert call(port, "GET", "/api/status", headers={"Host": host})[0] == 421
        assert call(port, "POST", "/pause", {"reason": "x"}, {**bearer, "Host": host})[0] == 421
        assert call(port, "GET", "/metrics", headers={"Host": host})[0] == 200
        assert call(port, "GET", "/healthz", headers={"Host": host})[0] in (200, 503)
    assert daemon.executor.safety.kill_switch() is None
    known = (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LB.example.com.", f"lb.example.com:{port}")
    for host in known:
        assert call(port, "GET", "/api/status", headers={"Host": host})[0] == 200, host


def test_signing_in_needs_the_token_and_the_pages_origin(daemon):
    own = {"Origin": f"http://127.0.0.1:{daemon.port}"}
    assert call(daemon.port, "POST", "/login", {"token": "guess"}, own)[0] == 403
    assert call(daemon.port, "POST", "/login", {"token": CONTROL_TOKEN}, {"Origin": "http://127.0.0.1:1"})[0] == 403
    status, _, headers = call(daemon.port, "POST", "/login", {"token": CONTROL_TOKEN}, own)
    assert status == 303 and "SameSite=Strict" in headers["Set-Cookie"] and "HttpOnly" in headers["Set-Cookie"]


@pytest.mark.parametrize("daemon", [{"controlTokenFile": None}], indirect=True)
def test_without_a_control_token_the_page_is_read_only(sim, daemon):
    pending = daemon.run_once().cycle_id
    busy = sim.cluster.by_name("broker-0").id
    page = call(daemon.port, "GET", "/")[1]
    assert "read-only" in page and "<button" not in page
    assert call(daemon.port, "GET", "/api/status")[0] == 200
    for path, fields in every_change(daemon, pending, busy, {}):
        assert call(daemon.port, "POST", path, fields, {"Authorization": "Bearer anything-at-all-0123"})[0] == 403
    assert call(daemon.port, "POST", "/login", {"token": "x"}, {"Origin": f"http://127.0.0.1:{daemon.port}"})[0] == 403
    unchanged(daemon, pending)


def test_request_bodies_are_bounded_and_must_say_their_length(daemon):
    bearer = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    huge = call(daemon.port, "POST", "/pause", headers=bearer, raw=b"reason=" + b"x" * (endpoints.MAX_FORM_BYTES + 1))
    assert huge[0] == 413
    connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
    connection.putrequest("POST", "/pause")
    connection.putheader("Authorization", bearer["Authorization"])
    connection.putheader("Transfer-Encoding", "chunked")
    connection.endheaders()
    connection.send(b"0\r\n\r\n")
    assert connection.getresponse().status == 411
    connection.close()
    for length in ("\u00b2", "-1", "1e3", ""):  # a superscript two is a digit to str.isdigit, not to int()
        connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
        connection.putrequest("POST", "/pause", skip_accept_encoding=True)
        connection.putheader("Authorization", bearer["Authorization"])
        connection.putheader("Content-Length", length)
        connection.endheaders()
        connection.send(b"ab")
        assert connection.getresponse().status == 411, length
        connection.close()
    assert daemon.executor.safety.kill_switch() is None


@pytest.mark.parametrize("daemon", [{"approval": "auto"}], indirect=True)
def test_the_page_refuses_what_the_daemon_would_not_carry_out(sim, daemon):
    result = daemon.run_once()
    bearer = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    status, text, _ = call(daemon.port, "POST", f"/proposals/{result.cycle_id}/approve", {}, bearer)
    assert status == 409 and "approval is auto" in text
    status, text, _ = call(daemon.port, "POST", "/drains", {"broker": "10.9.9.9:8080"}, bearer)
    assert status == 409 and "not an active broker" in text
    *first, last = sorted(result.snapshot.brokers)
    daemon.control.update(lambda doc: doc.drains.update({b: {"since": 0, "by": "test"} for b in first}))
    status, text, _ = call(daemon.port, "POST", "/drains", {"broker": last}, bearer)
    assert status == 409 and "would leave no active broker to take its bundles" in text
    assert sorted(daemon.control.read().drains) == first
    daemon.control.update(lambda doc: doc.drains.clear())
    daemon.elector = Standby()
    status, text, _ = call(daemon.port, "POST", "/drains", {"broker": sim.cluster.by_name("broker-0").id}, bearer)
    assert status == 409 and "standby" in text
    daemon.control.update(lambda doc: doc.drains.update({last: {"since": 0, "by": "test"}}))
    status, text, _ = call(daemon.port, "POST", f"/drains/{last}/undrain", {}, bearer)
    assert status == 409 and "standby" in text  # the leader never reads this replica's files
    assert list(daemon.control.read().drains) == [last]
    daemon.control.update(lambda doc: doc.drains.clear())
    status, text, _ = call(daemon.port, "POST", "/pause", {"reason": "incident"}, bearer)
    assert status == 409 and "pausing it would not stop the leader" in text
    assert daemon.executor.safety.kill_switch() is None
    assert daemon.control.read().drains == {}


def test_a_weak_or_unreadable_control_token_stops_the_daemon_at_start(sim, tmp_path):
    (tmp_path / "short").write_text("short\n")
    for path, message in ((tmp_path / "short", "has 5 characters"), (tmp_path / "absent", "cannot read")):
        settings = {"metricsPort": free_port(), "controlTokenFile": str(path)}
        with (
            running(sim, tmp_path, **settings) as daemon,
            pytest.raises(ConfigError, match=f"controlTokenFile: .*{message}"),
        ):
            daemon._start_probe_server()


@pytest.mark.parametrize("daemon", [{"dryRun": True}], indirect=True)
def test_an_approval_in_dry_run_says_that_nothing_will_be_sent(sim, daemon):
    result = daemon.run_once()
    bearer = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    status, text, _ = call(daemon.port, "POST", f"/proposals/{result.cycle_id}/approve", {}, bearer)
    assert status == 200 and "in dry run the daemon only logs its actions" in text
