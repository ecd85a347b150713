import pytest

from pulsar_lb_operator.spark_jobs.session import build_session


@pytest.fixture(scope="session")
def spark():
    """One local[2] session for all Spark tests (it takes seconds to start)."""
    session = build_session("local[2]", "pulsar-lb-tests")
    yield session
    session.stop()
