"""``operator run``: the daemon. APScheduler runs one cycle every loadBalancerSheddingIntervalMinutes.

One cycle at a time (no overlap, missed runs coalesced), and only while this instance leads (the
Kubernetes Lease, or always when leader election is off); a standby is ready and serves its probes but
sends nothing. The state (strategy counters and history, cooldowns, actions awaiting verification) is
written before every action is sent and after every cycle, so neither a restart nor a SIGKILL forgets
what was sent. SIGTERM stops the cycle before its next call and the daemon exits within
``shutdownTimeoutSeconds`` even if a call hangs (what was sent is on disk and verified after the
restart).

This module schedules and runs the cycles; the jobs around them are their own modules:
``endpoints.py`` serves ``/healthz``, ``/readyz``, ``/metrics`` and the status page on ``metricsPort``,
``metrics.py`` turns each cycle's result into Prometheus series, ``shutdown.py`` hears the signals and
bounds the exit, ``leadership.py`` decides who acts.
"""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from apscheduler.schedulers.background import BackgroundScheduler

from pulsar_lb_operator import hints
from pulsar_lb_operator.act.executor import Executor
from pulsar_lb_operator.act.safety import KillSwitch
from pulsar_lb_operator.adminapi import AdminClient, AdminError
from pulsar_lb_operator.collect import elm
from pulsar_lb_operator.record.audit import publisher as audit_publisher
from pulsar_lb_operator.records import ExecutorState, ExecutorStateError
from pulsar_lb_operator.run import endpoints, lease_pause, shutdown, workflows
from pulsar_lb_operator.run.cycle import CycleContext, CycleResult, run_cycle
from pulsar_lb_operator.run.daemon_view import Elector
from pulsar_lb_operator.run.leadership import COUNTERS_ANNOTATION, STATE_ANNOTATION, LeaseElector
from pulsar_lb_operator.run.lease_pause import PAUSE_ANNOTATION, SharedPause
from pulsar_lb_operator.run.metrics import Metrics
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.store import statefile
from pulsar_lb_operator.store.control import ControlError, ControlFile
from pulsar_lb_operator.store.history import HistoryStore
from pulsar_lb_operator.store.profile import read_profile
from pulsar_lb_operator.store.statefile import OperatorState
from pulsar_lb_operator.strategies import ConfigError, LoadBalancerConfig, SnapshotError, StateError, UserError

if TYPE_CHECKING:  # pyspark is imported when the first aggregation runs, not at the daemon's start
    from pulsar_lb_operator.spark_jobs.session import JobGroup

log = structlog.get_logger(__name__)

RECENT_CYCLES = 20  # cycles the status page lists
USAGE_POINTS = 240  # per-cycle usage samples kept for the status page (an hour at 15 s cycles)
COMPACT_EVERY_MINUTES = 10  # an hour is compacted within 15 minutes of its end (5 minutes' grace for late cycles)


