"""The messages between a worker and the children of ``--pool processes`` (``pool.py``, ``child.py``).

On the jobs pipe the worker sends a batch, the list of its jobs' field values
(or ``None``: exit), and the child answers with tuples whose first item says
what they are. Small integers: a byte of pickle each, on every answer. On the
control pipe the worker sends stops and revokes. Apart from both modules
because neither may import the other at start: the worker must not import
``multiprocessing`` under the thread pool, and the child may be the one to
set Django up.
"""

from __future__ import annotations

# From the child, on the jobs pipe:
DONE = 0  # (DONE, result, rss, seconds): the job returned ``result``, a plain ack; most answers
ANSWER = 1  # (ANSWER, Answer, seconds): any other outcome
NOTE = 2  # (NOTE, report): the running job's latest ctx.progress() report
SKIPPED = 3  # (SKIPPED, [claim, ...]): jobs of the batch it will not run (revoked, or after a timeout)
# From the worker, on the control pipe:
STOP = 0  # (STOP, claim, reason): the job of ``claim`` must stop
REVOKE = 1  # (REVOKE, [claim, ...]): do not start these jobs; report those not started

Claim = tuple[int, int]  # (job id, claim token)
