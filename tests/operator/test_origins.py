"""Credentials go only to origins the operator knows: the one decision (a table), and two loopback servers.

The table covers hosts, ports, schemes, case, trailing dots, IPv6 literals, default ports, user names and
URLs that two parsers read differently. The end-to-end tests serve an admin URL and a second server on
loopback (real HTTP, and TLS where the case needs it) and redirect an unload to the second one: to another
port of the admin URL's host, to plain http from https, and to a URL with a user name and password. With a
bearer token, an OAuth2 access token or a ``~/.netrc`` login, the second server receives nothing.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
import responses
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsar_lb_operator.adminapi import AdminClient, AuthenticationError, RedirectError
from pulsar_lb_operator.adminapi.auth import Credentials, OAuth2Credentials
from pulsar_lb_operator.adminapi.origins import KnownOrigins, Origin, normal_host, parse
from pulsar_lb_operator.simulator.listeners import TLS
from tests.oauth2_issuer import Issuer

HTTPS = KnownOrigins("https://Broker-A.example.:8443")
for url in (
    "https://broker-b.example:8080",  # a listed broker, as the admin URL's scheme and its id
    "https://[::1]:8080",
    "https://10.0.0.7:8443",
    "https://gw.example",  # an override, on the default port
):
    HTTPS.add(url)
HTTPS.add("https://ops:pw@proxy.example:8443", configured=True)
HTTP = KnownOrigins("http://127.0.0.1:8080")
HTTP.add("http://127.0.0.1:8081")
OK = None


@pytest.mark.parametrize(
    "known, url, refused",
    [
        # the admin URL: case, a trailing dot, the scheme's case, a path
        (HTTPS, "https://broker-a.example:8443/admin/v2/clusters", OK),
        (HTTPS, "https://BROKER-A.EXAMPLE.:8443/x", OK),
        (HTTPS, "HTTPS://broker-a.example:8443", OK),
        # another port of a known host, or its default port
        (HTTPS, "https://broker-a.example:8444/x", "https port 8444 of broker-a.example is not"),
        (HTTPS, "https://broker-a.example/x", "https port 443 of broker-a.example is not"),
        (HTTP, "http://127.0.0.1:8082/", "http port 8082 of 127.0.0.1 is not"),
        (HTTP, "http://127.0.0.1/", "http port 80 of 127.0.0.1 is not"),
        # plain http under an https admin URL, even to a known host and port
        (HTTPS, "http://broker-a.example:8443/x", "plain http, and the admin URL is https"),
        (HTTPS, "http://broker-b.example:8080/x", "plain http, and the admin URL is https"),
        # https to a known http origin is the same listener, encrypted
        (HTTP, "https://127.0.0.1:8081/x", OK),
        (HTTP, "https://127.0.0.1:8082/x", "https port 8082 of 127.0.0.1 is not"),
        # listed brokers and overrides, default ports spelled out or not
        (HTTPS, "https://broker-b.example:8080/admin/v2/broker-stats/load-report", OK),
        (HTTPS, "https://gw.example/broker-b", OK),
        (HTTPS, "https://gw.example:443/broker-b", OK),
        (HTTPS, "https://gw.example:8443/broker-b", "https port 8443 of gw.example is not"),
        (HTTPS, "https://10.0.0.7:8443/", OK),
        # IPv6 literals in any spelling
        (HTTPS, "https://[::1]:8080/", OK),
        (HTTPS, "https://[0:0:0:0:0:0:0:1]:8080/", OK),
        (HTTPS, "https://[::1]:8081/", "https port 8081 of ::1 is not"),
        (HTTPS, "https://[::2]:8080/", "host ::2 is not"),
        # other hosts, lookalikes included
        (HTTPS, "https://evil.example:8443/", "host evil.example is not"),
        (HTTPS, "https://broker-a.example.evil.example:8443/", "host broker-a.example.evil.example is not"),
        (HTTP, "http://localhost:8080/", "host localhost is not"),
        (HTTP, "http://0x7f.0.0.1:8080/", "host 0x7f.0.0.1 is not"),  # 127.0.0.1 to a resolver, not to the list
        (HTTP, "http://2130706433:8080/", "host 2130706433 is not"),
        # a user name or password, unless the owner configured exactly that one
        (HTTPS, "https://user:pw@broker-b.example:8080/", "carries a user name or password"),
        (HTTPS, "https://user@broker-b.example:8080/", "carries a user name or password"),
        (HTTPS, "https://ops:pw@proxy.example:8443/admin/v2/clusters", OK),
        (HTTPS, "https://ops:other@proxy.example:8443/", "carries a user name or password"),
        # URLs two parsers read differently, and URLs that are no URL to send to
        (HTTPS, "https://evil.example\\@broker-b.example:8080/", "reads differently"),
        (HTTPS, "https://broker-b.example:8080\\@evil.example/", "reads differently"),
        (HTTPS, "ftp://broker-a.example:8443/", "scheme 'ftp' is not http or https"),
        (HTTPS, "https://broker-a.example:99999/", "not a URL with a valid host and port"),
        (HTTPS, "https:///admin", "no host"),
    ],
)
def test_the_one_decision_over_hosts_ports_schemes_and_spellings(known, url, refused):
    refusal = known.refusal(url)
    assert refusal == refused if refused is None else refused in (refusal or "")


def test_origins_are_normalised_as_the_connection_would_be_made():
    assert normal_host("[0:0::1]") == "::1" and normal_host("Broker-A.Example.") == "broker-a.example"
    assert parse("http://[::1]/").origin == Origin("http", "::1", 80)
    assert str(parse("HTTPS://B.example./x").origin) == "https://b.example:443"
    assert str(parse("https://[::1]:8443").origin) == "https://[::1]:8443"


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTP"]),
    host=st.from_regex(
        r"[A-Za-z0-9_][A-Za-z0-9._-]{0,20}|\[::[0-9a-f]{1,4}\]|[0-9]{1,3}(\.[0-9]{1,3}){3}", fullmatch=True
    ),
    port=st.one_of(st.none(), st.integers(0, 70000)),
    rest=st.text(alphabet="/?#@\\:%ab._-", max_size=12),
)
def test_the_fast_reading_of_plain_urls_is_urllib3s(scheme, host, port, rest):
    """What ``parse`` reads without urllib3 (a plain host and port) is what urllib3 reads, or it is refused."""
    from urllib3.util import parse_url

    from pulsar_lb_operator.adminapi.origins import UnusableUrl

    url = f"{scheme}://{host}{'' if port is None else f':{port}'}{rest}"
    try:
        origin = parse(url).origin
    except UnusableUrl:
        return
    parts = parse_url(url)
    assert (origin.host, origin.port) == (
        normal_host(parts.host),
        parts.port or {"http": 80, "https": 443}[origin.scheme],
    )
    assert parts.auth is None or parse(url).userinfo == parts.auth


# ------------------------------------------------------------------------------ two loopback servers


class Server:
    """A loopback HTTP(S) server answering from ``routes`` ((method, path prefix) → (status, headers, body));
    404 otherwise. ``seen`` holds (method, path, Authorization) of every request it got."""

    def __init__(self, tls: TLS | None = None, host: str = "127.0.0.1") -> None:
        self.routes: dict[tuple[str, str], tuple[int, dict[str, str], Any]] = {}
        self.seen: list[tuple[str, str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                server.seen.append((self.command, self.path, self.headers.get("Authorization")))
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                status, headers, body = next(
                    (
                        answer
                        for (method, prefix), answer in server.routes.items()
                        if method == self.command and self.path.startswith(prefix)
                    ),
                    (404, {}, {"reason": "not here"}),
                )
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = f"{'https' if tls else 'http'}://{host}:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def servers(tls_admin: bool = False, tls_other: bool = False) -> Iterator[tuple[Server, Server, TLS]]:
    tls = TLS()
    admin, other = Server(tls if tls_admin else None), Server(tls if tls_other else None)
    try:
        yield admin, other, tls
    finally:
        admin.close()
        other.close()
        tls.close()


UNLOAD = "/admin/v2/namespaces/t/ns/0x0_0x1/unload"


def redirecting(admin: Server, listed: list[str], location: str) -> None:
    """The admin URL lists ``listed`` as the cluster's brokers, answers for each itself (its registration
    names no other place) and redirects the unload to ``location``."""
    admin.routes[("GET", "/admin/v2/brokers/c/")] = (200, {}, {})
    admin.routes[("GET", "/admin/v2/brokers/c")] = (200, {}, listed)
    admin.routes[("PUT", UNLOAD)] = (307, {"Location": location + UNLOAD}, None)


@pytest.fixture(params=["token", "oauth2", "netrc"])
def credentials(request, tmp_path, monkeypatch) -> Iterator[dict[str, Any]]:
    """AdminClient keyword arguments for each kind of credential, and what a server sees of it."""
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc of the machine's
    for key in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(key, raising=False)
    if request.param == "token":
        yield {"token": "s3cr3t-token"}
    elif request.param == "netrc":
        (tmp_path / "netrc").write_text("machine 127.0.0.1 login reader password s3cr3t-login\n")
        monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
        yield {"credentials": Credentials()}
    else:
        with Issuer(audience="aud") as issuer:
            secret = tmp_path / "oauth2.json"
            secret.write_text(json.dumps({"client_id": issuer.client_id, "client_secret": issuer.client_secret}))
            yield {"credentials": OAuth2Credentials(issuer.url, str(secret), audience="aud")}


def client(admin: Server, tls: TLS, credentials: dict[str, Any]) -> AdminClient:
    made = AdminClient(admin.url, ca_bundle=tls.ca_file, retries=1, **credentials)
    made.active_brokers("c")
    return made


def test_a_redirect_to_a_listed_broker_carries_the_credential(credentials):
    """The control: where the origin is known, the second server does get the credential."""
    with servers() as (admin, other, tls):
        redirecting(admin, [f"127.0.0.1:{admin.port}", f"127.0.0.1:{other.port}"], other.url)
        other.routes[("PUT", UNLOAD)] = (204, {}, None)
        client(admin, tls, credentials).unload("t/ns/0x0_0x1")
        assert [(m, p.split("?")[0]) for m, p, _ in other.seen] == [("PUT", UNLOAD)]
        assert other.seen[0][2] and other.seen[0][2].split()[0] in ("Bearer", "Basic")


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_redirect_to_another_port_of_the_admin_host_gets_nothing(credentials, scheme):
    """Under https the admin URL is asked where its brokers are registered first (a TLS broker redirects to
    its webServiceUrlTls, on another port): it names no other port, so the redirect is refused all the same."""
    tls_on = scheme == "https"
    with servers(tls_admin=tls_on, tls_other=tls_on) as (admin, other, tls):
        redirecting(admin, [f"127.0.0.1:{admin.port}"], other.url)
        with pytest.raises(RedirectError, match=rf"{scheme} port {other.port} of 127.0.0.1 is not") as refused:
            client(admin, tls, credentials).unload("t/ns/0x0_0x1")
        assert other.seen == []
        assert str(refused.value).count("\n") == 0 and f"redirect from {admin.url}" in str(refused.value)


def test_a_redirect_from_https_to_plain_http_gets_nothing_even_to_a_listed_broker(credentials):
    with servers(tls_admin=True) as (admin, other, tls):
        redirecting(admin, [f"127.0.0.1:{admin.port}", f"127.0.0.1:{other.port}"], other.url)
        with pytest.raises(RedirectError, match="plain http, and the admin URL is https"):
            client(admin, tls, credentials).unload("t/ns/0x0_0x1")
        assert other.seen == []


def test_a_redirect_that_adds_a_user_name_and_password_gets_nothing(credentials):
    with servers() as (admin, other, tls):
        redirecting(
            admin, [f"127.0.0.1:{admin.port}", f"127.0.0.1:{other.port}"], f"http://evil:pw@127.0.0.1:{other.port}"
        )
        with pytest.raises(RedirectError, match="carries a user name or password") as refused:
            client(admin, tls, credentials).unload("t/ns/0x0_0x1")
        assert other.seen == [] and "pw" not in str(refused.value)


def test_a_redirect_that_two_parsers_read_differently_gets_nothing(credentials):
    """``http://127.0.0.2:Q\\@127.0.0.1:P/``: urllib reads a listed broker (127.0.0.1:P), requests connects to
    127.0.0.2:Q. The origin checked is the one requests connects to, and a URL read two ways is refused."""
    with servers() as (admin, _, tls):
        elsewhere = Server(host="127.0.0.2")
        try:
            redirecting(
                admin, [f"127.0.0.1:{admin.port}"], f"http://127.0.0.2:{elsewhere.port}\\@127.0.0.1:{admin.port}"
            )
            with pytest.raises(RedirectError, match="reads differently to different URL parsers"):
                client(admin, tls, credentials).unload("t/ns/0x0_0x1")
            assert elsewhere.seen == []
        finally:
            elsewhere.close()


def test_under_tls_a_redirect_to_a_brokers_registered_tls_port_is_followed():
    """Pulsar's redirect to a TLS broker: https on its webServiceUrlTls, a port its id does not name. Before
    its first load report (the extensible load manager publishes none) the port is the broker's registration,
    read from the admin API's 307 (PulsarWebResource.maybeRedirectToBroker)."""
    with servers(tls_admin=True, tls_other=True) as (admin, other, tls):
        broker = "127.0.0.1:1"  # the id names the plain web port; nothing listens there
        redirecting(admin, [f"127.0.0.1:{admin.port}", broker], other.url)
        where = f"/admin/v2/brokers/c/{broker}/ownedNamespaces"
        admin.routes = {("GET", where): (307, {"Location": other.url + where}, None), **admin.routes}
        other.routes[("PUT", UNLOAD)] = (204, {}, None)
        client(admin, tls, {"token": "s3cr3t-token"}).unload("t/ns/0x0_0x1")
        puts = [(p.split("?")[0], a) for m, p, a in other.seen if m == "PUT"]
        assert puts == [(UNLOAD, "Bearer s3cr3t-token")]


