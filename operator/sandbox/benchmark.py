"""``operator benchmark``: the strategy benchmark (``benchmarks/suite.py``), reached from the CLI through here.

The mistakes a user can make (an unknown strategy, an unreadable history) are UserErrors: one line, exit 2.
"""

from __future__ import annotations

from pulsar_lb_operator.benchmarks import suite

benchmark_command = suite.benchmark_command
