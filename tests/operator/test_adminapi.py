"""The admin client's edge cases with ``responses``, and its redirect/auth behaviour on the simulator."""

import pytest
import requests
import responses

from pulsar_lb_operator.adminapi import (
    AdminClient,
    BadResponse,
    Conflict,
    NotFound,
    PreconditionFailed,
    RedirectError,
    ServerError,
    TransportError,
    Unauthorized,
)

A = "http://broker-a:8080"
B = "http://broker-b:8080"
C = "http://broker-c:8080"


def client(**kwargs):
    admin = AdminClient(A, token="s3cr3t-value", **{"retries": 3, **kwargs})
    admin.trust_brokers(["broker-b:8080", "broker-c:8080"])  # as active_brokers() would have listed them
    return admin


@responses.activate
@pytest.mark.parametrize(
    "status, body, cls, reason",
    [
        (
            401,
            "<html>HTTP ERROR 401 Authentication required</html>",
            Unauthorized,
            "HTTP 401: HTTP ERROR 401 Authentication",
        ),
        (403, {"reason": "Need to authenticate to perform the request"}, Unauthorized, "Need to authenticate"),
        (404, {"reason": "Namespace does not exist"}, NotFound, "Namespace does not exist"),
        (409, {"reason": "Not allowed unload namespace bundle to inactive destination broker"}, Conflict, "inactive"),
        (412, {"reason": "Invalid bundle range"}, PreconditionFailed, "Invalid bundle range"),
        (
            500,
            "--- An unexpected error occurred in the server ---\njava.lang.NullPointerException",
            ServerError,
            "HTTP 500: --- An unexpected error occurred in the server --- java.lang.NullPointerException",
        ),
        (500, {"reason": "Failed to unload"}, ServerError, "Failed to unload"),
    ],
)
def test_status_errors_are_typed_and_carry_the_reason(status, body, cls, reason):
    kwargs = {"json": body} if isinstance(body, dict) else {"body": body}
    responses.put(f"{A}/admin/v2/namespaces/t/ns/0x0_0x1/unload", status=status, **kwargs)
    with pytest.raises(cls) as caught:
        client().unload("t/ns/0x0_0x1")
    assert caught.value.status == status and reason in caught.value.reason
    assert len(responses.calls) == 1  # a PUT is never retried by the transport


@responses.activate
def test_a_307_chain_across_hosts_keeps_method_body_and_token():
    responses.put(
        f"{A}/admin/v2/namespaces/t/ns/0x0_0x1/split",
        status=307,
        headers={"Location": f"{B}/admin/v2/namespaces/t/ns/0x0_0x1/split?unload=true&x=1"},
    )
    responses.put(
        f"{B}/admin/v2/namespaces/t/ns/0x0_0x1/split",
        status=307,
        headers={"Location": f"{C}/admin/v2/namespaces/t/ns/0x0_0x1/split?unload=true&x=2"},
    )
    responses.put(f"{C}/admin/v2/namespaces/t/ns/0x0_0x1/split", status=204)
    client().split("t/ns/0x0_0x1", "specified_positions_divide", [5], unload=True)
    assert [c.request.method for c in responses.calls] == ["PUT", "PUT", "PUT"]
    assert all(c.request.headers["Authorization"] == "Bearer s3cr3t-value" for c in responses.calls)
    assert all(c.request.body == "[5]" for c in responses.calls)


@responses.activate
def test_redirect_loop_and_too_many_hops():
    responses.get(
        f"{A}/admin/v2/brokers/leaderBroker", status=307, headers={"Location": f"{B}/admin/v2/brokers/leaderBroker"}
    )
    responses.get(
        f"{B}/admin/v2/brokers/leaderBroker", status=307, headers={"Location": f"{A}/admin/v2/brokers/leaderBroker"}
    )
    with pytest.raises(RedirectError, match="loop"):
        client(retries=1).leader()
    responses.reset()
    for i in range(12):
        responses.get(f"http://h{i}:8080/x", status=307, headers={"Location": f"http://h{i + 1}:8080/x"})
    hopping = AdminClient("http://h0:8080", retries=1)
    hopping.trust_brokers([f"h{i}:8080" for i in range(13)])
    with pytest.raises(RedirectError, match="more than 8 redirects"):
        hopping.get_json("/x")


