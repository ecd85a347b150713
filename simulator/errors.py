"""The simulator's one error a person fixes: a scenario, a fault or a serving request it cannot take.

It sits below every module that raises it (``scenario`` parses a scenario's ``faults:`` with ``faults``,
whose ``FaultSpecError`` is one), so that neither has to import the other to name it.
"""

from __future__ import annotations

from pulsar_lb_operator.strategies import UserError


class ScenarioError(UserError, ValueError):
    """A scenario that cannot be loaded; the message names the key."""
