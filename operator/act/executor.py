"""Execute: apply a plan one action at a time, behind safety rails, and verify where unloads went.

The operator must never make a cluster worse than it found it, whatever the cluster does. The
invariants (README, "Safety"):

- Caps hold at the moment of sending: every unload or split sent counts toward
  ``max_unloads_per_cycle`` and ``max_unloads_per_broker`` before it is sent, whatever comes back.
- An action whose outcome is unknown (timeout, reset, 5xx, 409) counts as done: the bundle gets its
  cooldown and a pending verification, and no other action touches it until its owner was checked.
  Only an explicit refusal (400, 401/403, 404, 412) counts as "nothing happened".
- The kill switch, SIGTERM and leadership are checked immediately before each mutating call, after
  the (interruptible) pause between actions.
- Write-ahead: the attempt (cooldown and pending verification) is handed to ``persist`` — on disk —
  before the call is sent; if it cannot be persisted, nothing more is sent this cycle.
- In dry-run mode every action is logged with its reason and no mutating endpoint is called.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from pulsar_lb_operator.act.safety import Safety
from pulsar_lb_operator.adminapi import AdminClient, AdminError, Conflict, ServerError, TransportError
from pulsar_lb_operator.adminapi.errors import already_on_destination
from pulsar_lb_operator.collect.collector import read_isolation_policies
from pulsar_lb_operator.strategies import Action, Plan, SnapshotError, Split, Unload
from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies import policies as ns_policies

log = structlog.get_logger(__name__)


class Outcome(enum.Enum):
    DRY_RUN = "dry_run"  # would have been sent
    SKIPPED = "skipped"  # stopped by a safety rail
    EXECUTED = "executed"  # the admin API accepted it
    UNKNOWN = "unknown"  # sent, but no clear answer (timeout, reset, 5xx, 409): counted as done, verified later
    FAILED = "failed"  # the admin API refused it explicitly (nothing happened), or it could not be sent
    MOVED_AS_PLANNED = "moved_as_planned"  # verified: the bundle is owned by the planned destination
    MOVED_ELSEWHERE = "moved_elsewhere"  # verified: owned by another broker
    NOT_MOVED = "not_moved"  # verified: still unowned or back on its source after the check period
    SPLIT_DONE = "split_done"  # verified: the bundle's range no longer exists in its namespace
    NOT_SPLIT = "not_split"  # verified: the bundle's range still exists after the check period


# An explicit refusal: the broker checked the request and did nothing. Anything else may have acted.
REFUSED_STATUSES = frozenset({400, 401, 403, 404, 405, 412})


@dataclass(frozen=True)
class Record:
    action: Action
    outcome: Outcome
    detail: str
    at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {**self.action.to_json(), "outcome": self.outcome.value, "detail": self.detail, "at": self.at_ms}


class ExecutorStateError(ValueError):
    """An executor state document that cannot be read back (never silently reset)."""


@dataclass(frozen=True)
class ExecutorState:
    """Carried across cycles and restarts: when each bundle was last moved, and actions to verify.

    A pending entry is ``{"type": "unload"|"split", "bundle", "source", "destination", "at"}``; it is
    written before the call is sent, so a crash right after sending still leaves the bundle in
    cooldown and awaiting verification.
    """

    last_moved: dict[str, int] = field(default_factory=dict)
    pending: tuple[dict[str, Any], ...] = ()

    def awaiting(self) -> set[str]:
        return {p["bundle"] for p in self.pending}

    def merged(self, other: ExecutorState) -> ExecutorState:
        """Both records at once: the later move of each bundle, every pending action (a new leader
        inheriting the previous leader's record must honour its cooldowns and verify what it sent)."""
        moved = dict(self.last_moved)
        for bundle, at in other.last_moved.items():
            moved[bundle] = max(at, moved.get(bundle, at))
        seen = {(p["bundle"], p["at"]) for p in self.pending}
        pending = [*self.pending, *(p for p in other.pending if (p["bundle"], p["at"]) not in seen)]
        return ExecutorState(moved, tuple(pending))

    def recent(self, now_ms: int, keep_ms: float) -> ExecutorState:
        """Only what still matters: cooldowns younger than ``keep_ms``, and every pending action."""
        return ExecutorState({b: t for b, t in self.last_moved.items() if now_ms - t < keep_ms}, self.pending)

    def to_json(self) -> dict[str, Any]:
        return {"lastMoved": dict(sorted(self.last_moved.items())), "pending": list(self.pending)}

    @classmethod
    def from_json(cls, doc: Any) -> ExecutorState:
        if not isinstance(doc, dict):
            raise ExecutorStateError(f"executor state: expected an object, got {type(doc).__name__}")
        moved_doc = doc.get("lastMoved", {})
        pending_doc = doc.get("pending", [])
        if not isinstance(moved_doc, dict) or not isinstance(pending_doc, list):
            raise ExecutorStateError("executor state: lastMoved must be an object and pending a list")
        moved: dict[str, int] = {}
        for bundle, at in moved_doc.items():
            if not isinstance(at, int) or isinstance(at, bool):
                raise ExecutorStateError(f"executor state: lastMoved[{bundle!r}] is not a time in ms")
            moved[str(bundle)] = at
        pending: list[dict[str, Any]] = []
        for i, item in enumerate(pending_doc):
            ok = (
                isinstance(item, dict)
                and isinstance(item.get("bundle"), str)
                and isinstance(item.get("source"), str)
                and isinstance(item.get("at"), int)
                and isinstance(item.get("destination"), str | None)
                and item.get("type", "unload") in ("unload", "split")
            )
            if not ok:
                raise ExecutorStateError(f"executor state: pending[{i}] is not a pending action")
            pending.append({"type": "unload", **item})
        return cls(moved, tuple(pending))


@dataclass
class Executor:
    client: AdminClient
    cluster: str
    safety: Safety
    clock: Callable[[], float] = time.time
    # the pause between actions; returns True when it was cut short by a stop (an Event's wait)
    sleep: Callable[[float], bool | None] = time.sleep
    stop_requested: Callable[[], bool] = lambda: False
    # a reason not to send anything right now (e.g. "not the leader"), checked right before each call
    fence: Callable[[], str | None] = lambda: None
    # brokers being drained: never a destination
    draining: Callable[[], Collection[str]] = frozenset
    # the brokers' Pulsar version (run_cycle sets it from what it detects); None: unknown, treated as old
    broker_version: str | None = None

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------------ apply

    def apply(
        self,
        plan: Plan,
        state: ExecutorState,
        on_record: Callable[[Record], None] = lambda _r: None,
        persist: Callable[[ExecutorState], None] = lambda _s: None,
    ) -> tuple[list[Record], ExecutorState]:
        """Carry out the plan; ``on_record`` hears of each outcome as it happens (the audit trail) and
        ``persist`` receives the state with each attempt before it is sent, and after its answer."""
        records: list[Record] = []
        last_moved = dict(state.last_moved)
        pending = list(state.pending)
        per_broker: dict[str, int] = {}
        sent = 0

        def done(record: Record) -> Record:
            records.append(record)
            on_record(record)
            return record

        def skip_rest(index: int, why: str) -> None:
            for rest in plan.actions[index:]:
                done(self._record(rest, Outcome.SKIPPED, why))

        for index, action in enumerate(plan.actions):
            if self.stop_requested():
                skip_rest(index, "shutting down")
                break
            why_not = self._rail(action, last_moved, pending, sent, per_broker)
            if why_not:
                done(self._record(action, Outcome.SKIPPED, why_not))
                continue
            if self.safety.dry_run:
                done(self._record(action, Outcome.DRY_RUN, "dry run: no call made"))
                continue
            if sent and self.safety.pause_seconds and self.sleep(self.safety.pause_seconds):
                skip_rest(index, "shutting down")
                break
            # Immediately before sending: the switches that may have flipped during the pause.
            if self.stop_requested():
                skip_rest(index, "shutting down")
                break
            last_word = self.safety.killed() or self.fence()
            if last_word:
                skip_rest(index, last_word)
                break
            # Counted, in cooldown and awaiting verification before it is sent (write-ahead).
            sent += 1
            per_broker[action.source] = per_broker.get(action.source, 0) + 1
            at = self.now_ms()
            previous = last_moved.get(action.bundle)
            entry = {
                "type": "split" if isinstance(action, Split) else "unload",
                "bundle": action.bundle,
                "source": action.source,
                "destination": action.destination if isinstance(action, Unload) else None,
                "at": at,
            }
            last_moved[action.bundle] = at
            pending.append(entry)
            try:
                persist(ExecutorState(dict(last_moved), tuple(pending)))
            except OSError as exc:
                pending.pop()
                if previous is None:
                    last_moved.pop(action.bundle)
                else:
                    last_moved[action.bundle] = previous
                skip_rest(index, f"state could not be written, nothing more is sent: {exc}")
                break
            record = done(self._execute(action))
            if record.outcome in (Outcome.FAILED, Outcome.SKIPPED):  # refused: nothing happened
                pending.remove(entry)
                if previous is None:
                    last_moved.pop(action.bundle)
                else:
                    last_moved[action.bundle] = previous
            try:
                persist(ExecutorState(dict(last_moved), tuple(pending)))
            except OSError as exc:
                skip_rest(index + 1, f"state could not be written, nothing more is sent: {exc}")
                break
        return records, ExecutorState(last_moved, tuple(pending))

    def _rail(
        self,
        action: Action,
        last_moved: dict[str, int],
        pending: list[dict[str, Any]],
        sent: int,
        per_broker: dict[str, int],
    ) -> str | None:
        killed = self.safety.killed()
        if killed:
            return killed
        namespace = bundle_names.namespace_of(action.bundle)
        if bundle_names.is_system_namespace(namespace):
            return f"system namespace {namespace} is never touched"
        if self.safety.excludes_namespace(namespace):
            return f"namespace {namespace} is excluded"
        if action.source in self.safety.excluded_brokers:
            return f"broker {action.source} is excluded"
        if any(p["bundle"] == action.bundle for p in pending):
            return "an earlier action on this bundle awaits verification of where it went"
        moved_at = last_moved.get(action.bundle)
        cooldown_ms = self.safety.cooldown_minutes * 60_000
        if moved_at is not None and self.now_ms() - moved_at < cooldown_ms:
            minutes = (self.now_ms() - moved_at) / 60000
            return f"bundle moved {minutes:.1f} min ago (cooldown {self.safety.cooldown_minutes:g} min)"
        if sent >= self.safety.max_unloads_per_cycle:
            return f"max unloads per cycle ({self.safety.max_unloads_per_cycle}) reached"
        if per_broker.get(action.source, 0) >= self.safety.max_unloads_per_broker:
            return f"max unloads per broker ({self.safety.max_unloads_per_broker}) reached for {action.source}"
        if isinstance(action, Unload):
            if action.destination is None:
                return "no destination: the operator only moves bundles to a broker it chose"
            if action.destination == action.source:
                return "destination is the source"
            if action.destination in self.safety.excluded_brokers:
                return f"destination {action.destination} is excluded"
            if action.destination in self.draining():
                return f"destination {action.destination} is being drained"
            twin = self._same_range_in_flight(action, pending)
            if twin is not None:
                version = self.broker_version or "of unknown version"
                return (
                    f"deferred to a later cycle: the unload of {twin} (same range, another namespace) is not verified "
                    f"yet, and Pulsar {version} keeps one destination per bundle range (fixed in 4.0.10)"
                )
            try:
                active = set(self.client.active_brokers(self.cluster))
            except AdminError as exc:
                return f"cannot confirm the destination is active: {exc.reason}"
            if action.destination not in active:
                return f"destination {action.destination} is not an active broker"
            return self._isolation_rail(action, active)
        return None

    def _isolation_rail(self, action: Unload, active: set[str]) -> str | None:
        """The cluster's isolation policies as they are now must allow the destination: one read right
        before the unload, applyNamespacePolicies over the active brokers (the topic-mode flags and the
        anti-affinity spread are the planner's). Policies that cannot be read refuse the unload."""
        try:
            isolation = read_isolation_policies(self.client, self.cluster)
        except (AdminError, SnapshotError) as exc:
            reason = exc.reason if isinstance(exc, AdminError) else str(exc)
            return f"cannot confirm the namespace isolation policies allow {action.destination}: {reason}"
        namespace = bundle_names.namespace_of(action.bundle)
        policies = ns_policies.NamespacePolicies(isolation)
        if action.destination in ns_policies.apply_namespace_policies(namespace, active, policies):
            return None
        policy = policies.policy_for(namespace)
        which = f"isolation policy {policy.name}" if policy else "it is another namespace's primary broker"
        return f"destination {action.destination} is excluded by the isolation policies of {namespace} ({which})"

    def _same_range_in_flight(self, action: Unload, pending: list[dict[str, Any]]) -> str | None:
        """On brokers before 4.0.10 a second destination for the same range would overwrite the first's:
        the bundle of another namespace with this range whose unload is still unverified, if any."""
        if not bundle_names.destination_keyed_by_range(self.broker_version):
            return None
        bundle_range = action.bundle.rsplit("/", 1)[1]
        for item in pending:
            other = item["bundle"]
            if item.get("type", "unload") == "unload" and other != action.bundle and other.endswith("/" + bundle_range):
                return other
        return None

    def _execute(self, action: Action) -> Record:
        try:
            if isinstance(action, Unload):
                self.client.unload(action.bundle, action.destination)
            elif isinstance(action, Split):
                namespace, bundle_range = bundle_names.split_bundle_name(action.bundle)
                try:  # re-read before every split: a split whose answer was lost may have happened
                    bounds = sorted(bundle_names.parse_boundary(b) for b in self.client.bundles(namespace))
                except (AdminError, bundle_names.BundleNameError) as exc:
                    return self._record(action, Outcome.SKIPPED, f"cannot re-read the namespace's bundles: {exc}")
                if bundle_range not in bundle_names.ranges_of(bounds):
                    return self._record(action, Outcome.SKIPPED, "bundle no longer exists (split already?)")
                self.client.split(action.bundle, action.algorithm, list(action.boundaries) or None, action.unload)
        except TransportError as exc:
            if isinstance(action, Unload) and self._left_source(action):
                detail = f"no answer ({exc.reason}) but the bundle left its source"
                return self._record(action, Outcome.EXECUTED, detail)
            return self._record(action, Outcome.UNKNOWN, f"no answer ({exc.reason}): counted as done, to verify")
        except (ServerError, Conflict) as exc:
            if exc.in_transition:  # another unload or transfer of it is under way: it may go either way
                detail = f"HTTP {exc.status}: in transition (already being unloaded or moved): {exc.reason}"
            elif isinstance(action, Unload) and already_on_destination(exc.reason):  # ELM: moved in between
                detail = (
                    f"HTTP {exc.status}: already owned by {action.destination} (the extensible load manager "
                    "refuses a transfer to the owner): nothing moved now"
                )
            else:
                detail = f"HTTP {exc.status}: {exc.reason}: the broker may have acted"
            return self._record(action, Outcome.UNKNOWN, f"{detail}; counted as done, to verify")
        except AdminError as exc:
            if not exc.sent:  # e.g. no OAuth2 token could be had: nothing left this process
                return self._record(action, Outcome.FAILED, f"not sent: {exc.reason}")
            if exc.status in REFUSED_STATUSES:
                return self._record(action, Outcome.FAILED, f"HTTP {exc.status}: {exc.reason}")
            status = f"HTTP {exc.status}: " if exc.status else ""
            return self._record(action, Outcome.UNKNOWN, f"{status}{exc.reason}: counted as done, to verify")
        return self._record(action, Outcome.EXECUTED, "accepted")

    def _left_source(self, action: Unload) -> bool:
        try:
            return action.bundle not in self.client.owned_bundles(self.cluster, action.source)
        except AdminError:
            return False

    # ------------------------------------------------------------------ verify

    def verify(
        self, state: ExecutorState, on_record: Callable[[Record], None] = lambda _r: None
    ) -> tuple[list[Record], ExecutorState]:
        """Check actions older than ``verify_after_seconds``: where did each bundle go, did each split happen?

        Whatever cannot be read now stays pending (and its bundle untouched) until a later cycle can.
        """
        records: list[Record] = []
        still: list[dict[str, Any]] = []
        owners: dict[str, str] | None = None
        owners_read = False  # one attempt per cycle: a broker that cannot answer now is asked next cycle
        for item in state.pending:
            age_s = (self.now_ms() - int(item.get("at", 0))) / 1000
            if age_s < self.safety.verify_after_seconds:
                still.append(item)
                continue
            if item.get("type") == "split":
                record = self._verify_split(item, age_s)
                if record is None:
                    still.append(item)
                else:
                    records.append(record)
                continue
            if not owners_read:
                owners, owners_read = self._owners(), True
            if owners is None:  # cannot read ownership now: try again next cycle
                still.append(item)
                continue
            action = Unload(item["bundle"], item["source"], item.get("destination"), "verification")
            owner = owners.get(item["bundle"])
            if owner is not None and owner == item.get("destination"):
                records.append(self._record(action, Outcome.MOVED_AS_PLANNED, f"owned by {owner}"))
            elif owner is not None and owner != item["source"]:
                records.append(self._record(action, Outcome.MOVED_ELSEWHERE, f"owned by {owner}"))
            elif age_s < 3 * self.safety.verify_after_seconds:
                still.append(item)  # not looked up yet; clients reconnect lazily
            else:
                where = f"back on {owner}" if owner else "still unowned"
                records.append(self._record(action, Outcome.NOT_MOVED, where))
        for record in records:
            on_record(record)
        return records, replace(state, pending=tuple(still))

    def _verify_split(self, item: dict[str, Any], age_s: float) -> Record | None:
        action = Split(item["bundle"], item["source"], "verification", (), "verification")
        try:
            namespace, bundle_range = bundle_names.split_bundle_name(item["bundle"])
            bounds = sorted(bundle_names.parse_boundary(b) for b in self.client.bundles(namespace))
        except (AdminError, bundle_names.BundleNameError) as exc:
            log.warning("split verification postponed", bundle=item["bundle"], reason=str(exc))
            return None
        if bundle_range not in bundle_names.ranges_of(bounds):
            return self._record(action, Outcome.SPLIT_DONE, "the range was split")
        if age_s < 3 * self.safety.verify_after_seconds:
            return None
        return self._record(action, Outcome.NOT_SPLIT, "the range still exists")

    def _owners(self) -> dict[str, str] | None:
        owners: dict[str, str] = {}
        try:
            for broker_id in self.client.active_brokers(self.cluster):
                for bundle in self.client.owned_bundles(self.cluster, broker_id):
                    owners[bundle] = broker_id
        except AdminError as exc:
            log.warning("verification postponed", reason=exc.reason)
            return None
        return owners

    def _record(self, action: Action, outcome: Outcome, detail: str) -> Record:
        record = Record(action, outcome, detail, self.now_ms())
        log.info(
            "action",
            type="unload" if isinstance(action, Unload) else "split",
            bundle=action.bundle,
            source=action.source,
            destination=getattr(action, "destination", None),
            dry_run=self.safety.dry_run,
            result=outcome.value,
            detail=detail,
            reason=action.reason,
        )
        return record
