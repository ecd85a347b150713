"""History store: every collected cycle's broker and bundle samples, as Parquet partitioned by date and hour.

Layout (read by ``spark_jobs/`` and by anything that reads Parquet):

    <root>/broker_samples/date=YYYY-MM-DD/hour=HH/part-<epoch ms>-<id>.parquet
    <root>/bundle_samples/date=YYYY-MM-DD/hour=HH/part-<epoch ms>-<id>.parquet

``root`` is a local directory or any URI pyarrow's filesystems open (``s3://``, ``s3a://`` is read as
``s3://``, ``hdfs://``, ``gs://``). A file is written under a hidden temporary name and renamed, so a
crash mid-write leaves only a hidden file that readers ignore; a file that is nonetheless unreadable
is skipped with a log line. Partitions older than the retention are deleted.
"""

from __future__ import annotations

import datetime
import os
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import structlog

from pulsar_lb_operator.strategies import RESOURCE_FIELDS, BundleStats, ClusterSnapshot
from pulsar_lb_operator.strategies import bundles as bundle_names

log = structlog.get_logger(__name__)

_RES = [(f"{name}_usage", f"{name}_limit") for name in RESOURCE_FIELDS]
BROKER_SCHEMA = pa.schema(
    [("time", pa.int64()), ("broker", pa.string())]
    + [(col, pa.float64()) for pair in _RES for col in pair]
    + [(c, pa.float64()) for c in ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")]
    + [("bundle_count", pa.int32())]
)
BUNDLE_SCHEMA = pa.schema(
    [("time", pa.int64()), ("bundle", pa.string()), ("namespace", pa.string()), ("owner", pa.string())]
    + [(c, pa.float64()) for c in ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")]
    + [("topics", pa.int32()), ("producers", pa.int32()), ("consumers", pa.int32())]
)
KINDS = {"broker_samples": BROKER_SCHEMA, "bundle_samples": BUNDLE_SCHEMA}


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if uri.startswith("s3a://"):
        uri = "s3://" + uri.removeprefix("s3a://")
    return pafs.FileSystem.from_uri(uri)


@dataclass
class HistoryStore:
    uri: str
    retention_days: float = 14

    def __post_init__(self) -> None:
        self.fs, self.root = _filesystem(self.uri)
        self.root = self.root.rstrip("/")

    def append(self, snapshot: ClusterSnapshot) -> int:
        """Write one cycle's samples; returns the number of rows written."""
        brokers, bundles = _rows(snapshot)
        when = datetime.datetime.fromtimestamp(snapshot.taken_at / 1000, tz=datetime.timezone.utc)
        written = 0
        for kind, rows in (("broker_samples", brokers), ("bundle_samples", bundles)):
            if not rows:
                continue
            table = pa.Table.from_pylist(rows, schema=KINDS[kind])
            folder = f"{self.root}/{kind}/date={when:%Y-%m-%d}/hour={when:%H}"
            self.fs.create_dir(folder, recursive=True)
            name = f"part-{snapshot.taken_at}-{uuid.uuid4().hex[:8]}.parquet"
            tmp = f"{folder}/.{name}.tmp"
            pq.write_table(table, tmp, filesystem=self.fs)
            self.fs.move(tmp, f"{folder}/{name}")
            written += len(rows)
        return written

    def files(self, kind: str) -> list[str]:
        base = f"{self.root}/{kind}"
        if self.fs.get_file_info(base).type == pafs.FileType.NotFound:
            return []
        selector = pafs.FileSelector(base, recursive=True)
        return sorted(
            info.path
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File
            and info.path.endswith(".parquet")
            and not info.base_name.startswith((".", "_"))
        )

    def read(self, kind: str) -> pa.Table:
        """All readable files of one kind; an unreadable (partial) file is skipped with a log line."""
        tables = []
        for path in self.files(kind):
            try:
                tables.append(pq.read_table(path, filesystem=self.fs, schema=KINDS[kind]))
            except (pa.ArrowInvalid, OSError) as exc:
                log.warning("history file skipped", path=path, reason=str(exc).splitlines()[0])
        return pa.concat_tables(tables) if tables else KINDS[kind].empty_table()

    def expire(self, now_ms: int) -> int:
        """Delete date partitions older than the retention; returns how many were removed."""
        cutoff = datetime.datetime.fromtimestamp(now_ms / 1000, tz=datetime.timezone.utc) - datetime.timedelta(
            days=self.retention_days
        )
        removed = 0
        for kind in KINDS:
            base = f"{self.root}/{kind}"
            if self.fs.get_file_info(base).type == pafs.FileType.NotFound:
                continue
            for info in self.fs.get_file_info(pafs.FileSelector(base)):
                if not info.base_name.startswith("date="):
                    continue
                try:
                    day = datetime.datetime.strptime(info.base_name[5:], "%Y-%m-%d").replace(
                        tzinfo=datetime.timezone.utc
                    )
                except ValueError:
                    continue
                if day + datetime.timedelta(days=1) <= cutoff:
                    self.fs.delete_dir(info.path)
                    removed += 1
        return removed


def bundle_row(time_ms: int, bundle: str, owner: str, stats: BundleStats) -> dict:
    """One row of ``bundle_samples``."""
    return {
        "time": time_ms,
        "bundle": bundle,
        "namespace": bundle_names.namespace_of(bundle),
        "owner": owner,
        "msg_rate_in": stats.msgRateIn,
        "msg_rate_out": stats.msgRateOut,
        "msg_throughput_in": stats.msgThroughputIn,
        "msg_throughput_out": stats.msgThroughputOut,
        "topics": stats.topics,
        "producers": stats.producerCount,
        "consumers": stats.consumerCount,
    }


def _rows(snapshot: ClusterSnapshot) -> tuple[list[dict], list[dict]]:
    brokers, bundles = [], []
    for broker_id, load in sorted(snapshot.brokers.items()):
        row = {"time": snapshot.taken_at, "broker": broker_id}
        for name, (usage_col, limit_col) in zip(RESOURCE_FIELDS, _RES):
            resource = getattr(load, name)
            row[usage_col], row[limit_col] = resource.usage, resource.limit
        row.update(
            msg_rate_in=load.msgRateIn,
            msg_rate_out=load.msgRateOut,
            msg_throughput_in=load.msgThroughputIn,
            msg_throughput_out=load.msgThroughputOut,
            bundle_count=len(load.bundles),
        )
        brokers.append(row)
        for bundle, stats in sorted(load.lastStats.items()):
            bundles.append(bundle_row(snapshot.taken_at, bundle, broker_id, stats))
    return brokers, bundles
