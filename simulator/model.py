"""What the simulated cluster is made of: brokers, topics, and the errors an admin call can answer."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from pulsar_lb_operator.simulator.scenario import BrokerSpec, Scenario
from pulsar_lb_operator.strategies import BundleStats, ClusterError, TopicStats

EPOCH_MS = 1_750_000_000_000  # simulated time 0

MIB = 1024 * 1024

RECONNECT_DELAY_S = 2.0  # clients of an unloaded bundle look it up again after this long

# An unloaded bundle's ownership stays disabled while its owner closes the topics; another unload meanwhile
# answers 500 "Namespace bundle … is being unloaded" (NamespaceService.findBrokerServiceUrl).
UNLOAD_WINDOW_S = 1.0

LEADER_SAMPLE_S = 10.0


class SimError(ClusterError):
    """An admin call Pulsar would refuse; carries the HTTP status and Pulsar's reason."""

    def __init__(self, status: int, reason: str, text: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.text = text  # an unexpected exception's text/plain body (RestException), instead of {"reason"}


def unexpected(exception: str, message: str, status: int = 500) -> SimError:
    """What Pulsar's RestException makes of an unexpected exception: a text/plain body with its message."""
    text = (
        "\n --- An unexpected error occurred in the server ---\n\n"  # RestException.getExceptionData
        f"Message: {message}\n\nStacktrace:\n\n{exception}: {message}\n\tat org.apache.pulsar.broker (simulated)\n"
    )
    return SimError(status, message, text)


@dataclass
class Topic:
    name: str
    namespace: str
    hash: int
    rate: float
    msg_size: int
    fanout: float
    producers: int
    consumers: int
    pattern_index: int

    def stats(self, multiplier: float) -> TopicStats:
        rate_in = self.rate * multiplier
        return TopicStats(
            rate_in, rate_in * self.fanout, rate_in * self.msg_size, rate_in * self.fanout * self.msg_size
        )


@dataclass
class Broker:
    name: str
    id: str
    spec: BrokerSpec
    started_at_s: float
    alive: bool = True
    next_sample_s: float = 0.0
    last_update_ms: int = 0
    stats_sample: dict[str, BundleStats] = field(default_factory=dict)
    topic_sample: dict[str, dict[str, TopicStats]] = field(default_factory=dict)
    host_sample: dict[str, tuple[float, float]] = field(default_factory=dict)
    sample_version: int = 0  # bumped by every sample: the load report is rebuilt only after a change
    web_url_tls: str | None = None  # the https URL it publishes, when it serves TLS (set_web_url_tls)
    # The modular manager's write of LocalBrokerData to the metadata store (report_writes.py): when it last
    # happened (the report's lastUpdate), the figures it compared (lastData), what the leader reads since, and
    # the bundles gained and lost since (lastBundleGains/Losses, cleared by each write).
    written_ms: int = 0
    written_figures: tuple[float, float, float, int] | None = None
    written_report: dict | None = None
    bundle_gains: set[str] = field(default_factory=set)
    bundle_losses: set[str] = field(default_factory=set)

    @property
    def port(self) -> int:
        return int(self.id.rsplit(":", 1)[1])

    @property
    def host(self) -> str:
        return self.id.rsplit(":", 1)[0]

    @property
    def web_url(self) -> str:
        return f"http://{self.id}"


class _VirtualIds:
    """127.0.0.1 and a port each; with the scenario's ``addresses: distinct``, 127.0.0.1, 127.0.0.2, … on one
    port (hosts tell brokers apart, as namespace isolation policies need)."""

    def __init__(self) -> None:
        self.ports = iter(range(20000, 30000))
        self.distinct: itertools.count[int] | None = None

    def prepare(self, scenario: Scenario) -> None:
        if getattr(scenario, "addresses", "ports") == "distinct":
            self.distinct = itertools.count()

    def __call__(self, _name: str) -> str:
        if self.distinct is None:
            return f"127.0.0.1:{next(self.ports)}"
        third, fourth = divmod(next(self.distinct), 254)
        return f"127.{third // 256}.{third % 256}.{fourth + 1}:20000"


def virtual_ids() -> Callable[[str], str]:
    """Broker ids for a cluster that is not served over HTTP (benchmarks, unit tests)."""
    return _VirtualIds()
