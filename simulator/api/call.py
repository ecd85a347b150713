"""What a route's handler gets (one admin call to one broker) and what it gives back (an answer)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from pulsar_lb_operator.simulator.cluster import SimError, SimulatedCluster

Query = dict[str, list[str]]


@dataclass(frozen=True)
class Response:
    """An answer. ``body``: dict or list → JSON; str → text/plain; bytes → as is; None → empty."""

    status: int
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str | None = None

    def encode(self) -> tuple[tuple[tuple[str, str], ...], bytes]:
        """The headers (Content-Type last) and the body's bytes."""
        if isinstance(self.body, dict | list):
            payload, content_type = json.dumps(self.body).encode(), "application/json"
        elif isinstance(self.body, str):
            payload, content_type = self.body.encode(), self.content_type or "text/plain"
        elif isinstance(self.body, bytes):
            payload, content_type = self.body, self.content_type or "application/octet-stream"
        else:
            return self.headers, b""
        return (*self.headers, ("Content-Type", content_type)), payload


@dataclass(frozen=True)
class Call:
    """One admin call to one broker: the cluster, who was asked, and the request's path, query and body."""

    cluster: SimulatedCluster
    broker_id: str  # the broker asked
    path: str  # as received, still percent-encoded
    query: Query
    body: bytes
    secure: bool = False  # came over TLS: redirects and lookups then give https URLs, as PulsarWebResource does

    def param(self, name: str) -> str | None:
        """The first value of query parameter ``name``; None when absent or empty."""
        values = self.query.get(name) or [""]
        return values[0] or None

    def to_leader(self) -> Response:
        """307 to the leader, ``authoritative=false``. A broker answering a call is alive, so there is a leader;
        should the last live broker stop meanwhile, the call gets the 503 an assignment with no live broker gets."""
        leader = self.cluster.leader
        if leader is None:
            raise SimError(503, "No broker is available")
        return self.redirect(leader, {**self.query, "authoritative": ["false"]})

    def web_url(self, broker_id: str) -> str:
        """A broker's web URL for this call: its https one when the call came over TLS."""
        broker = self.cluster.brokers[broker_id]
        return broker.web_url_tls if self.secure and broker.web_url_tls else broker.web_url

    def redirect(self, broker_id: str, query: Query | None = None) -> Response:
        """307 to the same path on ``broker_id``, with ``query`` (None: this call's own)."""
        location = f"{self.web_url(broker_id)}{self.path}"
        query = self.query if query is None else query
        if query:
            location += "?" + urlencode(query, doseq=True)
        return Response(307, headers=(("Location", location),))
