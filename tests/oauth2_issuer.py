"""A tiny OAuth 2.0 issuer on loopback for the tests: RFC 8414 metadata and a client-credentials token endpoint.

``GET /.well-known/openid-configuration`` gives ``token_endpoint``; ``POST /oauth/token`` takes Pulsar's form
(``grant_type=client_credentials``, ``client_id``, ``client_secret``, ``audience``) and answers
``{"access_token", "token_type", "expires_in"}``, or 401 ``{"error": "invalid_client"}``. ``valid(token)`` is
what a broker's token check asks: issued here, for the right audience, and not expired (by ``clock``).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


class Issuer:
    def __init__(
        self,
        client_id: str = "pulsar-lb-operator",
        client_secret: str = "client-s3cret-value",
        audience: str = "urn:sn:pulsar:sim",
        expires_in: int = 3600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client_id, self.client_secret, self.audience = client_id, client_secret, audience
        self.expires_in = expires_in
        self.clock = clock
        self.issued: dict[str, float] = {}  # token → expiry
        self.requests: list[dict[str, str]] = []  # each token request's form
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, doc: dict[str, Any]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    self._answer(200, {"issuer": issuer.url, "token_endpoint": f"{issuer.url}/oauth/token"})
                else:
                    self._answer(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                issuer.requests.append(form)
                if self.path != "/oauth/token" or form.get("grant_type") != "client_credentials":
                    self._answer(400, {"error": "unsupported_grant_type"})
                elif (form.get("client_id"), form.get("client_secret")) != (issuer.client_id, issuer.client_secret):
                    self._answer(401, {"error": "invalid_client", "error_description": "bad client credentials"})
                elif form.get("audience") != issuer.audience:
                    self._answer(400, {"error": "invalid_request", "error_description": "unknown audience"})
                else:
                    token = "oauth-" + secrets.token_hex(16)
                    issuer.issued[token] = issuer.clock() + issuer.expires_in
                    self._answer(200, {"access_token": token, "token_type": "Bearer", "expires_in": issuer.expires_in})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def valid(self, token: str) -> bool:
        expiry = self.issued.get(token)
        return expiry is not None and self.clock() < expiry

    def credentials_file(self, path: Any) -> str:
        """Pulsar's key file for this client, written to ``path``."""
        doc = {"type": "client_credentials", "client_id": self.client_id, "client_secret": self.client_secret}
        path.write_text(json.dumps(doc))
        return str(path)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Issuer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
