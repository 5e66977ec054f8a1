"""The lifecycle analytics on real PySpark (local mode), over a generated event log whose answers are known.

Queue ``orders``: 1,001 messages, sent with delays of 0-2 s and first received
after waits of 0, 10, ..., 10,000 ms (so the exact wait p50 is 5 s, p99 9.9 s),
under a 30 s timeout. Their 1,001 processing times (from a receive to the
delete by its consumer) are 989 values 1,000 + 20 i ms (i < 989), ten stale
deletes after 31-40 s, one late delete after 50 s and one 120 s job kept
hidden by a visibility change: sorted, the p50 is the 501st (11 s), the p99
the 991st (32 s), the p99.9 the 1,000th (50 s). Kinds of messages:

- A (954): received, deleted.
- B (1): received, extended to 120 s at 20 s, deleted at 120 s (not late).
- C (1): received, deleted at 50 s, after its 30 s deadline (a late delete).
- D (10): received; the timeout runs out at 30 s, received again at 30.5 s;
  the first consumer deletes at 31-40 s (stale; one also heartbeats, stale);
  the second deletes later. Duplicate deliveries.
- E (25): each failed receive sets a 1 s backoff, expires and is received
  again; 20 succeed on receive 2, 5 on receive 3.
- F (10): released twice (timeout 0), then expire on receive 3 and are
  dead-lettered (maxReceiveCount 3).

Queue ``emails``: 5 messages processed in 100-500 ms: percentiles between ranks.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import smq
from conftest import ROOT

pytest.importorskip("pyspark")

T0 = 1_800_000_000_000
TIMEOUT_MS = 30_000


class EventLog:
    """Builds event rows as the scripts would record them, in the order given."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, queue: str, at_ms: int, kind: str, message_id: str, count: int, extra: object = "") -> None:
        self.rows.append(
            {"queue": queue, "kind": kind, "message_id": message_id, "receive_count": count}
            | {"at_ms": at_ms, "extra": str(extra)}
        )

    def finished(self) -> list[dict[str, Any]]:
        """Rows in time order (the order given within one time), with stream ids and timestamps."""
        from smq.operations._events import timestamp_of

        ordered = sorted(self.rows, key=lambda row: row["at_ms"])  # stable
        last, seq = -1, 0
        for row in ordered:
            seq = seq + 1 if row["at_ms"] == last else 0
            last = row["at_ms"]
            row["event_id"] = f"{row['at_ms']}-{seq}"
            row["at"] = timestamp_of(row["at_ms"]).isoformat(timespec="milliseconds")
        return ordered


def generated_log() -> list[dict[str, Any]]:
    rng = random.Random(7)
    log = EventLog()
    base = [1000 + 20 * i for i in range(989)]
    second = base[900:910]  # D's second consumers: long enough to delete after the stale delete
    rest = base[:900] + base[910:]
    rng.shuffle(rest)
    e_final, a_times = rest[:25], rest[25:]
    waits = [10 * i for i in range(1001)]
    rng.shuffle(waits)
    kinds = ["A"] * 954 + ["B", "C"] + ["D"] * 10 + ["E"] * 25 + ["F"] * 10
    rng.shuffle(kinds)
    seen = {"A": 0, "D": 0, "E": 0, "F": 0}
    q = "orders"
    for i, kind in enumerate(kinds):
        m = f"m{i:04d}"
        start = T0 + i * 1_000_000
        delay = (i % 3) * 1000
        log.add(q, start, "sent", m, 0, delay)
        t = start + delay + waits[i]
        log.add(q, t, "received", m, 1, TIMEOUT_MS)
        j = seen.get(kind, 0)
        seen[kind] = j + 1
        if kind == "A":
            log.add(q, t + a_times[j], "deleted", m, 1)
        elif kind == "B":
            log.add(q, t + 20_000, "visibility_changed", m, 1, 120_000)
            log.add(q, t + 120_000, "deleted", m, 1)
        elif kind == "C":
            log.add(q, t + 50_000, "deleted", m, 1)
        elif kind == "D":
            again = t + TIMEOUT_MS + 500
            log.add(q, again, "visibility_expired", m, 1)
            log.add(q, again, "received", m, 2, TIMEOUT_MS)
            if j == 0:
                log.add(q, t + 30_800, "stale_receipt", m, 2, "change")
            log.add(q, t + 31_000 + 1000 * j, "stale_receipt", m, 2, "delete")
            log.add(q, again + second[j], "deleted", m, 2)
        elif kind == "E":
            final = 2 if j < 20 else 3
            for n in range(1, final):
                log.add(q, t + 800, "visibility_changed", m, n, 1000)
                t += 2000
                log.add(q, t, "visibility_expired", m, n)
                log.add(q, t, "received", m, n + 1, TIMEOUT_MS)
            log.add(q, t + e_final[j], "deleted", m, final)
        else:
            for n in (1, 2):
                log.add(q, t + 500, "visibility_changed", m, n, 0)
                t += 800
                log.add(q, t, "received", m, n + 1, TIMEOUT_MS)
            t += TIMEOUT_MS + 700
            log.add(q, t, "visibility_expired", m, 3)
            log.add(q, t, "dead_lettered", m, 3)
    for i in range(5):
        start = T0 + i * 60_000
        log.add("emails", start, "sent", f"e{i}", 0, 0)
        log.add("emails", start + 1000 * i, "received", f"e{i}", 1, 15_000 if i == 3 else 10_000)
        log.add("emails", start + 1000 * i + 100 * (i + 1), "deleted", f"e{i}", 1)
    return log.finished()


