"""The admin REST API over loopback: one HTTP listener per broker, each answering as that broker.

Paths, query parameters, status codes, redirects and bodies follow
shared/reference/pulsar-admin-api.md §2–§3 and §7. Errors with an explicit status carry
``{"reason": ...}``; unauthenticated requests get Jetty's HTML 401 page; an unexpected failure is a
text/plain 500 and never stops the server. Injected faults (simulator/faults.py) make brokers
misbehave on purpose; every request, faulted or not, is recorded (``SimulatedPulsar.requests``) and
optionally appended to a JSON-lines request log.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from simulator.cluster import Broker, SimError, SimulatedCluster
from simulator.faults import FaultRule, FaultSet, FaultSpecError, parse_fault
from strategies.bundles import format_boundary, split_bundle_name
from strategies.config import ConfigError, LoadBalancerConfig, config_keys

UNEXPECTED = "--- An unexpected error occurred in the server ---"
STATIC_RUNTIME = {
    "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
    "loadBalancerEnabled": "true",
}
HTML_401 = "<html><body><h2>HTTP ERROR 401 Authentication required</h2></body></html>"
# what a ``garbage`` fault answers: not JSON, not even UTF-8 (an invalid sequence right at the start)
GARBAGE = b'\xc3\x28\xa0\xa1<\x89PNG\r\n\x1a\n{"cpu": \xff\xfe\xfd garbage \xed\xa0\x80\xf8\x88\x80\x80\x80'


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


class SimulatedPulsar:
    """Serves a SimulatedCluster: starts a listener per broker, and one for each broker added later."""

    def __init__(
        self,
        cluster: SimulatedCluster,
        token: str | None = None,
        user_token: str | None = None,
        faults: Iterable[FaultRule | str] | None = None,
        request_log: str | Path | None = None,
    ) -> None:
        """``token``: the super-user's; ``user_token``: a valid token of a role without super-user rights.

        ``faults``: rules or spec strings to arm (None: the scenario's ``faults:``); ``request_log``: a
        file to append one JSON line per request to (closed by ``stop``).
        """
        self.cluster = cluster
        self.token = token
        self.user_token = user_token
        self.servers: dict[str, ThreadingHTTPServer] = {}
        self._closing: dict[str, threading.Thread] = {}
        self.requests: list[Request] = []
        self.faults = FaultSet()
        for fault in getattr(cluster.scenario, "faults", ()) if faults is None else faults:
            self.add_fault(fault)
        self._log_lock = threading.Lock()
        self._log_file: TextIO | None = None
        if request_log is not None:
            self._log_file = open(request_log, "a", encoding="utf-8")  # noqa: SIM115 - closed by stop()
        cluster.listeners.append(self._on_membership)
        for broker in list(cluster.brokers.values()):
            self._serve(broker)

    # ------------------------------------------------------------------ lifecycle

    @staticmethod
    def port_allocator(first_port: int | None = None) -> Callable[[str], str]:
        """Broker ids on free loopback ports (the first one on ``first_port`` when given)."""
        wanted = [first_port] if first_port else []

        def allocate(_name: str) -> str:
            if wanted:
                return f"127.0.0.1:{wanted.pop()}"
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                return f"127.0.0.1:{sock.getsockname()[1]}"

        return allocate

    def _serve(self, broker: Broker) -> None:
        closing = self._closing.pop(broker.id, None)
        if closing is not None:  # a restarted broker reuses its port once the old listener is closed
            closing.join()
        handler = type("Handler", (_Handler,), {"pulsar": self, "broker_id": broker.id})
        server = ThreadingHTTPServer(("127.0.0.1", broker.port), handler)
        server.daemon_threads = True
        self.servers[broker.id] = server
        threading.Thread(target=server.serve_forever, args=(0.05,), name=f"sim-{broker.id}", daemon=True).start()

    def _on_membership(self, change: str, broker: Broker) -> None:
        """A stopped broker refuses connections; a (re)started one listens on its port again."""
        if change == "added" and broker.id not in self.servers:
            self._serve(broker)
        elif change == "removed" and broker.id in self.servers:
            server = self.servers.pop(broker.id)
            closer = threading.Thread(target=lambda: (server.shutdown(), server.server_close()), daemon=True)
            closer.start()
            self._closing[broker.id] = closer

    def stop(self) -> None:
        for server in self.servers.values():
            server.shutdown()
            server.server_close()
        self.servers.clear()
        for closer in self._closing.values():
            closer.join()
        self._closing.clear()
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
        return first.web_url

    def url_of(self, name: str) -> str:
        return self.cluster.by_name(name).web_url

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


class _Handler(BaseHTTPRequestHandler):
    pulsar: SimulatedPulsar
    broker_id: str
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        at_ms = int(time.time() * 1000)
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        broker = self.pulsar.cluster.brokers.get(self.broker_id)
        name = broker.name if broker is not None else ""
        delays: list[FaultRule] = []
        fault: FaultRule | None = None
        if broker is not None and broker.alive:
            delays, fault = self.pulsar.faults.before(name, method, parts.path)
        fired = list(delays)
        if delays:
            time.sleep(sum(d.delay_s for d in delays))
        response: Response | None
        if fault is not None and not fault.after:
            fired.append(fault)
            response = _fault_response(fault)
        else:
            response = self._answer(method, parts.path, parts.query, body)
            if fault is not None and 200 <= response.status < 300 and self.pulsar.faults.take(fault):
                fired.append(fault)
                response = _fault_response(fault)
        request = Request(
            self.broker_id,
            method,
            parts.path,
            parts.query,
            response.status if response is not None else 0,
            user_agent=self.headers.get("User-Agent"),
            fault=" + ".join(f.spec for f in fired) or None,
            at_ms=at_ms,
            broker_name=name,
        )
        self.pulsar.log(request)
        if response is None:  # reset: drop the connection without a word
            self.close_connection = True
            return
        self._send(response)

    def _answer(self, method: str, path: str, query: str, body: bytes) -> Response:
        try:
            return self._respond(method, path, query, body)
        except SimError as exc:
            return Response(exc.status, {"reason": exc.reason})
        except Exception:  # a simulator bug must not take the broker down: answer 500 like Jetty does
            return Response(500, f"{UNEXPECTED}\n{traceback.format_exc()}")

    def _send(self, response: Response) -> None:
        if isinstance(response.body, dict | list):
            payload, ctype = json.dumps(response.body).encode(), "application/json"
        elif isinstance(response.body, str):
            payload, ctype = response.body.encode(), response.content_type or "text/plain"
        elif isinstance(response.body, bytes):
            payload, ctype = response.body, response.content_type or "application/octet-stream"
        else:
            payload, ctype = b"", None
        self.send_response(response.status)
        for key, value in (response.headers or {}).items():
            self.send_header(key, value)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    # ------------------------------------------------------------------ routing

    def _respond(self, method: str, path: str, query_text: str, body: bytes) -> Response:
        cluster = self.pulsar.cluster
        broker = cluster.brokers.get(self.broker_id)
        if broker is None or not broker.alive:
            self.close_connection = True
            raise SimError(503, "Broker is not available")
        if path == "/status.html":
            return Response(200, "OK")
        if self.pulsar.token is not None:
            auth = self.headers.get("Authorization", "")
            if self.pulsar.user_token is not None and auth == f"Bearer {self.pulsar.user_token}":
                return Response(401, {"reason": "This operation requires super-user access"})
            if auth != f"Bearer {self.pulsar.token}":
                return Response(401, HTML_401, content_type="text/html")
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

    def _redirect(self, broker_id: str, path: str, query: dict[str, list[str]]) -> Response:
        location = f"{self.cluster.brokers[broker_id].web_url}{path}"  # the path as received, still encoded
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
            "clusterName": self.cluster.scenario.cluster,
            "webServicePort": str(self.cluster.brokers[self.broker_id].port),
        }

    # ------------------------------------------------------------------ handlers

    def clusters(self, query: Any, body: bytes) -> Response:
        return Response(200, [self.cluster.scenario.cluster])

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
        status = {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
        heartbeat = [
            f"pulsar/{broker_id}/0x00000000_0xffffffff",
            f"pulsar/{self.cluster.scenario.cluster}/{broker_id}/0x00000000_0xffffffff",
        ]
        return Response(200, {b: dict(status) for b in sorted(self.cluster.owned_by(broker_id) + heartbeat)})

    def health(self, query: Any, body: bytes) -> Response:
        return Response(200, "ok")

    def version(self, query: Any, body: bytes) -> Response:
        return Response(200, "4.0.4-sim")

    def dynamic_names(self, query: Any, body: bytes) -> Response:
        return Response(200, config_keys())

    def dynamic_values(self, query: Any, body: bytes) -> Response:
        return Response(200, dict(self.cluster.dynamic_config))

    def runtime(self, query: Any, body: bytes) -> Response:
        return Response(200, self._runtime_config())

    def set_dynamic(self, name: str, value: str, *, query: Any, body: bytes) -> Response:
        if name not in config_keys():
            raise SimError(412, "Can't update non-dynamic configuration")
        overrides = {**self.cluster.dynamic_config, name: value}
        try:
            config = LoadBalancerConfig().replace({**self.cluster.scenario.config, **overrides})
        except ConfigError:
            raise SimError(412, " Invalid dynamic-config value") from None
        self.cluster.dynamic_config = overrides
        self.cluster.config = config
        return Response(204)

    def delete_dynamic(self, name: str, *, query: Any, body: bytes) -> Response:
        if name not in config_keys():
            raise SimError(412, "Can't update non-dynamic configuration")
        self.cluster.dynamic_config.pop(name, None)
        self.cluster.config = LoadBalancerConfig().replace(
            {**self.cluster.scenario.config, **self.cluster.dynamic_config}
        )
        return Response(204)

    def load_report(self, query: Any, body: bytes) -> Response:
        return Response(200, self.cluster.load_report(self.broker_id))

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
        bundle = f"{tenant}/{ns}/{bundle_range}"
        destination = (query.get("destinationBroker") or [None])[0] or None
        leader = self.cluster.leader
        if destination is not None:
            destination = destination.removeprefix("http://").removeprefix("https://")
            if destination not in self.cluster.active_ids():
                raise SimError(409, "Not allowed unload namespace bundle to inactive destination broker")
            if self.broker_id != leader:
                return self._redirect(leader, self._path(), {**query, "authoritative": ["false"]})
        self.cluster.check_bundle(bundle)
        owner = self.cluster.owner_of(bundle)
        if owner is not None and owner != self.broker_id:
            if destination is not None:  # recorded on the leader; the owner hop drops it (modular)
                self.cluster.affinity[bundle] = destination
            rest = {k: v for k, v in query.items() if k != "destinationBroker"}
            rest["authoritative"] = ["true" if self.broker_id == leader else "false"]
            return self._redirect(owner, self._path(), rest)
        self.cluster.unload(bundle, destination)
        return Response(204)

    def split_bundle(self, tenant: str, ns: str, bundle_range: str, *, query: Any, body: bytes) -> Response:
        namespace = f"{tenant}/{ns}"
        if namespace not in self.cluster.namespaces:
            raise SimError(404, "Namespace does not exist")
        if bundle_range in ("LARGEST", "HOT"):
            bundle_range = self._alias(namespace, bundle_range)
        bundle = f"{namespace}/{bundle_range}"
        self.cluster.check_bundle(bundle)
        algorithm = (query.get("splitAlgorithmName") or [None])[0] or None
        positions = None
        if body.strip():
            try:
                positions = json.loads(body)
                if not isinstance(positions, list) or not all(isinstance(p, int) for p in positions):
                    raise ValueError
            except ValueError:
                raise SimError(412, "Split bundle failed due to invalid request: positions must be longs") from None
        if algorithm == "specified_positions_divide" and not positions:
            raise SimError(412, "splitBoundaries must not be empty")
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
        return Response(200, {"brokerUrl": pulsar_url, "httpUrl": web, "nativeUrl": pulsar_url, "brokerUrlSsl": ""})

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
) -> SimulatedPulsar:
    """Build a cluster whose brokers get free loopback ports, and serve it (``faults``: see SimulatedPulsar)."""
    cluster = cluster_factory(SimulatedPulsar.port_allocator(first_port))
    return SimulatedPulsar(cluster, token, user_token, faults, request_log)
