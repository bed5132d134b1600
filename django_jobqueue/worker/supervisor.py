"""The worker process: its claiming loop, and its start and drain.

Threads of one worker, each with its own database connection:

- the *claimer* runs the claiming loop below: it claims up to the pool's free
  slots in one statement and hands the jobs to the pool (``pools/``: the
  ``Pool`` interface; threads or child processes, grown and shrunk by
  ``--concurrency MIN:MAX``); the acks of the jobs that finished since its
  last round go in the same transaction (``completer.py``);
- the pool's slots run each job through the executor (``run/``);
- once the loop stops claiming, the *completer* writes the acks still to come;
- the background services (``services/``): the heartbeat, the ticker, the
  scheduler, the listener, the progress writer and the watchdog (time limits
  and cancels, ``run/watchdog.py``); with ``--metrics-port``, ``/metrics`` and
  ``/healthz`` (without it neither module is imported, and the hooks below
  cost one ``None`` comparison each);
- the main thread only waits, so that a signal handler never interrupts a
  thread holding a lock it needs (``services/signals.py``).

A claim commits before its job runs: no transaction is open across job code.

Stopping (``SIGTERM`` / ``SIGINT``): no more claims; running jobs get up to
``shutdown_timeout`` seconds to finish, heartbeat still beating; then the claims
of those still running are released (ready again, the attempt not counted)
and the process exits 0, leaving their threads behind (their code told to
stop; a child still running one is killed). ``--max-jobs`` and
``--burst`` stop claiming the same way but wait for every running job.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from django.db import connections

from ..collector import keep_out_of_collections
from ..conf import listen_alias
from ..exceptions import WorkerIdInUse
from ..models import Job
from ..queue import QueueClient
from ..schedules import declared_schedules
from .completer import Completer, PendingAck
from .config import WorkerConfig
from .outage import DATABASE_ERRORS, Outage, Shortage
from .pools import Pool, PoolParts, PoolStartError, make_pool
from .row import WorkerRow
from .run.control import RunControl, StopReason
from .run.executor import Executor
from .run.progress import ProgressWriter
from .run.watchdog import Attempts, CancelWatch, Watchdog
from .running import RunningJobs
from .services.heartbeat import Heartbeat
from .services.scheduler import Scheduler
from .services.signals import StopSignals
from .services.ticker import Ticker, tick_interval
from .services.wakeup import Wakeup
from .shares import QueueShares

if TYPE_CHECKING:
    from .services.metrics import WorkerMetrics
    from .services.observer import Observer

logger = logging.getLogger(__name__)

# Seconds the claiming loop waits for more acks when only some running jobs have finished.
ACK_LINGER = 0.001


class Supervisor:
    """One worker: its slots, its background duties and its claiming loop."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.client = QueueClient(config.using)
        # Whatever a round writes is written again if a database crash undoes it: docs/guarantees.md.
        self.client.round_commit = config.synchronous_commit
        self.running = RunningJobs()
        self._stopping = threading.Event()
        self._signalled = threading.Event()
        self.shortage = Shortage(config.worker_id, config.using)
        self.completer = Completer(self.client, config.worker_id, self._ack_submitted, self._acks_written)
        attempts = Attempts()
        self.watchdog = Watchdog(attempts, self._job_stopped, self._job_hung)
        self.cancel_watch = CancelWatch(self.client, attempts, self.watchdog)
        self.progress = ProgressWriter(self.client, config.worker_id, attempts)
        self.executor = Executor(
            self.client,
            config.worker_id,
            self.completer,
            self.shortage,
            self.watchdog,
            config.cancel_grace,
            self.progress,
        )
        queue_names = [name for name, _weight in config.queues]
        self.wakeup = Wakeup(
            config.using,
            queue_names,
            config.poll_interval,
            self.cancel_watch.nudge,
            listen_using=listen_alias(config.using),
            probe=self.client.probe_listen,
            # From the listener's thread, whose connection to the queue it closes after.
            on_listen=lambda state: self.row.record_listen(state),
        )
        self.shares = QueueShares(config.queues, config.poll_interval) if config.queues else None
        self.heartbeat = Heartbeat(
            self.client, config.worker_id, self.running, config.visibility_timeout, self._register_again
        )
        self.ticker = Ticker(
            self.client,
            tick_interval(config.visibility_timeout or config.default_visibility_timeout),
            self.wakeup.wake,
        )
        # Periodic jobs: every worker fires them, unless told not to; a burst worker never does.
        fires = config.fire_schedules and not config.burst
        self.scheduler = Scheduler(config.using, declared_schedules(), self.wakeup.wake) if fires else None
        self.stop_reason: str | None = None
        # After run(): True if every thread finished, False if job threads were
        # abandoned at the shutdown timeout, None if the claiming loop crashed.
        self.clean: bool | None = None
        self.started = 0
        # Why the worker refused to start (its id held by a live worker), or None.
        self.refused: str | None = None
        self.pool: Pool = make_pool(
            PoolParts(config, self.client, self.executor, self.running, self.wakeup.wake, self._signalled)
        )
        self.row = WorkerRow(self.client, config, lambda: self.pool.count, lambda: self.wakeup.listen_state)
        self._claimer: threading.Thread | None = None  # the thread of run()
        self.metrics: WorkerMetrics | None = None
        self.observer: Observer | None = None
        if config.metrics_port:
            self._observe()

    def _observe(self) -> None:
        """Keep the worker's series, and prepare the endpoint that serves them and its health."""
        from .services.metrics import WorkerMetrics
        from .services.observer import Observer

        metrics = WorkerMetrics(self.executor.attempts, self.config.concurrency, self.config.about())
        self.metrics = metrics
        self.executor.observer = metrics
        self.completer.on_batch = metrics.completer_acked
        self.heartbeat.on_beat = metrics.heartbeat_beat
        self.pool.on_resize = metrics.set_slots
        self.observer = Observer(
            self.config.metrics_host, self.config.metrics_port, metrics, self._vital_threads
        )

    def _vital_threads(self) -> dict[str, bool]:
        claimer = self._claimer
        return {"claimer": claimer is not None and claimer.is_alive(), "heartbeat": self.heartbeat.alive}

    # -- control ---------------------------------------------------------------

    def slot_count(self) -> int:
        """The slots the worker claims for now: ``--concurrency``, or within its MIN:MAX."""
        return self.pool.count

    def request_stop(self, reason: str) -> None:
        """Stop claiming, and exit once every running job has finished."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stopping.set()
        self.wakeup.wake()

    def on_signal(self, name: str) -> None:
        """Stop claiming, give running jobs ``shutdown_timeout``, hand back the rest.

        Called from a signal handler: it only sets flags.
        """
        self.stop_reason = name
        self._signalled.set()
        self.request_stop(name)

    def _register_again(self) -> None:
        """Register after the row was pruned as stale; stop if another worker took the id meanwhile."""
        try:
            self.row.write()
        except WorkerIdInUse as exc:
            logger.error("worker %s: %s; stopping", self.config.worker_id, exc)
            self.request_stop("worker id taken")

    def run(self) -> None:
        """Work until stopped, then set ``clean``."""
        self._claimer = threading.current_thread()
        observer = self.observer
        if observer is not None and (refused := observer.start(self.config.worker_id)):
            self.refused = refused
            self.clean = True
            return
        try:
            if self._registered() and self._start_pool():
                self._start()
                if observer is not None:
                    observer.health.started = True
                try:
                    self.completer.reporter.hold()
                    self._claim_loop()
                finally:
                    self.completer.reporter.stop_holding()
                    # The listener and the scheduler only feed the claiming loop: their connections
                    # close before the completer opens its own, which keeps a stopping worker within
                    # the connection budget (docs/workers.md).
                    self.wakeup.stop()
                    if self.scheduler is not None:
                        self.scheduler.stop()
                    # No more claims to carry the slots' acks: the completer's thread writes them.
                    self.completer.start()
                self.clean = self._drain()
            else:
                self.clean = True
        finally:
            if observer is not None:
                observer.stop()
            connections.close_all()

    # -- start -----------------------------------------------------------------

    def _registered(self) -> bool:
        """Write the worker's row; False if stopped first, or refused (``refused`` says why)."""
        try:
            return self.row.write_until(self._stopping)
        except WorkerIdInUse as exc:
            self.refused = str(exc)
            return False

    def _start_pool(self) -> bool:
        """Start the pool's slots; False (and ``refused`` says why) if it cannot."""
        try:
            self.pool.start()
        except PoolStartError as exc:
            self.refused = str(exc)
            self.row.delete()
            return False
        return True

    def _start(self) -> None:
        self.watchdog.start()
        self.cancel_watch.start()
        self.completer.reporter.start()
        self.heartbeat.start()
        self.progress.start()
        self.ticker.start()
        if self.scheduler is not None:
            self.scheduler.start()
        self.wakeup.start()
        self._log_started()

    def _log_started(self) -> None:
        schedules = len(self.scheduler.schedules) if self.scheduler is not None else None
        logger.info("%s", self.config.start_line(self.wakeup.method, schedules))

    # -- claiming --------------------------------------------------------------

    def _claim_loop(self) -> None:
        outage = Outage("claiming", self.config.using)
        while not self._stopping.is_set():
            self.wakeup.clear()
            if self.config.max_jobs is not None and self.started >= self.config.max_jobs:
                self.request_stop(f"max-jobs {self.config.max_jobs} reached")
                return
            held = len(self.running)
            self.pool.resize(held)
            acks = self.completer.take()
            if acks and len(acks) < held:
                # Other slots are finishing too: a moment's wait, ended by the last running job's
                # ack, lets one commit carry their acks and claim their slots, instead of the
                # first ack paying a round trip alone.
                self.completer.wait_for(held - len(acks), ACK_LINGER)
                acks += self.completer.take()
            # The slots of the jobs acked in this round are free once it commits (under --pool
            # processes, a slot holds as many jobs as its child's batch may: Pool.capacity); not
            # those of acks passed over before, which may be passed over again.
            free = self.pool.capacity - held + sum(not pending.blocked for pending in acks)
            if self.config.max_jobs is not None:
                free = min(free, self.config.max_jobs - self.started)
            if free > 0 or acks:
                idle = held == len(acks)  # nothing runs once these acks are written
                try:
                    claimed, more = self._claim_round(acks, free, idle)
                except DATABASE_ERRORS as exc:
                    self._stopping.wait(outage.failed(exc))
                    continue
                outage.recovered()
                if free > 0:
                    self.pool.claimed(more)
                flow = self.client.flow
                # A due job that a limit holds back (its key, its queue's cap or
                # rate) is still due: a burst worker waits for it.
                if self.config.burst and idle and free > 0 and not claimed and not flow.held:
                    self.request_stop("burst: no job due")
                    return
                if more or flow.walk_next:
                    continue
            # Waiting for work: the lines of the jobs acked so far are logged now.
            self.completer.reporter.release()
            self.wakeup.wait(self.pool.growth_due())

    def _claim_round(self, acks: list[PendingAck], free: int, idle: bool) -> tuple[list[Job], bool]:
        """Write ``acks`` and claim up to ``free`` jobs in one transaction; hand the jobs to slots.

        Return the jobs claimed and whether more may wait.
        """
        plan = None
        if self.shares is not None and free > 0:
            self.shares.refill(self.wakeup.take_notified())
            plan = self.shares.plan(free, ask_all=idle)
        metrics = self.metrics
        started = time.monotonic() if metrics is not None else 0.0
        # The last round's lines are logged while this one waits on the database.
        self.completer.reporter.release()
        try:
            acked, claimed = self.client.ack_and_claim(
                [(pending.job, pending.result) for pending in acks],
                worker_id=self.config.worker_id,
                queue_limits=plan,
                limit=max(free, 0),
                visibility_timeout=self.config.visibility_timeout,
            )
        except BaseException as exc:  # noqa: B036 - the slots waiting on these acks must hear of it
            self.completer.fail(acks, exc)
            raise
        if metrics is not None:
            metrics.claim_round(time.monotonic() - started, claimed, len(acks))
        self.completer.settle(acks, acked)
        if free <= 0:
            return claimed, False
        self.running.add_many(claimed)
        self.pool.hand_off(claimed)
        self.started += len(claimed)
        if claimed:
            self.heartbeat.nudge_for(claimed)
        if self.shares is None or plan is None:
            return claimed, len(claimed) == free
        return claimed, self.shares.record(plan, claimed)

    # -- acks ------------------------------------------------------------------

    def _ack_submitted(self) -> None:
        self.wakeup.wake()

    def _acks_written(self, jobs: list[Job]) -> None:
        # The acks are committed: these claims need no more heartbeats, and their
        # slots count as free for the next claim.
        self.running.remove_many(jobs)

    # -- stopped jobs ----------------------------------------------------------

    def _job_stopped(self, control: RunControl) -> None:
        # A cancelled or lost job's claim is no longer this worker's to keep, but its slot is
        # taken until its code returns.
        if control.reason in (StopReason.CANCELLED, StopReason.LOST):
            self.running.detach(control.job)

    def _job_hung(self, control: RunControl) -> None:
        # A thread stuck past its timeout's grace: its outcome is written from a thread of its own.
        threading.Thread(target=self._give_up, args=(control,), name="jobqueue-give-up", daemon=True).start()

    def _give_up(self, control: RunControl) -> None:
        try:
            self.executor.give_up(control, lambda: self.running.detach(control.job))
        finally:
            connections.close_all()

    # -- stopping --------------------------------------------------------------

    def _drain(self) -> bool:
        # --burst / --max-jobs: let every claimed job finish, unless a signal cuts it short.
        while not self._signalled.is_set() and not self.running.wait_empty(timeout=0.2):
            pass
        if len(self.running):
            logger.info(
                "worker %s stopping (%s): waiting up to %gs for %s running job(s)",
                self.config.worker_id,
                self.stop_reason,
                self.config.shutdown_timeout,
                len(self.running),
            )
        finished = self.running.wait_empty(self.config.shutdown_timeout)
        self.heartbeat.stop()
        # The jobs that finished wrote their last progress; a handed-back one's would be refused.
        self.progress.stop()
        # Before the hand-back, which it would otherwise take for lost claims.
        self.cancel_watch.stop()
        if not finished:
            self._hand_back_running()
        self.ticker.stop()
        # After the slots' last acks; a slot abandoned above acks on its own connection.
        self.completer.stop()
        self.completer.reporter.stop()
        # One stop token per slot ever started (Pool.stop). Slots still running a handed-back job
        # are abandoned, not waited for.
        self.pool.stop(1.0 if finished else 0.1)
        self.watchdog.stop()
        self.pool.close()
        self.row.delete()
        left = self.pool.still_running()
        logger.info(
            "worker %s stopped (%s) after %s job(s)%s",
            self.config.worker_id,
            self.stop_reason,
            self.started,
            f"; {left} job thread(s) still running were abandoned" if left else "",
        )
        return left == 0

    def _hand_back_running(self) -> None:
        # A job whose ack waits on another transaction's lock ran: it is not handed back as unrun.
        finished = {job.pk for job in self.completer.blocked_jobs()}
        held = [job for job in self.running.snapshot() if job.pk not in finished]
        for job in held:
            self.executor.hand_back(job)
        # Their code may still run: it is told to stop (ctx.cancelled), then forced or abandoned.
        for control in self.executor.attempts_of(held):
            self.watchdog.stop_job(control, StopReason.SHUTDOWN)


def run_worker(config: WorkerConfig) -> Supervisor:
    """Run a worker in this process until it stops, and return it (see ``Supervisor.clean``).

    The claiming loop runs in a thread of its own while the main thread only
    waits for it, so that the signal handlers (which run in the main thread)
    never interrupt code holding a lock they need.
    """
    supervisor = Supervisor(config)
    keep_out_of_collections()
    signals = StopSignals(supervisor.on_signal)
    signals.install()
    try:
        claimer = threading.Thread(target=supervisor.run, name="jobqueue-claimer")
        claimer.start()
        while claimer.is_alive():
            claimer.join(0.5)
    finally:
        signals.restore()
    return supervisor
