"""One active instance: leader election over a Kubernetes Lease (``coordination.k8s.io/v1``).

Every replica runs a :class:`LeaseElector`; the one holding the Lease acts, the others stand by and
take over when it stops renewing. The semantics are client-go's ``leaderelection`` with a LeaseLock:

* acquire when the Lease does not exist (create), is released (empty ``holderIdentity``) or expired;
  renew while we hold it; every write carries the ``resourceVersion`` we read, so of two candidates
  writing at once the API server lets one win and answers the other 409 Conflict (it then does not lead);
  ``leaseTransitions`` goes up by one on every change of holder;
* "expired" is judged on OUR monotonic clock, never on the remote ``renewTime`` (other nodes' clocks
  may be off): a Lease held by someone else is expired once ``leaseDurationSeconds`` have elapsed here
  since we last saw the Lease change (its spec or its resourceVersion). The longer of our duration and
  the one written in the Lease counts, so a holder configured with a longer lease is never cut short;
* :meth:`LeaseElector.is_leader` is conservative: True only while our last successful renew was sent
  less than ``renew_deadline`` ago by the local monotonic clock. A leader cut off from the API server
  thus stops acting after ``renew_deadline``, while a standby can take over only ``lease_duration``
  after it saw that same renew — later, because ``renew_deadline < lease_duration``. The difference
  (5 s by default) is the margin a mutating call in flight must fit in: callers check ``is_leader()``
  right before every mutating call;
* :meth:`LeaseElector.stop` releases the Lease (empty ``holderIdentity``), so a standby takes over at
  its next try instead of waiting for the lease to expire.

The elector runs in a daemon thread. Errors talking to the API server are logged (one line, the same
error at most once a minute) and never raised out of the thread; they make ``is_leader()`` turn False
after the renew deadline. The REST calls it makes, and the pod's own facts (its namespace, its name),
are lease_client.py's.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from pulsar_lb_operator.run.lease_client import (
    SERVICE_ACCOUNT_DIR,
    LeaseApiError,
    LeaseClient,
    LeaseConflict,
    default_identity,
    pod_namespace,
)
from pulsar_lb_operator.strategies import ConfigError

log = structlog.get_logger(__name__)

# The leader's record of what it sent (cooldowns, actions awaiting verification), kept on the Lease
# itself so that a standby taking over inherits it (see ``publish``).
STATE_ANNOTATION = "pulsar-lb-operator/executor-state"
COUNTERS_ANNOTATION = "pulsar-lb-operator/strategy-counters"  # written once a cycle (store/statefile.py)
MAX_ANNOTATIONS_BYTES = 256 * 1024  # the API server's limit on all of an object's annotations


class LeaseElector:
    """Holds the Lease ``namespace/name`` while it can; see the module's docstring for the rules.

    ``start()`` runs the election in a daemon thread; ``stop()`` ends it and releases the Lease.
    ``is_leader()`` may be called from any thread at any time and is cheap (no I/O).
    ``on_change(is_leader)`` is called when the answer of ``is_leader()`` changes, from the elector's
    thread (and from the caller's thread in ``stop()``): for logs, metrics and waking the caller up.
    Gate every mutating action on ``is_leader()`` itself, not on the callback.
    """

    def __init__(
        self,
        name: str,
        namespace: str | None = None,
        *,
        client: LeaseClient | None = None,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_change: Callable[[bool], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                "need 0 < retry_period < renew_deadline < lease_duration, "
                f"got {retry_period} / {renew_deadline} / {lease_duration}"
            )
        namespace = namespace or pod_namespace()
        if not namespace:
            raise ConfigError(
                f"leaseNamespace: not set, and {SERVICE_ACCOUNT_DIR / 'namespace'} is not readable (not in a pod?)"
            )
        self.name = name
        self.namespace = namespace
        # a round of two requests (GET, then PUT) fits in the time between the last try and the deadline
        timeout = max(0.05, (renew_deadline - retry_period) / 2)
        self.client = client if client is not None else LeaseClient.in_cluster(timeout=timeout)
        self.identity = identity or default_identity()
        self.lease_duration = float(lease_duration)
        self.renew_deadline = float(renew_deadline)
        self.retry_period = float(retry_period)
        self.request_timeout = timeout
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.RLock()
        self._round = threading.Lock()  # one read-then-write of the Lease at a time: rounds and publish()
        self._annotations: dict[str, str] = {}  # what we keep on the Lease while we hold it
        self._observed_annotations: dict[str, str] = {}
        self._inherited: dict[str, str] = {}  # the Lease's annotations when we took it over
        self._observed_spec: dict[str, Any] | None = None
        self._observed_version: str | None = None
        self._observed_at = 0.0  # our clock when the Lease was last seen to change
        self._renewed_at: float | None = None  # our clock just before our last successful write
        self._holding = False
        self._stopping = False
        self._reported = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error: tuple[str, float] | None = None

    def __repr__(self) -> str:
        return f"LeaseElector({self.namespace}/{self.name}, identity={self.identity!r})"

    # -- what callers use --------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        with self._lock:
            return (
                self._holding
                and self._renewed_at is not None
                and self._clock() - self._renewed_at < self.renew_deadline
            )

    @property
    def holder(self) -> str | None:
        """The holder last seen in the Lease (None: free or never read)."""
        with self._lock:
            return (self._observed_spec or {}).get("holderIdentity") or None

    def start(self) -> None:
        if self._thread is not None:
            return
        log.info(
            "leader election started",
            lease=f"{self.namespace}/{self.name}",
            identity=self.identity,
            lease_duration_s=self.lease_duration,
            renew_deadline_s=self.renew_deadline,
        )
        self._thread = threading.Thread(target=self._run, name=f"lease-elector-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True, timeout: float | None = None) -> None:
        """Stop acting at once, end the thread, then (by default) release the Lease for a standby."""
        with self._lock:
            self._stopping = True
            self._holding = False
        self._stop.set()
        self._report()
        if self._thread is not None and self._thread is not threading.current_thread():
            # the thread is at most in one request (it writes nothing once stopping)
            self._thread.join(self.request_timeout + 0.5 if timeout is None else timeout)
        if release:
            self._release()

    def publish(self, key: str, value: str) -> bool:
        """Write ``key: value`` onto the Lease now (it is renewed by the same write) — only while we hold it.

        True once the API server has it. False when we do not lead, the Lease changed hands (409 on our
        resourceVersion: a fencing token), or the API server cannot be reached: the caller must then not
        act. The value stays on the Lease through every later renewal and our release, so the next
        leader reads it with :meth:`inherited`.
        """
        if len(key) + len(value) > MAX_ANNOTATIONS_BYTES - 1024:
            log.error("lease annotation too large; not written", key=key, bytes=len(value))
            return False
        with self._round:
            if not self.is_leader():
                return False
            previous = self._annotations.get(key)
            self._annotations[key] = value
            if self._attempt(require_ours=True):
                return True
            if previous is None:
                self._annotations.pop(key, None)
            else:
                self._annotations[key] = previous
            return False

    def annotation(self, key: str) -> str | None:
        """``key``'s value on the Lease as last read (every round reads it: a leader at each renewal, a standby
        before it takes over), so a value someone else writes there reaches us within ``retry_period``."""
        with self._lock:
            return self._observed_annotations.get(key)

    def inherited(self, key: str) -> str | None:
        """The value ``key`` had on the Lease when we took it over (the previous leader's record)."""
        with self._lock:
            return self._inherited.get(key)

    def wait_until_leader(self, timeout: float | None = None) -> bool:
        """Block until we lead (True), or ``timeout`` passes or the elector stops (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_leader():
            remaining = None if deadline is None else deadline - time.monotonic()
            if (remaining is not None and remaining <= 0) or self._stop.is_set():
                return False
            step = self.retry_period / 4
            self._stop.wait(step if remaining is None else min(step, remaining))
        return True

    def __enter__(self) -> LeaseElector:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- one round, as client-go's tryAcquireOrRenew -------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """Read the Lease; create, take over or renew it when we may. True when we hold it afterwards."""
        with self._round:
            return self._attempt(require_ours=False)

    def _attempt(self, require_ours: bool, again: bool = True) -> bool:
        try:
            lease = self.client.get(self.namespace, self.name, timeout=self.request_timeout)
        except LeaseApiError as exc:
            self._failed(exc)
            return False
        if self._stopping:  # stop() came during the read: write nothing more
            return False
        if lease is None:
            return self._create()
        metadata = lease.get("metadata") or {}
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        with self._lock:
            self._observed_annotations = dict(metadata.get("annotations") or {})
            seen_before = (self._observed_spec or {}).get("holderIdentity") or ""
            if spec != self._observed_spec or metadata.get("resourceVersion") != self._observed_version:
                self._observed_spec = spec
                self._observed_version = metadata.get("resourceVersion")
                self._observed_at = self._clock()
            observed_at = self._observed_at
        if holder != seen_before and holder not in ("", self.identity):
            log.info("lease held by another instance", lease=f"{self.namespace}/{self.name}", holder=holder)
        ours = holder == self.identity
        if require_ours and not ours:
            self._not_holding(f"held by {holder or 'nobody'}")
            return False
        if holder and not ours:
            duration = max(self.lease_duration, _number(spec.get("leaseDurationSeconds")))
            if self._clock() < observed_at + duration:
                self._not_holding(f"held by {holder}")
                return False
        now = _micro_time()
        new_spec = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._lease_seconds(),
            "renewTime": now,
            "acquireTime": (spec.get("acquireTime") or now) if ours else now,
            "leaseTransitions": int(_number(spec.get("leaseTransitions"))) + (0 if ours else 1),
        }
        annotations = dict(metadata.get("annotations") or {})
        if ours:
            annotations.update(self._annotations)
        else:  # taking over: keep the previous leader's record, and hand it to our caller
            with self._lock:
                self._inherited = dict(annotations)
                self._annotations = {}
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                **{k: v for k, v in metadata.items() if k != "managedFields"},
                **({"annotations": annotations} if annotations else {}),
            },
            "spec": new_spec,
        }
        sent_at = self._clock()
        try:
            written = self.client.replace(self.namespace, self.name, body, timeout=self.request_timeout)
        except LeaseConflict as exc:
            if ours and again:  # written between our read and our write (a pause, a resume): read it again, once
                return self._attempt(require_ours, again=False)
            self._not_holding("lost the race for the lease (409 Conflict)", exc)
            return False
        except LeaseApiError as exc:
            self._failed(exc)
            return False
        return self._won(written, sent_at, took_over=not ours, previous=holder)

    def _create(self) -> bool:
        now = _micro_time()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._lease_seconds(),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        sent_at = self._clock()
        try:
            written = self.client.create(self.namespace, body, timeout=self.request_timeout)
        except LeaseConflict as exc:
            self._not_holding("lost the race to create the lease (409 AlreadyExists)", exc)
            return False
        except LeaseApiError as exc:
            self._failed(exc)
            return False
        return self._won(written, sent_at, took_over=True, previous="")

    def _lease_seconds(self) -> int:
        return max(1, math.ceil(self.lease_duration))  # the API's field is a whole number of seconds

    def _won(self, written: dict[str, Any], sent_at: float, took_over: bool, previous: str) -> bool:
        spec = dict(written.get("spec") or {})
        with self._lock:
            self._observed_annotations = dict((written.get("metadata") or {}).get("annotations") or {})
            self._observed_spec = spec
            self._observed_version = (written.get("metadata") or {}).get("resourceVersion")
            self._observed_at = self._clock()
            self._last_error = None
            if self._stopping:  # stop() came while we were writing: do not lead; stop() releases it
                return False
            self._renewed_at = sent_at
            self._holding = True
        if took_over:
            log.info(
                "lease acquired",
                lease=f"{self.namespace}/{self.name}",
                identity=self.identity,
                previous_holder=previous or None,
                transitions=spec.get("leaseTransitions"),
            )
        return True

    def _not_holding(self, reason: str, exc: Exception | None = None) -> None:
        with self._lock:
            was = self._holding
            self._holding = False
            self._last_error = None
        if was or exc is not None:
            log.info("not leading", lease=f"{self.namespace}/{self.name}", identity=self.identity, reason=reason)

    def _failed(self, exc: LeaseApiError) -> None:
        now = self._clock()
        message = str(exc)
        with self._lock:
            last = self._last_error
            if last is not None and last[0] == message and now - last[1] < 60:
                return
            self._last_error = (message, now)
        log.warning(
            "lease API request failed",
            lease=f"{self.namespace}/{self.name}",
            identity=self.identity,
            leading=self.is_leader(),
            reason=message,
        )

    def _release(self) -> None:
        with self._lock:
            spec, version = self._observed_spec, self._observed_version
            annotations = {**self._observed_annotations, **self._annotations}
        if not spec or spec.get("holderIdentity") != self.identity:
            return
        now = _micro_time()
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace, "resourceVersion": version}
        if annotations:  # a PUT replaces the object: what we recorded must go with it to the next leader
            metadata["annotations"] = annotations
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
            },
        }
        try:
            written = self.client.replace(self.namespace, self.name, body, timeout=self.request_timeout)
        except LeaseConflict:
            log.info("lease not released: someone else holds it now", lease=f"{self.namespace}/{self.name}")
            return
        except LeaseApiError as exc:
            log.warning(
                "lease not released; it expires by itself", lease=f"{self.namespace}/{self.name}", reason=str(exc)
            )
            return
        with self._lock:
            self._observed_spec = dict(written.get("spec") or {})
            self._observed_version = (written.get("metadata") or {}).get("resourceVersion")
        log.info("lease released", lease=f"{self.namespace}/{self.name}", identity=self.identity)

    # -- the thread -----------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.try_acquire_or_renew()
            except Exception as exc:  # a bug here must not end the election silently, nor the process
                log.error("leader election round crashed", reason=f"{type(exc).__name__}: {exc}")
            self._report()
            # a leader renews every retry period; candidates add a little jitter, as client-go does
            with self._lock:
                holding = self._holding
                deadline_in = None
                if holding and self._renewed_at is not None:
                    deadline_in = self._renewed_at + self.renew_deadline - self._clock()
            pause = self.retry_period if holding else self.retry_period * random.uniform(1.0, 1.2)
            if deadline_in is not None and 0 < deadline_in < pause:
                pause = deadline_in  # wake up to report the loss on time
            self._stop.wait(max(0.0, pause))
        self._report()

    def _report(self) -> None:
        leading = self.is_leader()
        with self._lock:
            if leading == self._reported:
                return
            self._reported = leading
        if not leading:
            (log.info if self._stopping else log.warning)(
                "stopped leading", lease=f"{self.namespace}/{self.name}", identity=self.identity
            )
        else:
            log.info("leading", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        if self._on_change is not None:
            try:
                self._on_change(leading)
            except Exception as exc:
                log.error("leadership callback failed", reason=f"{type(exc).__name__}: {exc}")


class AlwaysLeader:
    """For runs without Kubernetes: the same interface as LeaseElector, always leading until stopped."""

    def __init__(self, identity: str | None = None, on_change: Callable[[bool], object] | None = None) -> None:
        self.identity = identity or default_identity()
        self._on_change = on_change
        self._stopped = False

    def __repr__(self) -> str:
        return f"AlwaysLeader(identity={self.identity!r})"

    @property
    def holder(self) -> str | None:
        return None if self._stopped else self.identity

    def is_leader(self) -> bool:
        return not self._stopped

    def start(self) -> None:
        self._stopped = False
        if self._on_change is not None:
            self._on_change(True)

    def stop(self, release: bool = True, timeout: float | None = None) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._on_change is not None:
            self._on_change(False)

    def publish(self, key: str, value: str) -> bool:
        """No Lease to write to: the state file is the whole record. True while leading."""
        return self.is_leader()

    def inherited(self, key: str) -> str | None:
        return None

    def annotation(self, key: str) -> str | None:
        return None

    def wait_until_leader(self, timeout: float | None = None) -> bool:
        return self.is_leader()

    def try_acquire_or_renew(self) -> bool:
        return self.is_leader()

    def __enter__(self) -> AlwaysLeader:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class LeaseSettings:
    """What leader election reads from the operator's settings (run/settings.py builds it)."""

    enabled: bool = False  # leaderElection
    name: str = "pulsar-lb-operator"  # leaseName
    namespace: str | None = None  # leaseNamespace; None: the pod's own
    duration_s: float = 15.0  # leaseDurationSeconds
    renew_deadline_s: float = 10.0  # renewDeadlineSeconds
    retry_period_s: float = 2.0  # retryPeriodSeconds


def elector_from_settings(
    settings: LeaseSettings,
    on_change: Callable[[bool], object] | None = None,
    *,
    client: LeaseClient | None = None,
    identity: str | None = None,
) -> LeaseElector | AlwaysLeader:
    """A LeaseElector when ``leaderElection`` is on (in-cluster API access unless ``client`` is given),
    else an AlwaysLeader. Raises ConfigError, naming the key, when the pod cannot do leader election."""
    if not settings.enabled:
        return AlwaysLeader(identity, on_change)
    return LeaseElector(
        settings.name,
        settings.namespace,
        client=client,
        identity=identity,
        lease_duration=settings.duration_s,
        renew_deadline=settings.renew_deadline_s,
        retry_period=settings.retry_period_s,
        on_change=on_change,
    )


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _micro_time() -> str:
    """A metav1.MicroTime: RFC 3339 in UTC with microseconds (informative only: we never trust it)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
