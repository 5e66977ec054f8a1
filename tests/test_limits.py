"""In-flight limit and retention."""

from __future__ import annotations

import threading
import time

import pytest

import smq
from conftest import Clock


def test_short_poll_over_the_inflight_limit_raises_over_limit(client: smq.Client) -> None:
    queue = client.create_queue("jobs", inflight_limit=3)
    for n in range(5):
        queue.send(f"m{n}")
    assert len(queue.receive(2)) == 2
    assert len(queue.receive(10)) == 1  # only the room left
    with pytest.raises(smq.OverLimit):
        queue.receive()
    assert queue.attributes().visible == 2


def test_long_poll_over_the_limit_waits_and_returns_nothing(client: smq.Client) -> None:
    queue = client.create_queue("jobs", inflight_limit=1)
    queue.send("a")
    queue.send("b")
    queue.receive()
    started = time.monotonic()
    assert queue.receive(wait_time_seconds=1) == []
    assert 0.9 <= time.monotonic() - started < 5


def test_queue_default_wait_applies_over_the_limit_too(client: smq.Client) -> None:
    queue = client.create_queue("jobs", inflight_limit=1, receive_message_wait_time_seconds=1)
    queue.send("a")
    queue.send("b")
    queue.receive()
    started = time.monotonic()
    assert queue.receive() == []  # a long poll by the queue's default: waits, no OverLimit
    assert 0.9 <= time.monotonic() - started < 5


def test_long_poll_over_the_limit_wakes_when_a_delete_makes_room(client: smq.Client) -> None:
    queue = client.create_queue("jobs", inflight_limit=1)
    queue.send("a")
    queue.send("b")
    (held,) = queue.receive()
    timer = threading.Timer(0.3, queue.delete, args=[held.receipt_handle])
    timer.start()
    started = time.monotonic()
    (message,) = queue.receive(wait_time_seconds=10)
    timer.join()
    assert message.body == "b"
    assert time.monotonic() - started < 5


def test_messages_past_retention_are_dropped_and_counted(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", message_retention_period=60, visibility_timeout=10)
    queue.send("old")
    clock.advance(30)
    queue.send("young")
    (received,) = queue.receive()  # "old", 30 s old: still kept
    clock.advance(30)  # "old" is 60 s old, in flight; "young" 30 s
    assert [m.body for m in queue.receive(10, visibility_timeout=100)] == ["young"]
    clock.advance(10)  # "old" comes back from flight past its retention
    assert queue.receive(10) == []
    info = queue.attributes()
    assert info.counters["retention_expired"] == 1
    assert (info.visible, info.in_flight) == (0, 1)  # young is in flight
    assert queue.delete(received.receipt_handle) is False


def test_retention_drops_are_bounded_per_script_call(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", message_retention_period=60)
    for _ in range(15):
        queue.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(10)])
    queue.send("fresh")
    clock.advance(59.999)
    queue.send("fresher")
    clock.advance(0.001)
    args = [client._now_arg(), 10, -1, "t" * 16, "jobs"]
    reply = client.run("receive", queue.keys, args, queue="jobs")
    assert reply[1] == 0  # skips ran out: "look again at once"
    assert queue.attributes().counters["retention_expired"] == 100
    # receive() looks again by itself (a bounded number of script calls)
    assert [m.body for m in queue.receive(10)] == ["fresher"]
    assert queue.attributes().counters["retention_expired"] == 151


@pytest.mark.parametrize(
    ("delay", "size"),
    [("1.5", "10"), ("x", "10"), ("900001", "10"), ("-2", "10"), ("0", "-1"), ("0", "2.5"), ("0", "")],
)
def test_send_refuses_a_bad_delay_or_size_before_storing_anything(
    client: smq.Client, delay: str, size: str
) -> None:
    queue = client.create_queue("jobs")
    good = ["", queue.keys.wake_channel, 2, "a" * 20, "-1", "1", "1|x", "", "b" * 20, delay, size, "1|y", ""]
    with pytest.raises(smq.SmqError, match="bad delay or size for message 2"):
        client.run("send", queue.keys, good, queue="jobs")
    assert (queue.attributes().visible, queue.attributes().delayed) == (0, 0)
