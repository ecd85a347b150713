"""Readers on the extensible load manager's (ELM) two system topics, and the line that shows a wait for them.

The topics are non-persistent: a reader sees only what is published while it reads, and a steady ELM broker writes
its BrokerLoadData only every ``loadBalancerReportUpdateMaxIntervalMinutes`` (15). So the readers stay open across
cycles (the daemon's Session keeps them), keep the latest value per key (broker id, an empty value being a
tombstone), and only the first cycle after they connect waits for every broker to be heard. The readers use the
admin client's credentials and TLS settings and read the JSON as bytes (``pulsar-client consume`` does the same;
a consumer without a schema may read a topic that has one).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import quote

import structlog

from pulsar_lb_operator import lifecycle
from pulsar_lb_operator.adminapi import AdminClient, AdminError
from pulsar_lb_operator.strategies import ClusterError

log = structlog.get_logger(__name__)

BROKER_LOAD_DATA_TOPIC = "non-persistent://pulsar/system/loadbalancer-broker-load-data"
TOP_BUNDLES_TOPIC = "non-persistent://pulsar/system/loadbalancer-top-bundles-load-data"
TOPICS = (BROKER_LOAD_DATA_TOPIC, TOP_BUNDLES_TOPIC)
CONNECT_TIMEOUT_S = 10.0  # at most this long to connect the readers (a dead address fails after it)
SERVICE_URL = re.compile(r"pulsar(\+ssl)?://([^/\s]+)/?")  # one host:port, or several separated by commas


class ElmDataUnreadable(ClusterError, ConnectionError):
    """ELM's system topics could not be read: the message names what, where, and why. Nothing was done."""


def _quiet_logger() -> Any:
    """pulsar-client's C++ core logs every refused reconnection; we log each problem once instead. Its own file
    logger on /dev/null, not a Python logger: a Python logger called from the core's threads while the interpreter
    exits prints the core's debug lines, or aborts the process."""
    import pulsar

    return pulsar.FileLogger(pulsar.LoggerLevel.Error, os.devnull)


@dataclass
class Heard:
    payload: bytes | None  # None: a tombstone
    at: float  # time.monotonic() when received


# (brokers heard on both topics, brokers asked for, seconds left): called about once a second while waiting
Progress = Callable[[list[str], list[str], float], None]


