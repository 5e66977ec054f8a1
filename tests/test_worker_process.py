"""`smq worker` as users run it: real processes on a real Redis, killed and stopped by signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import smq
from smq.embedded import EmbeddedRedis
from worker_support import WorkerProcess, body, events, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


def _start(
    workers: list[WorkerProcess], tmp_path: Path, server: EmbeddedRedis, queue: str, *args: str
) -> WorkerProcess:
    worker = WorkerProcess(tmp_path, server.url, queue, *args)
    workers.append(worker)
    return worker


def _of(log: Path, kind: str, message_body: str | None = None) -> list[dict[str, object]]:
    return [
        e for e in events(log) if e["event"] == kind and (message_body is None or e["body"] == message_body)
    ]


def test_a_message_of_a_killed_worker_is_processed_by_another_after_its_timeout(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = redis_client.create_queue("jobs", visibility_timeout=2)
    slow = body(sleep=60, n=0)
    quick = [body(sleep=0, n=i) for i in range(1, 6)]
    queue.send(slow)
    first = _start(workers, tmp_path, redis_server, "jobs", "--concurrency", "1", "--prefetch", "0")
    wait_for(lambda: _of(first.log_path, "start", slow), 10, "the slow message to start")
    first.signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    for message in quick:
        queue.send(message)
    killed_at = time.monotonic()

    _start(workers, tmp_path, redis_server, "jobs", "--concurrency", "2")
    restarted = wait_for(
        lambda: [e for e in _of(first.log_path, "start", slow) if e["n"] == 2], 15, "the slow message again"
    )
    # Not before its 2 s timeout ran out (the killed worker's heartbeat kept it up to then).
    assert time.monotonic() - killed_at >= 0.5
    assert restarted[0]["pid"] != first.pid
    wait_for(lambda: len(_of(first.log_path, "end")) == 5, 15, "the five other messages")
    info = queue.attributes()
    assert (info.visible, info.delayed) == (0, 0)
    assert info.in_flight == 1  # the slow one, running in the second worker
    assert sorted(e["body"] for e in _of(first.log_path, "end")) == sorted(quick)


def test_sigterm_releases_unstarted_messages_at_once_and_lets_the_running_one_finish(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = redis_client.create_queue("jobs", visibility_timeout=120)
    running = body(sleep=2, n=0)
    queue.send(running)
    for i in range(1, 5):
        queue.send(body(sleep=0, n=i))
    worker = _start(workers, tmp_path, redis_server, "jobs", "--concurrency", "1", "--prefetch", "4")
    wait_for(lambda: _of(worker.log_path, "start", running), 10, "the first message to start")
    assert queue.attributes().in_flight == 5  # one running, four waiting, all hidden for 120 s

    worker.signal(signal.SIGTERM)
    wait_for(lambda: queue.attributes().visible == 4, 2, "the four unstarted messages to be released")
    assert worker.wait(15) == 0
    assert _of(worker.log_path, "end", running)  # finished within the grace period
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (4, 0)
    assert info.counters["deleted"] == 1
    assert len(_of(worker.log_path, "start")) == 1
    assert "released 4 unstarted messages" in worker.stderr()


def test_a_handler_past_the_grace_period_is_told_and_its_message_released(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = redis_client.create_queue("jobs", visibility_timeout=120)
    endless = body(sleep=600)
    queue.send(endless)
    worker = _start(workers, tmp_path, redis_server, "jobs", "--grace-period", "1")
    wait_for(lambda: _of(worker.log_path, "start", endless), 10, "the message to start")
    stopped_at = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    assert time.monotonic() - stopped_at < 6
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters.get("deleted", 0)) == (1, 0, 0)
    assert "did not finish in time" in worker.stderr()


def test_a_second_signal_stops_at_once(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = redis_client.create_queue("jobs", visibility_timeout=120)
    queue.send(body(sleep=600))
    worker = _start(workers, tmp_path, redis_server, "jobs", "--grace-period", "300")
    wait_for(lambda: _of(worker.log_path, "start"), 10, "the message to start")
    worker.signal(signal.SIGTERM)
    time.sleep(0.3)
    worker.signal(signal.SIGINT)
    assert worker.wait(10) == 0
    assert queue.attributes().visible == 1


def test_a_handler_slower_than_the_timeout_keeps_its_lease_and_runs_once(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = redis_client.create_queue("jobs", visibility_timeout=2)
    slow = body(sleep=7)
    queue.send(slow)
    one = _start(workers, tmp_path, redis_server, "jobs", "--concurrency", "2")
    _start(workers, tmp_path, redis_server, "jobs", "--concurrency", "2")  # would take it if it expired
    wait_for(lambda: _of(one.log_path, "end", slow), 20, "the slow message to finish")
    wait_for(lambda: queue.attributes().counters.get("deleted") == 1, 5, "its delete")
    starts = _of(one.log_path, "start", slow)
    assert len(starts) == 1 and starts[0]["n"] == 1
    counters = queue.attributes().counters
    assert counters.get("visibility_expired", 0) == 0
    assert counters["visibility_changed"] >= 3  # about one extension a second for 7 s
    assert counters.get("stale_receipts", 0) == 0


def test_a_handler_that_always_fails_lands_its_message_in_the_dead_letter_queue(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    dead = redis_client.create_queue("jobs-dlq")
    queue = redis_client.create_queue(
        "jobs", visibility_timeout=30, redrive_policy=smq.RedrivePolicy("jobs-dlq", 3)
    )
    poison = body(fail=True)
    queue.send(poison)
    worker = _start(workers, tmp_path, redis_server, "jobs", "--backoff", "0")
    wait_for(lambda: dead.attributes().visible == 1, 15, "the message in the dead-letter queue")
    assert [e["n"] for e in _of(worker.log_path, "fail", poison)] == [1, 2, 3]
    (moved,) = dead.receive(1)
    assert moved.body == poison
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["dead_lettered"]) == (0, 0, 1)
    assert "told to fail" in worker.stderr()  # the traceback is logged


def test_failed_messages_wait_for_the_backoff_before_their_retry(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = redis_client.create_queue("jobs", visibility_timeout=30)
    poison = body(fail=True)
    queue.send(poison)
    worker = _start(workers, tmp_path, redis_server, "jobs", "--backoff", "1", "--max-backoff", "2")
    wait_for(lambda: len(_of(worker.log_path, "fail", poison)) >= 3, 15, "three attempts")
    times = [e["at"] for e in _of(worker.log_path, "start", poison)]
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert gaps[0] >= 0.9  # 1 s after the first failure
    assert gaps[1] >= 1.9  # 2 s after the second (doubled)


def test_async_handlers_run_in_one_process_at_once(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = redis_client.create_queue("jobs")
    for i in range(8):
        queue.send(body(sleep=1, n=i))
    started = time.monotonic()
    worker = WorkerProcess(
        tmp_path, redis_server.url, "jobs", "--concurrency", "8", handler="handlers:handle_async"
    )
    workers.append(worker)
    wait_for(lambda: len(_of(worker.log_path, "end")) == 8, 10, "eight messages")
    assert time.monotonic() - started < 6  # concurrently, not 8 s in a row
    assert len({e["pid"] for e in events(worker.log_path)}) == 1
    wait_for(lambda: queue.attributes().counters.get("deleted") == 8, 5, "eight deletes")


def test_a_worker_on_the_embedded_default_shares_its_redis_with_other_commands(tmp_path: Path) -> None:
    def smq_command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "smq", *args], cwd=tmp_path, capture_output=True, text=True, timeout=30
        )

    assert smq_command("queue", "create", "jobs").returncode == 0  # starts and stops its own Redis
    worker = WorkerProcess(tmp_path, None, "jobs")
    try:
        assert "; other smq commands use it until this one stops" in worker.stderr()
        sent = smq_command("send", "jobs", body(n=1))
        assert sent.returncode == 0, sent.stderr
        assert "no Redis runs" not in sent.stderr and "waiting" not in sent.stderr  # used the worker's
        wait_for(lambda: _of(worker.log_path, "end"), 10, "the worker to process it")
        worker.signal(signal.SIGTERM)
        assert worker.wait(15) == 0
    finally:
        worker.stop()
    assert not list((tmp_path / ".smq" / "redis").glob("*.sock"))  # its Redis stopped with it
