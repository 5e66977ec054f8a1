"""Message move tasks: StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask.

A task is a record in Redis; the moving is done by whichever ``smq serve``
process holds its lease (see ``smq.operations._move_tasks``), so a task outlives the
process that started it.

A TaskHandle is, as in SQS, base64 of a JSON document naming the task by a
UUID and its source queue's ARN (``{"taskId": ..., "sourceArn": ...}``). The
core names a task by its own handle (the source queue and the task's token);
handles of the earlier forms, which this service gave out before (the core's
handle, and JSON with the token as taskId), are still accepted by
CancelMessageMoveTask.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
from typing import Any

from .._errors import MoveTaskActive, MoveTaskNotFound, QueueDoesNotExist, SmqError
from ..operations._move_tasks import RUNNING, TOKEN, MoveTask, make_handle, parse_handle
from ..operations._sources import is_dead_letter_queue
from . import _params as p
from ._context import Context
from ._errors import SqsError, from_core

Result = dict[str, Any]

_ACTIVE = (
    "There is already a task running. Only one active task is allowed for a source queue arn at a given time."
)


# How long StartMessageMoveTask waits for the runner's first pass: a small task is done
# when it answers; a big or rate-limited one goes on in the background.
_START_WAIT = 1.0
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_LOW_62 = (1 << 62) - 1
_CHECK_MASK = (1 << 26) - 1


def _missing(parameter: str) -> SqsError:
    return SqsError(
        "ResourceNotFoundException",
        f"The resource that you specified for the {parameter} parameter doesn't exist.",
    )


def _invalid_handle() -> SqsError:
    return SqsError("InvalidParameterValue", "Value for parameter TaskHandle is invalid.")


def task_id(token: str) -> str:
    """The UUID SQS's clients see as the id of the task the core names ``token``.

    The core's token is 12 random bytes (16 base64 characters, a fixed width its Lua
    layout relies on); the id carries them, and 26 bits of their digest, in the 122
    free bits of a version 4 UUID, so it reads as SQS's ids do and maps back.
    """
    payload = int.from_bytes(base64.urlsafe_b64decode(token), "big")
    free = payload << 26 | _check_bits(payload)
    n = (free >> 74) << 80 | 4 << 76 | ((free >> 62) & 0xFFF) << 64 | 0b10 << 62 | free & _LOW_62
    return str(uuid.UUID(int=n))


def _token_of_id(task_id: str) -> str | None:
    """The core's token of a task id (None if no task of this service has that id)."""
    if TOKEN.fullmatch(task_id):
        return task_id  # handles given out before named the task by the token itself
    if not _UUID.fullmatch(task_id):
        return None
    n = uuid.UUID(task_id).int
    if (n >> 76) & 0xF != 4 or (n >> 62) & 0b11 != 0b10:
        return None
    free = (n >> 80) << 74 | ((n >> 64) & 0xFFF) << 62 | n & _LOW_62
    payload = free >> 26
    if free & _CHECK_MASK != _check_bits(payload):
        return None
    return base64.urlsafe_b64encode(payload.to_bytes(12, "big")).decode()


def _check_bits(payload: int) -> int:
    return int.from_bytes(hashlib.sha256(payload.to_bytes(12, "big")).digest()[:4], "big") >> 6


def task_handle(ctx: Context, source: str, token: str) -> str:
    """The TaskHandle SQS's clients see for task ``token`` of queue ``source``."""
    document = json.dumps({"taskId": task_id(token), "sourceArn": ctx.arn_of(source)}, separators=(",", ":"))
    return base64.b64encode(document.encode()).decode()


def parse_task_handle(ctx: Context, handle: str) -> tuple[str, str | None]:
    """The (source queue, task token) of a TaskHandle, in either form: the token is None
    when the handle is well formed but names no task this service gave out. The source may
    be another account's queue: the caller checks it exists, then that it is the sender's."""
    try:
        document = json.loads(base64.b64decode(handle, validate=True))
    except (binascii.Error, ValueError, RecursionError):
        document = None
    if isinstance(document, dict):
        given, arn = document.get("taskId"), document.get("sourceArn")
        if not isinstance(given, str) or not isinstance(arn, str) or not given:
            raise _invalid_handle()
        try:
            source = ctx.name_of_arn(arn, any_account=True)
        except SqsError:
            raise _invalid_handle() from None
        return source, _token_of_id(given)
    try:
        return parse_handle(handle)  # the earlier form: the core's own handle
    except MoveTaskNotFound:
        raise _invalid_handle() from None


