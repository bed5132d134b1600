"""``aenqueue`` and ``fn.aenqueue``: enqueue from async code, as Django's async ORM queries."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.db import transaction
from django.test import AsyncClient

from django_jobqueue import JobPayloadError, aenqueue
from django_jobqueue.models import Job
from tests.async_views import welcome

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.async_views")]


def test_aenqueue_enqueues_with_the_options_of_enqueue() -> None:
    queued = async_to_sync(aenqueue)("tests.ping", {"n": 1}, queue="other", priority=7, delay=60)
    row = Job.objects.get(pk=queued.pk)
    assert (row.name, row.payload, row.queue, row.priority) == ("tests.ping", {"n": 1}, "other", 7)
    assert row.status == "ready"
    assert row.run_at > row.created_at


def test_aenqueue_refuses_what_enqueue_refuses_and_writes_nothing() -> None:
    with pytest.raises(JobPayloadError):
        async_to_sync(aenqueue)("tests.ping", {"when": object()})
    with pytest.raises(ValueError, match="concurrency_limit"):
        async_to_sync(aenqueue)("tests.ping", {}, concurrency_limit=2)
    with pytest.raises(TypeError, match="no_such_option"):
        async_to_sync(aenqueue)("tests.ping", {}, no_such_option=1)
    assert not Job.objects.exists()


def test_many_aenqueues_at_once_each_commit_one_job() -> None:
    async def many() -> list[int]:
        jobs = await asyncio.gather(*(aenqueue("tests.ping", {"n": n}) for n in range(20)))
        return [queued.pk for queued in jobs]

    ids = async_to_sync(many)()
    assert sorted(Job.objects.values_list("payload__n", flat=True)) == list(range(20))
    assert len(set(ids)) == 20


def test_a_job_functions_aenqueue_and_its_using() -> None:
    async def both() -> tuple[Job, Job]:
        first = await welcome.aenqueue(user_id=1)
        return first, await welcome.using(priority=3, queue="q2").aenqueue(user_id=2)

    first, second = async_to_sync(both)()
    assert (first.name, first.queue, first.payload) == ("tests.async_views.welcome", "mail", {"user_id": 1})
    assert (second.queue, second.priority, second.payload) == ("q2", 3, {"user_id": 2})


def test_a_job_functions_aenqueue_checks_the_payload_against_its_signature() -> None:
    with pytest.raises(JobPayloadError):
        async_to_sync(welcome.aenqueue)(user=1)
    assert not Job.objects.exists()


def test_an_async_view_enqueues() -> None:
    response = async_to_sync(AsyncClient().get)("/notify", {"n": "4"})
    assert response.status_code == 200
    row = Job.objects.get(pk=response.json()["id"])
    assert (row.payload, row.priority) == ({"n": 4}, 5)
    greeted = async_to_sync(AsyncClient().get)("/greet")
    first, second = (Job.objects.get(pk=pk) for pk in greeted.json()["ids"])
    assert (first.queue, second.queue, second.priority) == ("mail", "urgent", 9)


def test_an_async_views_row_and_job_commit_together_or_not_at_all() -> None:
    client = AsyncClient()
    made = async_to_sync(client.get)("/sign-up", {"username": "ada"})
    assert made.status_code == 200
    user = User.objects.get(username="ada")
    assert Job.objects.get().payload == {"user_id": user.pk}
    refused = async_to_sync(client.get)("/sign-up", {"username": "bob", "fail": "1"})
    assert refused.status_code == 400
    assert not User.objects.filter(username="bob").exists()
    assert Job.objects.count() == 1


def test_aenqueue_joins_a_transaction_its_thread_holds() -> None:
    """Thread-sensitive, as the async ORM: under async_to_sync it runs in the calling thread, on its
    connection, so a transaction open there holds the job until it commits or rolls back."""
    with transaction.atomic():
        async_to_sync(aenqueue)("tests.ping", {"n": 1})
        assert Job.objects.count() == 1
        transaction.set_rollback(True)
    assert not Job.objects.exists()
