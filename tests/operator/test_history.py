"""The history store: Parquet partitioned by date and hour, crash-safe writes, skipped partial files, retention,
the byte bound and a full volume."""

import contextlib
import dataclasses
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario, parse_scenario
from pulsar_lb_operator.store import history
from pulsar_lb_operator.store.history import BROKER_SCHEMA, BUNDLE_SCHEMA, HistoryStore, snapshot_tables
from pulsar_lb_operator.strategies import LoadBalancerConfig
from pulsar_lb_operator.strategies.bundles import namespace_of
from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot, parse_broker_load
from tests.builders import SMALL_SCENARIO as SMALL


def snapshots(count, step_s=60):
    sim = SimulatedCluster(parse_scenario(SMALL))
    out = []
    for _ in range(count):
        brokers = {b: parse_broker_load(b, sim.load_report(b)) for b in sim.active_ids()}
        out.append(ClusterSnapshot("sim", sim.now_ms, brokers))
        sim.advance(step_s)
    return out


def test_append_and_read_back_partitioned_by_date_and_hour(tmp_path):
    store = HistoryStore(str(tmp_path / "history"))
    snaps = snapshots(3, step_s=1800)
    for snap in snaps:
        store.append(snap)
    brokers = store.read("broker_samples").to_pylist()
    bundles = store.read("bundle_samples").to_pylist()
    assert len(brokers) == 3 * 3 and {r["time"] for r in brokers} == {s.taken_at for s in snaps}
    assert len(bundles) == 3 * 8  # every bundle once per cycle, with its owner
    first = snaps[0]
    row = next(r for r in bundles if r["time"] == first.taken_at and r["owner"] == sorted(first.brokers)[0])
    stats = first.brokers[row["owner"]].lastStats[row["bundle"]]
    assert (row["msg_rate_in"], row["topics"], row["namespace"]) == (stats.msgRateIn, stats.topics, "t/ns")
    cpu = next(r for r in brokers if r["time"] == first.taken_at)
    assert cpu["cpu_limit"] == 400 and cpu["cpu_usage"] > 0
    paths = store.files("broker_samples")
    assert any("/date=2025-06-15/hour=15/" in p for p in paths) and any("/hour=16/" in p for p in paths)


def test_a_crash_mid_write_and_a_corrupt_file_are_skipped(tmp_path):
    store = HistoryStore(str(tmp_path))
    snap = snapshots(1)[0]
    store.append(snap)
    folder = (tmp_path / store.files("broker_samples")[0]).parent
    (folder / ".part-123.parquet.tmp").write_bytes(b"PAR1 half written")  # a crash before the rename
    (folder / "part-999.parquet").write_bytes(b"PAR1 not really parquet")  # damaged on disk
    rows = store.read("broker_samples").to_pylist()
    assert len(rows) == 3 and {r["time"] for r in rows} == {snap.taken_at}


def test_retention_deletes_old_date_partitions(tmp_path):
    store = HistoryStore(str(tmp_path), retention_days=1)
    snap = snapshots(1)[0]
    store.append(snap)
    assert store.expire(snap.taken_at + 3_600_000) == 0
    assert store.expire(snap.taken_at + 3 * 86_400_000) == 2  # one date partition of each kind
    assert store.read("bundle_samples").num_rows == 0


def test_files_are_plain_parquet_readable_by_other_tools(tmp_path):
    store = HistoryStore(str(tmp_path))
    store.append(snapshots(1)[0])
    table = pq.read_table(store.files("bundle_samples")[0])
    assert {"time", "bundle", "owner", "msg_rate_in", "topics", "producers", "consumers"} <= set(table.column_names)


def test_appends_are_built_column_by_column_with_the_rows_they_always_had(tmp_path):
    snap = snapshots(1)[0]
    tables = dict(snapshot_tables(snap))
    assert tables["bundle_samples"].schema == BUNDLE_SCHEMA and tables["broker_samples"].schema == BROKER_SCHEMA
    rows = tables["bundle_samples"].to_pylist()
    assert len(rows) == sum(len(load.lastStats) for load in snap.brokers.values())
    for row in rows:
        stats = snap.brokers[row["owner"]].lastStats[row["bundle"]]
        assert row == {
            "time": snap.taken_at,
            "bundle": row["bundle"],
            "namespace": namespace_of(row["bundle"]),
            "owner": row["owner"],
            "msg_rate_in": stats.msgRateIn,
            "msg_rate_out": stats.msgRateOut,
            "msg_throughput_in": stats.msgThroughputIn,
            "msg_throughput_out": stats.msgThroughputOut,
            "topics": stats.topics,
            "producers": stats.producerCount,
            "consumers": stats.consumerCount,
        }
    assert [r["bundle"] for r in rows if r["owner"] == rows[0]["owner"]] == sorted(
        snap.brokers[rows[0]["owner"]].lastStats
    )


