"""A child process of ``--pool processes``: it runs the jobs its slot sends it, one at a time.

The child holds no claim and writes no outcome: it runs a job's code
(``attempt.run_job``, the same outcome table as a thread) and sends the
verdict back; its parent keeps the claims, beats them and writes the outcomes.

Its slot sends it a *batch* of claimed jobs in one message (``pool.py``
decides how many: ``prefetch.py``). It runs them in order, one at a time,
and sends each job's answer the moment that job ends, then goes straight on
to the next: no round trip to the parent between two jobs. A job of the
batch not started yet can be *revoked* by the parent (the job before it ran
long, or the worker was signalled): the child skips it and says so (a
``SKIPPED`` message), and the parent gives it to another slot or hands it
back. Which of the two happens is decided under one lock, so
a revoked job is either reported skipped or runs, never both. After a job
that timed out the child runs nothing more of its batch (its state may be
anything) and reports the rest skipped; the parent replaces it.

Jobs travel as the list of their fields' values, datetimes as timestamps
(``pool.job_values``, rebuilt here by ``queue.rows.loaded_job``), not as
pickled model instances: a third of the cost, on the parent's side of every
job.

It dies with its parent. On Linux the kernel kills it (``PR_SET_PDEATHSIG``)
when the process that forked it ends, and everywhere a thread of its own
watches the parent's sentinel and exits the moment the parent is gone: no
orphan goes on running a job whose claim expires and is handed to another
worker.

It ignores ``SIGINT`` and ``SIGTERM``: a terminal's Ctrl-C or a process
manager's stop reaches the whole process group, and it is the parent that
decides how its jobs end (letting them finish, or handing them back).
``SIGUSR1`` is its parent's interruption, through the watcher thread: the job
gets ``JobTimeout`` raised, even inside a ``sleep``.

A job's ``ctx.progress()`` reports go to the parent on the pipe the verdict
comes back on, as ``NOTE`` messages, at most one per ``NOTE_INTERVAL``; the
last report not sent rides with the answer. The parent's slot thread keeps
them in memory and its progress writer writes them (``run/progress.py``).
Messages come in the order the jobs run, so a note belongs to the job whose
answer comes next.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import parent_process
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import TYPE_CHECKING, Any

from ....collector import keep_out_of_collections
from ....exceptions import JobTimeout
from ...run.control import StopReason, running_here
from ...run.outcomes import Action, Attempt
from .pipes import (
    ANSWER,
    DONE,
    NOTE,
    REVOKE,
    SKIPPED,
    Claim,
    datetime_indexes,
    datetimes_from_timestamps,
)

if TYPE_CHECKING:  # imported once Django is set up: the child may be the one to set it up
    from ....models import Job

logger = logging.getLogger(__name__)

# prctl(2)'s option: the signal this process gets when the thread that forked it ends.
PR_SET_PDEATHSIG = 1
# The exit status of a child whose parent went away.
ORPHANED = 70
# Seconds between two progress notes of a job: a quarter of the parent's write interval, so that
# what the parent writes is at most that much older than the job's latest report.
NOTE_INTERVAL = 0.25


@dataclass
class Answer:
    """What a child sends back after a job whose outcome is not a plain ack."""

    attempt: Attempt
    rss: int  # bytes resident after the job
    progress: dict[str, Any] | None = None  # the job's last ctx.progress() report, if not sent yet


class _Running:
    """The job the child's main thread runs now, as its watcher thread and its signal handler see it."""

    def __init__(self) -> None:
        # Taken by the main thread to start or end a job, and by the watcher to stop or revoke
        # one, so that a stop meant for a job that just ended never reaches the next, and a
        # revoked job is either skipped or started, never both.
        self.lock = threading.Lock()
        self.claim: Claim | None = None
        self.reason: StopReason | None = None
        self.inside = False  # in the job's own code: the only place JobTimeout may be raised
        self.interrupt_for: Claim | None = None
        # Stops for jobs not running now: of the batch, not started yet (or of a batch not read
        # yet); those meant for jobs that ended are dropped with the next batch.
        self.early: dict[Claim, StopReason] = {}
        # The claims of the current batch not started yet.
        self.pending: set[Claim] = set()
        # Revoked before their batch was read (or after they ended): checked when a batch comes.
        self.revoked: set[Claim] = set()
        self.raised = False
        # The task an async def job runs as, and its loop: a stop cancels it (attempt.run_to_end).
        self.task: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None


