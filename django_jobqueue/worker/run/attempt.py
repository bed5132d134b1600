"""Run a job's code once and say what it comes to: the outcome table.

This is the one place that catches broad exceptions: whatever a job raises
becomes one row of the outcome table below, and nothing a job does can take a
worker thread (or a child process of ``--pool processes``) down. The worker's
thread pool calls it in the slot's thread, the process pool in a child
(``pools/processes/child.py``); ``executor.py`` writes the verdict to the queue.

==============================================  ==========================  =================
what the job did                                what the queue is told      outcome logged
==============================================  ==========================  =================
returned a JSON value (or None)                 ``ack(result)``             ``done``
returned a value JSON cannot carry              ``fail(error)``             ``dead``
raised ``Retry(delay=…)``                       ``nack(delay=…)``           ``retry`` / ``dead``
raised ``Fail(message)``                        ``fail(message)``           ``dead``
raised an exception its ``@job(fail_on=…)``     ``fail(error)``             ``dead``
names
could not be called: payload does not fit       ``fail(error)``             ``dead``
its signature
raised anything else                            ``nack(delay=backoff)``     ``retry`` / ``dead``
==============================================  ==========================  =================

A job that ran is never run again because of what it returned: a return value
JSON cannot carry (a ``datetime``, a model instance) sends it to the dead
letters at once with a ``JobPayloadError`` naming the value, whether results
are kept or not. Its effects happened once; retrying the dead letter is an
operator's decision.

A payload whose keys do not fit the function's keyword arguments (a missing
or unknown argument) can never succeed, so it is dead-lettered without calling
the function; enqueueing refuses such a payload already where the function is
registered, so this meets jobs enqueued elsewhere or before a deploy changed
the signature.

"Anything else" includes a name nobody registered (``no job registered as
'x'``): nacked, not failed, because the next deploy of a rolling update may
bring the code; once its attempts are spent it lands in the dead letters like
any failure, and the error says so instead of promising a retry.

A job of Django's Tasks framework (marked by the backend, see ``tasks.py``)
goes through the same table. Its task is found by its module path rather than
the registry, and a path that leads to anything but a ``Task`` is refused with
``Fail`` before anything is called; a missing module is nacked like an unknown
name.
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

from asgiref.sync import async_to_sync
from django.db import connections, transaction

from ... import registry
from ...exceptions import Fail, Retry, UnknownJobError
from ...models import Job
from ...queue import QueueClient
from ...queue.validation import encode_result, to_seconds
from .context import JobContext
from .control import TaskOwner, owner_here
from .outcomes import Action, Attempt, Outcome, Verdict
from .progress import ProgressReport
from .tracing import traced_run


class PayloadMismatch(Exception):  # noqa: N818 - never raised by a job's own code, only by call_job
    """A job's payload does not fit its function's keyword arguments: no attempt can succeed."""


def verdict_for(
    exc: BaseException, *, qualified: bool = False, fail_on: tuple[type[BaseException], ...] = ()
) -> Verdict:
    """The outcome table's rows for a job that raised ``exc``.

    ``qualified`` names the exception with its module, as a traceback does (a
    Django Task's ``TaskError`` needs the class's path). ``fail_on`` is the
    job's ``@job(fail_on=…)``: those exceptions go to the dead letters at once.
    """
    trace = "".join(traceback.format_exception(exc))
    if isinstance(exc, PayloadMismatch):
        return Verdict(Action.FAIL, error=f"JobPayloadError: {message_of(exc)}")
    if isinstance(exc, Retry):
        try:
            delay = None if exc.delay is None else to_seconds(exc.delay, "Retry's delay")
        except ValueError as bad_delay:
            return Verdict(Action.NACK, error=f"Retry with a bad delay, backoff used instead: {bad_delay}")
        return Verdict(Action.NACK, error=f"Retry: {message_of(exc)}", traceback=trace, delay=delay)
    if isinstance(exc, Fail):
        return Verdict(Action.FAIL, error=f"Fail: {message_of(exc)}", traceback=trace)
    error = f"{_exception_name(exc, qualified)}: {message_of(exc)}"
    action = Action.FAIL if isinstance(exc, fail_on) else Action.NACK
    return Verdict(action, error=error, traceback=trace)


def verdict_for_result(result: Any, task_run: Any = None, *, qualified: bool = False) -> Verdict:
    """The outcome table's rows for a job that returned ``result``: an ack, or a dead letter if unstorable.

    Never a retry: the job ran, and running it again would repeat its effects
    for the sake of a value.
    """
    try:
        if task_run is not None:
            result = task_run.normalize(result)
        encode_result(result)
    except Exception as exc:
        error = (
            f"{_exception_name(exc, qualified)}: {message_of(exc)} "
            "(the job ran and returned this; it is not run again for its return value)"
        )
        return Verdict(Action.FAIL, error=error, traceback="".join(traceback.format_exception(exc)))
    return Verdict(Action.ACK, result=result)


def message_of(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder if the exception's own ``__str__`` raises.

    Raised here, that error would end the slot's thread while the worker went
    on claiming jobs for it that nothing runs.
    """
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


