"""Pulsar 3.0 – 4.0.9 keep an unload's destination keyed by the bundle *range*: two unloads of one range in
different namespaces overwrite each other's destination. The simulator reproduces it for those versions;
the executor never sends the second such unload before the first is verified there."""

from __future__ import annotations

import pytest

from pulsar_lb_operator.act.executor import Executor, Safety
from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.records import ExecutorState, Outcome
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import parse_scenario
from pulsar_lb_operator.strategies import Plan, Unload
from pulsar_lb_operator.strategies.bundles import destination_keyed_by_range


def twins(version):
    """Two namespaces with the same bundle ranges, all on broker-0."""
    return parse_scenario(
        {
            "cluster": "sim",
            "brokerVersion": version,
            "brokers": [{"count": 3, "cores": 4}],
            "namespaces": [
                {"name": "a/one", "bundles": 4, "topics": 16, "rate": 50},
                {"name": "b/two", "bundles": 4, "topics": 16, "rate": 50},
            ],
            "initial_owners": {"broker-0": 1},
            "config": {"loadBalancerSheddingEnabled": False, "loadBalancerAutoBundleSplitEnabled": False},
        }
    )


def move_twins(version, executor_version):
    """Unload a/one and b/two's first bundles (same range) to two different brokers in one cycle."""
    with serve(lambda allocate: SimulatedCluster(twins(version), allocate)) as sim:
        ids = {n: sim.cluster.by_name(n).id for n in ("broker-0", "broker-1", "broker-2")}
        first, second = "a/one/0x00000000_0x40000000", "b/two/0x00000000_0x40000000"
        plan = Plan(
            "t",
            "t",
            0,
            (
                Unload(first, ids["broker-0"], ids["broker-1"], "t"),
                Unload(second, ids["broker-0"], ids["broker-2"], "t"),
            ),
        )
        clock = lambda: sim.cluster.now_ms / 1000  # noqa: E731
        executor = Executor(
            AdminClient(sim.admin_url, retries=1),
            "sim",
            Safety(dry_run=False, verify_after_seconds=60),
            clock=clock,
            sleep=lambda s: None,
            broker_version=executor_version,
        )
        records, state = executor.apply(plan, ExecutorState())
        sim.cluster.advance(90)  # clients look the bundles up again; the leader assigns them
        owners = {b: sim.cluster.owner_of(b) for b in (first, second)}
        verified, _ = executor.verify(state)
        return records, owners, {r.action.bundle: r.outcome for r in verified}, ids


@pytest.mark.parametrize(
    "version, affected", [("3.0.0", True), ("4.0.9", True), ("4.0.10", False), ("4.1.0", False), (None, True)]
)
def test_which_versions_key_the_destination_by_range(version, affected):
    assert destination_keyed_by_range(version) is affected


def test_on_an_old_broker_without_the_guard_the_two_destinations_collide():
    records, owners, verified, ids = move_twins("4.0.4", executor_version="4.1.0")  # the guard believes it is new
    assert [r.outcome for r in records] == [Outcome.EXECUTED, Outcome.EXECUTED]
    assert owners["a/one/0x00000000_0x40000000"] == ids["broker-2"]  # the second destination won for both
    assert verified["a/one/0x00000000_0x40000000"] is Outcome.MOVED_ELSEWHERE


def test_on_an_old_broker_the_guard_defers_the_second_unload_and_nothing_collides():
    records, owners, verified, ids = move_twins("4.0.4", executor_version="4.0.4")
    assert [r.outcome for r in records] == [Outcome.EXECUTED, Outcome.SKIPPED]
    assert "deferred to a later cycle" in records[1].detail and "4.0.10" in records[1].detail
    assert owners["a/one/0x00000000_0x40000000"] == ids["broker-1"]
    assert verified == {"a/one/0x00000000_0x40000000": Outcome.MOVED_AS_PLANNED}


def test_on_a_fixed_broker_both_go_out_in_one_cycle_and_land_as_planned():
    records, owners, verified, ids = move_twins("4.1.0", executor_version="4.1.0")
    assert [r.outcome for r in records] == [Outcome.EXECUTED, Outcome.EXECUTED]
    assert owners == {"a/one/0x00000000_0x40000000": ids["broker-1"], "b/two/0x00000000_0x40000000": ids["broker-2"]}
    assert set(verified.values()) == {Outcome.MOVED_AS_PLANNED}
