"""How a worker splits its free slots between weighted queues, and how --queue is parsed."""

from __future__ import annotations

from argparse import ArgumentTypeError
from collections import Counter

import pytest

from django_jobqueue.management.arguments import queue_and_weight
from django_jobqueue.models import Job
from django_jobqueue.worker.shares import QueueShares


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def jobs_in(*queues: str) -> list[Job]:
    return [Job(queue=queue) for queue in queues]


def test_free_slots_are_shared_by_weight():
    shares = QueueShares([("bulk", 1), ("urgent", 3)], dry_for=1.0)
    assert dict(shares.plan(8)) == {"bulk": 2, "urgent": 6}


def test_one_slot_at_a_time_still_follows_the_weights_interleaved():
    shares = QueueShares([("a", 2), ("b", 1)], dry_for=1.0)
    picks = [shares.plan(1)[0][0] for _ in range(9)]
    assert Counter(picks) == {"a": 6, "b": 3}
    assert "a a a" not in " ".join(picks), picks


def test_a_dry_queue_gives_its_share_to_the_others_until_it_is_refilled_or_time_passes():
    clock = Clock()
    shares = QueueShares([("a", 1), ("b", 1)], dry_for=1.0, clock=clock)
    plan = shares.plan(4)
    assert dict(plan) == {"a": 2, "b": 2}
    assert shares.record(plan, jobs_in("a", "a")), "a filled its share: it may have more"
    assert shares.plan(2) == [("a", 2)]
    assert dict(shares.plan(2, ask_all=True)) == {"a": 1, "b": 1}
    shares.refill(["b"])
    assert dict(shares.plan(2)) == {"a": 1, "b": 1}
    shares.record([("b", 1)], [])
    clock.now = 1.5
    assert dict(shares.plan(2)) == {"a": 1, "b": 1}


def test_when_every_queue_is_dry_every_queue_is_asked():
    shares = QueueShares([("a", 1), ("b", 1)], dry_for=10.0)
    assert not shares.record(shares.plan(2), [])
    assert dict(shares.plan(2)) == {"a": 1, "b": 1}


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("emails", ("emails", 1)), ("emails:5", ("emails", 5)), ("a:b:1", ("a:b", 1)), ("a:5:1", ("a:5", 1))],
)
def test_queue_and_weight(text, parsed):
    assert queue_and_weight(text) == parsed


@pytest.mark.parametrize("text", ["", "bad name", "emails:0", ":3"])
def test_queue_and_weight_refuses(text):
    with pytest.raises(ArgumentTypeError):
        queue_and_weight(text)
