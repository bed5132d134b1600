"""Sign-up, as a view would do it: the account and its OTP job commit together or not at all."""

from __future__ import annotations

from django.db import transaction

from django_jobqueue.models import Job

from .jobs import send_otp
from .models import Account


class SignupCrashed(Exception):  # noqa: N818 - an event of the story, not a programming error
    """The demo's stand-in for a server that falls over halfway through a sign-up."""

    def __init__(self, account: Account, otp_job: Job) -> None:
        super().__init__(f"sign-up of {account.phone} crashed after its OTP job #{otp_job.pk} was queued")
        self.account = account
        self.otp_job = otp_job


def register_user(phone: str, *, crash_after_enqueue: bool = False) -> tuple[Account, Job]:
    """Create an account for ``phone`` and queue its OTP, in one transaction.

    With ``crash_after_enqueue``, raise ``SignupCrashed`` after both inserts,
    inside the transaction: the rollback takes the job with it.
    """
    with transaction.atomic():
        account = Account.objects.create(phone=phone)
        otp_job = send_otp.using(unique_key=otp_key(account)).enqueue(account_id=str(account.pk))
        if crash_after_enqueue:
            raise SignupCrashed(account, otp_job)
    return account, otp_job


def resend_code(account: Account) -> Job:
    """Queue an OTP for ``account`` unless one is still waiting: a second tap changes nothing."""
    return send_otp.using(unique_key=otp_key(account)).enqueue(account_id=str(account.pk))


def otp_key(account: Account) -> str:
    return f"otp:{account.pk}"
