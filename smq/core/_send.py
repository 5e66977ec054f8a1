"""Sending: check each message, store it with one script call, report per entry.

A standard queue's messages join its visible list (``send.lua``); a FIFO
queue's join their group (``send_fifo.lua``). Both store a message once per
deduplication id within 5 minutes; on a standard queue the id is optional
and an smq extension (SQS refuses it there, and so does smq's HTTP API).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._errors import (
    BatchRequestTooLong,
    InvalidParameter,
    MissingParameter,
    SmqError,
    Status,
    error_for,
)
from ._batch import MAX_BATCH_BYTES, failure
from ._config import check_int
from ._ids import message_id, new_ids
from ._message import (
    SENDER_ATTRIBUTE,
    TRACE_ATTRIBUTE,
    BatchFailure,
    BatchResult,
    MessageAttribute,
    SendEntry,
    SendResult,
    attributes_size,
    check_body,
    check_fifo_id,
    check_sender_id,
    check_trace_header,
    encode_payload,
    fifo_header,
    new_send_result,
    to_attributes,
)
from ._scripts import text
from ._steps import ScriptCall, Steps, drive

if TYPE_CHECKING:
    from ._backend import QueueRef


def _script_args(
    queue: QueueRef, entry: SendEntry, stored_id: str
) -> tuple[int, dict[str, MessageAttribute], list[Any]]:
    """(size, typed attributes, the script's arguments) for one message; raises what is wrong with it."""
    body = check_body(entry.body)
    attributes = to_attributes(entry.attributes)
    size = len(body) + attributes_size(attributes) if attributes else len(body)
    stored = attributes  # what the payload keeps: the attributes, and the trace header (not counted)
    if entry.trace_header is not None:
        stored = {
            **stored,
            TRACE_ATTRIBUTE: MessageAttribute("String", check_trace_header(entry.trace_header)),
        }
    if entry.sender_id is not None:
        stored = {**stored, SENDER_ATTRIBUTE: MessageAttribute("String", check_sender_id(entry.sender_id))}
    group = entry.message_group_id
    if group is not None:
        check_fifo_id("MessageGroupId", group)
    if not queue.fifo:
        given = entry.deduplication_id
        if given is not None:
            check_fifo_id("MessageDeduplicationId", given)
        delay_ms = -1
        if entry.delay_seconds is not None:
            delay_ms = check_int("delay_seconds", entry.delay_seconds, 0, 900) * 1000
        header = fifo_header(group or "", given or "") if group is not None or given is not None else b""
        payload = encode_payload(body, stored, header)
        return size, attributes, [stored_id, delay_ms, size, payload, given or ""]
    if group is None:
        raise MissingParameter("The request must contain the parameter MessageGroupId.")
    if entry.delay_seconds not in (None, 0):
        # SQS takes 0 (the queue's DelaySeconds applies) and refuses any other value.
        raise InvalidParameter(
            f"Value {entry.delay_seconds} for parameter DelaySeconds is invalid. Reason: The request "
            "include parameter that is not valid for this queue type."
        )
    given = entry.deduplication_id
    if given is not None:
        check_fifo_id("MessageDeduplicationId", given)
    digest = hashlib.sha256(body).hexdigest()
    payload = encode_payload(body, stored, fifo_header(group, given or digest))
    return size, attributes, [stored_id, size, payload, group, given or "", digest]


def send_messages(queue: QueueRef, entries: Sequence[SendEntry], *, single: bool) -> BatchResult[SendResult]:
    """Send checked batch entries, each succeeding or failing on its own; ``single`` raises instead."""
    return drive(queue._client, send_steps(queue, entries, single=single))


def send_steps(
    queue: QueueRef, entries: Sequence[SendEntry], *, single: bool
) -> Steps[BatchResult[SendResult]]:
    """``send_messages`` as steps (see ``smq.core._steps``)."""
    client = queue._client
    fifo = queue.fifo
    args: list[Any] = [client._now_arg(), queue.keys.wake_channel, 0]
    pending: list[tuple[SendEntry, str, dict[str, MessageAttribute]]] = []  # (entry, message id, ...)
    failed: list[BatchFailure] = []
    total = 0
    for entry, (stored_id, shown_id) in zip(entries, new_ids(len(entries)), strict=True):
        try:
            if (
                entry.attributes is None
                and entry.delay_seconds is None
                and entry.message_group_id is None
                and entry.deduplication_id is None
                and entry.trace_header is None
                and entry.sender_id is None
                and not fifo
            ):
                # A body alone, to a standard queue: what _script_args makes of it, with less asked.
                body = check_body(entry.body)
                size = len(body)
                attributes: dict[str, MessageAttribute] = {}
                args += (stored_id, -1, size, b"0:" + body, "")
            else:
                size, attributes, more = _script_args(queue, entry, stored_id)
                args += more
        except SmqError as error:
            if single:
                raise
            failed.append(failure(entry.id, error))
            continue
        total += size
        pending.append((entry, shown_id, attributes))
    if total > MAX_BATCH_BYTES:
        if single:
            raise error_for(Status.E_TOO_LONG, queue.name, MAX_BATCH_BYTES)
        raise BatchRequestTooLong(
            f"Batch requests cannot be longer than {MAX_BATCH_BYTES} bytes. You have sent {total} bytes."
        )
    if not pending:
        return BatchResult([], failed)
    args[2] = len(pending)
    # Per message: status, stored id (and on FIFO queues the sequence number), read only as needed.
    if fifo:
        reply = yield ScriptCall("send_fifo", queue.keys, args, queue.name)
        stride = 3
    else:
        reply = yield ScriptCall("send", queue.keys, args, queue.name)
        stride = 2
    ok, duplicated = int(Status.OK), int(Status.DUPLICATE)
    make = new_send_result
    statuses = reply[1::stride]
    if not fifo and len(statuses) == len(pending) and statuses.count(ok) == len(statuses):
        # Each stored (the usual answer of a standard queue): nothing more to read.
        return BatchResult(
            [
                make(
                    shown_id,
                    entry.body,
                    attributes,
                    "" if single else entry.id,
                    None,
                    False,
                    entry.trace_header,
                )
                for entry, shown_id, attributes in pending
            ],
            failed,
        )
    successful: list[SendResult] = []
    at = 1
    for (entry, shown_id, attributes), status in zip(pending, statuses, strict=True):
        sequence = text(reply[at + 2]) if fifo else ""
        if status == ok or status == duplicated:
            duplicate = status == duplicated
            successful.append(
                make(
                    message_id(text(reply[at + 1])) if duplicate else shown_id,
                    entry.body,
                    attributes,
                    "" if single else entry.id,
                    sequence or None,
                    duplicate,
                    entry.trace_header,
                )
            )
        else:
            # E_TOO_LONG names the queue's limit in place of the id (or sequence number).
            refused = error_for(status, queue.name, sequence or text(reply[at + 1]))
            if single:
                raise refused
            failed.append(failure(entry.id, refused))
        at += stride
    return BatchResult(successful, failed)
