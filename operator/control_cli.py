"""``operator proposals | approve | reject | drain | undrain | pause | resume``: requests to the running daemon.

They write the daemon's control file (``<stateFile>.control.json``) and its pause file, which it reads before
every cycle and every call; so they must find *that daemon's* files, never a copy in the current directory.
The settings say where (``--config``, or the ``PULSAR_LB_CONFIG`` the chart sets in the pod, or
``--set stateFile=…``), and before it answers a command checks that someone will carry the request out: an
operator state there, a daemon holding its lock, that daemon leading (not a standby), and for approve/reject
``approval: manual``. Otherwise it is one line and a non-zero exit — never a success message for a request
nobody reads. A pause, its end and an undrain are kept for the next daemon where none runs now (a stop never
hurts, and a drain left behind would empty the broker again); a standby refuses an undrain. With leader election
a pause and its end also go on the Lease every replica reads (run/lease_pause.py), so they may be given in any pod.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsar_lb_operator.act.safety import KILL_SWITCH_ENV, read_pause_file, switch_on
from pulsar_lb_operator.arguments import positive
from pulsar_lb_operator.run import workflows
from pulsar_lb_operator.run.lease_client import LeaseApiError
from pulsar_lb_operator.run.lease_pause import SharedPause
from pulsar_lb_operator.run.settings import OperatorSettings, pause_settings, resolve
from pulsar_lb_operator.store import control as control_store
from pulsar_lb_operator.store import files
from pulsar_lb_operator.store.control import ControlError, ControlFile, DaemonRecord
from pulsar_lb_operator.store.statefile import InstanceLock
from pulsar_lb_operator.strategies import ConfigError


def _settings(args: argparse.Namespace, pausing: bool = False) -> OperatorSettings:
    """The daemon's settings. ``pausing`` (pause, resume): where they have an error elsewhere than in where the
    daemon reads its pause, the command goes on with those keys alone (``pause_settings``) and says so."""
    file_settings = files.read_config_file(args.config) if args.config else {}
    file_settings.update(dict(args.overrides))
    try:
        settings, _, _ = resolve(file_settings, os.environ, {"adminUrl": getattr(args, "admin_url", None)})
    except ConfigError as exc:
        if not pausing:
            raise
        settings = pause_settings(file_settings, os.environ)  # ConfigError where these keys are wrong too
        print(
            f"operator: warning: {exc}; going on with stateFile, killSwitchFile and the Lease's keys", file=sys.stderr
        )
    return settings


def _now_ms() -> int:
    return int(time.time() * 1000)


def _who() -> str:
    """The person as the control file records them: the login and the host (the pod's name in Kubernetes)."""
    return f"{os.environ.get('USER') or f'uid {os.getuid()}'}@{socket.gethostname()}"


@dataclass(frozen=True)
class Target:
    """The daemon's files as the settings locate them, and the daemon there if one runs."""

    settings: OperatorSettings
    state: Path  # absolute
    control: ControlFile
    daemon: DaemonRecord | None  # None: no daemon runs on this state (``absent`` says why, ``fix`` what to do)
    absent: str = ""
    fix: str = ""

    def need_daemon(self, request: str) -> DaemonRecord:
        """The daemon that will carry out ``request``; ControlError (one line, exit 2) when none will."""
        if self.daemon is None:
            raise ControlError(f"{self.absent}: nobody would carry out this {workflows.REQUESTS[request]}; {self.fix}")
        why_not = workflows.refusal(self.daemon, request, self.paused())
        if why_not:
            raise ControlError(why_not)
        return self.daemon

    def paused(self) -> bool:
        """Whether the daemon's kill switch is on: its environment's, its pause file, or the Lease's pause."""
        if self.daemon is None:
            return False
        if self.daemon.kill_switch_env or read_pause_file(self.daemon.pause_file) is not None:
            return True
        try:
            with _shared_pause(self.settings) as shared:
                return shared is not None and shared.read() is not None
        except (LeaseApiError, ConfigError):  # unknown: the request's own line does not depend on it
            return False

    def pause_file(self) -> str:
        """Where the daemon reads its pause: its own word for it when one runs, else what the settings say."""
        return self.daemon.pause_file if self.daemon else os.path.abspath(self.settings.kill_switch_file())


def find(args: argparse.Namespace, unreadable_ok: bool = False) -> Target:
    """Locate the daemon's state; ControlError when there is none at all (the wrong directory, the wrong settings).
    ``unreadable_ok``: a control file that cannot be read leaves the daemon unknown rather than failing (the emergency
    stop and its end go in a file of their own, and must never wait on another's repair)."""
    settings = _settings(args, pausing=unreadable_ok)
    state = Path(settings.stateFile).absolute()
    control = ControlFile(state)
    holder = InstanceLock.holder(state)
    if holder is None:
        if not any(p.exists() for p in (state, control.path, Path(f"{state}.lock"))):
            relative = "" if Path(settings.stateFile).is_absolute() else f" (stateFile is relative to {os.getcwd()})"
            raise ControlError(
                f"no operator state at {state}{relative}: give the daemon's settings (--config FILE or "
                "PULSAR_LB_CONFIG; in its pod: kubectl exec deploy/<release>-pulsar-lb-operator -- operator …) or "
                "--set stateFile=PATH"
            )
        absent = f"no daemon runs on {state} (nothing holds its lock)"
        return Target(settings, state, control, None, absent, "start operator run with this stateFile")
    try:
        record = control.read().daemon
    except files.FileError as exc:
        if not unreadable_ok:
            raise
        absent = f"the daemon is unknown ({exc}; its settings' pause file is the one used)"
        return Target(settings, state, control, None, absent, "repair or remove the control file")
    if record is None or record.pid != holder:
        absent = f"the process holding {state}.lock (pid {holder}) is not a daemon that has started cycling"
        fix = "a one-shot operator rebalance, or a daemon still starting: try again in a moment"
        return Target(settings, state, control, None, absent, fix)
    return Target(settings, state, control, record)


def proposals(args: argparse.Namespace) -> int:
    target = find(args)
    doc = target.control.update(lambda d: (d.expire(_now_ms()), d)[1])
    shown = [p for _, p in sorted(doc.proposals.items())]
    if not args.all:
        shown = workflows.still_pending(doc.proposals)
    if args.json:
        print(json.dumps(shown, indent=1))
        return 0
    if not shown:
        auto = target.daemon is not None and target.daemon.approval != "manual"
        print(("no proposals waiting" if not args.all else "no proposals") + (" (approval is auto)" if auto else ""))
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
            held = f"  (held back when proposed: {action['deferred']})" if action.get("deferred") else ""
            print(f"    {action['type']:6s} {action['bundle']}  {where}{held}")
    return 0


def decide(args: argparse.Namespace, approve: bool) -> int:
    target = find(args)
    daemon = target.need_daemon("approve" if approve else "reject")
    proposal = target.control.update(lambda d: d.decide(args.id, approve, _now_ms(), _who()))
    verb = workflows.approval_outcome(daemon) if approve else "rejected"
    print(f"proposal {args.id} {verb} ({len(proposal['actions'])} actions)")
    return 0


def drain(args: argparse.Namespace) -> int:
    target = find(args)
    if not args.broker:
        drains = target.control.read().drains
        if not drains:
            print("no drains")
        for broker in sorted(drains):
            print(f"{broker}: draining since {time.strftime('%H:%M:%S', time.gmtime(drains[broker]['since'] / 1000))}")
        return 0
    daemon = target.need_daemon("drain")
    settings = target.settings
    active: list[str] = []  # unknown without an admin URL: the daemon's notes name a drain it cannot carry out
    if settings.adminUrl:
        from pulsar_lb_operator.run import live

        client, cluster = live.connect(settings)
        try:
            active = client.active_brokers(cluster)
        finally:
            client.close()
        if args.broker not in active:
            raise files.FileError(f"{args.broker} is not an active broker (active: {', '.join(sorted(active))})")
    entry = {"since": _now_ms(), "by": _who()}
    target.control.update(lambda doc: workflows.add_drain(doc, args.broker, active, entry))
    unchecked = "" if settings.adminUrl else " (not checked against the active brokers: no admin URL given)"
    print(workflows.drain_outcome(args.broker, daemon, target.paused()) + unchecked)
    if args.wait:
        return _wait_drained(settings, args.broker, args.timeout)
    return 0


def undrain(args: argparse.Namespace) -> int:
    """Refused by a standby (the leader never reads its files); kept for the next daemon where none runs now: a
    drain left in the control file would keep the broker empty from that daemon's first cycle."""
    target = find(args)
    if target.daemon is not None:
        target.need_daemon("undrain")
    was = target.control.update(lambda d: d.drains.pop(args.broker, None))
    later = f" ({target.absent}: the next daemon on it starts without this drain)" if target.daemon is None else ""
    print(f"{args.broker}: {'no longer drained' if was else 'was not being drained'}{later}")
    return 0


@contextmanager
def _shared_pause(settings: OperatorSettings) -> Iterator[SharedPause | None]:
    """The Lease every replica reads its pause from, where leader election is on (None where it is off)."""
    shared = SharedPause.from_settings(settings.lease())
    try:
        yield shared
    finally:
        if shared is not None:
            shared.close()


def pause(args: argparse.Namespace) -> int:
    """The emergency stop: written even where no daemon runs now (a daemon started later starts paused), and where
    the control file cannot be read; with leader election on the Lease too, so that every replica stops."""
    target = find(args, unreadable_ok=True)
    path = target.pause_file()
    note, earlier = workflows.pause_file(path, _who(), args.reason or "", _now_ms())
    daemon = target.daemon
    if target.settings.leaderElection:
        leading = daemon is not None and daemon.leading
        try:
            with _shared_pause(target.settings) as shared:
                assert shared is not None
                within = target.settings.renewDeadlineSeconds
                line = workflows.share_pause(shared, note, leading, within, path, earlier)
        except (LeaseApiError, ConfigError) as exc:
            standby = daemon is not None and not daemon.leading
            raise ControlError(
                f"paused {'this standby' if standby else 'this pod'} only ({path}): the Lease could not be written "
                f"({exc}); "
                + (
                    "the leader still acts: pause it in its pod, or set killSwitch=true"
                    if standby
                    else "a standby that takes over would act: try again, or set killSwitch=true"
                )
            ) from None
        print(f"{line} (and {path}); operator resume ends it")
        return 0
    already = workflows.kept(earlier)
    if daemon is None:
        print(f"{already}paused ({path}); {target.absent}: the next operator run or rebalance on it starts paused")
    elif not daemon.leading:
        leader = daemon.leader or "another instance"
        print(
            f"{already}paused this standby ({path}), but {leader} leads and still acts: pause it too (kubectl exec "
            "into its pod), or stop every pod with the chart's killSwitch=true"
        )
    else:
        print(
            f"{already}paused: the daemon (pid {daemon.pid}) sends nothing from its next call on ({path}); "
            "operator resume"
        )
    return 0


def resume(args: argparse.Namespace) -> int:
    target = find(args, unreadable_ok=True)
    path = target.pause_file()
    removed = control_store.remove_pause(path)
    shared_removed = False
    if target.settings.leaderElection:
        try:
            with _shared_pause(target.settings) as shared:
                assert shared is not None
                shared_removed = shared.resume()
        except (LeaseApiError, ConfigError) as exc:
            raise ControlError(
                f"{'pause file removed, but ' if removed else ''}the Lease's pause could not be removed ({exc}): every "
                "instance stays paused; try again"
            ) from None
    env_on = target.daemon.kill_switch_env if target.daemon else switch_on(os.environ.get(KILL_SWITCH_ENV))
    if env_on:
        raise ControlError(
            f"{'pause removed, but ' if removed else ''}the environment variable {KILL_SWITCH_ENV} still stops every "
            "action: set it to false or unset it (the chart: --set killSwitch=false) and restart"
        )
    if shared_removed:
        print(f"resumed every instance (the Lease's pause{' and ' + path if removed else ''} removed)")
    elif not removed:
        print(f"was not paused (no {path}{', none on the Lease' if target.settings.leaderElection else ''})")
    elif target.daemon is None:
        print(f"resumed ({path} removed); {target.absent}")
    elif not target.daemon.leading:
        print(f"resumed this standby ({path} removed); it acts only once it leads")
    else:
        print(f"resumed: the daemon (pid {target.daemon.pid}) acts again from its next cycle")
    return 0


def _wait_drained(settings: OperatorSettings, broker: str, timeout_s: float) -> int:
    """Poll the broker's own bundles until none is left (its heartbeat namespaces aside)."""
    if not settings.adminUrl:
        raise files.FileError("--wait needs the admin URL (--admin-url or PULSAR_ADMIN_URL)")
    from pulsar_lb_operator.run import live

    client, cluster = live.connect(settings)
    deadline = time.monotonic() + timeout_s
    try:
        # the brokers as the cluster lists them: the one asked answers for itself, or redirects to where it does
        # (the client follows a redirect only to a broker it was told of)
        client.active_brokers(cluster)
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
    where = " It acts on the daemon whose settings it is given (--config, PULSAR_LB_CONFIG or --set stateFile=…)"
    refused = where + " and fails when no daemon there would carry it out."
    kept = where + "; where no daemon runs now it is kept for the next one on that state."
    listing = commands.add_parser(
        "proposals",
        help="list the plans waiting for approval (approval: manual)",
        description="List the daemon's proposals." + where + ".",
        epilog="example: operator proposals --all",
    )
    listing.add_argument("--all", action="store_true", help="also the decided and expired ones")
    listing.add_argument("--json", action="store_true")
    config_options(listing)
    for name, meaning in (("approve", "execute a proposal, behind the rails"), ("reject", "drop a proposal")):
        command = commands.add_parser(
            name, help=meaning, description=meaning.capitalize() + "." + refused, epilog=f"example: operator {name} ID"
        )
        command.add_argument("id", help="the proposal's id (operator proposals)")
        config_options(command)
    drain_command = commands.add_parser(
        "drain",
        help="move every bundle off a broker before maintenance, and keep it empty until undrain",
        description="Ask the daemon to move every bundle off BROKER (several cycles if the caps require), placed "
        "by the placement strategy, and to place nothing on it until 'operator undrain BROKER'. Follows dryRun "
        "like every action. Without BROKER: list the drains." + refused,
        epilog="example: operator drain 10.0.0.12:8080 --wait --timeout 1800",
    )
    drain_command.add_argument("broker", nargs="?", help="broker id (host:port, as the admin API lists it)")
    drain_command.add_argument("--wait", action="store_true", help="wait until the broker owns no bundle")
    drain_command.add_argument("--timeout", type=positive, default=3600.0, help="seconds --wait waits (default 3600)")
    drain_command.add_argument("--admin-url", metavar="URL", help="the admin URL, to check the broker and --wait")
    config_options(drain_command)
    undrain_command = commands.add_parser(
        "undrain",
        help="end a drain: the broker may receive bundles again",
        description="End a drain. A standby refuses it (the leader reads files of its own)." + kept,
        epilog="example: operator undrain B:8080",
    )
    undrain_command.add_argument("broker")
    config_options(undrain_command)
    pause_command = commands.add_parser(
        "pause",
        help="the emergency stop: the daemon sends nothing until resume",
        description="Turn the kill switch on: the daemon checks it immediately before every mutating call, so "
        "nothing more is sent from the next call on, across restarts, until 'operator resume'. With leader "
        "election it is also written on the Lease, so it stops every replica — run it in any pod — and fails, "
        "saying whom it stopped, when the Lease cannot be written." + kept,
        epilog='example: operator pause --reason "incident 4211: broker-3 flapping"',
    )
    pause_command.add_argument("--reason", default="", help="why, shown on the status page and in /api/status")
    config_options(pause_command)
    resume_command = commands.add_parser(
        "resume",
        help="end a pause: the daemon acts again",
        description="Remove the pause. An environment kill switch (PULSAR_LB_KILL_SWITCH, the chart's "
        "killSwitch) is not lifted by this: it fails and says so." + kept,
        epilog="example: operator resume",
    )
    config_options(resume_command)


def dispatch() -> dict[str, Any]:
    return {
        "proposals": proposals,
        "approve": lambda args: decide(args, True),
        "reject": lambda args: decide(args, False),
        "drain": drain,
        "undrain": undrain,
        "pause": pause,
        "resume": resume,
    }
