import pytest

from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import parse_scenario
from tests.builders import SMALL_SCENARIO

SMALL = SMALL_SCENARIO


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
