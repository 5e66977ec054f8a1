"""``smq upgrade``: move every queue's data to the newest layout this version knows."""

from __future__ import annotations

from pathlib import Path

import click

from .._errors import LAYOUT
from ._base import main
from ._connect import open_client, redis_options
from ._output import json_option, print_json


@main.command()
@click.option("--dry-run", is_flag=True, help="Print what would change, and change nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Upgrade even while the scripts of smq 0.2.0 consumers are in Redis's script cache.",
)
@redis_options
@json_option
def upgrade(
    dry_run: bool, force: bool, redis_url: str | None, cluster: bool, data_dir: Path, as_json: bool
) -> None:
    """Move every queue's data to the newest layout this smq knows.

    Run it after every client of the queues (smq serve, workers, programs
    using the Python client) runs this version or a newer one: a client
    older than a queue's layout refuses that queue until it is upgraded.
    Queues stay in use while they move. Running it again changes nothing.
    One line per queue (and per shard of a sharded queue). smq 0.2.0 checks
    no layout: the upgrade refuses while a 0.2.0 consumer's scripts are in
    Redis's script cache; once none is left, SCRIPT FLUSH or use --force.

    \b
    smq upgrade --dry-run
    smq upgrade
    """
    with open_client(redis_url, cluster, data_dir) as client:
        upgrades = client.upgrade(dry_run=dry_run, force=force)
    if as_json:
        print_json(
            [
                {"queue": u.queue, "before": u.before, "after": u.after, "recorded": u.recorded}
                for u in upgrades
            ]
        )
        return
    for one in upgrades:
        line = str(one)
        click.echo(line.replace(" -> ", " would move to ", 1) if dry_run and one.changed else line)
    changed = sum(one.changed for one in upgrades)
    done = "would move" if dry_run else "moved"
    dry = " (dry run)" if dry_run else ""
    click.echo(f"{len(upgrades)} queues, {changed} {done} to layout {LAYOUT}{dry}")
