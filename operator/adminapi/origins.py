"""Where the operator's credentials may go: the origins it knows, and the one function that decides.

A request carries the operator's credentials — its bearer token, an OAuth2 access token, a basic-auth or
``~/.netrc`` login — so it is sent only to an *origin* (scheme, host, port; RFC 6454) the operator knows:

- the admin URL's;
- the configured overrides' (``brokerWebServiceUrls``, ``brokerWebServiceUrlTemplate`` for each listed broker);
- each broker the cluster lists, as ``<admin URL's scheme>://<broker id>``;
- under an https admin URL, the https web URL a listed broker gives for itself on its own host —
  ``webServiceUrlTls`` in its own load report, or its registration as the admin API's 307 names it: with TLS
  a broker redirects to its ``webServiceUrlTls``, whose port is not the one in its id (PulsarWebResource
  builds every redirect from the target's lookup data: the request URI with the host and port — and, for a
  broker named by id, the scheme — replaced). The admin client decides which (``AdminClient._vouched``).

``KnownOrigins.refusal`` says why a URL is not one of them, in a few words, or None. It also refuses what no
list can make safe: plain ``http`` when the admin URL is ``https`` (the token would cross the network in
clear), a user name or password in a URL the operator's owner did not configure (``requests`` would send it
as basic auth in place of the token), and a URL two parsers read differently (``http://a\\@b/``: ``urllib``
reads host ``b``, ``urllib3`` — which opens the connection — reads ``a``). A URL is read as ``urllib3`` reads
it, so the origin checked is the one connected to. Hosts are compared normalised: lower case, without a
trailing dot, IP literals in one spelling (``[0:0::1]`` is ``[::1]``), a missing port as the scheme's default
(http 80, https 443). With an ``http`` admin URL, ``https`` to a known host and port is known too: the same
listener, encrypted.
"""

from __future__ import annotations

import ipaddress
import re
import threading
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from pulsar_lb_operator.strategies import UserError

DEFAULT_PORTS = {"http": 80, "https": 443}
HOSTNAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")
IPV4ISH = re.compile(r"[0-9.]+")
PLAIN_URL = re.compile(r"(https?)://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::([0-9]{1,5}))?(?=[/?#]|$)", re.I)
NOT_KNOWN = "is not the admin URL's, an override's or a listed broker's"


