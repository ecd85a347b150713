"""The history store: Parquet partitioned by date and hour, crash-safe writes, skipped partial files, retention."""

import pyarrow.parquet as pq

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.scenario import parse_scenario
from pulsar_lb_operator.store.history import HistoryStore
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
