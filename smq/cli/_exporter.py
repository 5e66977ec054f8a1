"""``smq exporter``: Prometheus metrics of every queue, read from Redis at scrape time."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import click

from .._errors import SmqError
from ..exporter import Exporter, ExporterConfig
from ..exporter._config import MAX_QUEUES_LIMIT
from ._base import fail, main
from ._connect import open_client, redis_options
from ._logging import log_level_option, setup_logging


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=9327,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--queue",
    multiple=True,
    metavar="NAME",
    help="Report only this queue; repeat for more (env: names split by spaces) [default: every queue].",
)
@click.option(
    "--queue-pattern",
    default=None,
    metavar="REGEX",
    help="Report only queues whose whole name matches this regular expression.",
)
@click.option(
    "--max-queues",
    default=1000,
    show_default=True,
    type=click.IntRange(1, MAX_QUEUES_LIMIT),
    help="Report at most this many queues, the first by name (bounds the queue label).",
)
@click.option(
    "--redis-timeout",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0.1, 60),
    help="Seconds a Redis call may take; keep it below Prometheus's scrape timeout.",
)
@click.option(
    "--deprecated-metric-names",
    is_flag=True,
    help="Also report metrics under their names before a rename (smq_queue_max_receive_count; "
    "removed in 0.3.0).",
)
@log_level_option
@redis_options
def exporter(
    host: str,
    port: int,
    queue: tuple[str, ...],
    queue_pattern: str | None,
    max_queues: int,
    redis_timeout: float,
    deprecated_metric_names: bool,
    log_level: str,
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
) -> None:
    """Serve Prometheus metrics of the queues at /metrics, until SIGTERM or SIGINT.

    Every scrape reads Redis: per queue the visible, in-flight and delayed
    messages, the age of the oldest, the dead-letter depth, the settings
    and the counters the scripts keep (sent, received, visibility expired,
    ...); and Redis memory, eviction policy and AOF. The numbers come from
    Redis, so one exporter covers the whole fleet. If Redis is down it keeps
    serving and reports smq_up 0. /healthz answers while the process runs.
    Example: smq exporter --host 0.0.0.0 --queue-pattern 'jobs.*'
    """
    try:
        config = ExporterConfig(
            queues=queue,
            queue_pattern=queue_pattern,
            max_queues=max_queues,
            deprecated_names=deprecated_metric_names,
        )
    except SmqError as error:
        fail(str(error))
    setup_logging(log_level)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    with open_client(
        redis_url,
        cluster,
        data_dir,
        long_running=True,
        # It must report an unsafe eviction policy, not refuse to read that Redis.
        allow_eviction=True,
        socket_timeout=redis_timeout,
        connect_timeout=min(redis_timeout, 2.0),
    ) as client:
        try:
            server = Exporter(client, config).serve(host, port)
        except OSError as error:
            fail(f"cannot listen on {host}:{port}: {error.strerror or error}")
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)
        shown = f"[{host}]" if ":" in host else host
        click.echo(f"smq exporter: serving http://{shown}:{server.port}/metrics", err=True)
        while not stop.wait(1.0):
            pass
        server.stop()