def _exception_name(exc: BaseException, qualified: bool) -> str:
    kind = type(exc)
    if not qualified or kind.__module__ in ("builtins", "__main__"):
        return kind.__name__
    return f"{kind.__module__}.{kind.__qualname__}"


def timeout_verdict(job: Job, control: Any, attempt: Attempt | None) -> Verdict:
    """A failure, retried with backoff: the attempt ran past its ``timeout``, whatever it did after.

    The traceback is the one the job ended with (where ``JobTimeout`` met it),
    if it ended at all.
    """
    error = f"JobTimeout: timed out after {control.timeout:g} s"
    if attempt is None:
        error += (
            f" (it did not stop within --cancel-grace {control.grace:g} s: its thread was left running "
            "and its slot stays taken until it returns)"
        )
    elif attempt.died:
        error += f" (its child process was stopped: {attempt.died})"
    trace = attempt.verdict.traceback if attempt is not None else ""
    return Verdict(Action.NACK, error=error, traceback=trace, timed_out=True)


def run_job(
    job: Job,
    worker_id: str,
    client: QueueClient,
    stopped: Callable[[], bool],
    guard: AbstractContextManager[Any] | None = None,
    report: ProgressReport | None = None,
) -> Attempt:
    """Call ``job``'s function (or Django Task) with its payload; return the verdict, never raise.

    ``guard`` is entered around the job's own code alone (the thread pool's
    interruptible section); ``stopped`` is what ``ctx.cancelled`` reads, and
    ``report`` what ``ctx.progress`` calls. The run is a span of the trace the
    job was enqueued in, where OpenTelemetry is in use (``tracing.py``); the
    span is opened outside ``guard``, so that an interruption lands in the
    job's code, never in the span's bookkeeping.
    """
    return traced_run(job, lambda: _attempt(job, worker_id, client, stopped, guard, report))


def _attempt(
    job: Job,
    worker_id: str,
    client: QueueClient,
    stopped: Callable[[], bool],
    guard: AbstractContextManager[Any] | None,
    report: ProgressReport | None,
) -> Attempt:
    task_run = None
    spec = None
    try:
        if not job.task_backend:
            spec = spec_of(job, worker_id)
            if spec.atomic:
                return _atomic_attempt(job, spec, worker_id, client, stopped, guard, report)
        with guard if guard is not None else nullcontext():
            if spec is None:
                # A Django Task (the one job found by its path, and only if it is a Task).
                from .tasks import TaskRun

                task_run = TaskRun(job)
                result = task_run.call()
            else:
                result = _call(job, spec, worker_id, client, stopped, report)
    except BaseException as exc:  # noqa: B036 - the outcome table: nothing a job raises escapes
        return raised_attempt(job, spec, task_run, exc)
    return returned_attempt(job, task_run, result)


def raised_attempt(job: Job, spec: registry.JobSpec | None, task_run: Any, exc: BaseException) -> Attempt:
    """What a run of ``job`` that raised ``exc`` comes to (``spec`` is None for a Django Task)."""
    fail_on = spec.fail_on if spec is not None else ()
    verdict = verdict_for(exc, qualified=bool(job.task_backend), fail_on=fail_on)
    if isinstance(exc, UnknownJobError):
        verdict = replace(verdict, error=f"{verdict.error} ({_what_next(job)})")
    return Attempt(verdict, task_run, exc)


def returned_attempt(job: Job, task_run: Any, result: Any) -> Attempt:
    """What a run of ``job`` that returned ``result`` comes to."""
    return Attempt(verdict_for_result(result, task_run, qualified=bool(job.task_backend)), task_run)


