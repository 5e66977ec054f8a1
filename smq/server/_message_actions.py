"""Message actions: send, receive, change visibility, delete (single and batch)."""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import ReceiptHandleIsInvalid, SmqError
from ..client._queue import MAX_WAIT_SECONDS, Queue
from ..core._batch import MAX_BATCH, check_batch
from ..core._config import MAX_VISIBILITY_TIMEOUT
from ..core._digest import md5_of_attributes
from ..core._message import (
    BatchFailure,
    BatchResult,
    ChangeEntry,
    DeleteEntry,
    Message,
    MessageAttribute,
    SendEntry,
    SendResult,
    check_fifo_id,
)
from ..core._steps import Steps
from ..operations._sources import dead_letter_origins
from . import _params as p
from ._context import Context
from ._errors import NO_QUEUE, SqsError, code_for, from_core, public_text

Result = dict[str, Any]

_SYSTEM_ATTRIBUTES = (
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
)
_GROUP_ATTRIBUTES = ("MessageGroupId", "MessageDeduplicationId", "SequenceNumber")
_NO_GROUP = "The request must contain the parameter MessageGroupId."
_OPTIONAL_ATTRIBUTES = ("AWSTraceHeader", "DeadLetterQueueSourceArn")
_KNOWN_SYSTEM_ATTRIBUTES = {"All", *_SYSTEM_ATTRIBUTES, *_GROUP_ATTRIBUTES, *_OPTIONAL_ATTRIBUTES}
# The members of a send (or a batch entry) that names no more than its body.
_PLAIN_SEND = frozenset({"QueueUrl", "Id", "MessageBody"})


# -- send -------------------------------------------------------------------------


def _message_attributes(raw: Any) -> dict[str, MessageAttribute]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SqsError("InvalidParameterValue", "MessageAttributes must be a map.")
    attributes: dict[str, MessageAttribute] = {}
    for name, value in raw.items():
        if not isinstance(value, dict):
            raise SqsError("InvalidParameterValue", f"Message attribute {name!r} must be an object.")
        data_type = value.get("DataType")
        if not isinstance(data_type, str) or not data_type:
            raise SqsError(
                "InvalidParameterValue",
                f"The message attribute '{name}' must contain non-empty message attribute type.",
            )
        if value.get("StringListValues") or value.get("BinaryListValues"):
            raise SqsError(
                "InvalidParameterValue",
                f"Message attribute '{name}': StringListValues and BinaryListValues are not supported.",
            )
        if data_type.startswith("Binary"):
            encoded = value.get("BinaryValue")
            if not isinstance(encoded, str):
                raise SqsError(
                    "InvalidParameterValue",
                    f"The message attribute '{name}' with type 'Binary' must use field 'Binary'.",
                )
            try:
                attributes[name] = MessageAttribute(data_type, base64.b64decode(encoded, validate=True))
            except (binascii.Error, ValueError):
                raise SqsError(
                    "InvalidParameterValue", f"Message attribute '{name}': BinaryValue is not base64."
                ) from None
        else:
            text = value.get("StringValue")
            if not isinstance(text, str):
                raise SqsError(
                    "InvalidParameterValue",
                    f"The message attribute '{name}' with type '{data_type}' must use field 'String'.",
                )
            attributes[name] = MessageAttribute(data_type, text)
    return attributes


def _trace_header(params: Mapping[str, Any], from_request: str | None) -> str | None:
    """AWSTraceHeader: MessageSystemAttributes', else the request's X-Amzn-Trace-Id header."""
    raw = params.get("MessageSystemAttributes")
    if raw is None:
        return from_request
    if not isinstance(raw, dict):
        raise SqsError("InvalidParameterValue", "MessageSystemAttributes must be a map.")
    for name in raw:
        if name != "AWSTraceHeader":
            raise SqsError("InvalidParameterValue", f"Message system attribute name '{name}' is invalid.")
    value = raw.get("AWSTraceHeader")
    if value is None:
        return from_request
    if not isinstance(value, dict) or value.get("DataType") != "String":
        raise SqsError(
            "InvalidParameterValue",
            "The message system attribute 'AWSTraceHeader' must be of type 'String'.",
        )
    text = value.get("StringValue")
    if not isinstance(text, str) or not text:
        raise SqsError(
            "InvalidParameterValue",
            "Message (system) attribute 'AWSTraceHeader' must contain a non-empty value of type 'String'.",
        )
    return text


