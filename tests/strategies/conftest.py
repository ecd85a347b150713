import pytest

from pulsar_lb_operator.strategies import registry


@pytest.fixture
def registry_restored():
    """The registry as it was before the test, whatever the test registered (a registration is for the process)."""
    shedding, placement = dict(registry._SHEDDING), dict(registry._PLACEMENT)
    yield registry
    for table, saved in ((registry._SHEDDING, shedding), (registry._PLACEMENT, placement)):
        table.clear()
        table.update(saved)
