import random

from django_jobqueue.queue.backoff import backoff_delay, backoff_table


def test_delay_doubles_from_the_base_and_stops_at_the_cap():
    rng = random.Random(7)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (10, 512.0), (13, 3600.0), (500, 3600.0)]:
        delays = [backoff_delay(attempt, 1.0, 3600.0, rng) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert max(delays) - min(delays) > ceiling / 10, "jitter spreads retries out"


def test_table_matches_the_delays():
    assert backoff_table(4, 2.0, 10.0) == [(1, 1.0, 2.0), (2, 2.0, 4.0), (3, 4.0, 8.0), (4, 5.0, 10.0)]
