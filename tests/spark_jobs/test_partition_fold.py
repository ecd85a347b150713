"""The fold's numpy arithmetic on one partition's rows, without Spark: TimeAverageMessageData's averages as
Pulsar updates them sample by sample, the windows' percentiles within the digest's 1%, and an incremental
fold (state row + new samples − leaving samples) equal to folding every sample at once."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from pulsar_lb_operator.spark_jobs import digest
from pulsar_lb_operator.spark_jobs.partition_fold import (
    AVERAGED,
    METRICS,
    NEW,
    PACKED,
    STATE,
    Plan,
    fold_table,
    leaving_table,
    state_schema,
    unpack,
)

MINUTE = 60_000
WINDOWS = (10, 30)


def samples(rng: np.random.Generator, bundles: list[str], minutes: range, kind: int = NEW) -> pa.Table:
    """One sample a minute per bundle; bundle "idle" is always 0, bundle "gone" stops at minute 20."""
    rows = [(b, m) for m in minutes for b in bundles if not (b == "gone" and m >= 20)]
    names = [b for b, _ in rows]
    idle = np.array([b == "idle" for b in names])
    columns = {m: np.where(idle, 0.0, rng.lognormal(3, 1, len(rows))) for m in AVERAGED}
    return pa.table(
        {
            "bundle": names,
            "time": np.array([m * MINUTE for _, m in rows], np.int64),
            **columns,
            "kind": np.full(len(rows), kind, np.int32),
        }
    )


def time_average(values: list[float], slots: int) -> float:
    """Pulsar's TimeAverageMessageData.update, one sample at a time."""
    average = 0.0
    for count, value in enumerate(values, 1):
        average += (value - average) / min(count, slots)
    return average


def by_bundle(table: pa.Table) -> dict[str, dict]:
    return {row["bundle"]: row for row in table.to_pylist()}


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@pytest.fixture
def history():
    rng = np.random.default_rng(7)
    return samples(rng, ["a", "b", "idle", "gone"], range(1, 1101))  # more than the long average's 1000


def leaving(gone: pa.Table, kind: int) -> pa.Table:
    """Samples that left a window as the fold receives them: their histograms per bundle (what the executors
    that read them count, ``fold._leaving``)."""
    summed = {m: pa.compute.add(gone[f"{m}_in"], gone[f"{m}_out"]) for m in METRICS}
    return leaving_table(pa.table({"bundle": gone["bundle"], **summed}), kind)


def full_plan(latest: int) -> Plan:
    return Plan(WINDOWS, tuple(latest - w * MINUTE for w in WINDOWS), (False,) * len(WINDOWS))


def test_a_full_fold_gives_pulsars_averages_and_the_windows_percentiles(history):
    latest = 1100 * MINUTE
    table = fold_table(history, full_plan(latest))
    assert table.schema == state_schema(WINDOWS)
    state = by_bundle(table)
    packed = unpack(table[PACKED].combine_chunks(), 2 * len(WINDOWS))
    idle = table["bundle"].to_pylist().index("idle")
    rows = history.to_pylist()
    for bundle in ("a", "b", "gone"):
        mine = [r for r in rows if r["bundle"] == bundle]
        assert state[bundle]["samples"] == len(mine)
        assert state[bundle]["last_time"] == mine[-1]["time"]
        for metric in AVERAGED:
            values = [r[metric] for r in mine]
            assert state[bundle][f"short_{metric}"] == pytest.approx(time_average(values, 10), rel=1e-9)
            assert state[bundle][f"long_{metric}"] == pytest.approx(time_average(values, 1000), rel=1e-9)
    for i, w in enumerate(WINDOWS):
        inside = [
            r["msg_rate_in"] + r["msg_rate_out"] for r in rows if r["bundle"] == "a" and r["time"] > latest - w * MINUTE
        ]
        assert state["a"][f"h{w}_samples"] == len(inside) == w
        for q in (0.5, 0.95):
            assert state["a"][f"h{w}_msg_rate_p{round(q * 100)}"] == pytest.approx(exact(inside, q), rel=digest.ALPHA)
        assert state["a"][f"h{w}_msg_rate_max"] == pytest.approx(max(inside), rel=digest.ALPHA)
        rate = packed.histograms[2 * i]  # what the next run starts from: every sample of "idle" at 0
        assert state["idle"][f"h{w}_msg_rate_p95"] == 0.0 and rate.zero[idle] == w and rate.length[idle] == 0
        assert state["gone"][f"h{w}_samples"] == 0 and state["gone"][f"h{w}_msg_rate_p50"] is None


def test_an_incremental_fold_equals_the_full_one(history):
    then, latest = 1085 * MINUTE, 1100 * MINUTE
    old = history.filter(pa.compute.less_equal(history["time"], then))
    state = fold_table(old, full_plan(then))
    new = history.filter(pa.compute.greater(history["time"], then))
    plan = Plan(WINDOWS, tuple(latest - w * MINUTE for w in WINDOWS), (True, True))
    parts = [new]
    for i, w in enumerate(WINDOWS):  # the samples that left window i since the last run
        time = history["time"]
        left = pa.compute.and_(
            pa.compute.greater(time, then - w * MINUTE), pa.compute.less_equal(time, latest - w * MINUTE)
        )
        gone = history.filter(left)
        half = gone.num_rows // 2  # read by two partitions: a bundle's histograms in two rows
        parts += [leaving(gone.slice(0, half), plan.leaving(i)), leaving(gone.slice(half), plan.leaving(i))]
    own = state.rename_columns(["time" if c == "last_time" else c for c in state.column_names])
    parts.append(own.append_column("kind", pa.array(np.full(own.num_rows, STATE, np.int32))))
    incremental = by_bundle(fold_table(pa.concat_tables(parts, promote_options="default"), plan))
    full = by_bundle(fold_table(history, full_plan(latest)))
    for rows in (incremental, full):  # what the next run starts from: counts and histograms exact, averages rounded
        for row in rows.values():
            packed = unpack(pa.array([row.pop(PACKED)]), 2 * len(WINDOWS))
            row["packed_counts"] = packed.fixed[0, :2].tolist()
            row["packed_averages"] = packed.fixed[0, 2:].view(np.float64).tolist()
            row["packed_histograms"] = [(h.zero.tolist(), h.low.tolist(), h.counts.tolist()) for h in packed.histograms]
    assert set(incremental) == set(full) == {"a", "b", "idle", "gone"}  # "gone" kept: no new sample, still in the state
    for bundle, row in full.items():
        for column, value in row.items():
            if isinstance(value, float) or column == "packed_averages":
                assert incremental[bundle][column] == pytest.approx(value, rel=1e-9), (bundle, column)
            else:
                assert incremental[bundle][column] == value, (bundle, column)


def test_a_partition_of_leaving_samples_only_writes_no_bundle(history):
    plan = Plan(WINDOWS, tuple(1100 * MINUTE - w * MINUTE for w in WINDOWS), (True, True))
    out = fold_table(leaving(history, plan.leaving(0)), plan)
    assert out.num_rows == 0 and out.schema == state_schema(WINDOWS)
