"""The commands that stand up a simulated cluster or a strategy benchmark: ``demo``, ``simulate``,
``rehearse``, ``benchmark``.

This is the one place the operator's package reaches into ``simulator/`` and ``benchmarks/``: the
daemon and the cycle (collect, decide, act, record) know only a Pulsar admin API, never a simulator.
``tests/test_layering.py`` holds every import to that.
"""

from pulsar_lb_operator.simulator.scenario import ScenarioError, shipped_scenarios

__all__ = ["ScenarioError", "shipped_scenarios"]
