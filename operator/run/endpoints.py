"""The daemon's HTTP face on ``metricsHost:metricsPort``: probes, Prometheus, the status page.

``/healthz`` (a cycle finished recently enough), ``/readyz`` (a leader after its first cycle, a standby
at once), ``/metrics``; every other path goes to the status page (``status_page.handle``), which has its
own authentication. One thread serves, apart from the cycles, so a long cycle never fails a probe.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pulsar_lb_operator import hints
from pulsar_lb_operator.run import status_page
from pulsar_lb_operator.strategies.config import ConfigError

MAX_FORM_BYTES = 65536  # the status page's forms are a few fields; anything larger is cut


def serve(daemon: Any, host: str, port: int) -> ThreadingHTTPServer:
    """Starts serving on a thread of its own; a port that cannot be bound is a one-line ConfigError."""

    class Endpoints(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/healthz":
                ok = daemon.healthy()
                self._send(200 if ok else 503, b"ok" if ok else b"stuck", "text/plain")
            elif self.path == "/readyz":
                ready = daemon.ready()
                self._send(200 if ready else 503, b"ready" if ready else b"no cycle yet", "text/plain")
            elif self.path == "/metrics":
                self._send(200, generate_latest(daemon.metrics.registry), CONTENT_TYPE_LATEST)
            else:
                self._send(*status_page.handle(daemon, "GET", self.path, self.headers, b""))

        def do_POST(self) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), MAX_FORM_BYTES)
            body = self.rfile.read(length) if length else b""
            self._send(*status_page.handle(daemon, "POST", self.path, self.headers, body))

        def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    try:
        server = ThreadingHTTPServer((host, port), Endpoints)
    except OSError as exc:  # one line for the user (exit 2), never a traceback
        fix = "set another with --set metricsPort=N (or PULSAR_LB_METRICS_PORT; 0 turns /metrics off)"
        raise ConfigError(hints.port_in_use("metricsPort", host, port, exc, fix)) from None
    threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
    return server


def stop(server: ThreadingHTTPServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()
