"""Incremental aggregation equals the full recompute on the same history: averages and counts exactly (to
floating-point rounding), windows from the same histograms; and the windows' percentiles are within the
digest's stated 1% of the exact ones."""

from __future__ import annotations

import math

import pytest

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.scenario import parse_scenario
from pulsar_lb_operator.spark_jobs import digest, load_profile
from pulsar_lb_operator.spark_jobs.load_profile import ProfileOptions
from pulsar_lb_operator.store.compaction import compact
from pulsar_lb_operator.store.history import HistoryStore
from pulsar_lb_operator.strategies.snapshots import ClusterSnapshot, parse_broker_load
from tests.spark_jobs.test_load_profile import COST_SCENARIO

OPTIONS = ProfileOptions(windows_minutes=(60, 120))  # windows the test's three hours slide out of


def profile(spark, out):
    keys = {
        "bundle_averages": ("bundle",),
        "bundle_windows": ("bundle", "window_minutes"),
        "hot_bundles": ("bundle",),
        "broker_profile": ("broker",),
        "cost_model": ("broker", "resource"),
    }
    return {
        name: {
            tuple(r[k] for k in key): {c: v for c, v in r.asDict().items() if c not in key}
            for r in spark.read.parquet(f"{out}/{name}").collect()
        }
        for name, key in keys.items()
    }


def exact_percentile(values, q):
    """The sample of rank max(1, ⌈q·n⌉): the one percentile_approx and the digest name."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_incremental_runs_give_the_full_recomputes_profile(spark, tmp_path):
    store = HistoryStore(str(tmp_path / "history"))
    sim = SimulatedCluster(parse_scenario(COST_SCENARIO))

    def cycles(n):
        for _ in range(n):
            sim.advance(60)
            brokers = {b: parse_broker_load(b, sim.load_report(b)) for b in sim.active_ids()}
            store.append(ClusterSnapshot("sim", sim.now_ms, brokers))

    incremental, full = str(tmp_path / "incremental"), str(tmp_path / "full")
    cycles(70)
    first = load_profile.build_profile(spark, store.uri, incremental, OPTIONS)
    assert first["mode"] == "full" and first["bundle_samples"] == 70 * 18
    runs = []
    for minutes in (50, 15, 40):  # samples leave both windows; closed hours are compacted between runs
        cycles(minutes)
        compact(store, sim.now_ms)
        runs.append(load_profile.build_profile(spark, store.uri, incremental, OPTIONS))
        assert runs[-1]["mode"] == "incremental" and runs[-1]["bundle_samples"] == minutes * 18
    assert load_profile.build_profile(spark, store.uri, incremental, OPTIONS)["mode"] == "unchanged"
    recomputed = load_profile.build_profile(spark, store.uri, full, OPTIONS, full=True)
    assert recomputed["mode"] == "full" and recomputed["bundle_samples"] == 175 * 18
    assert runs[1]["files_read"] < recomputed["files_read"] / 2  # the 15-minute run read the recent hours only

    ours, theirs = profile(spark, incremental), profile(spark, full)
    for name in theirs:
        assert ours[name].keys() == theirs[name].keys() and (theirs[name] or name == "hot_bundles"), name
        for key, row in theirs[name].items():
            if name == "bundle_averages":
                assert ours[name][key]["samples"] == row["samples"] == 175  # counts: exactly
            # the cost models' least-squares solve magnifies the sums' rounding (added in another order)
            rel = 1e-6 if name == "cost_model" else 1e-9
            mine, centred = dict(ours[name][key]), row.pop("centred", None)
            if centred is not None:  # sums about the means: their rounding is the raw sums', as large as the largest
                largest = max(map(abs, centred), default=0.0)
                assert mine.pop("centred") == pytest.approx(centred, rel=rel, abs=rel * largest), (name, key)
            assert mine == pytest.approx(row, rel=rel, abs=1e-12), (name, key)
    windows = theirs["bundle_windows"]
    assert {w for _, w in windows} == {60, 120}

    samples = store.read("bundle_samples").to_pylist()
    latest = max(r["time"] for r in samples)
    for (bundle, minutes), row in list(windows.items())[:12]:
        inside = [r for r in samples if r["bundle"] == bundle and r["time"] > latest - minutes * 60_000]
        rates = [r["msg_rate_in"] + r["msg_rate_out"] for r in inside]
        assert row["samples"] == len(inside) == minutes
        for q, column in ((0.5, "msg_rate_p50"), (0.95, "msg_rate_p95"), (1.0, "msg_rate_max")):
            assert row[column] == pytest.approx(exact_percentile(rates, q), rel=digest.ALPHA)


@pytest.mark.parametrize("earlier_format", ["h", "d"])  # histograms as rows of their own; as a column per part
def test_a_state_of_an_earlier_version_is_recomputed_in_full_and_said(spark, tmp_path, earlier_format):
    store = HistoryStore(str(tmp_path / "history"))
    sim = SimulatedCluster(parse_scenario(COST_SCENARIO))
    for _ in range(5):
        sim.advance(60)
        brokers = {b: parse_broker_load(b, sim.load_report(b)) for b in sim.active_ids()}
        store.append(ClusterSnapshot("sim", sim.now_ms, brokers))
    # what an earlier version left: a complete generation
    earlier = tmp_path / "profile" / "_state" / f"gen-{sim.now_ms - 60_000}-0-w60_120-a0.01-{earlier_format}"
    (earlier / "histograms").mkdir(parents=True)
    (earlier / "_COMPLETE").touch()
    summary = load_profile.build_profile(spark, store.uri, str(tmp_path / "profile"), OPTIONS)
    assert summary["mode"] == "full" and "another version" in summary["why"]
    assert summary["bundle_samples"] == 5 * 18 and not earlier.exists()  # the new generation replaced it
    again = load_profile.build_profile(spark, store.uri, str(tmp_path / "profile"), OPTIONS)
    assert again["mode"] == "unchanged"
