"""HTTP/1.1 on one connection to one broker: llhttp reads it, the simulator's asyncio loop carries it.

llhttp (Node.js's HTTP parser, through the ``httptools`` binding) reads each request — framing, chunked
bodies, keep-alive and what HTTP/1.0 allows; this module keeps the connection in its hands, which the
faults need: a request can be answered late (a ``delay``), not at all with the connection dropped
(``reset``), or with any bytes (``garbage``). Requests are answered one at a time, in order; pipelined ones
wait their turn. ``Expect: 100-continue`` gets its interim answer when the request is next in line.

A request a broker cannot read is answered as Jetty answers it — its bad-message page, then the connection
closed: ``400`` for a malformed request (HTTP/0.9, an HTTP/1.1 request without Host included), ``431``
for a request head over Pulsar's ``httpMaxRequestHeaderSize`` (8 KiB), ``505`` for an HTTP version other
than 1.0 and 1.1. The reason shown is the status's own phrase, where Jetty names the parser's complaint.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus

import httptools

from pulsar_lb_operator.simulator.listeners import TLS

HTTP_MAX_REQUEST_HEADER_SIZE = 8 * 1024  # ServiceConfiguration.httpMaxRequestHeaderSize's default
NO_BODY = frozenset({204, 304})  # statuses that carry neither a body nor a Content-Length


@dataclass(frozen=True)
class Incoming:
    """One request read off a connection: what the broker's handlers see of it."""

    method: str
    target: str  # path and query, still percent-encoded
    headers: dict[str, str]  # lower-case names, the first of repeated headers
    body: bytes


