"""Who may read the status page, and who may change anything through it.

Reading (the page, ``GET /api/status``) needs what it always needed: the admin token when the operator has
one (HTTP Basic with the token as the password, or ``Authorization: Bearer``), else nothing — the same page
``kubectl port-forward`` shows anyone who may port-forward.

Changing anything — approve, reject, drain, undrain, pause, resume — needs the control token
(``controlTokenFile``, a Secret the chart creates), whatever the cluster's own authentication is, compared in
constant time. Two ways to present it:

* ``Authorization: Bearer <control token>`` — a script (curl). A browser never adds that header to a request
  another site makes, so such a request needs nothing more.
* a session: ``POST /login`` with the token sets a cookie (HttpOnly, SameSite=Strict, 12 hours) signed with
  the token, so a new token ends every session. The daemon also keeps the sessions it started (``SESSIONS``): Sign
  out ends its session on the server, not only in the browser (a copy of the cookie is worth nothing after), and a
  restart of the daemon ends them all. A cookie *is* sent with a form another page submits — by any
  page on the same host, whatever its port, for SameSite — so every such post must also carry the session's
  CSRF value (an HMAC of the token and the session's nonce, shown only inside the page, which another origin
  cannot read) and come from the page's own origin (``Origin``, else ``Referer``, naming the ``Host`` it was
  sent to).

Without a control token the page is read-only: no buttons, every mutating request refused.

Whatever the credentials, the page answers only under names it knows (``known_host``): loopback's, an IP address,
this machine's names and ``statusPageHosts``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from email.message import Message
from http.cookies import CookieError, SimpleCookie
from typing import TypeAlias
from urllib.parse import urlsplit

# A request's headers: the status page's (http.server's, case-insensitive) or a plain mapping in tests.
Headers: TypeAlias = "Mapping[str, str] | Message[str, str]"

SESSION_COOKIE = "pulsar_lb_operator_session"
SESSION_SECONDS = 12 * 3600
MAX_SESSIONS = 1000  # sessions kept at once; a sign-in beyond ends the one closest to its expiry


class Sessions:
    """The sessions this process started and that have not ended: a cookie counts only while its nonce is here."""

    def __init__(self) -> None:
        self._expiry: dict[str, float] = {}
        self._lock = threading.Lock()

    def start(self, nonce: str, expiry: float) -> None:
        with self._lock:
            if len(self._expiry) >= MAX_SESSIONS:
                self._expiry.pop(min(self._expiry, key=self._expiry.__getitem__))
            self._expiry[nonce] = expiry

    def live(self, nonce: str, now_s: float) -> bool:
        with self._lock:
            return self._expiry.get(nonce, 0.0) >= now_s

    def end(self, nonce: str) -> None:
        with self._lock:
            self._expiry.pop(nonce, None)


SESSIONS = Sessions()


@dataclass(frozen=True)
class Caller:
    """What a request may do, from its headers alone."""

    read: bool  # may see the page and /api/status
    control: bool  # holds the control credential
    session: str | None = None  # the session's nonce (cookie); its posts need the CSRF value
    bearer: bool = False  # the control token in the Authorization header: no cookie, no CSRF

    def csrf(self, control_token: str | None) -> str:
        """The value a form of this session must carry ("" without a session)."""
        return csrf_value(control_token, self.session) if control_token and self.session else ""


def identify(headers: Headers, admin_token: str | None, control_token: str | None, now_s: float) -> Caller:
    header = headers.get("Authorization", "")
    given = _password(header)
    bearer = bool(control_token and header.startswith("Bearer ") and equal(given or "", control_token))
    session = session_of(headers, control_token, now_s)
    admin = admin_token is None or (given is not None and equal(given, admin_token))
    control = bearer or session is not None
    return Caller(read=admin or control, control=control, session=session, bearer=bearer)


def equal(given: str, secret: str) -> bool:
    """Constant-time, and for any text a client sends (compare_digest refuses non-ASCII str)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), secret.encode("utf-8", "surrogateescape"))


def _password(header: str) -> str | None:
    """The secret in ``Authorization``: a Bearer token, or Basic's password (any user name)."""
    if header.startswith("Bearer "):
        return header[7:].strip()
    if header.startswith("Basic "):
        try:
            return base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            return None
    return None


def _mac(control_token: str, text: str) -> str:
    return hmac.new(control_token.encode(), text.encode(), hashlib.sha256).hexdigest()


def new_session(control_token: str, now_s: float) -> str:
    """A cookie value: expiry, nonce and their MAC under the control token."""
    expiry, nonce = int(now_s) + SESSION_SECONDS, secrets.token_hex(16)
    SESSIONS.start(nonce, expiry)
    body = f"{expiry}.{nonce}"
    return f"{body}.{_mac(control_token, 'session:' + body)}"


def session_of(headers: Headers, control_token: str | None, now_s: float) -> str | None:
    """The nonce of a valid, unexpired session cookie signed with the current control token, of a session this
    process started and nobody signed out of; else None."""
    if not control_token:
        return None
    try:
        jar = SimpleCookie(headers.get("Cookie", ""))
    except CookieError:
        return None
    morsel = jar.get(SESSION_COOKIE)
    expiry, _, rest = (morsel.value if morsel else "").partition(".")
    nonce, _, mac = rest.partition(".")
    if not (expiry.isdigit() and nonce and mac) or int(expiry) < now_s:
        return None
    signed = equal(mac, _mac(control_token, f"session:{expiry}.{nonce}"))
    return nonce if signed and SESSIONS.live(nonce, now_s) else None


def csrf_value(control_token: str, nonce: str) -> str:
    return _mac(control_token, "csrf:" + nonce)[:32]


def csrf_ok(given: str, control_token: str | None, caller: Caller) -> bool:
    expected = caller.csrf(control_token)
    return bool(expected) and equal(given, expected)


def set_cookie(value: str, max_age: int = SESSION_SECONDS) -> str:
    return f"{SESSION_COOKIE}={value}; Max-Age={max_age}; Path=/; HttpOnly; SameSite=Strict"


def known_host(header: str, names: Collection[str]) -> bool:
    """Whether a request's ``Host`` is one the page answers to: none (no browser sends none), an IP address, localhost,
    or one of ``names`` ("*": any). A page of another site whose name an attacker re-points at this address (DNS
    rebinding) is asked for under the attacker's name: refused, it reads nothing, whatever a cookie would allow."""
    host = header.strip()
    if host.startswith("["):  # an IPv6 literal, with or without a port
        return True
    host = host.rpartition(":")[0] if ":" in host else host
    host = host.rstrip(".").lower()
    if not host or host == "localhost" or "*" in names:
        return True
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return host in {name.rstrip(".").lower() for name in names}


def same_origin(headers: Headers) -> bool:
    """The browser says the request comes from a page of this server: Origin (else Referer) names its Host."""
    host = headers.get("Host", "")
    source = headers.get("Origin") or headers.get("Referer") or ""
    return bool(host) and source != "null" and urlsplit(source).netloc == host
