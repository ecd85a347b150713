"""The pause every replica obeys: ``operator pause`` written on the leader-election Lease, not only in one pod.

A pause file lives on one pod's volume: with leader election (the chart's default) a standby that takes over,
or a pod rescheduled onto a fresh ``emptyDir``, would start without it and act. So where leader election is on,
``operator pause`` and the status page's Pause also write the pause as an annotation of the Lease every replica
reads every ``retryPeriodSeconds``. The leader reads it at each renewal — it cannot act without renewing — and a
standby reads it before it leads; it stays through upgrades, rescheduling and takeovers until ``operator
resume`` removes it (a Lease is not part of the chart: it outlives ``helm uninstall`` too).

Fail-safe as the file is: an annotation that is there is a pause, whatever it holds. The writes are a read
and a replace carrying the ``resourceVersion`` read, retried on 409 Conflict (the leader renews every two
seconds), so a pause never undoes a renewal, nor a renewal a pause.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pulsar_lb_operator.act.safety import KillSwitch, noted
from pulsar_lb_operator.run.leadership import LeaseSettings
from pulsar_lb_operator.run.lease_client import LeaseApiError, LeaseClient, LeaseConflict, pod_namespace
from pulsar_lb_operator.store.control import pause_note
from pulsar_lb_operator.strategies import ConfigError

PAUSE_ANNOTATION = "pulsar-lb-operator/pause"
WRITE_ATTEMPTS = 5  # each a read and a replace; a conflict means the leader renewed in between: read again


def note(by: str, reason: str, since_ms: int) -> str:
    """The annotation's value: the pause file's document, who, why and since when."""
    return json.dumps(pause_note(by, reason, since_ms))


def switch(value: str | None, lease: str) -> KillSwitch | None:
    """The Lease's switch from its annotation's value; None when there is none. On whatever the value holds."""
    if value is None:
        return None
    return noted(KillSwitch(f"Lease {lease} holds a pause", source="lease"), value)


@dataclass(frozen=True)
class Written:
    """A write that reached the API server: the Lease as it answered, and whether the pause was there before."""

    lease: dict[str, Any]
    was_paused: bool
    earlier: KillSwitch | None = None  # a pause someone wrote there before, whose note was kept (not written over)

    @property
    def version(self) -> str | None:
        return (self.lease.get("metadata") or {}).get("resourceVersion")

    @property
    def holder(self) -> str:
        return (self.lease.get("spec") or {}).get("holderIdentity") or ""


class SharedPause:
    """Reads and writes the pause on one Lease (``namespace/name``) through ``client``."""

    def __init__(self, client: LeaseClient, namespace: str, name: str, timeout: float = 5.0) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.timeout = timeout

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_settings(cls, settings: LeaseSettings) -> SharedPause | None:
        """In the pod, for the Lease leader election uses; None without leader election. Raises ConfigError
        (one line, naming what is missing) outside a pod."""
        if not settings.enabled:
            return None
        client = LeaseClient.in_cluster()
        namespace = settings.namespace or pod_namespace()
        if not namespace:
            client.close()
            raise ConfigError("leaseNamespace: not set, and the pod's namespace is not readable (not in a pod?)")
        return cls(client, namespace, settings.name)

    def read(self) -> KillSwitch | None:
        """The pause on the Lease now (a request); LeaseApiError when the API server does not answer."""
        lease = self.client.get(self.namespace, self.name, timeout=self.timeout)
        return switch(_annotations(lease).get(PAUSE_ANNOTATION), self.lease)

    def pause(self, value: str) -> Written:
        """Write the pause (``value``: ``note(...)``), unless one with a note is there already, which is kept
        (``Written.earlier``). Raises LeaseApiError when it could not be written."""
        written = self._write(value)
        assert written is not None  # a pause is always written: onto a new Lease when there is none
        return written

    def resume(self) -> bool:
        """Remove the pause; True when there was one. Raises LeaseApiError when it could not be removed."""
        written = self._write(None)
        return written is not None and written.was_paused

    def _write(self, value: str | None) -> Written | None:
        for _ in range(WRITE_ATTEMPTS):
            lease = self.client.get(self.namespace, self.name, timeout=self.timeout)
            if lease is None:
                if value is None:
                    return None
                try:  # nobody leads yet: a Lease held by nobody, which the first replica takes over with the pause
                    return Written(self.client.create(self.namespace, self._unheld(value), timeout=self.timeout), False)
                except LeaseConflict:
                    continue
            annotations = _annotations(lease)
            was = PAUSE_ANNOTATION in annotations
            if value is None and not was:
                return Written(lease, False)
            earlier = switch(annotations.get(PAUSE_ANNOTATION), self.lease)
            if value is not None and earlier is not None and earlier.by:  # a second pause keeps the first's note
                return Written(lease, True, earlier)
            if value is None:
                annotations.pop(PAUSE_ANNOTATION)
            else:
                annotations[PAUSE_ANNOTATION] = value
            metadata = {k: v for k, v in (lease.get("metadata") or {}).items() if k != "managedFields"}
            body = {**lease, "metadata": {**metadata, "annotations": annotations}}
            try:
                return Written(self.client.replace(self.namespace, self.name, body, timeout=self.timeout), was)
            except LeaseConflict:
                continue
        raise LeaseApiError(f"Lease {self.lease}: still changing after {WRITE_ATTEMPTS} tries (409 Conflict)")

    def wait_read_by_holder(
        self, written: Written, within_s: float, sleep: Callable[[float], None] = time.sleep
    ) -> bool:
        """True once the Lease's holder has renewed over ``written`` — a renewal is a replace carrying the version it
        read, so it read this pause — within ``within_s``; False when it did not (it then cannot renew either,
        and stops acting at its renew deadline)."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            sleep(0.1)
            try:
                lease = self.client.get(self.namespace, self.name, timeout=self.timeout)
            except LeaseApiError:
                continue
            if lease is None:  # deleted: the pause went with it
                return False
            if (lease.get("metadata") or {}).get("resourceVersion") != written.version:
                return True
        return False

    def close(self) -> None:
        self.client.close()

    def _unheld(self, value: str) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace, "annotations": {PAUSE_ANNOTATION: value}},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": 0},
        }


def _annotations(lease: dict[str, Any] | None) -> dict[str, str]:
    annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
    return dict(annotations) if isinstance(annotations, dict) else {}
