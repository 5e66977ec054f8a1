"""`smq events export` and, end to end, `smq analyze` on a real queue on a real Redis."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import smq
from conftest import Clock
from smq.cli import main
from smq.embedded import EmbeddedRedis
from smq.operations._events import timestamp_of

Smq = Callable[..., Result]


@pytest.fixture
def cli(redis_client: smq.Client, redis_server: EmbeddedRedis) -> Smq:
    """Runs `smq ARGS` on the fixture's (emptied) Redis, through SMQ_REDIS_URL."""
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(main, list(args), env={"SMQ_REDIS_URL": redis_server.url})

    return run


def _lifecycle(client: smq.Client, clock: Clock, name: str, processing: list[float]) -> smq.Queue:
    queue = client.create_queue(name, visibility_timeout=5, event_stream_max_len=10_000)
    for seconds in processing:
        queue.send(f"after {seconds}", delay_seconds=1)
        clock.advance(1.5)
        (message,) = queue.receive()
        clock.advance(seconds)
        assert queue.delete(message)
    return queue


def _expected_rows(queue: smq.Queue) -> list[dict[str, Any]]:
    return [
        {
            "queue": e.queue,
            "event_id": e.event_id,
            "kind": e.kind,
            "message_id": e.message_id,
            "receive_count": e.receive_count,
            "at_ms": e.at_ms,
            "extra": e.extra,
        }
        for e in queue.events(limit=10_000)
    ]


def test_export_writes_json_lines_of_each_queue_in_order(
    cli: Smq, redis_client: smq.Client, tmp_path: Path
) -> None:
    clock = Clock(redis_client)
    jobs = _lifecycle(redis_client, clock, "jobs", [0.25, 2])
    mail = _lifecycle(redis_client, clock, "mail", [1])
    out = tmp_path / "events.jsonl"
    result = cli("events", "export", "jobs", "mail", "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "wrote 9 events of 2 queue(s)" in result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [{k: v for k, v in row.items() if k != "at"} for row in rows] == _expected_rows(
        jobs
    ) + _expected_rows(mail)
    assert rows[0]["at"].endswith("+00:00") and rows[0]["at"][:4] == "2027"
    assert [row["kind"] for row in rows[:3]] == ["sent", "received", "deleted"]

    to_stdout = cli("events", "export", "mail", "--output", "-")
    assert to_stdout.exit_code == 0
    assert [json.loads(line)["kind"] for line in to_stdout.stdout.splitlines()] == [
        "sent",
        "received",
        "deleted",
    ]