@dataclass(frozen=True)
class Origin:
    """Scheme, normalised host and port of an http(s) URL."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


@dataclass(frozen=True)
class Parsed:
    """A URL as it would be connected to: its origin and whether it names a user (or password)."""

    origin: Origin
    userinfo: str | None


class UnusableUrl(UserError, ValueError):
    """A URL no request is sent to: not http(s), no host, a bad port, or read differently by two parsers."""


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@]+@")


def without_userinfo(text: str) -> str:
    """``text`` with the user name and password of every URL in it masked (``http://***@host``): a configured
    basic-auth login is a credential, and an error line, a log line or an audit record may quote its URL."""
    return _USERINFO.sub(r"\1***@", text)


def normal_host(host: str) -> str:
    """Lower case, no brackets or trailing dot; an IP literal in its canonical spelling; "" for what is neither
    an IP literal nor a DNS name (ASCII letters, digits, ``-``, ``_``, dots between labels)."""
    if host.startswith("["):  # an IPv6 literal; its zone (``%eth0``) may come percent-encoded (``%25eth0``)
        host = unquote(host[1:-1])
    host = host.lower().rstrip(".")
    if ":" in host or IPV4ISH.fullmatch(host):  # ipaddress is slow to say no: asked only what looks like one
        try:
            return str(ipaddress.ip_address(host))
        except ValueError:
            pass
    return host if HOSTNAME.fullmatch(host) else ""


def parse(url: str) -> Parsed:
    """The origin ``url`` would be connected to (urllib3 reads it for requests); UnusableUrl otherwise.

    A URL whose authority is a plain host (a DNS name or an IP literal) and port, followed by ``/``, ``?``,
    ``#`` or nothing — what the cluster's URLs are — reads the same to every parser and is read here directly
    (a few microseconds, where urllib3's parser takes a hundred); anything else is read by both parsers.
    """
    plain = PLAIN_URL.match(url)
    if plain is not None:
        scheme, host, port = plain.group(1).lower(), normal_host(plain.group(2)), plain.group(3)
        if host and (port is None or 0 < int(port) <= 65535):
            return Parsed(Origin(scheme, host, int(port) if port else DEFAULT_PORTS[scheme]), None)
    try:
        parts = parse_url(url)
        other = urlsplit(url)
        other_port = other.port
    except (LocationParseError, ValueError):
        raise UnusableUrl("not a URL with a valid host and port") from None
    scheme = (parts.scheme or "").lower()
    if scheme not in DEFAULT_PORTS:
        raise UnusableUrl(f"scheme {scheme or 'none'!r} is not http or https")
    if not parts.host:
        raise UnusableUrl("no host")
    if not normal_host(parts.host):
        raise UnusableUrl("its host is neither a DNS name nor an IP address")
    origin = Origin(scheme, normal_host(parts.host), parts.port or DEFAULT_PORTS[scheme])
    other_host = normal_host(f"[{other.hostname}]" if ":" in (other.hostname or "") else other.hostname or "")
    if (other_host, other_port or DEFAULT_PORTS[scheme], bool(other.username or other.password)) != (
        origin.host,
        origin.port,
        parts.auth is not None,
    ):
        raise UnusableUrl("its host reads differently to different URL parsers")
    return Parsed(origin, parts.auth)


def describe(url: str) -> str:
    """``url``'s origin for a message (never its path, query or any user name or password)."""
    try:
        return str(parse(url).origin)
    except UnusableUrl:
        return f"{url.partition('://')[0][:10]}://…" if "://" in url else "a malformed URL"


class KnownOrigins:
    """The origins credentials may go to (see the module's docstring); thread-safe."""

    def __init__(self, admin_url: str) -> None:
        self.tls_only = admin_url.strip().lower().startswith("https:")
        self._origins: set[Origin] = set()
        self._hosts: set[str] = set()
        self._configured_userinfo: set[tuple[Origin, str]] = set()
        self._lock = threading.Lock()
        self.add(admin_url, configured=True)

    def add(self, url: str, configured: bool = False) -> None:
        """Know ``url``'s origin (``configured``: the owner typed it, user name and password included); a URL
        ``parse`` refuses adds nothing."""
        try:
            parsed = parse(url)
        except UnusableUrl:
            return
        with self._lock:
            self._origins.add(parsed.origin)
            self._hosts.add(parsed.origin.host)
            if configured and parsed.userinfo is not None:
                self._configured_userinfo.add((parsed.origin, parsed.userinfo))

    def refusal(self, url: str) -> str | None:
        """None when a request to ``url`` may carry the operator's credentials; else why not, in a few words.

        The one decision: the admin client sends nothing where this refuses, so nothing it holds goes there.
        """
        return self._judge(url)[0]

    def other_port_of_known_host(self, url: str) -> str | None:
        """The host, when ``url`` is refused only for being another port (or scheme) of a known host."""
        return self._judge(url)[1]

    def knows_host(self, url: str) -> bool:
        """Whether ``url``'s host (any port, any scheme) is a known one: for the binary protocol's service URL,
        whose port is never the web port's, so only its host can be vouched for."""
        try:
            host = parse(url).origin.host
        except UnusableUrl:
            return False
        with self._lock:
            return host in self._hosts

    def _judge(self, url: str) -> tuple[str | None, str | None]:
        try:
            parsed = parse(url)
        except UnusableUrl as exc:
            return str(exc), None
        origin = parsed.origin
        if parsed.userinfo is not None and (origin, parsed.userinfo) not in self._configured_userinfo:
            return "it carries a user name or password", None
        if origin.scheme == "http" and self.tls_only:
            return "plain http, and the admin URL is https", None
        if origin in self._origins:
            return None, None
        if origin.scheme == "https" and Origin("http", origin.host, origin.port) in self._origins:
            return None, None  # the same listener a known http origin names, encrypted
        if origin.host in self._hosts:
            return f"{origin.scheme} port {origin.port} of {origin.host} {NOT_KNOWN}", origin.host
        return f"host {origin.host} {NOT_KNOWN}", None