def _send_entry(
    entry_id: str, params: Mapping[str, Any], fifo: bool, trace_header: str | None = None, sender: str = ""
) -> SendEntry:
    if not fifo and params.keys() <= _PLAIN_SEND:
        # The common send to a standard queue, a body and nothing else: what the checks
        # below come to for it, without them.
        body = params.get("MessageBody")
        if type(body) is str and body:
            return SendEntry(entry_id, body, None, {}, None, None, trace_header, sender or None)
    body = p.string(params, "MessageBody", required=True)
    if body == "":
        raise SqsError("MissingParameter", "The request must contain the parameter MessageBody.")
    deduplication_id = p.string(params, "MessageDeduplicationId")
    if deduplication_id is not None and not fifo:
        raise SqsError(
            "InvalidParameterValue",
            "The request includes a parameter that is not valid for this queue type: MessageDeduplicationId.",
        )
    group = p.string(params, "MessageGroupId")
    if fifo and group is None:
        raise SqsError("MissingParameter", _NO_GROUP)
    delay = p.integer(params, "DelaySeconds", 0, 900)
    if fifo and delay:  # 0 is accepted: the queue's delay applies
        raise SqsError(
            "InvalidParameterValue",
            f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request include parameter "
            "that is not valid for this queue type.",
        )
    # On a standard queue MessageGroupId is kept and returned (it orders nothing there).
    return SendEntry(
        entry_id,
        body or "",
        delay,
        _message_attributes(params.get("MessageAttributes")),
        group,
        deduplication_id,
        _trace_header(params, trace_header),
        sender or None,
    )


def _send_fields(result: SendResult, fields: Result | None = None) -> Result:
    """The reply's fields of one message sent, added to ``fields`` (a batch entry's Id)."""
    if fields is None:
        fields = {}
    fields["MessageId"] = result.message_id
    fields["MD5OfMessageBody"] = result.md5_of_body
    digest = result.md5_of_message_attributes
    if digest:
        fields["MD5OfMessageAttributes"] = digest
    system_digest = result.md5_of_message_system_attributes
    if system_digest:
        fields["MD5OfMessageSystemAttributes"] = system_digest
    if result.sequence_number is not None:
        fields["SequenceNumber"] = result.sequence_number
    return fields


def _core_call(error: SmqError, context: str = "") -> SqsError:
    converted = from_core(error)
    if context == "send" and converted.code in ("InvalidAttributeName", "InvalidAttributeValue"):
        # Message attributes are parameters of the send, not queue attributes.
        return SqsError("InvalidParameterValue", converted.message)
    return converted


async def send_message(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    entry = _send_entry("single", params, queue.fifo, ctx.trace_header, ctx.sender)
    try:
        sent = await ctx.drive(queue._send_steps([entry], single=True))
    except SmqError as error:
        raise _core_call(error, "send") from None
    return _send_fields(sent.successful[0])


def _batch_ids(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    if len(entries) > MAX_BATCH:
        raise SqsError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}.",
        )
    ids: list[str] = []
    for entry in entries:
        entry_id = entry.get("Id")
        ids.append(entry_id if type(entry_id) is str else p.required_string(entry, "Id"))
    check_batch(ids)
    return ids


def _failure(failure: BatchFailure, context: str = "") -> Result:
    code = code_for(failure.code)
    if context == "send" and code in ("InvalidAttributeName", "InvalidAttributeValue"):
        code = "InvalidParameterValue"
    message = failure.message
    if not failure.sender_fault and code in ("ServiceUnavailable", "InternalFailure"):
        message = public_text(code, message)  # the backend's details are for the log
    return {"Id": failure.id, "SenderFault": failure.sender_fault, "Code": code, "Message": message}


def _entry_failure(entry_id: str, error: SqsError) -> Result:
    return {"Id": entry_id, "SenderFault": error.sender_fault, "Code": error.code, "Message": error.message}


