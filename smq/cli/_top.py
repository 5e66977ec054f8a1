"""``smq top``: a live view of the queues, with rates from their counters."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from .._errors import QueueDoesNotExist
from ..client._client import Client
from ..core._config import QueueInfo
from ._base import main
from ._connect import open_client, redis_options
from ._output import age, json_option, print_table

_RATES = ("sent", "received", "deleted")


@main.command()
@click.option("--prefix", default="", help="Only queues whose name starts with this.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 3600),
    default=2.0,
    show_default=True,
    help="Seconds between views.",
)
@click.option("--iterations", type=click.IntRange(1), default=None, help="Stop after this many views.")
@redis_options
@json_option
def top(
    prefix: str,
    interval: float,
    iterations: int | None,
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Watch queues: message counts, the oldest message, and rates per second.

    Rates (sent/s, received/s, deleted/s) are those of all clients, from the
    queues' counters, over the last interval. On a terminal the view
    refreshes in place; otherwise each view follows the last (with --json,
    one JSON object per line). Ctrl-C ends it.
    """
    live = sys.stdout.isatty() and not as_json
    with open_client(redis_url, cluster, data_dir) as client:
        before: dict[str, tuple[float, dict[str, int]]] = {}
        done = 0
        try:
            while True:
                view = _view(client, prefix, before)
                if live:
                    click.clear()
                _print(view, interval, as_json, first=done == 0)
                done += 1
                if iterations is not None and done >= iterations:
                    return
                time.sleep(interval)
        except KeyboardInterrupt:
            return


def _view(
    client: Client, prefix: str, before: dict[str, tuple[float, dict[str, int]]]
) -> list[dict[str, Any]]:
    rows = []
    now = time.monotonic()
    for name in client.list_queues(prefix):
        try:
            info: QueueInfo = client.queue(name).attributes()
        except QueueDoesNotExist:
            continue
        counters = {key: int(info.counters.get(key, 0)) for key in _RATES}
        rates: dict[str, float | None] = dict.fromkeys(_RATES)
        if name in before:
            then, old = before[name]
            elapsed = max(now - then, 1e-6)
            rates = {key: max(0, counters[key] - old[key]) / elapsed for key in _RATES}
        before[name] = (now, counters)
        rows.append(
            {
                "name": name,
                "visible": info.visible,
                "in_flight": info.in_flight,
                "delayed": info.delayed,
                "oldest_age": info.oldest_age,
                **{f"{key}_per_second": rate for key, rate in rates.items()},
            }
        )
    return rows


def _print(view: list[dict[str, Any]], interval: float, as_json: bool, *, first: bool) -> None:
    if as_json:
        click.echo(json.dumps({"at": time.time(), "queues": view}))
        return
    if not first:
        click.echo()
    click.echo(f"smq top  {time.strftime('%H:%M:%S')}  {len(view)} queues, every {interval:g}s")
    print_table(
        ["queue", "visible", "in flight", "delayed", "oldest", "sent/s", "received/s", "deleted/s"],
        [
            (
                row["name"],
                row["visible"],
                row["in_flight"],
                row["delayed"],
                age(row["oldest_age"]),
                *(row[f"{key}_per_second"] for key in _RATES),
            )
            for row in view
        ],
    )
