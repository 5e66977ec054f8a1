"""``smq receive``, ``delete`` and ``change-visibility``: messages one command at a time
(``smq send`` is in ``_send``)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from .._errors import ReceiptError
from ..client._queue import MAX_WAIT_SECONDS
from ..core._batch import MAX_BATCH
from ..core._config import MAX_VISIBILITY_TIMEOUT
from ..core._message import Message, MessageAttribute
from ._base import fail, main
from ._connect import open_client, redis_options
from ._output import json_option, preview, print_json, print_table


def attributes_json(attributes: Mapping[str, MessageAttribute]) -> dict[str, dict[str, str]]:
    """Message attributes as JSON: binary values in base64."""
    return {
        name: {
            "data_type": a.data_type,
            "value": base64.b64encode(a.value).decode() if isinstance(a.value, bytes) else a.value,
        }
        for name, a in attributes.items()
    }


def fifo_json(fifo: bool, group: str | None, **more: str | None) -> dict[str, str | None]:
    """The FIFO fields of a message as JSON: all of them on a FIFO queue; on a standard
    queue only a message group id, if the message has one."""
    if fifo:
        return {"message_group_id": group, **more}
    return {} if group is None else {"message_group_id": group}


@main.command()
@click.argument("queue_name", metavar="QUEUE")
@click.option(
    "--max-messages",
    "-n",
    type=click.IntRange(1, MAX_BATCH),
    default=1,
    show_default=True,
    help="Receive up to this many messages.",
)
@click.option(
    "--visibility-timeout",
    type=click.IntRange(0, MAX_VISIBILITY_TIMEOUT),
    help="Seconds the messages stay invisible; default: the queue's.",
)
@click.option(
    "--wait-time",
    type=click.IntRange(0, MAX_WAIT_SECONDS),
    help="Wait up to this many seconds for a message (long poll); default: the queue's.",
)
@click.option("--delete", is_flag=True, help="Delete the messages once printed.")
@click.option(
    "--attempt-id",
    metavar="ID",
    help="FIFO: receive request attempt id; a retry with the same id within 5 minutes "
    "returns the same messages and receipts.",
)
@redis_options
@json_option
def receive(
    queue_name: str,
    max_messages: int,
    visibility_timeout: int | None,
    wait_time: int | None,
    delete: bool,
    attempt_id: str | None,
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Receive messages from QUEUE: id, receipt handle, receive count, body.

    Keep the receipt handle to delete a message (smq delete) or change its
    visibility; without --delete it comes back when its timeout runs out.
    From a FIFO queue, also each message's group, sequence number and
    deduplication id (the start of it in the table; all of it with --json).
    """
    with open_client(redis_url, cluster, data_dir) as client:
        queue = client.get_queue(queue_name)
        messages = queue.receive(
            max_messages,
            visibility_timeout=visibility_timeout,
            wait_time_seconds=wait_time,
            attempt_id=attempt_id,
        )
        if as_json:
            print_json([_received_json(m, queue.fifo) for m in messages])
        elif messages:
            _print_received(messages, queue.fifo)
        else:
            click.echo("no messages", err=True)
        if delete:
            kept = [m.message_id for m in messages if not queue.delete(m)]
            if kept:
                fail(f"not deleted (received again since?): {', '.join(kept)}")


def _received_json(m: Message, fifo: bool) -> dict[str, Any]:
    return {
        "message_id": m.message_id,
        "receipt_handle": m.receipt_handle,
        "receive_count": m.receive_count,
        "body": m.body,
        "attributes": attributes_json(m.attributes),
        "sent_at": m.sent_at,
        "first_received_at": m.first_received_at,
        "md5_of_body": m.md5_of_body,
        **fifo_json(
            fifo, m.message_group_id, sequence_number=m.sequence_number, deduplication_id=m.deduplication_id
        ),
    }


def _print_received(messages: list[Message], fifo: bool) -> None:
    if fifo:
        print_table(
            ["id", "group", "sequence", "deduplication id", "receipt", "receives", "body"],
            [
                (
                    m.message_id,
                    m.message_group_id,
                    m.sequence_number,
                    preview(m.deduplication_id or "", 24),
                    m.receipt_handle,
                    m.receive_count,
                    preview(m.body, 60),
                )
                for m in messages
            ],
        )
    elif any(m.message_group_id is not None for m in messages):
        print_table(
            ["id", "group", "receipt", "receives", "body"],
            [
                (m.message_id, m.message_group_id, m.receipt_handle, m.receive_count, preview(m.body, 60))
                for m in messages
            ],
        )
    else:
        print_table(
            ["id", "receipt", "receives", "body"],
            [(m.message_id, m.receipt_handle, m.receive_count, preview(m.body, 60)) for m in messages],
        )


@main.command(name="delete")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("receipts", metavar="RECEIPT...", nargs=-1, required=True)
@redis_options
@json_option
def delete_(
    queue_name: str,
    receipts: tuple[str, ...],
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Delete received messages of QUEUE by their receipt handles.

    A stale receipt (the message was received again since) or one of a
    message already gone deletes nothing and is reported, with exit status 0
    as in SQS; a receipt smq did not issue gives exit status 1.
    """
    outcomes: list[dict[str, Any]] = []
    with open_client(redis_url, cluster, data_dir) as client:
        queue = client.get_queue(queue_name)
        for receipt in receipts:
            try:
                deleted = queue.delete(receipt)
            except ReceiptError as error:
                outcomes.append({"receipt_handle": receipt, "deleted": False, "error": str(error)})
                continue
            outcomes.append({"receipt_handle": receipt, "deleted": deleted, "error": None})
    if as_json:
        print_json(outcomes)
    else:
        print_table(
            ["receipt", "result"],
            [
                (
                    o["receipt_handle"],
                    "deleted"
                    if o["deleted"]
                    else o["error"] or "nothing deleted: stale receipt or already gone",
                )
                for o in outcomes
            ],
        )
    bad = [o for o in outcomes if o["error"]]
    if bad:
        fail(f"{len(bad)} of {len(outcomes)} receipts refused: {bad[0]['error']}")


@main.command(name="change-visibility")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("receipt")
@click.argument("seconds", type=click.IntRange(0, MAX_VISIBILITY_TIMEOUT))
@redis_options
@json_option
def change_visibility(
    queue_name: str,
    receipt: str,
    seconds: int,
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Make a received message of QUEUE visible again SECONDS from now (0: at once)."""
    with open_client(redis_url, cluster, data_dir) as client:
        client.get_queue(queue_name).change_visibility(receipt, seconds)
    if as_json:
        print_json({"receipt_handle": receipt, "visibility_timeout": seconds})
    elif seconds:
        click.echo(f"visible again in {seconds}s unless deleted")
    else:
        click.echo("visible again now")