class _Sender:
    """The child's end of the jobs pipe, for every thread that writes on it: one message at a time."""

    def __init__(self, jobs: Connection) -> None:
        self.jobs = jobs
        self._lock = threading.Lock()

    def send(self, message: Any) -> None:
        with self._lock:
            self.jobs.send(message)


def main(jobs: Connection, control: Connection, worker_id: str, using: str, verbosity: int) -> None:
    """The child's whole life: get ready, say so, run batches of jobs until told to stop or orphaned."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        client = _ready(verbosity, using)
    except BaseException as exc:  # noqa: B036 - whatever stops it, the parent must hear why
        jobs.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    keep_out_of_collections()
    running = _Running()
    resident = _Resident()
    sender = _Sender(jobs)
    signal.signal(signal.SIGUSR1, lambda signum, frame: _interrupted(running, frame))
    threading.Thread(
        target=_watch, args=(control, running, sender), name="jobqueue-child-watch", daemon=True
    ).start()
    jobs.send(("ready", os.getpid()))
    from ....queue.rows import JOB_FIELDS, loaded_job

    datetimes = datetime_indexes(JOB_FIELDS)
    while True:
        try:
            batch = jobs.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if batch is None:
            break
        jobs_of_batch = [loaded_job(using, datetimes_from_timestamps(values, datetimes)) for values in batch]
        _run_batch(jobs_of_batch, sender, running, worker_id, client, resident)
    _close_connections()
    from ...run.tracing import flush_spans

    flush_spans()  # a child exits without atexit, where a tracer provider would export the rest


def _run_batch(
    batch: list[Job], sender: _Sender, running: _Running, worker_id: str, client: Any, resident: _Resident
) -> None:
    """Run the jobs of ``batch`` in order, each answer sent as its job ends."""
    claims = {(job.pk, job.claim_token) for job in batch}
    with running.lock:
        running.early = {claim: why for claim, why in running.early.items() if claim in claims}
        skipped = running.revoked & claims
        running.revoked = set()
        running.pending = claims - skipped
    if skipped:
        sender.send((SKIPPED, list(skipped)))
    for job in batch:
        claim = (job.pk, job.claim_token)
        with running.lock:
            if claim not in running.pending:
                continue  # revoked: reported skipped
            running.pending.discard(claim)
            _start(running, claim)
        started = time.monotonic()
        attempt, progress = _run(job, sender, running, worker_id, client)
        seconds = time.monotonic() - started
        if progress is None and attempt.verdict.action is Action.ACK and attempt.settled is None:
            sender.send((DONE, attempt.verdict.result, resident.bytes(), seconds))
        else:
            sender.send((ANSWER, Answer(attempt, resident.bytes(), progress), seconds))
        if running.raised or running.reason is StopReason.TIMEOUT:
            # Interrupted for its time limit: this process's state may be anything, and the parent
            # replaces it; the rest of the batch goes back to the queue unstarted.
            with running.lock:
                rest, running.pending = running.pending, set()
            if rest:
                sender.send((SKIPPED, list(rest)))
            return


def _start(running: _Running, claim: Claim) -> None:
    """Make ``claim`` the running job (``running.lock`` held), with any stop sent before it started."""
    running.claim, running.reason, running.raised = claim, None, False
    early = running.early.pop(claim, None)
    if early is not None:
        running.reason = early
        running.interrupt_for = claim if early is StopReason.TIMEOUT else None


def _ready(verbosity: int, using: str) -> Any:
    """Set Django up if the fork server did not, and load the job modules; return a ``QueueClient``."""
    from .preload import prepare

    prepare()
    from ....queue import QueueClient
    from ...console import console_logging

    # The worker's console lines, as the parent prints them, for what is logged through ours; for
    # the child's whole life, so never exited.
    console_logging(sys.stderr, verbosity).__enter__()
    return QueueClient(using)


def _run(
    job: Job, sender: _Sender, running: _Running, worker_id: str, client: Any
) -> tuple[Attempt, dict[str, Any] | None]:
    """Run ``job`` (the running one); return its attempt and its last progress report not sent yet."""
    from ...outage import failed_to_connect
    from ...run.attempt import run_job
    from ...run.connections import close_held_connections

    close_held_connections()
    notes = _ProgressNotes(sender, running)
    stopped = lambda: running.reason is not None  # noqa: E731 - read by ctx.cancelled
    attempt = run_job(job, worker_id, client, stopped, guard=_Inside(running), report=notes.report)
    with running.lock:
        running.claim = None
    attempt.task_run = None  # the parent sends the Task's signals that follow the outcome
    if attempt.raised is not None:
        attempt.unstarted = failed_to_connect(attempt.raised, client.using)
        attempt.raised = None  # an exception and its traceback do not always pickle
    if running.raised:
        _close_connections()  # interrupted anywhere, even inside a database driver
    close_held_connections()
    return attempt, notes.unsent()


class _ProgressNotes:
    """A job's ``ctx.progress()`` in a child: sent to the parent, at most one note per ``NOTE_INTERVAL``."""

    def __init__(self, sender: _Sender, running: _Running) -> None:
        self.sender = sender
        self.running = running
        # The job's own threads may report too: the latest report is kept.
        self._lock = threading.Lock()
        self._latest: dict[str, Any] | None = None
        self._sent = True
        self._last_note = 0.0

    def report(self, value: dict[str, Any]) -> None:
        with self._lock:
            self._latest, self._sent = value, False
            now = time.monotonic()
            if now - self._last_note < NOTE_INTERVAL:
                return
            self._last_note = now
            self._send((NOTE, value))
            self._sent = True

    def unsent(self) -> dict[str, Any] | None:
        """The latest report, if no note carried it."""
        with self._lock:
            return None if self._sent else self._latest

    def _send(self, note: tuple[int, dict[str, Any]]) -> None:
        running = self.running
        if threading.current_thread() is not threading.main_thread():
            self.sender.send(note)  # the parent's interruption only ever raises in the main thread
            return
        # JobTimeout raised halfway through a message would leave the pipe mid-frame, and the
        # parent could read no verdict after it: the interruption waits until the note is sent.
        inside, running.inside = running.inside, False
        try:
            self.sender.send(note)
        finally:
            running.inside = inside
        if inside and running.interrupt_for == running.claim and not running.raised:
            running.raised = True
            raise JobTimeout("timed out")


