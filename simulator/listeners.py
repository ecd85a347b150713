"""How brokers are reached beyond one plain HTTP port: TLS, client certificates, advertised addresses.

- ``TLS``: a certificate authority made at start (the ``cryptography`` package), a server certificate for
  loopback signed by it, and an https listener per broker beside its plain one. Each broker then publishes
  ``webServiceUrlTls`` in its load report, redirects an https request to the https URL of the broker it
  names, and answers lookups with ``httpUrlTls`` (PulsarWebResource, LocalBrokerData). With
  ``client_auth=True`` the https listeners require a client certificate from the CA (mutual TLS) and take
  the caller's role from its CN, as Pulsar's AuthenticationProviderTls does; ``client_cert(role)`` issues one.
- ``AdvertisedIds``: broker ids on an advertised address that does not resolve here
  (``broker-0.pulsar.svc:8080``, as with advertised listeners or behind NAT), each broker listening on a
  loopback port of its own: what brokers publish (ids, web URLs, redirects) is then unreachable from the
  operator, which must use an override (``brokerWebServiceUrlTemplate`` / ``brokerWebServiceUrls``).
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

from pulsar_lb_operator import lifecycle

LOOPBACK = "127.0.0.1"
ADVERTISED_WEB_PORT = 8080  # webServicePort in every advertised id, as in a Kubernetes deployment
ADVERTISED_TLS_PORT = 8443  # webServicePortTls in the advertised TLS URLs


def _bind(port: int = 0, host: str = LOOPBACK) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class TLS:
    """A CA made at start, the brokers' server certificate, and an https port per broker (kept over restarts)."""

    def __init__(
        self,
        client_auth: bool = False,
        super_users: tuple[str, ...] = ("superuser",),
        dns_names: tuple[str, ...] = ("localhost", "*.pulsar.svc"),
        directory: str | Path | None = None,
    ) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        self._x509, self._hashes, self._serialization, self._ec = x509, hashes, serialization, ec
        self._oid, self._eku = NameOID, ExtendedKeyUsageOID
        self.client_auth = client_auth
        self.super_users = frozenset(super_users)
        self._own_directory = directory is None
        self.directory = (
            Path(directory) if directory else lifecycle.temp_dir("sim-tls")
        )  # removed at exit at the latest
        self.directory.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pulsar-sim CA")])
        now = datetime.datetime.now(datetime.UTC)
        self._ca_name = name
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca_file = str(self._write("ca.pem", self._ca_cert.public_bytes(serialization.Encoding.PEM)))
        # every loopback host a broker may have (addresses: distinct gives 127.0.0.1, 127.0.0.2, …)
        ips = [x509.IPAddress(ipaddress.ip_address(f"127.0.0.{i}")) for i in range(1, 255)]
        alt = [*ips, *(x509.DNSName(d) for d in dns_names)]
        self.cert_file, self.key_file = self._issue("broker", alt, server=True)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(self.cert_file, self.key_file)
        if client_auth:
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(self.ca_file)
        self._ports: dict[str, int] = {}
        self._lock = threading.Lock()

    def _write(self, name: str, data: bytes) -> Path:
        path = self.directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def _issue(self, common_name: str, alt: list[Any], server: bool) -> tuple[str, str]:
        x509, serialization = self._x509, self._serialization
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(self._oid.COMMON_NAME, common_name)]))
            .issuer_name(self._ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.ExtendedKeyUsage([self._eku.SERVER_AUTH if server else self._eku.CLIENT_AUTH]), critical=False
            )
        )
        if alt:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self._ca_key, self._hashes.SHA256())
        stem = f"{'server' if server else 'client'}-{common_name}"
        cert_path = self._write(f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM))
        key_path = self._write(
            f"{stem}-key.pem",
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )
        return str(cert_path), str(key_path)

    def client_cert(self, role: str) -> tuple[str, str]:
        """A client certificate and key (files) for ``role``, signed by the CA: AuthenticationTls' credential."""
        return self._issue(role, [], server=False)

    def socket_for(self, broker_id: str) -> socket.socket:
        """A listening socket for a broker's https listener, on the same loopback port after a restart: on the
        broker's own host when that is a loopback address, else on 127.0.0.1."""
        host = broker_id.rpartition(":")[0]
        with self._lock:
            sock = _bind(self._ports.get(broker_id, 0), host if _is_loopback(host) else LOOPBACK)
            self._ports[broker_id] = sock.getsockname()[1]
            return sock

    def port_of(self, broker_id: str) -> int | None:
        return self._ports.get(broker_id)

    @staticmethod
    def role_of(ssl_object: Any) -> str | None:
        """The CN of a verified client certificate (Pulsar's AuthenticationProviderTls role), or None."""
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        for rdn in (cert or {}).get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    return str(value)
        return None

    def close(self) -> None:
        if self._own_directory:
            lifecycle.remove(self.directory)


class AdvertisedIds:
    """Broker ids ``<name>.<domain>:8080`` that do not resolve here, each served on a loopback port of its own.

    An allocator for SimulatedCluster (``prepare``, called with the broker's name) and for the server
    (``take``: a socket bound for the broker, on the same port after a restart; ``close``). ``reachable``
    gives the loopback URL an operator behind NAT would be given for each broker.
    """

    def __init__(self, domain: str = "pulsar.svc", first_port: int | None = None) -> None:
        self.domain = domain
        self.first_port = first_port
        self._ports: dict[str, int] = {}
        self._lock = threading.Lock()

    def prepare(self, scenario: Any) -> None:
        pass

    def __call__(self, name: str) -> str:
        return f"{name}.{self.domain}:{ADVERTISED_WEB_PORT}"

    def take(self, broker_id: str) -> socket.socket:
        with self._lock:
            port = self._ports.get(broker_id)
            if port is None and self.first_port and not self._ports:
                port = self.first_port
            sock = _bind(port or 0)
            self._ports[broker_id] = sock.getsockname()[1]
            return sock

    def reachable(self, broker_id: str) -> str | None:
        port = self._ports.get(broker_id)
        return f"http://{LOOPBACK}:{port}" if port else None

    def close(self) -> None:
        pass


def _is_loopback(host: str) -> bool:
    return host == "localhost" or host.startswith("127.")


def advertised_tls_url(broker_id: str, tls: TLS) -> str:
    """The https URL a broker publishes: its id's host on the TLS port it listens on (on loopback), or on
    8443 for an advertised id (which does not resolve: its listener is reached through an override)."""
    host = broker_id.rpartition(":")[0]
    if _is_loopback(host):
        return f"https://{host}:{tls.port_of(broker_id)}"
    return f"https://{host}:{ADVERTISED_TLS_PORT}"


def reachable_tls_url(broker_id: str, tls: TLS) -> str:
    """Where a broker's https listener is reached from here (loopback, whatever it advertises)."""
    host = broker_id.rpartition(":")[0]
    return f"https://{host if _is_loopback(host) else LOOPBACK}:{tls.port_of(broker_id)}"
