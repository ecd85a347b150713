"""Reports: each broker's periodic sample and the LocalBrokerData it writes; the leader's view of them.

A report is built once per change of its broker's sample or bundles and shared (its JSON too); the
leader re-parses only reports that changed, so reading every report is linear in the cluster.
"""

from __future__ import annotations

import json

from pulsar_lb_operator.simulator import report_writes
from pulsar_lb_operator.simulator.model import (
    LEADER_SAMPLE_S,
    Broker,
)
from pulsar_lb_operator.simulator.state import ClusterState
from pulsar_lb_operator.strategies import BrokerLoad, ClusterSnapshot, parse_broker_load, update_bundle_data
from pulsar_lb_operator.strategies import bundles as bundle_names


class Reports(ClusterState):
    """Mixed into SimulatedCluster (cluster.py); the state it shares with the other mixins is ClusterState's."""

    def _sample(self, broker: Broker) -> None:
        """A broker's periodic stats and host-usage sample, and its report written to the metadata store."""
        before = set(broker.stats_sample)
        broker.stats_sample = {}
        broker.topic_sample = {}
        for bundle in self.owned_by(broker.id):
            broker.stats_sample[bundle], broker.topic_sample[bundle] = self.bundle_stats(bundle)
        broker.host_sample = self.host_usage(broker, broker.stats_sample, self.noise.gauss(0, broker.spec.jitter))
        broker.last_update_ms = self.now_ms  # the sample's time (the extensible manager's updatedAt)
        report_writes.track_bundles(broker, before)
        broker.sample_version += 1
        if report_writes.need_broker_data_update(broker, self.now_ms, self.report_update_settings):
            report_writes.write(broker, self.now_ms, lambda: self.load_report(broker.id))
        self.preallocated[broker.id] = [b for b in self.preallocated.get(broker.id, []) if b not in broker.stats_sample]
        self._view = None

    def _leader_sample(self) -> None:
        """The leader re-samples every broker's latest bundle stats after report changes.

        Pulsar does this on every report change; we do it at most once per LEADER_SAMPLE_S of
        simulated time, which keeps a 200-broker cluster fast and changes the averages little. Only
        the cluster's LeastLongTermMessageRate placement reads these averages: with ``placement:
        random`` there is nothing to sample (a 1,000-broker cluster saves a pass over every bundle).
        """
        if self.scenario.placement == "random":
            return
        if self.now_s - self._last_leader_sample_s < LEADER_SAMPLE_S and self.leader_bundle_data:
            return
        self._last_leader_sample_s = self.now_s
        self.leader_bundle_data = update_bundle_data(self.leader_bundle_data, self.leader_view())

    def load_report(self, broker_id: str) -> dict:
        """LocalBrokerData JSON of one broker (GET /admin/v2/broker-stats/load-report on that broker).

        Built once per change of the broker's sample or of its bundles, then shared: do not modify it.
        """
        with self.lock:
            broker = self.brokers[broker_id]
            key = (broker.sample_version, broker.started_at_s)
            cached = self._reports.get(broker_id)
            if cached is not None and cached[0] == key:
                return cached[1]
            report = self._build_report(broker)
            self._reports[broker_id] = (key, report)
            return report

    def load_report_json(self, broker_id: str) -> bytes:
        """``load_report`` as JSON bytes, serialized once per report."""
        with self.lock:
            report = self.load_report(broker_id)
            cached = self._report_json.get(broker_id)
            if cached is not None and cached[0] is report:
                return cached[1]
            body = json.dumps(report).encode()
            self._report_json[broker_id] = (report, body)
            return body

    def _build_report(self, broker: Broker) -> dict:
        """LocalBrokerData as Jackson writes it (getters included, nulls left out): report_writes.local_broker_data."""
        heartbeat = [
            f"pulsar/{broker.id}/0x00000000_0xffffffff",
            f"pulsar/{self.scenario.cluster}/{broker.id}/0x00000000_0xffffffff",
        ]
        return report_writes.local_broker_data(
            broker,
            pulsar_service_url=f"pulsar://{broker.host}:{broker.port + 1}",
            extra_bundles=heartbeat,
            version=self.scenario.broker_version,
            start_ms=self.epoch_ms + int(broker.started_at_s * 1000),
        )

    def topic_stats_report(self, broker_id: str) -> dict:
        """GET /admin/v2/broker-stats/topics: namespace → bundle range → persistent → topic → stats."""
        with self.lock:
            out: dict[str, dict] = {}
            for bundle, per_topic in sorted(self.brokers[broker_id].topic_sample.items()):
                namespace, bundle_range = bundle_names.split_bundle_name(bundle)
                topics = {
                    name: {
                        "msgRateIn": s.msgRateIn,
                        "msgRateOut": s.msgRateOut,
                        "msgThroughputIn": s.msgThroughputIn,
                        "msgThroughputOut": s.msgThroughputOut,
                        "producerCount": 1,
                        "publishers": [],
                        "subscriptions": {},
                        "replication": {},
                        "averageMsgSize": s.msgThroughputIn / s.msgRateIn if s.msgRateIn else 0.0,
                    }
                    for name, s in sorted(per_topic.items())
                }
                out.setdefault(namespace, {})[str(bundle_range)] = {"persistent": topics}
            return out

    def leader_view(self) -> ClusterSnapshot:
        """What the leader reads from the metadata store: every live broker's latest report."""
        if self._view is None:
            brokers = {b.id: self._parsed_report(b.id) for b in self.alive_brokers()}
            self._view = ClusterSnapshot(
                self.scenario.cluster, self.now_ms, brokers, policies=self.namespace_policies()
            )
        return self._view

    def operator_view(self) -> ClusterSnapshot:
        """What the operator's collector reads: every live broker's report as its REST endpoint answers now (the
        latest sample; ``lastUpdate`` is the last write's), where the leader reads what was last written."""
        brokers = {b.id: _parse_once(self._fresh_parsed, b.id, self.load_report(b.id)) for b in self.alive_brokers()}
        return ClusterSnapshot(self.scenario.cluster, self.now_ms, brokers, policies=self.namespace_policies())

    def _parsed_report(self, broker_id: str) -> BrokerLoad:
        """The leader's parse of a broker's report as last written to the metadata store (not the fresher one the
        REST endpoint builds), redone only when a new one was written."""
        report = self.brokers[broker_id].written_report or self.load_report(broker_id)
        return _parse_once(self._parsed, broker_id, report)

    def set_web_url_tls(self, broker_id: str, url: str | None) -> None:
        """The https URL a broker publishes (``webServiceUrlTls``) once it serves TLS; its report is rebuilt."""
        with self.lock:
            self.brokers[broker_id].web_url_tls = url
            self._reports.pop(broker_id, None)


def _parse_once(cache: dict[str, tuple[dict, BrokerLoad]], broker_id: str, report: dict) -> BrokerLoad:
    """``report`` parsed, or its parse from ``cache`` while the broker's report is the same object."""
    cached = cache.get(broker_id)
    if cached is None or cached[0] is not report:
        cached = cache[broker_id] = (report, parse_broker_load(broker_id, report))
    return cached[1]