@responses.activate
@pytest.mark.parametrize(
    "token_endpoint, answer, refused",
    [
        (
            "https://idp.example/token",
            (307, {"Location": "https://elsewhere.example/token"}),
            "redirected to https://elsewhere.example:443: not followed",
        ),
        ("http://idp.example/token", None, "token_endpoint http://idp.example:80 is plain http, the issuer https"),
        ("https://u:p@idp.example/token", None, "token_endpoint carries a user name or password"),
    ],
)
def test_the_oauth2_client_secret_goes_only_to_the_token_endpoint_the_issuer_names(
    tmp_path, token_endpoint, answer, refused
):
    secret = tmp_path / "oauth2.json"
    secret.write_text(json.dumps({"client_id": "me", "client_secret": "client-s3cret"}))
    metadata = {"issuer": "https://idp.example/", "token_endpoint": token_endpoint}
    responses.get("https://idp.example/.well-known/openid-configuration", json=metadata)
    if answer is not None:
        responses.post(token_endpoint, status=answer[0], headers=answer[1])
    responses.post("https://elsewhere.example/token", json={"access_token": "t", "expires_in": 60})
    with pytest.raises(AuthenticationError, match=refused) as caught:
        OAuth2Credentials("https://idp.example", str(secret)).bearer()
    assert "client-s3cret" not in str(caught.value)
    assert not any("elsewhere" in call.request.url for call in responses.calls)