@dataclass(frozen=True)
class Outgoing:
    """An answer as it goes on the wire (Date, Content-Length and Connection are added when it is written)."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    close: bool = False  # close the connection after it


class Connections:
    """Every open connection of one server, and where their requests go.

    ``dispatch(connection, request)`` is called on the loop for each complete request; the answer comes back
    through ``connection.answer`` (on the loop too), at once or later. ``close_all`` ends every connection
    without a TLS goodbye (the server is stopping).
    """

    def __init__(self, dispatch: Callable[[HttpConnection, Incoming], None]) -> None:
        self.dispatch = dispatch
        self.open: set[HttpConnection] = set()
        self.stopping = False

    def factory(self, broker_id: str, secure: bool = False) -> Callable[[], HttpConnection]:
        kind = TlsHttpConnection if secure else HttpConnection
        return lambda: kind(self, broker_id)

    def close_all(self) -> None:
        self.stopping = True
        for connection in list(self.open):
            connection.close()


class HttpConnection(asyncio.Protocol):
    """One client's connection to one broker (the parser calls its ``on_*`` methods as it reads)."""

    secure = False  # came over TLS
    client_role: str | None = None  # the CN of its verified client certificate

    def __init__(self, connections: Connections, broker_id: str) -> None:
        self.connections = connections
        self.broker_id = broker_id
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiting: deque[_Read | int] = deque()  # read, not answered yet (an int: a refusal's status)
        self.reading = True  # False once a request could not be read: nothing after it is
        self.busy = False  # a request is being answered
        self.ended = False  # the client sent its end of input
        self._answering: _Read | None = None  # the request being answered
        self._in_head = False
        self._head_bytes = 0
        self._refusal = 0
        self._url = bytearray()
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._headers: dict[str, str] = {}
        self._body = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self.secure, self.client_role = True, TLS.role_of(ssl_object)
        self.connections.open.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.open.discard(self)

    def data_received(self, data: bytes) -> None:
        if not self.reading:
            return
        was_in_head = self._in_head
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.reading = False  # an Upgrade is not taken: the request is answered, then the connection ends
        except httptools.HttpParserError:
            self._refuse(self._refusal or 400)
        if self.reading and self._in_head:  # a head still incomplete: count what came of it (over, if anything)
            self._head_bytes = self._head_bytes + len(data) if was_in_head else len(data)
            if self._head_bytes > HTTP_MAX_REQUEST_HEADER_SIZE:
                self._refuse(431)
        self._next()

    def eof_received(self) -> bool | None:
        """Their end of input: what was read still gets its answers, then the connection closes."""
        self.ended = True
        self._next()
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    # ------------------------------------------------------------------ the parser's callbacks

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes = True, 0
        self._url, self._raw_headers, self._body = bytearray(), [], bytearray()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw_headers.append((name, value))
        self._count(len(name) + len(value) + 4)

    def on_headers_complete(self) -> None:
        self._in_head = False
        raw = reversed(self._raw_headers)  # of repeated headers, the first one counts
        self._headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in raw}
        version = self.parser.get_http_version()
        if version not in ("1.0", "1.1"):
            self._refusal = 400 if version == "0.9" else 505
            raise ValueError(f"HTTP/{version}")
        if version == "1.1" and "host" not in self._headers:
            self._refusal = 400
            raise ValueError("no Host")
        continues = version == "1.1" and self._headers.get("expect", "").lower() == "100-continue"
        if continues and not self.busy and not self.waiting and self._open():  # next in line: the body may come
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        method = self.parser.get_method().decode("ascii")
        incoming = Incoming(method, self._url.decode("latin-1"), self._headers, bytes(self._body))
        self.waiting.append(_Read(incoming, self.parser.should_keep_alive(), self.parser.get_http_version()))

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > HTTP_MAX_REQUEST_HEADER_SIZE:
            self._refusal = 431
            raise ValueError("request head too large")

    # ------------------------------------------------------------------ answering

    def _refuse(self, status: int) -> None:
        """Read nothing more; once the requests before it are answered, the bad-message page."""
        self.reading, self._in_head = False, False
        self.waiting.append(status)

    def _next(self) -> None:
        """Hand on the next request read, or end the connection when nothing more will come."""
        if self.busy or not self._open():
            return
        if not self.waiting:
            if self.ended or not self.reading:
                self.close()
            return
        item = self.waiting.popleft()
        if isinstance(item, int):
            self._bad_message(item)
            return
        self._answering, self.busy = item, True
        self.connections.dispatch(self, item.incoming)

    def answer(self, outgoing: Outgoing | None) -> None:
        """Write the answer to the request handed on (None: drop the connection without one), then go on."""
        self.busy = False
        if not self._open():
            return
        if outgoing is None:
            self.close()
            return
        assert self.transport is not None and self._answering is not None
        read = self._answering
        close = outgoing.close or not read.keep_alive
        self.transport.write(_encode(outgoing, close, read.version, read.incoming.method == "HEAD"))
        if close:
            self.close()
            return
        self._next()

    def _bad_message(self, status: int) -> None:
        """Jetty's answer to a request it cannot read (ErrorHandler.badMessageError), then the connection closed;
        nothing when the client has already gone."""
        if not self.ended and self.transport is not None:
            body = f"<h1>Bad Message {status}</h1><pre>reason: {_phrase(status)}</pre>".encode("latin-1")
            headers = (("Content-Type", "text/html;charset=iso-8859-1"),)
            self.transport.write(_encode(Outgoing(status, headers, body), close=True))
        self.close()


class TlsHttpConnection(HttpConnection):
    """A connection to a broker's https listener. TLS has no half-close: an end of input closes it."""

    def eof_received(self) -> bool | None:
        super().eof_received()
        return False

    def close(self) -> None:
        if self.connections.stopping and self.transport is not None:  # no TLS goodbye when the server stops
            self.transport.abort()
            return
        super().close()


@dataclass(frozen=True)
class _Read:
    """A request as read: what the handlers see, and what the answer's framing depends on."""

    incoming: Incoming
    keep_alive: bool  # the connection may stay open after the answer (HTTP/1.1, or 1.0 with keep-alive)
    version: str  # "1.0" or "1.1"


def _encode(outgoing: Outgoing, close: bool, version: str = "1.1", head_only: bool = False) -> bytes:
    """The status line, Date, the answer's headers, Content-Length (not on 204 and 304), the connection's fate
    when it differs from the request's version's default, and the body (not for HEAD)."""
    lines = [f"HTTP/1.1 {outgoing.status} {_phrase(outgoing.status)}", f"Date: {_date()}"]
    lines += [f"{name}: {value}" for name, value in outgoing.headers]
    body = b"" if outgoing.status in NO_BODY else outgoing.body
    if outgoing.status not in NO_BODY:
        lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    elif version == "1.0":
        lines.append("Connection: keep-alive")
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (b"" if head_only else body)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:  # a status an injected fault made up
        return ""


_date_cache: tuple[int, str] = (0, "")


def _date() -> str:
    """The Date header, formatted once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]
