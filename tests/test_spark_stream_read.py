"""The streaming source's tasks, without Spark: records, re-reads and a lost race, on real Redis."""

from __future__ import annotations

import json
from typing import Any

import pytest

import smq
from smq.spark import _stream_read
from smq.spark._stream_read import BatchRecord, ReceivePartition, read_partition

pytest.importorskip("pyspark")


def _rows(partition: ReceivePartition) -> list[tuple[Any, ...]]:
    """The rows a task gives Spark (one Arrow record batch), as tuples in the schema's order."""
    return [tuple(row.values()) for batch in read_partition(partition) for row in batch.to_pylist()]


def _partition(client: smq.Client, index: int = 0, wanted: int = 25) -> ReceivePartition:
    return ReceivePartition(BatchRecord("jobs", "r1", 7), index, wanted, 30, client.settings)


def test_a_partition_receives_its_share_once_and_records_it(redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs")
    for start in range(0, 40, 10):
        queue.send_batch(
            [smq.SendEntry(f"e{n}", f"m-{n}", attributes={"n": n}) for n in range(start, start + 10)]
        )
    first = _rows(_partition(redis_client))
    again = _rows(_partition(redis_client))
    assert first == again and len(first) == 25
    assert {row[9] for row in first} == {"in_flight"} and first[0][2] == [("n", first[0][1].split("-")[1])]
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["received"]) == (15, 25, 25)
    record = BatchRecord("jobs", "r1", 7)
    receipts = redis_client._redis.hget(record.receipts, "0").decode().split()
    assert len(receipts) == 25 and all(r.startswith("jobs:") for r in receipts)
    # Records live as long as the messages they name could: the retention period, and an hour.
    assert 345_600 < redis_client._redis.ttl(record.rows) <= 345_600 + 3600
    other = _rows(_partition(redis_client, index=1))  # another share: other messages
    assert len(other) == 15 and not {row[0] for row in other} & {row[0] for row in first}


def test_an_evaluation_that_loses_the_race_lets_its_messages_go(
    redis_client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = redis_client.create_queue("jobs")
    queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(10)])
    record = BatchRecord("jobs", "r1", 7)
    winner = [["id-w", "won", {}, 1.0, 1, 1.0, None, None, None, "jobs:w:t"]]
    redis_client._redis.hset(record.rows, "0", json.dumps(winner))
    looked: list[int] = []
    real = _stream_read._recorded

    def first_sees_nothing(*args: Any) -> Any:
        looked.append(1)
        return None if len(looked) == 1 else real(*args)  # the winner recorded after this look

    monkeypatch.setattr(_stream_read, "_recorded", first_sees_nothing)
    rows = _rows(_partition(redis_client, wanted=5))
    assert [(row[0], row[1]) for row in rows] == [("id-w", "won")]
    info = queue.attributes()
    # It received 5, lost the claim, and let them go at once: all 10 visible, none in flight.
    assert (info.visible, info.in_flight, info.counters["received"]) == (10, 0, 5)
    assert redis_client._redis.hget(record.receipts, "0") is None  # the loser recorded no receipts


def test_an_empty_share_is_recorded_so_every_evaluation_agrees(redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs")
    assert _rows(_partition(redis_client)) == []
    queue.send("late")
    assert _rows(_partition(redis_client)) == []  # the first evaluation saw none
    assert queue.attributes().visible == 1


def test_a_task_deletes_the_committed_shares_it_is_handed_before_it_receives(
    redis_client: smq.Client,
) -> None:
    queue = redis_client.create_queue("jobs")
    for start in range(0, 60, 10):
        queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(start, start + 10)])
    old = BatchRecord("jobs", "r1", 6)
    first = [ReceivePartition(old, index, 15, 30, redis_client.settings) for index in (0, 1)]
    taken = [row[0] for part in first for row in _rows(part)]
    assert len(taken) == 30 and queue.attributes().in_flight == 30
    # Batch 6 committed: batch 7's one task deletes both of its shares, then takes 25 more.
    later = ReceivePartition(
        BatchRecord("jobs", "r1", 7), 0, 25, 30, redis_client.settings, ((old, 0), (old, 1))
    )
    rows = _rows(later)
    info = queue.attributes()
    assert (len(rows), info.visible, info.in_flight, info.counters["deleted"]) == (25, 5, 25, 30)
    assert not {row[0] for row in rows} & set(taken)
    # The deleted shares are tombstones now: a late copy of a task of batch 6 can record nothing.
    assert redis_client._redis.hgetall(old.rows) == {b"0": b"[]", b"1": b"[]"}
    assert not redis_client._redis.exists(old.receipts)
    late = ReceivePartition(old, 1, 15, 30, redis_client.settings)
    assert _rows(late) == [] and queue.attributes().visible == 5
    again = _rows(later)  # a re-evaluation reads its record and deletes nothing more
    assert again == rows and queue.attributes().counters["deleted"] == 30


