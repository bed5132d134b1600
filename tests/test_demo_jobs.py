"""The demo's sign-up and OTP job, tested as a project tests its own jobs: with ``django_jobqueue.testing``.

Each test runs inside the ``db`` fixture's transaction: the sign-up enqueues
its job as in production, and ``run_jobs`` runs it through the queue there.
The fake provider's script decides each number's fate (``demo/provider.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from django_jobqueue.testing import assert_enqueued, assert_not_enqueued, run_jobs
from testproject.demo import provider
from testproject.demo.jobs import send_otp
from testproject.demo.signup import SignupCrashed, register_user, resend_code


@pytest.fixture(autouse=True)
def default_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(provider.SEED_ENV, raising=False)


def a_number(fate: Callable[[provider.Script], bool]) -> str:
    """The first demo number whose script ``fate`` accepts."""
    for index in range(provider.NUMBERS):
        phone = f"{provider.PREFIX}{index:03d}"
        if fate(provider.script_for(phone, provider.DEFAULT_SEED)):
            return phone
    raise AssertionError("no number has that fate")


def works_at_once(script: provider.Script) -> bool:
    return script.temporary_failures == 0 and not script.not_on_whatsapp


def test_a_sign_up_queues_one_code_and_the_job_sends_it(db):
    account, _job = register_user(a_number(works_at_once))
    resend_code(account)  # a second tap: the unique key keeps one job

    assert_enqueued(send_otp, args={"account_id": str(account.pk)}, queue="otp", count=1)
    report = run_jobs()

    account.refresh_from_db()
    [done] = report.done
    assert account.otp_sent_at is not None
    assert report.results[done.pk]["message_id"].startswith(f"wamid.send_otp-{done.pk}.")


def test_a_crashed_sign_up_queues_nothing(db):
    with pytest.raises(SignupCrashed):
        register_user(a_number(works_at_once), crash_after_enqueue=True)

    assert_not_enqueued(send_otp)
    assert run_jobs().ran == 0


def test_a_number_not_on_whatsapp_goes_to_the_dead_letters_at_once(db):
    register_user(a_number(lambda script: script.not_on_whatsapp))

    report = run_jobs()  # Fail is the job's answer, not an error: reported, not raised

    assert [job.attempts for job in report.dead] == [1]


def test_an_outage_fails_fast_then_outlasts_every_retry(db):
    account, _job = register_user(a_number(lambda script: script.outage))

    with pytest.raises(provider.ProviderUnavailable, match="HTTP 503"):
        run_jobs()
    report = run_jobs(scheduled=True, raise_errors=False)

    assert [job.attempts for job in report.retried + report.dead] == [2, 3, 4]
    assert len(report.dead) == 1
    account.refresh_from_db()
    assert account.otp_sent_at is None
