"""The load-profile job on real local Spark: hand-checked aggregates, cost-model recovery, hot bundles."""

import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from pyspark.sql import Row

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.scenario import parse_scenario
from pulsar_lb_operator.spark_jobs import load_profile
from pulsar_lb_operator.spark_jobs.load_profile import ProfileError, ProfileOptions
from pulsar_lb_operator.spark_jobs.session import JobGroup
from pulsar_lb_operator.spark_jobs.sources import HistoryFiles
from pulsar_lb_operator.store.history import HistoryStore
from pulsar_lb_operator.strategies.averages import MessageAverage
from pulsar_lb_operator.strategies.snapshots import BundleStats, ClusterSnapshot, parse_broker_load
from tests.builders import operator_script


def bundle_rows(bundle, rates, start=0, step_ms=60_000, **extra):
    return [
        Row(
            time=start + i * step_ms,
            bundle=bundle,
            owner="b:8080",
            msg_rate_in=float(r),
            msg_rate_out=0.0,
            msg_throughput_in=float(r) * 1000,
            msg_throughput_out=0.0,
            topics=extra.get("topics", 5),
            producers=1,
            consumers=1,
        )
        for i, r in enumerate(rates)
    ]


def test_short_and_long_averages_follow_pulsars_time_average_message_data(spark):
    rates = [((i * 37) % 101) + 3.5 for i in range(1, 26)]  # 25 samples: past the 10-sample window
    frame = spark.createDataFrame(bundle_rows("t/ns/0x0_0x1", rates))
    [row] = load_profile.bundle_averages(frame).collect()
    short, long = MessageAverage(10), MessageAverage(1000)
    for rate in rates:  # the reference: the strategies' own sequential update
        short = short.update(BundleStats(msgRateIn=rate, msgThroughputIn=rate * 1000))
        long = long.update(BundleStats(msgRateIn=rate, msgThroughputIn=rate * 1000))
    assert row.samples == 25
    assert row.short_msg_rate_in == pytest.approx(short.msgRateIn, rel=1e-9)
    assert row.long_msg_rate_in == pytest.approx(sum(rates) / 25, rel=1e-9) == pytest.approx(long.msgRateIn)
    assert row.short_msg_throughput_in == pytest.approx(short.msgThroughputIn, rel=1e-9)


def test_window_percentiles_and_max_within_the_digests_one_percent(spark):
    frame = spark.createDataFrame(bundle_rows("t/ns/0x0_0x1", range(1, 101)))
    rows = {r.window_minutes: r for r in load_profile.bundle_windows(frame, (60, 1440)).collect()}
    day, hour = rows[1440], rows[60]
    assert day.samples == 100 and hour.samples == 60  # samples 41..100 in the last hour: counts are exact
    within = lambda exact: pytest.approx(exact, rel=0.01)  # noqa: E731
    assert (day.msg_rate_p50, day.msg_rate_p95, day.msg_rate_max) == (within(50), within(95), within(100))
    assert (hour.msg_rate_p50, hour.msg_rate_max) == (within(70), within(100))


def test_hot_bundles_flags_sustained_hotness_not_a_single_spike(spark):
    options = ProfileOptions(max_msg_rate=30000, hot_share=0.8, hot_window_minutes=30)
    sustained = bundle_rows("t/ns/0x00000000_0x80000000", [35000] * 28 + [20000] * 2)
    spike = bundle_rows("t/ns/0x80000000_0xffffffff", [10000] * 29 + [90000])
    single_topic = bundle_rows("t/ns2/0x00000000_0xffffffff", [50000] * 30, topics=1)
    frame = spark.createDataFrame(sustained + spike + single_topic)
    [hot] = load_profile.hot_bundles(frame, options).collect()
    assert hot.bundle == "t/ns/0x00000000_0x80000000" and hot.hot_share == pytest.approx(28 / 30, abs=0.04)
    assert hot.algorithm == "range_equally_divide" and hot.boundary == 0x40000000


