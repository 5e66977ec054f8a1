"""``smq events export``: write queues' lifecycle event streams to JSON lines or Parquet.

The files have the columns of the Spark data source's ``table=events`` (see
``smq.spark._event_reader.EVENT_SCHEMA``), so ``smq analyze --input``
and any Spark job read them. JSON lines needs nothing more; Parquet needs
pyarrow (the ``spark`` extra brings it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import click

from .._version import install_hint
from ..client._queue import Queue
from ..operations._events import Event, event_pages, timestamp_of
from ._base import fail, main
from ._connect import open_client, redis_options

PAGE = 5000
"""Events per read (and per Parquet row group at most)."""


@main.group()
def events() -> None:
    """Lifecycle event streams of queues (those with --event-stream-max-len set)."""


def event_json(event: Event) -> dict[str, Any]:
    """An event as one JSON object, in the columns of the Spark data source."""
    return {
        "queue": event.queue,
        "event_id": event.event_id,
        "kind": event.kind,
        "message_id": event.message_id,
        "receive_count": event.receive_count,
        "at_ms": event.at_ms,
        "at": timestamp_of(event.at_ms).isoformat(timespec="milliseconds"),
        "extra": event.extra,
    }


@contextmanager
def _text_output(output: str) -> Iterator[IO[str]]:
    if output == "-":
        yield sys.stdout
        return
    with open(output, "w", encoding="utf-8") as handle:
        yield handle


def _write_jsonl(queues: Sequence[Queue], output: str) -> int:
    written = 0
    with _text_output(output) as handle:
        for queue in queues:
            for page in event_pages(queue, PAGE):
                handle.write("".join(json.dumps(event_json(e), ensure_ascii=False) + "\n" for e in page))
                written += len(page)
    return written


def _write_parquet(queues: Sequence[Queue], output: str) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        fail(f"--format parquet needs pyarrow: {install_hint('spark')} (or pyarrow), or use --format jsonl")
    if output == "-":
        fail("--format parquet needs a file for --output, not -")
    schema = pa.schema(
        [
            ("queue", pa.string()),
            ("event_id", pa.string()),
            ("kind", pa.string()),
            ("message_id", pa.string()),
            ("receive_count", pa.int32()),
            ("at_ms", pa.int64()),
            ("at", pa.timestamp("ms", tz="UTC")),
            ("extra", pa.string()),
        ]
    )
    written = 0
    with pq.ParquetWriter(output, schema) as writer:
        for queue in queues:
            for page in event_pages(queue, PAGE):
                columns = {
                    "queue": [e.queue for e in page],
                    "event_id": [e.event_id for e in page],
                    "kind": [e.kind for e in page],
                    "message_id": [e.message_id for e in page],
                    "receive_count": [e.receive_count for e in page],
                    "at_ms": [e.at_ms for e in page],
                    "at": [e.at_ms for e in page],
                    "extra": [e.extra for e in page],
                }
                writer.write_table(pa.table(columns, schema=schema))
                written += len(page)
    return written


@events.command()
@click.argument("queue_names", metavar="QUEUE...", nargs=-1, required=True)
@click.option(
    "--format",
    "file_format",
    type=click.Choice(["jsonl", "parquet"]),
    envvar="SMQ_EVENTS_EXPORT_FORMAT",
    default=None,
    help="File format [default: parquet for an --output ending in .parquet, else jsonl].",
)
@click.option(
    "--output",
    "-o",
    required=True,
    metavar="PATH",
    help="The file to write (replaced if it exists); - for standard output (JSON lines only).",
)
@redis_options
def export(
    queue_names: tuple[str, ...],
    file_format: str | None,
    output: str,
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
) -> None:
    """Write the lifecycle events of each QUEUE to one file, oldest first, queue by queue.

    Reads each stream from its oldest kept event to its end, and changes
    nothing. One row per event: queue, event_id, kind, message_id,
    receive_count, at_ms (ms since the epoch, Redis clock), at (the same as
    a UTC timestamp), extra. Analyse them with smq analyze --input PATH.
    """
    if file_format is None:
        file_format = "parquet" if output.lower().endswith((".parquet", ".pq")) else "jsonl"
    with open_client(redis_url, cluster, data_dir) as client:
        queues = [client.get_queue(name) for name in dict.fromkeys(queue_names)]
        if file_format == "parquet":
            written = _write_parquet(queues, output)
        else:
            written = _write_jsonl(queues, output)
    where = "standard output" if output == "-" else output
    click.echo(f"smq: wrote {written:,} events of {len(queues)} queue(s) to {where}", err=True)