@dataclass
class SystemTopicReader:
    """Readers from the latest message on ELM's two topics, each on a thread of its own, keeping the latest value
    per key (broker id). ``start`` raises ElmDataUnreadable naming the topic, the address and the reason."""

    service_url: str
    client_options: dict[str, Any] = field(default_factory=dict)
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    latest: dict[str, dict[str, Heard]] = field(default_factory=lambda: {t: {} for t in TOPICS})
    received: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOPICS, 0))
    connected_at: float | None = None

    def __post_init__(self) -> None:
        self._client: Any = None
        self._readers: dict[str, Any] = {}
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._threads: list[threading.Thread] = []

    def start(self) -> SystemTopicReader:
        import pulsar  # the native client: only clusters on the extensible load manager need it

        timeout = max(1.0, self.connect_timeout_s)
        try:
            self._client = pulsar.Client(
                self.service_url,
                **self.client_options,
                operation_timeout_seconds=max(1, int(timeout)),
                connection_timeout_ms=int(timeout * 1000),
                logger=_quiet_logger(),
            )
        except Exception as exc:  # a malformed URL, an unusable certificate file
            raise ElmDataUnreadable(
                f"cannot read {BROKER_LOAD_DATA_TOPIC} at {self.service_url}: {_why(exc)}"
            ) from None
        for topic in TOPICS:
            try:
                self._readers[topic] = self._client.create_reader(
                    topic, pulsar.MessageId.latest, reader_name=f"pulsar-lb-operator-{topic.rsplit('/', 1)[-1]}"
                )
            except Exception as exc:
                self.close()
                reason = f"no connection within {timeout:g} s ({_why(exc)})" if _timed_out(exc) else _why(exc)
                raise ElmDataUnreadable(f"cannot read {topic} at {self.service_url}: {reason}") from None
        self.connected_at = time.monotonic()
        for topic, reader in self._readers.items():
            thread = threading.Thread(target=self._run, args=(topic, reader), name="elm-reader", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("reading the extensible load manager's topics", service_url=self.service_url, topics=list(TOPICS))
        return self

    def _run(self, topic: str, reader: Any) -> None:
        import pulsar

        warned = False
        while not self._stop.is_set():
            try:
                message = reader.read_next(200)
            except pulsar.Timeout:
                continue
            except Exception as exc:  # closed, or the broker went away: the client reconnects by itself
                if self._stop.is_set():
                    return
                if not warned:
                    log.warning("reading an ELM topic failed; retrying", topic=topic, reason=_why(exc))
                    warned = True
                self._stop.wait(1.0)
                continue
            warned = False
            key = message.partition_key()
            if not key:
                continue
            data = message.data()
            with self._changed:
                self.latest[topic][key] = Heard(bytes(data) if data else None, time.monotonic())
                self.received[topic] += 1
                self._changed.notify_all()

    def heard_from(self, brokers: list[str]) -> list[str]:
        """The brokers heard on both topics (a tombstone counts: it is their latest word)."""
        with self._changed:
            return [b for b in brokers if all(b in self.latest[t] for t in TOPICS)]

    def left_s(self, timeout_s: float) -> float:
        """Seconds left of a wait of ``timeout_s`` counted from when the readers connected."""
        return (self.connected_at or time.monotonic()) + timeout_s - time.monotonic()

    def wait_for(self, brokers: list[str], timeout_s: float, progress: Progress | None = None) -> None:
        """Until every broker was heard on both topics, or ``timeout_s`` after the readers connected."""
        deadline = (self.connected_at or time.monotonic()) + timeout_s
        with self._changed:
            while True:
                heard = [b for b in brokers if all(b in self.latest[t] for t in TOPICS)]
                left = deadline - time.monotonic()
                if len(heard) == len(brokers) or left <= 0 or self._stop.is_set():
                    return
                if progress is not None:
                    progress(heard, brokers, left)
                self._changed.wait(min(left, 1.0))

    def caught_up(self, sent: Mapping[str, int], timeout_s: float) -> bool:
        """Wait until as many messages were received on each topic as ``sent`` says were published (the
        simulator's publisher counts them); True when they were."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while any(self.received.get(t, 0) < n for t, n in sent.items()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
        return True

    def heard(self) -> dict[str, dict[str, Heard]]:
        with self._changed:
            return {t: dict(v) for t, v in self.latest.items()}

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(2.0)
        if any(thread.is_alive() for thread in self._threads):  # inside a native call: closing under it crashes
            log.warning("an ELM reader still waits on its broker; its connection ends with the process")
            lifecycle.strand("ELM reader")
            return
        client, self._client = self._client, None
        for reader in self._readers.values():
            try:
                reader.close()
            except Exception as exc:  # a reader whose broker is gone may fail to close; nothing to keep
                log.debug("ELM reader close failed", reason=_why(exc))
        self._readers.clear()
        if client is not None:
            try:
                client.close()
            except Exception as exc:
                log.debug("ELM client close failed", reason=_why(exc))


class WaitLine:
    """The wait for the brokers' first words, on one line of a terminal rewritten in place (``\\r``): how many were
    heard, which, and how long the wait may still last. Nothing on a stream that is not a terminal (a log file, a
    pipe): a daemon's logs and a command's JSON stay clean."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.shown = 0  # characters on the line now

    @classmethod
    def on_terminal(cls, stream: TextIO) -> WaitLine | None:
        try:
            return cls(stream) if stream.isatty() else None
        except (AttributeError, ValueError):  # no isatty, or a closed stream
            return None

    def __call__(self, heard: list[str], brokers: list[str], left_s: float) -> None:
        names = ", ".join(heard)
        if len(names) > 60:
            names = names[:57] + "..."
        text = (
            f"waiting for the extensible load manager's load data: {len(heard)} of {len(brokers)} brokers heard"
            + (f" ({names})" if names else "")
            + f", up to {left_s:.0f} s left"
        )
        self.stream.write("\r" + text.ljust(self.shown))
        self.stream.flush()
        self.shown = len(text)

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * self.shown + "\r")
            self.stream.flush()
            self.shown = 0


