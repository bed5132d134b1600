"""``--pool processes``: each slot feeds a child process of its own.

Each slot's child (``children.py``) is started before the slot, replaced
between batches when it is worn out, and let exit when the slot does; the
drain kills those still running a job. A slot takes a batch of jobs at once
(``prefetch.py``: up to the depth, and its share of those waiting), hands it
to its child in one message and writes each job's outcome as its answer
comes. The claimer claims for two batches per child (``capacity``); jobs of a
batch that the child skipped go back to the hand-off queue, or, once the
worker is signalled, back to the queue at once, with those no slot has taken.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from ....models import Job
from ..base import PoolStartError
from ..slots import Slots
from .children import Child, ChildStartError
from .prefetch import Depth

if TYPE_CHECKING:
    from ..base import PoolParts

logger = logging.getLogger(__name__)


class ProcessPool(Slots):
    """Slots that each run their jobs in a child process, in batches."""

    def __init__(self, parts: PoolParts) -> None:
        super().__init__(parts)
        # How many jobs a slot hands its child at once (prefetch.py).
        self.depth = Depth()
        self._children: dict[int, Child] = {}  # each live slot's child, by slot number
        self._children_lock = threading.Lock()

    @property
    def capacity(self) -> int:
        """Two batches per child: a child's next batch waits in the hand-off queue while it runs one.

        So a child never waits for a claim round between two batches. Jobs of
        one at a time (long ones) are not prefetched at all: one per slot.
        """
        depth = self.depth.value
        if depth > 1:
            return self._count * depth * 2
        return self._count

    def start(self) -> None:
        """Start a child per slot, then the slots; raise ``PoolStartError`` if a child cannot start."""
        try:
            for number in range(self.config.concurrency):
                self._children[number] = self._new_child(number)
        except ChildStartError as exc:
            self.close()
            raise PoolStartError(str(exc)) from exc
        super().start()

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

    def _add_slot(self, number: int) -> bool:
        try:
            child = self._new_child(number)
        except ChildStartError as exc:
            logger.error("worker %s: not growing: %s", self.config.worker_id, exc)
            return False
        with self._children_lock:
            self._children[number] = child
        return True

    # -- a slot ----------------------------------------------------------------

    def _serve(self, number: int) -> None:
        """Batches of jobs handed to the slot's child, each job's outcome written here."""
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

    def _slot_exited(self, number: int) -> None:
        # Taken out first, so that the drain's close() never kills one being retired here.
        with self._children_lock:
            child = self._children.pop(number, None)
        if child is not None:
            child.retire()

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

    # -- stopping --------------------------------------------------------------

    def close(self) -> None:
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
            self._slot_exited(number)