COST_SCENARIO = {
    "seed": 5,
    "brokers": [
        {"name": "small", "cores": 4, "cost_per_msg": 0.010, "cost_per_mib": 2.0, "background_cpu": 0.05, "jitter": 0},
        {"name": "big", "cores": 16, "cost_per_msg": 0.006, "cost_per_mib": 1.0, "background_cpu": 0.05, "jitter": 0},
        {"name": "shared", "cores": 8, "cost_per_msg": 0.008, "cost_per_mib": 1.5, "background_cpu": 0.40, "jitter": 0},
    ],
    "namespaces": [
        {
            "name": "t/small-msgs",
            "bundles": 6,
            "topics": 60,
            "rate": 120,
            "msg_size": 200,
            "fanout": 3,
            "pattern": {"type": "daily", "amplitude": 0.6, "period_minutes": 97},
        },
        {
            "name": "t/big-msgs",
            "bundles": 6,
            "topics": 60,
            "rate": 40,
            "msg_size": 8000,
            "fanout": 1,
            "pattern": {"type": "daily", "amplitude": 0.6, "period_minutes": 61, "phase": 0.3},
        },
        {
            "name": "t/fan-in",
            "bundles": 6,
            "topics": 60,
            "rate": 60,
            "msg_size": 2000,
            "fanout": 0.2,
            "pattern": {"type": "jitter", "amplitude": 0.5},
        },
    ],
    "config": {"loadBalancerSheddingEnabled": False, "loadBalancerAutoBundleSplitEnabled": False},
}


@pytest.fixture(scope="module")
def cost_history(tmp_path_factory):
    """Six simulated hours of a heterogeneous cluster, one sample per minute."""
    root = tmp_path_factory.mktemp("history")
    store = HistoryStore(str(root))
    sim = SimulatedCluster(parse_scenario(COST_SCENARIO))
    for _ in range(360):
        sim.advance(60)
        brokers = {b: parse_broker_load(b, sim.load_report(b)) for b in sim.active_ids()}
        store.append(ClusterSnapshot("sim", sim.now_ms, brokers))
    return str(root), sim


def test_cost_models_recover_the_simulators_true_costs_and_find_the_background(spark, cost_history, tmp_path):
    history, sim = cost_history
    out = str(tmp_path / "profile")
    summary = load_profile.build_profile(spark, history, out, ProfileOptions())
    assert summary["broker_samples"] == 360 * 3
    models = {(r.broker, r.resource): r for r in spark.read.parquet(f"{out}/cost_model").collect()}
    for spec in COST_SCENARIO["brokers"]:
        broker = sim.by_name(spec["name"]).id
        cpu = models[(broker, "cpu")]
        # usage% = background·100 + (rate·cost_per_msg + MiB/s·cost_per_mib) / cores
        assert cpu.per_msg_rate == pytest.approx(spec["cost_per_msg"] / spec["cores"], rel=0.10)
        per_byte = spec["cost_per_mib"] / (1024 * 1024) / spec["cores"]
        assert cpu.per_byte_in == pytest.approx(per_byte, rel=0.10)
        assert cpu.per_byte_out == pytest.approx(per_byte, rel=0.10)
        assert cpu.intercept == pytest.approx(spec["background_cpu"] * 100, abs=2.0)
        assert cpu.r2 > 0.99 and cpu.samples == 360
    intercepts = {
        spec["name"]: models[(sim.by_name(spec["name"]).id, "cpu")].intercept for spec in COST_SCENARIO["brokers"]
    }
    assert max(intercepts, key=intercepts.get) == "shared"  # the broker with another process on its machine
    profile = spark.read.parquet(f"{out}/broker_profile").collect()
    assert {r.broker for r in profile} == set(sim.active_ids()) and all(r.usage_p95 >= r.usage_mean for r in profile)


def test_runs_in_one_long_lived_session_leave_nothing_cached_in_it(spark, cost_history, tmp_path):
    history, _ = cost_history
    cache = spark._jsparkSession.sharedState().cacheManager()
    for _ in range(2):  # as the daemon runs the job, one run after another in the session it keeps
        summary = load_profile.build_profile(spark, history, str(tmp_path / "profile"), ProfileOptions(), full=True)
        assert summary["mode"] == "full"
        assert cache.isEmpty()  # each run's hot bundles were cached while it ran; none outlives it


