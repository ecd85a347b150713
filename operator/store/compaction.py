"""Compaction of the history store: each closed hour's cycle files become one file, and its bundle samples a
per-bundle rollup.

A cycle writes one small file per dataset (``history.py``): 2,880 a day, each opened by every
aggregation. Once an hour has closed (``grace_ms`` after its end, so a late cycle's file is in), its
files are read, sorted by time and bundle (broker) — so a reader of a slice of the hour (an incremental
aggregation takes the 15 minutes that left each window) skips the other row groups by their min/max
statistics — and written as ``compacted-<T>.parquet`` (T: the newest input's stamp) under a
hidden name, then renamed. That rename is the one step readers notice: by :func:`history.visible`, a
partition with a compacted file shows it and only the cycle files stamped after T, so a reader sees the
inputs or the compacted file, never both, never neither. The inputs are deleted ``linger_ms`` later, so
a job that listed them just before the rename still finds them while it reads.

The same pass rolls the hour's bundle samples up — per bundle: samples, first and last time, mean and max
of each rate and throughput, the last owner, the most topics, producers and consumers — into the day's
``bundle_hours`` file, which outlives the minute samples (``HistoryStore.minute_hours``). One file per
dataset and hour, one rollup per day: 49 files for a closed day.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import structlog

from pulsar_lb_operator.spark_jobs.layout import DAY_MS, HOUR_MS, stamp_of, visible
from pulsar_lb_operator.store.history import ALL_KINDS, BUNDLE_HOURS_SCHEMA, KINDS, MESSAGE_COLUMNS, HistoryStore

log = structlog.get_logger(__name__)

KEYS = {"broker_samples": "broker", "bundle_samples": "bundle", "bundle_hours": "bundle"}
ROW_GROUP = 262_144  # rows; ~25 row groups for an hour of 100,000 bundles, each ~2.6 minutes of samples


@dataclass(frozen=True)
class Compacted:
    hours: int = 0  # hour partitions compacted in this pass
    files_in: int = 0
    rows: int = 0
    deleted: int = 0  # superseded files removed (inputs of an earlier pass, past linger_ms)


def compact(store: HistoryStore, now_ms: int, grace_ms: int = 5 * 60_000, linger_ms: int = 10 * 60_000) -> Compacted:
    """Compact every closed hour not yet compacted; delete the files earlier passes superseded."""
    hours = files_in = rows = deleted = 0
    for kind in KINDS:
        for start, folder in store.partitions(kind):
            if start + HOUR_MS + grace_ms > now_ms:
                continue
            deleted += _drop_superseded(store, folder, linger_ms)
            names = _names(store, folder)
            inputs = visible(names)
            if not inputs or (len(inputs) == 1 and inputs[0].startswith("compacted-")):
                continue
            table = _read(store, folder, inputs, kind)
            if table is None:
                continue
            table = table.sort_by([("time", "ascending"), (KEYS[kind], "ascending")])
            upto = max(stamp_of(n) for n in inputs)
            store.write_atomically(folder, f"compacted-{upto}.parquet", table, ROW_GROUP)
            if kind == "bundle_samples":
                _roll_up(store, start, table)
            hours += 1
            files_in += len(inputs)
            rows += table.num_rows
    for _, folder in store.partitions("bundle_hours"):
        deleted += _drop_superseded(store, folder, linger_ms)
    store.forget_size()
    return Compacted(hours, files_in, rows, deleted)


def _names(store: HistoryStore, folder: str) -> list[str]:
    selector = pafs.FileSelector(folder, allow_not_found=True)
    return [i.base_name for i in store.fs.get_file_info(selector) if i.type == pafs.FileType.File]


def _read(store: HistoryStore, folder: str, names: list[str], kind: str) -> pa.Table | None:
    tables = []
    for name in names:
        try:
            tables.append(pq.read_table(f"{folder}/{name}", filesystem=store.fs, schema=ALL_KINDS[kind]))
        except (pa.ArrowInvalid, OSError) as exc:  # a damaged file stays out of the compacted one (readers skip it too)
            log.warning("history file left out of compaction", path=f"{folder}/{name}", reason=str(exc).splitlines()[0])
    return pa.concat_tables(tables) if tables else None


def _drop_superseded(store: HistoryStore, folder: str, linger_ms: int) -> int:
    """Delete the files a compacted file replaced, once it has been in place for ``linger_ms``."""
    infos = store.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    names = [i.base_name for i in infos if i.type == pafs.FileType.File]
    shown = set(visible(names))
    compacted = [i for i in infos if i.base_name.startswith("compacted-") and i.base_name in shown]
    if not compacted or (time.time() * 1000 - compacted[0].mtime_ns / 1e6) < linger_ms:
        return 0
    stale = [n for n in names if n not in shown and n.endswith(".parquet") and not n.startswith((".", "_"))]
    for name in stale:
        try:
            store.fs.delete_file(f"{folder}/{name}")
        except OSError:
            continue
    return len(stale)


def roll_up_hour(hour_start: int, samples: pa.Table) -> pa.Table:
    """Per bundle, one hour of minute samples (in time order) as a ``bundle_hours`` row."""
    aggregations = [
        ("namespace", "first"),
        ("owner", "last"),
        ("time", "count"),
        ("time", "min"),
        ("time", "max"),
        *((c, stat) for c in MESSAGE_COLUMNS for stat in ("mean", "max")),
        ("topics", "max"),
        ("producers", "max"),
        ("consumers", "max"),
    ]
    grouped = samples.group_by("bundle", use_threads=False).aggregate(aggregations)
    columns = {
        "time": pa.array([hour_start] * grouped.num_rows, pa.int64()),
        "bundle": grouped["bundle"],
        "namespace": grouped["namespace_first"],
        "owner": grouped["owner_last"],
        "samples": pc.cast(grouped["time_count"], pa.int32()),
        "first_time": grouped["time_min"],
        "last_time": grouped["time_max"],
        **{f"{c}_{stat}": grouped[f"{c}_{stat}"] for c in MESSAGE_COLUMNS for stat in ("mean", "max")},
        "topics_max": grouped["topics_max"],
        "producers_max": grouped["producers_max"],
        "consumers_max": grouped["consumers_max"],
    }
    return pa.table(columns, schema=BUNDLE_HOURS_SCHEMA)


def _roll_up(store: HistoryStore, hour_start: int, samples: pa.Table) -> None:
    """Put one hour's rollup into its day's ``bundle_hours`` file (rewritten whole: a re-run replaces the hour)."""
    rollup = roll_up_hour(hour_start, samples)
    day_start = hour_start - hour_start % DAY_MS
    folder = f"{store.root}/bundle_hours/date={time.strftime('%Y-%m-%d', time.gmtime(day_start / 1000))}"
    store.fs.create_dir(folder, recursive=True)
    current = visible(_names(store, folder))
    existing = _read(store, folder, current, "bundle_hours") if current else None
    if existing is not None:
        rollup = pa.concat_tables([existing.filter(pc.not_equal(existing["time"], hour_start)), rollup])
    rollup = rollup.sort_by([("bundle", "ascending"), ("time", "ascending")])
    # newer than the file it replaces, even when an hour is rolled up again
    upto = max(int(pc.max(rollup["last_time"]).as_py()), max((stamp_of(n) for n in current), default=-1) + 1)
    store.write_atomically(folder, f"compacted-{upto}.parquet", rollup, ROW_GROUP)
