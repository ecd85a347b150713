import sys
from pathlib import Path

# Tests import their helpers as ``tests.builders``; the repository root must be importable.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


import functools  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402
import structlog  # noqa: E402

from pulsar_lb_operator.simulator.cluster import SimulatedCluster  # noqa: E402
from pulsar_lb_operator.simulator.http import serve  # noqa: E402
from pulsar_lb_operator.simulator.scenario import load_scenario  # noqa: E402
from tests.builders import cli_shedder, run_shedder  # noqa: E402


@pytest.fixture(autouse=True)
def _no_state_where_pytest_runs(request):
    """The operator's default stateFile is state/operator-state.json under the directory it runs in: a test that runs
    it without a directory of its own (``monkeypatch.chdir(tmp_path)`` or ``--state``) leaves it in the checkout."""
    state = Path(request.config.invocation_params.dir) / "state"
    there = state.exists()
    yield
    if not there and state.exists():
        pytest.fail(f"the test left {state} behind: run the operator in tmp_path (monkeypatch.chdir) or pass --state")


@pytest.fixture(autouse=True)
def _structlog_as_found():
    """A test that runs the CLI configures structlog for its ``--log-level``, process-wide; left so, a later test in
    the same worker that reads an info event with ``capture_logs`` finds it filtered out (which test runs after which
    depends on how xdist shares them out)."""
    found = structlog.get_config()
    yield
    structlog.configure(**found)


@pytest.fixture(params=["function", "cli"])
def shed(request, tmp_path):
    """Run a shedding scenario directly, or through ``operator rebalance --snapshot`` with real files."""
    if request.param == "function":
        return run_shedder
    return functools.partial(cli_shedder, tmp_path / "cli")


@pytest.fixture
def served(request):
    """A shipped scenario (default ``demo``, or the test's parameter) served on loopback."""
    scenario = load_scenario(request.param if hasattr(request, "param") else "demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate)) as sim:
        yield sim


@pytest.fixture
def live_served():
    """The demo scenario with load reports stamped by the wall clock, as a live cluster's are."""
    scenario = load_scenario("demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate, int(time.time() * 1000))) as sim:
        yield sim


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "spark_cluster: starts a standalone Spark master and worker (needs Java; -m 'not spark_cluster' skips it)",
    )
