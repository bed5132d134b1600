"""The worker's tuning of Python's cyclic garbage collector (collector.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from django_jobqueue.collector import PYTHON_YOUNG_THRESHOLD, YOUNG_THRESHOLD, keep_out_of_collections


@pytest.fixture
def collector() -> Iterator[None]:
    """The test process's collector as it was, once the test is done."""
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_what_the_process_holds_is_frozen_and_the_young_threshold_raised(collector):
    gc.set_threshold(PYTHON_YOUNG_THRESHOLD, 10, 10)
    kept = Node()
    assert any(tracked is kept for tracked in gc.get_objects())
    keep_out_of_collections()
    # Frozen: in no generation a collection walks.
    assert gc.get_freeze_count() > 0
    assert not any(tracked is kept for tracked in gc.get_objects())
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)


def test_a_threshold_the_project_chose_is_kept(collector):
    gc.set_threshold(1234, 5, 6)
    keep_out_of_collections()
    assert gc.get_threshold() == (1234, 5, 6)


def test_cyclic_garbage_made_afterwards_is_still_collected(collector):
    gc.set_threshold(PYTHON_YOUNG_THRESHOLD, 10, 10)
    keep_out_of_collections()
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    gone = weakref.ref(a)
    del a, b
    assert gone() is not None
    gc.collect()
    assert gone() is None
