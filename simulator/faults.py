"""Injected faults of the simulated brokers ("fault rehearsal").

A fault rule makes one broker (or every broker) misbehave on the requests whose method and path
match. The same syntax serves ``operator simulate --fault SPEC`` and a scenario file's ``faults:``::

    BROKER:METHOD:PATH-SUBSTRING:KIND[@COUNT]

``BROKER`` is a broker name of the scenario or ``*``; ``METHOD`` is GET, PUT, POST, DELETE or ``*``
(unload and split are PUT); ``PATH-SUBSTRING`` is looked for in the request's path (``/`` matches
every path; it may contain ``:``); ``@COUNT`` limits the rule to the first COUNT requests it fires on.
``KIND`` is one of

- ``status=CODE``: answer CODE without doing anything (``{"reason": "injected fault"}`` for CODE ≥ 400);
- ``status-after=CODE``: the real handler runs (an unload really happens), then the answer is CODE;
- ``delay=SECONDS``: sleep SECONDS of real time, then go on (other rules still apply);
- ``reset``: close the connection after reading the request, with no answer and no effect;
- ``reset-after``: the real handler runs, then the connection is closed with no answer;
- ``garbage``: 200 with a body that is not JSON (nor even UTF-8);
- ``html401``: Jetty's HTML 401 page, as for a missing token.

The ``-after`` kinds fire only when the real answer is a success (2xx): a redirect or an error has
had no effect to come after, so it goes out unchanged and does not count. Rules are tried in the
order they were added; every matching delay applies, and the first other matching rule decides.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from pulsar_lb_operator.simulator.errors import ScenarioError

KINDS = ("status", "status-after", "delay", "reset", "reset-after", "garbage", "html401")
AFTER_KINDS = frozenset({"status-after", "reset-after"})
METHODS = ("GET", "PUT", "POST", "DELETE")
SYNTAX = "BROKER:METHOD:PATH-SUBSTRING:KIND[@COUNT]"
KIND_SYNTAX = "status=CODE, status-after=CODE, delay=SECONDS, reset, reset-after, garbage, html401"
_WITH_VALUE = frozenset({"status", "status-after", "delay"})


class FaultSpecError(ScenarioError):
    """A fault that cannot be understood; the message names the spec and the problem (one line)."""

    def __init__(self, message: str, problem: str | None = None) -> None:
        super().__init__(message)
        self.problem = problem or message


def _problem(rule: FaultRule) -> str | None:
    if not rule.broker:
        return "empty broker name (use * for every broker)"
    if rule.method != "*" and rule.method not in METHODS:
        return f"unknown method {rule.method!r} (expected {', '.join(METHODS)} or *)"
    if not rule.path:
        return "empty path substring (use / to match every path)"
    if rule.kind not in KINDS:
        return f"unknown kind {rule.kind!r} (expected {KIND_SYNTAX})"
    if rule.kind in ("status", "status-after"):
        if isinstance(rule.status, bool) or not isinstance(rule.status, int) or not 200 <= rule.status <= 599:
            return f"{rule.kind}=CODE needs an HTTP status code from 200 to 599, got {rule.status!r}"
    elif rule.status is not None:
        return f"{rule.kind} takes no status code"
    if rule.kind == "delay":
        if not isinstance(rule.delay_s, int | float) or not math.isfinite(rule.delay_s) or rule.delay_s <= 0:
            return f"delay=SECONDS needs a number of seconds > 0, got {rule.delay_s!r}"
    elif rule.delay_s:
        return f"{rule.kind} takes no delay"
    if rule.limit is not None and (isinstance(rule.limit, bool) or not isinstance(rule.limit, int) or rule.limit < 1):
        return f"@COUNT must be a whole number >= 1, got {rule.limit!r}"
    return None


@dataclass(frozen=True)
class FaultRule:
    """One injected fault. ``body``/``content_type`` (programmatic only) replace a status kind's body."""

    broker: str = "*"  # a broker name, or "*" for every broker
    method: str = "*"  # GET, PUT, POST, DELETE or "*"
    path: str = "/"  # substring of the request path
    kind: str = "status"  # one of KINDS
    status: int | None = None  # status and status-after
    delay_s: float = 0.0  # delay
    limit: int | None = None  # fire on the first `limit` matching requests only; None: always
    body: str | None = None
    content_type: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.method, str):
            object.__setattr__(self, "method", self.method.upper())
        problem = _problem(self)
        if problem:
            raise FaultSpecError(f"fault {self.spec!r}: {problem}", problem)

    @property
    def after(self) -> bool:
        """True when the real handler runs first (status-after, reset-after)."""
        return self.kind in AFTER_KINDS

    @property
    def spec(self) -> str:
        """The rule in the --fault syntax (a custom ``body`` is not shown)."""
        if self.kind == "delay":
            value = f"={self.delay_s:g}" if isinstance(self.delay_s, int | float) else f"={self.delay_s!r}"
        elif self.kind in ("status", "status-after"):
            value = f"={self.status}"
        else:
            value = ""
        count = f"@{self.limit}" if self.limit is not None else ""
        return f"{self.broker}:{self.method}:{self.path}:{self.kind}{value}{count}"

    def matches(self, broker_name: str, method: str, path: str) -> bool:
        return self.broker in ("*", broker_name) and self.method in ("*", method.upper()) and self.path in path

    def __str__(self) -> str:
        return self.spec


