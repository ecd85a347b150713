"""``operator benchmark``: the strategy benchmark (``benchmarks/suite.py``), reached from the CLI through here.

``USER_ERRORS`` are the mistakes the user made (an unknown strategy or family, an unreadable history): one line,
exit 2.
"""

from __future__ import annotations

from pulsar_lb_operator.benchmarks import families, replay, suite

benchmark_command = suite.benchmark_command
USER_ERRORS = (suite.UnknownCombinationError, replay.ReplayError, families.UnknownFamilyError)
