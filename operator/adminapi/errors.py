"""Errors of admin API calls. Every error carries the URL and, when there was one, the HTTP status.

AdminError (a ClusterError: exit 1)
├── TransportError        connection refused, unknown host, TLS mismatch, timed out (no HTTP answer):
│                         ``transport_error`` says which, and the likely fix
├── RedirectError         a 307 loop or too many hops
├── BadResponse           a 2xx whose body is not what the endpoint returns
└── (HTTP status errors, with Pulsar's ``reason`` when the body has one)
    ├── Unauthorized      401 / 403
    ├── NotFound          404
    ├── Conflict          409
    ├── PreconditionFailed 412
    └── ServerError       5xx
AuthenticationError       no credentials to send (OAuth2 token endpoint down, unreadable token file):
                          nothing was sent (``sent`` is False)

``in_transition`` is True when the answer says the bundle is already being unloaded, transferred or
changing owner (TRANSITION_MARKERS): the executor still counts it as an unknown outcome, but says so.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Iterator
from urllib.parse import urlsplit

import requests
import urllib3.exceptions

from pulsar_lb_operator.adminapi.origins import without_userinfo
from pulsar_lb_operator.strategies import ClusterError

# What Pulsar answers when an unload or split meets a bundle whose ownership is already changing:
# - 500 "Namespace bundle <b> is being unloaded": NamespaceService.findBrokerServiceUrl, when the ownership
#   record is disabled (modular load manager: its owner is closing the bundle's topics);
# - 500 "Namespace is not active. ns:<b>; state:0": OwnedBundle.handleUnloadRequest, a second unload that
#   reaches the owner while the first is under way;
# - 409 "Concurrent modification": resumeAsyncResponseExceptionally for a metadata BadVersionException
#   (another writer changed the ownership or bundle record in between);
# - any reason that says "in transition" itself.
TRANSITION_MARKERS = ("is being unloaded", "namespace is not active", "concurrent modification", "in transition")


# ExtensibleLoadManagerImpl.unloadNamespaceBundleAsync, for a destinationBroker the owner's id ends with: an
# IllegalArgumentException "Namespace bundle: <b> own by <owner>, cannot be transfer to same broker." (a 500).
SAME_BROKER_MARKER = "cannot be transfer to same broker"


def already_on_destination(text: str) -> bool:
    """Whether an unload's error says the bundle is already owned by the destination it was sent to (ELM)."""
    return SAME_BROKER_MARKER in text.lower()


def in_transition(text: str) -> bool:
    """Whether an error body or reason says the bundle is already being unloaded or moved."""
    lowered = text.lower()
    return any(marker in lowered for marker in TRANSITION_MARKERS)


class AdminError(ClusterError):
    status: int | None = None
    sent: bool = True  # False: the request never left this process
    in_transition: bool = False

    def __init__(self, url: str, message: str, status: int | None = None) -> None:
        url, message = without_userinfo(url), without_userinfo(message)  # a configured login is a credential
        super().__init__(f"{message} ({url})")
        self.url = url
        self.reason = message
        if status is not None:
            self.status = status


class TransportError(AdminError):
    pass


class RedirectError(AdminError):
    pass


class BadResponse(AdminError):
    pass


class Unauthorized(AdminError):
    status = 401


class NotFound(AdminError):
    status = 404


class Conflict(AdminError):
    status = 409


class PreconditionFailed(AdminError):
    status = 412


class ServerError(AdminError):
    status = 500


class AuthenticationError(AdminError):
    """No credentials could be obtained for a call, so it was not sent."""

    sent = False


def error_for(status: int) -> type[AdminError]:
    if status in (401, 403):
        return Unauthorized
    if status >= 500:
        return ServerError
    return {404: NotFound, 409: Conflict, 412: PreconditionFailed}.get(status, AdminError)


# Pulsar's default web ports (broker.conf webServicePort / webServicePortTls), named in the fixes below.
PORTS = "Pulsar's web service listens on 8080, or 8443 for https, by default"

# OpenSSL's reasons when a TLS client meets a server that speaks plain HTTP (OpenSSL 1.1 and 3.x).
PLAIN_HTTP_REASONS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST")
# ... and when the server wants a client certificate this one did not present (or did not accept it).
CLIENT_CERT_REASONS = ("CERTIFICATE_REQUIRED", "HANDSHAKE_FAILURE", "BAD_CERTIFICATE", "UNKNOWN_CA")