@responses.activate
def test_the_token_goes_only_to_the_admin_host_and_listed_brokers():
    """A 307 to a host the cluster never listed is refused before anything is sent there."""
    responses.get(f"{A}/admin/v2/brokers/c1", json=["broker-b:8080"])
    responses.put(
        f"{A}/admin/v2/namespaces/t/ns/0x0_0x1/unload",
        status=307,
        headers={"Location": "http://evil.example:8080/admin/v2/namespaces/t/ns/0x0_0x1/unload"},
    )
    fresh = AdminClient(A, token="s3cr3t-value", retries=1)
    with pytest.raises(RedirectError, match=r"redirect from http://broker-a:8080 refused: host evil\.example is not"):
        fresh.unload("t/ns/0x0_0x1")
    assert [c.request.url.split("/")[2] for c in responses.calls] == ["broker-a:8080"]
    with pytest.raises(RedirectError, match=r"call refused: host broker-b is not"):  # not listed yet
        fresh.load_report("broker-b:8080")
    fresh.active_brokers("c1")  # now it is
    responses.get(f"{B}/admin/v2/broker-stats/load-report", json={})
    assert fresh.load_report("broker-b:8080") == {}
    assert responses.calls[-1].request.headers["Authorization"] == "Bearer s3cr3t-value"


@responses.activate
def test_a_token_the_server_echoes_back_is_masked_in_the_error():
    """A proxy that quotes the request's Authorization header in its error page: the message (what the CLI prints,
    the log and the audit keep) carries neither the header nor the token."""
    responses.get(f"{A}/admin/v2/brokers/leaderBroker", status=400, body="header Bearer s3cr3t-value rejected")
    responses.get(f"{A}/admin/v2/brokers/c1", status=403, json={"reason": "token s3cr3t-value is not a super-user"})
    with pytest.raises(Exception, match="HTTP 400") as echoed:
        client(retries=1).leader()
    with pytest.raises(Exception, match="is not a super-user") as reasoned:
        client(retries=1).active_brokers("c1")
    for error in (echoed.value, reasoned.value):
        assert "s3cr3t-value" not in str(error) and "***" in str(error)


@responses.activate
def test_a_redirect_to_a_malformed_location_is_a_one_line_error():
    """requests reads a redirect's Location even where it does not follow it; a port it cannot read raised a
    ValueError out of the client (the CLI's "internal error", the daemon's "cycle crashed")."""
    where = "/admin/v2/namespaces/t/ns/0x0_0x1/unload"
    responses.put(f"{A}{where}", status=307, headers={"Location": f"http://broker-a:+8080{where}"})
    with pytest.raises(BadResponse, match="an answer that cannot be read") as caught:
        client(retries=1).unload("t/ns/0x0_0x1")
    assert "\n" not in str(caught.value)
    assert [c.request.url.split("/")[2] for c in responses.calls] == ["broker-a:8080"]


@responses.activate
def test_answers_are_bounded_in_size_and_time():
    big = AdminClient(A, retries=1, max_body_bytes=1000)
    responses.get(f"{A}/admin/v2/clusters", body=b"[" + b" " * 5000 + b"]")
    with pytest.raises(BadResponse, match="larger than"):
        big.clusters()
    for body in ("null", "42", '"text"', "[1, 2]"):
        responses.get(f"{A}/admin/v2/brokers/leaderBroker", body=body)
        with pytest.raises(BadResponse, match="expected a JSON object"):
            big.leader()
        responses.reset()
    for body in ("null", "7", '"x"', '{"not-a-bundle": {}}'):
        responses.get(f"{A}/admin/v2/brokers/c1/b:1/ownedNamespaces", body=body)
        with pytest.raises(BadResponse):
            big.owned_bundles("c1", "b:1")
        responses.reset()
    responses.get(f"{A}/admin/v2/clusters", body=b"\xff\xfe[]")
    with pytest.raises(BadResponse, match="not JSON"):
        big.clusters()


@responses.activate
def test_get_retries_5xx_then_succeeds_and_gives_up_after_the_limit():
    url = f"{A}/admin/v2/clusters"
    responses.get(url, status=503)
    responses.get(url, status=500, body="boom")
    responses.get(url, json=["standalone"])
    assert client().clusters() == ["standalone"] and len(responses.calls) == 3
    responses.reset()
    responses.get(url, status=500, json={"reason": "still down"})
    with pytest.raises(ServerError, match="still down"):
        client().clusters()
    assert len(responses.calls) == 3


