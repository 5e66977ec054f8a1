"""The worker on FIFO queues, on a real Redis: a group's messages run one at a time and in order,
different groups in parallel; a failure holds back the rest of its group until its retry succeeds."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import smq
from smq.embedded import EmbeddedRedis
from worker_support import Running, WorkerProcess, body, events, wait_for


class Journal:
    """What the handlers did, from any thread, in order; notes when a group ran twice at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.entries: list[tuple[str, str | None, str, int]] = []  # (event, group, body, receive)
        self._active: Counter[str | None] = Counter()
        self.overlaps: list[str] = []

    def start(self, job: smq.Job) -> None:
        with self._lock:
            self.entries.append(("start", job.message_group_id, job.body, job.receive_count))
            self._active[job.message_group_id] += 1
            if self._active[job.message_group_id] > 1:
                self.overlaps.append(job.body)

    def end(self, job: smq.Job, event: str = "end") -> None:
        with self._lock:
            self.entries.append((event, job.message_group_id, job.body, job.receive_count))
            self._active[job.message_group_id] -= 1

    def of(self, event: str, group: str) -> list[str]:
        with self._lock:
            return [body for kind, of, body, _ in self.entries if kind == event and of == group]

    def receives(self, event: str) -> dict[str, list[int]]:
        with self._lock:
            found: dict[str, list[int]] = {}
            for kind, _, body, n in self.entries:
                if kind == event:
                    found.setdefault(body, []).append(n)
            return found


def _fifo(client: smq.Client, visibility_timeout: int = 30) -> smq.Queue:
    return client.create_queue(
        "jobs.fifo", content_based_deduplication=True, visibility_timeout=visibility_timeout
    )


def _send_groups(queue: smq.Queue, groups: str, size: int) -> None:
    """Send A1, B1, A2, B2, ...: the groups interleaved, each group's messages in order."""
    for n in range(1, size + 1):
        for group in groups:
            queue.send(f"{group}{n}", message_group_id=group)


def _metric(worker: smq.Worker, name: str, **labels: str) -> float:
    value = worker.metrics.registry.get_sample_value(name, {"queue": worker.queue.name, **labels})
    return value or 0.0


