"""The daemon's status page (beside /metrics): brokers now and over the last hour, the last cycles with
their outcomes, proposals waiting for approval (with approve / reject buttons), drains in progress, and the
kill switch (who set it, why, since when) with Pause / Resume.

One template, no JavaScript: forms POST and the page redirects back to itself. Reading needs the admin token
when the operator has one; every change needs the control token (``control_auth`` says how, ``control_api``
carries the changes out). Without a control token the page is read-only and shows no buttons.
``GET /api/status`` gives the same data as JSON.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import structlog

from pulsar_lb_operator.run import control_api, control_auth, workflows
from pulsar_lb_operator.run.daemon_view import DaemonView
from pulsar_lb_operator.store.control import Control, ControlError
from pulsar_lb_operator.strategies import ConfigError, Split

log = structlog.get_logger(__name__)

Answer = control_api.Answer
HOUR_MS = 3_600_000
HTML = "text/html; charset=utf-8"


def _admin_token(daemon: DaemonView) -> str | None:
    try:
        return daemon.settings.auth().token()
    except Exception:  # an unreadable token file: the page stays locked rather than open
        return "\0unreadable"


def _control_token(daemon: DaemonView) -> str | None:
    """None (read-only) when none is configured, and when the file cannot be read now: never open by accident."""
    try:
        return daemon.settings.control_token()
    except ConfigError as exc:
        log.error("the status page is read-only", reason=str(exc))
        return None


def handle(
    daemon: DaemonView, method: str, path: str, headers: control_auth.Headers, body: bytes, remote: str
) -> Answer:
    route = path.split("?", 1)[0].rstrip("/") or "/"
    control_token = _control_token(daemon)
    caller = control_auth.identify(headers, _admin_token(daemon), control_token, time.time())
    if route == "/login":  # open: it shows nothing, and takes only the control token
        if method == "POST":
            return control_api.login(headers, body, control_token, remote)
        return 200, LOGIN.format(form=_sign_in(control_token)).encode(), HTML, {}
    if not caller.read:
        challenge = {"WWW-Authenticate": 'Basic realm="pulsar-lb-operator"'}
        return 401, UNAUTHORIZED.encode(), HTML, challenge
    if method == "GET" and route == "/":
        return 200, render(daemon, caller, control_token).encode(), HTML, {}
    if method == "GET" and route == "/api/status":
        return 200, json.dumps(status(daemon), indent=1).encode(), "application/json", {}
    if method != "POST":
        return 404, b"not found", "text/plain", {}
    return control_api.change(daemon, route, headers, body, caller, control_token, remote)


# ---------------------------------------------------------------------------------------------- data


def status(daemon: DaemonView, controls: bool | None = None) -> dict[str, Any]:
    """The page's data; ``controls``: whether a control token is configured (None: read it now). A control file
    that cannot be read leaves out the proposals and drains, and says why (``controlFile``), but never the kill
    switch: Pause and Resume work whatever that file holds, and a person must see and reach them. A cycle that
    failed since the last good one says when and why (``lastFailure``): the figures are then as of ``usageAt``."""
    try:
        control, unreadable = daemon.control.read(), None
    except ControlError as exc:
        control, unreadable = Control(), str(exc)
    switch = daemon.executor.safety.kill_switch()
    last = daemon.recent[-1] if daemon.recent else None
    now_ms = daemon.executor.now_ms()
    usage_now = dict(daemon.usage[-1][1]) if daemon.usage else {}
    history = [(at, u) for at, u in daemon.usage if at >= now_ms - HOUR_MS]
    return {
        "cluster": daemon.cluster,
        "dryRun": daemon.settings.dryRun,
        "approval": daemon.settings.approval,
        "leader": daemon.elector is None or daemon.elector.is_leader(),
        "killSwitch": switch.to_json() if switch else {"on": False},
        "controls": "enabled" if (_control_token(daemon) if controls is None else controls) else "read-only",
        "builtinBalancer": daemon.builtin_balancer(),
        "brokers": {
            b: {"usage": round(u, 1), "hour": [round(h.get(b, 0.0), 1) for _, h in history]}
            for b, u in sorted(usage_now.items())
        },
        "spread": workflows.spread(usage_now.values()),
        "usageAt": daemon.usage[-1][0] if daemon.usage else None,
        "lastFailure": {"at": daemon.failure[0], "reason": daemon.failure[1]} if daemon.failure else None,
        "controlFile": {"error": unreadable} if unreadable else {"ok": True},
        "cycles": [_cycle(r) for r in reversed(daemon.recent)],
        "proposals": [dict(p) for p in workflows.still_pending(control.proposals)],
        "decided": [p for _, p in sorted(control.proposals.items(), reverse=True) if p["status"] not in ("pending",)],
        "drains": {
            b: {**d, "bundlesLeft": workflows.bundles_left(last.snapshot if last else None, b)}
            for b, d in sorted(control.drains.items())
        },
    }


def _cycle(result: Any) -> dict[str, Any]:
    return {
        "id": result.cycle_id,
        "at": result.plan.taken_at if result.plan else None,
        "skippedBrokers": result.skipped_brokers,
        "actions": [
            {
                "type": "split" if isinstance(r.action, Split) else "unload",
                "bundle": r.action.bundle,
                "source": r.action.source,
                "destination": getattr(r.action, "destination", None),
                "outcome": r.outcome.value,
                "detail": r.detail,
            }
            for r in (*result.verifications, *result.records)
        ],
    }


# ---------------------------------------------------------------------------------------------- page


def _sparkline(points: list[float]) -> str:
    if len(points) < 2:
        return ""
    top = max(100.0, *points)
    step = 160 / (len(points) - 1)
    path = " ".join(f"{i * step:.1f},{30 - 30 * p / top:.1f}" for i, p in enumerate(points))
    return f'<svg width="160" height="30" role="img"><polyline fill="none" stroke="#36c" points="{path}"/></svg>'


def _when(ms: Any) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) if isinstance(ms, int | float) else ""


def _button(action: str, label: str, csrf: str, extra: str = "") -> str:
    """A one-button form; nothing without a session's CSRF value (no control credential, or read-only)."""
    if not csrf:
        return ""
    return (
        f'<form method="post" action="{html.escape(action)}" style="display:inline">'
        f'<input type="hidden" name="csrf" value="{csrf}">{extra}<button type="submit">{label}</button></form>'
    )


