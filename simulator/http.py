"""The admin REST API over loopback: a listener per broker, each answering as that broker.

Paths, query parameters, status codes, redirects and bodies follow
shared/reference/pulsar-admin-api.md §2–§3 and §7. Errors with an explicit status carry
``{"reason": ...}``; unauthenticated requests get Jetty's HTML 401 page; an unexpected failure is a
text/plain 500 and never stops the server. Injected faults (simulator/faults.py) make brokers
misbehave on purpose; every request, faulted or not, is recorded (``SimulatedPulsar.requests``) and
optionally appended to a JSON-lines request log.

One asyncio event loop on one thread serves every listener and connection (HTTP/1.1, keep-alive, the
framing, status lines and headers of the standard library's BaseHTTPRequestHandler). A request is
answered on the loop when the cluster's lock is free, else on a small pool of handler threads, so a
thread holding the lock (``advance``, a test) never stalls the loop; a ``delay`` fault sleeps on the
loop without holding anyone up. Brokers are addressed on loopback (``LoopbackIds``): by default
127.0.0.1 with a port each; with ``addresses: distinct`` an address each (127.0.0.1, 127.0.0.2, …)
on one port, like a real cluster's hosts. Each listening socket is bound when its id is handed out and
held until served, so no two brokers share a port, and an address in use or too few file descriptors
is an error (``ServeError``), never a silent shortfall.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import html
import json
import re
import resource
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import formatdate
from http.server import DEFAULT_ERROR_CONTENT_TYPE, DEFAULT_ERROR_MESSAGE, BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from pulsar_lb_operator.simulator import admin_errors, dynamic_config
from pulsar_lb_operator.simulator import elm as sim_elm
from pulsar_lb_operator.simulator.cluster import Broker, SimError, SimulatedCluster
from pulsar_lb_operator.simulator.faults import FaultRule, FaultSet, FaultSpecError, parse_fault
from pulsar_lb_operator.simulator.listeners import TLS, AdvertisedIds, advertised_tls_url, reachable_tls_url
from pulsar_lb_operator.simulator.scenario import ADDRESSES, Scenario, ScenarioError
from pulsar_lb_operator.strategies.bundles import format_boundary, split_bundle_name
from pulsar_lb_operator.strategies.config import config_keys

UNEXPECTED = "--- An unexpected error occurred in the server ---"
STATIC_RUNTIME = {
    "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
    "loadBalancerEnabled": "true",
}
HTML_401 = "<html><body><h2>HTTP ERROR 401 Authentication required</h2></body></html>"
# what a ``garbage`` fault answers: not JSON, not even UTF-8 (an invalid sequence right at the start)
GARBAGE = b'\xc3\x28\xa0\xa1<\x89PNG\r\n\x1a\n{"cpu": \xff\xfe\xfd garbage \xed\xa0\x80\xf8\x88\x80\x80\x80'

METHODS = ("GET", "PUT", "POST", "DELETE")
SERVER_HEADER = f"{BaseHTTPRequestHandler.server_version} {BaseHTTPRequestHandler.sys_version}"
HANDLER_THREADS = 4  # answer requests while another thread holds the cluster's lock
BACKLOG = 128
MAX_HEAD_BYTES = 65536  # request line and headers, as BaseHTTPRequestHandler's line limit
FDS_PER_BROKER = 3  # its listening socket and one kept-alive connection, both ends when the client runs here
FDS_MINIMUM = 1  # its listening socket: below this per broker, the cluster cannot be served at all
FDS_HEADROOM = 256  # files, pipes and other sockets of the process


class ServeError(ScenarioError):
    """The machine cannot serve what was asked: an address or port in use, too few file descriptors."""


def loopback_address(index: int) -> str:
    """The ``index``-th host of the loopback network: 127.0.0.1 … 127.0.0.254, 127.0.1.1, … (no .0/.255)."""
    if not 0 <= index < 254 * 256 * 256:
        raise ServeError(f"no loopback address for broker number {index + 1}")
    third, fourth = divmod(index, 254)
    second, third = divmod(third, 256)
    return f"127.{second}.{third}.{fourth + 1}"


def ensure_fd_limit(brokers: int) -> int:
    """Raise the soft limit on open files so ``brokers`` can be served; the limit in force.

    It aims at FDS_PER_BROKER per broker plus FDS_HEADROOM (as far as the hard limit allows) and
    raises ServeError when not even a listening socket per broker plus the headroom fits.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = brokers * FDS_PER_BROKER + FDS_HEADROOM
    needed = brokers * FDS_MINIMUM + FDS_HEADROOM
    unlimited = resource.RLIM_INFINITY
    if soft != unlimited and soft < wanted:
        target = wanted if hard == unlimited or hard >= wanted else hard
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
    if soft != unlimited and soft < needed:
        shown = "unlimited" if hard == unlimited else str(hard)
        raise ServeError(
            f"serving {brokers} brokers needs at least {needed} open files (a listening socket each, plus "
            f"{FDS_HEADROOM}), {wanted} to keep a connection to each; the limit is {soft} (hard limit {shown}): "
            f"raise it, e.g. ulimit -n {wanted}"
        )
    return soft


