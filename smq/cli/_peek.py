"""``smq peek``: browse a queue's messages without receiving them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ._base import main
from ._connect import open_client, redis_options
from ._messages import attributes_json, fifo_json
from ._output import age, json_option, preview, print_json, print_table

if TYPE_CHECKING:
    from ..operations._peek import PeekedMessage

STATES: dict[str, tuple[str, ...]] = {
    "visible": ("visible",),
    "in-flight": ("in_flight",),
    "delayed": ("delayed",),
}
STATES["all"] = STATES["visible"] + STATES["in-flight"] + STATES["delayed"]


def _timer(seconds: float | None, future: str, past: str) -> str | None:
    if seconds is None:
        return None
    left = seconds - time.time()
    return future.format(age(left)) if left > 0 else past


def peeked_json(message: PeekedMessage, fifo: bool = False) -> dict[str, Any]:
    """A peeked message as JSON; on a FIFO queue (``fifo``) with its message group."""
    return {
        "queue": message.queue,
        "message_id": message.message_id,
        "state": message.state,
        "body": message.body,
        "attributes": attributes_json(message.attributes),
        "sent_at": message.sent_at,
        "receive_count": message.receive_count,
        "first_received_at": message.first_received_at,
        "receipt_handle": message.receipt_handle,
        "received_at": message.received_at,
        "visible_at": message.visible_at,
        "origin": message.origin,
        **fifo_json(fifo, message.message_group_id),
    }


@main.command()
@click.argument("queue_name", metavar="QUEUE")
@click.option(
    "--state",
    type=click.Choice(list(STATES)),
    default="visible",
    show_default=True,
    help="Which messages: visible (next to be received first), in-flight (soonest to expire "
    "first), delayed (soonest due first), or all three.",
)
@click.option(
    "--limit", type=click.IntRange(1, 100), default=10, show_default=True, help="Messages per state."
)
@click.option(
    "--offset",
    type=click.IntRange(0, 100_000_000),
    default=0,
    show_default=True,
    help="Skip this many per state.",
)
@redis_options
@json_option
def peek(
    queue_name: str,
    state: str,
    limit: int,
    offset: int,
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Show messages of QUEUE without receiving them (changes nothing).

    For in-flight messages, the receipt that holds each and when its timeout
    runs out; for delayed ones, when each falls due; for redriven and
    dead-lettered ones, the queue they came from. An "expired" in-flight or a
    "due" delayed message shows where it was until the next receive moves it.
    On a FIFO queue, each message's group; visible messages are listed group
    by group, each group's in order.
    """
    with open_client(redis_url, cluster, data_dir) as client:
        queue = client.get_queue(queue_name)
        messages = [m for one in STATES[state] for m in queue.peek(one, limit=limit, offset=offset)]
    if as_json:
        print_json([peeked_json(m, queue.fifo) for m in messages])
        return
    if not messages:
        click.echo(f"no {state} messages" if state != "all" else "no messages", err=True)
        return
    now = time.time()
    # The group column on a FIFO queue, or when a standard queue's message has a group.
    grouped = queue.fifo or any(m.message_group_id is not None for m in messages)
    group_header = ["group"] if grouped else []
    print_table(
        ["state", "id", *group_header, "age", "receives", "receipt", "expires", "due", "origin", "body"],
        [
            (
                m.state.replace("_", "-"),
                m.message_id,
                *([m.message_group_id] if grouped else []),
                age(now - m.sent_at),
                m.receive_count,
                m.receipt_handle,
                _timer(m.visible_at, "in {}", "expired") if m.state == "in_flight" else None,
                _timer(m.visible_at, "in {}", "due") if m.state == "delayed" else None,
                m.origin,
                preview(m.body, 40),
            )
            for m in messages
        ],
    )