def transport_error(
    url: str, exc: requests.RequestException, connect_s: float, read_s: float, admin_url: bool = True
) -> TransportError:
    """What kept a request from getting any HTTP answer, in one line with the likely fix.

    ``requests`` names only its own wrapper (``ConnectionError``, ``SSLError``); the cause sits a few
    exceptions down (urllib3's, then the socket's or OpenSSL's), and each has its own fix: a refused port
    (nothing listens: the wrong port, or the broker is down), a name that does not resolve, https on a plain
    HTTP port or http on a TLS one, a certificate that is not trusted or does not name the host, a
    connection the network never completes, an answer that never comes. ``admin_url``: the URL is the
    admin URL's (the fix is in --admin-url), not an address a broker published (brokerWebServiceUrlTemplate).
    """
    parts = urlsplit(url)
    where = parts.netloc.rpartition("@")[2] if parts.netloc else without_userinfo(url)  # never a login
    address = "--admin-url (adminUrl)" if admin_url else "brokerWebServiceUrlTemplate (or brokerWebServiceUrls)"
    causes = list(_causes(exc))
    ssl_error = next((c for c in causes if isinstance(c, ssl.SSLError)), None)
    if isinstance(exc, requests.exceptions.ProxyError):
        message = (
            f"cannot reach {where} through the HTTP proxy ({_innermost(causes)}) — check HTTPS_PROXY / HTTP_PROXY, "
            "or add the host to NO_PROXY"
        )
    elif isinstance(exc, requests.ConnectTimeout):
        message = (
            f"cannot reach {where}: timed out: no connection within {round(connect_s, 1):g} s — the host does not "
            f"answer (down, or a firewall or network policy drops the packets); check the host and port in {address}"
        )
    elif isinstance(exc, requests.Timeout):
        message = (
            f"timed out: {where} accepted the connection but sent no answer within {round(read_s, 1):g} s — the "
            f"broker is overloaded, or that port is not Pulsar's web service ({PORTS})"
        )
    elif any(isinstance(c, (urllib3.exceptions.NameResolutionError, socket.gaierror)) for c in causes):
        message = f"cannot reach {where}: unknown host {parts.hostname!r} (DNS does not resolve it) — "
        message += (
            "check the host name in --admin-url (adminUrl)"
            if admin_url
            else "the address the broker publishes does not resolve from here: point "
            "brokerWebServiceUrlTemplate (or brokerWebServiceUrls) at one that does"
        )
    elif any(isinstance(c, ConnectionRefusedError) for c in causes):
        message = (
            f"cannot reach {where}: connection refused — nothing listens on that port: check the port in {address} "
            f"({PORTS}) and that the broker is running"
        )
    elif isinstance(ssl_error, ssl.SSLCertVerificationError):
        message = f"cannot reach {where}: {_certificate_problem(ssl_error, parts.hostname or where)}"
    elif ssl_error is not None and _reason_in(ssl_error, PLAIN_HTTP_REASONS):
        message = (
            f"cannot reach {where}: TLS handshake failed: that port speaks plain HTTP — use http://{where}, or "
            "https:// on the broker's TLS port (webServicePortTls, 8443 by default)"
        )
    elif ssl_error is not None and _reason_in(ssl_error, CLIENT_CERT_REASONS):
        message = (
            f"cannot reach {where}: the broker refused the TLS handshake ({_ssl_reason(ssl_error)}) — it wants a "
            "client certificate it trusts: set tlsCertFile and tlsKeyFile"
        )
    elif ssl_error is not None:
        message = f"cannot reach {where}: TLS handshake failed ({_ssl_reason(ssl_error)})"
    elif any(isinstance(c, (ConnectionResetError, http.client.BadStatusLine)) for c in causes):
        message = f"cannot reach {where}: the connection was closed without an HTTP answer — "
        message += (
            f"if that port serves TLS (webServicePortTls, 8443 by default), use https://{where}"
            if parts.scheme == "http"
            else "if the broker asks for a client certificate, set tlsCertFile and tlsKeyFile; otherwise it "
            "restarted, or a proxy or load balancer in between dropped the connection"
        )
    else:
        message = f"cannot reach {where}: {_innermost(causes)}"
    return TransportError(url, message)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception under it: causes, contexts, urllib3's ``reason``, exceptions in ``args``."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack and len(seen) < 32:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        nested = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        stack.extend(e for e in nested if isinstance(e, BaseException))


def root_cause(exc: BaseException) -> str:
    """Why ``exc`` happened, as the root of its chain says it (``Type: first line``)."""
    return _innermost(list(_causes(exc)))


def _innermost(causes: list[BaseException]) -> str:
    """The last cause found (the root of a chain), as ``Type: first line``: urllib3's wrappers repeat the URL,
    the root says why."""
    root = causes[-1]
    text = str(root).strip().splitlines()[0] if str(root).strip() else ""
    return f"{type(root).__name__}: {text}" if text else type(root).__name__


def _ssl_reason(error: ssl.SSLError) -> str:
    """OpenSSL's reason (``WRONG_VERSION_NUMBER``) as words; ``reason`` is set on what the ssl module raises."""
    return str(getattr(error, "reason", None) or error.strerror or error).lower().replace("_", " ")


def _reason_in(error: ssl.SSLError, reasons: tuple[str, ...]) -> bool:
    said = f"{getattr(error, 'reason', None) or ''} {error}".upper().replace(" ", "_")
    return any(reason in said for reason in reasons)


def _certificate_problem(error: ssl.SSLCertVerificationError, host: str) -> str:
    detail = str(error.verify_message or "").lower()
    if "hostname mismatch" in detail or "ip address mismatch" in detail:
        return (
            f"the broker's TLS certificate does not name {host!r} — use a host name the certificate was issued "
            "for (its subject alternative names)"
        )
    if "expired" in detail or "not yet valid" in detail:
        return f"the broker's TLS certificate is not valid now ({detail}) — renew it, or check this machine's clock"
    return (
        f"the broker's TLS certificate is not trusted ({detail or 'verify failed'}) — give the CA that signed it "
        "with caBundle (--set caBundle=FILE, or in the settings file)"
    )