@responses.activate
def test_timeouts_and_connection_errors_become_transport_errors():
    responses.get(f"{A}/admin/v2/clusters", body=requests.ConnectTimeout("slow"))
    with pytest.raises(TransportError, match="timed out"):
        client(retries=1).clusters()
    responses.get(f"{B}/admin/v2/broker-stats/load-report", body=requests.ConnectionError("refused"))
    with pytest.raises(TransportError, match="cannot reach"):
        client(retries=1).load_report("broker-b:8080")


@responses.activate
def test_garbage_json_and_wrong_shapes_are_bad_responses():
    responses.get(f"{B}/admin/v2/broker-stats/load-report", body="{not json", content_type="application/json")
    with pytest.raises(BadResponse, match="not JSON"):
        client().load_report("broker-b:8080")
    responses.get(f"{A}/admin/v2/brokers/c1", json={"brokers": []})
    with pytest.raises(BadResponse, match="list of strings"):
        client().active_brokers("c1")


def test_the_token_never_shows_in_repr():
    assert "s3cr3t" not in repr(client()) and "***" in repr(client())


def test_end_to_end_unload_through_leader_and_owner_with_token():
    """Real HTTP: unload with a destination from a non-leader broker; every hop must carry the token."""
    from pulsar_lb_operator.simulator.cluster import SimulatedCluster
    from pulsar_lb_operator.simulator.http import serve
    from pulsar_lb_operator.simulator.scenario import parse_scenario
    from tests.builders import SMALL_SCENARIO as SMALL

    with serve(lambda alloc: SimulatedCluster(parse_scenario(SMALL), alloc), token="s3cret") as sim:
        entry = sim.url_of("broker-2")  # not the leader, not the owner
        admin = AdminClient(entry, token="s3cret")
        admin.active_brokers(sim.cluster.scenario.cluster)  # as a cycle does first: the hops go to listed brokers
        bundle = sim.cluster.owned_by(sim.cluster.by_name("broker-1").id)[0]
        dest = sim.cluster.by_name("broker-2").id
        admin.unload(bundle, dest)
        hops = [(r.broker, r.status) for r in sim.requests if r.method == "PUT"]
        assert [s for _, s in hops] == [307, 307, 204]
        sim.cluster.advance(5)
        assert sim.cluster.owner_of(bundle) == dest
        with pytest.raises(Unauthorized):
            AdminClient(entry, token="wrong", retries=1).clusters()
        with pytest.raises(Conflict, match="inactive destination"):
            admin.unload(bundle, "127.0.0.1:1")


class _Recorder:
    """A loopback HTTP server that answers every GET with its own name, and records what it was asked:
    the request line's target (an absolute URL when it is used as a proxy) and the Authorization header."""

    def __init__(self, name: str) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.seen: list[tuple[str, str | None]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.seen.append((self.path, self.headers.get("Authorization")))
                body = json.dumps([name]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> "_Recorder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_environment_proxy_and_netrc_are_honoured_as_read_once_per_host(monkeypatch, tmp_path):
    """HTTP_PROXY / NO_PROXY and ~/.netrc count as requests counts them, read the first time a host is
    called and kept (requests would scan the environment twice per call): a later change is not seen."""
    import os

    for key in list(os.environ):
        if key.lower().endswith("_proxy") or key == "NETRC":
            monkeypatch.delenv(key)
    with _Recorder("direct") as direct, _Recorder("proxy") as proxy:
        monkeypatch.setenv("http_proxy", proxy.url)
        through_proxy = AdminClient(direct.url, retries=1)
        assert through_proxy.clusters() == ["proxy"]
        assert proxy.seen == [(f"{direct.url}/admin/v2/clusters", None)]  # the absolute URL: a proxy's request
        monkeypatch.setenv("no_proxy", "127.0.0.1")
        assert through_proxy.clusters() == ["proxy"]  # what it read at its first call to that host
        netrc = tmp_path / "netrc"
        netrc.write_text("machine 127.0.0.1 login reader password s3cret\n")
        monkeypatch.setenv("NETRC", str(netrc))
        fresh = AdminClient(direct.url, retries=1)
        assert fresh.clusters() == ["direct"]  # no_proxy names the host
        assert direct.seen == [("/admin/v2/clusters", "Basic cmVhZGVyOnMzY3JldA==")]  # reader:s3cret
        # with a token of its own, the operator sends the token: a netrc entry for the host never replaces it
        with_token = AdminClient(direct.url, retries=1, token="t0ken")
        assert with_token.clusters() == ["direct"]
        assert direct.seen[-1] == ("/admin/v2/clusters", "Bearer t0ken")
