"""Lifecycle analytics: per queue, what the event stream says about processing and timeouts.

The job is plain DataFrame work (no Python UDFs), so it runs the same in
``local[*]`` and under ``spark-submit`` on a cluster; only reading straight
from Redis (``read_event_queues``) needs smq on the executors. Input rows
have the columns of ``smq.spark._event_reader.EVENT_SCHEMA`` (the
``smq`` data source's ``table=events``, or files of ``smq events export``).
Repeats of an event (the same queue and event id, as overlapping exports
hold) count once. Events are ordered by their stream ids (the order the
scripts ran); durations come from their times (``at_ms``, the Redis clock).

What it measures, per queue (see ``smq.spark._recommend.QueueStats``):

- **Processing time**: from a receive to the delete by the consumer that
  received it. A ``deleted`` event pairs with the ``received`` event of the
  same message and receive count. A stale delete (``stale_receipt``, extra
  ``delete``) is a consumer finishing after its message was received again:
  it pairs with the receive before the current one (its event carries the
  current count n, so count n - 1). Without those, work that outlasts the
  timeout would never be seen. Percentiles are exact (Spark's
  ``percentile``: linear interpolation between the closest ranks).
- **Redelivery rate**: receives with receive count > 1 / all receives.
- **Expiries while a consumer was still working**: late deletes (a delete at
  or after the effective deadline of its receive: the receive time plus its
  timeout, or the last visibility change of that receipt plus the new
  timeout) plus duplicate deliveries (distinct message and receive count of
  ``stale_receipt`` events: a receive during which an earlier holder was
  still at work; a lower bound when two earlier holders turn up in one).
  Flights released on purpose (a change to a short timeout, a timeout of 0)
  that nobody used again are plain expiries, not counted here.
- **Dead-letter rate**: ``dead_lettered`` events / distinct messages received.
- **Queue wait**: from sent time + delay to the first receive, p50 and p99
  (messages whose ``sent`` and first receive are both in the stream).
- **Current visibility timeout**: that of the latest receive.

Events trimmed from a capped stream leave some pairs incomplete; those are
left out, not guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import reduce
from pathlib import Path
from typing import Any

from .._errors import InvalidParameter
from ._recommend import QueueStats

REQUIRED_COLUMNS = ("queue", "event_id", "kind", "message_id", "receive_count", "at_ms", "extra")
"""The columns the analysis reads; others are ignored."""
CDF_STEPS = 1000
"""The processing-time quantiles kept for charts: 0, 1/1000, ..., 1."""
_GRID = [i / CDF_STEPS for i in range(CDF_STEPS + 1)]
_P50, _P99, _P999 = 500, 990, 999  # 0.5, 0.99, 0.999 on the grid (exactly those doubles)
_JSON_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".ndjson.gz")
_PARQUET_SUFFIXES = (".parquet", ".pq")


def event_file_format(path: str) -> str:
    """``json`` or ``parquet`` for an input file or folder, by its name or, for a local folder, its files."""
    lowered = path.lower().rstrip("/")
    if lowered.endswith(_PARQUET_SUFFIXES):
        return "parquet"
    if lowered.endswith(_JSON_SUFFIXES):
        return "json"
    local = Path(path)
    if "://" not in path and local.is_dir():
        names = [p.name.lower() for p in local.iterdir() if not p.name.startswith(("_", "."))]
        if any(name.endswith(_PARQUET_SUFFIXES) for name in names):
            return "parquet"
        if any(name.endswith(_JSON_SUFFIXES) for name in names):
            return "json"
    raise InvalidParameter(
        f"cannot tell the format of {path}: name it *.jsonl or *.parquet, or give the format"
    )


def read_event_files(spark: Any, paths: Sequence[str], file_format: str = "auto") -> Any:
    """A DataFrame of the events in JSON-lines and Parquet files or folders (``file_format``:
    ``auto`` by name, ``jsonl`` or ``parquet``)."""
    from ._event_reader import EVENT_SCHEMA

    if not paths:
        raise InvalidParameter("no input files given")
    for path in paths:
        if "://" not in path and not Path(path).exists():
            raise InvalidParameter(f"no such file or folder: {path}")
    by_format: dict[str, list[str]] = {}
    for path in paths:
        kind = event_file_format(path) if file_format == "auto" else file_format.replace("jsonl", "json")
        by_format.setdefault(kind, []).append(path)
    frames = []
    for kind, group in by_format.items():
        if kind == "json":
            frame = spark.read.schema(EVENT_SCHEMA).json(group)
        elif kind == "parquet":
            frame = spark.read.parquet(*group)
        else:
            raise InvalidParameter(f"format must be auto, jsonl or parquet, not {file_format!r}")
        missing = [name for name in REQUIRED_COLUMNS if name not in frame.columns]
        if missing:
            raise InvalidParameter(f"{', '.join(group)}: no column {', '.join(missing)} (not smq events?)")
        frames.append(frame.select(*REQUIRED_COLUMNS))
    return reduce(lambda a, b: a.unionByName(b), frames)


def read_event_queues(spark: Any, queues: Sequence[str], url: str, cluster: bool = False) -> Any:
    """A DataFrame of the events of ``queues``, read from Redis by the ``smq`` data source."""
    if not queues:
        raise InvalidParameter("no queues given")
    frames = [
        spark.read.format("smq")
        .option("queue", name)
        .option("table", "events")
        .option("url", url)
        .option("cluster", "true" if cluster else "false")
        .load()
        .select(*REQUIRED_COLUMNS)
        for name in queues
    ]
    return reduce(lambda a, b: a.unionByName(b), frames)


def prepare(events: Any) -> Any:
    """The events in short columns (queue, kind, m, n, t, x, xl, ord), each event once.

    ``t`` is ``at_ms``; ``xl`` is ``extra`` as a number where it is one; ``ord``
    is the stream id as (ms, sequence), the order in which the scripts ran.
    """
    from pyspark.sql import functions as F

    parts = F.split(F.col("event_id"), "-")
    return (
        events.dropDuplicates(["queue", "event_id"])
        .select(
            F.col("queue"),
            F.col("kind"),
            F.col("message_id").alias("m"),
            F.col("receive_count").cast("int").alias("n"),
            F.col("at_ms").cast("long").alias("t"),
            F.col("extra").alias("x"),
            F.col("extra").try_cast("long").alias("xl"),
            F.struct(
                F.coalesce(parts.getItem(0).try_cast("long"), F.col("at_ms").cast("long")).alias("ms"),
                F.coalesce(parts.getItem(1).try_cast("long"), F.lit(0)).alias("seq"),
            ).alias("ord"),
        )
        .filter(F.col("queue").isNotNull() & F.col("kind").isNotNull() & F.col("t").isNotNull())
    )


def _is(kind: str) -> Any:
    from pyspark.sql import functions as F

    return F.col("kind") == kind


def _count(condition: Any) -> Any:
    from pyspark.sql import functions as F

    return F.sum(F.when(condition, 1).otherwise(0))


def queue_counts(ev: Any) -> Any:
    """Per queue: event counts, distinct messages and duplicate deliveries, the current timeout."""
    from pyspark.sql import functions as F

    received = _is("received")
    return ev.groupBy("queue").agg(
        F.count(F.lit(1)).alias("events"),
        F.min("t").alias("first_ms"),
        F.max("t").alias("last_ms"),
        _count(_is("sent")).alias("messages_sent"),
        F.count_distinct(F.when(received, F.col("m"))).alias("messages_received"),
        _count(received).alias("receives"),
        _count(received & (F.col("n") > 1)).alias("redeliveries"),
        _count(_is("deleted")).alias("deletes"),
        _count(_is("stale_receipt")).alias("stale_receipts"),
        F.count_distinct(
            F.when(_is("stale_receipt"), F.concat_ws(" ", F.col("m"), F.col("n").cast("string")))
        ).alias("duplicate_deliveries"),
        _count(_is("visibility_expired")).alias("visibility_expired"),
        _count(_is("dead_lettered")).alias("dead_lettered"),
        _count(_is("retention_expired")).alias("retention_expired"),
        F.max(F.when(_is("dead_lettered"), F.col("n"))).alias("max_receive_count_seen"),
        F.max_by(F.when(received, F.col("xl")), F.when(received, F.col("ord"))).alias("current_timeout_ms"),
    )


def _receives(ev: Any) -> Any:
    from pyspark.sql import functions as F

    return ev.filter(_is("received")).select(
        "queue", "m", "n", F.col("t").alias("t_r"), F.col("xl").alias("x_r")
    )


def processing_samples(ev: Any) -> Any:
    """One row per measured processing time: queue, ms, stale (ended by a stale delete), late."""
    from pyspark.sql import functions as F

    keys = ["queue", "m", "n"]
    receives = _receives(ev)
    # Every visibility_changed of count n is a change by receipt n while in flight: the last one sets
    # that flight's deadline.
    changes = (
        ev.filter(_is("visibility_changed"))
        .groupBy(*keys)
        .agg(F.max_by(F.col("t") + F.col("xl"), F.col("ord")).alias("deadline_c"))
    )
    deletes = ev.filter(_is("deleted")).select(*keys, F.col("t").alias("t_end"))
    done = (
        deletes.join(receives, keys)
        .join(changes, keys, "left")
        .select(
            "queue",
            (F.col("t_end") - F.col("t_r")).alias("ms"),
            F.lit(False).alias("stale"),
            (F.col("t_end") >= F.coalesce(F.col("deadline_c"), F.col("t_r") + F.col("x_r"))).alias("late"),
        )
    )
    stale = (
        ev.filter(_is("stale_receipt") & (F.col("x") == "delete") & (F.col("n") > 1))
        .select("queue", "m", (F.col("n") - 1).alias("n"), F.col("t").alias("t_end"))
        .join(receives, keys)
        .select(
            "queue",
            (F.col("t_end") - F.col("t_r")).alias("ms"),
            F.lit(True).alias("stale"),
            F.lit(False).alias("late"),
        )
    )
    return done.unionByName(stale)


def processing_summary(samples: Any) -> Any:
    """Per queue: sample counts, late deletes, the maximum and the exact quantile grid (ms)."""
    from pyspark.sql import functions as F

    return samples.groupBy("queue").agg(
        F.count(F.lit(1)).alias("samples"),
        _count(F.col("stale")).alias("stale_samples"),
        _count(F.col("late")).alias("late_deletes"),
        F.max("ms").alias("max_ms"),
        F.percentile(F.col("ms"), _GRID).alias("grid_ms"),
    )


def queue_waits(ev: Any) -> Any:
    """Per queue: how many waits, and their exact p50 and p99 (ms), from due time to first receive."""
    from pyspark.sql import functions as F

    sent = ev.filter(_is("sent")).select(
        "queue", "m", (F.col("t") + F.coalesce(F.col("xl"), F.lit(0))).alias("due")
    )
    first = ev.filter(_is("received") & (F.col("n") == 1)).groupBy("queue", "m").agg(F.min("t").alias("t1"))
    return (
        sent.join(first, ["queue", "m"])
        .select("queue", F.greatest(F.col("t1") - F.col("due"), F.lit(0)).alias("ms"))
        .groupBy("queue")
        .agg(F.count(F.lit(1)).alias("samples"), F.percentile(F.col("ms"), [0.5, 0.99]).alias("p_ms"))
    )


def deleted_on_receive(ev: Any) -> Any:
    """Per queue and receive count: messages deleted on that receive."""
    return ev.filter(_is("deleted")).groupBy("queue", "n").count()


def _seconds(ms: Any) -> float | None:
    return None if ms is None else float(ms) / 1000


def analyze(events: Any) -> list[QueueStats]:
    """Run the analysis over a DataFrame of events; one ``QueueStats`` per queue, by name.

    The prepared events are checkpointed first, so every figure comes from
    one reading of the input (a stream read from Redis may grow meanwhile).
    """
    ev = prepare(events).localCheckpoint()
    counts = {row["queue"]: row for row in queue_counts(ev).collect()}
    processing = {row["queue"]: row for row in processing_summary(processing_samples(ev)).collect()}
    waits = {row["queue"]: row for row in queue_waits(ev).collect()}
    histograms: dict[str, dict[int, int]] = {}
    for row in deleted_on_receive(ev).collect():
        histograms.setdefault(row["queue"], {})[int(row["n"])] = int(row["count"])
    result = []
    for name in sorted(counts):
        c, p, w = counts[name], processing.get(name), waits.get(name)
        grid = [float(v) / 1000 for v in p["grid_ms"]] if p is not None else []
        result.append(
            QueueStats(
                queue=name,
                events=c["events"],
                first_at=_seconds(c["first_ms"]),
                last_at=_seconds(c["last_ms"]),
                messages_sent=c["messages_sent"],
                messages_received=c["messages_received"],
                receives=c["receives"],
                redeliveries=c["redeliveries"],
                deletes=c["deletes"],
                stale_receipts=c["stale_receipts"],
                visibility_expired=c["visibility_expired"],
                late_deletes=p["late_deletes"] if p is not None else 0,
                duplicate_deliveries=c["duplicate_deliveries"],
                dead_lettered=c["dead_lettered"],
                retention_expired=c["retention_expired"],
                processing_samples=p["samples"] if p is not None else 0,
                stale_samples=p["stale_samples"] if p is not None else 0,
                processing_p50=grid[_P50] if grid else None,
                processing_p99=grid[_P99] if grid else None,
                processing_p999=grid[_P999] if grid else None,
                processing_max=_seconds(p["max_ms"]) if p is not None else None,
                wait_samples=w["samples"] if w is not None else 0,
                wait_p50=_seconds(w["p_ms"][0]) if w is not None else None,
                wait_p99=_seconds(w["p_ms"][1]) if w is not None else None,
                current_timeout=_seconds(c["current_timeout_ms"]),
                max_receive_count_seen=c["max_receive_count_seen"],
                deleted_on_receive=histograms.get(name, {}),
                processing_cdf=tuple(grid),
            )
        )
    return result


def run_job(
    spark: Any,
    output: Path,
    *,
    inputs: Sequence[str] = (),
    queues: Sequence[str] = (),
    url: str | None = None,
    cluster: bool = False,
    file_format: str = "auto",
    charts: bool = True,
) -> list[Any]:
    """Read events (files ``inputs``, or ``queues`` from Redis at ``url``), analyse them, and write
    the report into ``output``; returns the ``smq.spark._report.QueueReport`` of each queue."""
    from ._report import write_report

    if bool(inputs) == bool(queues):
        raise InvalidParameter("give either input files or queue names to analyse, not both or neither")
    if inputs:
        events = read_event_files(spark, inputs, file_format)
    else:
        if url is None:
            raise InvalidParameter("reading queues needs the Redis URL")
        events = read_event_queues(spark, queues, url, cluster)
    stats = analyze(events)
    if queues:
        assert url is not None
        stats = with_streams(stats, url, cluster)
    return write_report(stats, output, charts=charts)


def with_streams(stats: Sequence[QueueStats], url: str, cluster: bool) -> list[QueueStats]:
    """``stats`` with what Redis knows of the Spark streams that consume each queue."""
    from ..client._client import Client
    from ..connection._settings import Settings
    from ._consumers import stream_consumers

    result = []
    with Client(settings=Settings(url=url, cluster=cluster)) as client:
        for one in stats:
            found = stream_consumers(client, one.queue)
            if found:
                one = replace(
                    one,
                    stream_readers=len(found),
                    stream_timeout=max(c.visibility_timeout for c in found),
                    stream_received=sum(c.received for c in found),
                    stream_redelivered=sum(c.redelivered for c in found),
                )
            result.append(one)
    return result
