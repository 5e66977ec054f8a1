"""Queue.events: the lifecycle event stream read back as typed events, page by page."""

from __future__ import annotations

import dataclasses

import pytest

import smq
from conftest import Clock


def test_events_read_a_message_lifecycle_with_units_and_extras(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10, event_stream_max_len=1000)
    sent = queue.send("x", delay_seconds=2)
    clock.advance(2)
    (first,) = queue.receive()
    queue.change_visibility(first, 20)
    clock.advance(20)
    (second,) = queue.receive(visibility_timeout=5)
    queue.delete(first)
    queue.delete(second)
    events = queue.events()
    start = clock.now_ms - 22_000
    assert [(e.kind, e.receive_count, e.at_ms - start, e.extra) for e in events] == [
        ("sent", 0, 0, "2000"),
        ("received", 1, 2000, "10000"),
        ("visibility_changed", 1, 2000, "20000"),
        ("visibility_expired", 1, 22_000, ""),
        ("received", 2, 22_000, "5000"),
        ("stale_receipt", 2, 22_000, "delete"),
        ("deleted", 2, 22_000, ""),
    ]
    assert {(e.queue, e.message_id) for e in events} == {("jobs", sent.message_id)}
    assert events[-1].at == clock.now_ms / 1000
    ids = [e.event_id for e in events]
    assert len(set(ids)) == len(ids)
    with pytest.raises(dataclasses.FrozenInstanceError):
        events[0].kind = "deleted"  # type: ignore[misc]


def test_events_page_after_the_last_id_until_a_short_page(client: smq.Client) -> None:
    queue = client.create_queue("jobs", event_stream_max_len=1000)
    for batch in range(3):
        queue.send_batch([smq.SendEntry(f"e{n}", f"{batch}-{n}") for n in range(10)])
    pages = []
    after = "-"
    while True:
        page = queue.events(after=after, limit=7)
        pages.append(len(page))
        if len(page) < 7:
            break
        after = page[-1].event_id
    assert pages == [7, 7, 7, 7, 2]
    everything = queue.events(limit=10_000)
    assert len(everything) == 30
    assert queue.events(after=everything[-1].event_id) == []
    assert [e.event_id for e in queue.events(after=everything[9].event_id, limit=3)] == [
        e.event_id for e in everything[10:13]
    ]


def test_events_of_a_queue_without_a_stream_are_none(client: smq.Client) -> None:
    queue = client.create_queue("quiet")
    queue.send("x")
    assert queue.events() == []


def test_events_refuse_bad_arguments_and_missing_queues(client: smq.Client) -> None:
    queue = client.create_queue("jobs", event_stream_max_len=10)
    for limit in (0, 10_001, True):
        with pytest.raises(smq.InvalidParameter):
            queue.events(limit=limit)
    for after in ("", "+", "abc", "12-", "-3", "1-2-3", "(1-0"):
        with pytest.raises(smq.InvalidParameter):
            queue.events(after=after)
    with pytest.raises(smq.QueueDoesNotExist):
        client.queue("missing").events()


def test_events_follow_a_message_into_its_dead_letter_queue(client: smq.Client, clock: Clock) -> None:
    dlq = client.create_queue("dlq", event_stream_max_len=100)
    queue = client.create_queue(
        "jobs",
        visibility_timeout=1,
        event_stream_max_len=100,
        redrive_policy=smq.RedrivePolicy("dlq", 1),
    )
    sent = queue.send("x")
    queue.receive()
    clock.advance(1)
    assert queue.receive() == []
    assert [(e.kind, e.receive_count) for e in queue.events()][-2:] == [
        ("visibility_expired", 1),
        ("dead_lettered", 1),
    ]
    (arrived,) = dlq.events()
    assert (arrived.kind, arrived.message_id, arrived.receive_count, arrived.extra) == (
        "moved_in",
        sent.message_id,
        1,
        "jobs",
    )
