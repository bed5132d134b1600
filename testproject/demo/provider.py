"""A fake OTP provider: somebody else's computer, slow and unreliable on purpose.

The demo's users have the phone numbers Ofcom keeps for fiction, +44 7700 900000
to +44 7700 900999. What the provider does with each number is scripted by a
seed, so that a run can be replayed and checked: in every block of 25
consecutive numbers, one is not on WhatsApp (a permanent failure), one sits
behind an outage that outlasts every retry, seven fail temporarily one to three
times before a message goes through, and the other sixteen work at once.

The provider generates and checks the codes itself (as verification services
do), so sending needs only the number. It is a plain module with no Django in
it; the worker processes read the seed from the ``DEMO_OTP_SEED`` variable.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass

SEED_ENV = "DEMO_OTP_SEED"
DEFAULT_SEED = 7
PREFIX = "+44 7700 900"
NUMBERS = 1000
BLOCK = 25
RATE_LIMIT_RETRY_AFTER = 0.5  # seconds, as a provider's Retry-After header would say


class ProviderError(Exception):
    """Anything the provider answers instead of "sent"."""


class ProviderUnavailable(ProviderError):
    """A temporary failure: a 503, a timeout. Trying again later may work."""


class RateLimited(ProviderUnavailable):
    """HTTP 429: the provider says when to come back."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NotDeliverable(ProviderError):
    """A permanent failure: no retry will make this number reachable."""


@dataclass(frozen=True)
class Script:
    """What the provider does with one number."""

    temporary_failures: int = 0  # calls that fail before one succeeds; -1 = every call
    not_on_whatsapp: bool = False

    @property
    def outage(self) -> bool:
        return self.temporary_failures < 0

    def delivered_within(self, attempts: int) -> bool:
        """Whether a message goes through in ``attempts`` calls or fewer."""
        return not self.not_on_whatsapp and 0 <= self.temporary_failures < attempts


# One block of BLOCK numbers; the seed shuffles it.
_BLOCK_SCRIPTS = (
    [Script(not_on_whatsapp=True), Script(temporary_failures=-1)]
    + [Script(temporary_failures=1)] * 4
    + [Script(temporary_failures=2)] * 2
    + [Script(temporary_failures=3)]
    + [Script()] * 16
)
assert len(_BLOCK_SCRIPTS) == BLOCK


def phone_number(index: int) -> str:
    """Return the ``index``-th demo number, 0 <= index < 1000."""
    if not 0 <= index < NUMBERS:
        raise ValueError(f"the demo has {NUMBERS} phone numbers; {index} is out of range")
    return f"{PREFIX}{index:03d}"


def script_for(phone: str, seed: int) -> Script:
    """Return what the provider does with ``phone`` under ``seed``."""
    if not phone.startswith(PREFIX) or not phone[len(PREFIX) :].isdigit():
        return Script()
    index = int(phone[len(PREFIX) :])
    block, position = divmod(index, BLOCK)
    scripts = list(_BLOCK_SCRIPTS)
    random.Random(f"{seed}:{block}").shuffle(scripts)
    return scripts[position]


def current_seed() -> int:
    return int(os.environ.get(SEED_ENV, DEFAULT_SEED))


def send_otp(phone: str, *, attempt: int, idempotency_key: str, seed: int | None = None) -> str:
    """Send a one-time password to ``phone`` and return the provider's message id.

    ``attempt`` (1 for the first call) plays the part of the provider's mood
    that day. ``idempotency_key`` is what a real provider would use to drop a
    repeated request; this fake one only echoes it in the message id.
    Raise ``RateLimited`` or ``ProviderUnavailable`` for a temporary failure
    and ``NotDeliverable`` for a permanent one.
    """
    seed = current_seed() if seed is None else seed
    rng = random.Random(f"{seed}:{phone}:{attempt}")
    time.sleep(rng.uniform(0.03, 0.15))  # somebody else's computer takes its time
    script = script_for(phone, seed)
    if script.not_on_whatsapp:
        raise NotDeliverable("number not on WhatsApp")
    if script.outage:
        raise ProviderUnavailable("HTTP 503 from the provider: messaging for this region is down")
    if attempt <= script.temporary_failures:
        kind = rng.randrange(3)
        if kind == 0:
            raise RateLimited(
                f"HTTP 429 from the provider: retry after {RATE_LIMIT_RETRY_AFTER:g} s",
                RATE_LIMIT_RETRY_AFTER,
            )
        if kind == 1:
            raise ProviderUnavailable("HTTP 503 from the provider: service unavailable")
        raise ProviderUnavailable("timed out after 10 s waiting for the provider")
    return f"wamid.{idempotency_key}.{attempt}"
