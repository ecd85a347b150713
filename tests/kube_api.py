"""A tiny fake Kubernetes API server for tests: coordination.k8s.io/v1 Leases only, on 127.0.0.1.

It keeps the API server's rules that leader election relies on: every write gets a new
``metadata.resourceVersion``; a PUT carrying a stale one is refused with 409 Conflict; a POST of an
existing lease is 409 AlreadyExists; a missing lease is 404 NotFound; errors are ``Status`` objects. A
request without ``Authorization: Bearer <one of tokens>`` gets 401.

``outage`` simulates the API server going away for everyone: ``"drop"`` closes every connection
without an answer (connection reset), ``"hang"`` holds every request unanswered until the outage ends
(a network partition: the client's timeout fires), ``"error"`` answers 500. ``cut_off(token, kind)``
does the same to the clients of one token only (one replica's node partitioned away), ``heal(token)``
ends it. ``with FakeKubeApi() as api:`` serves on a free port; the server also stops by itself after
``lifetime`` seconds, so a test that forgets it leaves nothing running.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LEASES = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/?]+))?/?$")
OUTAGES = (None, "drop", "hang", "error")


class FakeKubeApi:
    def __init__(self, tokens: tuple[str, ...] = ("fake-sa-token",), lifetime: float = 300.0) -> None:
        self.tokens = tuple(tokens)
        self.token = self.tokens[0]
        self.lifetime = lifetime
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status) of every answered request
        self.writes: list[tuple[float, str | None]] = []  # (time.monotonic(), holderIdentity) of every write
        self.outage: str | None = None
        self._cut_off: dict[str, str] = {}
        self._stopped = threading.Event()
        self._versions = itertools.count(1000)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeKubeApi:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        server.block_on_close = False
        server.handle_error = lambda *_: None  # a client that gave up (timeout) is no error of the server's
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True, name="fake-kube-api").start()
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        self._stopped.set()  # releases hanging requests
        server, self._server = self._server, None
        if self._timer is not None:
            self._timer.cancel()
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests steer and look at ------------------------------------------------------------------------

    def cut_off(self, token: str, kind: str = "drop") -> None:
        assert kind in OUTAGES and kind, kind
        self._cut_off[token] = kind

    def heal(self, token: str) -> None:
        self._cut_off.pop(token, None)

    def failure_for(self, token: str | None) -> str | None:
        assert self.outage in OUTAGES, self.outage
        return self.outage or self._cut_off.get(token or "")

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            found = self.leases.get((namespace, name))
            return copy.deepcopy(found) if found else None

    def holder(self, namespace: str, name: str) -> str | None:
        lease = self.lease(namespace, name)
        return (lease or {}).get("spec", {}).get("holderIdentity") or None

    def put_lease(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Create or overwrite a lease directly, as another client would (a new resourceVersion)."""
        with self._lock:
            lease = self.leases.get((namespace, name)) or _new_object(namespace, name)
            lease["spec"] = copy.deepcopy(spec)
            return copy.deepcopy(self._stored(namespace, name, lease))

    # -- the API ---------------------------------------------------------------------------------------------

    def _stored(self, namespace: str, name: str, lease: dict[str, Any]) -> dict[str, Any]:
        lease["metadata"]["resourceVersion"] = str(next(self._versions))
        self.leases[(namespace, name)] = lease
        self.writes.append((time.monotonic(), lease.get("spec", {}).get("holderIdentity")))
        return lease

    def handle(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        match = LEASES.match(path.split("?", 1)[0])
        if not match:
            return 404, _status(404, "NotFound", f"the server could not find the requested resource ({path})")
        namespace, name = match["ns"], match["name"]
        with self._lock:
            if method == "GET" and name:
                found = self.leases.get((namespace, name))
                if found is None:
                    return 404, _status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
                return 200, copy.deepcopy(found)
            if method == "POST" and not name:
                invalid = _invalid(body, namespace)
                if invalid:
                    return 400, _status(400, "BadRequest", invalid)
                name = body["metadata"]["name"]
                if (namespace, name) in self.leases:
                    return 409, _status(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists')
                if body["metadata"].get("resourceVersion"):
                    return 400, _status(400, "BadRequest", "resourceVersion should not be set on objects to be created")
                lease = _new_object(namespace, name)
                lease["spec"] = copy.deepcopy(body.get("spec") or {})
                return 201, copy.deepcopy(self._stored(namespace, name, lease))
            if method == "PUT" and name:
                invalid = _invalid(body, namespace)
                if invalid or body["metadata"]["name"] != name:
                    return 400, _status(400, "BadRequest", invalid or "the name of the object does not match the URL")
                found = self.leases.get((namespace, name))
                if found is None:
                    return 404, _status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
                sent = body["metadata"].get("resourceVersion")
                if sent and sent != found["metadata"]["resourceVersion"]:
                    return 409, _status(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has been '
                        "modified; please apply your changes to the latest version and try again",
                    )
                annotations = body["metadata"].get("annotations") or {}
                if sum(len(k) + len(str(v)) for k, v in annotations.items()) > 256 * 1024:
                    return 422, _status(
                        422, "Invalid", "metadata.annotations: Too long: must have at most 262144 bytes"
                    )
                lease = copy.deepcopy(found)
                lease["metadata"]["labels"] = body["metadata"].get("labels") or found["metadata"].get("labels")
                lease["metadata"].pop("annotations", None)
                if annotations:  # a PUT replaces the object's annotations with the ones sent
                    lease["metadata"]["annotations"] = copy.deepcopy(annotations)
                lease["spec"] = copy.deepcopy(body.get("spec") or {})
                return 200, copy.deepcopy(self._stored(namespace, name, lease))
        return 405, _status(405, "MethodNotAllowed", f"{method} is not supported on {path}")


def _new_object(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "spec": {},
    }


def _invalid(body: Any, namespace: str) -> str | None:
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    if (
        body.get("kind", "Lease") != "Lease"
        or body.get("apiVersion", "coordination.k8s.io/v1") != "coordination.k8s.io/v1"
    ):
        return "the body is not a coordination.k8s.io/v1 Lease"  # as the API server, it may leave both out
    metadata = body.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name"):
        return "metadata.name: Required value"
    if metadata.get("namespace") not in (None, namespace):
        return "the namespace of the object does not match the URL"
    spec = body.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or isinstance(duration, bool) or duration < 1):
        return "spec.leaseDurationSeconds: must be a positive int32"
    return None


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _handler(api: FakeKubeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            authorization = self.headers.get("Authorization") or ""
            token = authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else None
            outage = api.failure_for(token)
            if outage == "hang":
                while api.failure_for(token) == "hang" and not api._stopped.wait(0.01):
                    pass
                outage = "drop"  # the partition is over, but this request never arrived and its client gave up
            if outage == "drop":
                self.close_connection = True
                self.connection.close()
                return
            if outage == "error":
                status, answer = 500, _status(500, "InternalError", "etcdserver: request timed out")
            elif token not in api.tokens:
                status, answer = 401, _status(401, "Unauthorized", "Unauthorized")
            else:
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    status, answer = 400, _status(400, "BadRequest", "the body is not JSON")
                else:
                    status, answer = api.handle(method, self.path, body)
            payload = json.dumps(answer).encode()
            # recorded before the answer is written: a client that has its answer may look at once
            api.requests.append((method, self.path, status))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

    return Handler
