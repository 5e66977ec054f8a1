"""Queue.peek: a queue's messages in one state, seen without being received."""

from __future__ import annotations

from typing import Any

import pytest

import smq
from conftest import Clock, raw
from smq.operations import _peek

START = 1_800_000_000  # the clock fixture's start, in seconds


def _bodies(peeked: list[smq.PeekedMessage]) -> list[str]:
    return [p.body for p in peeked]


def test_visible_messages_show_in_receive_order_with_their_fields(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    first = queue.send("a")
    clock.advance(1)
    queue.send("b", attributes={"n": 3, "raw": b"\x00\x01"})
    queue.send("c")
    peeked = queue.peek()
    assert _bodies(peeked) == ["a", "b", "c"]
    assert peeked[0] == smq.PeekedMessage(
        queue="jobs",
        message_id=first.message_id,
        state="visible",
        body="a",
        attributes={},
        sent_at=START,
        receive_count=0,
        first_received_at=None,
        receipt_handle=None,
        received_at=None,
        visible_at=None,
        origin=None,
    )
    assert dict(peeked[1].attributes) == {
        "n": smq.MessageAttribute("Number", "3"),
        "raw": smq.MessageAttribute("Binary", b"\x00\x01"),
    }
    assert peeked[1].sent_at == START + 1
    assert [m.body for m in queue.receive(10)] == ["a", "b", "c"]  # the order receive takes


def test_a_message_visible_again_shows_its_receives_but_no_receipt(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    queue.send("a")
    queue.send("b")
    (message,) = queue.receive()
    clock.advance(2)
    queue.change_visibility(message, 0)  # back at the head of the list
    (again,) = queue.peek(limit=1)
    assert (again.body, again.state, again.receive_count) == ("a", "visible", 1)
    assert again.first_received_at == START
    assert (again.receipt_handle, again.received_at, again.visible_at) == (None, None, None)


def test_in_flight_messages_show_by_expiry_with_the_receipt_receive_returned(
    client: smq.Client, clock: Clock
) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    queue.send("a")
    queue.send("b")
    queue.send("c")
    (a,) = queue.receive(visibility_timeout=60)
    clock.advance(5)
    (b,) = queue.receive()  # the queue's 30 s
    (c,) = queue.receive(visibility_timeout=100)
    peeked = queue.peek("in_flight")
    assert [p.message_id for p in peeked] == [b.message_id, a.message_id, c.message_id]
    by_body = {p.body: p for p in peeked}
    for message, received_at, timeout in ((a, START, 60), (b, START + 5, 30), (c, START + 5, 100)):
        seen = by_body[message.body]
        assert seen.state == "in_flight"
        assert seen.receipt_handle == message.receipt_handle
        assert seen.received_at == received_at
        assert seen.visible_at == received_at + timeout
        assert (seen.receive_count, seen.first_received_at) == (1, received_at)
    assert queue.peek() == []


def test_the_receipt_peeked_changes_visibility_and_deletes(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    queue.send("a")
    queue.receive()
    clock.advance(10)
    (seen,) = queue.peek("in_flight")
    assert seen.receipt_handle is not None
    queue.change_visibility(seen.receipt_handle, 100)
    (changed,) = queue.peek("in_flight")
    assert changed.visible_at == START + 10 + 100
    assert changed.received_at == START  # the same receipt, issued then
    assert queue.delete(seen.receipt_handle) is True
    assert queue.peek("in_flight") == []


def test_a_newer_receive_shows_its_own_receipt(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10)
    queue.send("a")
    (old,) = queue.receive()
    clock.advance(10)
    (new,) = queue.receive()
    (seen,) = queue.peek("in_flight")
    assert seen.receipt_handle == new.receipt_handle != old.receipt_handle
    assert (seen.receive_count, seen.first_received_at, seen.received_at) == (2, START, START + 10)


def test_a_run_out_timeout_shows_in_flight_until_a_receive_takes_it_back(
    client: smq.Client, clock: Clock
) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    queue.send("a")
    queue.receive()
    clock.advance(31)
    (seen,) = queue.peek("in_flight")
    assert seen.visible_at == START + 30  # in the past
    assert queue.peek() == []
    assert queue.attributes().visible == 1  # counted where it now belongs
    assert len(queue.receive()) == 1


def test_delayed_messages_show_by_due_time(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", delay_seconds=60)
    queue.send("late")
    queue.send("soon", delay_seconds=10)
    queue.send("now", delay_seconds=0)
    peeked = queue.peek("delayed")
    assert _bodies(peeked) == ["soon", "late"]
    assert [p.visible_at for p in peeked] == [START + 10, START + 60]
    assert {(p.state, p.receive_count, p.receipt_handle, p.received_at) for p in peeked} == {
        ("delayed", 0, None, None)
    }
    assert _bodies(queue.peek()) == ["now"]


def test_a_dead_lettered_message_shows_where_it_came_from(client: smq.Client, clock: Clock) -> None:
    dlq = client.create_queue("jobs-dlq")
    queue = client.create_queue(
        "jobs", visibility_timeout=10, redrive_policy=smq.RedrivePolicy("jobs-dlq", max_receive_count=2)
    )
    sent = queue.send("poison", attributes={"k": "v"})
    for _ in range(2):
        queue.receive()
        clock.advance(10)
    assert queue.receive() == []  # the third receive moves it instead
    (dead,) = dlq.peek()
    assert (dead.queue, dead.message_id, dead.body, dead.origin) == (
        "jobs-dlq",
        sent.message_id,
        "poison",
        "jobs",
    )
    assert dict(dead.attributes) == {"k": smq.MessageAttribute("String", "v")}
    assert (dead.receive_count, dead.first_received_at, dead.receipt_handle) == (2, START, None)
    assert queue.peek() == queue.peek("in_flight") == []


def test_a_redriven_message_shows_the_dead_letter_queue_as_origin(client: smq.Client, clock: Clock) -> None:
    client.create_queue("jobs-dlq")
    queue = client.create_queue(
        "jobs", visibility_timeout=10, redrive_policy=smq.RedrivePolicy("jobs-dlq", max_receive_count=1)
    )
    queue.send("poison")
    queue.receive()
    clock.advance(10)
    queue.receive()
    assert client.redrive("jobs-dlq") == 1
    (back,) = queue.peek()
    assert (back.body, back.origin, back.receive_count) == ("poison", "jobs-dlq", 0)


def _snapshot(client: smq.Client, queue: smq.Queue) -> tuple[Any, ...]:
    r = raw(client)
    keys = queue.keys
    return (
        queue.attributes(),
        r.lrange(keys.visible, 0, -1),
        r.zrange(keys.inflight, 0, -1, withscores=True),
        r.zrange(keys.delayed, 0, -1, withscores=True),
        r.hgetall(keys.state),
        r.hgetall(keys.meta),
        r.hgetall(keys.stats),
        r.xlen(keys.events),
    )


def test_peeking_changes_nothing(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30, event_stream_max_len=1000)
    for n in range(4):
        queue.send(f"m{n}")
    queue.send("later", delay_seconds=60)
    (held,) = queue.receive()
    clock.advance(31)  # its timeout ran out: a peek must not take it back
    before = _snapshot(client, queue)
    for state in _peek.PEEK_STATES:
        assert queue.peek(state, limit=100)
    assert _snapshot(client, queue) == before
    assert queue.attributes().counters["received"] == 1
    (again,) = queue.receive()
    assert (again.message_id, again.receive_count) == (held.message_id, 2)


def test_deleted_visible_messages_are_skipped(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    for body in ("a", "b", "c"):
        queue.send(body)
    received = queue.receive(3)
    for message in reversed(received):
        queue.change_visibility(message, 0)  # visible again, in the same order
    assert _bodies(queue.peek()) == ["a", "b", "c"]
    assert queue.delete(received[1]) is True  # its id stays in the list: a ghost
    assert _bodies(queue.peek()) == ["a", "c"]
    assert _bodies(queue.peek(limit=2)) == ["a"]  # the ghost takes a place in the page
    assert _bodies(queue.peek(offset=2)) == ["c"]
    assert queue.attributes().visible == 2


@pytest.mark.parametrize("state", _peek.PEEK_STATES)
def test_offset_pages_through_each_state(client: smq.Client, clock: Clock, state: str) -> None:
    queue = client.create_queue("jobs", visibility_timeout=600)
    for n in range(25):
        queue.send(f"m{n:02}", delay_seconds=n + 1 if state == "delayed" else 0)
        clock.advance(0.001)
    if state == "in_flight":
        for _ in range(25):
            queue.receive()
            clock.advance(0.001)  # distinct expiries: a tie would order by id
    everything = _bodies(queue.peek(state, limit=_peek.MAX_PEEK))
    assert everything == [f"m{n:02}" for n in range(25)]
    pages = [_bodies(queue.peek(state, limit=10, offset=offset)) for offset in (0, 10, 20, 30)]
    assert pages == [everything[:10], everything[10:20], everything[20:], []]
    assert queue.peek(state, limit=1, offset=_peek.MAX_PEEK_OFFSET) == []


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"state": "dead"}, "state"),
        ({"state": "in-flight"}, "state"),
        ({"state": None}, "state"),
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": "5"}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": 100_000_001}, "offset"),
        ({"offset": 1.5}, "offset"),
    ],
)
def test_bad_arguments_raise_invalid_parameter(
    client: smq.Client, arguments: dict[str, Any], problem: str
) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter, match=problem):
        queue.peek(**arguments)


