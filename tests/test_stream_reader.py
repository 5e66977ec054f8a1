"""The streaming reader's bookkeeping, driven by hand without Spark (fakeredis, Redis, cluster, ACL):
the driver's calls in Spark's order, and the tasks' reads, on the test's client."""

from __future__ import annotations

from typing import Any

import pytest

import smq
from conftest import Clock
from smq.spark import _stream_read
from smq.spark._options import SourceOptions
from smq.spark._stream import QueueStreamReader


def _reader(
    client: smq.Client, queue: smq.Queue, monkeypatch: pytest.MonkeyPatch, **options: str
) -> QueueStreamReader:
    reader = QueueStreamReader(SourceOptions.parse({"queue": queue.name, "waitTimeSeconds": "0", **options}))
    reader._client, reader._held = client, queue  # the test's client, with its clock
    # The tasks, too, use the test's client (they would connect by the reader's settings).
    monkeypatch.setitem(_stream_read._CLIENTS, reader.options.settings, client)
    return reader


def _send(queue: smq.Queue, count: int) -> None:
    for start in range(0, count, 10):
        queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(start, min(count, start + 10))])


def _read(reader: QueueStreamReader, start: dict[str, int], end: dict[str, int]) -> list[list[Any]]:
    """Run the tasks of the batches after ``start`` up to ``end``: each partition's rows."""
    return [
        [row for batch in reader.read(part) for row in batch.to_pylist()]
        for part in reader.partitions(start, end)
    ]


def test_a_batch_is_received_by_its_tasks_and_deleted_by_the_next_ones(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs")
    _send(queue, 25)
    reader = _reader(client, queue, monkeypatch, maxMessagesPerBatch="20", numPartitions="3")
    start = reader.initialOffset()
    first = reader.latestOffset(start, None)
    assert first["batch"] > start["batch"]
    assert queue.attributes().in_flight == 0  # the driver plans; it receives nothing
    parts = _read(reader, start, first)
    assert [len(rows) for rows in parts] == [7, 7, 6]
    assert len({row["message_id"] for rows in parts for row in rows}) == 20
    assert (queue.attributes().visible, queue.attributes().in_flight) == (5, 20)
    second = reader.latestOffset(first, None)
    reader.commit(first)  # Spark's order: the next batch is planned, then this one committed
    assert queue.attributes().in_flight == 20  # the next batch's tasks delete them
    # Shares of up to 7: the first task (they run one after another here) takes the 5 left.
    assert [len(rows) for rows in _read(reader, first, second)] == [5, 0, 0]
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 5, 20)
    # Nothing new, but batch two waits for its commit: an empty batch gets it committed,
    # and its tasks only delete.
    empty = reader.latestOffset(second, None)
    assert empty["batch"] == second["batch"] + 1
    reader.commit(second)
    assert _read(reader, second, empty) == [[], [], []]
    assert queue.attributes().in_flight == 0
    reader.commit(empty)
    assert reader.latestOffset(empty, None) == empty  # then the offset rests
    assert queue.attributes().counters["deleted"] == 25


def test_a_replayed_batch_this_reader_never_planned_is_empty(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs")
    reader = _reader(client, queue, monkeypatch)
    assert reader.partitions({"batch": 4}, {"batch": 5}) == []


def test_the_heartbeat_counts_lost_leases_but_keeps_messages_at_their_ceiling(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    _send(queue, 2)
    reader = _reader(client, queue, monkeypatch, visibilityTimeout="30", numPartitions="1")
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    (rows,) = _read(reader, start, end)
    ids = [row["message_id"] for row in rows]
    receipts = reader._receipts(reader._record(end["batch"]))
    assert len(receipts) == 2
    # One message's lease runs out and another receive takes it; the other is
    # kept in flight for almost 12 hours.
    queue.change_visibility(receipts[1], 43_200 - 5)
    clock.advance(31)
    (taken,) = queue.receive(1)
    assert taken.message_id == ids[0]
    clock.advance(43_200 - 31 - 10)
    assert reader._change(receipts, 30) == 1  # the taken one; the other is held to its ceiling
    assert queue.attributes().in_flight == 1  # held to its ceiling (the taken one timed out long ago)