@responses.activate
@pytest.mark.parametrize(
    "metadata, refused",
    [
        (
            (307, {"Location": "https://elsewhere.example/.well-known/openid-configuration"}, None),
            "the issuer's metadata redirected to https://elsewhere.example:443: not followed",
        ),
        (
            (200, {}, {"issuer": "https://elsewhere.example", "token_endpoint": "https://elsewhere.example/token"}),
            "the issuer's metadata names the issuer 'https://elsewhere.example', not 'https://idp.example'",
        ),
        ((200, {}, {"token_endpoint": "https://elsewhere.example/token"}), "names the issuer 'None'"),
    ],
)
def test_the_issuers_metadata_is_read_from_the_issuer_itself(tmp_path, metadata, refused):
    """The metadata names where the client secret goes: a redirect to another origin's metadata is not followed,
    and metadata naming another issuer (or none) is refused (RFC 8414 §3.3), before the secret is read."""
    secret = tmp_path / "oauth2.json"
    secret.write_text(json.dumps({"client_id": "me", "client_secret": "client-s3cret"}))
    status, headers, doc = metadata
    responses.get("https://idp.example/.well-known/openid-configuration", status=status, headers=headers, json=doc)
    responses.get(
        "https://elsewhere.example/.well-known/openid-configuration",
        json={"issuer": "https://elsewhere.example", "token_endpoint": "https://elsewhere.example/token"},
    )
    responses.post("https://elsewhere.example/token", json={"access_token": "t", "expires_in": 60})
    with pytest.raises(AuthenticationError, match=re.escape(refused)) as caught:
        OAuth2Credentials("https://idp.example", str(secret)).bearer()
    assert "\n" not in str(caught.value)
    assert not any(call.request.method == "POST" for call in responses.calls)
    assert not any("elsewhere" in call.request.url for call in responses.calls)


