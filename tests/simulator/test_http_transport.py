"""The simulator's HTTP/1.1 on the wire, over raw loopback sockets: what a client that is not `requests` meets
(pipelining, 100-continue, HTTP/1.0, a request a broker cannot read), and the route table."""

import socket

import pytest

from pulsar_lb_operator.simulator.api import routes
from pulsar_lb_operator.simulator.api.call import Response
from pulsar_lb_operator.simulator.api.routes import ROUTES, Route, Routes


def address(sim, name="broker-0"):
    host, port = sim.cluster.by_name(name).id.rsplit(":", 1)
    return host, int(port)


def read_all(sock):
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def read_answer(sock, buffer=b""):
    """One answer (head and Content-Length body) and what came after it."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {buffer!r}"
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    return head.decode("latin-1"), rest[:length], rest[length:]


def connect(sim, name="broker-0"):
    sock = socket.create_connection(address(sim, name), timeout=10)
    return sock


def test_pipelined_requests_are_answered_in_order_on_one_connection(sim):
    host = "{}:{}".format(*address(sim))
    with connect(sim) as sock:
        sock.sendall(
            f"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: {host}\r\n\r\n"
            f"GET /admin/v2/clusters HTTP/1.1\r\nHost: {host}\r\n\r\n"
            f"GET /admin/v2/brokers/version HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        )
        first, body, rest = read_answer(sock)
        assert first.startswith("HTTP/1.1 200 OK\r\n") and body == b"ok"
        second, body, rest = read_answer(sock, rest)
        assert body == b'["sim"]' and "Content-Type: application/json" in second
        _, body, rest = read_answer(sock, rest)
        assert body == b"4.0.4-sim" and rest == b""
        sock.sendall(f"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())  # still open
        assert read_answer(sock)[1] == b"ok"


def test_a_body_sent_after_100_continue_is_read(sim):
    bundle = sim.cluster.owned_by(sim.cluster.by_name("broker-0").id)[0]
    namespace, _, bundle_range = bundle.rpartition("/")
    body = b"[]"
    with connect(sim) as sock:
        sock.sendall(
            f"PUT /admin/v2/namespaces/{namespace}/{bundle_range}/split HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        interim = sock.recv(65536)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"  # before the body was sent
        sock.sendall(body)
        head, _, _ = read_answer(sock)
    assert head.startswith("HTTP/1.1 204 No Content\r\n") and "Content-Length" not in head
    assert bundle not in sim.cluster.ownership  # split into two halves


def test_http_1_0_is_answered_then_closed(sim):
    with connect(sim) as sock:
        sock.sendall(b"GET /admin/v2/brokers/health HTTP/1.0\r\n\r\n")
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nok")


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /admin/v2/brokers/health\r\n\r\n", 400),  # HTTP/0.9: no version
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /admin/v2/brokers/health HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host
        (b"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431),
        (b"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000, 431),  # still incomplete
    ],
    ids=["HTTP/0.9", "garbage", "no Host", "head over 8 KiB", "incomplete head over 8 KiB"],
)
def test_a_request_the_broker_cannot_read_gets_jettys_bad_message_page_and_the_connection_closes(
    sim, request_bytes, status
):
    """ErrorHandler.badMessageError: text/html in ISO-8859-1, the status and its reason; a head over
    httpMaxRequestHeaderSize (8 KiB) is 431."""
    with connect(sim) as sock:
        sock.sendall(request_bytes)
        answer = read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    phrase = {400: "Bad Request", 431: "Request Header Fields Too Large"}[status]
    assert head.startswith(f"HTTP/1.1 {status} {phrase}\r\n".encode())
    assert b"Content-Type: text/html;charset=iso-8859-1" in head and b"Connection: close" in head
    assert body == f"<h1>Bad Message {status}</h1><pre>reason: {phrase}</pre>".encode()
    assert sim.requests == []  # never reached a handler, nor the request log


def test_every_route_in_the_table_is_reached(sim):
    """Each template, filled in, finds its own route: no route is shadowed by one before it."""
    assert len(ROUTES.routes) >= 29
    for route in ROUTES.routes:
        path = route.template
        for name in route.params:
            path = path.replace("{" + name + "}", f"x-{name}")
        found = ROUTES.find(route.method, path)
        assert isinstance(found, tuple) and found[0] is route, route.template
        assert found[1] == {name: f"x-{name}" for name in route.params}


def test_the_first_matching_template_decides_and_the_method_picks_within_it():
    """As Jersey: the literal path wins over a template, and a method it lacks is 405 even when a later
    template would take it; parameters are percent-decoded."""
    assert ROUTES.find("DELETE", "/admin/v2/brokers/configuration/values") == routes.METHOD_NOT_ALLOWED
    assert ROUTES.find("PUT", "/admin/v2/brokers/health") == routes.METHOD_NOT_ALLOWED
    assert ROUTES.find("GET", "/admin/v2/nothing/here") == routes.NOT_FOUND
    route, params = ROUTES.find("DELETE", "/admin/v2/brokers/configuration/a%2Fb")
    assert route.handler.__name__ == "delete_dynamic_configuration" and params == {"name": "a/b"}


def test_a_route_is_one_entry_of_the_table():
    def get_thing(call, thing):
        return Response(200, thing)

    def delete_thing(call, thing):
        return Response(204)

    get, delete = Route("GET", "/things/{thing}", get_thing), Route("DELETE", "/things/{thing}", delete_thing)
    table = Routes(Route("GET", "/things/all", get_thing), get, delete, Route("GET", "/{a}/{b}/{c}", get_thing))
    assert table.find("GET", "/things/a") == (get, {"thing": "a"})
    assert table.find("DELETE", "/things/a") == (delete, {"thing": "a"})
    assert table.find("PUT", "/things/a") == routes.METHOD_NOT_ALLOWED
    assert table.find("DELETE", "/things/all") == routes.METHOD_NOT_ALLOWED  # the literal template decides
    assert table.find("GET", "/x/y/z") == (table.routes[3], {"a": "x", "b": "y", "c": "z"})  # after two groups
    assert table.find("GET", "/things/a/b/c") == routes.NOT_FOUND
