"""Audit events: every plan and action outcome, spooled locally and published to a Pulsar topic."""

from pulsar_lb_operator.audit.events import CycleContext, plan_events, record_event
from pulsar_lb_operator.audit.publisher import AuditPublisher
from pulsar_lb_operator.audit.spool import Spool, SpoolFullError

__all__ = [
    "AuditPublisher",
    "CycleContext",
    "Spool",
    "SpoolFullError",
    "plan_events",
    "record_event",
]
