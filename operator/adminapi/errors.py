"""Errors of admin API calls. Every error carries the URL and, when there was one, the HTTP status.

AdminError (a ClusterError: exit 1)
├── TransportError        connection refused, reset, timed out (no HTTP answer)
├── RedirectError         a 307 loop or too many hops
├── BadResponse           a 2xx whose body is not what the endpoint returns
└── (HTTP status errors, with Pulsar's ``reason`` when the body has one)
    ├── Unauthorized      401 / 403
    ├── NotFound          404
    ├── Conflict          409
    ├── PreconditionFailed 412
    └── ServerError       5xx
AuthenticationError       no credentials to send (OAuth2 token endpoint down, unreadable token file):
                          nothing was sent (``sent`` is False)

``in_transition`` is True when the answer says the bundle is already being unloaded, transferred or
changing owner (TRANSITION_MARKERS): the executor still counts it as an unknown outcome, but says so.
"""

from __future__ import annotations

from pulsar_lb_operator.strategies.errors import ClusterError

# What Pulsar answers when an unload or split meets a bundle whose ownership is already changing:
# - 500 "Namespace bundle <b> is being unloaded": NamespaceService.findBrokerServiceUrl, when the ownership
#   record is disabled (modular load manager: its owner is closing the bundle's topics);
# - 500 "Namespace is not active. ns:<b>; state:0": OwnedBundle.handleUnloadRequest, a second unload that
#   reaches the owner while the first is under way;
# - 409 "Concurrent modification": resumeAsyncResponseExceptionally for a metadata BadVersionException
#   (another writer changed the ownership or bundle record in between);
# - any reason that says "in transition" itself.
TRANSITION_MARKERS = ("is being unloaded", "namespace is not active", "concurrent modification", "in transition")


# ExtensibleLoadManagerImpl.unloadNamespaceBundleAsync, for a destinationBroker the owner's id ends with: an
# IllegalArgumentException "Namespace bundle: <b> own by <owner>, cannot be transfer to same broker." (a 500).
SAME_BROKER_MARKER = "cannot be transfer to same broker"


def already_on_destination(text: str) -> bool:
    """Whether an unload's error says the bundle is already owned by the destination it was sent to (ELM)."""
    return SAME_BROKER_MARKER in text.lower()


def in_transition(text: str) -> bool:
    """Whether an error body or reason says the bundle is already being unloaded or moved."""
    lowered = text.lower()
    return any(marker in lowered for marker in TRANSITION_MARKERS)


class AdminError(ClusterError):
    status: int | None = None
    sent: bool = True  # False: the request never left this process
    in_transition: bool = False

    def __init__(self, url: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{message} ({url})")
        self.url = url
        self.reason = message
        if status is not None:
            self.status = status


class TransportError(AdminError):
    pass


class RedirectError(AdminError):
    pass


class BadResponse(AdminError):
    pass


class Unauthorized(AdminError):
    status = 401


class NotFound(AdminError):
    status = 404


class Conflict(AdminError):
    status = 409


class PreconditionFailed(AdminError):
    status = 412


class ServerError(AdminError):
    status = 500


class AuthenticationError(AdminError):
    """No credentials could be obtained for a call, so it was not sent."""

    sent = False


def error_for(status: int) -> type[AdminError]:
    if status in (401, 403):
        return Unauthorized
    if status >= 500:
        return ServerError
    return {404: NotFound, 409: Conflict, 412: PreconditionFailed}.get(status, AdminError)