def _known_broker(broker: str, brokers: Collection[str] | None) -> str | None:
    if brokers is None or broker == "*" or broker in brokers:
        return None
    return f"unknown broker {broker!r} (brokers: {', '.join(sorted(brokers))}; * for all)"


def parse_fault(text: str, brokers: Collection[str] | None = None, where: str = "fault") -> FaultRule:
    """``BROKER:METHOD:PATH-SUBSTRING:KIND[@COUNT]`` → FaultRule; ``brokers``: the names allowed besides ``*``.

    Raises FaultSpecError("<where> '<text>': <problem>").
    """

    def fail(problem: str) -> FaultSpecError:
        return FaultSpecError(f"{where} {text!r}: {problem}", problem)

    if not isinstance(text, str):
        raise FaultSpecError(f"{where}: expected a string {SYNTAX}, got {text!r}")
    parts = text.strip().split(":", 2)
    if len(parts) < 3 or ":" not in parts[2]:
        raise fail(f"expected {SYNTAX} with KIND one of {KIND_SYNTAX}")
    broker, method, rest = parts
    path, _, kind_text = rest.rpartition(":")
    kind_text, at, count_text = kind_text.partition("@")
    kind, eq, value = kind_text.partition("=")
    limit: int | None = None
    if at:
        try:
            limit = int(count_text)
        except ValueError:
            raise fail(f"@COUNT must be a whole number >= 1, got {count_text!r}") from None
    if kind not in KINDS:
        raise fail(f"unknown kind {kind_text!r} (expected {KIND_SYNTAX})")
    if kind in _WITH_VALUE and not eq:
        raise fail(f"{kind} needs a value: {kind}={'SECONDS' if kind == 'delay' else 'CODE'}")
    if kind not in _WITH_VALUE and eq:
        raise fail(f"{kind} takes no value")
    status: int | None = None
    delay_s = 0.0
    if kind == "delay":
        try:
            delay_s = float(value)
        except ValueError:
            raise fail(f"delay=SECONDS needs a number of seconds > 0, got {value!r}") from None
    elif kind in _WITH_VALUE:
        try:
            status = int(value)
        except ValueError:
            raise fail(f"{kind}=CODE needs an HTTP status code from 200 to 599, got {value!r}") from None
    unknown = _known_broker(broker, brokers)
    if unknown:
        raise fail(unknown)
    try:
        return FaultRule(broker, method, path, kind, status, delay_s, limit)
    except FaultSpecError as exc:
        raise fail(exc.problem) from None


_MAPPING_KEYS = ("broker", "method", "path", "kind", "count")


