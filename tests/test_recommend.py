"""The recommendation rules and the report's files, without Spark."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from smq.spark._recommend import QueueStats, nearest_rank, recommend
from smq.spark._report import markdown, summary, write_report


def stats(p50: float, p99: float, p999: float, **more: object) -> QueueStats:
    return QueueStats(
        "jobs",
        processing_p50=p50,
        processing_p99=p99,
        processing_p999=p999,
        processing_samples=1000,
        **more,  # type: ignore[arg-type]
    )


def values(s: QueueStats) -> dict[str, int | None]:
    return {a.setting: a.value for a in recommend(s).all()}


def test_timeout_is_six_times_the_p99_rounded_up_without_a_heartbeat_when_the_tail_fits() -> None:
    advice = recommend(stats(1.0, 2.0, 3.0, current_timeout=30.0)).visibility_timeout
    assert advice.value == 12
    assert advice.why.startswith("6 × the p99 processing time (2 s), rounded up")
    assert (
        values(stats(0.1, 0.35, 0.4))["VisibilityTimeout"] == 3
    )  # 2.1 -> 3 (not 2, as binary 2.0999... floors)
    assert values(stats(0.1, 0.5, 0.5))["VisibilityTimeout"] == 3  # 3.0 stays 3
    assert values(stats(0.0, 0.0, 0.0))["VisibilityTimeout"] == 1  # never 0: that hides nothing
    heartbeat = recommend(stats(1.0, 2.0, 3.0)).heartbeat
    assert heartbeat.value is None and heartbeat.why.startswith("not needed")


def test_a_tail_longer_than_the_timeout_gets_a_heartbeat_every_third_of_it() -> None:
    # 6 x p99 = 12 s, but 1 in 1,000 runs takes 30 s: heartbeat, timeout min(12, 6 x p50 within 30-900).
    advice = recommend(stats(1.0, 2.0, 30.0))
    assert (advice.visibility_timeout.value, advice.heartbeat.value) == (12, 4)
    assert "p99.9 (30 s) outruns" in advice.visibility_timeout.why
    assert "two lost heartbeats" in advice.heartbeat.why
    # A tail with a longer body: 6 x p50 = 120 s, within 6 x p99 = 600 s.
    assert values(stats(20.0, 100.0, 700.0))["VisibilityTimeout"] == 120
    assert values(stats(20.0, 100.0, 700.0))["heartbeat"] == 40


def test_a_timeout_over_15_minutes_becomes_a_shorter_one_with_a_heartbeat() -> None:
    advice = recommend(stats(60.0, 200.0, 250.0))  # 6 x p99 = 1,200 s
    assert (advice.visibility_timeout.value, advice.heartbeat.value) == (360, 120)
    assert "over 15 min" in advice.visibility_timeout.why
    # 6 x p50 above 15 min: kept at 900 s.
    assert values(stats(400.0, 500.0, 600.0))["VisibilityTimeout"] == 900


def test_work_past_12_hours_is_clamped_and_told_to_split() -> None:
    advice = recommend(stats(3600.0, 10_000.0, 50_000.0))
    assert advice.visibility_timeout.value == 900
    assert advice.heartbeat.value == 300
    assert "kept within 12 h" in advice.visibility_timeout.why
    assert "past 12 h after its receive" in advice.heartbeat.why
    assert values(stats(5000.0, 7300.0, 7300.0))["VisibilityTimeout"] == 900  # 43,800 s: over 15 min anyway


def test_a_queue_a_spark_stream_consumes_gets_the_streams_option_and_no_heartbeat_to_add(
    tmp_path: Path,
) -> None:
    # Batch lives of 4 s (p50) to 9 s: the stream's driver beats, so 6 x p50 within 30 s-15 min.
    streamed = stats(4.0, 9.0, 12.0, stream_readers=1, stream_timeout=30, stream_received=500)
    advice = recommend(streamed)
    assert (advice.visibility_timeout.value, advice.heartbeat.value) == (30, 10)
    assert "set its visibilityTimeout option" in advice.visibility_timeout.why
    assert advice.heartbeat.why.startswith("the stream's driver does it")
    assert values(stats(40.0, 90.0, 120.0, stream_readers=2))["VisibilityTimeout"] == 240
    # The same times on a queue of plain consumers: 6 x p99, no heartbeat.
    assert values(stats(4.0, 9.0, 12.0)) == {
        "VisibilityTimeout": 54,
        "heartbeat": None,
        "maxReceiveCount": None,
    }
    reports = write_report([replace(streamed, stream_redelivered=5)], tmp_path, charts=False)
    text = (tmp_path / "report.md").read_text()
    assert "| consumed by Spark streams | 1 (visibilityTimeout option 30 s): processing time" in text
    assert "| received by the streams' tasks | 500, of which 5 (1.00%) had been received before" in text
    assert reports[0].to_json()["metrics"]["stream_redelivered"] == 5


def test_max_receive_count_covers_999_in_1000_successes_plus_one_and_at_least_3() -> None:
    assert values(stats(1, 1, 1, deleted_on_receive={1: 1000}))["maxReceiveCount"] == 3
    assert values(stats(1, 1, 1, deleted_on_receive={1: 990, 2: 5, 5: 4, 9: 1}))["maxReceiveCount"] == 6
    assert values(stats(1, 1, 1, deleted_on_receive={1: 10, 7: 1}))["maxReceiveCount"] == 8
    assert values(stats(1, 1, 1, deleted_on_receive={999: 3}))["maxReceiveCount"] == 1000
    advice = recommend(stats(1, 1, 1, deleted_on_receive={1: 5}, max_receive_count_seen=10)).max_receive_count
    assert advice.why.endswith("messages were dead-lettered after 10 receives")
    assert nearest_rank({}, 0.999) is None
    assert nearest_rank({2: 1, 1: 1}, 0.5) == 1


def test_no_data_recommends_nothing_and_says_why() -> None:
    advice = recommend(QueueStats("idle"))
    assert [a.value for a in advice.all()] == [None, None, None]
    assert all(a.why for a in advice.all())
    assert QueueStats("idle").redelivery_rate is None and QueueStats("idle").dead_letter_rate is None


def test_report_files_without_spark(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    cdf = tuple(0.5 + 30 * (i / 1000) ** 400 for i in range(1001))  # a long tail
    long_tail = stats(
        cdf[500],
        cdf[990],
        cdf[999],
        processing_cdf=cdf,
        current_timeout=30.0,
        receives=100,
        redeliveries=5,
        messages_received=95,
        deleted_on_receive={1: 90, 2: 5},
    )
    reports = write_report([long_tail, QueueStats("idle")], tmp_path)
    assert [r.chart for r in reports] == ["jobs.png", None]
    with Image.open(tmp_path / "jobs.png") as image:
        image.verify()
    saved = json.loads((tmp_path / "report.json").read_text())
    assert [q["queue"] for q in saved["queues"]] == ["jobs", "idle"]
    assert saved["queues"][0]["metrics"]["redelivery_rate"] == 0.05
    assert saved["queues"][0]["recommendations"]["heartbeat"]["value"] == 2
    text = (tmp_path / "report.md").read_text()
    assert text == markdown(reports)
    assert "| heartbeat | - | every 2 s |" in text and "| VisibilityTimeout | 30 s | 7 s |" in text
    headers, rows = summary(reports)
    assert rows[0][headers.index("heartbeat")] == "every 2 s"