async def send_message_batch(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    raw = p.entries(params, "SendMessageBatchRequestEntry")
    ids = _batch_ids(raw)
    entries: list[SendEntry] = []
    failed: list[Result] = []
    for entry_id, entry in zip(ids, raw, strict=True):
        try:
            entries.append(_send_entry(entry_id, entry, queue.fifo, ctx.trace_header, ctx.sender))
        except SqsError as error:
            if queue.fifo and error.message == _NO_GROUP:
                # As SQS: a FIFO entry without its group fails the whole request, and
                # as InvalidParameterValue (a single send's is MissingParameter).
                raise SqsError("InvalidParameterValue", _NO_GROUP) from None
            failed.append(_entry_failure(entry_id, error))
    successful: list[Result] = []
    if entries:
        try:
            # The batch as a whole is checked (_batch_ids): the core's own check would repeat it.
            result = await ctx.drive(queue._send_steps(entries, single=False))
        except SmqError as error:
            raise _core_call(error, "send") from None
        successful = [_send_fields(r, {"Id": r.id}) for r in result.successful]
        failed += [_failure(f, "send") for f in result.failed]
    return {"Successful": successful, "Failed": failed}


# -- receive ----------------------------------------------------------------------


def _wanted_attribute_names(params: Mapping[str, Any]) -> set[str]:
    names = set(p.string_list(params, "AttributeNames")) | set(
        p.string_list(params, "MessageSystemAttributeNames")
    )
    unknown = names - _KNOWN_SYSTEM_ATTRIBUTES
    if unknown:
        raise SqsError("InvalidAttributeName", f"Unknown Attribute {sorted(unknown)[0]}.")
    return set(_KNOWN_SYSTEM_ATTRIBUTES) - {"All"} if "All" in names else names


def _attribute_filter(params: Mapping[str, Any]) -> list[str]:
    names = p.string_list(params, "MessageAttributeNames")
    for name in names:
        if not re.fullmatch(r"[\w.-]{1,256}(\.\*)?|\.\*|\*|All", name):
            raise SqsError("InvalidParameterValue", f"Message attribute name {name!r} is invalid.")
    return names


def _selected(attributes: Mapping[str, MessageAttribute], wanted: list[str]) -> dict[str, MessageAttribute]:
    if not wanted or not attributes:
        return {}
    if "All" in wanted or ".*" in wanted or "*" in wanted:
        return dict(attributes)
    # As SQS reads a prefix wildcard: the prefix is the text before ".*" ("Hel.*" selects "Help.Me").
    prefixes = tuple(name[:-2] for name in wanted if name.endswith(".*"))
    exact = set(wanted)
    return {n: a for n, a in attributes.items() if n in exact or (prefixes and n.startswith(prefixes))}


def _attribute_value(attribute: MessageAttribute) -> Result:
    if isinstance(attribute.value, bytes):
        return {"DataType": attribute.data_type, "BinaryValue": base64.b64encode(attribute.value).decode()}
    return {"DataType": attribute.data_type, "StringValue": attribute.value}


def _message(
    ctx: Context, message: Message, system: set[str], wanted: list[str], dead_letter_source: str | None
) -> Result:
    out: Result = {
        "MessageId": message.message_id,
        "ReceiptHandle": message.receipt_handle,
        "MD5OfBody": message.md5_of_body,
        "Body": message.body,
    }
    if system:
        values = {
            # Who sent it: the signing key, else (no keys, or sent from Python) the queue's account.
            "SenderId": message.sender_id or ctx.account_of(message.queue),
            "SentTimestamp": str(round(message.sent_at * 1000)),
            "ApproximateReceiveCount": str(message.receive_count),
            "ApproximateFirstReceiveTimestamp": str(round(message.first_received_at * 1000)),
        }
        group_values = {
            "MessageGroupId": message.message_group_id,
            "MessageDeduplicationId": message.deduplication_id,
            "SequenceNumber": message.sequence_number,
        }
        values.update({name: value for name, value in group_values.items() if value is not None})
        if message.trace_header is not None:
            values["AWSTraceHeader"] = message.trace_header
        if dead_letter_source is not None:
            values["DeadLetterQueueSourceArn"] = ctx.arn_of(dead_letter_source)
        out["Attributes"] = {
            name: values[name]
            for name in (*_SYSTEM_ATTRIBUTES, *_GROUP_ATTRIBUTES, *_OPTIONAL_ATTRIBUTES)
            if name in system and name in values
        }
    attributes = _selected(message.attributes, wanted)
    if attributes:
        out["MD5OfMessageAttributes"] = md5_of_attributes(attributes)
        out["MessageAttributes"] = {name: _attribute_value(a) for name, a in attributes.items()}
    return out


async def receive_message(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    max_messages = p.integer(params, "MaxNumberOfMessages", 1, MAX_BATCH) or 1
    visibility = p.integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY_TIMEOUT)
    wait = p.integer(
        params,
        "WaitTimeSeconds",
        0,
        MAX_WAIT_SECONDS,
        reason=f"Must be >= 0 and <= {MAX_WAIT_SECONDS}, if provided.",
    )
    attempt_id = p.string(params, "ReceiveRequestAttemptId") or ""  # FIFO only: ignored on standard queues
    if attempt_id and queue.fifo:
        try:
            check_fifo_id("ReceiveRequestAttemptId", attempt_id)
        except SmqError as error:
            raise from_core(error) from None
    system = _wanted_attribute_names(params)
    wanted = _attribute_filter(params)
    visibility_ms = -1 if visibility is None else visibility * 1000
    ctx.note_receive(queue.name)  # a consumer even when the queue is empty
    messages = await ctx.polls.receive(
        queue, max_messages, visibility_ms, wait, attempt_id if queue.fifo else ""
    )
    if not messages:
        return {}  # as SQS: no Messages member when there are none
    sources: dict[str, str] = {}
    if "DeadLetterQueueSourceArn" in system:
        sources = await ctx.call(dead_letter_origins, ctx.client, queue.name, messages)
    return {"Messages": [_message(ctx, m, system, wanted, sources.get(m.message_id)) for m in messages]}


# -- visibility and delete --------------------------------------------------------

# Why a receipt cannot act, in the live service's words (the text names the handle).
_RECEIPT_REASONS = {
    "MessageNotInflight": "Message does not exist or is not available for visibility timeout change.",
    "ReceiptExpired": "The receipt handle has expired.",
}


def _receipt_error(kind: str, receipt: str, timeout: int | None = None) -> SqsError | None:
    if kind == "VisibilityCeilingExceeded" and timeout is not None:
        return SqsError(
            "InvalidParameterValue",
            f"Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout "
            f"for the message is beyond the limit [{MAX_VISIBILITY_TIMEOUT} seconds]",
        )
    reason = _RECEIPT_REASONS.get(kind)
    if reason is None:
        return None
    return SqsError(
        "InvalidParameterValue", f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: {reason}"
    )


async def _by_receipt(
    ctx: Context, queue: Queue, receipt: str, steps: Steps[Any], timeout: int | None = None
) -> None:
    try:
        await ctx.drive(steps)
    except SmqError as error:
        if isinstance(error, ReceiptHandleIsInvalid) and not await ctx.call(
            ctx.client.queue_exists, queue.name
        ):
            # As SQS: the queue is checked before the receipt (the malformed one never reached it).
            raise SqsError("QueueDoesNotExist", NO_QUEUE) from None
        raise (_receipt_error(type(error).__name__, receipt, timeout) or from_core(error)) from None


async def delete_message(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    receipt = p.required_string(params, "ReceiptHandle")
    await _by_receipt(ctx, queue, receipt, queue._delete_steps([DeleteEntry("single", receipt)], single=True))
    return {}


async def change_message_visibility(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    receipt = p.required_string(params, "ReceiptHandle")
    timeout = p.integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY_TIMEOUT, required=True)
    assert timeout is not None
    change = ChangeEntry("single", receipt, timeout)
    await _by_receipt(ctx, queue, receipt, queue._change_steps([change], single=True), timeout)
    return {}


async def delete_message_batch(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    raw = p.entries(params, "DeleteMessageBatchRequestEntry")
    ids = _batch_ids(raw)
    entries: list[DeleteEntry] = []
    failed: list[Result] = []
    for entry_id, entry in zip(ids, raw, strict=True):
        try:
            receipt = entry.get("ReceiptHandle")
            if type(receipt) is not str:
                receipt = p.required_string(entry, "ReceiptHandle")
            entries.append(DeleteEntry(entry_id, receipt))
        except SqsError as error:
            failed.append(_entry_failure(entry_id, error))
    return await _batch(ctx, functools.partial(queue._delete_steps, single=False), entries, failed)


async def change_message_visibility_batch(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    raw = p.entries(params, "ChangeMessageVisibilityBatchRequestEntry")
    ids = _batch_ids(raw)
    entries: list[ChangeEntry] = []
    failed: list[Result] = []
    for entry_id, entry in zip(ids, raw, strict=True):
        try:
            receipt = p.required_string(entry, "ReceiptHandle")
            timeout = p.integer(entry, "VisibilityTimeout", 0, MAX_VISIBILITY_TIMEOUT, required=True)
            assert timeout is not None
            entries.append(ChangeEntry(entry_id, receipt, timeout))
        except SqsError as error:
            failed.append(_entry_failure(entry_id, error))
    return await _batch(ctx, functools.partial(queue._change_steps, single=False), entries, failed)


async def _batch(
    ctx: Context,
    steps: Callable[[list[Any]], Steps[BatchResult[str]]],
    entries: list[Any],
    failed: list[Result],
) -> Result:
    """Run checked entries (``_batch_ids`` checked the batch: ``steps`` check no more)."""
    successful: list[Result] = []
    if entries:
        result = await ctx.drive(steps(entries))
        successful = [{"Id": entry_id} for entry_id in result.successful]
        by_id = {entry.id: entry for entry in entries}
        for failure in result.failed:
            entry = by_id[failure.id]
            error = _receipt_error(
                failure.code, entry.receipt_handle, getattr(entry, "visibility_timeout", None)
            )
            failed.append(_entry_failure(failure.id, error) if error else _failure(failure))
    return {"Successful": successful, "Failed": failed}
