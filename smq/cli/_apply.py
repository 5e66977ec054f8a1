"""``smq queue apply``: create or update the queues a declared-queues file declares."""

from __future__ import annotations

from pathlib import Path

import click

from ..operations import _declared
from ._connect import open_client, redis_options
from ._output import json_option, print_json
from ._queues import queue

_WOULD = {"created": "would create", "updated": "would update"}


@queue.command()
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--dry-run", is_flag=True, help="Print what would change, and change nothing.")
@redis_options
@json_option
def apply(
    file: str, dry_run: bool, redis_url: str | None, cluster: bool, data_dir: Path, as_json: bool
) -> None:
    """Create or update the queues FILE declares (TOML; - reads standard input).

    Each [queues.NAME] table declares a queue by SQS attribute names, with
    its dead-letter queue and tags. A queue that does not exist is created;
    one that exists gets the attributes and tags declared, and keeps those
    not declared. Dead-letter queues are made first. The whole file is
    checked before anything changes: an error names the file, queue and
    attribute, and changes nothing. Running it again changes nothing.
    One line per queue: created, updated (with what changed) or unchanged.

    \b
    [queues.jobs-dlq]
    MessageRetentionPeriod = 1209600
    [queues.jobs]
    VisibilityTimeout = 30
    DeadLetterQueue = "jobs-dlq"
    MaxReceiveCount = 5

    \b
    smq queue apply queues.toml --dry-run
    smq queue apply queues.toml
    """
    declaration = _declared.load(file)  # the file's own errors before any connection
    with open_client(redis_url, cluster, data_dir) as client:
        changes = _declared.apply(client, declaration, dry_run=dry_run)
    if as_json:
        print_json(
            [
                {
                    "queue": change.queue,
                    "action": change.action,
                    "changes": [
                        {"attribute": attribute, "before": before, "after": after}
                        for attribute, before, after in change.changes
                    ],
                }
                for change in changes
            ]
        )
        return
    if not changes:
        click.echo(f"{declaration.source} declares no queues")
    for change in changes:
        line = str(change)
        if dry_run and change.action in _WOULD:
            line = _WOULD[change.action] + line[len(change.action) :]
        click.echo(line)
    if dry_run:
        click.echo("dry run: nothing changed")
