"""The admin client: one request core (redirects, auth, deadlines, typed errors, GET retries) and thin verbs.

Redirects are followed by hand because ``requests`` drops the Authorization header when a 307 goes
to another host (pulsar-admin-api.md §1.5): every hop re-sends the method, body and credentials — but only
to an origin (scheme, host, port) the operator knows is part of the cluster (adminapi/origins.py: the admin
URL's, the overrides', the brokers the admin API lists and the web URLs they give for themselves). A redirect
anywhere else is refused before anything is sent there, with a one-line RedirectError saying why; one to
another port of a listed broker's host is first checked against that broker's registration (a TLS broker
redirects to its ``webServiceUrlTls``, learned from its load report or, failing that, from the admin API's
307 to it), so real redirects between brokers keep working and no other port gets the token. Only
idempotent GETs are retried (tenacity, exponential backoff, on connection errors and 5xx); whether an
unload or split may be repeated is the executor's decision, after it has checked the cluster.

Everything is bounded: each call has a deadline over all its hops (socket timeouts alone do not stop a
broker that trickles bytes), and an answer larger than ``max_body_bytes`` is cut off with an error
instead of being read into memory.

What ``requests`` reads from the environment — a proxy (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``,
``NO_PROXY``), a login in ``~/.netrc`` (or ``$NETRC``), a CA bundle in ``REQUESTS_CA_BUNDLE`` or
``CURL_CA_BUNDLE`` — is honoured as requests would (but a netrc login never replaces the operator's own
token: it is used only where the operator sends no credentials), and read once: the CA bundle when the client is made,
the proxy and the login the first time each host is called, kept for the client's life (requests scans
every environment variable twice per call to find them: a quarter of a collect's CPU over 1,000 brokers).
The environment a process starts with is the one it keeps; a change to it later is not seen.

Credentials (adminapi/auth.py) are asked for on every hop, so a rotated token file or a refreshed OAuth2
token is used at once; a 401 renews them and tries that hop once more. A broker's own web URL — for the
endpoints only that broker answers — is what the broker publishes, or an override: see ``broker_url``.

**Why one module of ~690 lines.** ``AdminClient`` is the one edge to Pulsar's admin API: finding each broker's
own web URL and which origins it vouches for (about 200 lines), the request core that checks every hop against
those origins (about 230), and one short verb per endpoint (about 80). The first two read and write the same
state — the origins credentials may go to — on every hop; split apart, each would reach into the other's.
"""

from __future__ import annotations

import json
import os
import re
import socket
import string
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import requests
import structlog
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from pulsar_lb_operator.adminapi import errors, origins
from pulsar_lb_operator.adminapi.auth import Credentials, TokenCredentials

log = structlog.get_logger(__name__)

MAX_REDIRECTS = 8
MAX_BODY_BYTES = 64 * 2**20  # a load report is kilobytes; broker-stats/topics of a busy broker a few MiB
MASKED_FROM = 8  # characters: a credential shorter than this is masked nowhere (it would garble a message's words)
USER_AGENT = f"pulsar-lb-operator/0.1 (instance {socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]})"


@dataclass(frozen=True)
class Timeouts:
    """Seconds. An unload or split may wait for namespaceBundleUnloadingTimeoutMs (60 s) on the broker."""

    connect: float = 5.0
    read: float = 30.0  # also the deadline of a whole GET, over all its redirects
    mutate: float = 90.0  # the deadline of a whole unload or split