class _Undone(Exception):  # noqa: N818 - never escapes _atomic_attempt
    """Roll an atomic job's transaction back: its verdict is not an ack, or the ack was refused."""

    def __init__(self, verdict: Verdict, settled: Outcome | None = None) -> None:
        super().__init__(verdict.error)
        self.verdict = verdict
        self.settled = settled


def _atomic_attempt(
    job: Job,
    spec: registry.JobSpec,
    worker_id: str,
    client: QueueClient,
    stopped: Callable[[], bool],
    guard: AbstractContextManager[Any] | None,
    report: ProgressReport | None,
) -> Attempt:
    """Run an ``atomic=True`` job and ack it in one transaction on the queue's database.

    ``guard`` covers the job's code alone: an interruption (a timeout) lands
    there and unwinds through the rollback, never inside the ack or the
    commit. What the job raised is returned as its verdict once the
    transaction is rolled back, so that the retry or dead letter is written
    on its own, outside it.
    """
    if not connections[client.using].features.supports_transactions:
        message = f"database {client.using!r} has no transactions: atomic job {job.name!r} cannot run there"
        return Attempt(Verdict(Action.FAIL, error=f"Fail: {message}"))
    try:
        with transaction.atomic(using=client.using):
            with guard if guard is not None else nullcontext():
                result = _call(job, spec, worker_id, client, stopped, report)
            verdict = verdict_for_result(result)
            if verdict.action is not Action.ACK:
                raise _Undone(verdict)  # dead-lettered for its return value: its writes go too
            if not client.ack(job, worker_id=worker_id, result=verdict.result):
                raise _Undone(verdict, Outcome.LOST)
    except _Undone as undone:
        return Attempt(undone.verdict, settled=undone.settled)
    except BaseException as exc:  # noqa: B036 - the outcome table, as in _attempt
        return Attempt(verdict_for(exc, fail_on=spec.fail_on), raised=exc)
    return Attempt(verdict, settled=Outcome.DONE)


def spec_of(job: Job, worker_id: str) -> registry.JobSpec:
    """The registered spec of ``job``; raise ``UnknownJobError`` if nobody registered its name."""
    spec = registry.lookup(job.name)
    if spec is None:
        raise UnknownJobError(f"no job registered as {job.name!r} on worker {worker_id}")
    return spec


def _call(
    job: Job,
    spec: registry.JobSpec,
    worker_id: str,
    client: QueueClient,
    stopped: Callable[[], bool],
    report: ProgressReport | None,
) -> Any:
    result = call_job(job, spec, lambda: JobContext(job, worker_id, client, stopped, report))
    return run_to_end(result)


def run_to_end(result: Any) -> Any:
    """``result``, or what it comes to if it is a coroutine (an ``async def`` job's).

    Run to its end in an event loop of its own, as Django runs a coroutine
    Task from sync code (asgiref's ``async_to_sync``): its thread-sensitive
    calls (the async ORM's) come back to this thread, and its connections.
    Under ``--pool asyncio`` a coroutine job is a task of the worker's loop
    instead (``pools/loop/``).
    """
    if inspect.iscoroutine(result):
        return async_to_sync(_awaited)(result, owner_here())
    return result


async def _awaited(coroutine: Coroutine[Any, Any, Any], owner: TaskOwner | None) -> Any:
    if owner is not None:
        # A time limit or a cancel cancels the task, as under --pool asyncio (control.py).
        owner.adopt(asyncio.get_running_loop(), asyncio.current_task())  # type: ignore[arg-type]
    return await coroutine


def call_job(job: Job, spec: registry.JobSpec, context: Callable[[], JobContext]) -> Any:
    """Call ``spec``'s function with ``job``'s payload as keyword arguments; return what it returns.

    A function declared with ``takes_context=True`` gets ``context()`` first.
    Raise ``PayloadMismatch`` without calling anything if the payload does not
    fit its signature; what the function raises passes through. The one way a
    job's function is called: by a worker, and by ``testing.perform``.
    """
    problem = spec.payload_problem(job.payload)
    if problem is not None:
        raise PayloadMismatch(problem)
    func: Callable[..., Any] = spec.func
    if spec.takes_context:
        return func(context(), **job.payload)
    return func(**job.payload)


def _what_next(job: Job) -> str:
    """For an unknown name's error: whether the job is tried again."""
    if job.attempts < job.max_attempts:
        return "retried later: a newer deploy may have it"
    return "no attempts left: moved to the dead letters"
