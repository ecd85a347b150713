"""Errors of admin API calls. Every error carries the URL and, when there was one, the HTTP status.

AdminError
├── TransportError        connection refused, reset, timed out (no HTTP answer)
├── RedirectError         a 307 loop or too many hops
├── BadResponse           a 2xx whose body is not what the endpoint returns
└── (HTTP status errors, with Pulsar's ``reason`` when the body has one)
    ├── Unauthorized      401 / 403
    ├── NotFound          404
    ├── Conflict          409
    ├── PreconditionFailed 412
    └── ServerError       5xx
"""

from __future__ import annotations


class AdminError(Exception):
    status: int | None = None

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


def error_for(status: int) -> type[AdminError]:
    if status in (401, 403):
        return Unauthorized
    if status >= 500:
        return ServerError
    return {404: NotFound, 409: Conflict, 412: PreconditionFailed}.get(status, AdminError)