class _Inside:
    """Marks the job's own code, where the parent's interruption may raise ``JobTimeout``."""

    def __init__(self, running: _Running) -> None:
        self.running = running

    def __enter__(self) -> None:
        running = self.running
        running.task = None
        running.inside = True
        if running.interrupt_for == running.claim and not running.raised:
            # Told to stop for its timeout before it even started.
            running.raised = True
            raise JobTimeout("timed out")
        running_here(self)

    def __exit__(self, *exc_info: object) -> None:
        running_here(None)
        self.running.inside = False

    def adopt(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self.running.task = (loop, task)  # from the coroutine's own thread (control.TaskOwner)


def _interrupted(running: _Running, frame: FrameType | None) -> None:
    # Runs in the main thread, between two of its bytecodes: nothing else changes `running` meanwhile.
    if running.inside and not running.raised and running.interrupt_for == running.claim:
        running.raised = True
        if running.task is not None:  # an async def job: the main thread only waits for its task
            loop, task = running.task
            loop.call_soon_threadsafe(task.cancel, "django_jobqueue: timeout")
            return
        raise JobTimeout("timed out")


def _watch(control: Connection, running: _Running, sender: _Sender) -> None:
    """The child's second thread: its parent's stop and revoke messages, and the parent's death."""
    parent = parent_process()
    sentinels: list[Any] = [control]
    if parent is not None:
        sentinels.append(parent.sentinel)
    while True:
        ready = wait(sentinels)
        if control not in ready:
            os._exit(ORPHANED)
        try:
            message = control.recv()
        except (EOFError, OSError):
            os._exit(ORPHANED)
        if message[0] == REVOKE:
            _revoke(running, sender, message[1])
        else:
            _stop(running, message[1], StopReason(message[2]))


def _stop(running: _Running, claim: Claim, reason: StopReason) -> None:
    with running.lock:
        if claim != running.claim:
            # Meant for a job of the batch not started yet, or of a batch the main thread has
            # not read yet: it looks here when it starts the job. (Or for one that ended
            # meanwhile: dropped with the next batch.)
            running.early[claim] = reason
            return
        running.reason = reason
        if reason is StopReason.TIMEOUT:
            running.interrupt_for = claim
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)


