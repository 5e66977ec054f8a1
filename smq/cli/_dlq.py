"""``smq dlq``: dead-letter queues, and moving their messages back."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click

from ..client._client import Client
from ._base import main
from ._connect import open_client, redis_options
from ._output import json_option, print_json, print_table

_PAGE = 100
_DRY_RUN_REACH = 10_000  # the deepest a dry run looks: a bound on its work


@main.group()
def dlq() -> None:
    """Dead-letter queues: move their messages back."""


@dlq.command()
@click.argument("name", metavar="DLQ")
@click.option("--to", metavar="QUEUE", help="Move every message here, not to the queue it came from.")
@click.option("--limit", type=click.IntRange(1, 10**9), help="Move at most this many messages.")
@click.option("--dry-run", is_flag=True, help="Move nothing; say how many would move, and where.")
@redis_options
@json_option
def redrive(
    name: str,
    to: str | None,
    limit: int | None,
    dry_run: bool,
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Move the visible messages of dead-letter queue DLQ back.

    Each goes to the queue it was dead-lettered from, or all to --to QUEUE.
    A message that came from no queue (sent to DLQ directly) stays. The move
    is idempotent: an interrupted redrive neither loses nor doubles a message.

    \b
    smq dlq redrive jobs-dlq --dry-run
    smq dlq redrive jobs-dlq --limit 100
    """
    destination = to
    with open_client(redis_url, cluster, data_dir) as client:
        if dry_run:
            _dry_run(client, name, destination, limit, as_json)
            return
        moved = client.redrive(name, destination=destination, max_messages=limit)
    if as_json:
        print_json({"queue": name, "moved": moved})
    else:
        click.echo(f"moved {moved} messages out of {name!r}")


def _dry_run(client: Client, name: str, destination: str | None, limit: int | None, as_json: bool) -> None:
    queue = client.get_queue(name)
    if destination is not None:
        client.get_queue(destination)
    visible = queue.attributes().visible
    wanted = visible if limit is None else min(visible, limit)
    targets: Counter[str] = Counter()
    seen = 0
    offset = 0
    # Deleted ids count toward a page without showing in it: page by offset, not by results.
    while seen < wanted and offset < _DRY_RUN_REACH:
        for message in queue.peek("visible", limit=_PAGE, offset=offset):
            if seen == wanted:
                break
            seen += 1
            targets[destination or message.origin or ""] += 1
        offset += _PAGE
    stays = targets.pop("", 0)
    moves = sum(targets.values())
    partial = seen < wanted
    if as_json:
        print_json(
            {
                "queue": name,
                "dry_run": True,
                "would_move": moves,
                "destinations": dict(sorted(targets.items())),
                "would_stay": stays,
                "looked_at": seen,
                "visible": visible,
                "complete": not partial,
            }
        )
        return
    click.echo(f"would move {moves} messages out of {name!r} (dry run: nothing moved)")
    if targets:
        print_table(["to queue", "messages"], sorted(targets.items()))
    if stays:
        click.echo(f"{stays} messages came from no queue and would stay (give --to QUEUE to move them)")
    if partial:
        click.echo(
            f"looked only at the first {seen} of {wanted} messages (a dry run reads at most the first "
            f"{_DRY_RUN_REACH:,}); the real run moves up to {wanted}"
        )
