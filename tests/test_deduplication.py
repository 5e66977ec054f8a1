"""Deduplication ids on standard queues: an smq extension for producers that retry (the Spark sink)."""

from __future__ import annotations

import pytest

import smq
from conftest import Clock, raw


def test_a_second_send_with_the_same_id_is_accepted_and_not_stored(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    first = queue.send("x", deduplication_id="row-1")
    again = queue.send("x", deduplication_id="row-1")
    other = queue.send("x", deduplication_id="row-2")
    assert (first.duplicate, again.duplicate, other.duplicate) == (False, True, False)
    assert again.message_id == first.message_id != other.message_id
    received = queue.receive(10)
    assert sorted(m.message_id for m in received) == sorted([first.message_id, other.message_id])
    assert {m.deduplication_id for m in received} == {"row-1", "row-2"}
    assert {m.message_group_id for m in received} == {None}
    assert queue.attributes().counters["deduplicated"] == 1


def test_duplicates_within_one_batch_are_stored_once(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    result = queue.send_batch(
        [
            smq.SendEntry("a", "one", deduplication_id="d1"),
            smq.SendEntry("b", "one again", deduplication_id="d1"),
            smq.SendEntry("c", "plain"),
            smq.SendEntry("d", "two", deduplication_id="d2", delay_seconds=5),
        ]
    )
    by_entry = {r.id: r for r in result.successful}
    assert not result.failed
    assert by_entry["b"].duplicate and by_entry["b"].message_id == by_entry["a"].message_id
    assert [by_entry[e].duplicate for e in "acd"] == [False, False, False]
    info = queue.attributes()
    assert (info.visible, info.delayed) == (2, 1)


def test_an_id_lets_a_message_in_again_after_five_minutes(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    first = queue.send("x", deduplication_id="row-1")
    clock.advance(299)
    assert queue.send("x", deduplication_id="row-1").duplicate
    clock.advance(2)
    later = queue.send("x", deduplication_id="row-1")
    assert not later.duplicate and later.message_id != first.message_id
    # The lapsed id was trimmed by that send: only the new one is remembered.
    assert raw(client).hlen(queue.keys.dedup) == 1


def test_deduplicated_messages_keep_their_group_and_attributes(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("x", deduplication_id="d", message_group_id="tenant-1", attributes={"n": 1})
    (message,) = queue.receive()
    assert (message.message_group_id, message.deduplication_id) == ("tenant-1", "d")
    assert message.attributes["n"].value == "1"


@pytest.mark.parametrize("bad", ["", "x" * 129, "tab\there", "é"])
def test_a_bad_deduplication_id_is_refused_and_nothing_is_stored(client: smq.Client, bad: str) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter, match="MessageDeduplicationId"):
        queue.send("x", deduplication_id=bad)
    assert queue.attributes().visible == 0


def test_deleting_the_queue_drops_its_deduplication_ids(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("x", deduplication_id="d")
    client.delete_queue("jobs")
    assert raw(client).exists(queue.keys.dedup, queue.keys.dedup_at) == 0
    again = client.create_queue("jobs")
    assert not again.send("x", deduplication_id="d").duplicate
