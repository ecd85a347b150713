"""The load profile is a file anyone can write: what the planner cannot use is left out, said once, never a crash.

Each case writes the three Parquet tables as the Spark job does (``spark_jobs/load_profile.py``) with one thing
wrong, and reads them with ``read_profile``, as each cycle of the daemon does."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from structlog.testing import capture_logs

from pulsar_lb_operator.store.profile import read_profile

GOOD_MODEL = {
    "broker": "b1",
    "resource": "cpu",
    "intercept": 5.0,
    "per_msg_rate": 0.002,
    "per_byte_in": 2e-7,
    "per_byte_out": 1e-7,
    "r2": 0.99,
    "samples": 48,
    "centred": [float(v) for v in range(9)],
}
GOOD_AVERAGE = {
    "bundle": "t/ns/0x00000000_0x40000000",
    "samples": 100,
    "long_msg_rate_in": 10.0,
    "long_msg_rate_out": 20.0,
    "long_msg_throughput_in": 1000.0,
    "long_msg_throughput_out": 2000.0,
}
GOOD_HOT = {"bundle": "t/ns/0x00000000_0x40000000", "hot_share": 0.9, "boundary": 0x20000000}


def write(root: Path, models=(GOOD_MODEL,), averages=(GOOD_AVERAGE,), hot=(GOOD_HOT,)) -> str:
    root.mkdir()
    for name, rows in (("cost_model", models), ("bundle_averages", averages), ("hot_bundles", hot)):
        pq.write_table(pa.Table.from_pylist(list(rows)), root / name)
    return str(root)


def test_a_good_profile_reads_whole(tmp_path):
    profile = read_profile(write(tmp_path / "p"))
    assert profile is not None
    assert profile.cost_models[("b1", "cpu")].centred == tuple(float(v) for v in range(9))
    assert set(profile.long_term) == set(profile.hot) == {GOOD_AVERAGE["bundle"]}


def test_a_row_with_a_null_or_nan_is_left_out_with_a_warning_and_the_rest_is_used(tmp_path):
    models = [
        GOOD_MODEL,
        {**GOOD_MODEL, "broker": "b2", "intercept": None},
        {**GOOD_MODEL, "broker": "b3", "r2": math.nan},
    ]
    averages = [GOOD_AVERAGE, {**GOOD_AVERAGE, "bundle": "t/ns/0x40000000_0x80000000", "long_msg_rate_out": None}]
    with capture_logs() as logs:
        profile = read_profile(write(tmp_path / "p", models=models, averages=averages))
    assert profile is not None
    assert set(profile.cost_models) == {("b1", "cpu")}
    assert set(profile.long_term) == {GOOD_AVERAGE["bundle"]}
    left_out = {e["table"]: e["rows"] for e in logs if e["log_level"] == "warning"}
    assert left_out == {"cost_model": 2, "bundle_averages": 1}


def test_sums_with_a_null_in_them_are_not_pooled_but_the_fit_is_kept(tmp_path):
    models = [{**GOOD_MODEL, "centred": [1.0, None, *([0.0] * 7)]}, {**GOOD_MODEL, "broker": "b2", "centred": [1.0]}]
    profile = read_profile(write(tmp_path / "p", models=models))
    assert profile is not None
    assert [profile.cost_models[(b, "cpu")].centred for b in ("b1", "b2")] == [(), ()]
    assert profile.cost_models[("b1", "cpu")].intercept == 5.0


def test_a_table_without_a_column_the_planner_needs_means_no_profile_and_says_which(tmp_path):
    averages = [{k: v for k, v in GOOD_AVERAGE.items() if k != "long_msg_rate_out"}]
    with capture_logs() as logs:
        assert read_profile(write(tmp_path / "p", averages=averages)) is None
    assert any("bundle_averages has no column long_msg_rate_out" in e.get("reason", "") for e in logs)


def test_a_file_that_is_not_parquet_means_no_profile(tmp_path):
    root = Path(write(tmp_path / "p"))
    (root / "cost_model").write_bytes(b"\x00garbage, not parquet")
    with capture_logs() as logs:
        assert read_profile(str(root)) is None
    assert [e["event"] for e in logs] == ["no load profile; planning on the latest snapshot only"]
