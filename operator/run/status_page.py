"""The daemon's status page (beside /metrics): brokers now and over the last hour, the last cycles with
their outcomes, proposals waiting for approval (with approve / reject buttons), and drains in progress.

One template, no JavaScript: forms POST and the page redirects back to itself. When the operator has
an admin token, the page and its actions require it — HTTP Basic with the token as the password (any
user name), or ``Authorization: Bearer <token>`` — the same secret the CLI's commands need. Every form
also carries a value derived from that secret (or, without a token, from a per-process random key):
a page of another site cannot know it, so it cannot make a logged-in browser approve anything.
``GET /api/status`` gives the same data as JSON.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

from pulsar_lb_operator.run import workflows
from pulsar_lb_operator.store.control import ControlError
from pulsar_lb_operator.strategies.plans import Split

if TYPE_CHECKING:
    from pulsar_lb_operator.run.daemon import Daemon

Answer = tuple[int, bytes, str, dict[str, str]]
_PROCESS_KEY = secrets.token_bytes(32)
HOUR_MS = 3_600_000


def _token(daemon: Daemon) -> str | None:
    try:
        return daemon.settings.token()
    except Exception:  # an unreadable token file: the page stays locked rather than open
        return "\0unreadable"


def authorized(headers: Mapping[str, str], token: str | None) -> bool:
    if token is None:
        return True
    given = headers.get("Authorization", "")
    if given.startswith("Bearer "):
        return hmac.compare_digest(given[7:].strip(), token)
    if given.startswith("Basic "):
        try:
            _, _, password = base64.b64decode(given[6:].strip()).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        return hmac.compare_digest(password, token)
    return False


def form_key(token: str | None) -> str:
    secret = token.encode() if token else _PROCESS_KEY
    return hmac.new(secret, b"pulsar-lb-operator status page", hashlib.sha256).hexdigest()[:32]


def handle(daemon: Daemon, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Answer:
    token = _token(daemon)
    if not authorized(headers, token):
        return 401, b"token required", "text/plain", {"WWW-Authenticate": 'Basic realm="pulsar-lb-operator"'}
    route = path.split("?", 1)[0].rstrip("/") or "/"
    if method == "GET" and route == "/":
        return 200, render(daemon, form_key(token)).encode(), "text/html; charset=utf-8", {}
    if method == "GET" and route == "/api/status":
        return 200, json.dumps(status(daemon), indent=1).encode(), "application/json", {}
    if method != "POST":
        return 404, b"not found", "text/plain", {}
    form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", errors="replace")).items()}
    if not hmac.compare_digest(form.get("key", ""), form_key(token)):
        return 403, b"stale or foreign form: reload the page", "text/plain", {}
    parts = [unquote(p) for p in route.strip("/").split("/")]
    now = daemon.executor.now_ms()
    try:
        if len(parts) == 3 and parts[0] == "proposals" and parts[2] in ("approve", "reject"):
            daemon.control.update(lambda doc: doc.decide(parts[1], parts[2] == "approve", now, "status page"))
        elif len(parts) == 3 and parts[0] == "drains" and parts[2] == "undrain":
            daemon.control.update(lambda doc: doc.drains.pop(parts[1], None))
        elif parts == ["drains"] and form.get("broker"):
            broker = form["broker"].strip()
            daemon.control.update(lambda doc: doc.drains.setdefault(broker, {"since": now, "by": "status page"}))
        else:
            return 404, b"not found", "text/plain", {}
    except ControlError as exc:
        return 409, str(exc).encode(), "text/plain", {}
    return 303, b"", "text/plain", {"Location": "/"}


# ---------------------------------------------------------------------------------------------- data


def status(daemon: Daemon) -> dict[str, Any]:
    control = daemon.control.read()
    last = daemon.recent[-1] if daemon.recent else None
    now_ms = daemon.executor.now_ms()
    usage_now = dict(daemon.usage[-1][1]) if daemon.usage else {}
    history = [(at, u) for at, u in daemon.usage if at >= now_ms - HOUR_MS]
    return {
        "cluster": daemon.cluster,
        "dryRun": daemon.settings.dryRun,
        "approval": daemon.settings.approval,
        "leader": daemon.elector is None or daemon.elector.is_leader(),
        "builtinBalancer": daemon.builtin_balancer(),
        "brokers": {
            b: {"usage": round(u, 1), "hour": [round(h.get(b, 0.0), 1) for _, h in history]}
            for b, u in sorted(usage_now.items())
        },
        "spread": workflows.spread(usage_now.values()),
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


def _button(action: str, label: str, key: str) -> str:
    return (
        f'<form method="post" action="{html.escape(action)}" style="display:inline">'
        f'<input type="hidden" name="key" value="{key}"><button type="submit">{label}</button></form>'
    )


def render(daemon: Daemon, key: str) -> str:
    data = status(daemon)
    e = html.escape
    brokers = (
        "".join(
            f"<tr><td>{e(b)}</td><td class=n>{v['usage']:.1f}%</td><td>{_sparkline(v['hour'])}</td></tr>"
            for b, v in data["brokers"].items()
        )
        or '<tr><td colspan="3">no cycle yet</td></tr>'
    )
    proposals = "".join(_proposal_row(p, key) for p in data["proposals"]) or '<tr><td colspan="7">none</td></tr>'
    drains = (
        "".join(
            f"<tr><td>{e(b)}</td><td class=n>{'?' if d['bundlesLeft'] is None else d['bundlesLeft']}</td>"
            f"<td>{_when(d.get('since'))}</td><td>{_button(f'/drains/{b}/undrain', 'Undrain', key)}</td></tr>"
            for b, d in data["drains"].items()
        )
        or '<tr><td colspan="4">none</td></tr>'
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
    return PAGE.format(
        cluster=e(data["cluster"]),
        mode=mode,
        role=role,
        approval=e(data["approval"]),
        builtin=e(builtin["held"] or f"Pulsar's own balancer: {builtin['state']}"),
        spread=data["spread"],
        brokers=brokers,
        proposals=proposals,
        drains=drains,
        cycles=cycles,
        key=key,
    )


def _proposal_row(proposal: Mapping[str, Any], key: str) -> str:
    e = html.escape
    pid = str(proposal["id"])
    buttons = ""
    if proposal["status"] == "pending":
        buttons = _button(f"/proposals/{pid}/approve", "Approve", key) + _button(
            f"/proposals/{pid}/reject", "Reject", key
        )
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


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pulsar-lb-operator: {cluster}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; color: #222 }}
table {{ border-collapse: collapse; margin-bottom: 1.5em }} td, th {{ border-bottom: 1px solid #ddd; padding: .3em .6em;
vertical-align: top; text-align: left }} .n {{ text-align: right }} ul {{ margin: 0; padding-left: 1.2em }}
.unknown, .failed {{ color: #b00 }} .executed, .moved_as_planned, .split_done {{ color: #070 }}
</style></head><body>
<h1>pulsar-lb-operator — {cluster}</h1>
<p id="mode">{mode}, {role}; approval: {approval}; spread now: <b id="spread">{spread}</b> points</p>
<p id="builtin">{builtin}</p>
<h2>Brokers</h2>
<table id="brokers"><tr><th>broker</th><th>usage</th><th>last hour</th></tr>{brokers}</table>
<h2>Proposals</h2>
<table id="proposals"><tr><th>id</th><th>status</th><th>made</th><th>expires</th><th>spread</th>
<th>actions</th><th></th></tr>{proposals}</table>
<h2>Drains</h2>
<table id="drains"><tr><th>broker</th><th>bundles left</th><th>since</th><th></th></tr>{drains}</table>
<form method="post" action="/drains"><input type="hidden" name="key" value="{key}">
<input name="broker" placeholder="host:port" required> <button type="submit">Drain</button></form>
<h2>Last cycles</h2>
<table id="cycles"><tr><th>cycle</th><th>at</th><th>actions</th></tr>{cycles}</table>
</body></html>
"""
