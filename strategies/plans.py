"""A plan: the actions one cycle decided, with the numbers behind each, as a frozen JSON-able value.

The same JSON is what ``operator rebalance --output json`` prints, what the executor consumes and
what the audit log records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pulsar_lb_operator.strategies import bundles as bundle_names


@dataclass(frozen=True)
class Unload:
    bundle: str
    source: str
    destination: str | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "unload",
            "bundle": self.bundle,
            "source": self.source,
            "destination": self.destination,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Split:
    bundle: str
    source: str
    algorithm: str
    boundaries: tuple[int, ...]
    reason: str
    unload: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "split",
            "bundle": self.bundle,
            "source": self.source,
            "algorithm": self.algorithm,
            "boundaries": [bundle_names.format_boundary(b) for b in self.boundaries],
            "unload": self.unload,
            "reason": self.reason,
        }


Action = Unload | Split


@dataclass(frozen=True)
class BrokerScore:
    """One broker's load before the plan and as estimated after it (percent of its capacity)."""

    broker: str
    usage_before: float
    usage_after: float
    msg_rate_before: float
    msg_rate_after: float
    bundles_before: int
    bundles_after: int

    def to_json(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "usageBefore": round(self.usage_before, 2),
            "usageAfter": round(self.usage_after, 2),
            "msgRateBefore": round(self.msg_rate_before, 2),
            "msgRateAfter": round(self.msg_rate_after, 2),
            "bundlesBefore": self.bundles_before,
            "bundlesAfter": self.bundles_after,
        }


@dataclass(frozen=True)
class Plan:
    shedding: str
    placement: str
    taken_at: int
    actions: tuple[Action, ...] = ()
    brokers: tuple[BrokerScore, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def unloads(self) -> tuple[Unload, ...]:
        return tuple(a for a in self.actions if isinstance(a, Unload))

    @property
    def splits(self) -> tuple[Split, ...]:
        return tuple(a for a in self.actions if isinstance(a, Split))

    def to_json(self) -> dict[str, Any]:
        return {
            "shedding": self.shedding,
            "placement": self.placement,
            "takenAt": self.taken_at,
            "actions": [a.to_json() for a in self.actions],
            "brokers": [b.to_json() for b in self.brokers],
            "notes": list(self.notes),
        }


def action_from_json(doc: Any) -> Action:
    """An action back from its ``to_json`` (a proposal waiting for approval is stored this way)."""
    if not isinstance(doc, dict) or doc.get("type") not in ("unload", "split"):
        raise ValueError(f"not an action: {doc!r}"[:200])
    if doc["type"] == "unload":
        return Unload(str(doc["bundle"]), str(doc["source"]), doc.get("destination"), str(doc.get("reason", "")))
    return Split(
        str(doc["bundle"]),
        str(doc["source"]),
        str(doc["algorithm"]),
        tuple(bundle_names.parse_boundary(b) for b in doc.get("boundaries", [])),
        str(doc.get("reason", "")),
        bool(doc.get("unload", True)),
    )
