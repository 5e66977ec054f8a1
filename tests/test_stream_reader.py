"""The streaming reader's bookkeeping, driven by hand without Spark (fakeredis, Redis, cluster, ACL):
the driver's calls in Spark's order, and the tasks' reads, on the test's client."""

from __future__ import annotations

import time
from typing import Any

import pytest

import smq
from conftest import Clock
from smq.core._scripts import reply_pairs
from smq.spark import _stream_read
from smq.spark._options import SourceOptions
from smq.spark._stream import QueueStreamReader

SYNC_CLIENT_ONLY = "the Spark reader runs on smq.Client; the asyncio client's contract is tested elsewhere"


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


def test_a_replayed_batch_the_index_does_not_name_reads_nothing(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs")
    _send(queue, 30)
    reader = _reader(client, queue, monkeypatch, maxMessagesPerBatch="20", numPartitions="2")
    # A driver died after Spark logged batch 5's offset, before it asked for its partitions: no
    # task read it (and if an smq that kept no index planned it, its sink may have written it,
    # so messages taken now would be deleted unwritten).
    assert _read(reader, {"reader": "r1", "batch": 4}, {"reader": "r1", "batch": 5}) == []
    assert queue.attributes().in_flight == 0


def test_a_checkpoint_without_reader_ids_replays_the_same_way_every_restart(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offsets of an earlier smq (``{"batch": <ms>}``): every restart from them is the same reader,
    so a replay a restart recorded is found by the next, and nothing is taken and lost."""
    queue = client.create_queue("jobs")
    _send(queue, 60)
    start, end = {"batch": 1712345678900}, {"batch": 1712345678901}
    first = _reader(client, queue, monkeypatch, maxMessagesPerBatch="20", numPartitions="2")
    assert _read(first, start, end) == []
    _dead(first)
    again = _reader(client, queue, monkeypatch, maxMessagesPerBatch="20", numPartitions="2")
    assert _ids(_read(again, start, end)) == []
    assert again._reader == first._reader == "v0-1712345678901"
    following = again.latestOffset(end, None)
    assert following == {"reader": "v0-1712345678901", "batch": 1712345678902}
    again.commit(end)
    assert len(_ids(_read(again, end, following))) == 20
    info = queue.attributes()
    assert (info.counters.get("deleted", 0), info.in_flight) == (0, 20)  # nothing deleted unwritten
    again.stop()


def test_a_fifo_batch_committed_before_a_long_restart_is_not_given_again(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a FIFO queue an expired receipt can neither hide nor delete its message: a committed
    batch whose deletes a restart could not do comes back, and is deleted without its rows."""
    queue = client.create_queue("jobs.fifo", fifo_queue=True, content_based_deduplication=True)
    for group in range(5):
        queue.send_batch(
            [smq.SendEntry(f"e{n}", f"g{group}-{n}", message_group_id=f"g{group}") for n in range(2)]
        )
    options = {"visibilityTimeout": "30", "numPartitions": "1", "maxMessagesPerBatch": "20"}
    start, end, given = _a_batch_then_death(client, queue, monkeypatch, **options)
    assert len(given) == 10
    clock.advance(31)  # Spark committed the batch; the driver stays down past the timeout
    again = _reader(client, queue, monkeypatch, **options)
    following = again.latestOffset(end, None)
    again.commit(end)
    assert _ids(_read(again, end, following)) == []  # they came back: receipts kept, no rows
    last = again.latestOffset(following, None)
    again.commit(following)
    _read(again, following, last)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 10)
    _dead(again)
    # A restart after that one still keeps them out: the ids are kept beside the index.
    third = _reader(client, queue, monkeypatch, **options)
    third.latestOffset(last, None)
    assert third._given == frozenset(given)
    third.stop()


def test_available_now_after_a_restart_takes_only_what_was_visible(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs")
    _send(queue, 5)
    options = {"maxMessagesPerBatch": "20", "numPartitions": "1"}
    start, end, given = _a_batch_then_death(client, queue, monkeypatch, **options)
    assert len(given) == 5  # planned 20, took 5
    _send(queue, 30)
    again = _reader(client, queue, monkeypatch, **options)
    again.prepareForTriggerAvailableNow()  # 30 visible
    rows = _ids(_read(again, start, end))
    late_sent = False
    while (following := again.latestOffset(end, None)) != end:
        again.commit(end)
        rows += _ids(_read(again, end, following))
        if not late_sent:
            _send(queue, 50)  # after the run began: not for this run
            late_sent = True
        end = following
    assert len(rows) == 5 + 30
    again.stop()


def _a_batch_then_death(
    client: smq.Client, queue: smq.Queue, monkeypatch: pytest.MonkeyPatch, **options: str
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """A query plans its first batch, its tasks read it, then its driver dies (kill -9): the
    offsets Spark logged (start, end) and the ids the batch gave."""
    first = _reader(client, queue, monkeypatch, **options)
    start = first.initialOffset()
    end = first.latestOffset(start, None)
    given = _ids(_read(first, start, end))
    _dead(first)
    return start, end, given


def _dead(reader: QueueStreamReader) -> None:
    """The driver's process died (kill -9): its heartbeat stops, and nothing else happens."""
    reader._stopping.set()
    if reader._heartbeat is not None:
        reader._heartbeat.join(timeout=30)


def _ids(parts: list[list[Any]]) -> list[str]:
    return [row["message_id"] for rows in parts for row in rows]


def _records_left(client: smq.Client, reader: str, batches: range) -> int:
    """How many of a reader's keys are in Redis: its batches' records, and its index if it
    names a batch (beside the counts of messages received, which live on for the progress)."""
    records = [_stream_read.BatchRecord("jobs", reader, batch) for batch in batches]
    keys = [key for record in records for key in (record.rows, record.receipts)]
    index = records[0].index
    fields = {field.decode() for field, _ in reply_pairs(client._read("t", "jobs", index, "HGETALL", index))}
    return int(client._read("test", "jobs", keys[0], "EXISTS", *keys)) + (
        1 if fields - set(_stream_read.TALLIES) else 0
    )


def test_a_restarted_query_replays_its_batch_from_the_records(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs")
    _send(queue, 30)
    # Tasks ran (and maybe the sink wrote); Spark's commit log has no entry for the batch.
    start, end, given = _a_batch_then_death(
        client, queue, monkeypatch, maxMessagesPerBatch="20", numPartitions="2"
    )
    assert len(given) == 20
    again = _reader(client, queue, monkeypatch, maxMessagesPerBatch="20", numPartitions="2")
    assert again.initialOffset()["reader"] != start["reader"]  # the checkpoint's id wins, below
    assert _ids(_read(again, start, end)) == given  # Spark replays it: the same rows, received once
    assert queue.attributes().counters["received"] == 20
    following = again.latestOffset(end, None)
    again.commit(end)
    rest = _ids(_read(again, end, following))
    assert len(given + rest) == len(set(given + rest)) == 30
    last = again.latestOffset(following, None)  # an empty batch gets the last one committed
    again.commit(following)
    _read(again, following, last)
    again.commit(last)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"], info.counters["received"]) == (
        0,
        0,
        30,
        30,
    )
    again.stop()
    assert _records_left(client, start["reader"], range(0, 5)) == 0  # nothing of the query is left


def test_a_restart_first_deletes_the_batches_spark_committed(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs")
    _send(queue, 30)
    # Killed after Spark wrote the batch's commit log, before any of its messages was deleted.
    start, end, given = _a_batch_then_death(client, queue, monkeypatch, maxMessagesPerBatch="20")
    assert len(given) == 20
    again = _reader(client, queue, monkeypatch, maxMessagesPerBatch="20")
    following = again.latestOffset(end, None)  # the restarted query's first call: deletes first
    info = queue.attributes()
    assert (info.counters["deleted"], info.in_flight) == (20, 0)
    assert following["batch"] == end["batch"] + 1 and following["reader"] == start["reader"]
    assert len(_ids(_read(again, end, following))) == 10
    assert queue.attributes().counters["received"] == 30


def test_a_restart_after_the_timeout_hides_the_batch_again_and_keeps_out_what_another_took(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs")
    _send(queue, 10)
    start, end, given = _a_batch_then_death(client, queue, monkeypatch, numPartitions="1")
    clock.advance(31)  # the driver stays down past the timeout: the batch is visible again
    (taken,) = queue.receive(1, visibility_timeout=0)  # another consumer takes one, and lets it go
    again = _reader(client, queue, monkeypatch, visibilityTimeout="30", numPartitions="1")
    assert _ids(_read(again, start, end)) == given  # the replay: the same rows
    assert queue.attributes().in_flight == 9  # hidden again, all but the one taken meanwhile
    following = again.latestOffset(end, None)
    again.commit(end)
    # The taken message comes back to this query: its receipt is kept for the delete, but it is
    # not given as a row a second time.
    assert _ids(_read(again, end, following)) == []
    last = again.latestOffset(following, None)
    again.commit(following)
    _read(again, following, last)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 10)
    assert taken.message_id in given
    again.stop()


def test_a_restart_lets_go_of_a_batch_spark_does_not_replay(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs")
    _send(queue, 10)
    start, end, given = _a_batch_then_death(client, queue, monkeypatch, numPartitions="1")
    assert len(given) == 10
    # The records name a batch after the last one Spark committed that Spark does not run again
    # (its checkpoint went back, say): its messages are let go at once.
    again = _reader(client, queue, monkeypatch, numPartitions="1")
    again.latestOffset(start, None)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters.get("deleted", 0)) == (10, 0, 0)
    assert _records_left(client, start["reader"], range(0, 3)) == 0


def test_two_queries_on_one_queue_keep_their_own_records(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs")
    _send(queue, 40)
    one = _reader(client, queue, monkeypatch, maxMessagesPerBatch="20", numPartitions="1")
    two = _reader(client, queue, monkeypatch, maxMessagesPerBatch="20", numPartitions="1")
    starts = one.initialOffset(), two.initialOffset()
    assert starts[0]["reader"] != starts[1]["reader"]
    ends = one.latestOffset(starts[0], None), two.latestOffset(starts[1], None)
    rows = _ids(_read(one, starts[0], ends[0])), _ids(_read(two, starts[1], ends[1]))
    assert len(rows[0]) == len(rows[1]) == 20 and not set(rows[0]) & set(rows[1])
    assert ends[0]["batch"] == ends[1]["batch"]  # the same batch number, two records
    one.commit(ends[0])
    info = queue.attributes()
    assert (info.in_flight, info.counters["deleted"]) == (20, 20)  # only the first query's
    two.commit(ends[1])
    assert queue.attributes().counters["deleted"] == 40
    one.stop()
    two.stop()


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


def test_the_progress_reports_backlog_held_messages_and_redeliveries(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("jobs")
    _send(queue, 30)
    (again,) = queue.receive(1, visibility_timeout=0)  # received once before the query
    reader = _reader(client, queue, monkeypatch, maxMessagesPerBatch="20", visibilityTimeout="1")
    assert reader.reportLatestOffset() is None  # before Spark gave it an offset
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    ids = _ids(_read(reader, start, end))
    deadline = time.monotonic() + 30
    while (report := reader.reportLatestOffset()) and report["heartbeat_extensions"] < 40:
        assert time.monotonic() < deadline, report  # two heartbeat passes (every third of 1 s)
        time.sleep(0.05)
    assert report is not None
    assert {k: report[k] for k in ("reader", "batch", "visible", "in_flight", "delayed", "held")} == {
        "reader": start["reader"],
        "batch": end["batch"],
        "visible": 10,
        "in_flight": 20,
        "delayed": 0,
        "held": 20,
    }
    assert report["deletes_pending"] == 0
    assert (report["received"], report["redelivered"]) == (20, 1 if again.message_id in ids else 0)
    following = reader.latestOffset(end, None)
    reader.commit(end)
    assert reader.reportLatestOffset()["batch"] == following["batch"]  # type: ignore[index]
    reader.stop()


def test_a_stream_registers_itself_as_a_consumer_of_its_queue(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from smq.spark._consumers import registry, stream_consumers

    queue = client.create_queue("jobs")
    _send(queue, 30)
    assert stream_consumers(client, "jobs") == []
    reader = _reader(client, queue, monkeypatch, maxMessagesPerBatch="20", visibilityTimeout="45")
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    before = time.time()
    _read(reader, start, end)
    (consumer,) = stream_consumers(client, "jobs")
    assert (consumer.reader, consumer.visibility_timeout, consumer.received) == (start["reader"], 45, 20)
    assert before - 5 < consumer.seen_at <= time.time() + 5 and consumer.redelivered == 0
    # A query whose records expired (no index left) is not listed.
    key = registry("jobs")
    client._write("test", "jobs", key, "HSET", key, "gone", f"{int(before * 1000) - 10**9} 30")
    assert [c.reader for c in stream_consumers(client, "jobs")] == [start["reader"]]
    reader.stop()
