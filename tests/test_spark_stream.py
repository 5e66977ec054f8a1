"""The smq format's streaming source on real PySpark (local mode) and real Redis: at least once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import smq

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("spark_stream_job.py")


def _run_job(url: str, queue: str, checkpoint: Path, out: Path, *extra: str) -> int:
    """Run the streaming job as its own process (group) to the end; return its exit code."""
    process = subprocess.Popen(
        [
            sys.executable,
            str(JOB),
            "--url",
            url,
            "--queue",
            queue,
            "--checkpoint",
            str(checkpoint),
            "--out",
            str(out),
            *extra,
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        return process.wait(timeout=240)
    finally:
        # The JVM and Spark's Python workers are in the job's process group.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _send(queue: smq.Queue, count: int) -> None:
    """Send ``m-0`` .. ``m-<count - 1>``, 10 a call."""
    for start in range(0, count, 10):
        queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(start, start + 10)])


def _done(out: Path) -> list[tuple[int, str]]:
    return [
        (int(batch), message_id)
        for batch, message_id in (line.split() for line in out.read_text().splitlines())
    ]


def _query(spark: Any, client: smq.Client, queue: str, checkpoint: Path, each: Any, **options: str) -> Any:
    """A streaming query's writer over ``queue`` into ``each`` (foreachBatch), not yet started."""
    stream = spark.readStream.format("smq").option("url", client.settings.url).option("queue", queue)
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream.load().writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))


def test_a_query_killed_before_its_commit_gets_its_messages_again(
    redis_client: smq.Client, tmp_path: Path
) -> None:
    queue = redis_client.create_queue("jobs")
    sent = {queue.send(f"m-{n}").message_id for n in range(250)}
    url = redis_client.settings.url
    out, checkpoint = tmp_path / "done.txt", tmp_path / "checkpoint"

    assert _run_job(url, "jobs", checkpoint, out, "--crash") == -signal.SIGKILL
    crashed = {message_id for _, message_id in _done(out)}
    assert 0 < len(crashed) <= 100 and crashed <= sent
    info = queue.attributes()
    assert info.visible + info.in_flight == 250  # processed, but not committed: nothing deleted

    # The same query again, from its checkpoint: the crashed batch's messages
    # come back when their timeout runs out (no heartbeat holds them now).
    assert _run_job(url, "jobs", checkpoint, out, "--expect", "250") == 0
    counts = Counter(message_id for _, message_id in _done(out))
    assert set(counts) == sent
    assert {m for m, n in counts.items() if n == 2} == crashed
    assert all(n == 1 for m, n in counts.items() if m not in crashed)
    # Spark replayed the crashed batch under its batch id, and it read the same messages from
    # its records (hidden again by the restarted driver though their 3 s timeout had run out):
    # nothing was received twice, so a sink idempotent per batch id holds each message once.
    pairs = Counter(_done(out))
    assert {message_id for (_, message_id), n in pairs.items() if n == 2} == crashed
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 250)
    assert info.counters["received"] == 250


def test_a_clean_run_processes_each_message_once_and_hides_it_until_committed(
    spark: Any, redis_client: smq.Client, tmp_path: Path
) -> None:
    queue = redis_client.create_queue("jobs")
    sent = {queue.send(f"m-{n}").message_id for n in range(300)}
    rival = smq.Client(redis_client.settings.url).get_queue("jobs")
    seen: list[str] = []
    taken: list[smq.Message] = []

    def each(batch: Any, batch_id: int) -> None:
        ids = [row.message_id for row in batch.select("message_id").collect()]
        if ids and not seen:
            # The first batch takes four visibility timeouts: the heartbeat must
            # keep its messages hidden from every other consumer meanwhile.
            for _ in range(8):
                taken.extend(rival.receive(10, visibility_timeout=0))
                time.sleep(0.5)
        seen.extend(ids)

    options = {"visibilityTimeout": "1", "maxMessagesPerBatch": "100"}
    query = _query(spark, redis_client, "jobs", tmp_path / "ck", each, **options)
    query = query.trigger(processingTime="200 milliseconds").start()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            info = queue.attributes()
            if len(set(seen)) == 300 and info.visible + info.in_flight == 0:
                break
            time.sleep(0.2)
    finally:
        query.stop()
    assert Counter(seen) == Counter(sent)
    first_batch = set(seen[:100])
    assert [m.body for m in taken if m.message_id in first_batch] == []
    info = queue.attributes()
    # The rival's receives (timeout 0) took only messages not yet in a batch.
    assert (info.counters["deleted"], info.counters["received"]) == (300, 300 + len(taken))


def test_a_failed_query_leaves_its_batch_to_come_back_after_the_timeout(
    spark: Any, redis_client: smq.Client, tmp_path: Path
) -> None:
    queue = redis_client.create_queue("jobs")
    _send(queue, 50)

    def each(batch: Any, batch_id: int) -> None:
        if batch.count():
            raise RuntimeError("the sink failed")

    query = _query(spark, redis_client, "jobs", tmp_path / "ck", each, visibilityTimeout="3").start()
    with pytest.raises(Exception, match="the sink failed"):
        query.awaitTermination(120)
    failed_at = time.monotonic()
    # Spark kills the source's process, heartbeat and all: nothing was deleted,
    # and the batch is visible again once its last extension runs out.
    deadline = failed_at + 30
    while queue.attributes().visible < 50 and time.monotonic() < deadline:
        time.sleep(0.1)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters.get("deleted", 0)) == (50, 0, 0)
    # Back after the 3 s timeout, not held on: a margin for a loaded machine (a heartbeat left
    # running would keep the batch hidden past the 30 s deadline above).
    assert time.monotonic() - failed_at < 3 + 10


