"""The status page's mutating requests: sign in and out, approve, reject, drain, undrain, pause, resume.

Each is checked in the same order — a control token configured (else the page is read-only), the caller's
control credential, then for a browser session its origin and its form's CSRF value (``control_auth``) —
and then asked the question the commands ask (``workflows.refusal``): will this daemon carry it out? A
standby, or an approval while ``approval`` is auto, is a 409 with the reason, never a redirect that looks
like success. Every mutating request, done or refused, is logged with the remote address and what it asked.

A browser's post answers ``303`` back to the page; a script's (``Authorization: Bearer``) answers 200 with
one line of text.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import parse_qs, unquote

import structlog

from pulsar_lb_operator.act.safety import KillSwitch
from pulsar_lb_operator.run import control_auth, workflows
from pulsar_lb_operator.run.daemon_view import DaemonView
from pulsar_lb_operator.run.lease_client import LeaseApiError
from pulsar_lb_operator.run.lease_pause import SharedPause
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.store import control as control_store
from pulsar_lb_operator.store.control import ControlError
from pulsar_lb_operator.strategies import UserError

log = structlog.get_logger(__name__)

Answer = tuple[int, bytes, str, dict[str, str]]
BROKER_ID = re.compile(r"^[^\s/:]+:\d{1,5}$")


class Refused(UserError):
    """A request not carried out: its HTTP status and one line saying why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def form_of(body: bytes) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", errors="replace")).items()}


def login(headers: control_auth.Headers, body: bytes, control_token: str | None, remote: str) -> Answer:
    """``POST /login``: the control token from the form, for a session cookie."""
    if control_token is None:
        return _refuse(remote, "login", "", 403, "read-only: no controlTokenFile is configured")
    if not control_auth.same_origin(headers):
        return _refuse(remote, "login", "", 403, "cross-origin sign-in refused")
    if not control_auth.equal(form_of(body).get("token", "").strip(), control_token):
        return _refuse(remote, "login", "", 403, "wrong control token")
    log.warning("control request", action="login", remote=remote, outcome="done")
    cookie = control_auth.set_cookie(control_auth.new_session(control_token, time.time()))
    return 303, b"", "text/plain", {"Location": "/", "Set-Cookie": cookie}


def change(
    daemon: DaemonView,
    route: str,
    headers: control_auth.Headers,
    body: bytes,
    caller: control_auth.Caller,
    control_token: str | None,
    remote: str,
) -> Answer:
    """Every other POST: checked, carried out, logged."""
    parts = [unquote(p) for p in route.strip("/").split("/")]
    form = form_of(body)
    action, target = _name(parts, form)
    if action is None:
        return 404, b"not found", "text/plain", {}
    try:
        if control_token is None:
            raise Refused(403, "read-only: no controlTokenFile is configured, so nothing can be changed here")
        if not caller.control:
            raise Refused(403, "the control token is required: sign in on the page, or send Authorization: Bearer")
        if not caller.bearer:
            if not control_auth.same_origin(headers):
                raise Refused(403, "cross-origin request refused")
            if not control_auth.csrf_ok(form.get("csrf", ""), control_token, caller):
                raise Refused(403, "stale or foreign form: reload the page")
        if action == "logout":
            if caller.session:
                control_auth.SESSIONS.end(caller.session)  # a copy of the cookie is worth nothing from now on
            log.warning("control request", action=action, remote=remote, outcome="done")
            return 303, b"", "text/plain", {"Location": "/", "Set-Cookie": control_auth.set_cookie("", 0)}
        message = _carry_out(daemon, action, target, form, remote)
    except Refused as exc:
        return _refuse(remote, action, target, exc.status, str(exc))
    log.warning("control request", action=action, target=target, remote=remote, outcome="done", result=message)
    if caller.bearer:
        return 200, message.encode(), "text/plain; charset=utf-8", {}
    return 303, b"", "text/plain", {"Location": "/"}


def _name(parts: list[str], form: Mapping[str, str]) -> tuple[str | None, str]:
    """(action, what it acts on) of a route; (None, "") for an unknown one."""
    if parts in (["pause"], ["resume"], ["logout"]):
        return parts[0], ""
    if parts == ["drains"]:
        return "drain", form.get("broker", "").strip()
    if len(parts) == 3 and parts[0] == "drains" and parts[2] == "undrain":
        return "undrain", parts[1]
    if len(parts) == 3 and parts[0] == "proposals" and parts[2] in ("approve", "reject"):
        return parts[2], parts[1]
    return None, ""


