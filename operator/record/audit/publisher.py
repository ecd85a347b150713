"""Send the spooled audit events to a Pulsar topic with pulsar-client, from a thread of their own.

``publish`` only writes to the spool (one fsync) and wakes the sender; it never raises, so neither a
slow broker nor a full disk can block or fail a cycle. The sender sends events one at a time in
spool order with their spool number as the message's sequence id, and acknowledges each in the spool
once the broker has persisted it; an unreachable broker is retried with tenacity's exponential
back-off while events wait in the spool. With Pulsar's deduplication on for the topic's namespace
(``brokerDeduplicationEnabled`` or ``pulsar-admin namespaces set-deduplication``), the producer's
last sequence id closes the one window where a crash could send an event twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog
import tenacity

from pulsar_lb_operator import lifecycle
from pulsar_lb_operator.adminapi import auth
from pulsar_lb_operator.adminapi.auth import AuthSettings, Credentials
from pulsar_lb_operator.record.audit.spool import Spool
from pulsar_lb_operator.strategies import ConfigError

log = structlog.get_logger(__name__)

# pulsar-client's C++ core logs every refused reconnection; the sender logs each outage once instead. What it
# logs at CRITICAL reaches the operator's log (record/logs.py) like any other record.
_client_log = logging.getLogger("pulsar_lb_operator.pulsar_client")
_client_log.setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class AuditSettings:
    """What the audit events' publisher reads from the operator's settings (run/settings.py builds it)."""

    enabled: bool  # auditEnabled
    service_url: str | None  # auditServiceUrl, else derived from adminUrl; None: nowhere to publish
    topic: str  # auditTopic
    spool_dir: str  # auditSpoolDir, else beside stateFile
    spool_max_bytes: int  # auditSpoolMaxMegabytes
    auth: AuthSettings  # as the admin client's: token, TLS certificate or OAuth2
    ca_file: str | None = None  # caBundle
    tls_verify: bool = True  # tlsVerify


def from_settings(
    settings: AuditSettings,
    on_sent: Callable[[], None] = lambda: None,
    on_dropped: Callable[[], None] = lambda: None,
) -> AuditPublisher | None:
    """The started publisher ``auditEnabled`` asks for, or None."""
    if not settings.enabled or not settings.service_url:
        return None
    try:
        spool = Spool(settings.spool_dir, settings.spool_max_bytes)
    except OSError as exc:
        raise ConfigError(
            f"auditSpoolDir: {settings.spool_dir!r} cannot be used as the audit spool directory "
            f"({exc.strerror or exc}); point auditSpoolDir at a writable directory"
        ) from None
    return AuditPublisher(
        spool,
        settings.service_url,
        settings.topic,
        credentials=auth.from_settings(settings.auth),
        ca_file=settings.ca_file,
        tls_verify=settings.tls_verify,
        on_sent=on_sent,
        on_dropped=on_dropped,
    ).start()


class AuditPublisher:
    def __init__(
        self,
        spool: Spool,
        service_url: str,
        topic: str,
        *,
        producer_name: str = "pulsar-lb-operator-audit",
        token: Callable[[], str | None] | None = None,
        credentials: Credentials | None = None,
        ca_file: str | None = None,
        tls_verify: bool = True,
        timeout_s: float = 10.0,
        max_backoff_s: float = 30.0,
        on_sent: Callable[[], None] = lambda: None,
        on_dropped: Callable[[], None] = lambda: None,
    ) -> None:
        self.spool = spool
        self.service_url = service_url
        self.topic = topic
        self.producer_name = producer_name
        self._token = token
        self._credentials = credentials
        self._ca_file = ca_file
        self._tls_verify = tls_verify
        self._timeout_s = timeout_s
        self._max_backoff_s = max_backoff_s
        self._on_sent = on_sent
        self._on_dropped = on_dropped
        self._client: Any = None
        self._producer: Any = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audit-publisher", daemon=True)
        self.connected = False

    # ------------------------------------------------------------------ the cycle's side

    def start(self) -> AuditPublisher:
        self._thread.start()
        log.info("audit events on", topic=self.topic, service_url=self.service_url, backlog=self.spool.backlog())
        return self

    def publish(self, events: Iterable[dict[str, Any]]) -> None:
        """Spool the events and wake the sender. Never raises: the audit trail must not stop a cycle."""
        events = list(events)
        try:
            self.spool.append(events)
        except (OSError, TypeError, ValueError) as exc:  # a full or read-only disk; an event JSON cannot hold
            log.error("audit events dropped: the spool cannot be written", reason=str(exc), events=len(events))
            for _ in events:
                self._on_dropped()
            return
        self._wake.set()

    def flush(self, timeout_s: float) -> bool:
        """Wait until the broker has every spooled event, at most ``timeout_s``; True if it has."""
        deadline = time.monotonic() + timeout_s
        while self.spool.backlog() and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.spool.backlog()

    def close(self, flush_s: float = 0.0, timeout_s: float = 5.0) -> bool:
        """Give the sender ``flush_s`` to send what is spooled, then stop it within ``timeout_s``. What is
        not sent stays in the spool for the next start; returns True when nothing is left."""
        delivered = self.flush(flush_s)
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():  # still in a call of the native client: closing it under that call crashes
            log.warning("audit publisher still waiting on the broker; its connection ends with the process")
            lifecycle.strand("audit publisher")
            return delivered
        self._disconnect()
        log.info("audit publisher stopped", backlog=self.spool.backlog())
        return delivered

    # ------------------------------------------------------------------ the sender thread

    def _pause(self, seconds: float) -> None:
        """tenacity's sleep between attempts, cut short by ``stop()``."""
        self._stop.wait(seconds)

    def _run(self) -> None:
        retrying = tenacity.Retrying(
            wait=tenacity.wait_exponential(multiplier=0.5, max=self._max_backoff_s),
            stop=lambda _state: self._stop.is_set(),
            sleep=self._pause,
            before_sleep=self._on_retry,
            retry=tenacity.retry_if_exception_type(Exception),
            reraise=True,
        )
        while True:
            self._wake.clear()
            try:
                retrying(self._drain)
            except Exception as exc:  # only when stopping: the events wait in the spool
                log.info("audit events left in the spool", reason=str(exc), backlog=self.spool.backlog())
                return
            if self._stop.is_set():
                return
            self._wake.wait()

    def _drain(self) -> None:
        producer = self._ensure_producer()
        while batch := self.spool.pending(500):
            for seq, payload in batch:
                producer.send(payload, sequence_id=seq)
                self.spool.acknowledge(seq)
                self._on_sent()
            if self._stop.is_set():
                break

    def _on_retry(self, state: tenacity.RetryCallState) -> None:
        self._disconnect()
        if state.attempt_number == 1:
            error = state.outcome.exception() if state.outcome else None
            log.warning(
                "audit broker unreachable; events wait in the spool",
                service_url=self.service_url,
                reason=str(error),
                backlog=self.spool.backlog(),
            )

    def _ensure_producer(self) -> Any:
        if self._producer is not None:
            return self._producer
        import pulsar  # imported here: only a daemon with audit events on needs the native client

        if self._credentials is not None:  # the authentication and, for mutual TLS, the client certificate
            options = self._credentials.pulsar_client_options()
        else:
            token = self._token
            # a callable, so a rotated token file is read again on every reconnection
            options = {
                "authentication": pulsar.AuthenticationToken(lambda: token() or "") if token and token() else None
            }
        self._client = pulsar.Client(
            self.service_url,
            **options,
            operation_timeout_seconds=max(1, int(self._timeout_s)),
            connection_timeout_ms=int(self._timeout_s * 1000),
            tls_trust_certs_file_path=self._ca_file,
            tls_allow_insecure_connection=not self._tls_verify,
            tls_validate_hostname=self._tls_verify,  # pulsar-client trusts any name the CA signed unless told
            logger=_client_log,
        )
        self._producer = self._client.create_producer(
            self.topic,
            producer_name=self.producer_name,
            batching_enabled=False,  # one message per event: its sequence id is the spool number
            send_timeout_millis=int(self._timeout_s * 1000),
        )
        self.spool.resume_after(self._producer.last_sequence_id())
        if not self.connected:
            log.info("audit broker connected", service_url=self.service_url, backlog=self.spool.backlog())
        self.connected = True
        return self._producer

    def _disconnect(self) -> None:
        self.connected = False
        client, self._client, self._producer = self._client, None, None
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # closing a client whose broker is gone may fail; nothing to keep
                log.debug("audit client close failed", reason=str(exc))