def render(daemon: DaemonView, caller: control_auth.Caller, control_token: str | None) -> str:
    data = status(daemon, controls=control_token is not None)
    csrf = caller.csrf(control_token)
    e = html.escape
    brokers = (
        "".join(
            f"<tr><td>{e(b)}</td><td class=n>{v['usage']:.1f}%</td><td>{_sparkline(v['hour'])}</td></tr>"
            for b, v in data["brokers"].items()
        )
        or '<tr><td colspan="3">no cycle yet</td></tr>'
    )
    unreadable = data["controlFile"].get("error")
    nothing = f"<b class=on>unknown: {e(unreadable)}</b>" if unreadable else "none"
    proposals = "".join(_proposal_row(p, csrf) for p in data["proposals"]) or f'<tr><td colspan="7">{nothing}</td></tr>'
    drains = (
        "".join(
            f"<tr><td>{e(b)}</td><td class=n>{'?' if d['bundlesLeft'] is None else d['bundlesLeft']}</td>"
            f"<td>{_when(d.get('since'))}</td><td>{_button(f'/drains/{quote(b)}/undrain', 'Undrain', csrf)}</td></tr>"
            for b, d in data["drains"].items()
        )
        or f'<tr><td colspan="4">{nothing}</td></tr>'
    )
    failure = data["lastFailure"]
    failed = (
        f'<p id="failure" class="on">the last cycle failed at {_when(failure["at"])} UTC: {e(failure["reason"])}; '
        + (f"the figures below are from {_when(data['usageAt'])} UTC</p>" if data["usageAt"] else "no figures yet</p>")
        if failure
        else ""
    )
    cycles = (
        "".join(
            f"<tr><td>{e(c['id'])}</td><td>{_when(c['at'])}</td><td><ul>"
            + "".join(
                f"<li>{e(a['type'])} {e(a['bundle'])} {e(a['source'])} → {e(a['destination'] or '')}: "
                f"<b class='{e(a['outcome'])}'>{e(a['outcome'])}</b> <small>{e(a['detail'])}</small></li>"
                for a in c["actions"]
            )
            + (f"<li><small>left out: {e(', '.join(c['skippedBrokers']))}</small></li>" if c["skippedBrokers"] else "")
            + "</ul></td></tr>"
            for c in data["cycles"]
        )
        or '<tr><td colspan="3">none yet</td></tr>'
    )
    mode = "dry run" if data["dryRun"] else "acting"
    builtin = data["builtinBalancer"] or {"state": "not read yet", "held": None}
    role = "leader" if data["leader"] else "standby"
    drain_form = _button("/drains", "Drain", csrf, '<input name="broker" placeholder="host:port" required> ')
    return PAGE.format(
        cluster=e(data["cluster"]),
        mode=mode,
        role=role,
        approval=e(data["approval"]),
        builtin=e(builtin["held"] or f"Pulsar's own balancer: {builtin['state']}"),
        spread=data["spread"],
        at=_when(data["usageAt"]) + " UTC" if data["usageAt"] else "no cycle yet",
        failure=failed,
        switch=_switch(data["killSwitch"], csrf),
        access=_access(control_token, caller, csrf),
        brokers=brokers,
        proposals=proposals,
        drains=drains,
        drain_form=drain_form,
        cycles=cycles,
    )


