"""Cycle, action and proposal ids: unique across restarts and replicas, time-ordered (UUIDv7)."""

import json
import os
import subprocess
import threading
import uuid

from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.store.control import ControlFile
from pulsar_lb_operator.strategies import LoadBalancerConfig
from tests.builders import operator_script

ACT_NOW = ["--set", "loadBalancerAvgShedderHitCountHighThreshold=1"]


def test_ids_of_two_runs_with_the_same_seed_never_repeat_and_sort_by_time(live_served, tmp_path):
    """Two processes one after the other (a restart), the same seed, the same cluster: every cycle and action id
    differs, and the second run's ids sort after the first's."""
    env = {**os.environ, "PULSAR_ADMIN_URL": live_served.admin_url}
    runs = []
    for number in range(2):
        args = [operator_script(), "rebalance", "--output", "json", "--seed", "0", *ACT_NOW]
        done = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.splitlines()[-1])
        assert result["actions"], f"run {number + 1} planned nothing"
        runs.append([result["cycleId"], *(a["actionId"] for a in result["actions"])])
    ids = runs[0] + runs[1]
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 7 for i in ids)
    assert max(runs[0]) < min(runs[1])  # time-ordered across the restart
    assert runs[0][1:] == sorted(runs[0][1:])  # and within a cycle


def test_a_restarted_daemon_proposes_under_a_new_id_and_keeps_the_first_proposal(served, tmp_path):
    settings = OperatorSettings(
        adminUrl=served.admin_url,
        approval="manual",
        stateFile=str(tmp_path / "state.json"),
        historyUri="",
        profileUri="",
        metricsPort=0,
        aggregateEveryMinutes=0,
    )
    config = LoadBalancerConfig().replace({"loadBalancerAvgShedderHitCountHighThreshold": 1})
    client = AdminClient(served.admin_url)
    try:
        first = Daemon(settings, config, client, "sim", clock_ms=lambda: served.cluster.now_ms).run_once()
        second = Daemon(settings, config, client, "sim", clock_ms=lambda: served.cluster.now_ms).run_once()
    finally:
        client.close()
    assert first.plan.actions and second.plan.actions and first.cycle_id != second.cycle_id
    proposals = ControlFile(settings.stateFile).read().proposals
    assert set(proposals) == {first.cycle_id, second.cycle_id}  # the restart's proposal did not overwrite the first


def test_ids_made_at_once_on_many_threads_are_unique_and_each_threads_are_ordered():
    from pulsar_lb_operator.record.ids import new_id

    made: dict[int, list[str]] = {}

    def make(thread: int) -> None:
        made[thread] = [new_id() for _ in range(2000)]

    threads = [threading.Thread(target=make, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for ids in made.values() for i in ids]
    assert len(set(every)) == len(every) == 16000
    assert all(ids == sorted(ids) for ids in made.values())
    assert {uuid.UUID(i).variant for i in every} == {uuid.RFC_4122}
