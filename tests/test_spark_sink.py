"""The smq format's sink on real PySpark (local mode) and real Redis."""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import smq
from smq.spark._sink import QueueWriter, SentPartition
from smq.spark._source import SmqDataSource

pytestmark = pytest.mark.slow


def _drain(queue: smq.Queue) -> list[smq.Message]:
    received: list[smq.Message] = []
    while batch := queue.receive(10, visibility_timeout=600):
        received += batch
    return received


def _write(df: Any, queue: str, url: str, format: str = "smq", **options: str) -> None:
    writer = df.write.format(format).option("queue", queue).option("url", url).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


class _FailingSource(SmqDataSource):
    """``format("smq_failing")``: the smq sink, whose first attempt of partition 0 dies at row 150.

    The failure strikes inside a real Spark task after that task has sent its
    first 150 rows, and Spark runs the task again, as after a lost executor.
    """

    @classmethod
    def name(cls) -> str:
        return "smq_failing"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        return _FailingWriter(self.checked, schema, overwrite)


class _FailingWriter(QueueWriter):
    def write(self, iterator: Iterator[Any]) -> Any:
        from pyspark import TaskContext

        context = TaskContext.get()
        doomed = context.partitionId() == 0 and context.attemptNumber() == 0

        def rows() -> Iterator[Any]:
            for position, row in enumerate(iterator):
                if doomed and position == 150:
                    raise RuntimeError("injected task failure")
                yield row

        return super().write(rows())


class _DoomedSource(SmqDataSource):
    """``format("smq_doomed")``: the smq sink, whose partition 0 dies at row 50 in every attempt, once
    the other partitions have sent theirs (so the write fails with a known part sent)."""

    @classmethod
    def name(cls) -> str:
        return "smq_doomed"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        return _DoomedWriter(self.checked, schema, overwrite)


class _DoomedWriter(QueueWriter):
    def write(self, iterator: Iterator[Any]) -> Any:
        import time

        from pyspark import TaskContext

        context = TaskContext.get()
        if context.partitionId() != 0:
            return super().write(iterator)

        def rows() -> Iterator[Any]:
            for position, row in enumerate(iterator):
                if position == 50:
                    with smq.Client(settings=self.options.settings) as client:
                        deadline = time.monotonic() + 60
                        while client._redis.hlen(self.ledger) < 3 and time.monotonic() < deadline:
                            time.sleep(0.05)
                    raise RuntimeError("injected task failure")
                yield row

        return super().write(rows())


@pytest.fixture
def failing(spark: Any) -> str:
    from pyspark import cloudpickle

    # Tasks unpickle the data source; this test module is not importable there.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(_FailingSource)
    spark.dataSource.register(_DoomedSource)
    return "smq_failing"