def test_available_now_takes_what_was_visible_and_ends(
    spark: Any, redis_client: smq.Client, tmp_path: Path
) -> None:
    queue = redis_client.create_queue("jobs")
    _send(queue, 120)
    seen: list[Any] = []

    def each(batch: Any, batch_id: int) -> None:
        seen.extend(batch.collect())

    query = _query(spark, redis_client, "jobs", tmp_path / "ck", each, maxMessagesPerBatch="50")
    query.trigger(availableNow=True).start().awaitTermination(120)
    assert sorted(row.body for row in seen) == sorted(f"m-{n}" for n in range(120))
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 120)


def test_a_fifo_stream_keeps_each_group_in_order_within_a_partition(
    spark: Any, redis_client: smq.Client, tmp_path: Path
) -> None:
    from pyspark.sql.functions import spark_partition_id

    queue = redis_client.create_queue("jobs.fifo", content_based_deduplication=True)
    for start in range(0, 60, 10):
        queue.send_batch(
            [smq.SendEntry(f"e{n}", f"m-{n}", message_group_id=f"g{n % 4}") for n in range(start, start + 10)]
        )
    seen: list[Any] = []

    def each(batch: Any, batch_id: int) -> None:
        seen.extend((batch_id, row) for row in batch.withColumn("part", spark_partition_id()).collect())

    query = _query(spark, redis_client, "jobs.fifo", tmp_path / "ck", each, numPartitions="3")
    query.trigger(availableNow=True).start().awaitTermination(120)
    by_group: dict[str, list[str]] = {}
    parts: dict[tuple[int, str], set[int]] = {}
    for batch_id, row in seen:
        by_group.setdefault(row.message_group_id, []).append(row.body)
        parts.setdefault((batch_id, row.message_group_id), set()).add(row.part)
    assert by_group == {f"g{g}": [f"m-{n}" for n in range(g, 60, 4)] for g in range(4)}
    # Within a micro-batch, a group's messages are all in one partition (its tasks
    # received them, and a group in flight gives no message to another receive).
    assert all(len(p) == 1 for p in parts.values())
    assert len({part for p in parts.values() for part in p}) > 1  # and the batches were read in parallel


def test_a_batch_read_twice_and_a_retried_task_see_the_same_messages(
    spark: Any, redis_client: smq.Client, tmp_path: Path
) -> None:
    from pyspark import TaskContext

    queue = redis_client.create_queue("jobs")
    _send(queue, 200)
    counted: list[int] = []
    seen: list[str] = []

    def fail_first_attempt(rows: Any) -> Any:
        if TaskContext.get().attemptNumber() == 0:  # type: ignore[union-attr]
            raise RuntimeError("this attempt fails")
        return rows

    def each(batch: Any, batch_id: int) -> None:
        counted.append(batch.count())  # one evaluation of the batch...
        ids = batch.rdd.mapPartitions(fail_first_attempt).map(lambda row: row.message_id).collect()
        seen.extend(ids)  # ...and another, whose tasks each fail once and run again

    options = {"maxMessagesPerBatch": "80", "numPartitions": "4"}
    query = _query(spark, redis_client, "jobs", tmp_path / "ck", each, **options)
    query.trigger(availableNow=True).start().awaitTermination(180)
    assert sorted(counted, reverse=True)[:3] == [80, 80, 40]
    assert sum(counted) == len(seen) == 200
    assert len(set(seen)) == 200
    info = queue.attributes()
    # Every evaluation after the first read its partition's record: nothing was received twice.
    assert (info.visible, info.in_flight, info.counters["received"], info.counters["deleted"]) == (
        0,
        0,
        200,
        200,
    )
    # What is left of the records: the index and tombstones of the deleted shares (the batch
    # that deleted the last one never commits: the query ended), which a restart of the query
    # clears, or which expire an hour after the queue's retention period.
    left = list(redis_client._redis.scan_iter(match="smq:{jobs}:stream:*"))
    for key in left:
        values = redis_client._redis.hvals(key)
        assert key.endswith(b":rows") and set(values) == {b"[]"} or key.count(b":") == 3, (key, values)
        assert 0 < redis_client._redis.ttl(key) <= 345_600 + 3600


def test_the_query_progress_carries_the_sources_figures(
    spark: Any, redis_client: smq.Client, tmp_path: Path
) -> None:
    queue = redis_client.create_queue("jobs")
    _send(queue, 300)
    seen: list[str] = []

    def each(batch: Any, batch_id: int) -> None:
        seen.extend(row.message_id for row in batch.select("message_id").collect())

    options = {"maxMessagesPerBatch": "100"}
    query = _query(spark, redis_client, "jobs", tmp_path / "ck", each, **options)
    query = query.trigger(processingTime="200 milliseconds").start()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (len(seen) < 300 or queue.attributes().in_flight):
            time.sleep(0.2)
        time.sleep(1)  # a progress or two after the last batch
        progress = query.recentProgress
    finally:
        query.stop()
    figures = [json.loads(p.sources[0].latestOffset) for p in progress if p.sources[0].latestOffset]
    assert figures, [p.json for p in progress]
    last = figures[-1]
    assert set(last) == {
        "reader", "batch", "visible", "in_flight", "delayed", "held", "deletes_pending",
        "heartbeat_extensions", "received", "redelivered",
    }  # fmt: skip
    assert (last["visible"], last["received"], last["redelivered"]) == (0, 300, 0)
    assert max(f["visible"] for f in figures) > 0  # the backlog, as it went down
    assert max(f["held"] + f["deletes_pending"] for f in figures) > 0  # batches on their way
    for p in progress:
        print(p.json)
