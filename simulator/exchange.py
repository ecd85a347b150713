"""One request to one broker: the faults that match it, the answer (a fault's or the route's), its log line.

In the order a broker's web service goes: a stopped broker answers 503 and closes; ``/status.html`` needs no
credentials; everything else is authenticated (a super-user token, or a super-user's client certificate
under mutual TLS; else Jetty's HTML 401 page, or Pulsar's 401 reason for a role that is not a super-user),
then routed (simulator/api/routes.py) and handled under the cluster's lock. A ``SimError`` is the answer
Pulsar gives (``{"reason": ...}``, or its text/plain 500 for an unexpected exception); any other exception
is a text/plain 500 and never stops the server. Faults (simulator/faults.py) come before all of it, or
after a successful answer for the ``-after`` kinds.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from pulsar_lb_operator.simulator.api import routes
from pulsar_lb_operator.simulator.api.call import Call, Response
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.connection import Incoming, Outgoing
from pulsar_lb_operator.simulator.faults import FaultRule, FaultSet
from pulsar_lb_operator.simulator.listeners import TLS
from pulsar_lb_operator.simulator.model import SimError

UNEXPECTED = "--- An unexpected error occurred in the server ---"
HTML_401 = "<html><body><h2>HTTP ERROR 401 Authentication required</h2></body></html>"
# what a ``garbage`` fault answers: not JSON, not even UTF-8 (an invalid sequence right at the start)
GARBAGE = b'\xc3\x28\xa0\xa1<\x89PNG\r\n\x1a\n{"cpu": \xff\xfe\xfd garbage \xed\xa0\x80\xf8\x88\x80\x80\x80'


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


class Server(Protocol):
    """What an exchange needs of the server: the cluster, its faults, who may call (read at each request, so a
    test may change a token), and the request log."""

    cluster: SimulatedCluster
    faults: FaultSet
    token: str | None
    user_token: str | None
    token_check: Callable[[str], bool] | None
    tls: TLS | None

    def log(self, request: Request) -> None: ...


class Exchange:
    """One request to one broker. Built on the loop (the faults it meets are counted then); ``finish`` runs once
    its delays have passed, on the loop or on a handler thread."""

    def __init__(
        self, server: Server, broker_id: str, incoming: Incoming, secure: bool = False, client_role: str | None = None
    ) -> None:
        self.server = server
        self.broker_id = broker_id
        self.incoming = incoming
        self.secure = secure  # came over TLS
        self.client_role = client_role  # the CN of the caller's verified client certificate
        self.at_ms = int(time.time() * 1000)
        self.parts = urlsplit(incoming.target)
        broker = server.cluster.brokers.get(broker_id)
        self.name = broker.name if broker is not None else ""
        self.delays: list[FaultRule] = []
        self.fault: FaultRule | None = None
        self.closes = False  # the answer ends the connection (a stopped broker's)
        if broker is not None and broker.alive:
            self.delays, self.fault = server.faults.before(self.name, incoming.method, self.parts.path)

    @property
    def delay_s(self) -> float:
        return sum(d.delay_s for d in self.delays)

    def finish(self) -> Outgoing | None:
        """After the delays: the answer (a fault's or the real one); None to drop the connection."""
        fault = self.fault
        fired = list(self.delays)
        response: Response | None
        if fault is not None and not fault.after:
            fired.append(fault)
            response = fault_response(fault)
        else:
            response = self._answer()
            if fault is not None and 200 <= response.status < 300 and self.server.faults.take(fault):
                fired.append(fault)
                response = fault_response(fault)
        self.server.log(
            Request(
                self.broker_id,
                self.incoming.method,
                self.parts.path,
                self.parts.query,
                response.status if response is not None else 0,
                user_agent=self.incoming.headers.get("user-agent"),
                fault=" + ".join(f.spec for f in fired) or None,
                at_ms=self.at_ms,
                broker_name=self.name,
            )
        )
        if response is None:  # reset: drop the connection without a word
            return None
        headers, body = response.encode()
        return Outgoing(response.status, headers, body, self.closes)

    def _answer(self) -> Response:
        """The broker's own answer."""
        try:
            return self._respond()
        except SimError as exc:
            if exc.text is not None:
                return Response(exc.status, exc.text)
            return Response(exc.status, {"reason": exc.reason})
        except Exception:  # a simulator bug must not take the broker down: answer 500 like Jetty does
            return Response(500, f"{UNEXPECTED}\n{traceback.format_exc()}")

    def _respond(self) -> Response:
        cluster = self.server.cluster
        broker = cluster.brokers.get(self.broker_id)
        if broker is None or not broker.alive:
            self.closes = True
            raise SimError(503, "Broker is not available")
        found = routes.ROUTES.find(self.incoming.method, self.parts.path)
        if not isinstance(found, tuple) or found[0].authenticated:
            refused = self._authenticate()
            if refused is not None:
                return refused
        if not isinstance(found, tuple):
            reason = "Method Not Allowed" if found == routes.METHOD_NOT_ALLOWED else "Not Found"
            return Response(found, {"reason": reason})
        route, params = found
        query = parse_qs(self.parts.query, keep_blank_values=True)
        call = Call(cluster, self.broker_id, self.parts.path, query, self.incoming.body, self.secure)
        with cluster.lock:
            return route.handler(call, **params)

    def _authenticate(self) -> Response | None:
        """401 unless a super-user token or (mutual TLS) a super-user's client certificate came along."""
        server = self.server
        client_auth = server.tls is not None and server.tls.client_auth
        if server.token is None and server.token_check is None and not client_auth:
            return None
        auth = self.incoming.headers.get("authorization", "")
        bearer = auth[len("Bearer ") :] if auth.startswith("Bearer ") else None
        if server.user_token is not None and bearer == server.user_token:
            return Response(401, {"reason": "This operation requires super-user access"})
        if bearer is not None and (bearer == server.token or (server.token_check and server.token_check(bearer))):
            return None
        if client_auth and self.client_role is not None:
            if server.tls is not None and self.client_role in server.tls.super_users:
                return None
            return Response(401, {"reason": "This operation requires super-user access"})
        return Response(401, HTML_401, content_type="text/html")


def fault_response(fault: FaultRule) -> Response | None:
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
