"""The caps on one cycle's unloads, passed to the strategies that plan against them.

The executor enforces them (``operator/act/safety.py``); a strategy that plans a cycle's moves together
(PredictivePairingShedder) needs the same numbers so that what it plans is what will be sent, and the
benchmark applies them as the executor would. One definition, passed down from the settings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rails:
    max_unloads_per_cycle: int = 10  # maxUnloadsPerCycle
    max_unloads_per_broker: int = 5  # maxUnloadsPerBroker


DEFAULT_RAILS = Rails()
