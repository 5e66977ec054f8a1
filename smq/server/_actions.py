"""The table of actions: SQS action name -> handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from . import _message_actions as m
from . import _queue_actions as q
from . import _task_actions as t
from ._context import Context

Handler = Callable[[Context, dict[str, Any]], Awaitable[dict[str, Any]]]

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
    "AddPermission": q.unsupported_permission,
    "RemovePermission": q.unsupported_permission,
    "SendMessage": m.send_message,
    "SendMessageBatch": m.send_message_batch,
    "ReceiveMessage": m.receive_message,
    "DeleteMessage": m.delete_message,
    "DeleteMessageBatch": m.delete_message_batch,
    "ChangeMessageVisibility": m.change_message_visibility,
    "ChangeMessageVisibilityBatch": m.change_message_visibility_batch,
    "StartMessageMoveTask": t.start_message_move_task,
    "ListMessageMoveTasks": t.list_message_move_tasks,
    "CancelMessageMoveTask": t.cancel_message_move_task,
}
