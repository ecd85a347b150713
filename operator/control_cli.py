"""``operator proposals | approve | reject | drain | undrain``: requests to the daemon, through its control file.

They need no lock on the daemon's state and no running daemon: a request waits in the control file
(beside ``stateFile``) until the daemon — or the next ``operator rebalance`` — acts on it, also after
a restart. Each prints what it changed; an unknown or already decided proposal is exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from pulsar_lb_operator.run import workflows
from pulsar_lb_operator.run.settings import OperatorSettings, resolve
from pulsar_lb_operator.store import files
from pulsar_lb_operator.store.control import ControlFile


def _settings(args: argparse.Namespace) -> OperatorSettings:
    file_settings = files.read_config_file(args.config) if args.config else {}
    file_settings.update(dict(args.overrides))
    settings, _, _ = resolve(file_settings, os.environ, {"adminUrl": getattr(args, "admin_url", None)})
    return settings


def _now_ms() -> int:
    return int(time.time() * 1000)


def proposals(args: argparse.Namespace) -> int:
    control = ControlFile(_settings(args).stateFile)
    doc = control.update(lambda d: (d.expire(_now_ms()), d)[1])
    shown = [p for _, p in sorted(doc.proposals.items())]
    if not args.all:
        shown = workflows.still_pending(doc.proposals)
    if args.json:
        print(json.dumps(shown, indent=1))
        return 0
    if not shown:
        print("no proposals waiting" if not args.all else "no proposals")
        return 0
    for proposal in shown:
        created = time.strftime("%H:%M:%S", time.gmtime(proposal["createdAt"] / 1000))
        expires = time.strftime("%H:%M:%S", time.gmtime(proposal["expiresAt"] / 1000))
        print(
            f"{proposal['id']}  {proposal['status']:8s}  made {created} UTC, expires {expires} UTC  "
            f"{proposal['shedding']}: spread {proposal['spreadBefore']} → {proposal['spreadAfter']} points"
        )
        for action in proposal["actions"]:
            where = f"{action['source']} → {action.get('destination') or '(split)'}"
            print(f"    {action['type']:6s} {action['bundle']}  {where}")
    return 0


def decide(args: argparse.Namespace, approve: bool) -> int:
    control = ControlFile(_settings(args).stateFile)
    user = os.environ.get("USER") or "cli"
    proposal = control.update(lambda d: d.decide(args.id, approve, _now_ms(), user))
    verb = "approved: the daemon executes it within seconds" if approve else "rejected"
    print(f"proposal {args.id} {verb} ({len(proposal['actions'])} actions)")
    return 0


def drain(args: argparse.Namespace) -> int:
    settings = _settings(args)
    control = ControlFile(settings.stateFile)
    if not args.broker:
        drains = control.read().drains
        if not drains:
            print("no drains")
        for broker in sorted(drains):
            print(f"{broker}: draining since {time.strftime('%H:%M:%S', time.gmtime(drains[broker]['since'] / 1000))}")
        return 0
    if settings.adminUrl:
        from pulsar_lb_operator.run import live

        client, cluster = live.connect(settings)
        try:
            active = client.active_brokers(cluster)
        finally:
            client.close()
        if args.broker not in active:
            raise files.FileError(f"{args.broker} is not an active broker (active: {', '.join(sorted(active))})")
    entry = {"since": _now_ms(), "by": os.environ.get("USER") or "cli"}
    control.update(lambda d: d.drains.setdefault(args.broker, entry))
    mode = "it moves them" if not settings.dryRun else "in dry run it only logs the moves (dryRun: false to act)"
    print(f"draining {args.broker}: the daemon moves its bundles within the rails, {mode}")
    if args.wait:
        return _wait_drained(settings, args.broker, args.timeout)
    return 0


def undrain(args: argparse.Namespace) -> int:
    control = ControlFile(_settings(args).stateFile)
    was = control.update(lambda d: d.drains.pop(args.broker, None))
    print(f"{args.broker}: {'no longer drained' if was else 'was not being drained'}")
    return 0


def _wait_drained(settings: OperatorSettings, broker: str, timeout_s: float) -> int:
    """Poll the broker's own bundles until none is left (its heartbeat namespaces aside)."""
    if not settings.adminUrl:
        raise files.FileError("--wait needs the admin URL (--admin-url or PULSAR_ADMIN_URL)")
    from pulsar_lb_operator.run import live

    client, cluster = live.connect(settings)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = workflows.count_owned(client.owned_bundles(cluster, broker))
            print(f"{broker}: {left} bundle(s) left", file=sys.stderr, flush=True)
            if left == 0:
                print(f"{broker} is drained")
                return 0
            if time.monotonic() > deadline:
                print(f"{broker}: {left} bundle(s) still there after {timeout_s:g} s", file=sys.stderr)
                return 1
            time.sleep(min(10.0, max(0.5, timeout_s / 100)))
    finally:
        client.close()


def add_commands(commands: Any, config_options: Any) -> None:
    """The subcommands, for cli.build_parser."""
    listing = commands.add_parser(
        "proposals",
        help="list the plans waiting for approval (approval: manual)",
        epilog="example: operator proposals --all",
    )
    listing.add_argument("--all", action="store_true", help="also the decided and expired ones")
    listing.add_argument("--json", action="store_true")
    config_options(listing)
    for name, meaning in (("approve", "execute a proposal, behind the rails"), ("reject", "drop a proposal")):
        command = commands.add_parser(name, help=meaning, epilog=f"example: operator {name} 3f2a9c1b7e01")
        command.add_argument("id", help="the proposal's id (operator proposals)")
        config_options(command)
    drain_command = commands.add_parser(
        "drain",
        help="move every bundle off a broker before maintenance, and keep it empty until undrain",
        description="Ask the daemon to move every bundle off BROKER (several cycles if the caps require), placed "
        "by the placement strategy, and to place nothing on it until 'operator undrain BROKER'. Follows dryRun "
        "like every action. Without BROKER: list the drains.",
        epilog="example: operator drain 10.0.0.12:8080 --wait --timeout 1800",
    )
    drain_command.add_argument("broker", nargs="?", help="broker id (host:port, as the admin API lists it)")
    drain_command.add_argument("--wait", action="store_true", help="wait until the broker owns no bundle")
    drain_command.add_argument("--timeout", type=float, default=3600.0, help="seconds --wait waits (default 3600)")
    drain_command.add_argument("--admin-url", metavar="URL", help="the admin URL, to check the broker and --wait")
    config_options(drain_command)
    undrain_command = commands.add_parser(
        "undrain", help="end a drain: the broker may receive bundles again", epilog="example: operator undrain B:8080"
    )
    undrain_command.add_argument("broker")
    config_options(undrain_command)


def dispatch() -> dict[str, Any]:
    return {
        "proposals": proposals,
        "approve": lambda args: decide(args, True),
        "reject": lambda args: decide(args, False),
        "drain": drain,
        "undrain": undrain,
    }