def _listen(host: str, port: int, name: str) -> socket.socket:
    """A non-blocking listening socket on host:port; ServeError naming the broker when it cannot be had."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as HTTPServer: a restart rebinds at once
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        why = exc.strerror or str(exc)
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            why += f" (the open-file limit is {soft}: raise it, e.g. ulimit -n {soft * 2})"
        elif exc.errno == errno.EADDRNOTAVAIL and host != "127.0.0.1":
            why += " (this machine's loopback answers only on 127.0.0.1: use addresses: ports, or add the alias)"
        raise ServeError(f"cannot listen on {host}:{port} for broker {name}: {why}") from None
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass
class Response:
    status: int
    body: Any = None  # dict/list → JSON; str → text/plain; bytes → as is; None → empty
    headers: dict[str, str] | None = None
    content_type: str | None = None


@dataclass(frozen=True)
class Fault:
    """The older, path-only form of a fault, for ``SimulatedPulsar.inject`` (any method).

    ``delay_s`` sleeps first; then ``status`` answers that status (with ``body`` as text/plain, or
    Pulsar's reason JSON), or ``body`` alone answers 200 with it as application/json.
    """

    path: str
    status: int | None = None
    body: str | None = None
    delay_s: float = 0.0

    def rules(self, broker: str) -> list[FaultRule]:
        out = []
        if self.delay_s:
            out.append(FaultRule(broker, "*", self.path, "delay", delay_s=self.delay_s))
        if self.status is not None:
            out.append(FaultRule(broker, "*", self.path, "status", self.status, body=self.body))
        elif self.body is not None:
            out.append(
                FaultRule(broker, "*", self.path, "status", 200, body=self.body, content_type="application/json")
            )
        return out


@dataclass(frozen=True)
class Request:
    """One request a broker received, with what it answered (status 0: the connection was dropped)."""

    broker: str  # the broker's id, host:port
    method: str
    path: str
    query: str
    status: int
    user_agent: str | None = None
    fault: str | None = None  # the spec of the fault(s) that fired, joined by " + "; None: none did
    at_ms: int = 0  # wall clock, epoch ms, when the request was read
    broker_name: str = ""

    def to_json(self) -> dict[str, Any]:
        """The request log's line: at, broker (its name), brokerId, method, path, query, status, userAgent, fault."""
        return {
            "at": self.at_ms,
            "broker": self.broker_name or self.broker,
            "brokerId": self.broker,
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "status": self.status,
            "userAgent": self.user_agent,
            "fault": self.fault,
        }


class LoopbackIds:
    """Broker ids (host:port) on loopback, each listening socket bound — and held — as its id is handed out.

    ``addresses``: ``ports`` (127.0.0.1, a free port each; the first on ``first_port`` when given) or
    ``distinct`` (127.0.0.1, 127.0.0.2, … all on one port: ``first_port``, else the free port the first
    broker got); None: the scenario's ``addresses`` (see ``prepare``). The server adopts each socket with
    ``take``; ``close`` closes those never adopted.
    """

    def __init__(self, first_port: int | None = None, addresses: str | None = None) -> None:
        if addresses is not None and addresses not in ADDRESSES:
            raise ValueError(f"addresses: {addresses!r} is not one of {', '.join(ADDRESSES)}")
        self.first_port = first_port
        self.addresses = addresses
        self._count = 0
        self._port: int | None = None  # distinct: the port every broker shares
        self._held: dict[str, socket.socket] = {}
        self._lock = threading.Lock()

    def prepare(self, scenario: Scenario) -> None:
        """Called by SimulatedCluster before its first broker: the addressing mode and the open-file limit."""
        if self.addresses is None:
            self.addresses = getattr(scenario, "addresses", "ports")
        ensure_fd_limit(len(scenario.broker_names))

    @property
    def mode(self) -> str:
        return self.addresses or "ports"

    def __call__(self, name: str) -> str:
        with self._lock:
            index = self._count
            if self.mode == "distinct":
                host = loopback_address(index)
                port = self._port if self._port is not None else (self.first_port or 0)
            else:
                host = "127.0.0.1"
                port = self.first_port if index == 0 and self.first_port else 0
            sock = _listen(host, port, name)
            broker_id = f"{host}:{sock.getsockname()[1]}"
            if broker_id in self._held:  # cannot happen while the sockets are held; never serve one id twice
                sock.close()
                raise ServeError(f"broker {name}: {broker_id} was handed out twice")
            if self.mode == "distinct" and self._port is None:
                self._port = sock.getsockname()[1]
            self._held[broker_id] = sock
            self._count += 1
            return broker_id

    def take(self, broker_id: str) -> socket.socket | None:
        """The listening socket bound for ``broker_id``, handed over once (None: none is held)."""
        with self._lock:
            return self._held.pop(broker_id, None)

    def close(self) -> None:
        with self._lock:
            for sock in self._held.values():
                sock.close()
            self._held.clear()


class SimulatedPulsar:
    """Serves a SimulatedCluster: a listener per live broker, and one for each broker (re)started later."""

    def __init__(
        self,
        cluster: SimulatedCluster,
        token: str | None = None,
        user_token: str | None = None,
        faults: Iterable[FaultRule | str] | None = None,
        request_log: str | Path | None = None,
        *,
        tls: TLS | None = None,
        token_check: Callable[[str], bool] | None = None,
    ) -> None:
        """``token``: the super-user's; ``user_token``: a valid token of a role without super-user rights.

        ``tls``: an https listener per broker beside its plain one, and mutual TLS when it asks for client
        certificates (simulator/listeners.py); ``token_check``: more super-user tokens (e.g. an OAuth2
        issuer's), valid while it says so.

        ``faults``: rules or spec strings to arm (None: the scenario's ``faults:``); ``request_log``: a
        file to append one JSON line per request to (closed by ``stop``). Raises ServeError when a
        broker's address cannot be listened on.
        """
        self.cluster = cluster
        self.token = token
        self.user_token = user_token
        self.tls = tls
        self.token_check = token_check
        self.servers: dict[str, asyncio.Server] = {}
        self.tls_servers: dict[str, asyncio.Server] = {}
        self.requests: list[Request] = []
        self.faults = FaultSet()
        for fault in getattr(cluster.scenario, "faults", ()) if faults is None else faults:
            self.add_fault(fault)
        self._log_lock = threading.Lock()
        self._log_file: TextIO | None = None
        self._connections: set[_Connection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopped = False
        ensure_fd_limit(len(cluster.brokers))
        if request_log is not None:
            self._log_file = open(request_log, "a", encoding="utf-8")  # noqa: SIM115 - closed by stop()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sim-http", daemon=True)
        self._thread.start()
        self._workers = ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="sim-handler")
        cluster.listeners.append(self._on_membership)
        try:
            self._serve([b for b in cluster.brokers.values() if b.alive])
        except BaseException:
            self.stop()
            raise

    # ------------------------------------------------------------------ lifecycle

    @staticmethod
    def port_allocator(first_port: int | None = None, addresses: str | None = None) -> LoopbackIds:
        """Broker ids on loopback with their sockets held (the first one on ``first_port`` when given);
        ``addresses``: ``ports`` or ``distinct`` (None: as the scenario says). See LoopbackIds."""
        return LoopbackIds(first_port, addresses)

    def _serve(self, brokers: list[Broker]) -> None:
        """Listen for ``brokers``: on the socket bound when the id was handed out, else bound now."""
        allocator = self.cluster.allocate_id
        take = getattr(allocator, "take", None)
        sockets: list[tuple[str, socket.socket]] = []
        try:
            for broker in brokers:
                sock = take(broker.id) if take is not None else None
                sockets.append((broker.id, sock or _listen(broker.host, broker.port, broker.name)))
        except BaseException:
            for _, sock in sockets:
                sock.close()
            raise
        self._call(self._start_listeners(sockets))
        if self.tls is not None:
            self._call(self._start_tls_listeners([b.id for b in brokers]))
            for broker in brokers:  # here, not on the loop: the caller may hold the cluster's lock (advance)
                self.cluster.set_web_url_tls(broker.id, advertised_tls_url(broker.id, self.tls))

    async def _start_tls_listeners(self, broker_ids: list[str]) -> None:
        assert self.tls is not None
        for broker_id in broker_ids:
            self.tls_servers[broker_id] = await self._loop.create_server(
                lambda broker_id=broker_id: _TlsConnection(self, broker_id),
                sock=self.tls.socket_for(broker_id),
                backlog=BACKLOG,
                ssl=self.tls.context,
            )

    async def _start_listeners(self, sockets: list[tuple[str, socket.socket]]) -> None:
        for broker_id, sock in sockets:
            self.servers[broker_id] = await self._loop.create_server(
                lambda broker_id=broker_id: _Connection(self, broker_id), sock=sock, backlog=BACKLOG
            )

    async def _stop_listener(self, broker_id: str) -> None:
        server = self.servers.pop(broker_id, None)
        if server is not None:
            server.close()  # the listening socket is closed at once: connecting is refused from now on
        tls_server = self.tls_servers.pop(broker_id, None)
        if tls_server is not None:
            tls_server.close()

    def _call(self, coroutine: Any) -> Any:
        """Run ``coroutine`` on the loop and wait for it. The coroutine must never take the cluster's lock:
        the caller may hold it (a membership change during ``advance``), and the loop would wait forever."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("the simulator's event loop cannot wait for itself")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _on_membership(self, change: str, broker: Broker) -> None:
        """A stopped broker refuses connections; a (re)started one listens on its address again."""
        if self._stopped:
            return
        if change == "added" and broker.id not in self.servers:
            self._serve([broker])
        elif change == "removed" and broker.id in self.servers:
            self._call(self._stop_listener(broker.id))

    async def _shutdown(self) -> None:
        for server in [*self.servers.values(), *self.tls_servers.values()]:
            server.close()
        self.servers.clear()
        self.tls_servers.clear()
        for connection in list(self._connections):
            connection.close()
        for task in list(self._tasks):
            task.cancel()

    def stop(self) -> None:
        """Stop listening and close every connection; the request log is closed. Safe to call twice."""
        if not self._stopped:
            self._stopped = True
            with contextlib.suppress(ValueError):
                self.cluster.listeners.remove(self._on_membership)
            try:
                if self._loop.is_running():
                    self._call(self._shutdown())
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(10)
                if not self._thread.is_alive():
                    self._loop.close()
                self._workers.shutdown(wait=False, cancel_futures=True)
                close = getattr(self.cluster.allocate_id, "close", None)
                if close is not None:
                    close()
                if self.tls is not None:
                    self.tls.close()  # its temporary CA and certificate files
        with self._log_lock:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    def __enter__(self) -> SimulatedPulsar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def admin_url(self) -> str:
        """The first broker's web URL: what a user would give as the cluster's admin URL."""
        first = next(b for b in self.cluster.brokers.values() if b.alive)
        return self.reachable_url(first)

    def url_of(self, name: str) -> str:
        return self.reachable_url(self.cluster.by_name(name))

    def reachable_url(self, broker: Broker) -> str:
        """Where a broker is reached from here: its https listener with TLS on, else its web URL — or, for
        an advertised id that does not resolve, the loopback port it listens on."""
        if self.tls is not None and self.tls.port_of(broker.id):
            return reachable_tls_url(broker.id, self.tls)
        reachable = getattr(self.cluster.allocate_id, "reachable", None)
        return (reachable(broker.id) if reachable is not None else None) or broker.web_url

    # ------------------------------------------------------------------ requests

    def _dispatch(self, connection: _Connection, request: _Parsed) -> None:
        """On the loop: answer at once when nothing waits (no delay, the cluster's lock free), else later."""
        handler = _Handler(self, connection.broker_id, request)
        handler.secure, handler.client_role = connection.secure, connection.client_role
        if not handler.delays and self.cluster.lock.acquire(blocking=False):
            try:
                payload, close = self._finish(handler)
            finally:
                self.cluster.lock.release()
            connection.answered(payload, close)
            return
        task = self._loop.create_task(self._finish_later(connection, handler))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish_later(self, connection: _Connection, handler: _Handler) -> None:
        if handler.delays:
            await asyncio.sleep(handler.delay_s)
        payload, close = await self._loop.run_in_executor(self._workers, self._finish, handler)
        connection.answered(payload, close)

    @staticmethod
    def _finish(handler: _Handler) -> tuple[bytes | None, bool]:
        try:
            return handler.finish()
        except Exception:  # never leave a connection hanging: a bug here is a 500 too
            body = f"{UNEXPECTED}\n{traceback.format_exc()}"
            return _encode(Response(500, body)), True

    # ------------------------------------------------------------------ faults

    @property
    def broker_names(self) -> set[str]:
        """Names a fault may target: the cluster's brokers and those the scenario's events will add."""
        names = {b.name for b in self.cluster.brokers.values()}
        return names | getattr(self.cluster.scenario, "broker_names", set())

    def add_fault(self, fault: FaultRule | str) -> FaultRule:
        """Arm a fault (a FaultRule or a spec string); FaultSpecError for a bad spec or an unknown broker."""
        if isinstance(fault, str):
            rule = parse_fault(fault, self.broker_names)
        else:
            rule = fault
            if rule.broker != "*" and rule.broker not in self.broker_names:
                raise FaultSpecError(
                    f"fault {rule.spec!r}: unknown broker {rule.broker!r} "
                    f"(brokers: {', '.join(sorted(self.broker_names))}; * for all)"
                )
        return self.faults.add(rule)

    def remove_fault(self, fault: FaultRule | str) -> bool:
        """Disarm the first active fault equal to ``fault``; False when none is."""
        rule = parse_fault(fault, self.broker_names) if isinstance(fault, str) else fault
        return self.faults.remove(rule)

    def inject(self, broker_name: str, fault: Fault) -> None:
        """The older form: a Fault (path, status, body, delay_s) on one broker, any method."""
        name = self.cluster.by_name(broker_name).name
        for rule in fault.rules(name):
            self.faults.add(rule)

    def clear_faults(self) -> None:
        self.faults.clear()

    @property
    def active_faults(self) -> list[FaultRule]:
        return self.faults.rules

    @property
    def faults_fired(self) -> int:
        """How many times a fault fired (a request it changed, delays included) since the start."""
        return self.faults.fired

    def fault_counts(self) -> list[tuple[FaultRule, int]]:
        """Each active fault with the number of times it fired."""
        return self.faults.counts()

    # ------------------------------------------------------------------ request log

    def log(self, request: Request) -> None:
        with self._log_lock:
            self.requests.append(request)
            if self._log_file is not None:
                self._log_file.write(json.dumps(request.to_json()) + "\n")
                self._log_file.flush()

    def mutating_requests(self) -> list[Request]:
        return [r for r in self.requests if r.method in ("PUT", "POST", "DELETE")]


_LONG_HEADER = f"got more than {MAX_HEAD_BYTES} bytes when reading header line"
_HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass
class _Parsed:
    """One request read off a connection."""

    method: str
    target: str
    headers: _Headers
    body: bytes
    close: bool  # the client asked to close after the answer (or spoke HTTP/1.0 without keep-alive)
    simple: bool = False  # an HTTP/0.9 request ("GET /path"): the answer is the body alone


class _Headers(dict[str, str]):
    """Request headers, looked up case-insensitively (``get("Content-Length")``)."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, name.lower(), default)


class _Connection(asyncio.Protocol):
    """One client connection to one broker: requests are read and answered in order (keep-alive, pipelining)."""

    def __init__(self, pulsar: SimulatedPulsar, broker_id: str) -> None:
        self.pulsar = pulsar
        self.broker_id = broker_id
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.closing = False
        self.continued = False  # "100 Continue" already sent for the request being read

    secure = False  # came over TLS
    client_role: str | None = None  # the CN of its verified client certificate

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self.secure, self.client_role = True, TLS.role_of(ssl_object)
        self.pulsar._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.pulsar._connections.discard(self)

    def eof_received(self) -> bool:
        if not self.busy:
            self.close()
        else:
            self.closing = True  # answer the request being handled, then close
        return True

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        """Handle the next complete request in the buffer, if there is one."""
        if self.busy or self.transport is None or self.transport.is_closing():
            return
        parsed = self._parse()
        if parsed is None:
            if self.closing:
                self.close()
            return
        self.busy = True
        self.pulsar._dispatch(self, parsed)

    def answered(self, payload: bytes | None, close: bool) -> None:
        """Write an answer (None: drop the connection without one), then go on with the next request."""
        self.busy = False
        if self.transport is None or self.transport.is_closing():
            return
        if payload is not None:
            self.transport.write(payload)
        if payload is None or close:
            self.close()
            return
        self._next()

    def _parse(self) -> _Parsed | None:
        """The next complete request, read as BaseHTTPRequestHandler.parse_request reads it; None: not
        complete yet, or refused (answered and closed, as it does)."""
        line_end = self.buffer.find(b"\n")
        if line_end < 0 or line_end > MAX_HEAD_BYTES:
            if len(self.buffer) > MAX_HEAD_BYTES:
                self._refuse(414, None, version_known=True)
            return None
        match = _HEAD_END.search(self.buffer)
        request_line = bytes(self.buffer[:line_end]).decode("iso-8859-1").rstrip("\r\n")
        words = request_line.split()
        if not words:  # an empty request line: the connection is closed without an answer
            self.buffer.clear()
            self.close()
            return None
        simple = True  # HTTP/0.9 until a version is read
        close = True
        if len(words) >= 3:
            version = words[-1]
            try:
                if not version.startswith("HTTP/"):
                    raise ValueError
                number = version.split("/", 1)[1]
                parts = number.split(".")
                if len(parts) != 2 or any(not p.isdigit() or len(p) > 10 for p in parts):
                    raise ValueError
                major, minor = int(parts[0]), int(parts[1])
            except (ValueError, IndexError):
                self._refuse(400, f"Bad request version ({version!r})")
                return None
            if (major, minor) >= (1, 1):
                close = False
            if (major, minor) >= (2, 0):
                self._refuse(505, f"Invalid HTTP version ({number})")
                return None
            simple = False
        if not 2 <= len(words) <= 3:
            self._refuse(400, f"Bad request syntax ({request_line!r})", version_known=not simple)
            return None
        method, target = words[:2]
        if simple and method != "GET":
            self._refuse(400, f"Bad HTTP/0.9 request type ({method!r})")
            return None
        if match is None:  # the headers are not complete yet
            if len(self.buffer) - self.buffer.rfind(b"\n") - 1 > MAX_HEAD_BYTES:
                self._refuse(431, "Line too long", version_known=not simple, explain=_LONG_HEADER)
            return None
        if target.startswith("//"):  # as BaseHTTPRequestHandler: not a scheme-relative URL
            target = "/" + target.lstrip("/")
        head = bytes(self.buffer[line_end + 1 : match.start()]).decode("iso-8859-1")
        headers = _Headers()
        lines = [line for line in head.replace("\r\n", "\n").split("\n") if line]
        if len(lines) > 100:
            self._refuse(431, "Too many headers", version_known=not simple)
            return None
        for line in lines:
            if len(line) > MAX_HEAD_BYTES:
                self._refuse(431, "Line too long", version_known=not simple, explain=_LONG_HEADER)
                return None
            name, colon, value = line.partition(":")
            if colon and name.lower() not in headers:  # the first of repeated headers, as Message.get
                headers[name.strip().lower()] = value.strip()
        connection = headers.get("Connection", "").lower()
        if connection == "close":
            close = True
        elif connection == "keep-alive":
            close = False
        if method not in METHODS:
            self._refuse(501, f"Unsupported method ({method!r})", head_only=method == "HEAD", version_known=not simple)
            return None
        try:
            length = int(headers.get("Content-Length") or 0)
        except ValueError:  # the old handler failed reading it: the connection was closed without an answer
            self.buffer.clear()
            self.close()
            return None
        expect = headers.get("Expect", "").lower() == "100-continue"
        if expect and not simple and not self.continued and self.transport is not None:
            self.continued = True  # sent once the headers are in, before the body is read
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if len(self.buffer) < match.end() + length:
            return None
        body = bytes(self.buffer[match.end() : match.end() + max(length, 0)])
        del self.buffer[: match.end() + max(length, 0)]
        self.continued = False
        return _Parsed(method, target, headers, body, close or simple, simple)

    def _refuse(
        self,
        status: int,
        message: str | None,
        head_only: bool = False,
        version_known: bool = False,
        explain: str | None = None,
    ) -> None:
        """BaseHTTPRequestHandler's send_error: an HTML error page, and the connection closed. Before a
        request line has given its version, the answer is the page alone (its HTTP/0.9 default)."""
        short, long = BaseHTTPRequestHandler.responses.get(status, ("???", "???"))
        message = short if message is None else message
        explain = long if explain is None else explain
        page = DEFAULT_ERROR_MESSAGE % {
            "code": status,
            "message": html.escape(message, quote=False),
            "explain": html.escape(explain, quote=False),
        }
        body = page.encode("UTF-8", "replace")
        headers = [("Connection", "close"), ("Content-Type", DEFAULT_ERROR_CONTENT_TYPE)]
        headers.append(("Content-Length", str(len(body))))
        self.buffer.clear()
        self.busy = True
        if self.transport is not None:
            head = _status_and_headers(status, headers, message) if version_known else b""
            self.transport.write(head + (b"" if head_only else body))
        self.close()


class _TlsConnection(_Connection):
    """A connection to a broker's https listener. TLS has no half-close: an end of input closes it."""

    def eof_received(self) -> bool:
        super().eof_received()
        return False

    def close(self) -> None:
        if self.pulsar._stopped and self.transport is not None:  # no TLS goodbye when the server stops
            self.closing = True
            self.transport.abort()
            return
        super().close()


_date_cache: tuple[int, str] = (0, "")


def _date() -> str:
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]


def _status_and_headers(status: int, headers: list[tuple[str, str]], message: str | None = None) -> bytes:
    """The status line, Server and Date, then ``headers``, as BaseHTTPRequestHandler.send_response writes them."""
    if message is None:
        message = BaseHTTPRequestHandler.responses.get(status, ("",))[0]
    lines = [f"HTTP/1.1 {status} {message}", f"Server: {SERVER_HEADER}", f"Date: {_date()}"]
    lines += [f"{key}: {value}" for key, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "strict")


def _encode(response: Response, simple: bool = False) -> bytes:
    if isinstance(response.body, dict | list):
        payload, ctype = json.dumps(response.body).encode(), "application/json"
    elif isinstance(response.body, str):
        payload, ctype = response.body.encode(), response.content_type or "text/plain"
    elif isinstance(response.body, bytes):
        payload, ctype = response.body, response.content_type or "application/octet-stream"
    else:
        payload, ctype = b"", None
    headers = list((response.headers or {}).items())
    if ctype:
        headers.append(("Content-Type", ctype))
    headers.append(("Content-Length", str(len(payload))))
    return payload if simple else _status_and_headers(response.status, headers) + payload


class _Handler:
    """One request to one broker: faults, routing, the answer and its line in the request log."""

    secure = False  # came over TLS (then redirects and lookups give https URLs, as PulsarWebResource does)
    client_role: str | None = None  # the CN of the caller's verified client certificate

    def __init__(self, pulsar: SimulatedPulsar, broker_id: str, request: _Parsed) -> None:
        self.pulsar = pulsar
        self.broker_id = broker_id
        self.command = request.method
        self.path = request.target
        self.headers = request.headers
        self.body = request.body
        self.close_connection = request.close
        self.simple = request.simple
        self.at_ms = int(time.time() * 1000)
        self.parts = urlsplit(self.path)
        broker = pulsar.cluster.brokers.get(broker_id)
        self.name = broker.name if broker is not None else ""
        self.delays: list[FaultRule] = []
        self.fault: FaultRule | None = None
        if broker is not None and broker.alive:
            self.delays, self.fault = pulsar.faults.before(self.name, self.command, self.parts.path)

    @property
    def delay_s(self) -> float:
        return sum(d.delay_s for d in self.delays)

    def finish(self) -> tuple[bytes | None, bool]:
        """After the delays: the answer (a fault's or the real one) as bytes, None to drop the connection."""
        method, fault = self.command, self.fault
        fired = list(self.delays)
        response: Response | None
        if fault is not None and not fault.after:
            fired.append(fault)
            response = _fault_response(fault)
        else:
            response = self._answer(method, self.parts.path, self.parts.query, self.body)
            if fault is not None and 200 <= response.status < 300 and self.pulsar.faults.take(fault):
                fired.append(fault)
                response = _fault_response(fault)
        request = Request(
            self.broker_id,
            method,
            self.parts.path,
            self.parts.query,
            response.status if response is not None else 0,
            user_agent=self.headers.get("User-Agent"),
            fault=" + ".join(f.spec for f in fired) or None,
            at_ms=self.at_ms,
            broker_name=self.name,
        )
        self.pulsar.log(request)
        if response is None:  # reset: drop the connection without a word
            return None, True
        return _encode(response, self.simple), self.close_connection

    def _answer(self, method: str, path: str, query: str, body: bytes) -> Response:
        try:
            return self._respond(method, path, query, body)
        except SimError as exc:
            if exc.text is not None:
                return Response(exc.status, exc.text)
            return Response(exc.status, {"reason": exc.reason})
        except Exception:  # a simulator bug must not take the broker down: answer 500 like Jetty does
            return Response(500, f"{UNEXPECTED}\n{traceback.format_exc()}")

    # ------------------------------------------------------------------ routing

    def _respond(self, method: str, path: str, query_text: str, body: bytes) -> Response:
        cluster = self.pulsar.cluster
        broker = cluster.brokers.get(self.broker_id)
        if broker is None or not broker.alive:
            self.close_connection = True
            raise SimError(503, "Broker is not available")
        if path == "/status.html":
            return Response(200, "OK")
        refused = self._authenticate()
        if refused is not None:
            return refused
        query = parse_qs(query_text, keep_blank_values=True)
        for pattern, methods, handler in _ROUTES:
            match = pattern.fullmatch(path)
            if match:
                if method not in methods:
                    return Response(405, {"reason": "Method Not Allowed"})
                with cluster.lock:
                    return handler(self, *[unquote(g) for g in match.groups()], query=query, body=body)
        return Response(404, {"reason": "Not Found"})

    # ------------------------------------------------------------------ helpers

    @property
    def cluster(self) -> SimulatedCluster:
        return self.pulsar.cluster

    def _authenticate(self) -> Response | None:
        """401 unless a super-user token or (mutual TLS) a super-user's client certificate came along."""
        pulsar = self.pulsar
        client_auth = pulsar.tls is not None and pulsar.tls.client_auth
        if pulsar.token is None and pulsar.token_check is None and not client_auth:
            return None
        auth = self.headers.get("Authorization", "")
        bearer = auth[len("Bearer ") :] if auth.startswith("Bearer ") else None
        if pulsar.user_token is not None and bearer == pulsar.user_token:
            return Response(401, {"reason": "This operation requires super-user access"})
        if bearer is not None and (bearer == pulsar.token or (pulsar.token_check and pulsar.token_check(bearer))):
            return None
        if client_auth and self.client_role is not None:
            if pulsar.tls is not None and self.client_role in pulsar.tls.super_users:
                return None
            return Response(401, {"reason": "This operation requires super-user access"})
        return Response(401, HTML_401, content_type="text/html")

    def _web_url(self, broker_id: str) -> str:
        """A broker's web URL for this request: its https one when the request came over TLS."""
        broker = self.cluster.brokers[broker_id]
        return broker.web_url_tls if self.secure and broker.web_url_tls else broker.web_url

    def _redirect(self, broker_id: str, path: str, query: dict[str, list[str]]) -> Response:
        location = f"{self._web_url(broker_id)}{path}"  # the path as received, still encoded
        if query:
            location += "?" + urlencode(query, doseq=True)
        return Response(307, None, headers={"Location": location})

    def _path(self) -> str:
        return urlsplit(self.path).path

    def _runtime_config(self) -> dict[str, str]:
        effective = self.cluster.config.to_json()
        values = {
            k: ",".join(v) if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in effective.items()
        }
        return {
            **values,
            **STATIC_RUNTIME,
            **self.cluster.report_update_settings.runtime(),
            "failureDomainsEnabled": str(self.cluster.scenario.failure_domains_enabled).lower(),
            **sim_elm.runtime_config(self.cluster),  # the extensible load manager's class name (loadManager)
            "clusterName": self.cluster.scenario.cluster,
            "webServicePort": str(self.cluster.brokers[self.broker_id].port),
        }

    # ------------------------------------------------------------------ handlers

    def clusters(self, query: Any, body: bytes) -> Response:
        return Response(200, [self.cluster.scenario.cluster])

    def cluster_data(self, cluster_name: str, *, query: Any, body: bytes) -> Response:
        """ClustersBase.getCluster: the cluster's metadata (simulator/elm.py); 404 for another cluster."""
        if cluster_name != self.cluster.scenario.cluster:
            raise SimError(404, "Cluster does not exist")
        return Response(200, sim_elm.cluster_data(self.cluster, self.pulsar.admin_url))

    def isolation_policies(self, cluster_name: str, *, query: Any, body: bytes) -> Response:
        """ClustersBase.getNamespaceIsolationPolicies: 404 for another cluster, and when none was ever set."""
        if cluster_name != self.cluster.scenario.cluster:
            raise SimError(404, f"Cluster {cluster_name} does not exist.")
        doc = self.cluster.isolation_policies_doc()
        if doc is None:
            raise SimError(404, f"NamespaceIsolationPolicies for cluster {cluster_name} does not exist")
        return Response(200, doc)

    def failure_domains(self, cluster_name: str, *, query: Any, body: bytes) -> Response:
        """ClustersBase.getFailureDomains: domain → {"brokers": [...]}; {} when none (404 for another cluster)."""
        if cluster_name != self.cluster.scenario.cluster:
            raise SimError(404, "Cluster does not exist")
        return Response(200, self.cluster.failure_domains_doc())

    def anti_affinity(self, tenant: str, ns: str, *, query: Any, body: bytes) -> Response:
        """Namespaces.getNamespaceAntiAffinityGroup: the group as a plain string; 204 when none (a null
        String); 412 for a name NamespaceName.get refuses."""
        admin_errors.validate_namespace_name(tenant, ns)
        group = self.cluster.anti_affinity_groups.get(f"{tenant}/{ns}")
        if group is None:
            return Response(204)
        return Response(200, group, content_type="application/json")

    def active_brokers(self, cluster_name: str | None = None, *, query: Any, body: bytes) -> Response:
        if cluster_name is not None and cluster_name != self.cluster.scenario.cluster:
            raise SimError(404, f"Cluster does not exist: cluster={cluster_name}")
        return Response(200, self.cluster.active_ids())

    def leader_broker(self, query: Any, body: bytes) -> Response:
        leader = self.cluster.leader
        if leader is None:
            raise SimError(404, "Couldn't find leader broker")
        return Response(200, {"serviceUrl": self.cluster.brokers[leader].web_url, "brokerId": leader})

    def owned_namespaces(self, cluster_name: str, broker_id: str, *, query: Any, body: bytes) -> Response:
        broker_id = broker_id.removeprefix("http://").removeprefix("https://")
        if broker_id not in self.cluster.active_ids():
            raise SimError(404, f"Broker id '{broker_id}' not found in available brokers.")
        if broker_id != self.broker_id:
            return self._redirect(broker_id, self._path(), query)
        heartbeat = [
            f"pulsar/{broker_id}/0x00000000_0xffffffff",
            f"pulsar/{self.cluster.scenario.cluster}/{broker_id}/0x00000000_0xffffffff",
        ]
        policies, host = self.cluster.namespace_policies(), broker_id.rsplit(":", 1)[0]

        def status(bundle: str) -> dict[str, Any]:
            """NamespaceService.getNamespaceOwnershipStatus: primary/secondary under the namespace's policy."""
            policy = policies.policy_for(bundle.rsplit("/", 1)[0])
            assignment = "shared"
            if policy is not None and policy.is_primary(host):
                assignment = "primary"
            elif policy is not None and policy.is_secondary(host):
                assignment = "secondary"
            return {"broker_assignment": assignment, "is_controlled": policy is not None, "is_active": True}

        return Response(200, {b: status(b) for b in sorted(self.cluster.owned_by(broker_id) + heartbeat)})

    def health(self, query: Any, body: bytes) -> Response:
        return Response(200, "ok")

    def version(self, query: Any, body: bytes) -> Response:
        return Response(200, getattr(self.cluster.scenario, "broker_version", "4.0.4-sim"))

    def dynamic_names(self, query: Any, body: bytes) -> Response:
        return Response(200, config_keys())

    def dynamic_values(self, query: Any, body: bytes) -> Response:
        return Response(200, dict(self.cluster.dynamic_config))

    def runtime(self, query: Any, body: bytes) -> Response:
        return Response(200, self._runtime_config())

    def set_dynamic(self, name: str, value: str, *, query: Any, body: bytes) -> Response:
        """BrokersBase.updateDynamicConfiguration → persistDynamicConfigurationAsync: the key's validator first
        (only loadManagerClassName has one: a class that is not found is 412 " Invalid dynamic-config value"),
        then a key that is not dynamic (or unknown) is 412 "Can't update non-dynamic configuration"; otherwise
        the value is stored as given and the answer is an empty 200 (Response.ok()). Each broker then applies
        it as FieldParser reads it: a boolean is true only for "true", a number that does not parse leaves the
        setting as it was (dynamic_config.effective_config)."""
        if name == "loadManagerClassName":
            if value not in admin_errors.LOAD_MANAGER_CLASSES:
                raise SimError(412, " Invalid dynamic-config value")
            self.cluster.dynamic_config = {**self.cluster.dynamic_config, name: value}  # applied at a restart
            return Response(200)
        if name not in config_keys():
            raise SimError(412, "Can't update non-dynamic configuration")
        self.cluster.dynamic_config = {**self.cluster.dynamic_config, name: value}
        self.cluster.config = dynamic_config.effective_config(self.cluster.config, name, value)
        return Response(200)

    def delete_dynamic(self, name: str, *, query: Any, body: bytes) -> Response:
        """BrokersBase.deleteDynamicConfiguration: 412 "Can't delete non-dynamic configuration" for a key that is
        not dynamic; else the override is removed from the store (an empty 200). Brokers keep the value in
        effect until they restart (the store's watch only applies values that are set)."""
        if name not in config_keys() and name != "loadManagerClassName":
            raise SimError(412, "Can't delete non-dynamic configuration")
        self.cluster.dynamic_config = {k: v for k, v in self.cluster.dynamic_config.items() if k != name}
        return Response(200)

    def load_report(self, query: Any, body: bytes) -> Response:
        if sim_elm.is_extensible(self.cluster):  # ELM keeps its load on system topics: no report here
            raise sim_elm.no_load_report()
        return Response(200, self.cluster.load_report_json(self.broker_id), content_type="application/json")

    def topic_stats(self, query: Any, body: bytes) -> Response:
        return Response(200, self.cluster.topic_stats_report(self.broker_id))

    def resource_availability(self, tenant: str, ns: str, *, query: Any, body: bytes) -> Response:
        raise SimError(
            409, "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerWrapper does not support this operation"
        )

    def tenants(self, query: Any, body: bytes) -> Response:
        return Response(200, sorted({ns.split("/")[0] for ns in self.cluster.namespaces}))

    def namespaces(self, tenant: str, *, query: Any, body: bytes) -> Response:
        found = sorted(ns for ns in self.cluster.namespaces if ns.split("/")[0] == tenant)
        if not found:
            raise SimError(404, "Tenant doesn't exist")
        return Response(200, found)

    def bundles(self, tenant: str, ns: str, *, query: Any, body: bytes) -> Response:
        namespace = f"{tenant}/{ns}"
        if namespace not in self.cluster.namespaces:
            raise SimError(404, "Namespace does not exist")
        bounds = self.cluster.namespaces[namespace]
        return Response(200, {"boundaries": [format_boundary(b) for b in bounds], "numBundles": len(bounds) - 1})

    def unload_namespace(self, tenant: str, ns: str, *, query: Any, body: bytes) -> Response:
        namespace = f"{tenant}/{ns}"
        if namespace not in self.cluster.namespaces:
            raise SimError(404, "Namespace does not exist")
        for bundle in self.cluster._bundles_of(namespace):
            self.cluster.unload(bundle)
        return Response(204)

    def unload_bundle(self, tenant: str, ns: str, bundle_range: str, *, query: Any, body: bytes) -> Response:
        admin_errors.validate_namespace_name(tenant, ns)
        bundle = f"{tenant}/{ns}/{bundle_range}"
        destination = (query.get("destinationBroker") or [None])[0] or None
        if sim_elm.is_extensible(self.cluster):  # a transfer on the owner, no leader hop (simulator/elm.py)
            owner = sim_elm.unload(self.cluster, self.broker_id, bundle, destination)
            return Response(204) if owner is None else self._redirect(owner, self._path(), query)
        leader = self.cluster.leader
        if destination is not None:
            destination = destination.removeprefix("http://").removeprefix("https://")
            if destination not in self.cluster.active_ids():
                raise SimError(409, "Not allowed unload namespace bundle to inactive destination broker")
            if self.broker_id != leader:
                return self._redirect(leader, self._path(), {**query, "authoritative": ["false"]})
        admin_errors.parse_range_for_unload(bundle_range)  # NamespaceBundleFactory.getBundle: malformed → text 500
        self.cluster.check_bundle(bundle)
        owner = self.cluster.owner_of(bundle)
        if owner is not None and owner != self.broker_id:
            if destination is not None:  # recorded on the leader; the owner hop drops it (modular)
                self.cluster.affinity[self.cluster.affinity_key(bundle)] = destination
            rest = {k: v for k, v in query.items() if k != "destinationBroker"}
            rest["authoritative"] = ["true" if self.broker_id == leader else "false"]
            return self._redirect(owner, self._path(), rest)
        self.cluster.unload(bundle, destination)
        return Response(204)

    def split_bundle(self, tenant: str, ns: str, bundle_range: str, *, query: Any, body: bytes) -> Response:
        """NamespacesBase.internalSplitNamespaceBundleAsync, in its order: the body (read by Jersey before the
        method runs), the algorithm (412 before anything else), the LARGEST/HOT alias (getBundleRangeAsync,
        404), the namespace (getNamespacePoliciesAsync, 404), the range (validateNamespaceBundleRange, 412), then
        ownership (validateNamespaceBundleOwnershipAsync with readOnly=false: redirect, or assign an unowned
        bundle) and the split on the owner (NamespaceService.splitAndOwnBundle). Namespaces.splitNamespaceBundle
        validates the namespace's name before all of it."""
        admin_errors.validate_namespace_name(tenant, ns)
        namespace = f"{tenant}/{ns}"
        algorithm = (query.get("splitAlgorithmName") or [None])[0] or None
        positions = None
        if body.strip():
            try:
                positions = json.loads(body)
                if not isinstance(positions, list) or not all(isinstance(p, int) for p in positions):
                    raise ValueError
            except ValueError:
                raise SimError(412, "Split bundle failed due to invalid request: positions must be longs") from None
        if algorithm is not None and algorithm.strip():
            supported = list(self.cluster.config.supportedNamespaceBundleSplitAlgorithms)
            if algorithm not in supported:  # List.contains: case-sensitive; List.toString: "[a, b]"
                raise SimError(
                    412,
                    f"Unsupported namespace bundle split algorithm, supported algorithms are [{', '.join(supported)}]",
                )
            if algorithm.lower() == "specified_positions_divide" and not positions:  # equalsIgnoreCase
                raise SimError(
                    412, "With specified_positions_divide split algorithm, splitBoundaries must not be empty"
                )
        if namespace not in self.cluster.namespaces:
            raise admin_errors.namespace_missing()
        if bundle_range in ("LARGEST", "HOT"):
            bundle_range = self._alias(namespace, bundle_range)
        bundle = f"{namespace}/{bundle_range}"
        self.cluster.check_bundle(bundle)
        owner = self.cluster.owner_of(bundle) or self.cluster.assign(bundle)
        if owner != self.broker_id:
            return self._redirect(owner, self._path(), query)
        unload = (query.get("unload") or ["false"])[0].lower() == "true"
        self.cluster.split(bundle, algorithm, positions, unload)
        return Response(204)

    def _alias(self, namespace: str, alias: str) -> str:
        candidates = self.cluster._bundles_of(namespace)

        def weight(bundle: str) -> float:
            stats, _ = self.cluster.bundle_stats(bundle)
            return stats.topics if alias == "LARGEST" else stats.msg_throughput

        if not candidates:
            raise SimError(404, f"Bundle range {alias} not found")
        return str(split_bundle_name(max(candidates, key=lambda b: (weight(b), b)))[1])

    def topic_hash_positions(self, tenant: str, ns: str, bundle_range: str, *, query: Any, body: bytes) -> Response:
        bundle = f"{tenant}/{ns}/{bundle_range}"
        self.cluster.check_bundle(bundle)
        owner = self.cluster.owner_of(bundle)
        if owner is None:
            raise SimError(412, f"Failed to find ownership for ServiceUnit:{bundle}")
        if owner != self.broker_id:
            return self._redirect(owner, self._path(), query)
        wanted = set(query.get("topics", []))
        positions = {
            t.name: t.hash
            for t in self.cluster.topics_in(bundle)
            if not wanted or t.name in wanted or t.name.split("-partition-")[0] in wanted
        }
        return Response(200, {"namespace": f"{tenant}/{ns}", "bundle": bundle_range, "topicHashPositions": positions})

    def lookup(self, domain: str, tenant: str, ns: str, topic: str, *, query: Any, body: bytes) -> Response:
        full = f"{domain}://{tenant}/{ns}/{topic}"
        bundle = self.cluster.bundle_of_topic(full)
        owner = self.cluster.owner_of(bundle)
        leader = self.cluster.leader
        if owner is None:  # the leader assigns it, then sends the client to the chosen broker
            if self.broker_id != leader:
                return self._redirect(leader, self._path(), {**query, "authoritative": ["false"]})
            owner = self.cluster.assign(bundle)
            if owner != self.broker_id:
                return self._redirect(owner, self._path(), {**query, "authoritative": ["true"]})
        web = self.cluster.brokers[owner].web_url
        pulsar_url = f"pulsar://{owner.rsplit(':', 1)[0]}:{self.cluster.brokers[owner].port + 1}"
        data = {"brokerUrl": pulsar_url, "httpUrl": web, "nativeUrl": pulsar_url, "brokerUrlSsl": ""}
        if self.cluster.brokers[owner].web_url_tls:
            data["httpUrlTls"] = self.cluster.brokers[owner].web_url_tls
        return Response(200, data)

    def topic_bundle(self, domain: str, tenant: str, ns: str, topic: str, *, query: Any, body: bytes) -> Response:
        bundle = self.cluster.bundle_of_topic(f"{domain}://{tenant}/{ns}/{topic}")
        return Response(200, str(split_bundle_name(bundle)[1]))


def _fault_response(fault: FaultRule) -> Response | None:
    """What a fault answers; None: the connection is dropped without an answer."""
    if fault.kind in ("reset", "reset-after"):
        return None
    if fault.kind == "garbage":
        return Response(200, GARBAGE, content_type="application/json")
    if fault.kind == "html401":
        return Response(401, HTML_401, content_type="text/html")
    status = fault.status or 500
    if fault.body is not None:
        return Response(status, fault.body, content_type=fault.content_type)
    return Response(status, {"reason": "injected fault"} if status >= 400 else None)


def _route(path: str) -> re.Pattern[str]:
    return re.compile(path.replace("{}", "([^/]+)"))


_H = _Handler
_ROUTES: list[tuple[re.Pattern[str], tuple[str, ...], Callable[..., Response]]] = [
    (_route("/admin/v2/clusters"), ("GET",), _H.clusters),
    (_route("/admin/v2/clusters/{}"), ("GET",), _H.cluster_data),
    (_route("/admin/v2/clusters/{}/namespaceIsolationPolicies"), ("GET",), _H.isolation_policies),
    (_route("/admin/v2/clusters/{}/failureDomains"), ("GET",), _H.failure_domains),
    (_route("/admin/v2/brokers/leaderBroker"), ("GET",), _H.leader_broker),
    (_route("/admin/v2/brokers/health"), ("GET",), _H.health),
    (_route("/admin/v2/brokers/ready"), ("GET",), _H.health),
    (_route("/admin/v2/brokers/version"), ("GET",), _H.version),
    (_route("/admin/v2/brokers/configuration"), ("GET",), _H.dynamic_names),
    (_route("/admin/v2/brokers/configuration/values"), ("GET",), _H.dynamic_values),
    (_route("/admin/v2/brokers/configuration/runtime"), ("GET",), _H.runtime),
    (_route("/admin/v2/brokers/configuration/{}/{}"), ("POST",), _H.set_dynamic),
    (_route("/admin/v2/brokers/configuration/{}"), ("DELETE",), _H.delete_dynamic),
    (_route("/admin/v2/brokers"), ("GET",), _H.active_brokers),
    (_route("/admin/v2/brokers/{}"), ("GET",), _H.active_brokers),
    (_route("/admin/v2/brokers/{}/{}/ownedNamespaces"), ("GET",), _H.owned_namespaces),
    (_route("/admin/v2/broker-stats/load-report"), ("GET",), _H.load_report),
    (_route("/admin/v2/broker-stats/topics"), ("GET",), _H.topic_stats),
    (_route("/admin/v2/broker-stats/broker-resource-availability/{}/{}"), ("GET",), _H.resource_availability),
    (_route("/admin/v2/tenants"), ("GET",), _H.tenants),
    (_route("/admin/v2/namespaces/{}"), ("GET",), _H.namespaces),
    (_route("/admin/v2/namespaces/{}/{}/bundles"), ("GET",), _H.bundles),
    (_route("/admin/v2/namespaces/{}/{}/antiAffinity"), ("GET",), _H.anti_affinity),
    (_route("/admin/v2/namespaces/{}/{}/unload"), ("PUT",), _H.unload_namespace),
    (_route("/admin/v2/namespaces/{}/{}/{}/unload"), ("PUT",), _H.unload_bundle),
    (_route("/admin/v2/namespaces/{}/{}/{}/split"), ("PUT",), _H.split_bundle),
    (_route("/admin/v2/namespaces/{}/{}/{}/topicHashPositions"), ("GET",), _H.topic_hash_positions),
    (_route("/lookup/v2/topic/{}/{}/{}/{}/bundle"), ("GET",), _H.topic_bundle),
    (_route("/lookup/v2/topic/{}/{}/{}/{}"), ("GET",), _H.lookup),
]


def serve(
    cluster_factory: Callable[[Callable[[str], str]], SimulatedCluster],
    first_port: int | None = None,
    token: str | None = None,
    user_token: str | None = None,
    faults: Iterable[FaultRule | str] | None = None,
    request_log: str | Path | None = None,
    addresses: str | None = None,
    *,
    tls: bool | TLS = False,
    client_auth: bool = False,
    advertised_domain: str | None = None,
    token_check: Callable[[str], bool] | None = None,
) -> SimulatedPulsar:
    """Build a cluster whose brokers get loopback addresses, and serve it (``faults``: see SimulatedPulsar).

    ``addresses``: ``ports`` (127.0.0.1, a port each) or ``distinct`` (an address each, one port); None:
    the scenario's ``addresses`` (default ``ports``). ServeError when the machine cannot serve it all.
    ``tls``: an https listener per broker, with a CA made at start (``sim.tls.ca_file``); ``client_auth``:
    those listeners require a client certificate from it (``sim.tls.client_cert(role)``). ``advertised_domain``:
    broker ids ``<name>.<domain>:8080`` that do not resolve, each broker on a loopback port of its own
    (``sim.url_of``). See simulator/listeners.py.
    """
    allocate: Any = (
        AdvertisedIds(advertised_domain, first_port)
        if advertised_domain
        else SimulatedPulsar.port_allocator(first_port, addresses)
    )
    certificates = tls if isinstance(tls, TLS) else TLS(client_auth=client_auth) if tls or client_auth else None
    try:
        cluster = cluster_factory(allocate)
        return SimulatedPulsar(
            cluster, token, user_token, faults, request_log, tls=certificates, token_check=token_check
        )
    except BaseException:
        allocate.close()
        raise
