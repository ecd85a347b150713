"""The admin REST API over loopback: a listener per broker, each answering as that broker.

Paths, query parameters, status codes, redirects and bodies follow
shared/reference/pulsar-admin-api.md §2–§3 and §7 (the routes: simulator/api/). Injected faults
(simulator/faults.py) make brokers misbehave on purpose; every request, faulted or not, is recorded
(``SimulatedPulsar.requests``) and optionally appended to a JSON-lines request log
(simulator/exchange.py).

One asyncio event loop on one thread serves every listener and connection, each connection's HTTP/1.1
read by llhttp (simulator/connection.py). A request is answered on the loop when the cluster's
lock is free, else on a small pool of handler threads, so a thread holding the lock (``advance``, a test)
never stalls the loop; a ``delay`` fault sleeps on the loop without holding anyone up. Where brokers
listen — a port each on 127.0.0.1, or an address each — is simulator/loopback.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from pulsar_lb_operator.simulator.cluster import Broker, SimulatedCluster
from pulsar_lb_operator.simulator.connection import Connections, HttpConnection, Incoming, Outgoing
from pulsar_lb_operator.simulator.exchange import UNEXPECTED, Exchange, Request
from pulsar_lb_operator.simulator.faults import FaultRule, FaultSet, FaultSpecError, parse_fault
from pulsar_lb_operator.simulator.listeners import TLS, AdvertisedIds, advertised_tls_url, reachable_tls_url
from pulsar_lb_operator.simulator.loopback import BACKLOG, LoopbackIds, ServeError, ensure_fd_limit, listen

__all__ = ["Request", "ServeError", "SimulatedPulsar", "serve"]

HANDLER_THREADS = 4  # answer requests while another thread holds the cluster's lock


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
        self._connections = Connections(self._dispatch)
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
                sockets.append((broker.id, sock or listen(broker.host, broker.port, broker.name)))
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
                self._connections.factory(broker_id, secure=True),
                sock=self.tls.socket_for(broker_id),
                backlog=BACKLOG,
                ssl=self.tls.context,
            )

    async def _start_listeners(self, sockets: list[tuple[str, socket.socket]]) -> None:
        for broker_id, sock in sockets:
            self.servers[broker_id] = await self._loop.create_server(
                self._connections.factory(broker_id), sock=sock, backlog=BACKLOG
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
        self._connections.close_all()
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

    def _dispatch(self, connection: HttpConnection, incoming: Incoming) -> None:
        """On the loop: answer at once when nothing waits (no delay, the cluster's lock free), else later."""
        exchange = Exchange(self, connection.broker_id, incoming, connection.secure, connection.client_role)
        if not exchange.delays and self.cluster.lock.acquire(blocking=False):
            try:
                outgoing = self._finish(exchange)
            finally:
                self.cluster.lock.release()
            connection.answer(outgoing)
            return
        task = self._loop.create_task(self._finish_later(connection, exchange))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish_later(self, connection: HttpConnection, exchange: Exchange) -> None:
        if exchange.delays:
            await asyncio.sleep(exchange.delay_s)
        connection.answer(await self._loop.run_in_executor(self._workers, self._finish, exchange))

    @staticmethod
    def _finish(exchange: Exchange) -> Outgoing | None:
        try:
            return exchange.finish()
        except Exception:  # never leave a connection hanging: a bug here is a 500 too
            body = f"{UNEXPECTED}\n{traceback.format_exc()}".encode()
            return Outgoing(500, (("Content-Type", "text/plain"),), body, close=True)

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
