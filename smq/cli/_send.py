"""``smq send``: one message, a file, or each line of stdin (in batches of 10)."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click

from .._errors import BatchRequestTooLong, OutcomeUnknown, SmqError
from ..client._queue import Queue
from ..core._batch import MAX_BATCH
from ..core._message import SendEntry, SendResult
from ._base import fail, main
from ._connect import open_client, redis_options
from ._output import json_option, print_json


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
@click.option(
    "--group",
    metavar="GROUP",
    help="Message group id: required on a FIFO queue, whose messages keep their order within a group.",
)
@click.option(
    "--deduplication-id",
    metavar="ID",
    help="FIFO: a repeat within 5 minutes is accepted and not stored again; with --lines, "
    "each line's id is ID-<line number>. Needed unless the queue has content-based deduplication.",
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
    group: str | None,
    deduplication_id: str | None,
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
    smq send jobs.fifo 'resize image 42' --group images --deduplication-id resize-42

    With --lines, empty lines are skipped and messages go in batches of 10;
    lines that could not be sent are named on stderr and the exit status is 1.
    On a FIFO queue the sequence number is printed after the message id, and
    "duplicate" when the message was a repeat (the first one's id and number).
    """
    from_stdin = lines or body == "-"
    path = file
    given = sum([body is not None and body != "-", path is not None, from_stdin])
    if given != 1:
        raise click.UsageError("give one of: a BODY, --file PATH, or --lines (BODY '-')")
    attributes = _attributes(attribute)
    with open_client(redis_url, cluster, data_dir) as client:
        queue = client.get_queue(queue_name)
        _check_fifo_options(queue, group, delay, deduplication_id, from_stdin)
        if from_stdin:
            ids = _LineIds(group, deduplication_id)
            _send_lines(queue, sys.stdin, delay, attributes, as_json, ids)
            return
        if path is not None:
            try:
                body = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                fail(f"{path}: not UTF-8 text (a message body is text)")
        assert body is not None
        sent = queue.send(
            body,
            delay_seconds=delay,
            attributes=attributes,
            message_group_id=group,
            deduplication_id=deduplication_id,
        )
    if as_json:
        reply: dict[str, Any] = {"message_id": sent.message_id, "md5_of_body": sent.md5_of_body}
        if queue.fifo:
            reply.update(sequence_number=sent.sequence_number, duplicate=sent.duplicate)
        print_json(reply)
    elif queue.fifo:
        click.echo(_sent_fifo_text(sent))
    else:
        click.echo(sent.message_id)


def _sent_fifo_text(sent: SendResult) -> str:
    text = f"{sent.message_id}  sequence {sent.sequence_number}"
    return text + "  duplicate (sent within 5 minutes: not stored again)" if sent.duplicate else text


def _check_fifo_options(
    queue: Queue, group: str | None, delay: int | None, deduplication_id: str | None, lines: bool
) -> None:
    """Refuse, in one line naming the options, what the core would refuse of every message."""
    if not queue.fifo:
        if deduplication_id is not None:
            fail(
                f"queue {queue.name!r} is a standard queue: --deduplication-id applies to FIFO queues "
                "only (names ending in .fifo)"
            )
        return
    if group is None:
        fail(f"queue {queue.name!r} is a FIFO queue: give --group (the message group)")
    if delay is not None:
        fail(
            f"FIFO queue {queue.name!r} takes no per-message --delay; "
            "the queue's delay applies (smq queue set --delay)"
        )
    # For one message the core's own error says as much; for many, one line instead of one per line.
    if lines and deduplication_id is None and not queue.attributes().config.content_based_deduplication:
        fail(
            f"FIFO queue {queue.name!r} has no content-based deduplication: give --deduplication-id "
            "(each line's id is ID-<line number>)"
        )


@dataclass(frozen=True)
class _LineIds:
    """The message group and deduplication ids of the lines sent with --lines.

    Every line goes to the one group given. A line's deduplication id is
    ``ID-<line number>``, so that sending the same input again with the same
    ID within 5 minutes (say, after a failure that left lines "may or may not
    have been sent") stores no line twice.
    """

    group: str | None
    deduplication_id: str | None

    def entry(self, number: int, text: str, delay: int | None, attributes: dict[str, str]) -> SendEntry:
        dedup = None if self.deduplication_id is None else f"{self.deduplication_id}-{number}"
        return SendEntry(str(number), text, delay, attributes or None, self.group, dedup)


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
        fifo = queue.fifo
        sent += [
            {"line": int(ok.id), "message_id": ok.message_id}
            | ({"sequence_number": ok.sequence_number, "duplicate": ok.duplicate} if fifo else {})
            for ok in result.successful
        ]
        failed += [{"line": int(bad.id), "code": bad.code, "message": bad.message} for bad in result.failed]
        i += 1


def _send_lines(
    queue: Queue,
    stream: IO[str],
    delay: int | None,
    attributes: dict[str, str],
    as_json: bool,
    ids: _LineIds,
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
            entries = [ids.entry(n, text, delay, attributes) for n, text in batch]
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
        duplicates = sum(1 for item in sent if item.get("duplicate"))
        more = f" ({duplicates} duplicates, not stored again)" if duplicates else ""
        click.echo(f"sent {len(sent)} messages{more}")
    for item in failed:
        click.echo(f"smq: line {item['line']} not sent: {item['code']}: {item['message']}", err=True)
