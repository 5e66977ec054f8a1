"""``smq demo``: the visibility timeout at work on a small queue."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from .._errors import SmqError
from ..client._client import Client
from ._base import fail as _fail
from ._base import main
from ._connect import open_client, redis_options


@main.command()
@redis_options
@click.option("--visibility-timeout", default=2, show_default=True, type=click.IntRange(1, 60))
def demo(redis_url: str | None, cluster: bool, data_dir: Path, visibility_timeout: int) -> None:
    """Show the visibility timeout at work on a small queue.

    Uses the Redis of --redis-url, else the embedded one in --data-dir (the
    one smq serve runs, if it runs), as every smq command does.
    """
    with open_client(redis_url, cluster, data_dir) as client:
        click.echo(f"Redis at {client.settings.url}")
        _run_demo(client, visibility_timeout)


def _say(started: float, text: str) -> None:
    click.echo(f"[{time.monotonic() - started:5.2f}s] {text}")


def _counts(queue: Any) -> str:
    info = queue.attributes()
    return f"visible={info.visible} in_flight={info.in_flight} delayed={info.delayed}"


def _run_demo(client: Client, visibility_timeout: int) -> None:
    started = time.monotonic()
    try:
        queue = client.create_queue("smq-demo", visibility_timeout=visibility_timeout)
        queue.purge()
        _say(started, f"queue {queue.name!r}, visibility timeout {visibility_timeout}s")
        for n in range(1, 4):
            queue.send(f"job {n}")
        _say(started, f"sent 3 messages: {_counts(queue)}")
        (first,) = queue.receive(1)
        _say(started, f"received {first.body!r} (receive #{first.receive_count}); not deleting it")
        _say(started, _counts(queue))
        others = queue.receive(10)
        _say(started, f"received {[m.body for m in others]}, deleted them")
        for message in others:
            queue.delete(message.receipt_handle)
        _say(started, f"long poll: waiting for {first.body!r} to come back ... ({_counts(queue)})")
        (again,) = queue.receive(1, wait_time_seconds=visibility_timeout + 5)
        _say(started, f"received {again.body!r} again (receive #{again.receive_count}): its timeout ran out")
        stale = queue.delete(first.receipt_handle)
        _say(started, f"delete with the first (now stale) receipt: deleted={stale}, ignored and counted")
        queue.delete(again.receipt_handle)
        _say(started, f"deleted with the new receipt: {_counts(queue)}")
        counters = queue.attributes().counters
        _say(started, "counters: " + ", ".join(f"{k}={v}" for k, v in sorted(counters.items())))
    except SmqError as error:
        _fail(str(error))