def test_a_groups_messages_run_one_at_a_time_in_order_while_groups_run_in_parallel(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = _fifo(redis_client)
    _send_groups(jobs, "AB", 4)
    journal = Journal()
    a_started, b_finished = threading.Event(), threading.Event()

    def handle(job: smq.Job) -> None:
        journal.start(job)
        if job.body == "A1":
            # Group B runs from start to end while A1 runs: the groups run in parallel,
            # and the free slots must not start A2 meanwhile.
            a_started.set()
            assert b_finished.wait(10), "group B did not run while A1 ran"
        if job.body == "B1":
            assert a_started.wait(10), "A1 did not start while B1 ran"
        journal.end(job)
        if job.body == "B4":
            b_finished.set()

    config = smq.WorkerConfig(concurrency=4, prefetch=4)
    worker = smq.Worker(redis_client, jobs, handle, config=config)
    run = running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted") == 8, 15, "eight deletes")
    run.stop()
    assert journal.of("start", "A") == ["A1", "A2", "A3", "A4"]
    assert journal.of("start", "B") == ["B1", "B2", "B3", "B4"]
    assert journal.overlaps == []
    ends = [body for kind, _, body, _ in journal.entries if kind == "end"]
    assert ends.index("B4") < ends.index("A1")
    assert all(counts == [1] for counts in journal.receives("start").values())
    assert _metric(worker, "smq_worker_messages_total", outcome="succeeded") == 8
    assert _metric(worker, "smq_worker_messages_total", outcome="failed") == 0


def test_async_handlers_keep_each_groups_order_and_run_groups_at_once(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = _fifo(redis_client)
    _send_groups(jobs, "AB", 3)
    journal = Journal()
    a_started, b_finished = threading.Event(), threading.Event()

    async def until(event: threading.Event) -> bool:
        deadline = time.monotonic() + 10
        while not event.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return event.is_set()

    async def handle(job: smq.Job) -> None:
        journal.start(job)
        if job.body == "A1":
            a_started.set()
            assert await until(b_finished), "group B did not run while A1 ran"
        if job.body == "B1":
            assert await until(a_started), "A1 did not start while B1 ran"
        journal.end(job)
        if job.body == "B3":
            b_finished.set()

    worker = smq.Worker(redis_client, jobs, handle, config=smq.WorkerConfig(concurrency=3, prefetch=3))
    run = running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted") == 6, 15, "six deletes")
    run.stop()
    assert journal.of("start", "A") == ["A1", "A2", "A3"]
    assert journal.of("start", "B") == ["B1", "B2", "B3"]
    assert journal.overlaps == []


def test_a_failure_holds_back_the_rest_of_its_group_until_its_retry_succeeds(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = _fifo(redis_client, visibility_timeout=30)
    _send_groups(jobs, "A", 3)
    journal = Journal()

    def handle(job: smq.Job) -> None:
        journal.start(job)
        if job.body == "A2" and job.receive_count == 1:
            journal.end(job, "fail")
            raise ValueError("A2 fails once")
        journal.end(job)

    config = smq.WorkerConfig(concurrency=2, backoff=3)
    worker = smq.Worker(redis_client, jobs, handle, config=config)
    run = running(worker)
    wait_for(lambda: journal.of("fail", "A"), 10, "A2 to fail")
    # A3, received with A1 and A2, is released at once, not left to its 30 s timeout;
    # A2 stays hidden for its 3 s backoff and locks the group, so nobody receives A3.
    wait_for(
        lambda: (lambda info: (info.visible, info.in_flight) == (1, 1))(jobs.attributes()),
        1.5,
        "A3 visible and A2 hidden",
    )
    assert journal.of("start", "A") == ["A1", "A2"]
    wait_for(lambda: jobs.attributes().counters.get("deleted") == 3, 15, "three deletes")
    run.stop()
    assert journal.of("start", "A") == ["A1", "A2", "A2", "A3"]
    assert journal.of("end", "A") == ["A1", "A2", "A3"]
    assert journal.overlaps == []
    assert journal.receives("start") == {"A1": [1], "A2": [1, 2], "A3": [2]}  # A3 came in A2's receive
    totals = {o: _metric(worker, "smq_worker_messages_total", outcome=o) for o in smq.worker.OUTCOMES}
    assert totals == {"succeeded": 3, "failed": 1, "released": 1, "lost": 0}
    assert jobs.attributes().counters["visibility_expired"] == 1  # A2's backoff, and nothing else


def test_messages_waiting_their_turn_in_a_group_are_kept_hidden_by_the_heartbeat(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = _fifo(redis_client, visibility_timeout=1)
    _send_groups(jobs, "A", 4)
    journal = Journal()

    def handle(job: smq.Job) -> None:
        journal.start(job)
        time.sleep(0.9)  # the work: A4 waits 2.7 s for its turn, far past the 1 s timeout
        journal.end(job)

    worker = smq.Worker(redis_client, jobs, handle, config=smq.WorkerConfig(concurrency=2, prefetch=2))
    run = running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted") == 4, 15, "four deletes")
    run.stop()
    assert journal.of("start", "A") == ["A1", "A2", "A3", "A4"]
    assert all(counts == [1] for counts in journal.receives("start").values())
    counters = jobs.attributes().counters
    assert counters.get("visibility_expired", 0) == 0
    assert _metric(worker, "smq_worker_visibility_extensions_total") >= 3


def test_a_graceful_stop_releases_the_waiting_rest_of_a_running_group_in_order(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = _fifo(redis_client, visibility_timeout=120)
    _send_groups(jobs, "A", 3)
    journal = Journal()
    started, release = threading.Event(), threading.Event()

    def handle(job: smq.Job) -> None:
        journal.start(job)
        if job.body == "A1":
            started.set()
            release.wait(30)
        journal.end(job)

    worker = smq.Worker(redis_client, jobs, handle, config=smq.WorkerConfig(concurrency=2))
    run = running(worker)
    assert started.wait(10)
    worker.stop()
    wait_for(lambda: jobs.attributes().visible == 2, 5, "A2 and A3 released at once")
    release.set()
    run.stop()
    assert journal.of("start", "A") == ["A1"]
    assert jobs.attributes().counters["deleted"] == 1
    assert [m.body for m in jobs.receive(10)] == ["A2", "A3"]


@pytest.mark.slow
def test_smq_worker_processes_run_each_group_in_order_and_groups_in_parallel(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    queue = _fifo(redis_client)
    for n in range(1, 4):
        for group in "AB":
            queue.send(body(sleep=0.4, group=group, n=n), message_group_id=group)
    worker = WorkerProcess(tmp_path, redis_server.url, "jobs.fifo", "--concurrency", "2")
    try:
        wait_for(lambda: queue.attributes().counters.get("deleted") == 6, 20, "six deletes")
        worker.signal(signal.SIGINT)  # a graceful stop
        assert worker.wait(15) == 0
    finally:
        worker.stop()
    spans: dict[str, list[tuple[int, float, float]]] = {"A": [], "B": []}
    starts = {e["body"]: e["at"] for e in events(worker.log_path) if e["event"] == "start"}
    for event in events(worker.log_path):
        if event["event"] == "end":
            spec = json.loads(event["body"])
            spans[spec["group"]].append((spec["n"], starts[event["body"]], event["at"]))
    for group, runs in spans.items():
        runs.sort(key=lambda span: span[1])
        assert [n for n, _, _ in runs] == [1, 2, 3], group
        assert all(earlier[2] <= later[1] for earlier, later in zip(runs, runs[1:], strict=False)), group
    assert any(a_start < b_end and b_start < a_end for _, a_start, a_end in spans["A"]
               for _, b_start, b_end in spans["B"])  # fmt: skip
