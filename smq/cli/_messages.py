"""``smq send``, ``receive``, ``delete`` and ``change-visibility``: messages one command at a time."""

from __future__ import annotations

import base64
import os
import stat
import sys
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Any

import click

from .._batch import MAX_BATCH
from .._config import MAX_VISIBILITY_TIMEOUT
from .._errors import BatchRequestTooLong, OutcomeUnknown, ReceiptError, SmqError
from .._message import MessageAttribute, SendEntry
from .._queue import MAX_WAIT_SECONDS, Queue
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


def _attributes(values: tuple[str, ...]) -> dict[str, str]:
    attributes: dict[str, str] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name:
            raise click.BadParameter(
                f"{value!r}: give an attribute as NAME=VALUE", param_hint="'--attribute'"
            )
        attributes[name] = text
    return attributes


@main.command()
@click.argument("queue_name", metavar="QUEUE")
@click.argument("body", required=False)
@click.option(
    "--file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Send the text of this file as one message.",
)
@click.option("--lines", is_flag=True, help="Send each line of stdin as a message (as BODY '-' does).")
@click.option("--delay", type=click.IntRange(0, 900), help="Seconds before the message can be received.")
@click.option(
    "--attribute",
    multiple=True,
    metavar="NAME=VALUE",
    help="A String message attribute; repeat for more.",
)
@redis_options
@json_option
def send(
    queue_name: str,
    body: str | None,
    file: Path | None,
    lines: bool,
    delay: int | None,
    attribute: tuple[str, ...],
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Send a message to QUEUE: BODY, a --file, or each line of stdin.

    \b
    smq send jobs 'resize image 42'
    smq send jobs --file job.json --attribute kind=resize
    seq 1000 | smq send jobs --lines      (or: smq send jobs -)

    With --lines, empty lines are skipped and messages go in batches of 10;
    lines that could not be sent are named on stderr and the exit status is 1.
    """
    from_stdin = lines or body == "-"
    path = file
    given = sum([body is not None and body != "-", path is not None, from_stdin])
    if given != 1:
        raise click.UsageError("give one of: a BODY, --file PATH, or --lines (BODY '-')")
    attributes = _attributes(attribute)
    with open_client(redis_url, cluster, data_dir) as client:
        queue = client.get_queue(queue_name)
        if from_stdin:
            _send_lines(queue, sys.stdin, delay, attributes, as_json)
            return
        if path is not None:
            try:
                body = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                fail(f"{path}: not UTF-8 text (a message body is text)")
        assert body is not None
        sent = queue.send(body, delay_seconds=delay, attributes=attributes)
    if as_json:
        print_json({"message_id": sent.message_id, "md5_of_body": sent.md5_of_body})
    else:
        click.echo(sent.message_id)


def _numbered_lines(stream: IO[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(stream, 1):
        text = line[:-1] if line.endswith("\n") else line
        text = text[:-1] if text.endswith("\r") else text
        if text:
            yield number, text


def _batches(stream: IO[str]) -> Iterator[list[tuple[int, str]]]:
    batch: list[tuple[int, str]] = []
    for item in _numbered_lines(stream):
        batch.append(item)
        if len(batch) == MAX_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _stdin_size(stream: IO[str]) -> int | None:
    try:
        status = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) and status.st_size else None


class _Stopped(Exception):
    """Redis failed during a batch: which lines may have been sent, which were not."""

    def __init__(self, error: SmqError, unknown: list[int], unsent: list[int]) -> None:
        super().__init__(str(error))
        self.unknown = unknown
        self.unsent = unsent


def _send_batch(
    queue: Queue, entries: list[SendEntry], sent: list[dict[str, Any]], failed: list[dict[str, Any]]
) -> None:
    """Send one batch (one by one if it is too large together), recording each line's outcome."""
    calls = [entries]
    i = 0
    while i < len(calls):
        call = calls[i]
        try:
            result = queue.send_batch(call)
        except BatchRequestTooLong as error:
            if len(call) > 1:  # over 1 MiB together: each on its own
                calls[i : i + 1] = [[entry] for entry in call]
            else:
                failed.append({"line": int(call[0].id), "code": type(error).__name__, "message": str(error)})
                i += 1
            continue
        except SmqError as error:
            lines = [int(entry.id) for entry in call]
            later = [int(entry.id) for rest in calls[i + 1 :] for entry in rest]
            if isinstance(error, OutcomeUnknown):
                raise _Stopped(error, lines, later) from error
            raise _Stopped(error, [], lines + later) from error
        sent += [{"line": int(ok.id), "message_id": ok.message_id} for ok in result.successful]
        failed += [{"line": int(bad.id), "code": bad.code, "message": bad.message} for bad in result.failed]
        i += 1


def _send_lines(
    queue: Queue, stream: IO[str], delay: int | None, attributes: dict[str, str], as_json: bool
) -> None:
    sent: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    batches = _batches(stream)
    bar: Any = nullcontext(batches)
    by_bytes = False
    if sys.stderr.isatty():
        # By bytes when stdin is a file of known size; else the number of the last line sent.
        size = _stdin_size(stream)
        if size:
            bar, by_bytes = click.progressbar(length=size, label="sending", file=sys.stderr), True
        else:
            bar = click.progressbar(batches, label="sending", file=sys.stderr, item_show_func=_line_of)
    with bar as progress:
        for batch in batches if by_bytes else progress:
            entries = [SendEntry(str(n), text, delay, attributes or None) for n, text in batch]
            try:
                _send_batch(queue, entries, sent, failed)
            except _Stopped as stop:
                # Redis failed mid-way: name the lines sent, those that may have been, and the rest.
                last = batch[-1][0]
                _report_lines(sent, failed, as_json, stop=stop, last=last)
                parts = [f"stopped: {stop}"]
                if stop.unknown:
                    parts.append(f"lines {_listed(stop.unknown)} may or may not have been sent")
                if stop.unsent:
                    parts.append(f"lines {_listed(stop.unsent)} were not sent, nor any after line {last}")
                else:
                    parts.append(f"no line after line {last} was sent")
                fail("; ".join(parts))
            if by_bytes:
                progress.update(sum(len(text.encode()) + 1 for _, text in batch))
    _report_lines(sent, failed, as_json)
    if failed:
        fail(f"{len(failed)} of {len(sent) + len(failed)} lines not sent (lines {_numbers(failed)})")


def _line_of(batch: list[tuple[int, str]] | None) -> str | None:
    return f"line {batch[-1][0]}" if batch else None


def _listed(numbers: list[int]) -> str:
    if len(numbers) > 1 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(map(str, numbers))


def _numbers(items: list[dict[str, Any]]) -> str:
    numbers = [str(item["line"]) for item in items]
    return ", ".join(numbers[:20]) + (f" and {len(numbers) - 20} more" if len(numbers) > 20 else "")


def _report_lines(
    sent: list[dict[str, Any]],
    failed: list[dict[str, Any]],
    as_json: bool,
    *,
    stop: _Stopped | None = None,
    last: int = 0,
) -> None:
    sent.sort(key=lambda item: int(item["line"]))
    failed.sort(key=lambda item: int(item["line"]))
    if as_json:
        report: dict[str, Any] = {"sent": sent, "failed": failed}
        if stop is not None:
            report.update(
                error=str(stop), outcome_unknown=stop.unknown, not_sent=stop.unsent, not_read_after=last
            )
        print_json(report)
    else:
        click.echo(f"sent {len(sent)} messages")
    for item in failed:
        click.echo(f"smq: line {item['line']} not sent: {item['code']}: {item['message']}", err=True)


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
@redis_options
@json_option
def receive(
    queue_name: str,
    max_messages: int,
    visibility_timeout: int | None,
    wait_time: int | None,
    delete: bool,
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Receive messages from QUEUE: id, receipt handle, receive count, body.

    Keep the receipt handle to delete a message (smq delete) or change its
    visibility; without --delete it comes back when its timeout runs out.
    """
    with open_client(redis_url, cluster, data_dir) as client:
        queue = client.get_queue(queue_name)
        messages = queue.receive(
            max_messages, visibility_timeout=visibility_timeout, wait_time_seconds=wait_time
        )
        if as_json:
            print_json(
                [
                    {
                        "message_id": m.message_id,
                        "receipt_handle": m.receipt_handle,
                        "receive_count": m.receive_count,
                        "body": m.body,
                        "attributes": attributes_json(m.attributes),
                        "sent_at": m.sent_at,
                        "first_received_at": m.first_received_at,
                        "md5_of_body": m.md5_of_body,
                    }
                    for m in messages
                ]
            )
        elif messages:
            print_table(
                ["id", "receipt", "receives", "body"],
                [(m.message_id, m.receipt_handle, m.receive_count, preview(m.body, 60)) for m in messages],
            )
        else:
            click.echo("no messages", err=True)
        if delete:
            kept = [m.message_id for m in messages if not queue.delete(m)]
            if kept:
                fail(f"not deleted (received again since?): {', '.join(kept)}")


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