@dataclass(frozen=True)
class Answer:
    """A 2xx answer, read whole (within the cap and the deadline)."""

    status: int
    url: str
    content: bytes
    headers: Mapping[str, str]

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class AdminClient:
    """Admin API of one cluster, reached through ``admin_url`` (any broker, or the proxy).

    ``credentials``: how to authenticate (``token`` is a shortcut for a fixed bearer token).
    ``broker_urls`` (broker id → web URL) and ``broker_url_template`` (``{id}``, ``{host}``, ``{port}``) override
    the web URLs brokers publish, for proxy-only and NAT setups; see ``broker_url``.
    """

    def __init__(
        self,
        admin_url: str,
        token: str | None = None,
        ca_bundle: str | None = None,
        verify: bool = True,
        timeouts: Timeouts | None = None,
        retries: int = 3,
        session: requests.Session | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        credentials: Credentials | None = None,
        broker_urls: Mapping[str, str] | None = None,
        broker_url_template: str | None = None,
    ) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.scheme = urlsplit(self.admin_url).scheme or "http"
        self.credentials = credentials or (TokenCredentials(token=token) if token else Credentials())
        self.verify: bool | str = ca_bundle if ca_bundle else verify
        self.timeouts = timeouts or Timeouts()
        self.retries = max(1, retries)
        self.session = session or requests.Session()
        # The environment, read once (see the module's docstring): the session itself no longer looks.
        self._trust_env = bool(self.session.trust_env)
        self.session.trust_env = False
        self._send_verify: bool | str = self.verify
        if self._trust_env and self.verify is True:
            self._send_verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
        self._environments: dict[str, tuple[dict[str, str], tuple[str, str] | None]] = {}
        self.max_body_bytes = max_body_bytes
        self.broker_urls = {k: v.rstrip("/") for k, v in (broker_urls or {}).items()}
        self.broker_url_template = broker_url_template
        self.known = origins.KnownOrigins(self.admin_url)
        for url in self.broker_urls.values():
            self.known.add(url, configured=True)
        self._lock = threading.RLock()  # the dicts below
        self._discovering = threading.Lock()  # one discovery at a time (it calls the admin API)
        self._answered_itself: set[str] = set()  # ids the admin URL answered for without a 307 (asked once)
        self._learned: dict[str, str] = {}  # broker id → the web URL it publishes (trusted hosts only)
        self._published: dict[str, str] = {}  # host:port a broker publishes (or its id) → broker id
        self._broker_ids: list[str] = []
        self._cluster: str | None = None
        self._warned: set[str] = set()

    @property
    def _token(self) -> str | None:
        """The bearer token sent right now (the rehearsal looks for it in the logs)."""
        return self.credentials.bearer()

    def trust_brokers(self, broker_ids: list[str]) -> None:
        """Brokers the admin API listed: ``<admin URL's scheme>://<id>`` (and their overrides) may get credentials."""
        with self._lock:
            for broker_id in broker_ids:
                self.known.add(f"{self.scheme}://{broker_id}")
                self._published.setdefault(broker_id.lower(), broker_id)
                override = self._override(broker_id)
                if override:  # the operator's owner configured it: trusted like the admin URL
                    self.known.add(override, configured=True)

    def is_known(self, url: str) -> bool:
        """Whether a request to ``url`` may carry the operator's credentials (``origins.KnownOrigins.refusal``)."""
        return self.known.refusal(url) is None

    def is_known_host(self, url: str) -> bool:
        """Whether ``url``'s host is one credentials may go to on some port (``origins.KnownOrigins.knows_host``)."""
        return self.known.knows_host(url)

    def _vouched(self, broker_id: str, url: str) -> bool:
        """Whether ``url``, given by the cluster as ``broker_id``'s web URL (its load report, its registration),
        may be used and get credentials: its id's own origin (what Pulsar makes ``webServiceUrl`` of), that
        origin over TLS, or — under an https admin URL — an https port of its own host (a TLS broker's
        ``webServiceUrlTls``: the certificate the host presents there vouches for the port). Never a user name
        or password, never another host; under http, never another port (a process on that port of a
        broker's host would get the token in clear)."""
        own = self._own_origin(broker_id)
        try:
            given = origins.parse(url)
        except origins.UnusableUrl:
            return False
        where = given.origin
        if own is None or given.userinfo is not None or where.host != own.host:
            return False
        same_port_tls = where.scheme == "https" and where.port == own.port
        return where == own or same_port_tls or (where.scheme == "https" and self.known.tls_only)

    def _own_origin(self, broker_id: str) -> origins.Origin | None:
        """``<admin URL's scheme>://<id>``'s origin (None for an id that is no host:port)."""
        try:
            return origins.parse(f"{self.scheme}://{broker_id}").origin
        except origins.UnusableUrl:
            return None

    def _learn_url(self, broker_id: str, url: str) -> bool:
        """Use ``url`` as ``broker_id``'s web URL from now on, if the cluster vouches for it (``_vouched``)."""
        if not self._vouched(broker_id, url):
            return False
        with self._lock:
            self._learned[broker_id] = url
            self.known.add(url)
        return True

    def __repr__(self) -> str:  # never show the token
        secret = "***" if self.credentials.plugin in ("token", "oauth2") else None
        url = origins.without_userinfo(self.admin_url)
        return f"AdminClient({url!r}, auth={self.credentials.plugin}, token={secret})"

    def close(self) -> None:
        self.session.close()

    # ------------------------------------------------------------------ broker web URLs

    def broker_url(self, broker_id: str) -> str:
        """A broker's own web URL, for the endpoints only that broker answers (load report, topic stats).

        1. The override, when configured: ``broker_urls[broker_id]``, else ``broker_url_template`` rendered
           with ``{id}`` (host:port), ``{host}`` and ``{port}`` — for proxy-only and NAT setups, where what
           brokers publish cannot be reached from here. Redirects to an overridden broker's published
           address are rewritten to it as well.
        2. What the broker publishes, when its host is one the cluster lists (or the admin URL's): Pulsar's
           own choice between ``webServiceUrlTls`` and ``webServiceUrl`` (TLS when the admin URL is https)
           in its last load report (LocalBrokerData). Before its first report, with an https admin URL —
           where the id's port is the plain HTTP one, or a TLS port only in a few 3.1.x releases — the
           broker's registration, as the admin API redirects to it: ``GET
           /admin/v2/brokers/{cluster}/{id}/ownedNamespaces`` answers 307 to the registered web URL, the
           TLS one for an https request (PulsarWebResource.maybeRedirectToBroker); the 307 is read, not
           followed. When the admin URL answers it itself (it is that broker, or a proxy), a broker found
           that way is asked instead. Nothing else in the REST API gives it: the broker list has ids only,
           ``leaderBroker`` only the leader's ``serviceUrl``, lookups need a topic and assign unowned
           bundles, and the load report sits in the metadata store (/loadbalance/brokers/<id>), out of
           REST's reach, or must be asked of the broker itself.
        3. Otherwise ``<admin URL's scheme>://<id>``: right for plain HTTP, where the id is
           ``advertisedAddress:webServicePort``, the web address itself.
        """
        override = self._override(broker_id)
        if override:
            return override
        with self._lock:
            learned = self._learned.get(broker_id)
        if learned:
            return learned
        if self.scheme == "https" and self._cluster is not None:
            found = self._discover(broker_id)
            if found:
                return found
        return f"{self.scheme}://{broker_id}"

    def _override(self, broker_id: str) -> str | None:
        if broker_id in self.broker_urls:
            return self.broker_urls[broker_id]
        if self.broker_url_template:
            return render_template(self.broker_url_template, broker_id).rstrip("/")
        return None

    def _learn(self, broker_id: str, report: Mapping[str, Any]) -> None:
        """Remember the web URL a broker publishes in its load report, if its host is a known one."""
        plain, tls = (_base(report.get(k)) for k in ("webServiceUrl", "webServiceUrlTls"))
        with self._lock:
            for url in (plain, tls):
                if url:
                    self._published[urlsplit(url).netloc.lower()] = broker_id
            chosen = (tls or plain) if self.scheme == "https" else (plain or tls)
            if not chosen or self._override(broker_id):
                return
            if not self._learn_url(broker_id, chosen) and f"untrusted {broker_id}" not in self._warned:
                self._warned.add(f"untrusted {broker_id}")
                log.warning(
                    "broker publishes a web URL that is not on its own host (or is plain http under an https "
                    "admin URL): not used",
                    broker=broker_id,
                    url=origins.describe(chosen),
                )

    def _discover(self, broker_id: str) -> str | None:
        """The broker's registered web URL from a 307 of the admin API (see ``broker_url``), or None."""
        with self._discovering:
            with self._lock:
                if broker_id in self._learned:
                    return self._learned[broker_id]
                others = [b for b in self._broker_ids if b != broker_id]
            found = "" if broker_id in self._answered_itself else self._registered(self.admin_url, broker_id)
            if found == "":  # the admin URL answered for it: ask a broker that redirected to itself
                self._answered_itself.add(broker_id)
                found = None
                for other in others:  # each is asked of the admin URL at most once: a proxy costs N calls, not N²
                    with self._lock:
                        base = self._learned.get(other)
                    if not base and other not in self._answered_itself:
                        base = self._registered(self.admin_url, other)
                        if base == "":
                            self._answered_itself.add(other)
                    if not base or not self._learn_url(other, base):
                        continue
                    found = self._registered(base, broker_id) or None
                    if found:
                        break
                if not others:  # a one-broker cluster: the admin URL is that broker (or reaches only it)
                    with self._lock:
                        self._learned[broker_id] = self.admin_url
                    return self.admin_url
            if found and self._learn_url(broker_id, found):
                return found
            if f"undiscovered {broker_id}" not in self._warned:
                self._warned.add(f"undiscovered {broker_id}")
                log.warning(
                    "cannot learn the broker's web URL before its first load report; trying its id "
                    "(behind a proxy, set brokerWebServiceUrlTemplate or brokerWebServiceUrls)",
                    broker=broker_id,
                )
            return None

    def _registered(self, base: str, broker_id: str) -> str | None:
        """Ask ``base`` where ``broker_id`` is: its web URL from a 307, "" if ``base`` answered itself, None."""
        assert self._cluster is not None
        path = f"/admin/v2/brokers/{quote(self._cluster)}/{quote(broker_id, safe=':')}/ownedNamespaces"
        try:
            answer = self.request("GET", path, base=base, follow_redirects=False)
        except errors.AdminError as exc:
            log.debug("broker URL discovery failed", broker=broker_id, reason=exc.reason)
            return None
        if answer.status in (307, 308):
            location = answer.headers.get("Location") or ""
            return _base(urljoin(base + path, location))
        return ""

    def _reroute(self, url: str) -> str:
        """A URL on an overridden broker's published address, rewritten to the override (NAT, proxy-only)."""
        if not (self.broker_urls or self.broker_url_template):
            return url
        parts = urlsplit(url)
        with self._lock:
            broker_id = self._published.get(parts.netloc.lower())
        override = self._override(broker_id) if broker_id else None
        if not override or url.startswith(override + "/"):
            return url
        target = urlsplit(override)
        return urlunsplit((target.scheme, target.netloc, target.path + parts.path, parts.query, ""))

    # ------------------------------------------------------------------ core

    def _environment(self, url: str) -> tuple[dict[str, str], tuple[str, str] | None]:
        """The proxies and the ~/.netrc login requests would take from the environment for ``url``'s host,
        read the first time the host is called (requests' own functions, so the same answer)."""
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        found = self._environments.get(origin)
        if found is None:
            if self._trust_env:
                found = (requests.utils.get_environ_proxies(origin), requests.utils.get_netrc_auth(origin))
            else:
                found = ({}, None)
            with self._lock:
                self._environments[origin] = found
        return found

    def request(
        self,
        method: str,
        path: str,
        *,
        base: str | None = None,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        deadline_s: float | None = None,
        follow_redirects: bool = True,
    ) -> Answer:
        """One call, following 307/308 by hand; raises a typed AdminError for anything but 2xx.

        ``deadline_s`` bounds the whole call, every hop and every byte of the answer included
        (default: ``timeouts.read`` for a GET, ``timeouts.mutate`` otherwise). With ``follow_redirects``
        False a 307/308 is returned as it came.
        """
        url = self._reroute((base or self.admin_url) + path)
        if params:
            url += "?" + "&".join(f"{quote(str(k))}={quote(str(v), safe='')}" for k, v in params.items())
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        budget = (
            deadline_s if deadline_s is not None else (self.timeouts.read if method == "GET" else self.timeouts.mutate)
        )
        deadline = time.monotonic() + budget
        seen: list[str] = []
        renewed = False
        for _ in range(MAX_REDIRECTS + 1):
            refusal = self._refusal(url, redirected=bool(seen))
            if refusal is not None:
                what = f"redirect from {origins.describe(seen[-1])}" if seen else "call"
                raise errors.RedirectError(
                    origins.describe(url),
                    f"{what} refused: {refusal} — credentials go only to origins the operator knows",
                )
            seen.append(url)
            while True:
                hop_headers = dict(headers)
                authorization = self.credentials.authorization()  # per hop: a rotated token is used at once
                if authorization:
                    hop_headers["Authorization"] = authorization
                status, hop_headers_in, content = self._send(method, url, data, hop_headers, deadline, budget)
                # a 401 is the AuthenticationFilter's: nothing ran, so new credentials may try once more
                if status == 401 and not renewed and self.credentials.renew():
                    renewed = True
                    continue
                break
            if status in (307, 308) and follow_redirects:
                location = hop_headers_in.get("Location")
                if not location:
                    raise errors.RedirectError(url, f"{status} without a Location header")
                url = self._reroute(urljoin(url, location))
                if url in seen:
                    raise errors.RedirectError(url, f"redirect loop after {len(seen)} hops")
                continue
            answer = Answer(status, url, content, hop_headers_in)
            if 200 <= status < 300 or status in (307, 308):
                return answer
            cls = errors.error_for(status)
            error = cls(url, _without_credential(_reason(answer), authorization), status)
            error.in_transition = errors.in_transition(error.reason) or errors.in_transition(answer.text[:65536])
            raise error
        raise errors.RedirectError(url, f"more than {MAX_REDIRECTS} redirects")

    def _refusal(self, url: str, redirected: bool) -> str | None:
        """Why no request may go to ``url`` (``origins.KnownOrigins.refusal``), or None.

        Under an https admin URL, a redirect to another port of a listed broker's host is checked against the
        registration of the brokers on that host first (asked once each, the 307 read and not followed): that
        is where a TLS broker sends an https request — its ``webServiceUrlTls`` — before the operator has read
        its load report. Under http a broker's web URL is its id, so there is nothing to learn.
        """
        refusal = self.known.refusal(url)
        host = self.known.other_port_of_known_host(url) if refusal and redirected and self.known.tls_only else None
        if host is None or self._cluster is None:
            return refusal
        with self._lock:
            unlearned = [b for b in self._broker_ids if b not in self._learned and not self._override(b)]
        for broker_id in unlearned:
            own = self._own_origin(broker_id)
            if own is not None and own.host == host:
                self._discover(broker_id)
        return self.known.refusal(url)

    def _send(
        self, method: str, url: str, data: str | None, headers: dict[str, str], deadline: float, budget: float
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One HTTP exchange, its body read in chunks against the cap and the deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise errors.TransportError(url, f"timed out: no complete answer within {budget:g} s")
        timeout = (min(self.timeouts.connect, left), left)
        proxies, netrc_login = self._environment(url)
        try:
            response = self.session.request(
                method,
                url,
                data=data,
                headers=headers,
                timeout=timeout,
                verify=self._send_verify,
                cert=self.credentials.cert,
                allow_redirects=False,
                stream=True,
                proxies=dict(proxies),
                # a ~/.netrc login only where the operator sends no credentials of its own: requests would let it
                # replace the token's Authorization header
                auth=netrc_login if netrc_login and "Authorization" not in headers and not self.session.auth else None,
            )
            with response:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_content(65536):
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        raise errors.BadResponse(
                            url, f"the answer is larger than {self.max_body_bytes // 2**20} MiB: not read further"
                        )
                    if time.monotonic() > deadline:
                        raise errors.TransportError(url, f"timed out: no complete answer within {budget:g} s")
                    chunks.append(chunk)
                return response.status_code, response.headers, b"".join(chunks)
        except requests.RequestException as exc:  # no HTTP answer: which failure, and its fix
            raise errors.transport_error(url, exc, *timeout, admin_url=url.startswith(self.admin_url + "/")) from None
        except ValueError as exc:  # requests reads a redirect's Location even unfollowed: a malformed one raises
            raise errors.BadResponse(url, f"an answer that cannot be read: {_one_line(str(exc))[:200]}") from None

    def get_json(
        self,
        path: str,
        *,
        base: str | None = None,
        params: Mapping[str, Any] | None = None,
        deadline_s: float | None = None,
        decode: Callable[[bytes], Any] | None = None,
    ) -> Any:
        """A GET retried on connection errors and 5xx, whose body must be JSON.

        ``decode``: a typed decoder tried first on the answer's bytes (the body decoded once, straight into
        what the caller needs); when it returns None the body is decoded as JSON, as without it.
        """

        @retry(
            retry=retry_if_exception_type((errors.TransportError, errors.ServerError)),
            stop=stop_after_attempt(self.retries),
            wait=wait_exponential(multiplier=0.2, max=2.0),
            reraise=True,
        )
        def attempt() -> Any:
            response = self.request("GET", path, base=base, params=params, deadline_s=deadline_s)
            if decode is not None:
                decoded = decode(response.content)
                if decoded is not None:
                    return decoded
            try:
                return response.json()
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                raise errors.BadResponse(response.url, "the answer is not JSON") from None

        return attempt()

    # ------------------------------------------------------------------ verbs

    def clusters(self) -> list[str]:
        return _list_of_str(self.get_json("/admin/v2/clusters"), "/admin/v2/clusters")

    def active_brokers(self, cluster: str) -> list[str]:
        path = f"/admin/v2/brokers/{quote(cluster)}"
        brokers = _list_of_str(self.get_json(path), path)
        self.trust_brokers(brokers)
        with self._lock:
            self._cluster, self._broker_ids = cluster, list(brokers)
        return brokers

    def leader(self) -> dict[str, Any]:
        return _object(self.get_json("/admin/v2/brokers/leaderBroker"), "leaderBroker")

    def load_report(
        self, broker_id: str, deadline_s: float | None = None, decode: Callable[[bytes], Any] | None = None
    ) -> Any:
        """LocalBrokerData of one broker: asked of that broker itself (there is no redirect).

        A report whose heartbeat bundles name another broker came through a proxy or a Service, not from
        ``broker_id``: a BadResponse, never a report filed under the wrong broker. ``decode`` (see
        ``get_json``) returns a Mapping whose ``get`` gives ``bundles``, ``webServiceUrl`` and
        ``webServiceUrlTls`` as the JSON document has them (the collector's: ``decode_load_report``).
        """
        base = self.broker_url(broker_id)
        report = self.get_json("/admin/v2/broker-stats/load-report", base=base, deadline_s=deadline_s, decode=decode)
        if isinstance(report, Mapping):
            other = _reporting_broker(report)
            if other is not None and other != broker_id:
                raise errors.BadResponse(
                    base,
                    f"the load report at {base} is broker {other}'s, not {broker_id}'s: that URL does not reach the "
                    "broker itself (a proxy or a Service?); set brokerWebServiceUrlTemplate or brokerWebServiceUrls",
                )
            self._learn(broker_id, report)
        return report

    def topic_stats(self, broker_id: str) -> Any:
        return self.get_json("/admin/v2/broker-stats/topics", base=self.broker_url(broker_id))

    def owned_bundles(self, cluster: str, broker_id: str) -> dict[str, Any]:
        """bundle name → ownership status; anything but an object of bundle names is a BadResponse."""
        path = f"/admin/v2/brokers/{quote(cluster)}/{quote(broker_id, safe=':')}/ownedNamespaces"
        doc = _object(self.get_json(path), f"ownedNamespaces of {broker_id}")
        if not all(isinstance(b, str) and b.count("/") >= 2 for b in doc):
            raise errors.BadResponse(path, "ownedNamespaces: expected an object keyed by bundle names")
        return doc

    def bundles(self, namespace: str) -> list[str]:
        doc = self.get_json(f"/admin/v2/namespaces/{namespace}/bundles")
        if not isinstance(doc, dict):
            raise errors.BadResponse(namespace, "bundles: expected an object")
        return _list_of_str(doc.get("boundaries"), f"{namespace} boundaries")

    def dynamic_config_values(self) -> dict[str, str]:
        return _object(self.get_json("/admin/v2/brokers/configuration/values"), "configuration/values")

    def runtime_config(self) -> dict[str, Any]:
        return _object(self.get_json("/admin/v2/brokers/configuration/runtime"), "configuration/runtime")

    def set_dynamic_config(self, name: str, value: str) -> None:
        self.request("POST", f"/admin/v2/brokers/configuration/{quote(name)}/{quote(value, safe='')}")

    def unload(self, bundle: str, destination: str | None = None) -> None:
        namespace, _, bundle_range = bundle.rpartition("/")
        params = {"destinationBroker": destination} if destination else None
        self.request("PUT", f"/admin/v2/namespaces/{namespace}/{bundle_range}/unload", params=params)

    def split(self, bundle: str, algorithm: str, boundaries: list[int] | None, unload: bool) -> None:
        namespace, _, bundle_range = bundle.rpartition("/")
        params = {"unload": str(unload).lower(), "splitAlgorithmName": algorithm}
        self.request(
            "PUT",
            f"/admin/v2/namespaces/{namespace}/{bundle_range}/split",
            params=params,
            body=list(boundaries) if boundaries else None,
        )


def _base(url: Any) -> str | None:
    """``scheme://host:port`` of an http(s) URL, or None."""
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return f"{parts.scheme}://{parts.netloc}"


TEMPLATE_FIELDS = frozenset({"id", "host", "port"})


def render_template(template: str, broker_id: str) -> str:
    """``brokerWebServiceUrlTemplate`` for one broker: ``{id}`` is host:port, ``{host}`` and ``{port}`` its parts."""
    host, _, port = broker_id.rpartition(":")
    return template.format(id=broker_id, host=host or broker_id, port=port if host else "")


def template_fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def _reporting_broker(report: Mapping[str, Any]) -> str | None:
    """The broker id in a report's heartbeat bundles (pulsar/<id>/… or pulsar/<cluster>/<id>/…), if any."""
    bundles = report.get("bundles")
    if not isinstance(bundles, list):
        return None
    for bundle in bundles:
        if isinstance(bundle, str) and bundle.startswith("pulsar/"):
            parts = bundle.split("/")
            if len(parts) in (3, 4) and ":" in parts[-2]:
                return parts[-2]
    return None


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise errors.BadResponse(what, f"expected a JSON object, got {type(value).__name__}")
    return value


def _without_credential(text: str, authorization: str | None) -> str:
    """``text`` (a server's words) with the credential the call sent masked: a proxy or a broker that echoes the
    request's Authorization header back in its error would put the token in a message, a log line and the audit."""
    if not authorization:
        return text
    for secret in sorted({authorization, authorization.partition(" ")[2]}, key=len, reverse=True):
        if len(secret) >= MASKED_FROM:
            text = text.replace(secret, "***")
    return text


def _reason(response: Answer) -> str:
    """One line, whichever body Pulsar sent.

    ``RestException(Status, message)`` answers JSON ``{"reason": ...}``: the reason, its whitespace folded.
    ``RestException(Throwable)`` answers text/plain ``--- An unexpected error occurred in the server ---``,
    ``Message: <message>``, ``Stacktrace:`` and the trace (RestException.getExceptionData): the marker and the
    message, never the trace. Anything else (Jetty's HTML pages, a proxy's text): its first two lines with
    words, markup removed, stack frames left out.
    """
    try:
        doc = response.json()
        if isinstance(doc, dict) and isinstance(doc.get("reason"), str):
            return _one_line(doc["reason"])[:500] or f"HTTP {response.status}"
    except (ValueError, RecursionError):
        pass
    body = response.text or ""
    if "<html" in body[:200].lower():  # Jetty's error page: its words, never its markup, in a message
        body = re.sub(r"\s+", " ", re.sub(r"<[^>]*>", " ", body))
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if UNEXPECTED_MARKER in body[:200]:
        message = next((line[len("Message:") :].strip() for line in lines if line.startswith("Message:")), None)
        if message is None:  # no Message line: the line after the marker (an exception's name), if any
            rest = [line for line in lines if UNEXPECTED_MARKER not in line and not _stack_line(line)]
            message = rest[0] if rest else None
        text = f"{UNEXPECTED_MARKER} {message}" if message else UNEXPECTED_MARKER
        return f"HTTP {response.status}: {_one_line(text)[:300]}"
    first = [line for line in lines if not _stack_line(line)][:2]
    text = _one_line(" ".join(first))
    return f"HTTP {response.status}: {text[:200]}" if text else f"HTTP {response.status}"


UNEXPECTED_MARKER = "--- An unexpected error occurred in the server ---"  # RestException.getExceptionData


def _stack_line(line: str) -> bool:
    """A line of a Java stack trace: a frame, a "Caused by", "... N more", or the "Stacktrace:" header."""
    return line.startswith(("at ", "Caused by:", "Stacktrace:", "Suppressed:")) or bool(
        re.fullmatch(r"\.\.\. \d+ more", line)
    )


def _one_line(text: str) -> str:
    """Whitespace (newlines included) folded to single spaces."""
    return " ".join(text.split())


def _list_of_str(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.BadResponse(what, "expected a list of strings")
    return value


def service_url_of(admin_url: str) -> str:
    """The binary-protocol URL of the broker (or proxy) behind an admin URL, on Pulsar's default ports."""
    scheme, _, rest = admin_url.partition("://")
    host = rest.split("/", 1)[0].rpartition("@")[2].rsplit(":", 1)[0]  # a basic-auth login is the web API's only
    return f"pulsar+ssl://{host}:6651" if scheme == "https" else f"pulsar://{host}:6650"
