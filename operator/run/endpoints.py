"""The daemon's HTTP face on ``metricsHost:metricsPort``: probes, Prometheus, the status page.

``/healthz`` (a cycle finished recently enough), ``/readyz`` (a leader after its first cycle, a standby
at once), ``/metrics``, all open; every other path goes to the status page (``status_page.handle``), which
has its own authentication, asked for under a name it knows (``control_auth.known_host``: 421 otherwise).
One thread serves, apart from the cycles, so a long cycle never fails a probe.

Every answer forbids framing (``X-Frame-Options``, CSP ``frame-ancestors``): a page of another origin that framed
the status page, invisible under a button of its own, would have a signed-in person's click press Pause or Approve,
and the form's Origin would be the page's own.

A request body is read only when it says its length and that length is small (the page's forms are a few
fields): anything else is refused before a byte of it is read, and a client that stops sending is dropped
after ``REQUEST_TIMEOUT_S``.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pulsar_lb_operator import hints
from pulsar_lb_operator.run import control_auth, status_page
from pulsar_lb_operator.run.daemon_view import DaemonView
from pulsar_lb_operator.store.control import ControlError
from pulsar_lb_operator.strategies import ConfigError

log = structlog.get_logger(__name__)

MAX_FORM_BYTES = 8192  # the status page's forms are a few fields; a larger body is refused unread (413)
REQUEST_TIMEOUT_S = 10.0
UNKNOWN_HOST = b"this page does not answer to that host name: add it to statusPageHosts if it is yours"
NO_FRAMING = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}


def serve(daemon: DaemonView, host: str, port: int) -> ThreadingHTTPServer:
    """Starts serving on a thread of its own; a port that cannot be bound, or a control token that cannot be
    read or is too short, is a one-line ConfigError (exit 2 at start, not a page that silently turned read-only)."""
    if daemon.settings.control_token() is None:
        log.info("the status page is read-only: no controlTokenFile", port=port)
    names = {socket.gethostname(), socket.getfqdn(), host, *daemon.settings.statusPageHosts}

    class Endpoints(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_S  # a slow or silent client holds a thread no longer than this

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
                self._page("GET", b"")

        def do_POST(self) -> None:
            length = self.headers.get("Content-Length", "")
            if self.headers.get("Transfer-Encoding") or not (length.isascii() and length.isdigit()):
                self._send(411, b"a Content-Length is required", "text/plain")
            elif int(length) > MAX_FORM_BYTES:
                self.close_connection = True  # the body is never read
                self._send(413, f"request body over {MAX_FORM_BYTES} bytes".encode(), "text/plain")
            else:
                self._page("POST", self.rfile.read(int(length)))

        def _page(self, method: str, body: bytes) -> None:
            if not control_auth.known_host(self.headers.get("Host", ""), names):
                self._send(421, UNKNOWN_HOST, "text/plain; charset=utf-8")
                return
            try:
                answer = status_page.handle(daemon, method, self.path, self.headers, body, self.client_address[0])
            except ControlError as exc:  # the control file is unreadable: one line, the daemon goes on
                log.error("status page: the control file cannot be read", reason=str(exc))
                answer = (500, str(exc).encode(), "text/plain; charset=utf-8", {})
            self._send(*answer)

        def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in {**NO_FRAMING, **(headers or {})}.items():
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