@pytest.fixture(scope="module")
def event_log() -> list[dict[str, Any]]:
    return generated_log()


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


ORDERS = {
    "messages_sent": 1001,
    "messages_received": 1001,
    "receives": 1061,
    "redeliveries": 60,
    "deletes": 991,
    "stale_receipts": 11,
    "visibility_expired": 50,
    "late_deletes": 1,
    "duplicate_deliveries": 10,
    "dead_lettered": 10,
    "retention_expired": 0,
    "processing_samples": 1001,
    "stale_samples": 10,
    "processing_p50": 11.0,
    "processing_p99": 32.0,
    "processing_p999": 50.0,
    "processing_max": 120.0,
    "wait_samples": 1001,
    "wait_p50": 5.0,
    "wait_p99": 9.9,
    "current_timeout": 30.0,
    "max_receive_count_seen": 3,
    "deleted_on_receive": {1: 956, 2: 30, 3: 5},
}


def check_orders(stats: Any, events: int) -> None:
    assert {name: getattr(stats, name) for name in ORDERS} == ORDERS
    assert stats.events == events
    assert (stats.first_at, stats.last_at) is not None
    assert stats.redelivery_rate == 60 / 1061
    assert stats.expired_while_working == 11
    assert stats.expired_while_working_rate == 11 / 1061
    assert stats.dead_letter_rate == 10 / 1001
    assert len(stats.processing_cdf) == 1001
    assert stats.processing_cdf[0] == 1.0 and stats.processing_cdf[-1] == 120.0