def test_export_writes_parquet_with_typed_columns(cli: Smq, redis_client: smq.Client, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    clock = Clock(redis_client)
    jobs = _lifecycle(redis_client, clock, "jobs", [0.5, 1, 3])
    out = tmp_path / "events.parquet"
    result = cli("events", "export", "jobs", "-o", str(out))  # the format from the name
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert str(table.schema.field("at").type) == "timestamp[ms, tz=UTC]"
    assert str(table.schema.field("receive_count").type) == "int32"
    rows = table.to_pylist()
    assert [{k: v for k, v in row.items() if k != "at"} for row in rows] == _expected_rows(jobs)
    assert all(int(row["at"].timestamp() * 1000) == row["at_ms"] for row in rows)


def test_export_errors_are_one_line(cli: Smq, redis_client: smq.Client, tmp_path: Path) -> None:
    redis_client.create_queue("jobs")
    missing = cli("events", "export", "jobs", "nope", "--output", str(tmp_path / "x.jsonl"))
    assert missing.exit_code == 1
    assert missing.stderr.strip() == "smq: queue 'nope' does not exist"
    stdout_parquet = cli("events", "export", "jobs", "--format", "parquet", "--output", "-")
    assert stdout_parquet.exit_code == 1
    assert "needs a file" in stdout_parquet.stderr
    assert cli("events", "export", "--output", "x").exit_code == 2  # no queue named


def test_analyze_a_real_queue_from_an_export_and_from_redis(
    cli: Smq, redis_client: smq.Client, spark: Any, tmp_path: Path
) -> None:
    from PIL import Image

    clock = Clock(redis_client)
    redis_client.create_queue("jobs-dlq")
    # 20 messages processed in 0.1, 0.2, ..., 2.0 s, each sent with a 1 s delay and received 0.5 s later.
    jobs = _lifecycle(redis_client, clock, "jobs", [round(0.1 * i, 1) for i in range(1, 21)])
    jobs.set_attributes(redrive_policy=smq.RedrivePolicy("jobs-dlq", 2))
    # A consumer still working when its 5 s timeout runs out: the message goes to another, twice done.
    jobs.send("slow")
    (first,) = jobs.receive()
    clock.advance(6)
    (second,) = jobs.receive()
    assert not jobs.delete(first)  # stale, at 6 s
    clock.advance(1)
    assert jobs.delete(second)
    # A message that fails twice, then goes to the dead-letter queue.
    jobs.send("poison")
    for _ in range(2):
        (bad,) = jobs.receive()
        jobs.change_visibility(bad, 0)
    assert jobs.receive() == []
    export = tmp_path / "jobs.parquet"
    assert cli("events", "export", "jobs", "--output", str(export)).exit_code == 0

    from_file = cli("analyze", "--input", str(export), "--output", str(tmp_path / "file"))
    assert from_file.exit_code == 0, from_file.output
    from_redis = cli("analyze", "--queue", "jobs", "--output", str(tmp_path / "redis"), "--json")
    assert from_redis.exit_code == 0, from_redis.output
    table = from_file.stdout.splitlines()
    assert table[0].split()[:3] == ["QUEUE", "RECEIVES", "P50"]
    assert table[1].split()[:2] == ["jobs", "24"]
    (printed,) = json.loads(from_redis.stdout)["queues"]
    written = json.loads((tmp_path / "file" / "report.json").read_text())["queues"][0]
    assert printed["metrics"] == written["metrics"]  # Redis (the data source) and the export agree
    metrics = written["metrics"]
    assert {
        k: metrics[k]
        for k in (
            "receives",
            "redeliveries",
            "deletes",
            "stale_receipts",
            "duplicate_deliveries",
            "late_deletes",
            "dead_lettered",
            "processing_samples",
            "stale_samples",
            "processing_max",
            "current_timeout",
            "max_receive_count_seen",
        )
    } == {
        "receives": 24,
        "redeliveries": 2,
        "deletes": 21,
        "stale_receipts": 1,
        "duplicate_deliveries": 1,
        "late_deletes": 0,
        "dead_lettered": 1,
        "processing_samples": 22,  # 20 + the second consumer's 1 s + the stale 6 s
        "stale_samples": 1,
        "processing_max": 6.0,
        "current_timeout": 5.0,
        "max_receive_count_seen": 2,
    }
    assert (metrics["wait_p50"], metrics["wait_p99"]) == (0.5, 0.5)
    assert metrics["deleted_on_receive"] == {"1": 20, "2": 1}
    # 22 samples: 0.1 ... 2.0, 1.0 and 6.0 s; p99 at rank 20.79: 2.0 + 0.79 x 4.0 = 5.16 s; x 6 = 30.96.
    assert metrics["processing_p99"] == pytest.approx(5.16)
    assert written["recommendations"]["VisibilityTimeout"]["value"] == 31
    assert written["recommendations"]["maxReceiveCount"]["value"] == 3
    for folder in ("file", "redis"):
        assert (tmp_path / folder / "report.md").read_text().startswith("# smq lifecycle analytics")
        with Image.open(tmp_path / folder / "jobs.png") as image:
            image.verify()
            assert image.format == "PNG"


def test_analyze_errors_are_one_line(cli: Smq, redis_client: smq.Client, tmp_path: Path) -> None:
    neither = cli("analyze", "--output", str(tmp_path))
    assert (neither.exit_code, neither.stderr.strip()) == (
        1,
        "smq: give --input FILE_OR_DIR or --queue NAME (one of them)",
    )
    missing = cli("analyze", "--queue", "nope", "--output", str(tmp_path))
    assert (missing.exit_code, missing.stderr.strip()) == (1, "smq: queue 'nope' does not exist")
    no_file = cli("analyze", "--input", str(tmp_path / "none.jsonl"), "--output", str(tmp_path))
    assert no_file.exit_code == 1
    assert no_file.stderr.strip() == f"smq: no such file or folder: {tmp_path / 'none.jsonl'}"


def test_the_data_source_events_table_and_the_export_hold_the_same_rows(
    cli: Smq, redis_client: smq.Client, redis_server: EmbeddedRedis, spark: Any, tmp_path: Path
) -> None:
    from smq.spark._event_reader import EVENT_SCHEMA

    clock = Clock(redis_client)
    jobs = _lifecycle(redis_client, clock, "jobs", [0.5, 1.25])
    frame = spark.read.format("smq").option("queue", "jobs").option("table", "events")
    rows = frame.option("url", redis_server.url).load().orderBy("event_id").collect()
    assert [row.asDict() for row in rows] == [
        # Spark gives timestamps naive, in the session's time zone (UTC in the tests).
        {**expected, "at": timestamp_of(expected["at_ms"]).replace(tzinfo=None)}
        for expected in _expected_rows(jobs)
    ]
    export = tmp_path / "jobs.jsonl"
    assert cli("events", "export", "jobs", "--output", str(export)).exit_code == 0
    exported = spark.read.schema(EVENT_SCHEMA).json(str(export)).orderBy("event_id").collect()
    assert exported == rows  # the same columns, types and values, the timestamp too


def test_importing_the_cli_imports_no_spark_arrow_or_matplotlib() -> None:
    code = (
        "import sys, smq.cli\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow', 'matplotlib'))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
