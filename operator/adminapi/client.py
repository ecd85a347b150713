"""The admin client: one request core (redirects, auth, deadlines, typed errors, GET retries) and thin verbs.

Redirects are followed by hand because ``requests`` drops the Authorization header when a 307 goes
to another host (pulsar-admin-api.md §1.5): every hop re-sends the method, body and token — but only
to a host we know is part of the cluster (the admin URL's, or a broker the admin API listed); a
redirect anywhere else is refused before anything is sent there. Only idempotent GETs are retried
(tenacity, exponential backoff, on connection errors and 5xx); whether an unload or split may be
repeated is the executor's decision, after it has checked the cluster.

Everything is bounded: each call has a deadline over all its hops (socket timeouts alone do not stop a
broker that trickles bytes), and an answer larger than ``max_body_bytes`` is cut off with an error
instead of being read into memory.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import requests
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from pulsar_lb_operator.adminapi import errors

MAX_REDIRECTS = 8
MAX_BODY_BYTES = 64 * 2**20  # a load report is kilobytes; broker-stats/topics of a busy broker a few MiB
USER_AGENT = f"pulsar-lb-operator/0.1 (instance {socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]})"


@dataclass(frozen=True)
class Timeouts:
    """Seconds. An unload or split may wait for namespaceBundleUnloadingTimeoutMs (60 s) on the broker."""

    connect: float = 5.0
    read: float = 30.0  # also the deadline of a whole GET, over all its redirects
    mutate: float = 90.0  # the deadline of a whole unload or split


@dataclass(frozen=True)
class Answer:
    """A 2xx answer, read whole (within the cap and the deadline)."""

    status: int
    url: str
    content: bytes
    headers: Mapping[str, str]

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class AdminClient:
    """Admin API of one cluster, reached through ``admin_url`` (any broker, or the proxy)."""

    def __init__(
        self,
        admin_url: str,
        token: str | None = None,
        ca_bundle: str | None = None,
        verify: bool = True,
        timeouts: Timeouts | None = None,
        retries: int = 3,
        session: requests.Session | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.scheme = urlsplit(self.admin_url).scheme or "http"
        self._token = token
        self.verify: bool | str = ca_bundle if ca_bundle else verify
        self.timeouts = timeouts or Timeouts()
        self.retries = max(1, retries)
        self.session = session or requests.Session()
        self.max_body_bytes = max_body_bytes
        self._known_hosts = {_host(self.admin_url)}

    def trust_brokers(self, broker_ids: list[str]) -> None:
        """Hosts the admin API named as brokers of the cluster: redirects (and the token) may go there."""
        self._known_hosts.update(_host(f"{self.scheme}://{b}") for b in broker_ids)

    def is_known(self, url: str) -> bool:
        return _host(url) in self._known_hosts

    def __repr__(self) -> str:  # never show the token
        return f"AdminClient({self.admin_url!r}, token={'***' if self._token else None})"

    def close(self) -> None:
        self.session.close()

    def broker_url(self, broker_id: str) -> str:
        """A broker's own web URL from its id (host:port), with the admin URL's scheme."""
        return f"{self.scheme}://{broker_id}"

    # ------------------------------------------------------------------ core

    def request(
        self,
        method: str,
        path: str,
        *,
        base: str | None = None,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        deadline_s: float | None = None,
    ) -> Answer:
        """One call, following 307/308 by hand; raises a typed AdminError for anything but 2xx.

        ``deadline_s`` bounds the whole call, every hop and every byte of the answer included
        (default: ``timeouts.read`` for a GET, ``timeouts.mutate`` otherwise).
        """
        url = (base or self.admin_url) + path
        if params:
            url += "?" + "&".join(f"{quote(str(k))}={quote(str(v), safe='')}" for k, v in params.items())
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        budget = (
            deadline_s if deadline_s is not None else (self.timeouts.read if method == "GET" else self.timeouts.mutate)
        )
        deadline = time.monotonic() + budget
        seen: list[str] = []
        for _ in range(MAX_REDIRECTS + 1):
            if not self.is_known(url):
                what = "follow a redirect" if seen else "call"
                raise errors.RedirectError(
                    url, f"refused to {what} {_host(url)!r}: not the admin URL's host nor a broker the cluster lists"
                )
            seen.append(url)
            hop_headers = dict(headers)
            if self._token:
                hop_headers["Authorization"] = f"Bearer {self._token}"
            status, hop_headers_in, content = self._send(method, url, data, hop_headers, deadline, budget)
            if status in (307, 308):
                location = hop_headers_in.get("Location")
                if not location:
                    raise errors.RedirectError(url, f"{status} without a Location header")
                url = urljoin(url, location)
                if url in seen:
                    raise errors.RedirectError(url, f"redirect loop after {len(seen)} hops")
                continue
            answer = Answer(status, url, content, hop_headers_in)
            if 200 <= status < 300:
                return answer
            cls = errors.error_for(status)
            raise cls(url, _reason(answer), status)
        raise errors.RedirectError(url, f"more than {MAX_REDIRECTS} redirects")

    def _send(
        self, method: str, url: str, data: str | None, headers: dict[str, str], deadline: float, budget: float
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One HTTP exchange, its body read in chunks against the cap and the deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise errors.TransportError(url, f"timed out: no complete answer within {budget:g} s")
        timeout = (min(self.timeouts.connect, left), left)
        try:
            response = self.session.request(
                method,
                url,
                data=data,
                headers=headers,
                timeout=timeout,
                verify=self.verify,
                allow_redirects=False,
                stream=True,
            )
            with response:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_content(65536):
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        raise errors.BadResponse(
                            url, f"the answer is larger than {self.max_body_bytes // 2**20} MiB: not read further"
                        )
                    if time.monotonic() > deadline:
                        raise errors.TransportError(url, f"timed out: no complete answer within {budget:g} s")
                    chunks.append(chunk)
                return response.status_code, response.headers, b"".join(chunks)
        except requests.Timeout as exc:
            raise errors.TransportError(url, f"timed out: {type(exc).__name__}") from None
        except requests.RequestException as exc:
            raise errors.TransportError(url, f"cannot reach: {type(exc).__name__}") from None

    def get_json(
        self,
        path: str,
        *,
        base: str | None = None,
        params: Mapping[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> Any:
        """A GET retried on connection errors and 5xx, whose body must be JSON."""

        @retry(
            retry=retry_if_exception_type((errors.TransportError, errors.ServerError)),
            stop=stop_after_attempt(self.retries),
            wait=wait_exponential(multiplier=0.2, max=2.0),
            reraise=True,
        )
        def attempt() -> Any:
            response = self.request("GET", path, base=base, params=params, deadline_s=deadline_s)
            try:
                return response.json()
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                raise errors.BadResponse(response.url, "the answer is not JSON") from None

        return attempt()

    # ------------------------------------------------------------------ verbs

    def clusters(self) -> list[str]:
        return _list_of_str(self.get_json("/admin/v2/clusters"), "/admin/v2/clusters")

    def active_brokers(self, cluster: str) -> list[str]:
        path = f"/admin/v2/brokers/{quote(cluster)}"
        brokers = _list_of_str(self.get_json(path), path)
        self.trust_brokers(brokers)
        return brokers

    def leader(self) -> dict[str, Any]:
        return _object(self.get_json("/admin/v2/brokers/leaderBroker"), "leaderBroker")

    def load_report(self, broker_id: str, deadline_s: float | None = None) -> Any:
        """LocalBrokerData of one broker: asked of that broker itself (there is no redirect)."""
        return self.get_json(
            "/admin/v2/broker-stats/load-report", base=self.broker_url(broker_id), deadline_s=deadline_s
        )

    def topic_stats(self, broker_id: str) -> Any:
        return self.get_json("/admin/v2/broker-stats/topics", base=self.broker_url(broker_id))

    def owned_bundles(self, cluster: str, broker_id: str) -> dict[str, Any]:
        """bundle name → ownership status; anything but an object of bundle names is a BadResponse."""
        path = f"/admin/v2/brokers/{quote(cluster)}/{quote(broker_id, safe=':')}/ownedNamespaces"
        doc = _object(self.get_json(path), f"ownedNamespaces of {broker_id}")
        if not all(isinstance(b, str) and b.count("/") >= 2 for b in doc):
            raise errors.BadResponse(path, "ownedNamespaces: expected an object keyed by bundle names")
        return doc

    def bundles(self, namespace: str) -> list[str]:
        doc = self.get_json(f"/admin/v2/namespaces/{namespace}/bundles")
        if not isinstance(doc, dict):
            raise errors.BadResponse(namespace, "bundles: expected an object")
        return _list_of_str(doc.get("boundaries"), f"{namespace} boundaries")

    def dynamic_config_values(self) -> dict[str, str]:
        return _object(self.get_json("/admin/v2/brokers/configuration/values"), "configuration/values")

    def runtime_config(self) -> dict[str, Any]:
        return _object(self.get_json("/admin/v2/brokers/configuration/runtime"), "configuration/runtime")

    def set_dynamic_config(self, name: str, value: str) -> None:
        self.request("POST", f"/admin/v2/brokers/configuration/{quote(name)}/{quote(value, safe='')}")

    def unload(self, bundle: str, destination: str | None = None) -> None:
        namespace, _, bundle_range = bundle.rpartition("/")
        params = {"destinationBroker": destination} if destination else None
        self.request("PUT", f"/admin/v2/namespaces/{namespace}/{bundle_range}/unload", params=params)

    def split(self, bundle: str, algorithm: str, boundaries: list[int] | None, unload: bool) -> None:
        namespace, _, bundle_range = bundle.rpartition("/")
        params = {"unload": str(unload).lower(), "splitAlgorithmName": algorithm}
        self.request(
            "PUT",
            f"/admin/v2/namespaces/{namespace}/{bundle_range}/split",
            params=params,
            body=list(boundaries) if boundaries else None,
        )


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise errors.BadResponse(what, f"expected a JSON object, got {type(value).__name__}")
    return value


def _reason(response: Answer) -> str:
    """Pulsar's ``reason`` when the body is ``{"reason": ...}``, else the first line of the body."""
    try:
        doc = response.json()
        if isinstance(doc, dict) and isinstance(doc.get("reason"), str):
            return doc["reason"].strip()[:500] or f"HTTP {response.status}"
    except (ValueError, RecursionError):
        pass
    first = (response.text or "").strip().splitlines()[:2]
    text = " ".join(line.strip() for line in first if line.strip())
    return f"HTTP {response.status}: {text[:200]}" if text else f"HTTP {response.status}"


def _list_of_str(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.BadResponse(what, "expected a list of strings")
    return value
