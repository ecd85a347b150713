"""The binary-protocol clients (the audit publisher, ELM's readers) send their credentials only to a broker whose
certificate names the host they dialled: pulsar-client trusts any name a trusted CA signed unless told otherwise.
Against a real TLS listener on loopback, with a certificate the CA signed for another name."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator

import pytest

from pulsar_lb_operator.record.audit import AuditPublisher, Spool
from pulsar_lb_operator.simulator.listeners import TLS

SECRET = "tls-names-" + "5ecret" * 6


@contextlib.contextmanager
def listener(tls: TLS, names: list) -> Iterator[tuple[int, bytearray]]:
    """A TLS listener on 127.0.0.1 presenting a certificate for ``names`` (signed by ``tls``'s CA): yields its port
    and every byte a client sent it after the handshake."""
    cert, key = tls._issue("elsewhere", names, server=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    received = bytearray()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with contextlib.suppress(OSError), context.wrap_socket(conn, server_side=True) as tls_conn:
                tls_conn.settimeout(2)
                with contextlib.suppress(TimeoutError):
                    while data := tls_conn.recv(65536):
                        received.extend(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], received
    finally:
        stop.set()
        thread.join(5)
        server.close()


def publish_once(port: int, tls: TLS, tmp_path, received: bytearray) -> None:
    publisher = AuditPublisher(
        Spool(tmp_path / "spool"),
        f"pulsar+ssl://127.0.0.1:{port}",
        "persistent://p/a/t",
        token=lambda: SECRET,
        ca_file=tls.ca_file,
        timeout_s=5,
        max_backoff_s=0.5,
    ).start()
    try:
        publisher.publish([{"kind": "test"}])
        deadline = time.monotonic() + 8
        while SECRET.encode() not in received and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        publisher.close(timeout_s=20)  # past the native call in flight (its own timeout: 5 s)


@pytest.fixture
def tls():
    made = TLS()
    yield made
    made.close()


def test_the_audit_publisher_sends_its_token_to_a_certificate_for_the_host_it_dialled(tls, tmp_path):
    from cryptography import x509

    with listener(
        tls, [x509.DNSName("localhost"), x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]
    ) as (
        port,
        received,
    ):
        publish_once(port, tls, tmp_path, received)
    assert SECRET.encode() in received  # the control: the listener does hear a token when it may


def test_the_audit_publisher_never_sends_its_token_to_a_certificate_for_another_name(tls, tmp_path):
    from cryptography import x509

    with listener(tls, [x509.DNSName("some-other-service.example")]) as (port, received):
        publish_once(port, tls, tmp_path, received)
    assert SECRET.encode() not in received