def test_rows_become_messages_with_attributes(spark: Any, redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("out")
    df = spark.range(25).selectExpr(
        "concat('m-', id) as body",
        "id * 2 as doubled",
        "map('tenant', 'acme') as attributes",
        "cast(null as string) as note",
    )
    _write(df, "out", redis_client.settings.url, attributeColumns="doubled,note")
    received = _drain(queue)
    assert sorted(m.body for m in received) == sorted(f"m-{n}" for n in range(25))
    one = next(m for m in received if m.body == "m-7")
    assert {k: (a.data_type, a.value) for k, a in one.attributes.items()} == {
        "doubled": ("Number", "14"),
        "tenant": ("String", "acme"),
    }
    assert all(m.deduplication_id and len(m.deduplication_id) == 64 for m in received)


def test_a_retried_task_sends_no_duplicates(spark: Any, redis_client: smq.Client, failing: str) -> None:
    url = redis_client.settings.url
    rows = spark.range(0, 400, 1, 2).selectExpr("concat('m-', id) as body")
    deduplicated = redis_client.create_queue("deduplicated")
    _write(rows, "deduplicated", url, format=failing)
    plain = redis_client.create_queue("plain")
    _write(rows, "plain", url, format=failing, deduplicate="false")
    # Without deduplication ids the failed attempt's messages arrive twice: the
    # failure really struck after sends (else this test could not fail).
    repeated = Counter(m.body for m in _drain(plain))
    assert set(repeated) == {f"m-{n}" for n in range(400)}
    # (rows 0-139: the batch of rows 140-149 had not gone out when row 150 failed)
    assert sum(1 for count in repeated.values() if count == 2) == 140
    # With them, every row arrives once, and the queue counted the resends it dropped.
    once = Counter(m.body for m in _drain(deduplicated))
    assert once == Counter(f"m-{n}" for n in range(400))
    assert deduplicated.attributes().counters["deduplicated"] == sum(repeated.values()) - 400


def test_fifo_rows_keep_their_group_order(spark: Any, redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("out.fifo")
    df = spark.range(0, 60, 1, 1).selectExpr(
        "concat('m-', id) as body", "concat('g', id % 3) as message_group_id"
    )
    _write(df, "out.fifo", redis_client.settings.url)
    by_group: dict[str, list[str]] = {}
    while batch := queue.receive(10):
        for message in batch:
            by_group.setdefault(message.message_group_id or "", []).append(message.body)
            queue.delete(message.receipt_handle)
    assert by_group == {f"g{g}": [f"m-{n}" for n in range(g, 60, 3)] for g in range(3)}


def test_a_sink_on_a_redis_cluster(spark: Any, redis_cluster: Any) -> None:
    client = smq.Client(settings=smq.Settings(url=redis_cluster.url, cluster=True))
    queue = client.create_queue("clustered-out")
    df = spark.range(50).selectExpr("concat('m-', id) as body")
    df.write.format("smq").option("queue", "clustered-out").option("url", redis_cluster.url).option(
        "cluster", "true"
    ).mode("append").save()
    assert sorted(m.body for m in _drain(queue)) == sorted(f"m-{n}" for n in range(50))
    client.delete_queue("clustered-out")


@pytest.mark.parametrize(
    ("columns", "options", "mode", "message"),
    [
        ("'x' as body", {}, "overwrite", 'the smq sink appends messages; write with mode("append")'),
        ("1 as text", {}, "append", "the smq sink needs a string column 'body' for the body"),
        ("'x' as body", {"attributeColumns": "nope"}, "append", "attributeColumns: no column 'nope'"),
        ("'x' as body", {"queue": "missing"}, "append", "queue 'missing' does not exist"),
        ("'x' as body", {"queue": "out.fifo"}, "append", "the rows need a 'message_group_id' column"),
        ("'x' as body", {"maxMessagesPerBatch": "0"}, "append", "option maxMessagesPerBatch must be 1 to"),
    ],
)
def test_a_write_the_sink_cannot_do_fails_before_any_task_naming_the_problem(
    spark: Any, redis_client: smq.Client, columns: str, options: dict[str, str], mode: str, message: str
) -> None:
    redis_client.create_queue("out")
    redis_client.create_queue("out.fifo")
    writer = spark.range(3).selectExpr(columns).write.format("smq").option("url", redis_client.settings.url)
    writer = writer.option("queue", "out").mode(mode)
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=re.escape(message)):
        writer.save()
    assert redis_client.get_queue("out").attributes().visible == 0


def test_a_row_the_queue_refuses_fails_the_write_with_the_reason(
    spark: Any, redis_client: smq.Client
) -> None:
    redis_client.create_queue("small", maximum_message_size=1024)
    df = spark.range(1).selectExpr("repeat('x', 2000) as body")
    with pytest.raises(Exception, match="queue 'small' refused a row: MessageTooLong"):
        _write(df, "small", redis_client.settings.url)


@pytest.mark.parametrize("columns", ["body", "body,tenant"])
def test_deduplication_ids_follow_content_not_row_order(redis_client: smq.Client, columns: str) -> None:
    from pyspark.sql import Row
    from pyspark.sql.types import StringType, StructField, StructType

    from smq.spark._options import SourceOptions

    redis_client.create_queue("out")
    names = columns.split(",")
    schema = StructType([StructField(name, StringType()) for name in names])
    options = {"queue": "out", "url": redis_client.settings.url, "writeId": "w1"}
    if "tenant" in names:
        options["attributeColumns"] = "tenant"
    writer = QueueWriter(SourceOptions.parse(options), schema, overwrite=False)
    rows = [Row(**dict(zip(names, values, strict=False))) for values in (("a", "t"), ("b", "t"), ("a", "t"))]

    def ids(ordered: list[Any], partition: int = 0) -> list[str]:
        seen: Counter[bytes] = Counter()
        return [writer._entry(row, partition, seen).deduplication_id or "" for row in ordered]

    first = ids(rows)
    assert len(set(first)) == 3  # equal rows are still two messages
    assert sorted(ids(list(reversed(rows)))) == sorted(first)  # another order, the same ids
    assert set(ids(rows, partition=1)).isdisjoint(first)  # another partition, other ids


def test_a_failed_write_run_again_with_its_write_id_sends_each_row_once(
    spark: Any, redis_client: smq.Client, failing: str
) -> None:
    url = redis_client.settings.url
    queue = redis_client.create_queue("out")
    rows = spark.range(0, 400, 1, 4).selectExpr("concat('m-', id) as body")
    with pytest.raises(Exception, match="injected task failure"):
        _write(rows, "out", url, format="smq_doomed")
    # The write's id, as its driver printed it at the start (see the next test): here from the
    # name of its ledger (Spark's Python workers write to the stderr the JVM started with).
    (key,) = redis_client._redis.scan_iter(match="smq:{out}:sink:*")
    write_id = key.decode().rsplit(":", 1)[1]
    ledger = redis_client._redis.hgetall(f"smq:{{out}}:sink:{write_id}")
    assert ledger == {b"1": b"100 0", b"2": b"100 0", b"3": b"100 0"}  # partition 0 never finished
    # Its three attempts each sent rows 0-39 (the batch of 40-49 had not gone out): 80 dropped.
    assert queue.attributes().counters["deduplicated"] == 80
    _write(rows, "out", url, writeId=write_id)
    assert Counter(m.body for m in _drain(queue)) == Counter(f"m-{n}" for n in range(400))
    # The run again sent partition 0 alone (its 40 rows sent before dropped as duplicates), and
    # nothing of the partitions the ledger names: with no ledger, those 300 would rest on the
    # 5-minute deduplication window.
    assert queue.attributes().counters["deduplicated"] == 80 + 40
    assert redis_client._redis.hlen(f"smq:{{out}}:sink:{write_id}") == 4
    assert 345_600 < redis_client._redis.ttl(f"smq:{{out}}:sink:{write_id}") <= 345_600 + 3600


def test_a_write_names_its_id_before_any_task_runs(
    redis_client: smq.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    from smq.spark._options import SourceOptions

    redis_client.create_queue("out")
    schema = StructType([StructField("body", StringType())])
    options = SourceOptions.parse({"queue": "out", "url": redis_client.settings.url})
    writer = QueueWriter(options, schema, overwrite=False)
    said = capsys.readouterr().err
    assert said == (
        f"smq: write {writer.write_id} to queue 'out' begins; to run it again without duplicates "
        f'(after a failure), use option("writeId", "{writer.write_id}")\n'
    )
    named = {"queue": "out", "url": redis_client.settings.url, "writeId": "nightly-2026-11-27"}
    again = QueueWriter(SourceOptions.parse(named), schema, overwrite=False)
    assert again.write_id == "nightly-2026-11-27" and "nightly-2026-11-27" in capsys.readouterr().err
    # A rerun that skipped partitions its ledger names says so, loudly.
    again.commit([SentPartition(0, 0, 0, earlier=True), SentPartition(1, 100, 0)])
    assert capsys.readouterr().err == (
        "smq: write nightly-2026-11-27 to 'out': 1 of 2 partitions were sent whole by an earlier run "
        "of this write, and skipped\n"
    )
