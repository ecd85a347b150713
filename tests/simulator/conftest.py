import pytest

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import parse_scenario

SMALL = {
    "cluster": "sim",
    "brokers": [{"count": 3, "cores": 4, "cost_per_msg": 0.01, "cost_per_mib": 1.0}],
    "namespaces": [{"name": "t/ns", "bundles": 8, "topics": 64, "rate": 150}],
    "initial_owners": {"broker-0": 3, "broker-1": 1},
    "config": {"loadBalancerSheddingEnabled": False, "loadBalancerAutoBundleSplitEnabled": False},
}


@pytest.fixture
def sim():
    """A three-broker cluster served on free loopback ports; stopped after the test."""
    with serve(lambda allocate: SimulatedCluster(parse_scenario(SMALL), allocate)) as served:
        yield served


@pytest.fixture
def secured():
    with serve(
        lambda allocate: SimulatedCluster(parse_scenario(SMALL), allocate), token="s3cret", user_token="reader"
    ) as served:
        yield served
