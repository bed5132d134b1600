"""``runworker --metrics-port``: the worker's series and health over real HTTP; ``--log-format json``.

Every test runs real ``runworker`` subprocesses and reads them as Prometheus
would: ``GET /metrics`` through urllib, parsed with prometheus_client's own
text parser.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from django_jobqueue import QueueClient
from tests.worker_support import JOB_MODULE, WorkerProcess, run_manage, wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
FAST = ("--poll-interval", "0.1", "--cancel-grace", "0.5")
QUICK_RETRIES = {"JOBQUEUE_BACKOFF_BASE": "0.01", "JOBQUEUE_BACKOFF_MAX": "0.01"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(port: int) -> Samples:
    status, text = get(port, "/metrics")
    assert status == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, series: str, **labels: str) -> float:
    return samples.get((series, frozenset(labels.items())), 0.0)


def jobs_total(samples: Samples, name: str, outcome: str, queue: str = "default") -> float:
    return value(samples, "jobqueue_jobs_total", queue=queue, name=name, outcome=outcome)


def serving(worker: WorkerProcess, port: int) -> None:
    worker.wait_started()
    wait_until(lambda: get(port, "/healthz")[0] == 200, 10, "/healthz to answer 200")


@pytest.fixture
def metrics_worker(start_worker: Callable[..., WorkerProcess]) -> Callable[..., tuple[WorkerProcess, int]]:
    """Start a worker with ``--metrics-port`` on a free port; wait until it serves."""

    def start(*args: str, env: dict[str, str] | None = None) -> tuple[WorkerProcess, int]:
        port = free_port()
        worker = start_worker("--metrics-port", str(port), *args, env=env)
        serving(worker, port)
        return worker, port

    return start


def test_each_outcome_is_counted_under_its_name_and_queue(queue: QueueClient, metrics_worker, tmp_path):
    worker, port = metrics_worker("--concurrency", "2", *FAST, env=QUICK_RETRIES)
    release = tmp_path / "release"
    gate_payload = {"path": str(tmp_path / "events"), "release": str(release)}
    gate = queue.push("workers.gate", gate_payload, queue="slow")
    wait_until(
        lambda: value(scrape(port), "jobqueue_jobs_running", queue="slow") == 1, 10, "the gate job to run"
    )
    assert queue.cancel(gate)
    for _ in range(3):
        queue.push("workers.keyword_only", {"expected": "x"})
    queue.push("workers.boom", {"message": "no"}, max_attempts=2)
    queue.push("workers.spin", {"path": str(tmp_path / "events")}, timeout=0.5, max_attempts=1)
    queue.push("not.registered.anywhere", {}, max_attempts=1)
    expected = {
        ("workers.keyword_only", "done", "default"): 3,
        ("workers.boom", "retry", "default"): 1,
        ("workers.boom", "dead", "default"): 1,
        ("workers.spin", "timeout", "default"): 1,
        ("workers.gate", "cancelled", "slow"): 1,
        ("__unknown__", "dead", "default"): 1,
    }

    def counted() -> bool:
        samples = scrape(port)
        return all(jobs_total(samples, *key) == count for key, count in expected.items())

    wait_until(counted, 20, f"the outcomes {expected}")
    samples = scrape(port)
    # A timed-out attempt counts once, as timeout, not also as dead.
    assert jobs_total(samples, "workers.spin", "dead") == 0
    assert value(samples, "jobqueue_jobs_running", queue="slow") == 0
    duration = "jobqueue_job_duration_seconds_count"
    assert value(samples, duration, queue="default", name="workers.keyword_only") == 3
    assert value(samples, duration, queue="default", name="workers.boom") == 2
    spin_seconds = value(samples, "jobqueue_job_duration_seconds_sum", queue="default", name="workers.spin")
    assert spin_seconds >= 0.5
    assert value(samples, "jobqueue_jobs_claimed_total", queue="default") == 7
    assert value(samples, "jobqueue_jobs_claimed_total", queue="slow") == 1
    assert not [key for key in samples if ("name", "not.registered.anywhere") in key[1]]


def test_the_worker_series_say_its_slots_rounds_and_acks(queue: QueueClient, metrics_worker):
    worker, port = metrics_worker("--concurrency", "3", *FAST)
    for _ in range(5):
        queue.push("workers.keyword_only", {"expected": "x"})
    wait_until(lambda: jobs_total(scrape(port), "workers.keyword_only", "done") == 5, 10, "5 jobs done")
    samples = scrape(port)
    assert value(samples, "jobqueue_worker_slots") == 3
    rounds = value(samples, "jobqueue_claim_rounds_total")
    assert rounds > 0
    assert value(samples, "jobqueue_claim_round_seconds_count") == rounds
    acks = sum(value(samples, "jobqueue_acks_total", via=via) for via in ("claim", "completer", "slot"))
    assert acks == 5
    assert value(samples, "jobqueue_worker_last_database_contact_seconds") < 5
    assert value(samples, "jobqueue_database_errors_total", operation="claiming") == 0
    assert get(port, "/healthz") == (200, "ok\n")
    assert get(port, "/elsewhere")[0] == 404
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def test_jobs_run_in_child_processes_are_counted(queue: QueueClient, metrics_worker):
    worker, port = metrics_worker("--pool", "processes", "--concurrency", "2", *FAST)
    for _ in range(4):
        queue.push("workers.keyword_only", {"expected": "x"})
    queue.push("workers.boom", {"message": "no"}, max_attempts=1)

    def counted() -> bool:
        samples = scrape(port)
        return (
            jobs_total(samples, "workers.keyword_only", "done") == 4
            and jobs_total(samples, "workers.boom", "dead") == 1
        )

    wait_until(counted, 20, "4 jobs done and 1 dead, run in the children")
    samples = scrape(port)
    assert value(samples, "jobqueue_job_duration_seconds_count", queue="default", name="workers.boom") == 1


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^Threads:\s+(\d+)$", status, re.MULTILINE)
    assert found is not None, status
    return int(found.group(1))


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True


# The endpoint's REQUEST_TIMEOUT: a connection whose request has not come is closed then.
REQUEST_TIMEOUT = 5.0


@pytest.mark.slow
def test_idle_connections_hold_no_thread_and_are_closed_while_healthz_answers(
    queue: QueueClient, metrics_worker
):
    worker, port = metrics_worker(*FAST)
    before = threads_of(worker.pid)
    opened = time.monotonic()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(400)]
    selector = selectors.DefaultSelector()
    try:
        for sock in idle:
            selector.register(sock, selectors.EVENT_READ)
        asked = time.monotonic()
        assert get(port, "/healthz") == (200, "ok\n")
        assert time.monotonic() - asked < 1.0
        # The probe connected last, so every idle connection was accepted before it was answered.
        assert threads_of(worker.pid) <= before + 8, "a thread per idle connection"
        ended: set[socket.socket] = set()

        def take_closed(timeout: float) -> None:
            for key, _ in selector.select(timeout):
                if closed_by_server(key.fileobj):
                    selector.unregister(key.fileobj)
                    ended.add(key.fileobj)

        take_closed(0)
        assert len(idle) - len(ended) >= 200, "the probe was answered while the idle connections were held"
        deadline = opened + REQUEST_TIMEOUT + 2
        while len(ended) < len(idle) and time.monotonic() < deadline:
            take_closed(deadline - time.monotonic())
        assert len(ended) == len(idle), f"{len(idle) - len(ended)} idle connections still open"
        assert get(port, "/healthz") == (200, "ok\n")
    finally:
        selector.close()
        for sock in idle:
            sock.close()


@pytest.mark.slow
def test_a_request_sent_a_byte_at_a_time_is_cut_off_after_the_timeout(queue: QueueClient, metrics_worker):
    worker, port = metrics_worker(*FAST)
    with socket.create_connection(("127.0.0.1", port)) as slow:
        started = time.monotonic()
        slow.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        ended = False
        while not ended and time.monotonic() - started < REQUEST_TIMEOUT + 3:
            # A byte of a header that never ends every half second, until the server closes.
            if _readable(slow, 0.5):
                ended = closed_by_server(slow)
            else:
                try:
                    slow.sendall(b"a")
                except (BrokenPipeError, ConnectionResetError):
                    ended = True
        assert ended, "the slow request still holds its connection"
        assert time.monotonic() - started < REQUEST_TIMEOUT + 1.5
    assert get(port, "/healthz") == (200, "ok\n")


def _readable(sock: socket.socket, timeout: float) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        return bool(selector.select(timeout))


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--metrics-port", "70000"], "must be a TCP port from 1 to 65535 (or 0: off), got 70000"),
        (["--metrics-port", "-1"], "must be a TCP port from 1 to 65535 (or 0: off), got -1"),
        (["--metrics-port", "nine"], "must be a TCP port from 1 to 65535 (or 0: off), got 'nine'"),
        (["--metrics-port", "9100", "--metrics-host", ""], "must be a host name or an address"),
        (["--metrics-port", "9100", "--metrics-host", "no such host.invalid"], "cannot resolve"),
        (["--metrics-host", "127.0.0.1"], "--metrics-host needs --metrics-port"),
        (["--log-format", "xml"], "invalid choice: 'xml'"),
    ],
)
def test_bad_option_values_are_refused(queue: QueueClient, start_worker, args, error):
    worker = start_worker("--burst", *args)
    assert worker.wait() != 0
    assert error in worker.log()
    assert "started" not in worker.log()


def test_a_port_in_use_is_refused_before_the_worker_registers(queue: QueueClient, start_worker):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = start_worker("--metrics-port", str(port))
        assert worker.wait() != 0
    assert f"refusing to start: --metrics-port: cannot listen on 127.0.0.1:{port}" in worker.log()
    assert "started" not in worker.log()
    from django_jobqueue.models import Worker

    assert not Worker.objects.exists()


@pytest.mark.slow
def test_health_turns_503_with_the_reason_while_the_database_is_down(queue, postgresql_only, tmp_path):
    """PostgreSQL only: a cluster of its own is stopped under the worker. A SQLite database is a
    file the worker opens itself: there is no server to lose, and a lock only makes calls wait
    (the busy timeout), which the contact bound of 30 s covers, too slowly for a test."""
    from tests.faults.cluster import throwaway_cluster

    with throwaway_cluster() as cluster:
        port = free_port()
        env = {
            **os.environ,
            "DATABASE_URL": cluster.url(),
            "JOBQUEUE_MODULES": JOB_MODULE,
            "PYTHONUNBUFFERED": "1",
        }
        worker = WorkerProcess(["--metrics-port", str(port), *FAST], tmp_path / "worker.log", env)
        try:
            serving(worker, port)
            cluster.stop("immediate")
            wait_until(lambda: get(port, "/healthz")[0] == 503, 15, "/healthz to say 503")
            status, body = get(port, "/healthz")
            assert "claiming: " in body and "database error(s) in a row" in body
            assert value(scrape(port), "jobqueue_database_errors_total", operation="claiming") >= 1
            cluster.start()
            wait_until(lambda: get(port, "/healthz")[0] == 200, 60, "/healthz to say 200 again")
        finally:
            worker.close()


def test_json_log_lines_parse_and_carry_the_outcome_fields(queue: QueueClient, tmp_path: Path):
    queue.push("workers.keyword_only", {"expected": "x"})
    queue.push("workers.boom", {"message": "no"}, max_attempts=2)
    queue.push("workers.fail_now", {"reason": "no such customer"})
    from tests.worker_support import database_url

    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "JOBQUEUE_MODULES": JOB_MODULE,
        "JOBQUEUE_PROJECT_LOGGING": "0",
        # The retry is not due again before the burst ends.
        "JOBQUEUE_BACKOFF_BASE": "30",
        "JOBQUEUE_BACKOFF_MAX": "30",
    }
    run = run_manage("runworker", "--burst", "--log-format", "json", "--worker-id", "w", env=env)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stderr.splitlines()]
    jobs = [line for line in lines if line.get("event") == "job"]
    # Slots run the three jobs side by side, so they may finish in any order.
    by_name = {line["name"]: line for line in jobs}
    assert len(jobs) == 3
    assert {name: line["outcome"] for name, line in by_name.items()} == {
        "workers.keyword_only": "done",
        "workers.boom": "retry",
        "workers.fail_now": "dead",
    }
    fields = {"event", "name", "id", "queue", "attempt", "max_attempts", "duration", "outcome", "error"}
    fields |= {"next_attempt_in", "moved_to", "worker_id", "timestamp", "level", "message"}
    assert all(set(line) == fields for line in jobs)
    done, retry, dead = (
        by_name[name] for name in ("workers.keyword_only", "workers.boom", "workers.fail_now")
    )
    assert (done["level"], done["error"], done["worker_id"], done["queue"]) == ("INFO", None, "w", "default")
    assert (retry["attempt"], retry["max_attempts"], retry["level"]) == (1, 2, "WARNING")
    assert 0 < retry["next_attempt_in"] <= 30
    assert retry["error"] == "ValueError: no"
    assert (dead["moved_to"], dead["level"], dead["next_attempt_in"]) == ("dead_letters", "ERROR", None)
    assert dead["error"] == "Fail: no such customer"
    assert done["timestamp"].endswith("Z")
    others = [line for line in lines if line.get("event") != "job"]
    assert any(line["message"].startswith("worker w started") for line in others)
    assert all({"timestamp", "level", "logger", "message"} <= set(line) for line in others)
