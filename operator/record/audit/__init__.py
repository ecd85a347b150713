"""Audit events: every plan and action outcome, spooled locally and published to a Pulsar topic."""

from pulsar_lb_operator.record.audit.events import CycleContext, plan_events, record_event
from pulsar_lb_operator.record.audit.publisher import AuditPublisher
from pulsar_lb_operator.record.audit.spool import Spool, SpoolFullError

__all__ = [
    "AuditPublisher",
    "CycleContext",
    "Spool",
    "SpoolFullError",
    "plan_events",
    "record_event",
]
