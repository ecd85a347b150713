import pytest
from pyspark.sql import SparkSession

from pulsar_lb_operator.spark_jobs.session import build_session


@pytest.fixture
def spark():
    """The local[2] session all Spark tests share (it takes seconds to start): the one running, or a new one
    when a command under test stopped it (``operator aggregate`` stops the session it got)."""
    return build_session("local[2]", "pulsar-lb-tests")


@pytest.fixture(scope="session", autouse=True)
def _stop_spark_at_the_end():
    yield
    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