def cluster_service_url(client: AdminClient, cluster: str | None) -> str:
    """The cluster's binary-protocol URL as its metadata names it (``GET /admin/v2/clusters/{cluster}``, ClusterData):
    ``brokerServiceUrlTls`` when the admin URL is https and the cluster has one, else ``brokerServiceUrl`` (else the
    TLS one). The readers send the admin client's credentials there, so with credentials every host it names must be
    one the admin URL or the broker list names (else elmServiceUrl must say it is wanted). ElmDataUnreadable names
    what is wrong."""
    if cluster is None:
        raise ElmDataUnreadable(f"cannot read {BROKER_LOAD_DATA_TOPIC}: no cluster to read the service URL of")
    path = f"/admin/v2/clusters/{quote(cluster)}"
    try:
        data = client.get_json(path)
    except AdminError as exc:
        raise ElmDataUnreadable(
            f"cannot read {BROKER_LOAD_DATA_TOPIC}: the cluster's service URL is unknown ({path}: {exc}); "
            "set elmServiceUrl"
        ) from None
    urls = data if isinstance(data, dict) else {}
    plain, tls = (
        u.strip() if isinstance(u, str) and u.strip() else None
        for u in (urls.get("brokerServiceUrl"), urls.get("brokerServiceUrlTls"))
    )
    chosen = (tls or plain) if client.scheme == "https" else (plain or tls)
    key = "brokerServiceUrlTls" if chosen is not None and chosen == tls else "brokerServiceUrl"
    if chosen is None:
        raise ElmDataUnreadable(
            f"cannot read {BROKER_LOAD_DATA_TOPIC}: cluster {cluster}'s metadata ({path}) has no brokerServiceUrl "
            "or brokerServiceUrlTls; set elmServiceUrl"
        )
    match = SERVICE_URL.fullmatch(chosen)
    if match is None:
        raise ElmDataUnreadable(
            f"cannot read {BROKER_LOAD_DATA_TOPIC}: cluster {cluster}'s {key} {chosen!r} is not a pulsar:// or "
            "pulsar+ssl:// URL; set elmServiceUrl"
        )
    if client.credentials.plugin not in (None, "none"):
        if client.scheme == "https" and not match.group(1):
            raise ElmDataUnreadable(
                f"cannot read {BROKER_LOAD_DATA_TOPIC}: cluster {cluster}'s {key} {chosen} is plain pulsar:// and the "
                "admin URL is https: the readers would send the admin credentials in clear; set "
                f"elmServiceUrl={chosen} to accept that"
            )
        unknown = [h for h in match.group(2).split(",") if not client.is_known_host(f"https://{h}")]
        if unknown:
            raise ElmDataUnreadable(
                f"cannot read {BROKER_LOAD_DATA_TOPIC}: cluster {cluster}'s {key} {chosen} is on {unknown[0]}, a host "
                "neither the admin URL nor the broker list names, and the readers would send it the admin "
                f"credentials; set elmServiceUrl={chosen} if it is the cluster's own"
            )
    log.info("the extensible load manager's topics: the cluster's service URL", key=key, service_url=chosen)
    return chosen


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def _timed_out(exc: BaseException) -> bool:
    return type(exc).__name__ == "Timeout" or "timeout" in str(exc).lower()
