"""Async views that enqueue, for tests/test_aenqueue.py (its ROOT_URLCONF)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path

from django_jobqueue import aenqueue, job


@job(name="tests.async_views.welcome", queue="mail")
def welcome(user_id: int) -> None:
    """A job the views enqueue (never run here)."""


async def notify(request: HttpRequest) -> JsonResponse:
    """Enqueue by name, with options."""
    queued = await aenqueue("tests.async_views.ping", {"n": int(request.GET["n"])}, priority=5)
    return JsonResponse({"id": queued.pk})


def _sign_up(username: str, fail: bool) -> int:
    # The user and the welcome job commit together, or neither does.
    with transaction.atomic():
        user = User.objects.create(username=username)
        welcome.enqueue(user_id=user.pk)
        if fail:
            raise ValueError("refused after the enqueue")
    return user.pk


async def sign_up(request: HttpRequest) -> JsonResponse:
    """A row and its job in one transaction: a synchronous function, awaited."""
    try:
        user_id = await sync_to_async(_sign_up)(request.GET["username"], request.GET.get("fail") == "1")
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"user": user_id})


async def greet(request: HttpRequest) -> JsonResponse:
    """The job function's own aenqueue, with and without one enqueue's options."""
    first = await welcome.aenqueue(user_id=1)
    second = await welcome.using(queue="urgent", priority=9).aenqueue(user_id=2)
    return JsonResponse({"ids": [first.pk, second.pk]})


urlpatterns = [
    path("notify", notify),
    path("sign-up", sign_up),
    path("greet", greet),
]
