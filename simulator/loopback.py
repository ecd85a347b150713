"""Where the simulated brokers listen: loopback addresses, listening sockets, and the open-file limit.

Brokers are addressed on loopback (``LoopbackIds``): by default 127.0.0.1 with a port each; with
``addresses: distinct`` an address each (127.0.0.1, 127.0.0.2, …) on one port, like a real cluster's
hosts. Each listening socket is bound when its id is handed out and held until served, so no two brokers
share a port (probing for a free port and closing it lets the OS hand one out twice), and an address in
use or too few file descriptors is an error (``ServeError``), never a silent shortfall. On distinct
addresses the brokers a cluster starts with are bound together, at the first id, on a port free on all
their addresses: one free on 127.0.0.1 may be taken on 127.0.0.3.
"""

from __future__ import annotations

import errno
import resource
import socket
import threading

from pulsar_lb_operator.simulator.errors import ScenarioError
from pulsar_lb_operator.simulator.scenario import ADDRESSES, Scenario

BACKLOG = 128
FDS_PER_BROKER = 3  # its listening socket and one kept-alive connection, both ends when the client runs here
FDS_MINIMUM = 1  # its listening socket: below this per broker, the cluster cannot be served at all
FDS_HEADROOM = 256  # files, pipes and other sockets of the process


class ServeError(ScenarioError):
    """The machine cannot serve what was asked: an address or port in use, too few file descriptors."""


class AddressInUse(ServeError):
    """Another socket listens on the address and port asked for."""


# distinct addresses share one port, the first broker's: a port free on 127.0.0.1 can be another process's on
# 127.0.0.3 (a cluster on distinct addresses closing down); a fresh port from the OS is tried, ten at the most
PORT_ATTEMPTS = 10


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


def listen(host: str, port: int, name: str) -> socket.socket:
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
        error = AddressInUse if exc.errno == errno.EADDRINUSE else ServeError
        raise error(f"cannot listen on {host}:{port} for broker {name}: {why}") from None
    except BaseException:
        sock.close()
        raise
    return sock


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
        self._starting: list[str] = []  # the brokers a cluster starts with, in the order their ids are asked for
        self._reserved: dict[int, socket.socket] = {}  # distinct: their sockets, bound on the port all share
        self._lock = threading.Lock()

    def prepare(self, scenario: Scenario) -> None:
        """Called by SimulatedCluster before its first broker: the addressing mode and the open-file limit."""
        if self.addresses is None:
            self.addresses = getattr(scenario, "addresses", "ports")
        ensure_fd_limit(len(scenario.broker_names))
        self._starting = [spec.name for spec in getattr(scenario, "brokers", ())]

    @property
    def mode(self) -> str:
        return self.addresses or "ports"

    def __call__(self, name: str) -> str:
        with self._lock:
            index = self._count
            if self.mode == "distinct" and index == 0 and not self.first_port and len(self._starting) > 1:
                self._reserve()
            if self.mode == "distinct":
                host = loopback_address(index)
                port = self._port if self._port is not None else (self.first_port or 0)
            else:
                host = "127.0.0.1"
                port = self.first_port if index == 0 and self.first_port else 0
            sock = self._reserved.pop(index, None) or listen(host, port, name)
            broker_id = f"{host}:{sock.getsockname()[1]}"
            if broker_id in self._held:  # cannot happen while the sockets are held; never serve one id twice
                sock.close()
                raise ServeError(f"broker {name}: {broker_id} was handed out twice")
            if self.mode == "distinct" and self._port is None:
                self._port = sock.getsockname()[1]
            self._held[broker_id] = sock
            self._count += 1
            return broker_id

    def _reserve(self) -> None:
        """Distinct addresses: bind every starting broker's socket on one port the OS hands out, another port where
        one of the addresses has it taken (``PORT_ATTEMPTS``)."""
        for attempt in range(PORT_ATTEMPTS):
            bound: list[socket.socket] = []
            try:
                for index, name in enumerate(self._starting):
                    port = bound[0].getsockname()[1] if bound else 0
                    bound.append(listen(loopback_address(index), port, name))
            except BaseException as exc:
                for sock in bound:
                    sock.close()
                if not isinstance(exc, AddressInUse) or attempt == PORT_ATTEMPTS - 1:
                    raise
                continue
            self._reserved = dict(enumerate(bound))
            return

    def take(self, broker_id: str) -> socket.socket | None:
        """The listening socket bound for ``broker_id``, handed over once (None: none is held)."""
        with self._lock:
            return self._held.pop(broker_id, None)

    def close(self) -> None:
        with self._lock:
            for sock in [*self._held.values(), *self._reserved.values()]:
                sock.close()
            self._held.clear()
            self._reserved.clear()
