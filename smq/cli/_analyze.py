"""``smq analyze``: lifecycle analytics on Spark, and what to set the queue's timeouts to."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import click

from .._version import install_hint
from ._base import fail, main
from ._connect import open_client, redis_options
from ._output import json_option, print_json, print_table


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


@contextmanager
def _spark(master: str) -> Iterator[Any]:
    """A SparkSession on ``master`` (one already running in this process is used, and left running)."""
    try:
        from pyspark.sql import SparkSession

        from ..spark import JavaNotFound, spark_session
    except ImportError:
        fail(f"smq analyze needs PySpark: {install_hint('spark')}")
    running = SparkSession.getActiveSession()
    try:
        quiet = {"spark.ui.showConsoleProgress": "false", "spark.log.level": "ERROR"}
        spark = spark_session(master, app_name="smq-analyze", **quiet)
    except JavaNotFound as error:
        fail(str(error))
    try:
        yield spark
    finally:
        if running is None:
            spark.stop()


@main.command()
@click.option(
    "--input",
    "-i",
    "inputs",
    multiple=True,
    envvar="SMQ_ANALYZE_INPUT",
    metavar="FILE_OR_DIR",
    help="Events exported by smq events export (JSON lines or Parquet, files or folders); repeat for "
    "more (env SMQ_ANALYZE_INPUT, separated by spaces).",
)
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    envvar="SMQ_ANALYZE_QUEUE",
    metavar="NAME",
    help="Read this queue's event stream from Redis instead; repeat for more (env SMQ_ANALYZE_QUEUE).",
)
@click.option(
    "--format",
    "file_format",
    type=click.Choice(["auto", "jsonl", "parquet"]),
    envvar="SMQ_ANALYZE_FORMAT",
    default="auto",
    show_default=True,
    help="Format of the --input files (auto: by name, *.jsonl or *.parquet).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("smq-report"),
    show_default=True,
    help="Folder for report.md, report.json and a chart per queue.",
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@redis_options
@json_option
def analyze(
    inputs: tuple[str, ...],
    queues: tuple[str, ...],
    file_format: str,
    output: Path,
    master: str,
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Measure processing times, redeliveries, expiries and dead letters per queue, and recommend
    a VisibilityTimeout, a heartbeat and a maxReceiveCount.

    Reads lifecycle events (queues created with --event-stream-max-len) from
    files of smq events export (--input) or straight from Redis (--queue),
    runs a Spark job (local[*] by default; the same job runs under
    spark-submit as smq/spark/analyze_job.py) and writes the report into
    --output. Prints one line per queue.
    """
    if bool(inputs) == bool(queues):
        fail("give --input FILE_OR_DIR or --queue NAME (one of them)")
    try:
        from ..spark._analyze import event_file_format, run_job
        from ..spark._report import summary
    except ImportError:
        fail(f"smq analyze needs PySpark: {install_hint('spark')}")
    for path in inputs:  # before Spark starts: a typo costs no JVM
        if "://" not in path and not Path(path).exists():
            fail(f"no such file or folder: {path}")
        if file_format == "auto":
            event_file_format(path)
    url = None
    with open_client(redis_url, cluster, data_dir) if queues else nullcontext() as client:
        if client is not None:
            for name in queues:
                client.get_queue(name)  # a missing queue fails here, in one line
            url = client.settings.url
        with _spark(master) as spark:
            try:
                reports = run_job(
                    spark,
                    output,
                    inputs=inputs,
                    queues=queues,
                    url=url,
                    cluster=cluster,
                    file_format=file_format,
                )
            except ImportError as error:
                fail(str(error))
            except Exception as error:
                from pyspark.errors import PySparkException

                if isinstance(error, PySparkException):
                    fail(_first_line(error))
                raise
    if as_json:
        print_json(json.loads((output / "report.json").read_text()))
        return
    if not reports:
        click.echo("no events found", err=True)
    else:
        print_table(*summary(reports))
    click.echo(f"smq: report in {output / 'report.md'}", err=True)