def _switch(switch: Mapping[str, Any], csrf: str) -> str:
    e = html.escape
    if not switch["on"]:
        reason = '<input name="reason" placeholder="why (shown here)" size="30"> '
        return f'<p id="kill-switch" class="off">off: the operator acts</p>{_button("/pause", "Pause", csrf, reason)}'
    who = f"paused by {e(switch['by'])}" if switch["by"] else ""
    why = f": <q>{e(switch['reason'])}</q>" if switch["reason"] else ""
    since = f", since {_when(switch['since'])} UTC" if switch.get("since") else ""
    text = f'<p id="kill-switch" class="on"><b>ON: nothing is sent</b> ({who}{why}{"; " if who else ""}'
    text += f"{e(switch['where'])}{since})</p>"
    if switch["source"] == "environment":
        return text + "<p>set in the operator's environment: turn it off there and restart</p>"
    return text + _button("/resume", "Resume", csrf)


def _access(control_token: str | None, caller: control_auth.Caller, csrf: str) -> str:
    if control_token is None:
        return '<p id="access">read-only: no controlTokenFile is configured, so this page changes nothing</p>'
    if csrf:
        return f'<p id="access">signed in to control {_button("/logout", "Sign out", csrf)}</p>'
    return f'<div id="access">{_sign_in(control_token)}</div>'


def _sign_in(control_token: str | None) -> str:
    if control_token is None:
        return "<p>read-only: no controlTokenFile is configured</p>"
    return (
        '<form method="post" action="/login"><label>control token <input type="password" name="token" '
        'autocomplete="current-password" required></label> <button type="submit">Sign in</button></form>'
    )


def _proposal_row(proposal: Mapping[str, Any], csrf: str) -> str:
    e = html.escape
    pid = str(proposal["id"])
    buttons = ""
    if proposal["status"] == "pending":
        buttons = _button(f"/proposals/{quote(pid)}/approve", "Approve", csrf)
        buttons += _button(f"/proposals/{quote(pid)}/reject", "Reject", csrf)
    actions = "".join(_action_line(a) for a in proposal["actions"])
    return (
        f"<tr><td>{e(pid)}</td><td>{e(proposal['status'])}</td><td>{_when(proposal.get('createdAt'))}</td>"
        f"<td>{_when(proposal.get('expiresAt'))}</td>"
        f"<td class=n>{proposal['spreadBefore']} → {proposal['spreadAfter']}</td>"
        f"<td><ul>{actions}</ul></td><td>{buttons}</td></tr>"
    )


def _action_line(action: Mapping[str, Any]) -> str:
    e = html.escape
    where = f"{action['source']} → {action.get('destination') or '(split)'}"
    reason = e(action.get("reason", ""))
    return f"<li>{e(action['type'])} {e(action['bundle'])} {e(where)}<br><small>{reason}</small></li>"


STYLE = """<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; color: #222 }}
table {{ border-collapse: collapse; margin-bottom: 1.5em }} td, th {{ border-bottom: 1px solid #ddd; padding: .3em .6em;
vertical-align: top; text-align: left }} .n {{ text-align: right }} ul {{ margin: 0; padding-left: 1.2em }}
.unknown, .failed, .on {{ color: #b00 }} .executed, .moved_as_planned, .split_done {{ color: #070 }}
</style>"""

PAGE = (
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pulsar-lb-operator: {cluster}</title>
"""
    + STYLE
    + """</head><body>
<h1>pulsar-lb-operator — {cluster}</h1>
<p id="mode">{mode}, {role}; approval: {approval}; spread: <b id="spread">{spread}</b> points ({at})</p>
{failure}
{access}
<h2>Kill switch</h2>
{switch}
<p id="builtin">{builtin}</p>
<h2>Brokers</h2>
<table id="brokers"><tr><th>broker</th><th>usage</th><th>last hour</th></tr>{brokers}</table>
<h2>Proposals</h2>
<table id="proposals"><tr><th>id</th><th>status</th><th>made</th><th>expires</th><th>spread</th>
<th>actions</th><th></th></tr>{proposals}</table>
<h2>Drains</h2>
<table id="drains"><tr><th>broker</th><th>bundles left</th><th>since</th><th></th></tr>{drains}</table>
{drain_form}
<h2>Last cycles</h2>
<table id="cycles"><tr><th>cycle</th><th>at</th><th>actions</th></tr>{cycles}</table>
</body></html>
"""
)

LOGIN = (
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pulsar-lb-operator: sign in</title>
"""
    + STYLE
    + """</head><body><h1>pulsar-lb-operator</h1>{form}<p><a href="/">the status page</a></p></body></html>
"""
)

UNAUTHORIZED = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>token required</title></head>
<body><p>token required: the admin token as the password (any user name), or
<a href="/login">sign in with the control token</a>.</p></body></html>
"""
