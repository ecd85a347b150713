"""Execute: apply a plan one action at a time, behind safety rails, and verify where unloads went.

The operator must never make a cluster worse than it found it, whatever the cluster does. The
invariants (docs/safety.md):

- Caps hold at the moment of sending: every unload or split sent counts toward
  ``max_unloads_per_cycle`` and ``max_unloads_per_broker`` before it is sent, whatever comes back.
- An action whose outcome is unknown (timeout, reset, 5xx, 409) counts as done: the bundle gets its
  cooldown and a pending verification, and no other action touches it until its owner was checked.
  Only an explicit refusal (400, 401/403, 404, 412) counts as "nothing happened".
- The kill switch, SIGTERM and leadership are checked immediately before each mutating call, after
  the (interruptible) pause between actions; the kill switch and leadership once more after the
  first call's read of Pulsar's balancer and each write-ahead, the last steps before sending.
- Write-ahead: the attempt (cooldown and pending verification) is handed to ``persist`` — on disk —
  before the call is sent; if it cannot be persisted, nothing more is sent this cycle.
- One function, ``_rail``, decides for the preview and the execution alike: ``preview`` is what this cycle's
  execution would send and which rail defers the rest (caps counted as they would be at sending), and a dry run
  reports exactly that; the execution checks every rail again right before each call.
- While Pulsar's own balancer is on (``guard.py``) nothing is sent, unless a person said otherwise.
- In dry-run mode every action is logged with its reason and no mutating endpoint is called.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import structlog

from pulsar_lb_operator.act.guard import BuiltinGuard
from pulsar_lb_operator.act.ledger import Ledger
from pulsar_lb_operator.act.safety import Safety
from pulsar_lb_operator.adminapi import AdminClient, AdminError, Conflict, ServerError, TransportError
from pulsar_lb_operator.adminapi.errors import already_on_destination
from pulsar_lb_operator.collect.collector import read_isolation_policies
from pulsar_lb_operator.records import ExecutorState, Outcome, Pending, Record
from pulsar_lb_operator.strategies import Action, Plan, SnapshotError, Split, Unload
from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies import policies as ns_policies

log = structlog.get_logger(__name__)


# An explicit refusal: the broker checked the request and did nothing. Anything else may have acted.
REFUSED_STATUSES = frozenset({400, 401, 403, 404, 405, 412})


_Read = TypeVar("_Read")


class _Reads:
    """What the destination rails read from the cluster: the active brokers and the isolation policies. Fresh for
    each action when executing (the cluster moves during the pauses); read once per preview."""

    def __init__(self, client: AdminClient, cluster: str, once: bool) -> None:
        self.client, self.cluster, self.once = client, cluster, once
        self.memo: dict[str, Any] = {}

    def _read(self, what: str, read: Callable[[], _Read]) -> _Read:
        if what not in self.memo or not self.once:
            try:
                self.memo[what] = read()
            except (AdminError, SnapshotError) as exc:
                self.memo[what] = exc
        value: _Read | Exception = self.memo[what]
        if isinstance(value, Exception):
            raise value
        return value

    def active_brokers(self) -> set[str]:
        return self._read("active", lambda: set(self.client.active_brokers(self.cluster)))

    def isolation(self) -> Any:
        return self._read("isolation", lambda: read_isolation_policies(self.client, self.cluster))

    def owned(self, broker: str) -> set[str]:
        return self._read(f"owned {broker}", lambda: set(self.client.owned_bundles(self.cluster, broker)))


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
    # Pulsar's own balancer (guard.py): while it is on, nothing is sent; None: not checked (tests of other rails)
    guard: BuiltinGuard | None = None

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------------ preview

    def preview(self, plan: Plan, state: ExecutorState) -> tuple[str | None, ...]:
        """Per action of the plan: None when this cycle's execution would send it, else the rail that defers it.

        The same rails, in the same order, as ``apply``, counting each action it would send toward the caps, its
        cooldown and its pending verification as ``apply`` does before sending; nothing is sent. The destination
        rails read the cluster once here, and again before each call when executing.
        """
        ledger, reads = Ledger.of(state), _Reads(self.client, self.cluster, once=True)
        # asked every cycle (one read), so the status page and the metric always tell; nothing is changed here
        held = self.guard.check(self.safety.dry_run).held if self.guard is not None else None
        verdicts: list[str | None] = []
        for action in plan.actions:
            why = self._rail(action, ledger, reads) or held
            if why is None:
                ledger.count(action, self.now_ms())
            verdicts.append(why)
        return tuple(verdicts)

    # ------------------------------------------------------------------ apply

    def apply(
        self,
        plan: Plan,
        state: ExecutorState,
        on_record: Callable[[Record], None] = lambda _r: None,
        persist: Callable[[ExecutorState], None] = lambda _s: None,
        planned_earlier: bool = False,
    ) -> tuple[list[Record], ExecutorState]:
        """Carry out the plan; ``on_record`` hears of each outcome as it happens (the audit trail) and
        ``persist`` receives the state with each attempt before it is sent, and after its answer.
        ``planned_earlier``: the plan was made a while ago (an approved proposal), so each action's source must
        still own its bundle, read right before it is sent: moved since, the action would be another's."""
        records: list[Record] = []

        def done(record: Record) -> Record:
            records.append(record)
            on_record(record)
            return record

        if self.safety.dry_run:  # the preview is what a dry run reports: nothing is sent
            for action, why in zip(plan.actions, self.preview(plan, state)):
                outcome, detail = (Outcome.SKIPPED, why) if why else (Outcome.DRY_RUN, "dry run: no call made")
                done(self._record(action, outcome, detail))
            return records, state

        def skip_rest(index: int, why: str) -> None:
            for rest in plan.actions[index:]:
                done(self._record(rest, Outcome.SKIPPED, why))

        ledger, reads = Ledger.of(state), _Reads(self.client, self.cluster, once=False)
        held: str | None = None
        engaged = False
        for index, action in enumerate(plan.actions):
            if self.stop_requested():
                skip_rest(index, "shutting down")
                break
            why_not = self._rail(action, ledger, reads) or (held if engaged else None)
            if not why_not and planned_earlier:
                why_not = self._still_owned(action, reads)
            if why_not:
                done(self._record(action, Outcome.SKIPPED, why_not))
                continue
            if ledger.sent and self.safety.pause_seconds and self.sleep(self.safety.pause_seconds):
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
            if not engaged:  # Pulsar's own balancer, once, right before the first call (guard.py)
                held, engaged = (self.guard.engage().held if self.guard is not None else None), True
                if held:
                    done(self._record(action, Outcome.SKIPPED, held))
                    continue
            # Counted, in cooldown and awaiting verification before it is sent (write-ahead).
            entry, previous = ledger.count(action, self.now_ms())
            try:
                persist(ledger.state())
            except OSError as exc:
                ledger.undo(action, entry, previous)
                skip_rest(index, f"state could not be written, nothing more is sent: {exc}")
                break
            # The moment of sending: a pause or a lost lease that came while Pulsar's balancer was read or the state
            # written (each a call or a disk write away from the check above) stops this action too.
            last_word = self.safety.killed() or self.fence()
            if last_word:
                ledger.undo(action, entry, previous)
                with contextlib.suppress(OSError):  # left counted on disk, it is only verified as not moved
                    persist(ledger.state())
                skip_rest(index, last_word)
                break
            record = done(self._execute(action))
            if record.outcome in (Outcome.FAILED, Outcome.SKIPPED):  # refused: nothing happened
                ledger.undo(action, entry, previous)
            try:
                persist(ledger.state())
            except OSError as exc:
                skip_rest(index + 1, f"state could not be written, nothing more is sent: {exc}")
                break
        return records, ledger.state()

    def _rail(self, action: Action, ledger: Ledger, reads: _Reads) -> str | None:
        """Why ``action`` is not sent now (None: it may be), for the preview and the execution alike."""
        killed = self.safety.killed()
        if killed:
            return killed
        if action.source in self.safety.excluded_brokers:
            return f"broker {action.source} is excluded"
        held = self.held_back(action.bundle, ledger.pending, ledger.last_moved)
        if held:
            return held
        if ledger.sent >= self.safety.max_unloads_per_cycle:
            return f"max unloads per cycle ({self.safety.max_unloads_per_cycle}) reached"
        if ledger.per_broker.get(action.source, 0) >= self.safety.max_unloads_per_broker:
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
            twin = self._same_range_in_flight(action, ledger.pending)
            if twin is not None:
                version = self.broker_version or "of unknown version"
                return (
                    f"deferred to a later cycle: the unload of {twin} (same range, another namespace) is not verified "
                    f"yet, and Pulsar {version} keeps one destination per bundle range (fixed in 4.0.10)"
                )
            try:
                active = reads.active_brokers()
            except AdminError as exc:
                return f"cannot confirm the destination is active: {exc.reason}"
            if action.destination not in active:
                return f"destination {action.destination} is not an active broker"
            return self._isolation_rail(action, active, reads)
        return None

    def _still_owned(self, action: Action, reads: _Reads) -> str | None:
        """Why an action planned earlier is no longer the plan's (None: its source still owns the bundle)."""
        try:
            owned = reads.owned(action.source)
        except AdminError as exc:
            return f"cannot confirm {action.source} still owns the bundle: {exc.reason}"
        if action.bundle not in owned:
            return f"stale: {action.source} no longer owns the bundle (it moved since the plan was made)"
        return None

    def held_back(self, bundle: str, pending: Iterable[Pending], last_moved: Mapping[str, int]) -> str | None:
        """Why no action on ``bundle`` is sent now, whoever plans it (None: the bundle itself may move): its
        namespace is the system's or excluded, an earlier action on it is unverified, or it is in cooldown. A drain
        plans around these (``strategies.drain``): picked, they would fill its share of the caps every cycle."""
        namespace = bundle_names.namespace_of(bundle)
        if bundle_names.is_system_namespace(namespace):
            return f"system namespace {namespace} is never touched"
        if self.safety.excludes_namespace(namespace):
            return f"namespace {namespace} is excluded"
        if any(p.bundle == bundle for p in pending):
            return "an earlier action on this bundle awaits verification of where it went"
        moved_at = last_moved.get(bundle)
        cooldown_ms = self.safety.cooldown_minutes * 60_000
        if moved_at is not None and self.now_ms() - moved_at < cooldown_ms:
            minutes = (self.now_ms() - moved_at) / 60000
            return f"bundle moved {minutes:.1f} min ago (cooldown {self.safety.cooldown_minutes:g} min)"
        return None

    def _isolation_rail(self, action: Unload, active: set[str], reads: _Reads) -> str | None:
        """The cluster's isolation policies as they are now must allow the destination: one read right
        before the unload, applyNamespacePolicies over the active brokers (the topic-mode flags and the
        anti-affinity spread are the planner's). Policies that cannot be read refuse the unload."""
        try:
            isolation = reads.isolation()
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

    def _same_range_in_flight(self, action: Unload, pending: list[Pending]) -> str | None:
        """On brokers before 4.0.10 a second destination for the same range would overwrite the first's:
        the bundle of another namespace with this range whose unload is still unverified, if any."""
        if not bundle_names.destination_keyed_by_range(self.broker_version):
            return None
        bundle_range = action.bundle.rsplit("/", 1)[1]
        for item in pending:
            other = item.bundle
            if not item.is_split and other != action.bundle and other.endswith("/" + bundle_range):
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
        still: list[Pending] = []
        owners: dict[str, str] | None = None
        owners_read = False  # one attempt per cycle: a broker that cannot answer now is asked next cycle
        for item in state.pending:
            age_s = (self.now_ms() - item.at) / 1000
            if age_s < self.safety.verify_after_seconds:
                still.append(item)
                continue
            if item.is_split:
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
            action = Unload(item.bundle, item.source, item.destination, "verification")
            owner = owners.get(item.bundle)
            if owner is not None and owner == item.destination:
                records.append(self._record(action, Outcome.MOVED_AS_PLANNED, f"owned by {owner}"))
            elif owner is not None and owner != item.source:
                records.append(self._record(action, Outcome.MOVED_ELSEWHERE, f"owned by {owner}"))
            elif age_s < 3 * self.safety.verify_after_seconds:
                still.append(item)  # not looked up yet; clients reconnect lazily
            else:
                where = f"back on {owner}" if owner else "still unowned"
                records.append(self._record(action, Outcome.NOT_MOVED, where))
        for record in records:
            on_record(record)
        return records, replace(state, pending=tuple(still))

    def _verify_split(self, item: Pending, age_s: float) -> Record | None:
        action = Split(item.bundle, item.source, "verification", (), "verification")
        try:
            namespace, bundle_range = bundle_names.split_bundle_name(item.bundle)
            bounds = sorted(bundle_names.parse_boundary(b) for b in self.client.bundles(namespace))
        except (AdminError, bundle_names.BundleNameError) as exc:
            log.warning("split verification postponed", bundle=item.bundle, reason=str(exc))
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
