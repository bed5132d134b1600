"""The slots of a worker: the threads that run its jobs, one job at a time each.

The claimer puts each job it claims in one hand-off queue; any idle slot takes
it and runs it (``executor.py``). Slots are numbered from 0 as they start, and
a number is never reused.

- With ``--pool processes`` each slot feeds a child process of its own
  (``pool.py``), started before the slot, replaced between batches when it
  is worn out, and let exit when the slot does; the drain kills those still
  running a job. A slot takes a batch of jobs at once (``prefetch.py``: up
  to the depth, and its share of those waiting), hands it to its child in
  one message and writes each job's outcome as its answer comes. The
  claimer claims for two batches per child (``capacity``); jobs of a batch
  that the child skipped go back to the hand-off queue, or, once the worker
  is signalled, back to the queue at once, with those no slot has taken.
- With ``--concurrency MIN:MAX`` the claimer asks, each round, for a resize
  (``autoscale.py`` decides): growing starts new slots (and their children)
  before the claim that fills them; shrinking puts a stop token in the
  hand-off queue for each slot to retire, behind every job already handed
  out. A slot retires by taking a stop token instead of a job, so only a
  slot with nothing to run ever takes one, and a shrink can neither lose
  nor run a job twice. The slot count is written on the worker row, for the
  admin.
- Stopping puts one stop token per slot ever started: every slot still
  running exits once its job (or batch) is done. A slot that takes a stop
  token along with jobs runs them, then exits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from django.db import connections

from ...models import Job
from ...queue import QueueClient
from ..config import WorkerConfig
from ..outage import DATABASE_ERRORS
from ..run.executor import Executor
from ..run.outcomes import Outcome
from ..running import RunningJobs
from .autoscale import SlotPolicy
from .processes.pool import Child, ChildStartError
from .processes.prefetch import Depth, HandOff

logger = logging.getLogger(__name__)


class Slots:
    """A worker's slots: their hand-off queue, their threads, their children and their number."""

    def __init__(
        self,
        config: WorkerConfig,
        client: QueueClient,
        executor: Executor,
        running: RunningJobs,
        wake: Callable[[], None],
        signalled: threading.Event,
    ) -> None:
        self.config = config
        self.client = client
        self.executor = executor
        self.running = running
        self.wake = wake  # wakes the claimer: a slot is free
        self.signalled = signalled  # set by a signal: hand jobs back instead of running them
        # A job for any idle slot, or None: the slot that takes it exits (retired, or stopping).
        self._handoff: HandOff[Job] = HandOff()
        # --pool processes: how many jobs a slot hands its child at once (prefetch.py).
        self.depth = Depth()
        self._threads: dict[int, threading.Thread] = {}  # every slot started, by number; never reused
        self._count = config.concurrency  # the slots claims are made for; retiring ones left out
        self._children: dict[int, Child] = {}  # --pool processes: each live slot's child, by slot number
        self._children_lock = threading.Lock()
        self._policy: SlotPolicy | None = None
        if not config.slot_range.fixed:
            self._policy = SlotPolicy(
                config.slot_range, config.resize_interval, config.shrink_after, time.monotonic()
            )
        self._row_slots = config.concurrency  # what the worker row says, for the admin
        # runworker --metrics-port's: told the slot count after each resize.
        self.on_resize: Callable[[int], None] | None = None

    @property
    def count(self) -> int:
        """The slots the worker runs now: ``--concurrency``, or within its MIN:MAX."""
        return self._count

    @property
    def capacity(self) -> int:
        """The jobs the worker claims for: one per slot; under ``--pool processes``, two batches per child.

        A child's next batch waits in the hand-off queue while it runs one, so
        that it never waits for a claim round between two batches. Jobs of
        one at a time (long ones) are not prefetched at all: one per slot.
        """
        depth = self.depth.value
        if self.config.pool == "processes" and depth > 1:
            return self._count * depth * 2
        return self._count

    # -- start -----------------------------------------------------------------

    def start_children(self) -> None:
        """``--pool processes``: start a child per slot.

        Raise ``ChildStartError`` if one cannot start; those started are left
        for ``retire_children()``.
        """
        if self.config.pool != "processes":
            return
        for number in range(self.config.concurrency):
            self._children[number] = self._new_child(number)

    def start(self) -> None:
        """Start the ``--concurrency`` slots (MIN of a range)."""
        for number in range(self.config.concurrency):
            self._start_slot(number)

    def _new_child(self, number: int) -> Child:
        config = self.config
        child = Child(
            f"jobqueue-child-{number}",
            config.worker_id,
            config.using,
            config.verbosity,
            config.child_limits,
            self.signalled,
        )
        child.start()
        child.on_seconds = self.depth.note
        child.on_unstarted = self._unstarted
        child.on_signalled = self._hand_back_waiting
        return child

    def _start_slot(self, number: int) -> None:
        slot = threading.Thread(target=self._run, args=(number,), name=f"jobqueue-slot-{number}", daemon=True)
        self._threads[number] = slot
        slot.start()

    def hand_off(self, jobs: Iterable[Job]) -> None:
        """Give each of ``jobs`` to the next idle slot."""
        for job in jobs:
            self._handoff.put(job)

    # -- a slot ----------------------------------------------------------------

    def _run(self, number: int) -> None:
        try:
            if self.config.pool == "processes":
                self._run_batches(number)
            else:
                self._run_jobs()
        finally:
            # Retired or stopping: nothing is handed to this slot any more.
            self._retire_child_of(number)
            connections.close_all()

    def _run_jobs(self) -> None:
        """The thread pool's slot: one job at a time, in this thread."""
        while (job := self._handoff.get()) is not None:
            if self.signalled.is_set():
                self._hand_back(job)
            else:
                self._run_one(job, None)

    def _run_batches(self, number: int) -> None:
        """The process pool's slot: batches of jobs handed to its child, each job's outcome written here."""
        child = self._children.get(number)
        stopping = False
        while not stopping:
            most = self.depth.value
            if child is not None and (left := child.jobs_left()) is not None:
                most = max(1, min(most, left))
            jobs, stopping = self._handoff.take(most)
            if not jobs:
                continue
            if self.signalled.is_set() or child is None:
                for job in jobs:
                    self._hand_back(job)
                continue
            child.send(jobs)
            for job in jobs:
                if not child.taken_back(job):
                    self._run_one(job, child)
            child = self._renewed(number, child)

    def _run_one(self, job: Job, child: Child | None) -> None:
        """Run ``job`` (in ``child``, or in this thread); then free its slot unless its ack is pending."""
        outcome = None
        try:
            outcome = self.executor.run(job, child)
        finally:
            self._freed(job, outcome)

    def _hand_back(self, job: Job) -> None:
        """Give ``job`` back unstarted (a signal, or its child skipped it), and free its slot."""
        self._freed(job, self.executor.hand_back(job))

    def _freed(self, job: Job, outcome: Outcome | None) -> None:
        # An ack batched with a claim frees its job's slot once written (the supervisor's
        # _acks_written); anything else frees it here.
        if outcome is not Outcome.PENDING and self.running.remove(job):
            self.wake()

    def _unstarted(self, job: Job) -> None:
        """A job that its child skipped behind a long one: to another slot; handed back once signalled."""
        if self.signalled.is_set():
            self._hand_back(job)
        else:
            self._handoff.put(job)  # still claimed, still held

    def _hand_back_waiting(self) -> None:
        """The worker was signalled: hand back, now, the jobs no slot has taken yet."""
        jobs, _tokens = self._handoff.waiting()
        for job in jobs:
            self._hand_back(job)

    def _retire_child_of(self, number: int) -> None:
        # Taken out first, so that the drain's retire_children never kills one being retired here.
        with self._children_lock:
            child = self._children.pop(number, None)
        if child is not None:
            child.retire()

    def _renewed(self, number: int, child: Child) -> Child | None:
        """``child``, or a new one in its place if it is worn out; None if none could start.

        Between jobs, so that the next job does not wait for a fork. A slot
        without a child hands its jobs back while it tries again.
        """
        why = child.worn_out()
        if not why:
            return child
        logger.info("worker %s: replacing %s (pid %s): %s", self.config.worker_id, child.name, child.pid, why)
        child.retire()
        # Jobs claimed before a --burst or --max-jobs stop still run: only a signal gives up.
        while not self.signalled.is_set():
            try:
                child = self._new_child(number)
            except ChildStartError as exc:
                logger.error("worker %s: %s; trying again in 1s", self.config.worker_id, exc)
                self.signalled.wait(1.0)
                continue
            with self._children_lock:
                self._children[number] = child
            return child
        return None

    # -- autoscaling (--concurrency MIN:MAX) -------------------------------------

    def resize(self, held: int) -> None:
        """Grow or shrink the slots as the policy says, log it, and tell the worker row.

        Does nothing for a fixed ``--concurrency``.
        """
        if self._policy is None:
            return
        now = time.monotonic()
        before = self._count
        target = self._policy.decide(now, held)
        why = ""
        if target > before:
            self._grow(target)
            why = "due jobs were waiting"
        elif target < before:
            self._shrink(target)
            why = f"slots unneeded for {self.config.shrink_after:g}s"
        if self._count != target:
            self._policy.resized(self._count, now)
        if self._count != before:
            logger.info(
                "worker %s: %s -> %s slots (%s; range %s)",
                self.config.worker_id,
                before,
                self._count,
                why,
                self.config.slot_range,
            )
        self._record_slots()
        if self.on_resize is not None:
            self.on_resize(self._count)

    def claimed(self, filled_every_slot: bool) -> None:
        """Tell the policy what a round that had free slots found (see ``SlotPolicy.claimed``)."""
        if self._policy is not None:
            self._policy.claimed(filled_every_slot)

    def growth_due(self) -> float | None:
        """Seconds the loop may sleep before a waiting backlog can grow the slots; None: a poll interval."""
        if self._policy is None:
            return None
        wait = self._policy.seconds_to_growth(time.monotonic())
        return None if wait is None else min(wait, self.config.poll_interval)

    def _grow(self, target: int) -> None:
        """Start slots (and their children) up to ``target``; fewer if a child cannot start."""
        while self._count < target:
            number = len(self._threads)
            if self.config.pool == "processes":
                try:
                    child = self._new_child(number)
                except ChildStartError as exc:
                    logger.error("worker %s: not growing: %s", self.config.worker_id, exc)
                    return
                with self._children_lock:
                    self._children[number] = child
            self._start_slot(number)
            self._count += 1

    def _shrink(self, target: int) -> None:
        # Each token is taken by a slot that has no job: it exits, and its child with it. The
        # jobs already handed off sit before the tokens and go to slots that stay.
        for _ in range(self._count - target):
            self._handoff.put(None)
        self._count = target

    def _record_slots(self) -> None:
        """Write the slot count on the worker row if it changed; a failed write is tried next round."""
        count = self._count
        if count == self._row_slots:
            return
        try:
            self.client.resize_worker(self.config.worker_id, count)
        except DATABASE_ERRORS as exc:
            logger.debug("worker %s: could not record %s slots yet: %s", self.config.worker_id, count, exc)
            return
        # A row pruned meanwhile is written again, with this count, when the heartbeat registers again.
        self._row_slots = count

    # -- stopping --------------------------------------------------------------

    def stop(self, wait: float) -> None:
        """Tell every slot to exit once its job is done; wait up to ``wait`` seconds for them all."""
        # One stop token per slot ever started: those retired took theirs, the extra ones are never read.
        for _slot in self._threads:
            self._handoff.put(None)
        deadline = time.monotonic() + wait
        for slot in self._threads.values():
            slot.join(max(0.0, deadline - time.monotonic()))

    def still_running(self) -> int:
        """How many slots' threads are still alive (running a job that was handed back)."""
        return sum(slot.is_alive() for slot in self._threads.values())

    def retire_children(self) -> None:
        """Let each idle child exit; kill those still running a job (its claim was handed back)."""
        with self._children_lock:
            children = list(self._children.items())
        for number, child in children:
            slot = self._threads.get(number)
            if slot is not None and slot.is_alive():
                # Not retired: its slot's thread still waits on its pipes and joins it once it
                # died; closing them under that thread crashed it.
                child.kill("the worker stopped")
                continue
            self._retire_child_of(number)