def test_the_newest_sample_time_comes_from_the_newest_file_names(spark, cost_history, tmp_path):
    history, sim = cost_history
    files = HistoryFiles(spark, history)
    assert len({f.split("/hour=")[0] + f.split("/hour=")[1][:2] for f in files.files("bundle_samples")}) >= 6
    assert load_profile.newest_time(files, "bundle_samples") == sim.now_ms
    assert not files.read_paths  # from the names: no file read, no Spark job
    # a file of another writer (no stamp in its name) in the newest hour: that hour is read, and only it
    files = HistoryFiles(spark, str(shutil.copytree(history, tmp_path / "history")))
    newest = files.files("bundle_samples")[-1]
    newest_hour = newest.rsplit("/", 1)[0]
    shutil.move(newest, f"{newest_hour}/theirs.parquet")
    assert load_profile.newest_time(files, "bundle_samples") == sim.now_ms
    assert files.read_paths and all(p.startswith(newest_hour) for p in files.read_paths)


def test_a_cancel_stops_the_parts_written_beside_the_fold_and_their_error_is_the_runs(
    spark, cost_history, tmp_path, monkeypatch
):
    """The broker profile and the hot bundles are written by a thread of their own beside the fold: a cancel
    stops their jobs too (within seconds, nothing left running, no state committed), and what fails there
    fails the run."""
    history, _ = cost_history

    def endless(bundles, options, latest=None):
        return spark.range(0, 10**13, numPartitions=2).selectExpr("sum(id % 7) as n")  # hours on two cores

    monkeypatch.setattr(load_profile, "hot_bundles", endless)
    group, steps, failed = JobGroup(spark), [], []

    def run() -> None:
        with group:
            try:
                load_profile.build_profile(
                    spark,
                    history,
                    str(tmp_path / "cancelled"),
                    ProfileOptions(),
                    lambda m: (steps.append(m), group.check()),
                )
            except BaseException as exc:  # the test looks at it
                failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 120
    while not (any(m.startswith("folding") for m in steps) and tracker.getActiveJobsIds()):
        assert time.monotonic() < deadline, steps
        time.sleep(0.05)
    time.sleep(2.0)  # the endless job well into its tasks
    stopped = time.monotonic()
    assert group.cancel_until(stopped + 10)
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - stopped < 10
    assert len(failed) == 1, failed  # Spark's "job cancelled", or JobCancelled at the next step: the daemon's stop
    assert not tracker.getActiveJobsIds()
    assert not any((tmp_path / "cancelled" / "_state").glob("gen-*"))

    def broken(bundles, options, latest=None):
        raise ProfileError("the hot bundles cannot be computed")

    monkeypatch.setattr(load_profile, "hot_bundles", broken)
    with pytest.raises(ProfileError, match="hot bundles cannot"):
        load_profile.build_profile(spark, history, str(tmp_path / "failed"), ProfileOptions())
    assert not any((tmp_path / "failed" / "_state").glob("gen-*"))


def test_empty_history_corrupt_files_and_missing_columns(spark, tmp_path):
    with pytest.raises(ProfileError, match="no history at"):
        load_profile.build_profile(spark, str(tmp_path / "nothing"), str(tmp_path / "out"), ProfileOptions())
    store = HistoryStore(str(tmp_path / "h"))
    sim = SimulatedCluster(parse_scenario(COST_SCENARIO))
    store.append(
        ClusterSnapshot("sim", sim.now_ms, {b: parse_broker_load(b, sim.load_report(b)) for b in sim.active_ids()})
    )
    folder = tmp_path / "h" / "bundle_samples"
    next(folder.rglob("*.parquet")).parent.joinpath("part-broken.parquet").write_bytes(b"PAR1 garbage")
    summary = load_profile.build_profile(spark, str(tmp_path / "h"), str(tmp_path / "out"), ProfileOptions())
    assert summary["bundle_samples"] == 18  # the broken file is skipped
    bad = tmp_path / "bad" / "broker_samples"
    bad.mkdir(parents=True)
    spark.createDataFrame([Row(time=1, broker="b")]).write.parquet(str(bad / "date=2025-01-01"))
    (tmp_path / "bad" / "bundle_samples").mkdir()
    with pytest.raises(ProfileError, match="missing column"):
        load_profile.build_profile(spark, str(tmp_path / "bad"), str(tmp_path / "out2"), ProfileOptions())


