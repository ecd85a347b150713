"""Compaction: a closed hour's cycle files become one sorted file and a per-bundle rollup, and a reader never
sees both the cycle files and the compacted file (nor neither)."""

import os

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.store.compaction import compact
from pulsar_lb_operator.store.history import HistoryStore
from tests.operator.test_history import snapshots

HOUR = 3_600_000


@pytest.fixture
def history(tmp_path):
    """Three hours of a small cluster, a cycle every 10 minutes (18 cycles, 36 files)."""
    store = HistoryStore(str(tmp_path / "history"))
    snaps = snapshots(18, step_s=600)
    for snap in snaps:
        store.append(snap)
    return store, snaps


def rows(store, kind):
    table = store.read(kind)
    key = "bundle" if kind == "bundle_samples" else "broker"
    return sorted(zip(table["time"].to_pylist(), table[key].to_pylist(), table["msg_rate_in"].to_pylist()))


def test_closed_hours_become_one_sorted_file_each_and_read_the_same(history):
    store, snaps = history
    before = {kind: rows(store, kind) for kind in ("broker_samples", "bundle_samples")}
    now = snaps[-1].taken_at + 60_000  # the last hour is still open
    done = compact(store, now)
    open_hour = now - now % HOUR
    closed = {start for start, _ in store.partitions("bundle_samples") if start + HOUR <= open_hour}
    assert done.hours == 2 * len(closed) and len(closed) >= 2
    for kind in ("broker_samples", "bundle_samples"):
        assert rows(store, kind) == before[kind]  # nothing lost, nothing twice
        for start, folder in store.partitions(kind):
            shown = store.files(kind)
            in_folder = [p for p in shown if p.startswith(folder + "/")]
            if start in closed:
                [only] = in_folder
                table = pq.read_table(only)
                key = "bundle" if kind == "bundle_samples" else "broker"
                order = list(zip(table["time"].to_pylist(), table[key].to_pylist()))
                assert order == sorted(order)  # by time, then bundle (broker): a slice's row groups prune
            else:
                assert len(in_folder) > 1 and not any("compacted-" in p for p in in_folder)  # the open hour
    assert compact(store, now).hours == 0  # done once


def test_readers_see_the_compacted_file_or_the_cycle_files_never_both(history):
    store, snaps = history
    before = rows(store, "bundle_samples")
    now = snaps[-1].taken_at + 2 * HOUR  # every hour closed
    compact(store, now, linger_ms=10 * 60_000)
    # just after the rename: the inputs are still on disk (readers that listed them earlier still read them)
    leftover = [
        n for _, folder in store.partitions("bundle_samples") for n in os.listdir(folder) if n.startswith("part-")
    ]
    assert leftover, "the inputs linger for readers that listed them before the rename"
    assert rows(store, "bundle_samples") == before
    # a late cycle file, stamped after the compacted ones, counts beside them
    late = snaps[-1].taken_at + 1
    folder = next(f for s, f in store.partitions("bundle_samples") if s <= snaps[-1].taken_at < s + HOUR)
    table = pq.read_table(store.files("bundle_samples")[-1]).slice(0, 1)
    pq.write_table(table, f"{folder}/part-{late}-late.parquet")
    with_late = rows(store, "bundle_samples")
    assert len(with_late) == len(before) + 1
    # past the linger, the inputs go, and what readers see does not change
    assert compact(store, now, linger_ms=0).deleted >= len(leftover)  # the late file's hour compacted again
    assert compact(store, now, linger_ms=0).hours == 0  # ... and its inputs go at the next pass
    on_disk = sorted(f"{folder}/{n}" for _, folder in store.partitions("bundle_samples") for n in os.listdir(folder))
    assert on_disk == sorted(store.files("bundle_samples"))  # only what readers take is left
    assert rows(store, "bundle_samples") == with_late


def test_each_hour_is_rolled_up_per_bundle_into_one_file_a_day(history):
    store, snaps = history
    samples = store.read("bundle_samples")
    compact(store, snaps[-1].taken_at + 2 * HOUR)
    assert len(store.partitions("bundle_hours")) == 1 and len(store.files("bundle_hours")) == 1
    rollup = store.read("bundle_hours")
    assert pc.sum(rollup["samples"]).as_py() == samples.num_rows
    for row in rollup.to_pylist()[:5]:
        inside = [
            r
            for r in samples.to_pylist()
            if r["bundle"] == row["bundle"] and row["time"] <= r["time"] < row["time"] + HOUR
        ]
        assert row["samples"] == len(inside) and row["last_time"] == max(r["time"] for r in inside)
        assert row["msg_rate_in_mean"] == pytest.approx(sum(r["msg_rate_in"] for r in inside) / len(inside))
        assert row["msg_rate_in_max"] == max(r["msg_rate_in"] for r in inside)
        assert row["owner"] == max(inside, key=lambda r: r["time"])["owner"]


def test_minute_samples_go_after_minute_hours_once_rolled_up(history):
    store, snaps = history
    store.minute_hours = 2
    now = snaps[-1].taken_at + 2 * HOUR
    store.expire(now)
    assert len(store.partitions("bundle_samples")) == 3  # not compacted: kept
    compact(store, now)
    store.expire(now)
    kept = store.partitions("bundle_samples")
    assert kept and all(start + HOUR > now - 2 * HOUR for start, _ in kept)
    assert len(store.partitions("broker_samples")) == 3  # broker samples stay for the retention
    assert pc.sum(store.read("bundle_hours")["samples"]).as_py() == 18 * 8  # the hours live on, rolled up


def test_operator_compact(history, capsys):
    store, _ = history
    assert cli.main(["compact", "--history", store.uri]) == 0
    out = capsys.readouterr().out
    assert '"hours_compacted": 6' in out and '"bytes_after"' in out
    assert cli.main(["compact", "--history", store.uri + "-missing"]) == 2
    assert "no history store there" in capsys.readouterr().err