@responses.activate
def test_broker_ids_that_are_no_host_and_port_are_never_an_origin_and_never_a_crash():
    admin = AdminClient("https://broker-a:8443", token="t", retries=1)
    responses.get("https://broker-a:8443/admin/v2/brokers/c", json=["a b", "x:y", "[::1", "broker-b:8080"])
    admin.active_brokers("c")
    for weird in ("a b", "x:y", "[::1"):
        with pytest.raises(RedirectError) as refused:
            admin.load_report(weird)
        assert "\n" not in str(refused.value) and refused.value.reason.startswith("call refused:")
    where = "/admin/v2/namespaces/t/ns/0x0_0x1/unload"
    responses.put(f"https://broker-a:8443{where}", status=307, headers={"Location": f"https://broker-a:9999{where}"})
    with pytest.raises(RedirectError, match="https port 9999 of broker-a is not"):
        admin.unload("t/ns/0x0_0x1")


def test_the_binary_protocols_host_is_vouched_for_by_host_alone_whatever_the_port():
    """The ELM readers' service URL (pulsar://host:6650) never shares the web port: its host must be known, the
    same spellings count as the same host, and an unknown host or a malformed URL is never known."""
    known = KnownOrigins("https://Pulsar-Broker.pulsar.svc.:8443")
    assert known.knows_host("https://pulsar-broker.pulsar.svc:6651")
    assert known.knows_host("http://PULSAR-BROKER.pulsar.svc:6650")
    assert not known.knows_host("https://pulsar-broker.evil.example:6651")
    assert not known.knows_host("https://[::1:6651")
    assert known.refusal("https://pulsar-broker.pulsar.svc:6651") is not None  # the web decision stays by origin


@responses.activate
def test_an_issuer_that_cannot_be_reached_is_named_as_such(tmp_path):
    secret = tmp_path / "oauth2.json"
    secret.write_text(json.dumps({"client_id": "me", "client_secret": "client-s3cret"}))
    refused = requests.ConnectionError(ConnectionRefusedError(111, "Connection refused"))
    responses.get("https://idp.example/.well-known/openid-configuration", body=refused)
    with pytest.raises(AuthenticationError, match=r"the issuer cannot be reached .*Connection refused"):
        OAuth2Credentials("https://idp.example", str(secret)).bearer()
