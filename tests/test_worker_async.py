"""The worker with ``async def`` handlers, in-process on a real Redis: the receive loop, the handlers
and their deletes on one event loop; bounded concurrency, heartbeat, graceful stop, errors."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable

import pytest

import smq
import smq.aio
from smq.worker import OUTCOMES
from worker_support import Running, wait_for


def _metric(worker: smq.Worker, name: str, **labels: str) -> float:
    value = worker.metrics.registry.get_sample_value(name, {"queue": worker.queue.name, **labels})
    return value or 0.0


def test_async_handlers_drain_a_queue_on_one_loop_at_most_concurrency_at_once(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs")
    for start in range(0, 300, 10):
        jobs.send_batch([smq.SendEntry(str(i), f"m{start + i}") for i in range(10)])
    handled: list[str] = []
    now = {"running": 0, "most": 0}
    threads: set[str] = set()

    async def handle(job: smq.Job) -> None:
        now["running"] += 1
        now["most"] = max(now["most"], now["running"])
        threads.add(threading.current_thread().name)
        await asyncio.sleep(0.002)
        handled.append(job.body)
        now["running"] -= 1

    worker = smq.Worker(redis_client, "jobs", handle, config=smq.WorkerConfig(concurrency=5))
    run = running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted", 0) == 300, 30, "300 deletes")
    run.stop()
    assert sorted(handled) == sorted(f"m{i}" for i in range(300))
    assert now["most"] <= 5
    assert threads == {"smq-loop"}  # every handler on the worker's one event loop
    info = jobs.attributes()
    assert (info.visible, info.in_flight, info.counters["received"]) == (0, 0, 300)
    assert _metric(worker, "smq_worker_messages_total", outcome="succeeded") == 300


def test_the_receive_loop_and_its_deletes_go_over_the_event_loop_s_connection(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    # The receives (and the deletes riding on them) of an async worker are written by the event
    # loop itself on its own connection (CLIENT LIST names it), not by a thread of redis-py's.
    jobs = redis_client.create_queue("jobs")
    jobs.send_batch([smq.SendEntry(str(i), f"m{i}") for i in range(10)])

    async def handle(job: smq.Job) -> None:
        await asyncio.sleep(0)

    worker = smq.Worker(redis_client, "jobs", handle, config=smq.WorkerConfig(wait_time_seconds=1))
    run = running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted", 0) == 10, 20, "10 deletes")
    names = [c.get("name") for c in redis_client._redis.client_list()]
    assert smq.aio.CONNECTION_NAME in names
    run.stop()


def test_an_async_handler_is_kept_hidden_past_its_timeout_by_the_heartbeat(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs", visibility_timeout=1)
    jobs.send("slow")
    done = threading.Event()

    async def handle(job: smq.Job) -> None:
        await asyncio.sleep(2.5)  # two and a half timeouts
        done.set()

    worker = smq.Worker(redis_client, "jobs", handle)
    run = running(worker)
    assert done.wait(15)
    wait_for(lambda: jobs.attributes().counters.get("deleted", 0) == 1, 10, "the delete")
    run.stop()
    assert jobs.attributes().counters["received"] == 1  # never visible again while it ran
    assert _metric(worker, "smq_worker_visibility_extensions_total") >= 2


def test_a_graceful_stop_lets_running_async_handlers_finish_and_releases_the_rest(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs", visibility_timeout=30)
    jobs.send_batch([smq.SendEntry(str(i), f"m{i}") for i in range(10)])
    started = threading.Event()
    finished: list[str] = []

    async def handle(job: smq.Job) -> None:
        started.set()
        await asyncio.sleep(0.5)
        finished.append(job.body)

    config = smq.WorkerConfig(concurrency=2, prefetch=8, grace_period=10)
    worker = smq.Worker(redis_client, "jobs", handle, config=config)
    run = running(worker)
    assert started.wait(10)
    run.stop()
    info = jobs.attributes()
    assert len(finished) == 2  # the two running finished within the grace period
    assert info.counters.get("deleted", 0) == 2
    assert (info.visible, info.in_flight) == (8, 0)  # the unstarted ones were released at once


def test_a_stop_past_the_grace_period_cancels_async_handlers_and_releases_their_messages(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs", visibility_timeout=30)
    jobs.send("forever")
    started = threading.Event()
    cancelled = threading.Event()

    async def handle(job: smq.Job) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = smq.Worker(redis_client, "jobs", handle, config=smq.WorkerConfig(grace_period=0.3))
    run = running(worker)
    assert started.wait(10)
    began = time.monotonic()
    run.stop()
    assert time.monotonic() - began < 10
    assert cancelled.wait(5)
    info = jobs.attributes()
    assert (info.visible, info.in_flight, info.counters.get("deleted", 0)) == (1, 0, 0)
    assert _metric(worker, "smq_worker_messages_total", outcome="released") == 1


def test_a_failing_async_handler_s_message_comes_back_after_the_backoff(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs")
    jobs.send("flaky")
    attempts: list[int] = []

    async def handle(job: smq.Job) -> None:
        attempts.append(job.receive_count)
        if job.receive_count == 1:
            raise ValueError("first time fails")

    worker = smq.Worker(redis_client, "jobs", handle, config=smq.WorkerConfig(backoff=1, wait_time_seconds=1))
    run = running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted", 0) == 1, 20, "the retry's delete")
    run.stop()
    assert attempts == [1, 2]
    totals = {o: _metric(worker, "smq_worker_messages_total", outcome=o) for o in OUTCOMES}
    assert (totals["failed"], totals["succeeded"]) == (1, 1)


def test_deleting_the_queue_stops_an_async_worker_with_the_error(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    redis_client.create_queue("jobs", visibility_timeout=5)

    async def handle(job: smq.Job) -> None:
        await asyncio.sleep(0)

    worker = smq.Worker(redis_client, "jobs", handle, config=smq.WorkerConfig(wait_time_seconds=1))
    run = running(worker)
    wait_for(lambda: worker._aio is not None, 10, "the receive loop")
    redis_client.delete_queue("jobs")
    run.thread.join(15)
    assert not run.thread.is_alive()
    assert isinstance(run.error, smq.QueueDoesNotExist)


def test_a_worker_takes_the_async_client_and_queue(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    aio = smq.aio.AsyncClient(client=redis_client)
    jobs = redis_client.create_queue("jobs")
    jobs.send("x")
    seen: list[str] = []

    async def handle(job: smq.Job) -> None:
        seen.append(job.body)

    worker = smq.Worker(aio, aio.queue("jobs"), handle)
    assert worker.client is redis_client and worker.queue.name == "jobs"
    run = running(worker)
    wait_for(lambda: seen == ["x"], 10, "the message")
    run.stop()


@pytest.mark.parametrize("fifo", [False, True])
def test_an_async_worker_stopped_while_it_long_polls_stops_at_once(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running], fifo: bool
) -> None:
    name = "jobs.fifo" if fifo else "jobs"
    redis_client.create_queue(name, fifo_queue=True) if fifo else redis_client.create_queue(name)

    async def handle(job: smq.Job) -> None:
        await asyncio.sleep(0)

    worker = smq.Worker(redis_client, name, handle, config=smq.WorkerConfig(wait_time_seconds=20))
    run = running(worker)
    wait_for(lambda: worker._aio is not None and worker._aio._polls is not None, 10, "the first poll")
    time.sleep(0.3)  # parked in its long poll
    began = time.monotonic()
    run.stop()
    assert time.monotonic() - began < 5


def test_each_async_handler_run_has_a_context_of_its_own(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    # A handler that never waits runs at once in the receive loop's turn (no task): a context
    # variable it sets must not leak into the next handler, as with a task per run.
    jobs = redis_client.create_queue("jobs")
    jobs.send_batch([smq.SendEntry(str(i), f"m{i}") for i in range(10)])
    seen: list[str | None] = []
    tag: contextvars.ContextVar[str | None] = contextvars.ContextVar("tag", default=None)

    async def handle(job: smq.Job) -> None:
        seen.append(tag.get())
        tag.set(job.body)
        if job.body == "m3":
            await asyncio.sleep(0.01)  # this one goes on as a task
            assert tag.get() == "m3"

    worker = smq.Worker(redis_client, "jobs", handle, config=smq.WorkerConfig(concurrency=4))
    run = running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted", 0) == 10, 20, "10 deletes")
    run.stop()
    assert seen == [None] * 10
