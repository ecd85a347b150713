"""The admin client: one request core (redirects, auth, timeouts, typed errors, GET retries) and thin verbs.

Redirects are followed by hand because ``requests`` drops the Authorization header when a 307 goes
to another host (pulsar-admin-api.md §1.5): every hop re-sends the method, body and token. Only
idempotent GETs are retried (tenacity, exponential backoff, on connection errors and 5xx); whether
an unload or split may be repeated is the executor's decision, after it has checked the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import requests
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from pulsar_lb_operator.adminapi import errors

MAX_REDIRECTS = 8


@dataclass(frozen=True)
class Timeouts:
    """Seconds. An unload or split may wait for namespaceBundleUnloadingTimeoutMs (60 s) on the broker."""

    connect: float = 5.0
    read: float = 30.0
    mutate: float = 90.0


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
    ) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.scheme = urlsplit(self.admin_url).scheme or "http"
        self._token = token
        self.verify: bool | str = ca_bundle if ca_bundle else verify
        self.timeouts = timeouts or Timeouts()
        self.retries = max(1, retries)
        self.session = session or requests.Session()

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
    ) -> requests.Response:
        """One call, following 307/308 by hand; raises a typed AdminError for anything but 2xx."""
        url = (base or self.admin_url) + path
        if params:
            url += "?" + "&".join(f"{quote(str(k))}={quote(str(v), safe='')}" for k, v in params.items())
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        timeout = (self.timeouts.connect, self.timeouts.read if method == "GET" else self.timeouts.mutate)
        seen: list[str] = []
        for _ in range(MAX_REDIRECTS + 1):
            seen.append(url)
            try:
                response = self.session.request(
                    method, url, data=data, headers=headers, timeout=timeout, verify=self.verify, allow_redirects=False
                )
            except requests.Timeout as exc:
                raise errors.TransportError(url, f"timed out: {type(exc).__name__}") from None
            except requests.RequestException as exc:
                raise errors.TransportError(url, f"cannot reach: {type(exc).__name__}") from None
            if response.status_code in (307, 308):
                location = response.headers.get("Location")
                if not location:
                    raise errors.RedirectError(url, f"{response.status_code} without a Location header")
                url = urljoin(url, location)
                if url in seen:
                    raise errors.RedirectError(url, f"redirect loop after {len(seen)} hops")
                continue
            if 200 <= response.status_code < 300:
                return response
            cls = errors.error_for(response.status_code)
            raise cls(url, _reason(response), response.status_code)
        raise errors.RedirectError(url, f"more than {MAX_REDIRECTS} redirects")

    def get_json(self, path: str, *, base: str | None = None, params: Mapping[str, Any] | None = None) -> Any:
        """A GET retried on connection errors and 5xx, whose body must be JSON."""

        @retry(
            retry=retry_if_exception_type((errors.TransportError, errors.ServerError)),
            stop=stop_after_attempt(self.retries),
            wait=wait_exponential(multiplier=0.2, max=2.0),
            reraise=True,
        )
        def attempt() -> Any:
            response = self.request("GET", path, base=base, params=params)
            try:
                return response.json()
            except ValueError:
                raise errors.BadResponse(response.url, "the answer is not JSON") from None

        return attempt()

    # ------------------------------------------------------------------ verbs

    def clusters(self) -> list[str]:
        return _list_of_str(self.get_json("/admin/v2/clusters"), "/admin/v2/clusters")

    def active_brokers(self, cluster: str) -> list[str]:
        path = f"/admin/v2/brokers/{quote(cluster)}"
        return _list_of_str(self.get_json(path), path)

    def leader(self) -> dict[str, Any]:
        return self.get_json("/admin/v2/brokers/leaderBroker")

    def load_report(self, broker_id: str) -> Any:
        """LocalBrokerData of one broker: asked of that broker itself (there is no redirect)."""
        return self.get_json("/admin/v2/broker-stats/load-report", base=self.broker_url(broker_id))

    def topic_stats(self, broker_id: str) -> Any:
        return self.get_json("/admin/v2/broker-stats/topics", base=self.broker_url(broker_id))

    def owned_bundles(self, cluster: str, broker_id: str) -> dict[str, Any]:
        return self.get_json(f"/admin/v2/brokers/{quote(cluster)}/{quote(broker_id, safe=':')}/ownedNamespaces")

    def bundles(self, namespace: str) -> list[str]:
        doc = self.get_json(f"/admin/v2/namespaces/{namespace}/bundles")
        if not isinstance(doc, dict):
            raise errors.BadResponse(namespace, "bundles: expected an object")
        return _list_of_str(doc.get("boundaries"), f"{namespace} boundaries")

    def dynamic_config_values(self) -> dict[str, str]:
        return self.get_json("/admin/v2/brokers/configuration/values")

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


def _reason(response: requests.Response) -> str:
    """Pulsar's ``reason`` when the body is ``{"reason": ...}``, else the first line of the body."""
    try:
        doc = response.json()
        if isinstance(doc, dict) and isinstance(doc.get("reason"), str):
            return doc["reason"].strip() or f"HTTP {response.status_code}"
    except ValueError:
        pass
    first = (response.text or "").strip().splitlines()[:2]
    text = " ".join(line.strip() for line in first if line.strip())
    return f"HTTP {response.status_code}: {text[:200]}" if text else f"HTTP {response.status_code}"


def _list_of_str(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.BadResponse(what, "expected a list of strings")
    return value
