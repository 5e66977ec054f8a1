"""``smq worker``: run a handler on a queue's messages, with heartbeat and graceful stop."""

from __future__ import annotations

from pathlib import Path

import click

from ..client._queue import MAX_WAIT_SECONDS
from ..core._config import MAX_VISIBILITY_TIMEOUT
from ..worker import Worker, WorkerConfig, load_handler
from ._base import main
from ._connect import open_client, redis_options
from ._logging import log_level_option, setup_logging


@main.command()
@click.argument("handler", envvar="SMQ_WORKER_HANDLER", metavar="MODULE:FUNCTION")
@click.option("--queue", "-q", required=True, help="Queue to work on.")
@click.option(
    "--concurrency",
    "-c",
    default=1,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Handlers at once.",
)
@click.option(
    "--prefetch",
    default=None,
    type=click.IntRange(0, 10_000),
    help="Messages held beyond --concurrency, hidden by the heartbeat until a handler is free "
    "[default: as many as --concurrency].",
)
@click.option(
    "--visibility-timeout",
    default=None,
    type=click.IntRange(1, MAX_VISIBILITY_TIMEOUT),
    help="Seconds each receive and each heartbeat extension hides a message [default: the queue's].",
)
@click.option(
    "--wait-time",
    default=MAX_WAIT_SECONDS,
    show_default=True,
    type=click.IntRange(0, MAX_WAIT_SECONDS),
    help="Long-poll wait of each receive, in seconds.",
)
@click.option(
    "--backoff",
    default=1,
    show_default=True,
    type=click.IntRange(0, MAX_VISIBILITY_TIMEOUT),
    help="Seconds a failed message waits before its retry, doubled on each further receive.",
)
@click.option(
    "--max-backoff",
    default=900,
    show_default=True,
    type=click.IntRange(0, MAX_VISIBILITY_TIMEOUT),
    help="Upper bound of the retry delay, in seconds.",
)
@click.option(
    "--grace-period",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0, 86400),
    help="Seconds a stop (SIGTERM, SIGINT) lets running handlers finish before releasing their messages.",
)
@click.option(
    "--metrics-port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics on this port (0: any free port) [default: off].",
)
@click.option("--metrics-host", default="0.0.0.0", show_default=True, help="Address of the metrics server.")
@log_level_option
@redis_options
def worker(
    handler: str,
    queue: str,
    concurrency: int,
    prefetch: int | None,
    visibility_timeout: int | None,
    wait_time: int,
    backoff: int,
    max_backoff: int,
    grace_period: float,
    metrics_port: int | None,
    metrics_host: str,
    log_level: str,
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
) -> None:
    """Run MODULE:FUNCTION on every message of a queue, until SIGTERM or SIGINT.

    The function takes an smq.Job (job.body, job.attributes, job.lease_lost)
    and may be async. Returning deletes the message; raising releases it for
    a retry after the backoff, and after the queue's maxReceiveCount it goes
    to the dead-letter queue. While it runs, its message stays hidden (the
    heartbeat extends it). Run as many workers as you like, on any hosts.

    A stop receives no more, releases the messages not yet started, and
    gives running handlers --grace-period seconds; a second signal stops at
    once. Example: smq worker app.tasks:handle --queue jobs --concurrency 8
    """
    config = WorkerConfig(
        concurrency=concurrency,
        prefetch=prefetch,
        visibility_timeout=visibility_timeout,
        wait_time_seconds=wait_time,
        backoff=backoff,
        max_backoff=max_backoff,
        grace_period=grace_period,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    function = load_handler(handler)
    setup_logging(log_level)
    with open_client(redis_url, cluster, data_dir, long_running=True) as client:
        Worker(client, queue, function, config=config).run()