def _revoke(running: _Running, sender: _Sender, claims: Sequence[Claim]) -> None:
    """Skip the jobs of ``claims`` not started yet, and tell the parent which those are at once.

    The parent always revokes every job of the batch after a given one, so the
    jobs skipped are the batch's last ones: no answer ever comes after the
    report of a skipped job, and the parent, which pairs answers with jobs by
    their order, never takes one job's answer for another's.
    """
    with running.lock:
        skipped = [claim for claim in claims if claim in running.pending]
        running.pending.difference_update(skipped)
        # Of a batch not read yet (the main thread reports them when it reads it), or ended.
        running.revoked.update(claim for claim in claims if claim != running.claim and claim not in skipped)
    if skipped:
        sender.send((SKIPPED, skipped))


def _die_with_parent() -> None:
    _let_fork_server_go()
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    parent = parent_process()
    if parent is not None and not parent.is_alive():
        os._exit(ORPHANED)


def _let_fork_server_go() -> None:
    """Close this child's copy of the worker's end of the fork server's "alive" pipe.

    The fork server exits once no process holds that end: with the worker as
    its only holder, the fork server dies with the worker, and the kernel kills
    every child it forked (``PR_SET_PDEATHSIG`` follows the process that
    forked a child: the fork server). Each child inherits a copy; kept, it
    would keep the fork server, and so the children, alive after the worker's
    death, and a job holding the GIL in a long C call, where the watcher thread
    cannot run, would go on running while its claim expires and is handed out
    again. A job that starts processes through a fork server gets one of its
    own (this process never started one), so the copy serves nothing here.
    """
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if server is None or alive is None or server._forkserver_pid is not None:
        return
    with contextlib.suppress(OSError):
        os.close(alive)
    server._forkserver_alive_fd = None


class _Resident:
    """This process's resident memory now (Linux), else its peak; read after every job."""

    def __init__(self) -> None:
        # Opened once, in the child itself (/proc/self names the process that opens it), and
        # read again from its start after each job: an open, read and close per job cost
        # about 13 times as much (18 µs against 1.4 µs here), in every no-op job's round trip.
        try:
            self._statm: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._statm = None
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def bytes(self) -> int:
        if self._statm is not None:
            try:
                return int(os.pread(self._statm, 128, 0).split()[1]) * self._page
            except (OSError, ValueError, IndexError):
                pass
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def _close_connections() -> None:
    from ...run.connections import close_all_connections

    close_all_connections()