@pytest.fixture(scope="module")
def analysed(spark: Any, event_log: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The job run once on the generated log: (the reports, the report folder)."""
    from smq.spark._analyze import run_job

    # Two overlapping exports in one folder: the events they share count once.
    folder = tmp_path_factory.mktemp("events")
    write_jsonl(event_log[: len(event_log) * 2 // 3], folder / "a.jsonl")
    write_jsonl(event_log[len(event_log) // 3 :], folder / "b.jsonl")
    output = tmp_path_factory.mktemp("report")
    return run_job(spark, output, inputs=[str(folder)]), output


def test_analysis_of_a_generated_log_gets_the_known_answers(
    analysed: Any, event_log: list[dict[str, Any]]
) -> None:
    emails, orders = (report.stats for report in analysed[0])  # by name
    assert (emails.queue, orders.queue) == ("emails", "orders")
    check_orders(orders, sum(row["queue"] == "orders" for row in event_log))

    assert emails.events == 15
    assert (emails.processing_p50, emails.processing_max) == (0.3, 0.5)
    assert emails.processing_p99 == pytest.approx(0.496, abs=1e-12)  # 400 + 0.96 x 100 ms
    assert emails.processing_p999 == pytest.approx(0.4996, abs=1e-12)
    assert (emails.wait_p50, emails.wait_p99) == (2.0, pytest.approx(3.96, abs=1e-12))
    assert emails.current_timeout == 10.0  # the latest receive's (e4 at +4 s), not the largest
    assert (emails.dead_lettered, emails.dead_letter_rate, emails.max_receive_count_seen) == (0, 0.0, None)
    assert (emails.late_deletes, emails.duplicate_deliveries, emails.redelivery_rate) == (0, 0, 0.0)


def test_recommendations_and_report_of_the_generated_log(analysed: Any) -> None:
    (emails, orders), output = analysed
    advice = {a.setting: a.value for a in orders.recommendations.all()}
    assert advice == {"VisibilityTimeout": 192, "heartbeat": None, "maxReceiveCount": 4}
    assert {a.setting: a.value for a in emails.recommendations.all()} == {
        "VisibilityTimeout": 3,
        "heartbeat": None,
        "maxReceiveCount": 3,
    }

    report = json.loads((output / "report.json").read_text())
    first = report["queues"][1]
    assert first["queue"] == "orders"
    assert first["metrics"]["processing_p99"] == 32.0
    assert first["metrics"]["deleted_on_receive"] == {"1": 956, "2": 30, "3": 5}
    assert first["recommendations"]["VisibilityTimeout"]["value"] == 192
    assert "6 × the p99" in first["recommendations"]["VisibilityTimeout"]["why"]
    markdown = (output / "report.md").read_text()
    assert "## Queue `orders`" in markdown and "## Queue `emails`" in markdown
    assert "| VisibilityTimeout | 30 s | 192 s |" in markdown
    assert "| maxReceiveCount | 3 | 4 |" in markdown
    for name in ("orders.png", "emails.png"):
        assert_png(output / name)


def assert_png(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as image:
        image.verify()
        assert image.format == "PNG" and image.size[0] > 300 and image.size[1] > 300


def test_the_job_runs_under_spark_submit(event_log: list[dict[str, Any]], tmp_path: Path) -> None:
    import os

    from smq.spark import java_home

    submit = Path(sys.executable).parent / "spark-submit"
    if not submit.exists():
        submit = Path(shutil.which("spark-submit") or "spark-submit")
    events = write_jsonl(event_log, tmp_path / "events.jsonl")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    home = java_home()
    if home is not None:
        env["JAVA_HOME"] = home
    done = subprocess.run(
        [str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false"]
        # A quicker start for a short job: the client JIT compiler, the serial collector.
        + ["--driver-java-options", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"]
        + ["--conf", "spark.sql.shuffle.partitions=2", str(ROOT / "smq" / "spark" / "analyze_job.py")]
        + ["--input", str(events), "--output", str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0].split()[:2] == ["QUEUE", "RECEIVES"]
    assert [line.split()[0] for line in done.stdout.splitlines()[1:]] == ["emails", "orders"]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["queues"][1]["metrics"]["processing_p999"] == 50.0
    assert_png(tmp_path / "out" / "orders.png")


def test_unknown_inputs_are_refused_in_one_line(spark: Any, tmp_path: Path) -> None:
    import smq
    from smq.spark._analyze import read_event_files

    (tmp_path / "events.csv").write_text("x\n")
    with pytest.raises(smq.InvalidParameter, match="cannot tell the format"):
        read_event_files(spark, [str(tmp_path / "events.csv")])
    with pytest.raises(smq.InvalidParameter, match="no such file"):
        read_event_files(spark, [str(tmp_path / "missing.jsonl")])
    (tmp_path / "other.jsonl").write_text('{"a": 1}\n')
    # JSON lines are read with the events' schema: rows of something else have no queue, and count nothing.
    from smq.spark._analyze import analyze

    assert analyze(read_event_files(spark, [str(tmp_path / "other.jsonl")])) == []


def test_a_queue_a_stream_consumed_is_analysed_as_such(
    spark: Any, redis_client: smq.Client, tmp_path: Path
) -> None:
    """Read from Redis, the analysis knows the streaming query that consumed the queue: it measures
    micro-batch lives, and recommends the stream's option, not a heartbeat of the user's."""
    from smq.spark._analyze import run_job

    queue = redis_client.create_queue("jobs", event_stream_max_len=10_000)
    for start in range(0, 200, 10):
        queue.send_batch([smq.SendEntry(str(n), f"m-{n}") for n in range(start, start + 10)])
    url = redis_client.settings.url
    stream = spark.readStream.format("smq").option("url", url).option("queue", "jobs")
    stream = stream.option("maxMessagesPerBatch", "50").option("visibilityTimeout", "40").load()
    query = (
        stream.writeStream.foreachBatch(lambda batch, batch_id: batch.count())
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert queue.attributes().counters["deleted"] == 200
    (report,) = run_job(spark, tmp_path / "report", queues=["jobs"], url=url, charts=False)
    s = report.stats
    assert (s.stream_readers, s.stream_timeout, s.stream_received, s.stream_redelivered) == (1, 40, 200, 0)
    assert s.current_timeout == 40 and s.processing_samples == 200
    assert report.recommendations.heartbeat.why.startswith("the stream's driver does it")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| consumed by Spark streams | 1 (visibilityTimeout option 40 s)" in text
