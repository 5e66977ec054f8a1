"""The streaming reader's bookkeeping, driven by hand without Spark (fakeredis, Redis, cluster)."""

from __future__ import annotations

import smq
from conftest import Clock
from smq.spark._options import SourceOptions
from smq.spark._stream import QueueStreamReader


def _reader(client: smq.Client, queue: smq.Queue, **options: str) -> QueueStreamReader:
    reader = QueueStreamReader(SourceOptions.parse({"queue": queue.name, "waitTimeSeconds": "0", **options}))
    reader._client, reader._held = client, queue  # the test's client, with its clock
    return reader


def _send(queue: smq.Queue, count: int) -> None:
    for start in range(0, count, 10):
        queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(start, min(count, start + 10))])


def test_a_batch_is_received_hidden_and_deleted_only_at_its_commit(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    _send(queue, 25)
    reader = _reader(client, queue, maxMessagesPerBatch="20", numPartitions="3")
    start = reader.initialOffset()
    first = reader.latestOffset(start, None)
    assert first["batch"] > start["batch"]
    rows = [row for part in reader.partitions(start, first) for row in reader.read(part)]
    assert len(rows) == 20 and len({row[0] for row in rows}) == 20
    assert (queue.attributes().visible, queue.attributes().in_flight) == (5, 20)
    second = reader.latestOffset(first, None)
    assert (queue.attributes().visible, queue.attributes().in_flight) == (0, 25)
    reader.commit(first)
    assert queue.attributes().in_flight == 5
    # Nothing new, but batch two waits for its commit: an empty batch gets it committed.
    empty = reader.latestOffset(second, None)
    assert empty["batch"] == second["batch"] + 1 and reader.partitions(second, empty) == []
    reader.commit(empty)
    assert queue.attributes().in_flight == 0
    assert reader.latestOffset(empty, None) == empty  # then the offset rests
    assert queue.attributes().counters["deleted"] == 25


def test_a_replayed_batch_this_reader_never_held_is_empty(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    reader = _reader(client, queue)
    assert reader.partitions({"batch": 4}, {"batch": 5}) == []


def test_the_heartbeat_drops_lost_leases_but_keeps_messages_at_their_ceiling(
    client: smq.Client, clock: Clock
) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    _send(queue, 2)
    reader = _reader(client, queue, visibilityTimeout="30")
    end = reader.latestOffset(reader.initialOffset(), None)
    held = reader._batches[end["batch"]]
    # One message's lease runs out and another receive takes it; the other is
    # kept in flight for almost 12 hours.
    queue.change_visibility(held[1].receipt_handle, 43_200 - 5)
    clock.advance(31)
    (taken,) = queue.receive(1)
    assert taken.message_id == held[0].message_id
    clock.advance(43_200 - 31 - 10)
    assert reader._change(held, 30) == [held[0]]