@pytest.mark.parametrize(
    "args",
    [
        ("gone", 10, 0),
        ("visible", 0, 0),
        ("visible", 101, 0),
        ("delayed", 10, -1),
        ("in_flight", 10, 100_000_001),
    ],
)
def test_the_script_refuses_bad_arguments_itself(client: smq.Client, args: tuple[Any, ...]) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter):
        client.run("peek", queue.keys, ("", *args), queue="jobs")


def test_a_missing_queue_raises_queue_does_not_exist(client: smq.Client) -> None:
    queue = client.queue("nope")
    for state in _peek.PEEK_STATES:
        with pytest.raises(smq.QueueDoesNotExist):
            queue.peek(state)
    client.create_queue("gone").send("x")
    client.delete_queue("gone")
    with pytest.raises(smq.QueueDoesNotExist):
        client.queue("gone").peek()


def test_fifo_messages_show_their_group_sequence_number_and_deduplication_id(client: smq.Client) -> None:
    queue = client.create_queue("jobs.fifo")
    sent = [queue.send(f"m{i}", message_group_id=f"g{i % 2}", deduplication_id=f"d{i}") for i in range(3)]
    (held,) = queue.receive(1)
    for state, expected in (("visible", sent[1:]), ("in_flight", sent[:1])):
        peeked = queue.peek(state, limit=10)
        assert sorted((p.message_id, p.sequence_number) for p in peeked) == sorted(
            (s.message_id, s.sequence_number) for s in expected
        )
        assert all(p.deduplication_id == f"d{p.body[1:]}" for p in peeked)
        assert all(p.message_group_id == f"g{int(p.body[1:]) % 2}" for p in peeked)
    assert held.message_id == sent[0].message_id


def test_standard_messages_have_no_sequence_number(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("a")
    queue.send("b", deduplication_id="once")
    first, second = queue.peek()
    assert (first.sequence_number, first.deduplication_id) == (None, None)
    assert (second.sequence_number, second.deduplication_id) == (None, "once")
