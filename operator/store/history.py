"""History store: every collected cycle's broker and bundle samples, as Parquet partitioned by date and hour.

Layout (read by ``spark_jobs/`` and by anything that reads Parquet):

    <root>/broker_samples/date=YYYY-MM-DD/hour=HH/part-<epoch ms>-<id>.parquet     one per cycle
    <root>/bundle_samples/date=YYYY-MM-DD/hour=HH/part-<epoch ms>-<id>.parquet
    <root>/<kind>/date=…/hour=…/compacted-<epoch ms>.parquet                        a closed hour, compacted
    <root>/bundle_hours/date=YYYY-MM-DD/compacted-<epoch ms>.parquet               per bundle and hour

``root`` is a local directory or any URI pyarrow's filesystems open (``s3://``, ``s3a://`` is read as
``s3://``, ``hdfs://``, ``gs://``). A file is written under a hidden temporary name and renamed, so a
crash mid-write leaves only a hidden file that readers ignore; a file that is nonetheless unreadable
is skipped with a log line.

**Compacted partitions** (``store/compaction.py``): a closed hour's cycle files become one
``compacted-<T>.parquet`` (T: the newest input's stamp). Readers apply one rule, :func:`visible`: in a
partition holding a compacted file, the newest compacted file and only the cycle files stamped after T
count. The rename of the compacted file is the single atomic step, so a reader sees either the cycle
files or the compacted file, never both and never neither; the inputs are deleted afterwards.

**Bounds.** Date partitions older than ``retention_days`` are deleted; bundle minute samples are kept
``minute_hours`` (their hours live on in ``bundle_hours``, written when the hour is compacted); with
``max_bytes`` the oldest hours go first until the history fits. An append that does not fit — a full
disk, or the bound with nothing older left to delete — is skipped and said so (:class:`Appended`),
never raised: the history is for later analysis and never stops a cycle.
"""

from __future__ import annotations

import errno
import os
import uuid
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import structlog

from pulsar_lb_operator.spark_jobs.layout import DAY_MS, HOUR_MS, overlaps, partition_of, partition_span, visible
from pulsar_lb_operator.strategies import RESOURCE_FIELDS, BundleStats, ClusterSnapshot

log = structlog.get_logger(__name__)

MESSAGE_COLUMNS = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")
_MESSAGE_FIELDS = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")
_RES = [(f"{name}_usage", f"{name}_limit") for name in RESOURCE_FIELDS]
BROKER_SCHEMA = pa.schema(
    [("time", pa.int64()), ("broker", pa.string())]
    + [(col, pa.float64()) for pair in _RES for col in pair]
    + [(c, pa.float64()) for c in MESSAGE_COLUMNS]
    + [("bundle_count", pa.int32())]
)
BUNDLE_SCHEMA = pa.schema(
    [("time", pa.int64()), ("bundle", pa.string()), ("namespace", pa.string()), ("owner", pa.string())]
    + [(c, pa.float64()) for c in MESSAGE_COLUMNS]
    + [("topics", pa.int32()), ("producers", pa.int32()), ("consumers", pa.int32())]
)
# one row per bundle and hour (time: the hour's start), for the days after the minute samples are gone
BUNDLE_HOURS_SCHEMA = pa.schema(
    [("time", pa.int64()), ("bundle", pa.string()), ("namespace", pa.string()), ("owner", pa.string())]
    + [("samples", pa.int32()), ("first_time", pa.int64()), ("last_time", pa.int64())]
    + [(f"{c}_{stat}", pa.float64()) for c in MESSAGE_COLUMNS for stat in ("mean", "max")]
    + [("topics_max", pa.int32()), ("producers_max", pa.int32()), ("consumers_max", pa.int32())]
)
KINDS = {"broker_samples": BROKER_SCHEMA, "bundle_samples": BUNDLE_SCHEMA}
# a cycle's file: dictionaries for the repeated names only (a dictionary of 100,000 distinct bundle names
# would cost more than half the write); compaction's sorted files keep them all
CYCLE_DICTIONARY = {"broker_samples": ["broker"], "bundle_samples": ["namespace", "owner"]}
ALL_KINDS = {**KINDS, "bundle_hours": BUNDLE_HOURS_SCHEMA}
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if uri.startswith("s3a://"):
        uri = "s3://" + uri.removeprefix("s3a://")
    filesystem, path = pafs.FileSystem.from_uri(uri)
    return filesystem, str(path)


