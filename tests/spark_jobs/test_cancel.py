"""A daemon that stops mid-aggregation cancels its Spark jobs: the stop takes seconds, whatever the job."""

from __future__ import annotations

import threading
import time

from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from pulsar_lb_operator.spark_jobs import load_profile
from pulsar_lb_operator.strategies import LoadBalancerConfig


def wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_a_stop_mid_aggregation_cancels_the_job_in_seconds(spark, tmp_path, monkeypatch):
    def hours_long(session, history, out, options, progress=None, full=False):
        """The job's first steps, then a job that would run for hours on two cores."""
        step = progress or (lambda _step: None)
        step("listing the history")
        session.range(0, 10**13, numPartitions=2).selectExpr("sum(id % 7)").collect()
        step("done")  # never reached: the stop cancels the job above
        return {}

    monkeypatch.setattr(load_profile, "build_profile", hours_long)
    scenario = load_scenario("demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate, int(time.time() * 1000))) as sim:
        settings = OperatorSettings(
            adminUrl=sim.admin_url,
            metricsPort=0,
            stateFile=str(tmp_path / "state.json"),
            cycleIntervalSeconds=60,
            historyUri=str(tmp_path / "history"),
            profileUri=str(tmp_path / "profile"),
            aggregateEveryMinutes=0.01,  # first run after 0.6 s
            shutdownTimeoutSeconds=30,
        )
        daemon = Daemon(settings, LoadBalancerConfig().replace(scenario.config), AdminClient(sim.admin_url), "sim")
        thread = threading.Thread(target=daemon.serve)
        thread.start()
        tracker = spark.sparkContext.statusTracker()
        try:
            assert wait_until(lambda: tracker.getActiveJobsIds(), 60), "the aggregation never started its job"
            time.sleep(1.0)  # well into its tasks
            stopped = time.monotonic()
            daemon.stop.set()
            thread.join(30)
            took = time.monotonic() - stopped
        finally:
            daemon.stop.set()
            thread.join(30)
        assert not thread.is_alive()
        assert took < 10, f"the stop took {took:.1f} s"
        # nothing of the job is left running in the JVM the tests share
        assert wait_until(lambda: not tracker.getActiveJobsIds(), 5), tracker.getActiveJobsIds()
        assert daemon._aggregation is None
