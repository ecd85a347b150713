"""Strict reading of the JSON documents strategies trust: snapshots and strategy state.

One reader walks a value and names the exact path of anything wrong; every number is checked
against a bound before any arithmetic sees it, so strategies never meet NaN, infinity, a negative
figure, or one so large that a float32 percentage, an average or a square overflows. The bounds are
far above anything a broker reports:

* ``MAX_AMOUNT`` (1e15): resource usage and limit (cpu in percent-of-a-core, MiB, kbit/s), every
  bundle's and topic's msg rate and throughput, and every float setting of ``LoadBalancerConfig``;
* ``MAX_BROKER_TOTAL`` (5e307): a broker's own ``msgRateIn/Out`` and ``msgThroughputIn/Out``. Pulsar's
  own ThresholdShedderTest reports ``Double.MAX_VALUE / 4`` there; half the largest double keeps
  in + out finite;
* ``MIN_LIMIT`` (1e-6): a resource limit is 0 (not known) or at least this, so usage / limit × 100
  fits a float32 as Pulsar computes it;
* ``MAX_INTEGER`` (2**53 − 1): counts, epoch-ms timestamps and integer settings, exact as a double;
* ``MAX_AVERAGE`` (1e300): the state's bundle averages, so that averaging a thousand samples stays finite.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from pulsar_lb_operator.strategies.errors import UserError

MAX_AMOUNT = 1e15
MAX_BROKER_TOTAL = 5e307
MIN_LIMIT = 1e-6
MAX_INTEGER = 2**53 - 1
MAX_AVERAGE = 1e300
MAX_FINITE = sys.float_info.max  # finite is all that is asked


def one_more(count: int) -> int:
    """``count + 1``, held at ``MAX_INTEGER``: a hit count the state file must read back after a restart (no count
    gets there by counting, but a state file may hold any count up to it)."""
    return min(count + 1, MAX_INTEGER)


class StateError(UserError, ValueError):
    """A state document that cannot be read back."""


_JSON_TYPE_NAMES: dict[type, str] = {dict: "object", list: "list", str: "string"}


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def describe(value: Any, limit: int = 60) -> str:
    """A short rendering of any value for a one-line message: never a huge or deeply nested repr."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}… ({len(value)} characters)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if abs(value) < 10**30 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    return type_name(value)


class Reader:
    """A value inside a document, with its path; every check raises ``error`` naming that path."""

    def __init__(self, value: Any, path: str, error: type[ValueError] = ValueError) -> None:
        self.value = value
        self.path = path
        self.error = error

    def fail(self, problem: str) -> ValueError:
        return self.error(f"{self.path}: {problem}")

    def at(self, value: Any, path: str) -> Reader:
        return Reader(value, path, self.error)

    def obj(self) -> dict[str, Any]:
        if not isinstance(self.value, dict):
            raise self.fail(f"expected an object, got {type_name(self.value)}")
        return self.value

    def child(self, key: str, *, required: bool = True, default: Any = None) -> Reader:
        data = self.obj()
        if key not in data:
            if required:
                raise self.error(f"{self.path}.{key}: missing")
            return self.at(default, f"{self.path}.{key}")
        return self.at(data[key], f"{self.path}.{key}")

    def entries(self) -> list[tuple[str, Reader]]:
        """An object's entries, each read at ``path[name]``."""
        out = []
        for key, value in self.obj().items():
            if not isinstance(key, str):
                raise self.fail(f"keys must be strings, got {describe(key)}")
            out.append((key, self.at(value, f"{self.path}[{describe(key, limit=200)}]")))
        return out

    def items(self, length: int | None = None) -> list[Reader]:
        if not isinstance(self.value, list):
            raise self.fail(f"expected a list, got {type_name(self.value)}")
        if length is not None and len(self.value) != length:
            raise self.fail(f"expected a list of {length} items, got {len(self.value)}")
        return [self.at(v, f"{self.path}[{i}]") for i, v in enumerate(self.value)]

    def number(self, *, maximum: float = MAX_AMOUNT, non_negative: bool = True) -> float:
        v = self.value
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(f"expected a number, got {type_name(v)}")
        if isinstance(v, float) and not math.isfinite(v):
            raise self.fail(f"expected a finite number, got {v}")
        if non_negative and v < 0:
            raise self.fail(f"must not be negative, got {describe(v)}")
        if abs(v) > maximum:
            raise self.fail(f"{describe(v)} is above the bound {maximum:g} for this field")
        return float(v) + 0.0  # + 0.0: -0.0 becomes 0.0

    def integer(self, *, maximum: int = MAX_INTEGER) -> int:
        v = self.value
        integral = isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
        if isinstance(v, bool) or not integral:
            raise self.fail(f"expected an integer, got {type_name(v)} {describe(v)}")
        if v < 0:
            raise self.fail(f"must not be negative, got {describe(v)}")
        if v > maximum:
            raise self.fail(f"{describe(v)} is above the bound {maximum} for this field")
        return int(v)

    def string(self) -> str:
        if not isinstance(self.value, str) or not self.value:
            raise self.fail(f"expected a non-empty string, got {type_name(self.value)}")
        return self.value

    def string_list(self) -> list[str]:
        if type(self.value) is list and all(type(item) is str and item for item in self.value):
            return list(self.value)  # the plain case, at once; otherwise each item names its own problem
        return [item.string() for item in self.items()]