def _carry_out(daemon: DaemonView, action: str, target: str, form: Mapping[str, str], remote: str) -> str:
    by = f"status page ({remote})"
    now = daemon.executor.now_ms()
    safety = daemon.executor.safety
    leading = daemon.elector is None or daemon.elector.is_leader()
    record = workflows.daemon_record(daemon, leading)
    shared = daemon.shared_pause
    if action in ("drain", "undrain", "approve", "reject") or (action == "pause" and not leading and shared is None):
        why_not = workflows.refusal(record, action, safety.kill_switch() is not None)
        if why_not:
            raise Refused(409, why_not)
    try:
        if action == "pause":
            reason = form.get("reason", "").strip()[:500]
            note, earlier = workflows.pause_file(daemon.settings.kill_switch_file(), by, reason, now)
            if shared is None:
                return workflows.kept(earlier) + "paused: nothing is sent from the next call on"
            return _share(shared, note, leading, daemon.settings, earlier)
        if action == "resume":
            removed = control_store.remove_pause(daemon.settings.kill_switch_file())
            if shared is not None:
                removed = _unshare(shared, removed) or removed
            still = safety.kill_switch()
            if still is not None and still.source != "lease":  # the elector reads the Lease again within seconds
                raise Refused(409, f"{'pause removed, but ' if removed else ''}{still.line()}: restart without it")
            return "resumed" if removed else "was not paused"
        if action == "drain":
            active = _check_broker(daemon, target)
            entry = {"since": now, "by": by}
            daemon.control.update(lambda doc: workflows.add_drain(doc, target, active, entry))
            return workflows.drain_outcome(target, record, safety.kill_switch() is not None)
        if action == "undrain":
            was = daemon.control.update(lambda doc: doc.drains.pop(target, None))
            return f"{target}: {'no longer drained' if was else 'was not being drained'}"
        daemon.control.update(lambda doc: doc.decide(target, action == "approve", now, by))
        return f"proposal {target} " + (workflows.approval_outcome(record) if action == "approve" else "rejected")
    except ControlError as exc:
        raise Refused(409, str(exc)) from None
    except OSError as exc:  # the control or pause file cannot be written: the request did not happen
        raise Refused(503, f"not recorded: {exc.strerror or exc}") from None


def _share(
    shared: SharedPause, note: str, leading: bool, settings: OperatorSettings, earlier: KillSwitch | None
) -> str:
    try:
        within, path = settings.renewDeadlineSeconds, settings.kill_switch_file()
        return workflows.share_pause(shared, note, leading, within, path, earlier)
    except LeaseApiError as exc:
        if not leading:  # this standby's file stops nobody
            raise Refused(
                503,
                f"the leader is not paused: Lease {shared.lease} could not be written ({exc}); this standby's file "
                "stops it alone",
            ) from None
        return workflows.kept(earlier) + (
            f"paused this instance only: Lease {shared.lease} could not be written ({exc}); a standby that takes "
            "over would act: pause again, or set killSwitch=true"
        )


def _unshare(shared: SharedPause, removed_file: bool) -> bool:
    """Remove the pause from the Lease; True when there was one. Refused when it could not be removed."""
    try:
        return shared.resume()
    except LeaseApiError as exc:
        file = "the pause file was removed, but " if removed_file else ""
        raise Refused(
            503, f"{file}Lease {shared.lease} still holds the pause ({exc}): nothing is sent; try again"
        ) from None


def _check_broker(daemon: DaemonView, broker: str) -> Collection[str]:
    """The active brokers, as the last cycle read them, when ``broker`` is one of them; refused otherwise."""
    if not BROKER_ID.match(broker):
        raise Refused(400, f"{broker!r} is not a broker id (host:port, as the admin API lists it)")
    last = daemon.recent[-1].snapshot if daemon.recent else None
    if last is None:
        raise Refused(409, "no cycle has read the cluster yet, so the broker cannot be checked: try again after one")
    if broker not in last.brokers:
        raise Refused(409, f"{broker} is not an active broker (active: {', '.join(sorted(last.brokers))})")
    return last.brokers.keys()


def _refuse(remote: str, action: str | None, target: Any, status: int, reason: str) -> Answer:
    log.warning("control request", action=action, target=target, remote=remote, outcome="refused", reason=reason)
    return status, reason.encode(), "text/plain; charset=utf-8", {}
