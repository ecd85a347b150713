"""What a user reads when something outside the operator is wrong: one line, what happened and the fix.

Used where an error reaches a person: the command line (``cli.main``) and the daemon's log. Nothing here
ever prints a secret: the admin token's *source* is named (the file, or the environment variable), never
its value.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import socket
from collections.abc import Sequence
from pathlib import Path

from pulsar_lb_operator.strategies import UserError

DISTRIBUTION = "pulsar-lb-operator"


def file_fix(exc: OSError, path: str | os.PathLike[str], writing: bool = False) -> str:
    """The fix for a file that cannot be opened, or "" when there is no simple one."""
    if exc.errno == errno.ENOENT:
        if writing:
            return f"create its directory {str(Path(path).parent)!r} first"
        where = "" if Path(path).is_absolute() else f" (relative to {os.getcwd()})"
        return f"check the path{where}"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        if writing:
            return f"choose a path this user (uid {os.getuid()}) may write"
        return f"make it readable by this user (uid {os.getuid()}), e.g. chmod a+r {path}"
    if exc.errno == errno.EISDIR:
        return "give the file, not a directory"
    return ""


def with_fix(message: str, fix: str) -> str:
    return f"{message}: {fix}" if fix else message


def port_in_use(what: str, host: str, port: int, exc: OSError, fix: str) -> str:
    """One line for a listening socket that could not be opened."""
    if exc.errno == errno.EADDRINUSE:
        return f"{what}: {host}:{port} is already in use by another program: {fix}"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{what}: not allowed to listen on {host}:{port} ({exc.strerror}; ports below 1024 need root): {fix}"
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EADDRNOTAVAIL, None) or isinstance(exc, socket.gaierror):
        # the address, not the port: no interface of this machine has it, or the name does not resolve
        return f"{what}: cannot listen on {host}:{port} ({reason}): {host} is no address of this machine"
    return f"{what}: cannot listen on {host}:{port} ({reason}): {fix}"


def admin_auth(exc: Exception, token_source: str) -> str | None:
    """Pulsar's meaning of a 401 or 403 from the admin API, or None for any other error. ``token_source``: where
    the token was read from (``AuthSettings.token_source``), never the token.

    Pulsar answers 401 with Jetty's HTML page when the request's authentication fails (no token, a wrong or
    expired one, one signed with another key), and 401 or 403 with ``{"reason": …}`` when the token is valid
    but its role may not make the call (the operator needs a super-user: ``superUserRoles`` in broker.conf).
    """
    status = getattr(exc, "status", None)
    if status not in (401, 403):
        return None
    reason = str(getattr(exc, "reason", "") or "")
    said = "" if not reason or reason.startswith("HTTP ") else reason  # "HTTP 401: <html>…" is no reason
    source = token_source
    if status == 401 and not said:
        return (
            "401 Unauthorized: the brokers did not accept the request's authentication — the token is missing, "
            f"wrong, expired or signed with another key; {source}. Give a valid token of a super-user role "
            "(--token-file FILE, or tokenFile in the settings)"
        )
    return (
        f"{status} {'Unauthorized' if status == 401 else 'Forbidden'}: Pulsar says {said!r} — the token was "
        f"accepted, but its role may not do this; {source}. Use a token of a role listed in superUserRoles "
        "(broker.conf)"
    )


def require_extra(extra: str, what: str, modules: Sequence[str]) -> None:
    """UserError with the pip command when a module ``what`` imports is not installed: it comes with ``extra``
    (pyproject.toml's optional dependencies), which the daemon's image and a plain ``pip install .`` leave out."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"{what} needs {', '.join(missing)} (the {extra} extra): pip install '{DISTRIBUTION}[{extra}]'")
