"""The rails the executor holds every action to, as the settings resolve them.

Its own module so the settings can build it without importing the executor; the caps' defaults come
from ``strategies.rails`` so the planner and the executor can never disagree on them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pulsar_lb_operator.strategies.rails import DEFAULT_RAILS, Rails


@dataclass(frozen=True)
class Safety:
    """Rails checked before each action; the defaults are deliberately conservative."""

    dry_run: bool = True
    max_unloads_per_cycle: int = DEFAULT_RAILS.max_unloads_per_cycle
    max_unloads_per_broker: int = DEFAULT_RAILS.max_unloads_per_broker
    cooldown_minutes: float = 30  # loadBalancerSheddingGracePeriodMinutes
    excluded_namespaces: tuple[str, ...] = ()  # regular expressions, matched against tenant/namespace
    excluded_brokers: tuple[str, ...] = ()
    kill_switch_file: str | None = None
    kill_switch_env: str = "PULSAR_LB_KILL_SWITCH"
    pause_seconds: float = 0.0
    verify_after_seconds: float = 120.0

    def killed(self) -> str | None:
        if os.environ.get(self.kill_switch_env, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"kill switch: environment variable {self.kill_switch_env} is set"
        if self.kill_switch_file and Path(self.kill_switch_file).exists():
            return f"kill switch: file {self.kill_switch_file} exists"
        return None

    @property
    def rails(self) -> Rails:
        """The caps as the strategies see them: a plan they make fits what the executor will send."""
        return Rails(self.max_unloads_per_cycle, self.max_unloads_per_broker)

    def excludes_namespace(self, namespace: str) -> bool:
        return any(re.fullmatch(p, namespace) for p in self.excluded_namespaces)