def fault_from_mapping(data: dict[str, Any], brokers: Collection[str] | None = None, where: str = "fault") -> FaultRule:
    """``{broker, method, path, kind, count}`` (broker and method default to ``*``) → FaultRule."""
    unknown = sorted(set(map(str, data)) - set(_MAPPING_KEYS))
    if unknown:
        raise FaultSpecError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(_MAPPING_KEYS)})")
    for key in ("path", "kind"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise FaultSpecError(f"{where}.{key}: expected a non-empty string, got {data.get(key)!r}")
    for key in ("broker", "method"):
        if not isinstance(data.get(key, "*"), str):
            raise FaultSpecError(f"{where}.{key}: expected a string, got {data[key]!r}")
    count = data.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        raise FaultSpecError(f"{where}.count: expected a whole number >= 1, got {count!r}")
    if "@" in data["kind"] and count is not None:
        raise FaultSpecError(f"{where}: give the count either as kind's @COUNT or as count, not both")
    text = f"{data.get('broker', '*')}:{data.get('method', '*')}:{data['path']}:{data['kind']}"
    return parse_fault(text + (f"@{count}" if count is not None else ""), brokers, where)


def parse_faults(items: Any, brokers: Collection[str] | None = None, where: str = "faults") -> tuple[FaultRule, ...]:
    """A scenario's ``faults:`` list: spec strings and/or mappings."""
    if items is None:
        return ()
    if not isinstance(items, list):
        raise FaultSpecError(f"{where}: expected a list of fault specs ({SYNTAX})")
    rules = []
    for i, item in enumerate(items):
        if isinstance(item, dict):
            rules.append(fault_from_mapping(item, brokers, f"{where}[{i}]"))
        else:
            rules.append(parse_fault(item, brokers, f"{where}[{i}]"))
    return tuple(rules)


class _Armed:
    __slots__ = ("fired", "rule")

    def __init__(self, rule: FaultRule) -> None:
        self.rule = rule
        self.fired = 0

    def spent(self) -> bool:
        return self.rule.limit is not None and self.fired >= self.rule.limit


class FaultSet:
    """The active rules and how often each fired; thread-safe (every broker thread consults it)."""

    def __init__(self, rules: Iterable[FaultRule] = ()) -> None:
        self._lock = threading.Lock()
        self._armed: list[_Armed] = [_Armed(r) for r in rules]
        self._fired_total = 0

    def add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._armed.append(_Armed(rule))
        return rule

    def remove(self, rule: FaultRule) -> bool:
        """Remove the first active rule equal to ``rule``; False when there is none."""
        with self._lock:
            for i, armed in enumerate(self._armed):
                if armed.rule == rule:
                    del self._armed[i]
                    return True
        return False

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()

    @property
    def rules(self) -> list[FaultRule]:
        with self._lock:
            return [a.rule for a in self._armed]

    @property
    def fired(self) -> int:
        """Times any rule fired since the start, removed rules included."""
        with self._lock:
            return self._fired_total

    def counts(self) -> list[tuple[FaultRule, int]]:
        """Each active rule with the number of times it fired."""
        with self._lock:
            return [(a.rule, a.fired) for a in self._armed]

    def before(self, broker_name: str, method: str, path: str) -> tuple[list[FaultRule], FaultRule | None]:
        """The delays to apply (counted as fired) and the rule that decides the request, if any.

        A deciding ``-after`` rule is not counted yet: call ``take`` once the real answer is a success.
        """
        delays: list[FaultRule] = []
        with self._lock:
            for armed in self._armed:
                if armed.spent() or not armed.rule.matches(broker_name, method, path):
                    continue
                if armed.rule.kind == "delay":
                    armed.fired += 1
                    self._fired_total += 1
                    delays.append(armed.rule)
                    continue
                if not armed.rule.after:
                    armed.fired += 1
                    self._fired_total += 1
                return delays, armed.rule
        return delays, None

    def take(self, rule: FaultRule) -> bool:
        """Count a firing of ``rule`` (an -after rule); False when it is gone or spent meanwhile."""
        with self._lock:
            for armed in self._armed:
                if armed.rule is rule and not armed.spent():
                    armed.fired += 1
                    self._fired_total += 1
                    return True
        return False