def test_a_byte_bound_deletes_the_oldest_hours_first(tmp_path):
    unbounded = HistoryStore(str(tmp_path / "free"))
    for snap in snapshots(2, step_s=1200):
        unbounded.append(snap)
    per_hour = unbounded.used_bytes()  # about what two cycles write
    store = HistoryStore(str(tmp_path / "bounded"), max_bytes=3 * per_hour)
    snaps = snapshots(24, step_s=1200)  # 8 hours, 3 cycles an hour
    freed = 0
    for snap in snaps:
        appended = store.append(snap)
        assert appended.skipped is None and appended.rows > 0
        freed += appended.freed_bytes
        assert store.used_bytes() <= store.max_bytes
    assert freed > 0 and store.used_bytes() == HistoryStore(str(tmp_path / "bounded")).used_bytes()
    times = sorted({r["time"] for r in store.read("broker_samples").to_pylist()})
    assert times[-1] == snaps[-1].taken_at  # the newest stay ...
    assert times[0] > snaps[0].taken_at  # ... and the oldest went
    kept = [s.taken_at for s in snaps if s.taken_at >= times[0]]
    assert times == kept  # oldest first: no hole in what is left


@pytest.fixture
def small_volume(tmp_path):
    """A real 1 MiB filesystem (tmpfs), as a too-small history volume is."""
    mount = tmp_path / "volume"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_volume_skips_the_append_counts_it_and_the_cycle_goes_on(small_volume, tmp_path):
    scenario = load_scenario("demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate)) as sim:
        settings = OperatorSettings(
            dryRun=True,
            metricsPort=0,
            stateFile=str(tmp_path / "state.json"),
            historyUri=str(small_volume / "history"),
            historyMaxMegabytes=0.08,
            profileUri="",
        )
        daemon = Daemon(
            settings, LoadBalancerConfig(), AdminClient(sim.admin_url), "sim", clock_ms=lambda: sim.cluster.now_ms
        )

        def cycle():
            result = daemon.run_once()
            sim.cluster.advance(15 * 60)
            return result

        first = cycle()
        for _ in range(20):  # five hours: more than 0.08 MiB of samples
            assert cycle() is not None
        history = daemon.history
        assert history.used_bytes() <= history.max_bytes
        times = {r["time"] for r in history.read("broker_samples").to_pylist()}
        assert first.snapshot.taken_at not in times and max(times) == sim.cluster.now_ms - 15 * 60_000
        assert daemon.metrics.history_skipped.labels("disk_full")._value.get() == 0

        # something else fills the volume: the next append has no room at all (and, here, nothing older of its
        # own to delete: a second instance's history, started on the full volume)
        filler = small_volume / "filler"
        with filler.open("wb") as out, contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 65536)
        other = Daemon(
            dataclasses.replace(settings, historyUri=str(small_volume / "other"), historyMaxMegabytes=0),
            LoadBalancerConfig(),
            AdminClient(sim.admin_url),
            "sim",
            clock_ms=lambda: sim.cluster.now_ms,
        )
        result = other.run_once()
        assert result is not None and result.plan is not None  # the cycle went on
        skipped = other.metrics.history_skipped.labels("disk_full")
        assert skipped._value.get() == 1  # pulsar_lb_operator_history_appends_skipped_total{reason="disk_full"}
        assert other.history.read("broker_samples").num_rows == 0  # nothing half written
        assert not list(small_volume.rglob(".*.tmp"))
        filler.unlink()
        assert other.run_once() is not None and other.history.read("broker_samples").num_rows == 4
        assert skipped._value.get() == 1


def test_namespaces_are_cut_as_namespace_of_cuts_them():
    names = ["tenant/ns/0x00000000_0x40000000", "tenant/ns/sub/0x0_0x1", "no-slash", ""]
    assert history._namespaces(pa.array(names)).to_pylist() == [namespace_of(n) for n in names]
