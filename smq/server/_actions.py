"""The table of actions: SQS action name -> handler."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from . import _message_actions as m
from . import _permission_actions as perm
from . import _queue_actions as q
from . import _task_actions as t
from ._context import Context

Handler = Callable[[Context, dict[str, Any]], Awaitable[dict[str, Any]]]


def _batch(handler: Handler) -> Handler:
    """A batch action whose reply, as SQS's, omits an empty Successful or Failed list."""

    @functools.wraps(handler)
    async def batch(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        result = await handler(ctx, params)
        return {
            key: value for key, value in result.items() if value != [] or key not in ("Successful", "Failed")
        }

    return batch


ACTIONS: dict[str, Handler] = {
    "CreateQueue": q.create_queue,
    "GetQueueUrl": q.get_queue_url,
    "ListQueues": q.list_queues,
    "DeleteQueue": q.delete_queue,
    "PurgeQueue": q.purge_queue,
    "GetQueueAttributes": q.get_queue_attributes,
    "SetQueueAttributes": q.set_queue_attributes,
    "ListDeadLetterSourceQueues": q.list_dead_letter_source_queues,
    "TagQueue": q.tag_queue,
    "UntagQueue": q.untag_queue,
    "ListQueueTags": q.list_queue_tags,
    "AddPermission": perm.add_permission,
    "RemovePermission": perm.remove_permission,
    "SendMessage": m.send_message,
    "SendMessageBatch": _batch(m.send_message_batch),
    "ReceiveMessage": m.receive_message,
    "DeleteMessage": m.delete_message,
    "DeleteMessageBatch": _batch(m.delete_message_batch),
    "ChangeMessageVisibility": m.change_message_visibility,
    "ChangeMessageVisibilityBatch": _batch(m.change_message_visibility_batch),
    "StartMessageMoveTask": t.start_message_move_task,
    "ListMessageMoveTasks": t.list_message_move_tasks,
    "CancelMessageMoveTask": t.cancel_message_move_task,
}
