"""``--pool threads``, the default: each slot runs its jobs in its own thread, one at a time."""

from __future__ import annotations

from .slots import Slots


class ThreadPool(Slots):
    """Slots that run each job in their own thread."""

    def _serve(self, number: int) -> None:
        while (job := self._handoff.get()) is not None:
            if self.signalled.is_set():
                self._hand_back(job)
            else:
                self._run_one(job, None)
