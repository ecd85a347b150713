import pytest

from simulator.cluster import SimulatedCluster
from simulator.http import serve
from simulator.scenario import load_scenario


@pytest.fixture
def served(request):
    """A shipped scenario (default ``demo``, or the test's parameter) served on loopback."""
    scenario = load_scenario(request.param if hasattr(request, "param") else "demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate)) as sim:
        yield sim
