"""OverloadShedder (§8.4) and the modular manager's shedding loop around it (§8.7 testLoadShedding)."""

import random

from strategies import StrategyState, plan_cycle
from tests.builders import MIB, broker_report, cfg, run_shedder, snapshot, stats


def ten_bundles(prefix: str = "t/ns") -> dict:
    return {f"{prefix}/0x{i:08x}_0x{i + 1:08x}": stats(thr_in=i * MIB, thr_out=i * MIB) for i in range(1, 11)}


def test_no_brokers_and_not_overloaded():
    assert run_shedder("OverloadShedder", snapshot({})).unloads == ()
    calm = snapshot(
        {
            "broker-1:8080": broker_report(
                bw_in=(500, 1000), bw_out=(500, 1000), bundles={"t/ns/0x00000000_0x00000001": stats(thr_in=1000)}
            )
        }
    )
    assert run_shedder("OverloadShedder", calm).unloads == ()


def test_overloaded_broker_with_no_or_one_bundle_is_left_alone():
    empty = snapshot({"broker-1:8080": broker_report(bw_in=(999, 1000), bw_out=(999, 1000))})
    assert run_shedder("OverloadShedder", empty).unloads == ()
    single = snapshot(
        {
            "broker-1:8080": broker_report(
                bw_in=(999, 1000), bw_out=(999, 1000), bundles={"t/ns/0x00000000_0x00000001": stats(thr_in=MIB)}
            )
        }
    )
    assert run_shedder("OverloadShedder", single).unloads == ()


def test_broker_with_multiple_bundles(shed):
    snap = snapshot(
        {
            "broker-1:8080": broker_report(
                bw_in=(999, 1000), bw_out=(999, 1000), bundles=ten_bundles(), thr_in=55 * MIB, thr_out=55 * MIB
            ),
            "another-broker:8080": broker_report(bundles=ten_bundles("t/other")),
        }
    )
    # 0.999 − 0.85 + 0.05 = 0.199 of 110 MiB = 21.9 MiB: 20 MiB, then 18 MiB
    assert [u.bundle for u in shed("OverloadShedder", snap).unloads] == [
        "t/ns/0x0000000a_0x0000000b",
        "t/ns/0x00000009_0x0000000a",
    ]


def test_filter_recently_unloaded():
    snap = snapshot(
        {
            "broker-1:8080": broker_report(
                bw_in=(999, 1000), bw_out=(999, 1000), bundles=ten_bundles(), thr_in=55 * MIB, thr_out=55 * MIB
            )
        }
    )
    state = StrategyState().evolve(
        recently_unloaded={"t/ns/0x0000000a_0x0000000b": snap.taken_at, "t/ns/0x00000009_0x0000000a": snap.taken_at}
    )
    assert [u.bundle for u in run_shedder("OverloadShedder", snap, state=state).unloads] == [
        "t/ns/0x00000008_0x00000009",
        "t/ns/0x00000007_0x00000008",
    ]


def test_modular_load_shedding_loop():
    """testLoadShedding: 80% → nothing; 90% → bundle 2 then bundle 1 go to the secondary; then the
    grace period blocks both; once it expires they can go again."""
    bundles = {"1/1/1/0x00000000_0xffffffff": stats(rate_in=100), "2/2/2/0x00000000_0xffffffff": stats(rate_in=200)}

    def cluster(cpu: float, taken_at: int):
        return snapshot(
            {
                "primary:8080": broker_report(cpu=(cpu, 100), bundles=bundles, last_update=taken_at),
                "secondary:8080": broker_report(cpu=(0, 100), last_update=taken_at),
            },
            taken_at=taken_at,
        )

    config = cfg(loadBalancerLoadPlacementStrategy="LeastLongTermMessageRate")
    rng = random.Random(1)
    t0 = 1_750_000_000_000
    plan, state = plan_cycle(cluster(80, t0), config, StrategyState(), rng, shedding="OverloadShedder")
    assert plan.unloads == ()
    plan, state = plan_cycle(cluster(90, t0), config, state, rng, shedding="OverloadShedder")
    # Both bundles have zero throughput; the first chosen is a tie, and it goes to the secondary.
    assert len(plan.unloads) == 1 and plan.unloads[0].destination == "secondary:8080"
    first = plan.unloads[0].bundle
    plan, state = plan_cycle(cluster(90, t0 + 60_000), config, state, rng, shedding="OverloadShedder")
    assert [u.bundle for u in plan.unloads] == [b for b in bundles if b != first]
    plan, state = plan_cycle(cluster(90, t0 + 120_000), config, state, rng, shedding="OverloadShedder")
    assert plan.unloads == ()  # both within loadBalancerSheddingGracePeriodMinutes (30)
    later = t0 + 31 * 60_000
    plan, state = plan_cycle(cluster(90, later), config, state, rng, shedding="OverloadShedder")
    assert len(plan.unloads) == 1


def test_no_unload_when_the_only_destination_is_the_owner():
    bundles = {"t/ns/0x00000000_0x00000001": stats(rate_in=100), "t/ns/0x00000001_0x00000002": stats(rate_in=200)}
    snap = snapshot(
        {"primary:8080": broker_report(cpu=(90, 100), bundles=bundles), "other:8080": broker_report(cpu=(95, 100))}
    )
    # Every broker is overloaded: LeastLongTermMessageRate's random pick may return the owner itself.
    owners = set()
    for seed in range(20):
        plan, _ = plan_cycle(
            snap,
            cfg(),
            StrategyState(),
            random.Random(seed),
            shedding="OverloadShedder",
            placement="LeastLongTermMessageRate",
        )
        owners.update(u.destination for u in plan.unloads)
        assert all(u.destination != u.source for u in plan.unloads)
        if not plan.unloads:
            assert any("no broker other than its owner" in n for n in plan.notes)
    assert owners == {"other:8080"}
