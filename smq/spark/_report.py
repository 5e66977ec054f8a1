"""The report of ``smq analyze``: ``report.md``, ``report.json`` and a chart per queue.

Pure Python apart from the charts, which need matplotlib (the ``spark`` extra),
drawn with its Agg renderer and no pyplot state.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._version import install_hint
from ._recommend import Advice, QueueStats, Recommendations, recommend, seconds


@dataclass(frozen=True)
class QueueReport:
    """One queue's numbers, recommendations and chart file name (in the report's folder)."""

    stats: QueueStats
    recommendations: Recommendations
    chart: str | None

    def to_json(self) -> dict[str, Any]:
        """The numbers and recommendations as one JSON-ready dict."""
        return {
            "queue": self.stats.queue,
            "metrics": self.stats.metrics(),
            "recommendations": {
                advice.setting: {"value": advice.value, "why": advice.why}
                for advice in self.recommendations.all()
            },
            "chart": self.chart,
        }


def build(stats: Sequence[QueueStats]) -> list[QueueReport]:
    """Recommendations for each queue; chart names for those with processing times."""
    return [
        QueueReport(one, recommend(one), f"{one.queue}.png" if one.processing_cdf else None) for one in stats
    ]


def write_report(stats: Sequence[QueueStats], output: Path, *, charts: bool = True) -> list[QueueReport]:
    """Write ``report.md``, ``report.json`` and (with ``charts``) ``<queue>.png`` files into ``output``."""
    output.mkdir(parents=True, exist_ok=True)
    reports = build(stats)
    if not charts:
        reports = [QueueReport(r.stats, r.recommendations, None) for r in reports]
    for report in reports:
        if report.chart is not None:
            draw_chart(report, output / report.chart)
    (output / "report.json").write_text(
        json.dumps({"queues": [r.to_json() for r in reports]}, indent=2, ensure_ascii=False) + "\n"
    )
    (output / "report.md").write_text(markdown(reports))
    return reports


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.2%}"


def _utc(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + " UTC"


def _setting(value: int | None, unit: str = " s") -> str:
    return "no change" if value is None else f"{value:,}{unit}"


def _now(advice: Advice, stats: QueueStats) -> str:
    if advice.setting == "VisibilityTimeout":
        return seconds(stats.current_timeout)
    if advice.setting == "maxReceiveCount":
        return "-" if stats.max_receive_count_seen is None else str(stats.max_receive_count_seen)
    return "-"


def _recommended(advice: Advice) -> str:
    if advice.setting == "heartbeat":
        return "none" if advice.value is None else f"every {advice.value:,} s"
    return _setting(advice.value, "" if advice.setting == "maxReceiveCount" else " s")


def metric_rows(s: QueueStats) -> list[tuple[str, str]]:
    """The metrics of one queue as (name, value) lines for people."""
    histogram = ", ".join(f"{k}: {v:,}" for k, v in sorted(s.deleted_on_receive.items())) or "-"
    return [
        ("events", f"{s.events:,}, {_utc(s.first_at)} to {_utc(s.last_at)}"),
        ("messages", f"{s.messages_sent:,} sent, {s.messages_received:,} received"),
        (
            "processing time p50 / p99 / p99.9 / max",
            f"{seconds(s.processing_p50)} / {seconds(s.processing_p99)} / {seconds(s.processing_p999)} / "
            f"{seconds(s.processing_max)} ({s.processing_samples:,} samples, "
            f"{s.stale_samples:,} from stale deletes)",
        ),
        ("redelivery rate", f"{_percent(s.redelivery_rate)} ({s.redeliveries:,} of {s.receives:,} receives)"),
        (
            "expired while a consumer was still working",
            f"{s.expired_while_working:,} ({_percent(s.expired_while_working_rate)} of receives): "
            f"late deletes {s.late_deletes:,}, duplicate deliveries {s.duplicate_deliveries:,}",
        ),
        ("visibility expiries", f"{s.visibility_expired:,}"),
        (
            "dead-letter rate",
            f"{_percent(s.dead_letter_rate)} ({s.dead_lettered:,} of {s.messages_received:,} messages)",
        ),
        (
            "queue wait p50 / p99",
            f"{seconds(s.wait_p50)} / {seconds(s.wait_p99)} ({s.wait_samples:,} messages)",
        ),
        ("current visibility timeout", seconds(s.current_timeout)),
        ("deleted on receive n", histogram),
        ("retention expired", f"{s.retention_expired:,}"),
    ] + _stream_rows(s)


def _stream_rows(s: QueueStats) -> list[tuple[str, str]]:
    if not s.stream_readers:
        return []
    share = s.stream_redelivered / s.stream_received if s.stream_received else None
    return [
        (
            "consumed by Spark streams",
            f"{s.stream_readers:,} (visibilityTimeout option {seconds(s.stream_timeout)}): processing "
            "time above is a micro-batch's life, from a task's receive to the delete after Spark's commit",
        ),
        (
            "received by the streams' tasks",
            f"{s.stream_received:,}, of which {s.stream_redelivered:,} ({_percent(share)}) had been "
            "received before (after a driver's restart, a lost lease, or by another consumer)",
        ),
    ]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(reports: Sequence[QueueReport]) -> str:
    """The report as Markdown: per queue a table of metrics, one of recommendations, the chart."""
    lines = ["# smq lifecycle analytics", ""]
    if not reports:
        lines += ["No events found.", ""]
    for report in reports:
        s = report.stats
        lines += [f"## Queue `{s.queue}`", "", "| metric | value |", "|---|---|"]
        lines += [f"| {_cell(name)} | {_cell(value)} |" for name, value in metric_rows(s)]
        lines += ["", "| setting | now | recommended | why |", "|---|---|---|---|"]
        for advice in report.recommendations.all():
            lines.append(
                f"| {advice.setting} | {_now(advice, s)} | {_recommended(advice)} | {_cell(advice.why)} |"
            )
        lines.append("")
        if report.chart is not None:
            lines += [f"![processing time of {s.queue}]({report.chart})", ""]
    lines += [
        "Processing time: from a receive to the delete by the consumer that received it (a stale delete",
        "pairs with the receive before the current one); exact percentiles, linear interpolation.",
        "Expired while working: deletes at or after their receipt's deadline, plus receives during which",
        "an earlier holder still used its receipt (stale receipts, per message and receive).",
        "Queue wait: from sent time plus delay to the first receive.",
        "",
    ]
    return "\n".join(lines)


def summary(reports: Sequence[QueueReport]) -> tuple[list[str], list[tuple[object, ...]]]:
    """Headers and one row per queue, for a terminal table."""
    headers = [
        "queue",
        "receives",
        "p50",
        "p99",
        "p99.9",
        "redelivered",
        "expired-working",
        "dead-lettered",
        "wait-p99",
        "timeout",
        "recommended",
        "heartbeat",
        "max-receives",
    ]
    rows: list[tuple[object, ...]] = []
    for report in reports:
        s, r = report.stats, report.recommendations
        rows.append(
            (
                s.queue,
                s.receives,
                seconds(s.processing_p50),
                seconds(s.processing_p99),
                seconds(s.processing_p999),
                _percent(s.redelivery_rate),
                s.expired_while_working,
                _percent(s.dead_letter_rate),
                seconds(s.wait_p99),
                seconds(s.current_timeout),
                _recommended(r.visibility_timeout),
                _recommended(r.heartbeat),
                _recommended(r.max_receive_count),
            )
        )
    return headers, rows


def draw_chart(report: QueueReport, path: Path) -> None:
    """A PNG of the processing-time distribution (histogram and CDF) with the current and
    recommended timeouts (and the heartbeat interval) as vertical lines."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(f"the report's charts need matplotlib: {install_hint('spark')}") from None
    s, r = report.stats, report.recommendations
    quantiles = list(s.processing_cdf)
    shares = [i / (len(quantiles) - 1) for i in range(len(quantiles))]
    lines = [
        (s.current_timeout, f"current timeout {seconds(s.current_timeout)}", "tab:red", "--"),
        (
            r.visibility_timeout.value,
            f"recommended timeout {_setting(r.visibility_timeout.value)}",
            "tab:green",
            "-",
        ),
        (r.heartbeat.value, f"heartbeat every {_setting(r.heartbeat.value)}", "tab:orange", ":"),
    ]
    figure = Figure(figsize=(9, 7), layout="constrained")
    FigureCanvasAgg(figure)
    hist, cdf = figure.subplots(2, 1)
    # Each step of the quantile grid holds the same share of the samples (0.1%), so the grid drawn
    # as a histogram is the distribution at that resolution.
    hist.hist(quantiles, bins=60, weights=[100 / len(quantiles)] * len(quantiles), color="tab:blue")
    hist.set_ylabel("% of processing times")
    hist.set_title(
        f"{s.queue}: processing time, receive to delete ({s.processing_samples:,} samples; "
        f"p50 {seconds(s.processing_p50)}, p99 {seconds(s.processing_p99)}, "
        f"p99.9 {seconds(s.processing_p999)})"
    )
    cdf.plot(quantiles, [100 * x for x in shares], color="tab:blue", label="processing time")
    cdf.set_ylabel("% done within")
    cdf.set_xlabel("seconds")
    positive = [q for q in quantiles if q > 0]
    if positive and max(positive) / min(positive) > 100:
        cdf.set_xscale("log")
    for axes in (hist, cdf):
        for value, label, colour, style in lines:
            if value:
                axes.axvline(float(value), color=colour, linestyle=style, label=label)
        axes.grid(alpha=0.3)
    cdf.legend(loc="lower right")
    figure.savefig(path, dpi=100)
