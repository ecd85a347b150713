"""A thin client for Pulsar's admin REST API (shared/reference/pulsar-admin-api.md §1)."""

from pulsar_lb_operator.adminapi.client import AdminClient, Answer, Timeouts
from pulsar_lb_operator.adminapi.errors import (
    AdminError,
    AuthenticationError,
    BadResponse,
    Conflict,
    NotFound,
    PreconditionFailed,
    RedirectError,
    ServerError,
    TransportError,
    Unauthorized,
)

__all__ = [
    "AdminClient",
    "AdminError",
    "Answer",
    "AuthenticationError",
    "BadResponse",
    "Conflict",
    "NotFound",
    "PreconditionFailed",
    "RedirectError",
    "ServerError",
    "Timeouts",
    "TransportError",
    "Unauthorized",
]
