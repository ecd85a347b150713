"""Conflict guard: one balancer at a time. Pulsar's own shedder and bundle splitter are on by default.

Which keys gate them (Pulsar master): the modular load manager's ``doLoadShedding`` returns unless
``LoadManagerShared.isLoadSheddingEnabled`` (``loadBalancerEnabled && loadBalancerSheddingEnabled``), and its
``checkNamespaceBundleSplit`` unless ``loadBalancerAutoBundleSplitEnabled`` (on the leader; ``loadBalancerEnabled``
is not asked). The extensible load manager's ``UnloadScheduler`` sheds only while
``loadBalancerEnabled && loadBalancerSheddingEnabled`` and its ``SplitScheduler`` splits only while
``loadBalancerEnabled && loadBalancerAutoBundleSplitEnabled``. ``loadBalancerEnabled`` is static; the other two are
dynamic, so the effective values are in ``GET /admin/v2/brokers/configuration/runtime`` and the operator can turn
them off with ``POST /admin/v2/brokers/configuration/{key}/false``.

While Pulsar's shedder is on — or its splitter, when the operator splits too (its own
``loadBalancerAutoBundleSplitEnabled``) — the operator plans but sends nothing, and says why in one line, unless:

- ``disableBuiltinShedding: true``: right before the first mutating call of a live cycle the operator turns the
  keys off (never in a dry run, never under the kill switch, never on a standby, never when it has nothing to
  send), once per process: a key that is on again after that was turned back on by a person, and the operator
  holds again until it is off;
- ``coexistWithBuiltinShedding: true``: a person chose to run both; the operator acts and warns.

A runtime configuration that cannot be read counts as "on". The executor asks the guard (``Executor.guard``), so a
dry run's preview and a live cycle's execution meet the same verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import structlog

from pulsar_lb_operator.adminapi import AdminClient, AdminError
from pulsar_lb_operator.collect.elm import EXTENSIBLE

log = structlog.get_logger(__name__)

ENABLED = "loadBalancerEnabled"
SHEDDING = "loadBalancerSheddingEnabled"
SPLIT = "loadBalancerAutoBundleSplitEnabled"
WHAT = {SHEDDING: "shedder", SPLIT: "bundle splitter"}


@dataclass(frozen=True)
class Verdict:
    """What the guard found. ``held``: the one line saying why nothing is sent (None: the operator may act)."""

    state: str  # off | on | would turn off | turned off | coexisting | turned back on
    held: str | None = None
    keys: tuple[str, ...] = ()  # the keys found on (or assumed on)

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "held": self.held, "keys": list(self.keys)}


def _on(runtime: dict[str, Any], key: str) -> bool:
    """On unless it says "false": Pulsar's default for all three is true, and the runtime configuration gives a
    boolean as String.valueOf does; anything else is an answer the guard cannot trust, so it counts as on."""
    return str(runtime.get(key, "true")).strip().lower() != "false"


def _describe(keys: tuple[str, ...]) -> str:
    names = " and ".join(WHAT[k] for k in keys)
    values = ", ".join(f"{k}=true" for k in keys)
    return f"Pulsar's own {names} {'are' if len(keys) > 1 else 'is'} on ({values})"


@dataclass
class BuiltinGuard:
    client: AdminClient
    disable: bool = False  # disableBuiltinShedding
    coexist: bool = False  # coexistWithBuiltinShedding
    splits: bool = True  # the operator splits bundles itself (its loadBalancerAutoBundleSplitEnabled)
    turned_off: set[str] = field(default_factory=set)  # keys this process turned off
    last: Verdict | None = None

    def read(self) -> tuple[tuple[str, ...], str | None]:
        """The keys of Pulsar's own balancer that would act beside the operator, and why they could not be read
        (then every one the operator could meet counts as on)."""
        try:
            runtime = self.client.runtime_config()
        except AdminError as exc:
            reason = getattr(exc, "reason", str(exc))
            if exc.status in (401, 403) and reason.startswith("HTTP "):  # Jetty's HTML page says nothing more
                reason = f"HTTP {exc.status}: the token was not accepted"
            return (SHEDDING, SPLIT) if self.splits else (SHEDDING,), reason
        enabled = _on(runtime, ENABLED)
        extensible = str(runtime.get("loadManagerClassName", "")).strip() == EXTENSIBLE
        on = [SHEDDING] if enabled and _on(runtime, SHEDDING) else []
        if self.splits and _on(runtime, SPLIT) and (enabled or not extensible):
            on.append(SPLIT)
        return tuple(on), None

    def check(self, dry_run: bool) -> Verdict:
        """What a cycle's execution would meet now; nothing is sent (a dry run's preview, a live plan before it
        is carried out)."""
        keys, unread = self.read()
        return self._judge(keys, unread, dry_run, engage=False)

    def engage(self) -> Verdict:
        """Right before the first mutating call of a live cycle: with ``disable``, turn Pulsar's own balancer off."""
        keys, unread = self.read()
        return self._judge(keys, unread, dry_run=False, engage=True)

    def _judge(self, keys: tuple[str, ...], unread: str | None, dry_run: bool, engage: bool) -> Verdict:
        what = (
            f"cannot read Pulsar's runtime configuration ({unread}): its own balancer counts as on"
            if unread
            else _describe(keys)
        )
        if not keys:
            verdict = Verdict("off")
        elif self.coexist:
            verdict = Verdict("coexisting", None, keys)
        elif not unread and set(keys) & self.turned_off:
            back = tuple(k for k in keys if k in self.turned_off)
            verdict = Verdict(
                "turned back on",
                f"not acting: {_describe(back)} again after this operator turned it off — turned back on by a "
                "person; turn it off to let the operator act, or stop the operator to leave balancing to the brokers",
                keys,
            )
        elif self.disable and not engage:
            verdict = Verdict("would turn off", None, keys)
        elif self.disable:
            verdict = self._turn_off(keys, what)
        else:
            verdict = Verdict(
                "on",
                f"not acting: {what}; set disableBuiltinShedding: true to have the operator turn it off, or "
                "coexistWithBuiltinShedding: true to run both",
                keys,
            )
        self._tell(verdict, what, dry_run)
        self.last = verdict
        return verdict

    def _turn_off(self, keys: tuple[str, ...], what: str) -> Verdict:
        for key in keys:
            try:
                self.client.set_dynamic_config(key, "false")
            except AdminError as exc:  # an unknown outcome too: read again next cycle, and try again if still on
                reason = getattr(exc, "reason", str(exc))
                return Verdict("on", f"not acting: {what}; turning {key} off failed: {reason}", keys)
            self.turned_off.add(key)
        return Verdict("turned off", None, keys)

    def _tell(self, verdict: Verdict, what: str, dry_run: bool) -> None:
        """One log line when the verdict changes (a cycle a minute must not repeat it every minute)."""
        if self.last is not None and (self.last.state, self.last.held) == (verdict.state, verdict.held):
            return
        if verdict.state == "turned off":
            them = "them" if len(verdict.keys) > 1 else "it"
            log.warning(
                f"turned Pulsar's own balancer off: {', '.join(f'{k}=false' for k in verdict.keys)} (dynamic "
                f"configuration); set {them} back to true, and stop the operator, to hand balancing back to the brokers"
            )
        elif verdict.state == "would turn off" and dry_run:
            log.warning(f"dry run: would turn Pulsar's own balancer off before the first action: {what}; nothing sent")
        elif verdict.state == "coexisting":
            log.warning(f"{what}; acting beside it, as coexistWithBuiltinShedding: true asks")
        elif verdict.held:
            log.warning(verdict.held)