def test_executors_whose_python_lacks_the_fold_are_one_line_and_exit_2(cost_history, tmp_path):
    """The fold runs on the executors: a Python there without pyarrow, numpy or the job's package (here a bare
    venv) is a clear error naming what is missing, not a worker's traceback and 'this is a bug'."""
    history, _ = cost_history
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    result = subprocess.run(
        [operator_script(), "aggregate", "--history", history, "--out", str(tmp_path / "profile")],
        env={**os.environ, "PYSPARK_PYTHON": str(bare / "bin" / "python")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("operator:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-2000:]
    assert (
        errors[0].startswith("operator: error: the Spark executors' Python cannot import ") and "pyarrow" in errors[0]
    )
    assert "this is a bug" not in result.stderr and not (tmp_path / "profile" / "bundle_averages").exists()


def test_the_operator_reads_the_profile_and_aggregate_runs_from_the_cli(spark, cost_history, tmp_path, capsys):
    from pulsar_lb_operator import cli
    from pulsar_lb_operator.store.profile import read_profile

    history, sim = cost_history
    out = tmp_path / "profile"
    assert read_profile(str(out)) is None  # none yet: plan on the snapshot alone
    code = cli.main(["aggregate", "--history", history, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0 and '"broker_samples": 1080' in captured.out
    assert "computing bundle_averages" in captured.err and "cost models beside it" in captured.err
    profile = read_profile(str(out))
    assert len(profile.long_term) == 18 and profile.long_term[next(iter(profile.long_term))].num_samples == 360
    big = sim.by_name("big").id
    assert profile.cost_models[(big, "cpu")].per_msg_rate > 0
    assert len(profile.cost_models[(big, "cpu")].centred) == 9  # the sums alike brokers' fits are pooled from
    assert cli.main(["aggregate", "--history", str(tmp_path / "none"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no history at" in err and "no such directory" in err and "starting Spark" not in err  # said at once
    (tmp_path / "empty").mkdir()
    assert cli.main(["aggregate", "--history", str(tmp_path / "empty"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no history at" in err and "starting Spark" in err  # there, but with no samples: Spark's listing says so


def test_the_daemon_aggregates_in_process_and_plans_with_the_profile(spark, tmp_path):
    from pulsar_lb_operator.adminapi import AdminClient
    from pulsar_lb_operator.run.daemon import Daemon
    from pulsar_lb_operator.run.settings import OperatorSettings
    from pulsar_lb_operator.simulator.http import serve
    from pulsar_lb_operator.simulator.scenario import load_scenario
    from pulsar_lb_operator.strategies import LoadBalancerConfig

    scenario = load_scenario("hot-bundle-split")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate)) as sim:
        settings = OperatorSettings(
            dryRun=True,
            metricsPort=0,
            stateFile=str(tmp_path / "s.json"),
            historyUri=str(tmp_path / "history"),
            profileUri=str(tmp_path / "profile"),
        )
        daemon = Daemon(
            settings, LoadBalancerConfig(), AdminClient(sim.admin_url), "sim", clock_ms=lambda: sim.cluster.now_ms
        )
        for _ in range(12):  # twelve minutes of history in which the hot bundle stays hot
            daemon.run_once()
            sim.cluster.advance(60)
        daemon.aggregate()
        result = daemon.run_once()
    [split] = [r.action for r in result.records if r.action.bundle.startswith("acme/hot/")]
    assert "hot in 100% of recent samples" in split.reason
