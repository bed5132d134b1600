"""Jobs for the tests of the testing kit (``django_jobqueue.testing``), registered on import."""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib.auth.models import Group

from django_jobqueue import JobContext, Retry, job

# The contexts that context_job received, latest last, for a test to look at after perform().
contexts: list[JobContext] = []


@job(name="kit.send_receipt", queue="mail")
def send_receipt(order_id: int, lines: list[Any] | None = None, *, copy: bool = False) -> dict[str, Any]:
    return {"order_id": order_id, "lines": lines, "copy": copy}


@job(name="kit.report")
def nightly_report() -> None:
    return None


@job(name="kit.kinds")
def kinds(**values: Any) -> dict[str, str]:
    """What the function received, by type name: a payload reaches it through JSON."""
    return {key: type(value).__name__ for key, value in values.items()}


@job(name="kit.pair")
def pair(a: int, b: int) -> tuple[int, int]:
    return (a, b)


@job(name="kit.when")
def when() -> datetime.datetime:
    return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@job(name="kit.with_context", takes_context=True, max_attempts=3, timeout=60)
def with_context(ctx: JobContext, steps: int) -> dict[str, Any]:
    contexts.append(ctx)
    for step in range(1, steps + 1):
        ctx.progress(step, steps, f"step {step}")
    return {
        "attempt": ctx.attempt,
        "worker_id": ctx.worker_id,
        "cancelled": ctx.cancelled,
        "extended": ctx.extend_visibility(60),
        "id": ctx.job.pk,
        "queue": ctx.job.queue,
        "max_attempts": ctx.job.max_attempts,
        "timeout": ctx.job.timeout,
        "payload": ctx.job.payload,
    }


@job(name="kit.retrying")
def retrying() -> None:
    raise Retry(delay=5, reason="the provider is down")


@job(name="kit.atomic_group", atomic=True)
def atomic_group(name: str, fail: bool = False) -> int:
    group = Group.objects.create(name=name)
    if fail:
        raise ValueError(f"{name} failed after its write")
    return group.pk


@job(name="kit.coroutine")
async def coroutine(value: int) -> int:
    """Awaits the ORM the Django way: its query runs on the test's connection, in its transaction."""
    group = await Group.objects.acreate(name=f"coroutine-{value}")
    return await Group.objects.filter(pk=group.pk).acount() + value