@dataclass
class Daemon:
    settings: OperatorSettings
    config: LoadBalancerConfig
    client: AdminClient
    cluster: str
    shedding: str | None = None
    placement: str | None = None
    interval_s: float | None = None
    clock_ms: object = None  # a callable returning epoch ms; None: the wall clock
    stop: threading.Event = field(default_factory=threading.Event)
    metrics: Metrics = field(init=False)  # the daemon's own registry, labelled with its cluster
    state: OperatorState = field(default_factory=OperatorState)
    last_ok: float | None = None
    cycles: int = 0
    elector: Elector | None = None  # None: this instance always leads (no leader election)
    reset_state: bool = False
    abandoned: bool = False  # set when shutdown gave up waiting for a hung call

    def __post_init__(self) -> None:
        self.metrics = Metrics(self.cluster)
        self.rng = random.Random(self.settings.seed)
        clock = (lambda: self.clock_ms() / 1000) if callable(self.clock_ms) else time.time
        self.executor = Executor(
            self.client,
            self.cluster,
            dataclasses.replace(self.settings.safety(self.config), shared_pause=self._lease_pause),
            clock=clock,
            sleep=self.stop.wait,
            stop_requested=self.stop.is_set,
            fence=self._fence,
            draining=lambda: self.draining,
            guard=self.settings.builtin_guard(self.client, self.config),  # asked before anything is sent
        )
        self.control = ControlFile(self.settings.stateFile)
        self.control.read()  # one that cannot be read stops the daemon here (ControlError, exit 2), as the state does
        self.draining: frozenset[str] = frozenset()
        self.recent: deque[CycleResult] = deque(maxlen=RECENT_CYCLES)  # for the status page
        self.usage: deque[tuple[int, dict[str, float]]] = deque(maxlen=USAGE_POINTS)
        self.failure: tuple[int, str] | None = None  # the last cycle's failure (ms, one line); None once one succeeds
        # a state file that exists but is unusable stops the daemon here (StateFileError, exit 2)
        self.state = statefile.load(Path(self.settings.stateFile), reset=self.reset_state)
        # detects the load manager every cycle and reads ELM's topics on ELM clusters
        self.load_manager = elm.Session.from_settings(self.settings.elm())
        self._was_leader: bool | None = None
        self._shared_pause: SharedPause | None = None
        self._lock = threading.Lock()
        self.history = (
            HistoryStore(
                self.settings.historyUri,
                self.settings.historyRetentionDays,
                max_bytes=int(self.settings.historyMaxMegabytes * 1024 * 1024),
                minute_hours=self.settings.historyMinuteHours,
            )
            if self.settings.historyUri
            else None
        )
        self._history_jobs = threading.Lock()  # compaction and aggregation: never over the same files at once
        self._aggregation: JobGroup | None = None  # the load profile run in flight: a stop cancels its Spark jobs
        self._aggregation_over = threading.Event()  # set while no aggregate() is between its group and its last line
        self._aggregation_over.set()
        self.audit = audit_publisher.from_settings(
            self.settings.audit(), self.metrics.audit_published.inc, self.metrics.audit_dropped.inc
        )
        if self.audit is not None:
            self.metrics.audit_backlog.set_function(self.audit.spool.backlog)
        self.cycle = CycleContext(  # what every cycle works with; each cycle's own inputs are run_cycle's
            self.client,
            self.cluster,
            self.config,
            self.executor,
            self.shedding,
            self.placement,
            broker_timeout_s=self.settings.brokerTimeoutSeconds,
            load_manager=self.load_manager,
            audit=self._publish_audit,
            save=self._save,
        )
        self.metrics.kill_switch.set_function(lambda: 1 if self.executor.safety.killed() else 0)  # read at scrape
        self.metrics.interval.set(self.period_s)
        self.metrics.last_success.set(time.time())

    @property
    def shared_pause(self) -> SharedPause | None:
        """Where ``operator pause`` reaches every replica: the elector's Lease (None: one instance, its file only)."""
        if not isinstance(self.elector, LeaseElector):
            return None
        if self._shared_pause is None:  # its own session: the elector's thread uses the elector's
            elector = self.elector
            self._shared_pause = SharedPause(
                elector.client.twin(), elector.namespace, elector.name, elector.request_timeout
            )
        return self._shared_pause

    def _lease_pause(self) -> KillSwitch | None:
        """The Lease's pause as the elector last read it (at most ``retryPeriodSeconds`` old: a leader that has not
        read the Lease since renewDeadlineSeconds does not lead, and acts on nothing)."""
        if self.elector is None:
            return None
        lease = f"{getattr(self.elector, 'namespace', '')}/{getattr(self.elector, 'name', self.settings.leaseName)}"
        return lease_pause.switch(self.elector.annotation(PAUSE_ANNOTATION), lease)

    @property
    def period_s(self) -> float:
        return (
            self.interval_s
            or self.settings.cycleIntervalSeconds
            or self.config.loadBalancerSheddingIntervalMinutes * 60
        )

    def leads(self) -> bool:
        leading = self.elector is None or self.elector.is_leader()
        if leading != self._was_leader:
            self.metrics.leader.set(1 if leading else 0)
            log.warning("leading: this instance acts on the cluster" if leading else "standby: another instance leads")
            if leading:
                self.metrics.last_success.set(time.time())  # "no successful cycle" counts from here
                self._inherit()
            else:
                self.metrics.standby()
            self._was_leader = leading
            workflows.announce(self, leading)  # what `operator drain/approve/pause` check before they answer
        return leading

    def _inherit(self) -> None:
        """Take over the previous leader's record from the Lease: its cooldowns and unverified actions, and its
        strategy's hit counters (a broker hit once before an upgrade is hit twice on the first cycle after)."""
        if self.elector is None:
            return
        self._inherit_counters(self.elector.inherited(COUNTERS_ANNOTATION))
        text = self.elector.inherited(STATE_ANNOTATION)
        if not text:
            return
        try:
            inherited = ExecutorState.from_json(json.loads(text))
        except (ValueError, ExecutorStateError) as exc:
            log.error("the previous leader's record on the Lease is unreadable; ignored", reason=str(exc))
            return
        executor = self.state.executor.merged(inherited)
        self.state = OperatorState(self.state.strategy, executor)
        log.warning(
            "inherited the previous leader's record",
            cooldowns=len(inherited.last_moved),
            pending=len(inherited.pending),
        )

    def _inherit_counters(self, text: str | None) -> None:
        """The last leader's counters win over this pod's state file: every leader writes them at the end of
        each cycle, so they are at least as new. The per-bundle averages stay this pod's (or start again)."""
        if not text:
            return
        try:
            counters = statefile.read_strategy_counters(text)
        except StateError as exc:
            log.error("the previous leader's strategy counters on the Lease are unreadable; ignored", reason=str(exc))
            return
        strategy = dataclasses.replace(counters, bundle_data=self.state.strategy.bundle_data)
        self.state = OperatorState(strategy, self.state.executor)
        log.warning("inherited the previous leader's strategy counters", hits=len(counters.avg_hits_high))

    def _publish_counters(self, state: OperatorState) -> None:
        """Once a cycle, the strategy's counters onto the Lease for the next leader (not a fence: a failure here
        only means a new leader counts again)."""
        publish = getattr(self.elector, "publish", None)
        if publish is None:
            return
        text = statefile.strategy_counters(state.strategy)
        if text is None:
            log.warning("the strategy counters are too large for the Lease; a new leader will count again")
        elif not publish(COUNTERS_ANNOTATION, text):
            log.warning("the strategy counters were not written to the Lease; a new leader will count again")

    def _fence(self) -> str | None:
        return None if self.elector is None or self.elector.is_leader() else "no longer the leader"

    def _publish_audit(self, events: list[dict[str, Any]]) -> None:
        """The cycle's audit events to the publisher, when ``auditEnabled`` started one."""
        if self.audit is not None:
            self.audit.publish(events)

    def _save(self, state: OperatorState) -> None:
        """The state file, and with leader election the Lease too: written before each call is sent.

        The Lease write is also the fence: it fails once another instance holds the Lease (409 on our
        resourceVersion), and then nothing more is sent (the executor stops on the OSError).
        """
        statefile.save(self.settings.stateFile, state)
        publish = getattr(self.elector, "publish", None)
        if publish is None:
            return
        keep_ms = self.executor.safety.cooldown_minutes * 60_000
        record = state.executor.recent(self.executor.now_ms(), keep_ms).to_json()
        if not publish(STATE_ANNOTATION, json.dumps(record, separators=(",", ":"), sort_keys=True)):
            raise OSError("the Lease did not take the record of this action (no longer the leader?)")

    def run_once(self) -> CycleResult | None:
        """One cycle; any failure is logged and counted, never raised (the daemon must keep running)."""
        if self.stop.is_set() or not self.leads():
            return None
        if not self._lock.acquire(blocking=False):
            log.warning("previous cycle still running; skipped")
            return None
        started = time.monotonic()
        try:
            now_ms = self.clock_ms() if callable(self.clock_ms) else None
            self._execute_approved()  # reads the drains too
            manual = self.settings.approval == "manual"
            profile = read_profile(self.settings.profileUri) if self.settings.profileUri else None
            result = run_cycle(
                self.cycle,
                self.state,
                self.rng,
                now_ms=now_ms,
                profile=profile,
                draining=self.draining,
                propose_only=manual,
            )
            self.state = result.state
            self._save(self.state)
            self._publish_counters(self.state)
            if manual:
                proposal = workflows.propose(self.control, result, self.executor.now_ms(), self.period_s * 1000)
                if proposal is not None:
                    log.warning(
                        "proposal waiting for approval",
                        proposal=proposal["id"],
                        actions=len(proposal["actions"]),
                        spread_before=proposal["spreadBefore"],
                        spread_after=proposal["spreadAfter"],
                    )
            self.recent.append(result)
            if result.plan is not None:
                self.usage.append((result.plan.taken_at, {b.broker: b.usage_before for b in result.plan.brokers}))
            self._record_history(result)
            self.metrics.observe(result, time.monotonic() - started)
            self.last_ok = time.monotonic()
            self.failure = None
            self.cycles += 1
            return result
        # elm.py: ELM's topics unreadable is a ConnectionError (an OSError); a strategy ELM cannot feed a ConfigError;
        # a control file broken since the start: every cycle says so (the proposals and drains cannot be read)
        except (AdminError, SnapshotError, OSError, ConfigError, ControlError) as exc:
            self.metrics.cycles.labels("error").inc()
            reason = hints.admin_auth(exc, self.settings.auth().token_source()) or str(exc)
            log.error("cycle failed", reason=reason)
            self.failure = (self.executor.now_ms(), reason)
            return None
        except Exception as exc:  # a bug must not kill the daemon; the next cycle tries again
            self.metrics.cycles.labels("error").inc()
            log.exception("cycle crashed")
            self.failure = (self.executor.now_ms(), f"crashed ({type(exc).__name__}): a bug, the log has its traceback")
            return None
        finally:
            self._lock.release()

    def approvals_due(self) -> None:
        """The scheduler's frequent job (manual approval): run approved proposals without waiting a cycle."""
        if self.stop.is_set() or not self.leads() or not self._lock.acquire(blocking=False):
            return
        try:
            self._execute_approved()
        except ControlError:
            pass  # the control file cannot be read: each cycle says so, in one line
        except Exception:
            log.exception("approved proposals could not be executed")
        finally:
            self._lock.release()

    def _execute_approved(self) -> None:
        """Approved, unexpired proposals, each behind the same rails as a cycle (called under the cycle lock), with
        the drains as they are now (one asked for since the proposal is never a destination) and each source read
        again (``planned_earlier``). While the kill switch is on they wait, approved, until resume or their expiry:
        taken now, every action would be skipped and the proposal used up. Each execution is on the status page, in
        the metrics and in the audit trail as a cycle's actions are, under the proposal's id."""
        self.draining = frozenset(self.control.read().drains)
        if self.executor.safety.killed():
            return
        for proposal in workflows.take_approved(self.control, self.executor.now_ms()):
            plan = workflows.plan_of(proposal)
            log.warning("executing approved proposal", proposal=proposal["id"], actions=len(plan.actions))
            records, executor_state = self.executor.apply(
                plan,
                self.state.executor,
                on_record=workflows.audit_of(proposal["id"], self.cluster, self.executor.safety, self._publish_audit),
                persist=lambda attempted: self._save(OperatorState(self.state.strategy, attempted)),
                planned_earlier=True,
            )
            self.state = OperatorState(self.state.strategy, executor_state)
            self._save(self.state)
            workflows.record_outcomes(self.control, proposal["id"], records)
            last = self.recent[-1] if self.recent else None
            result = CycleResult(
                proposal["id"], plan, tuple(records), (), {}, self.state, last.snapshot if last else None
            )
            self.recent.append(result)
            self.metrics.observe_outcomes(result)

    def aggregate(self) -> None:
        """Update the load profile with the Spark job in-process (incremental: the samples since the last run and
        the job's state); failures are logged, the daemon goes on."""
        from pulsar_lb_operator.spark_jobs.load_profile import ProfileOptions, build_profile
        from pulsar_lb_operator.spark_jobs.session import JobCancelled, JobGroup, build_session

        started = time.monotonic()
        options = ProfileOptions(retention_days=self.settings.historyRetentionDays)
        try:
            with self._history_jobs:
                if self.stop.is_set():  # scheduled just before the stop
                    return
                spark = build_session(self.settings.sparkMaster)
                with JobGroup(spark) as run:
                    self._aggregation_over.clear()
                    self._aggregation = run
                    if self.stop.is_set():  # came while Spark started: nothing is read
                        run.cancel()
                    try:
                        summary = build_profile(
                            spark, self.settings.historyUri, self.settings.profileUri, options, run.check
                        )
                    except Exception as exc:  # a cancelled job fails with Spark's own exception
                        if run.cancelled:
                            raise JobCancelled(str(exc)) from None
                        raise
            log.info(
                "load profile written",
                uri=self.settings.profileUri,
                seconds=round(time.monotonic() - started, 1),
                mode=summary["mode"],
                why=summary.get("why"),
                broker_samples=summary["broker_samples"],
                bundle_samples=summary["bundle_samples"],
            )
        except JobCancelled:  # the profile and the job's state are as the last complete run left them
            log.info("load profile job cancelled: the daemon is stopping", seconds=round(time.monotonic() - started, 1))
        except UserError as exc:  # no history yet, no Java runtime: one line that says so, the daemon goes on
            log.warning("load profile not built", reason=str(exc))
        except Exception:
            log.exception("load profile job failed")
        finally:
            self._aggregation = None
            self._aggregation_over.set()

    def cancel_aggregation(self, deadline: float) -> None:
        """Cancel the load profile job in flight, if any, and wait for it to end until ``deadline``
        (time.monotonic): a stop never waits for a Spark run, nor leaves its tasks to die with the JVM."""
        run = self._aggregation
        if run is None:
            return
        log.info("stopping: cancelling the load profile job")
        # the group ends before aggregate() logs how the run ended: wait for that line too, so it comes before
        # "daemon stopped"
        if not run.cancel_until(deadline) or not self._aggregation_over.wait(max(0.0, deadline - time.monotonic())):
            log.error("the load profile job did not end in time: its JVM is stopped with the process")

    def compact(self) -> None:
        """Compact the history's closed hours (store/compaction.py); failures are logged, the daemon goes on."""
        from pulsar_lb_operator.store.compaction import compact

        if self.history is None:
            return
        started = time.monotonic()
        try:
            with self._history_jobs:
                done = compact(self.history, self.clock_ms() if callable(self.clock_ms) else int(time.time() * 1000))
            if done.hours or done.deleted:
                log.info(
                    "history compacted",
                    hours=done.hours,
                    files=done.files_in,
                    rows=done.rows,
                    superseded_deleted=done.deleted,
                    seconds=round(time.monotonic() - started, 1),
                )
        except OSError as exc:
            log.error("history not compacted", uri=self.settings.historyUri, reason=str(exc))
        except Exception:
            log.exception("history compaction failed")

    def _record_history(self, result: CycleResult) -> None:
        if self.history is None or result.snapshot is None or not result.snapshot.brokers:
            return
        try:
            appended = self.history.append(result.snapshot)
            self.history.expire(result.snapshot.taken_at)
            self.metrics.history_bytes.set(self.history.used_bytes())
        except OSError as exc:  # the history is for later analysis; it never stops a cycle
            log.error("history not written", uri=self.settings.historyUri, reason=str(exc))
            return
        if appended.skipped:
            self.metrics.history_skipped.labels(appended.skipped).inc()
            log.error(
                "history append skipped: no room for this cycle's samples",
                reason=appended.skipped,
                uri=self.settings.historyUri,
                used_bytes=self.history.used_bytes(),
                max_bytes=self.history.max_bytes or None,
            )

    def builtin_balancer(self) -> dict[str, Any] | None:
        """Pulsar's own balancer as the conflict guard last found it (status page, ``/api/status``); None before the
        first cycle (every cycle asks it)."""
        last = self.executor.guard.last if self.executor.guard is not None else None
        return last.to_json() if last is not None else None

    def healthy(self) -> bool:
        return self.last_ok is None or time.monotonic() - self.last_ok < 3 * self.period_s + 60

    def ready(self) -> bool:
        """A leader after its first cycle; a standby at once (it is up and would take over)."""
        return self.cycles > 0 or (self.elector is not None and not self.elector.is_leader())

    def serve(self) -> int:
        """Run until SIGTERM/SIGINT or ``stop``; returns the exit code.

        Cycles run on the scheduler's thread, never on the main one, so a signal is always heard at
        once; on stop the daemon waits at most ``shutdownTimeoutSeconds`` for the current call.
        """
        log.info(
            "daemon started",
            cluster=self.cluster,
            dry_run=self.settings.dryRun,
            interval_s=self.period_s,
            strategy=self.cycle.shedding or self.config.loadBalancerLoadSheddingStrategy,
            leader_election=self.elector is not None,
            state_file=str(Path(self.settings.stateFile).absolute()),  # where operator drain/approve/pause write
        )
        server = self._start_probe_server()
        if self.elector is not None:
            self.elector.start()
        scheduler = BackgroundScheduler()
        scheduler.add_job(
            self.run_once,
            "interval",
            seconds=self.period_s,
            max_instances=1,
            coalesce=True,
            next_run_time=datetime.now(UTC),
        )
        if self.settings.approval == "manual":
            scheduler.add_job(self.approvals_due, "interval", seconds=2, max_instances=1, coalesce=True)
        if self.settings.aggregateEveryMinutes and self.settings.historyUri and self.settings.profileUri:
            # its own job thread: a long aggregation never delays a decision cycle
            scheduler.add_job(
                self.aggregate, "interval", minutes=self.settings.aggregateEveryMinutes, max_instances=1, coalesce=True
            )
        if self.history is not None:  # closed hours into one file each, on its own thread too
            scheduler.add_job(self.compact, "interval", minutes=COMPACT_EVERY_MINUTES, max_instances=1, coalesce=True)
        with shutdown.on_signals(self.stop):  # until the very end: a second SIGTERM changes nothing
            scheduler.start()
            try:
                self.stop.wait()
            finally:
                self._shut_down(scheduler, server)
        return 0

    def _shut_down(self, scheduler: BackgroundScheduler, server: ThreadingHTTPServer | None) -> None:
        """Nothing more is sent; the cycle in flight has until ``shutdownTimeoutSeconds`` (then it is abandoned)."""
        deadline = time.monotonic() + self.settings.shutdownTimeoutSeconds
        log.info("stopping: no further call is sent", timeout_s=self.settings.shutdownTimeoutSeconds)
        scheduler.shutdown(wait=False)
        self.cancel_aggregation(deadline - shutdown.EXIT_MARGIN_S)
        if not shutdown.wait_for_cycle(self._lock, deadline):
            self.abandoned = True
            log.error(
                "exiting with a call still in flight: it was recorded before it was sent, "
                "and is verified after the restart"
            )
        if self.elector is not None:
            self.elector.stop()
        endpoints.stop(server)
        self.close(flush_s=max(0.0, min(5.0, deadline - time.monotonic() - 1.0)))
        log.info("daemon stopped", cycles=self.cycles)

    def close(self, flush_s: float = 5.0) -> None:
        """Give the audit publisher a few seconds to send what is spooled; the rest waits for the next start."""
        self.load_manager.close()  # the readers of the extensible load manager's topics, if any
        if self.audit is not None:
            self.audit.close(flush_s)

    def _start_probe_server(self) -> ThreadingHTTPServer | None:
        if not self.settings.metricsPort:
            return None
        try:
            return endpoints.serve(self, self.settings.metricsHost, self.settings.metricsPort)
        except ConfigError:
            self.close(flush_s=0.0)
            raise