@dataclass(frozen=True)
class Appended:
    """What an append did: rows written, or why it was skipped (``disk_full``, ``over_bound``)."""

    rows: int = 0
    skipped: str | None = None
    freed_bytes: int = 0  # the oldest data deleted to make room under max_bytes


@dataclass
class HistoryStore:
    uri: str
    retention_days: float = 14
    max_bytes: int = 0  # 0: bounded by age only
    minute_hours: float = 26  # bundle minute samples; older hours live on in bundle_hours
    _used: int | None = field(default=None, init=False, repr=False)
    _last_size: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.fs, self.root = _filesystem(self.uri)
        self.root = self.root.rstrip("/")

    # ------------------------------------------------------------------------------------------ write

    def append(self, snapshot: ClusterSnapshot) -> Appended:
        """Write one cycle's samples. Never raises for want of space: a full disk or a history at its bound
        with nothing older to delete is a skip, returned (and logged by the caller)."""
        tables = [(kind, table) for kind, table in snapshot_tables(snapshot) if table.num_rows]
        freed = 0
        if self.max_bytes:
            # about what the last cycle's files took (a first guess before any: a quarter of Arrow's size)
            incoming = sum(self._last_size.get(kind, t.nbytes // 4 + 4096) for kind, t in tables)
            freed = self.make_room(incoming, keep_from=snapshot.taken_at)
            if self.used_bytes() + incoming > self.max_bytes:
                return Appended(0, "over_bound", freed)
        written: list[str] = []
        try:
            for kind, table in tables:
                written.append(self.write_samples(kind, snapshot.taken_at, table))
                self._last_size[kind] = self.fs.get_file_info(written[-1]).size or 0
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            for path in written:  # all of a cycle or none of it
                self._delete_file(path)
            return Appended(0, "disk_full", freed)
        if self.max_bytes:  # the guess was short: the oldest go now, not at the next cycle
            freed += self.make_room(0, keep_from=snapshot.taken_at)
        return Appended(sum(t.num_rows for _, t in tables), None, freed)

    def write_samples(self, kind: str, time_ms: int, table: pa.Table) -> str:
        """One cycle's table of one kind, as its own file in the hour's partition."""
        folder = f"{self.root}/{kind}/{partition_of(time_ms)}"
        name = f"part-{time_ms}-{uuid.uuid4().hex[:8]}.parquet"
        return self.write_atomically(folder, name, table, use_dictionary=CYCLE_DICTIONARY[kind])

    def write_atomically(
        self,
        folder: str,
        name: str,
        table: pa.Table,
        row_group_size: int | None = None,
        use_dictionary: bool | list[str] = True,
    ) -> str:
        """Write under a hidden name, then rename: readers see the whole file or nothing."""
        self.fs.create_dir(folder, recursive=True)
        tmp = f"{folder}/.{name}.tmp"
        try:
            pq.write_table(
                table,
                tmp,
                filesystem=self.fs,
                compression="zstd",
                row_group_size=row_group_size,
                use_dictionary=use_dictionary,
            )
            self.fs.move(tmp, f"{folder}/{name}")
        except OSError:
            self._delete_file(tmp)
            raise
        if self._used is not None:
            self._used += self.fs.get_file_info(f"{folder}/{name}").size or 0
        return f"{folder}/{name}"

    def _delete_file(self, path: str) -> None:
        try:
            size = self.fs.get_file_info(path).size or 0
            self.fs.delete_file(path)
        except (OSError, FileNotFoundError):
            return
        if self._used is not None:
            self._used -= size

    def delete_partition(self, path: str) -> int:
        """Delete a date or hour partition; returns the bytes freed."""
        size = sum(i.size or 0 for i in self._walk(path) if i.type == pafs.FileType.File)
        try:
            self.fs.delete_dir(path)
        except (OSError, FileNotFoundError):
            return 0
        if self._used is not None:
            self._used -= size
        return size

    # ------------------------------------------------------------------------------------------ read

    def _walk(self, base: str) -> list[pafs.FileInfo]:
        try:
            infos: list[pafs.FileInfo] = self.fs.get_file_info(
                pafs.FileSelector(base, recursive=True, allow_not_found=True)
            )
            return infos
        except (OSError, FileNotFoundError):
            return []

    def files(self, kind: str, since_ms: int | None = None) -> list[str]:
        """The data files of one kind a reader takes (:func:`visible` per partition), oldest partition first;
        with ``since_ms``, only the partitions that may hold a sample after it."""
        folders: dict[str, list[str]] = {}
        for info in self._walk(f"{self.root}/{kind}"):
            if info.type == pafs.FileType.File:
                folders.setdefault(info.path.rsplit("/", 1)[0], []).append(info.base_name)
        out = []
        for folder in sorted(folders):
            if overlaps(folder + "/", since_ms, None):
                out += [f"{folder}/{name}" for name in visible(folders[folder])]
        return out

    def read(self, kind: str, since_ms: int | None = None) -> pa.Table:
        """All readable files of one kind; an unreadable (partial) file is skipped with a log line."""
        tables = []
        for path in self.files(kind, since_ms):
            try:
                tables.append(pq.read_table(path, filesystem=self.fs, schema=ALL_KINDS[kind]))
            except (pa.ArrowInvalid, OSError) as exc:
                log.warning("history file skipped", path=path, reason=str(exc).splitlines()[0])
        return pa.concat_tables(tables) if tables else ALL_KINDS[kind].empty_table()

    def partitions(self, kind: str) -> list[tuple[int, str]]:
        """(start ms, path) of every date/hour partition of one kind (date partitions for bundle_hours)."""
        out = []
        for info in self._walk(f"{self.root}/{kind}"):
            if info.type != pafs.FileType.Directory:
                continue
            leaf = info.base_name.startswith("hour=") or (kind == "bundle_hours" and info.base_name.startswith("date="))
            span = partition_span(info.path + "/") if leaf else None
            if span is not None:
                out.append((span[0], info.path))
        return sorted(out)

    def used_bytes(self) -> int:
        """Bytes the history holds (listed once, then kept up to date by this store's writes and deletes)."""
        if self._used is None:
            self._used = sum(i.size or 0 for i in self._walk(self.root) if i.type == pafs.FileType.File)
        return self._used

    def forget_size(self) -> None:
        """Someone else (compaction) changed the files: list them again when next asked."""
        self._used = None

    # ------------------------------------------------------------------------------------------ bounds

    def make_room(self, incoming: int, keep_from: int) -> int:
        """Delete the oldest hours (every kind, oldest first) until ``incoming`` more bytes fit under max_bytes;
        never the hour of ``keep_from`` or later. Returns the bytes freed."""
        if not self.max_bytes or self.used_bytes() + incoming <= self.max_bytes:
            return 0
        freed = 0
        candidates = sorted(
            (start, path)
            for kind in ALL_KINDS
            for start, path in self.partitions(kind)
            if (partition_span(path + "/") or (0, 0))[1] <= keep_from - keep_from % HOUR_MS
        )
        for start, path in candidates:
            if self.used_bytes() + incoming <= self.max_bytes:
                break
            size = self.delete_partition(path)
            freed += size
            log.warning("history over its byte bound: oldest hour deleted", path=path, bytes=size, start_ms=start)
        return freed

    def expire(self, now_ms: int) -> int:
        """Delete what is past its age: date partitions older than the retention, and bundle minute hours older
        than ``minute_hours`` once compacted (their rollup is in bundle_hours). Returns partitions removed."""
        day_cutoff = now_ms - self.retention_days * DAY_MS
        minute_cutoff = now_ms - self.minute_hours * HOUR_MS
        removed = 0
        for kind in ALL_KINDS:
            for day in sorted({path.split("/hour=")[0] for _, path in self.partitions(kind)}):
                if (partition_span(day + "/") or (day_cutoff, day_cutoff))[1] <= day_cutoff:
                    self.delete_partition(day)
                    removed += 1
        for start, path in self.partitions("bundle_samples"):
            if start + HOUR_MS <= minute_cutoff and self._compacted(path):
                self.delete_partition(path)
                removed += 1
        return removed

    def _compacted(self, folder: str) -> bool:
        return any(i.base_name.startswith("compacted-") for i in self._walk(folder))


# ---------------------------------------------------------------------------------------------- columns


def _namespaces(bundles: pa.Array) -> pa.Array:
    """``namespace_of`` of every bundle name (what precedes the last '/'; nothing without one), in Arrow."""
    before_last = pc.list_element(pc.split_pattern(bundles, "/", max_splits=1, reverse=True), 0)
    return pc.if_else(pc.match_substring(bundles, "/"), before_last, "")


def snapshot_tables(snapshot: ClusterSnapshot) -> list[tuple[str, pa.Table]]:
    """One cycle's ``broker_samples`` and ``bundle_samples`` as Arrow tables, built column by column: one
    C-level pass per field into a numpy array, the owners as indices into the brokers' names and the
    namespaces cut in Arrow — at 100,000 bundles a dict per row, or a Python list per column, costs more
    (``benchmarks/scale.py`` times the append). Rows are in the brokers' order; compaction sorts them."""
    brokers = sorted(snapshot.brokers.items())
    loads = [load for _, load in brokers]
    taken = snapshot.taken_at
    broker_columns: dict[str, object] = {
        "time": np.full(len(brokers), taken, np.int64),
        "broker": pa.array([b for b, _ in brokers], pa.string()),
    }
    for name, (usage_col, limit_col) in zip(RESOURCE_FIELDS, _RES):
        resources = list(map(attrgetter(name), loads))
        broker_columns[usage_col] = list(map(attrgetter("usage"), resources))
        broker_columns[limit_col] = list(map(attrgetter("limit"), resources))
    for column, attribute in zip(MESSAGE_COLUMNS, _MESSAGE_FIELDS):
        broker_columns[column] = list(map(attrgetter(attribute), loads))
    broker_columns["bundle_count"] = [len(load.bundles) for load in loads]

    names: list[str] = []
    stats: list[BundleStats] = []
    counts = np.empty(len(brokers), np.int64)
    for i, (_, load) in enumerate(brokers):
        names += load.lastStats.keys()
        stats += load.lastStats.values()
        counts[i] = len(load.lastStats)
    bundle_names = pa.array(names, pa.string())
    owner_of = np.repeat(np.arange(len(brokers), dtype=np.int32), counts)
    bundle_columns: dict[str, object] = {
        "time": np.full(len(names), taken, np.int64),
        "bundle": bundle_names,
        "namespace": _namespaces(bundle_names),
        "owner": pc.cast(pa.DictionaryArray.from_arrays(owner_of, broker_columns["broker"]), pa.string()),
    }
    for column, attribute in zip(MESSAGE_COLUMNS, _MESSAGE_FIELDS):
        bundle_columns[column] = np.fromiter(map(attrgetter(attribute), stats), np.float64, len(stats))
    for column, attribute in (("topics", "topics"), ("producers", "producerCount"), ("consumers", "consumerCount")):
        bundle_columns[column] = np.fromiter(map(attrgetter(attribute), stats), np.int64, len(stats))
    return [
        ("broker_samples", pa.table(broker_columns, schema=BROKER_SCHEMA)),
        ("bundle_samples", pa.table(bundle_columns, schema=BUNDLE_SCHEMA)),
    ]
