"""The demo's jobs: send a new account its one-time password; count the OTP queue now and then.

``runworker`` imports this module (every installed app's ``jobs``) at start.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from django.utils import timezone

from django_jobqueue import Fail, Retry, job

from . import provider
from .models import Account

if TYPE_CHECKING:
    from django_jobqueue.worker.run.context import JobContext


@job(name="send_otp", queue="otp", max_attempts=4, visibility_timeout=30, takes_context=True)
def send_otp(ctx: JobContext, account_id: str) -> dict[str, str]:
    """Send account ``account_id`` its one-time password, at most once.

    A temporary provider failure propagates, and the worker retries it with
    backoff; a rate limit retries after the delay the provider asked for; a
    number that can never be reached goes to the dead letters at once.
    """
    account = Account.objects.filter(pk=account_id).first()
    if account is None:
        return {"skipped": "account deleted before its code was sent"}
    if account.otp_sent_at is not None:
        # At-least-once delivery: an earlier run sent the code and was cut off
        # before its ack. Texting the user a second code would confuse them.
        return {"skipped": "code already sent"}
    try:
        message_id = provider.send_otp(
            account.phone,
            attempt=ctx.attempt,
            # The same key on every run of this job lets a real provider drop a
            # repeat that slipped past the check above.
            idempotency_key=f"send_otp-{ctx.job.id}",
        )
    except provider.RateLimited as exc:
        raise Retry(delay=exc.retry_after, reason=str(exc)) from exc
    except provider.NotDeliverable as exc:
        raise Fail(str(exc)) from exc
    Account.objects.filter(pk=account.pk, otp_sent_at__isnull=True).update(otp_sent_at=timezone.now())
    return {"message_id": message_id}


@job(name="demo.queue_summary", queue="summary")
def queue_summary() -> dict[str, int]:
    """Count the OTP jobs by state; the result is kept on the job's row.

    The demo declares it as a periodic job (``JOBQUEUE_SCHEDULES``, every two
    seconds) for its own run only: the example project's settings declare no
    schedule, so the test suite's workers fire nothing.
    """
    from .report import snapshot  # here: every worker imports this module, few need rich

    return asdict(snapshot("otp"))
