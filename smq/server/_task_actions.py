"""Message move tasks: StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask.

A task is a record in Redis; the moving is done by whichever ``smq serve``
process holds its lease (see ``smq._move_tasks``), so a task outlives the
process that started it.
"""

from __future__ import annotations

from typing import Any

from .._errors import MoveTaskActive, QueueDoesNotExist, SmqError
from .._move_tasks import RUNNING, MoveTask
from . import _params as p
from ._context import Context
from ._errors import SqsError, from_core

Result = dict[str, Any]


def _entry(ctx: Context, task: MoveTask) -> Result:
    entry: Result = {
        "Status": task.status,
        "SourceArn": ctx.arn_of(task.source),
        "ApproximateNumberOfMessagesMoved": task.moved,
        "ApproximateNumberOfMessagesToMove": task.to_move,
        "StartedTimestamp": round(task.started_at * 1000),
    }
    if task.status == RUNNING:
        entry["TaskHandle"] = task.handle
    if task.destination is not None:
        entry["DestinationArn"] = ctx.arn_of(task.destination)
    if task.max_per_second is not None:
        entry["MaxNumberOfMessagesPerSecond"] = task.max_per_second
    if task.failure_reason:
        entry["FailureReason"] = task.failure_reason
    return entry


def _error(error: SmqError) -> SqsError:
    if isinstance(error, QueueDoesNotExist):
        return SqsError("ResourceNotFoundException", str(error))
    if isinstance(error, MoveTaskActive):
        return SqsError(
            "UnsupportedOperation", f"Only one active message movement task is supported per queue: {error}"
        )
    return from_core(error)


async def start_message_move_task(ctx: Context, params: Result) -> Result:
    source = ctx.name_of_arn(p.required_string(params, "SourceArn"))
    destination_arn = p.string(params, "DestinationArn")
    destination = ctx.name_of_arn(destination_arn) if destination_arn else None
    rate = p.integer(params, "MaxNumberOfMessagesPerSecond", 1, 500)
    if destination is not None and ctx.region_of(destination) != ctx.region_of(source):
        raise SqsError(
            "InvalidParameterValue", "The destination queue must be in the region of the source queue."
        )
    if destination is not None and not await ctx.call(ctx.client.queue_exists, destination):
        raise SqsError("ResourceNotFoundException", f"The destination queue {destination!r} does not exist.")
    try:
        task = await ctx.call(
            lambda: ctx.client.start_move_task(source, destination=destination, max_per_second=rate)
        )
    except SmqError as error:
        raise _error(error) from None
    ctx.kick_move_tasks()
    return {"TaskHandle": task.handle}


async def list_message_move_tasks(ctx: Context, params: Result) -> Result:
    source = ctx.name_of_arn(p.required_string(params, "SourceArn"))
    limit = p.integer(params, "MaxResults", 1, 10) or 1
    try:
        tasks = await ctx.call(lambda: ctx.client.list_move_tasks(source, limit=limit))
    except SmqError as error:
        raise _error(error) from None
    return {"Results": [_entry(ctx, task) for task in tasks]}


async def cancel_message_move_task(ctx: Context, params: Result) -> Result:
    handle = p.required_string(params, "TaskHandle")
    try:
        task = await ctx.call(ctx.client.cancel_move_task, handle)
    except SmqError as error:
        raise _error(error) from None
    return {"ApproximateNumberOfMessagesMoved": task.moved}