def _token(task: MoveTask) -> str:
    return parse_handle(task.handle)[1]


def _entry(ctx: Context, task: MoveTask) -> Result:
    entry: Result = {
        "Status": task.status,
        "SourceArn": ctx.arn_of(task.source),
        "ApproximateNumberOfMessagesMoved": task.moved,
        "ApproximateNumberOfMessagesToMove": task.to_move,
        "StartedTimestamp": round(task.started_at * 1000),
    }
    if task.status == RUNNING:
        entry["TaskHandle"] = task_handle(ctx, task.source, _token(task))
    if task.destination is not None:
        entry["DestinationArn"] = ctx.arn_of(task.destination)
    if task.max_per_second is not None:
        entry["MaxNumberOfMessagesPerSecond"] = task.max_per_second
    if task.failure_reason:
        entry["FailureReason"] = task.failure_reason
    return entry


def _error(error: SmqError) -> SqsError:
    if isinstance(error, QueueDoesNotExist):
        return _missing("SourceArn")
    if isinstance(error, MoveTaskActive):
        return SqsError("InvalidParameterValue", _ACTIVE)
    if isinstance(error, MoveTaskNotFound):
        return SqsError("ResourceNotFoundException", "Task does not exist.")
    return from_core(error)


async def start_message_move_task(ctx: Context, params: Result) -> Result:
    source = ctx.name_of_arn(p.required_string(params, "SourceArn"))
    destination_arn = p.string(params, "DestinationArn")
    destination = ctx.name_of_arn(destination_arn) if destination_arn else None
    rate = p.integer(params, "MaxNumberOfMessagesPerSecond", 1, 500, reason="Must be between 1 and 500.")
    if not await ctx.call(ctx.client.queue_exists, source):
        raise _missing("SourceArn")
    if not await ctx.call(is_dead_letter_queue, ctx.client, source):
        raise SqsError("InvalidParameterValue", "Source queue must be configured as a Dead Letter Queue.")
    if destination is not None and ctx.region_of(destination) != ctx.region_of(source):
        raise SqsError(
            "InvalidParameterValue", "The destination queue must be in the region of the source queue."
        )
    if destination is not None and not await ctx.call(ctx.client.queue_exists, destination):
        raise _missing("DestinationArn")
    try:
        task = await ctx.call(
            lambda: ctx.client.start_move_task(source, destination=destination, max_per_second=rate)
        )
    except SmqError as error:
        raise _error(error) from None
    await ctx.kick_move_tasks(_START_WAIT)
    return {"TaskHandle": task_handle(ctx, source, _token(task))}


async def list_message_move_tasks(ctx: Context, params: Result) -> Result:
    source = ctx.name_of_arn(p.required_string(params, "SourceArn"))
    limit = p.integer(params, "MaxResults", 1, 10, reason="Must be between 1 and 10.") or 1
    try:
        tasks = await ctx.call(lambda: ctx.client.list_move_tasks(source, limit=limit))
    except SmqError as error:
        raise _error(error) from None
    return {"Results": [_entry(ctx, task) for task in tasks]}


async def cancel_message_move_task(ctx: Context, params: Result) -> Result:
    source, token = parse_task_handle(ctx, p.required_string(params, "TaskHandle"))
    if not await ctx.call(ctx.client.queue_exists, source):
        raise _missing("SourceArn")  # in any account, as SQS answers it
    if ctx.account_of(source) != ctx.account:
        raise _invalid_handle()  # another account's task: only its owner may cancel it
    if token is None:
        raise SqsError("ResourceNotFoundException", "Task does not exist.")
    try:
        task = await ctx.call(ctx.client.cancel_move_task, make_handle(source, token))
    except SmqError as error:
        raise _error(error) from None
    return {"ApproximateNumberOfMessagesMoved": task.moved}