def test_the_arrow_batch_has_the_schema_spark_expects(spark: Any) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from smq.spark._source import MESSAGE_SCHEMA
    from smq.spark._stream_read import arrow_batch, arrow_schema

    expected = to_arrow_schema(StructType.fromDDL(MESSAGE_SCHEMA), timezone="UTC")
    assert arrow_schema().equals(expected)
    entry = ["id", "body", {"a": "1"}, 1_700_000_000.123456, 2, 1_700_000_001.5, "g", "7", "d", "q:i:t"]
    (row,) = arrow_batch([entry]).to_pylist()
    assert row["attributes"] == [("a", "1")] and row["receive_count"] == 2
    assert row["sent_timestamp"].timestamp() == 1_700_000_000.123456
    assert (row["state"], row["visible_timestamp"], row["origin"]) == ("in_flight", None, None)


def test_a_task_of_an_empty_batch_only_deletes(redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs")
    queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(10)])
    old = BatchRecord("jobs", "r1", 6)
    assert len(_rows(ReceivePartition(old, 0, 4, 30, redis_client.settings))) == 4
    empty = BatchRecord("jobs", "r1", 7)
    assert _rows(ReceivePartition(empty, 0, 0, 30, redis_client.settings, ((old, 0),))) == []
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (6, 0, 4)
    assert redis_client._redis.hgetall(old.rows) == {b"0": b"[]"}
    assert not redis_client._redis.exists(old.receipts, empty.rows, empty.receipts)


def test_a_task_stops_receiving_after_a_third_of_the_timeout(
    redis_client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = redis_client.create_queue("jobs")
    for start in range(0, 100, 10):
        queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(start, start + 10)])
    old = BatchRecord("jobs", "r1", 6)
    assert len(_rows(ReceivePartition(old, 0, 40, 30, redis_client.settings))) == 40
    clock = iter(range(0, 1000, 4))  # each look at the clock is 4 s later: past 10 s on the 4th
    monkeypatch.setattr(_stream_read, "_now", lambda: float(next(clock)))
    later = ReceivePartition(BatchRecord("jobs", "r1", 7), 0, 70, 30, redis_client.settings, ((old, 0),))
    rows = _rows(later)
    info = queue.attributes()
    # Three receives of 10 (deletes riding on them), then time was up at 12 s: the last 10
    # deletes went alone, and 30 messages wait for the next batch.
    assert (len(rows), info.visible, info.in_flight, info.counters["deleted"]) == (30, 30, 30, 40)


def test_a_share_whose_receipts_copy_is_missing_is_deleted_by_its_rows(redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs")
    queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(10)])
    old = BatchRecord("jobs", "r1", 6)
    assert len(_rows(ReceivePartition(old, 0, 6, 30, redis_client.settings))) == 6
    redis_client._redis.delete(old.receipts)  # as if the task died between its claim and the copy
    assert len(_stream_read.share_receipts(redis_client, old, "0")) == 6
    later = ReceivePartition(BatchRecord("jobs", "r1", 7), 0, 0, 30, redis_client.settings, ((old, 0),))
    assert _rows(later) == []
    assert queue.attributes().counters["deleted"] == 6
