"""Long polling: returns as soon as a message is available, without polling Redis."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import smq

#: Why these tests run on all 14 combinations of ``client`` (conftest.MATRICES).
EVERY_BACKEND = "long polls wake differently on each server and client"

#: The long polls here wait this long (the most SQS allows): a poll that was not woken takes all of it.
WAIT = 20
#: A woken poll returns well before ``WAIT``: the checks allow this long, room for a loaded machine.
WOKEN = 10


def _timed_receive(queue: smq.Queue, **kwargs: int) -> tuple[list[smq.Message], float]:
    started = time.monotonic()
    messages = queue.receive(**kwargs)
    return messages, time.monotonic() - started


def _receive_while(
    queue: smq.Queue, after: float, action: Any, *args: Any, **kwargs: Any
) -> tuple[list[smq.Message], float]:
    """A ``WAIT`` s long poll on ``queue`` during which ``action(*args, **kwargs)`` runs ``after`` s in."""
    timer = threading.Timer(after, action, args=args, kwargs=kwargs)
    timer.start()
    try:
        return _timed_receive(queue, wait_time_seconds=WAIT)
    finally:
        timer.join()


def test_long_poll_wakes_on_send(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    messages, elapsed = _receive_while(queue, 0.3, queue.send, "hello")
    assert [m.body for m in messages] == ["hello"]
    assert 0.25 <= elapsed < WOKEN


def test_long_poll_wakes_when_a_visibility_timeout_runs_out(client: smq.Client) -> None:
    queue = client.create_queue("jobs", visibility_timeout=1)
    queue.send("x")
    queue.receive()
    messages, elapsed = _timed_receive(queue, wait_time_seconds=WAIT)
    assert len(messages) == 1
    assert 0.8 <= elapsed < WOKEN


def test_long_poll_wakes_when_a_delay_falls_due(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("later", delay_seconds=1)
    messages, elapsed = _timed_receive(queue, wait_time_seconds=WAIT)
    assert [m.body for m in messages] == ["later"]
    assert 0.8 <= elapsed < WOKEN


def test_long_poll_wakes_on_a_timeout_zero_release(client: smq.Client) -> None:
    queue = client.create_queue("jobs", visibility_timeout=600)
    queue.send("x")
    (message,) = queue.receive()
    messages, elapsed = _receive_while(queue, 0.3, queue.change_visibility, message.receipt_handle, 0)
    assert len(messages) == 1 and elapsed < WOKEN


def test_queue_wait_time_is_the_default_wait(client: smq.Client) -> None:
    queue = client.create_queue("jobs", receive_message_wait_time_seconds=1)
    messages, elapsed = _timed_receive(queue)
    assert messages == [] and 0.9 <= elapsed < WOKEN
    messages, elapsed = _timed_receive(queue, wait_time_seconds=0)
    assert messages == [] and elapsed < 0.9  # not the queue's 1 s


def test_many_waiters_share_one_connection_and_all_get_served(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    results: list[list[smq.Message]] = []
    waiters = [
        threading.Thread(target=lambda: results.append(queue.receive(wait_time_seconds=10))) for _ in range(8)
    ]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.3)
    for n in range(8):
        queue.send(f"m{n}")
    for waiter in waiters:
        waiter.join(timeout=15)
    assert sorted(m.body for batch in results for m in batch) == [f"m{n}" for n in range(8)]


def test_an_idle_long_poll_does_not_poll_redis(redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs")
    queue.receive()  # loads the script

    def receives() -> int:
        stats = redis_client._redis.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

    before = receives()
    messages, elapsed = _timed_receive(queue, wait_time_seconds=2)
    assert messages == [] and elapsed >= 1.9
    assert receives() - before <= 2  # one try before subscribing, one after


def test_long_poll_wakes_for_a_delay_sent_during_the_wait(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    messages, elapsed = _receive_while(queue, 0.3, queue.send, "soon", delay_seconds=1)
    assert [m.body for m in messages] == ["soon"]
    assert 1.1 <= elapsed < WOKEN


def test_long_poll_wakes_for_a_timeout_shortened_during_the_wait(client: smq.Client) -> None:
    queue = client.create_queue("jobs", visibility_timeout=600)
    queue.send("x")
    (held,) = queue.receive()
    messages, elapsed = _receive_while(queue, 0.3, queue.change_visibility, held.receipt_handle, 1)
    assert len(messages) == 1 and 1.1 <= elapsed < WOKEN


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_long_polls_survive_a_lost_wake_connection(request: pytest.FixtureRequest, backend: str) -> None:
    from conftest import _fresh_cluster, _fresh_real

    if backend == "redis":
        client = _fresh_real(request.getfixturevalue("redis_server"))
        nodes = [client._redis]
    else:
        client = _fresh_cluster(request.getfixturevalue("redis_cluster"))
        nodes = [client._redis.get_redis_connection(n) for n in client._redis.get_primaries()]
    first = client.create_queue("first")
    second = client.create_queue("second")
    poll = threading.Thread(target=first.receive, kwargs={"wait_time_seconds": 3})
    poll.start()
    deadline = time.monotonic() + 10
    while not any(node.client_list(_type="pubsub") for node in nodes):
        assert time.monotonic() < deadline, "the long poll did not subscribe"
        time.sleep(0.02)
    assert sum(node.client_kill_filter(_type="pubsub") for node in nodes) == 1
    time.sleep(0.1)
    messages, elapsed = _receive_while(second, 0.5, second.send, "after the reconnect")
    poll.join()
    assert [m.body for m in messages] == ["after the reconnect"] and elapsed < WOKEN
    for _ in range(3):  # and later polls are not stuck waiting for confirmations
        timer = threading.Timer(0.2, second.send, args=["again"])
        timer.start()
        messages, elapsed = _timed_receive(second, wait_time_seconds=WAIT)
        timer.join()
        assert len(messages) == 1 and elapsed < WOKEN
    client.close()
