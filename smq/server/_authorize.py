"""Tenants: which account's queues a request may use.

With access keys, each key acts in its account (``--access-key
ID:SECRET:ACCOUNT``; the server's own account when the key names none). A
request may use a queue of its own account for every action, unless the
queue's Policy denies that action to it explicitly; and a queue of another
account only for the actions that may be granted, and only where the
queue's Policy allows them to the caller's account and does not deny them
(``smq.server._access_policy``). Actions only a queue's owner may take are
never allowed to another account, and never denied to the owner, so that a
Policy that shuts its owner out can still be changed. Without access keys
there are no identities and nothing is checked.

Policies are read from Redis and kept for ``POLICY_TTL`` seconds per
queue; this server forgets the ones it changes at once, other servers see a
change within that time (SQS itself takes up to 60 s to apply one).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..client._client import Client
from ..core._config import EXTRA_PREFIX
from ..core._keys import QueueKeys
from ..core._scripts import text
from ._access_policy import Decision, Request, evaluate
from ._context import Context
from ._errors import SqsError
from ._wire import INPUTS

POLICY_TTL = 1.0
"""Seconds a queue's Policy read from Redis is used before it is read again."""

GRANTABLE = (
    "*",
    "ChangeMessageVisibility",
    "DeleteMessage",
    "GetQueueAttributes",
    "GetQueueUrl",
    "ListDeadLetterSourceQueues",
    "PurgeQueue",
    "ReceiveMessage",
    "SendMessage",
)
"""What a queue's owner may allow another account to do with the queue."""

OWNER_ONLY = (
    "AddPermission",
    "CancelMessageMoveTask",
    "CreateQueue",
    "DeleteQueue",
    "ListMessageMoveTasks",
    "ListQueueTags",
    "ListQueues",
    "RemovePermission",
    "SetQueueAttributes",
    "StartMessageMoveTask",
    "TagQueue",
    "UntagQueue",
)
"""What only a queue's owner may do."""

# The permission a batch action needs is its single action's.
_PERMISSION = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
# Actions after which this server forgets the policies it keeps.
_CHANGES_POLICY = ("AddPermission", "RemovePermission", "SetQueueAttributes", "CreateQueue", "DeleteQueue")


class Policies:
    """The Policy attributes of queues, read from Redis and kept for ``ttl`` seconds."""

    def __init__(self, client: Client, ttl: float = POLICY_TTL) -> None:
        self._client = client
        self._ttl = ttl
        self._kept: dict[str, tuple[float, str]] = {}

    async def of(self, ctx: Context, queue: str) -> str:
        """The Policy of ``queue`` (a core name); ``""`` when it has none or does not exist."""
        now = time.monotonic()
        kept = self._kept.get(queue)
        if kept is not None and kept[0] > now:
            return kept[1]
        policy: str = await ctx.call(self._read, queue)
        if len(self._kept) > 10_000:
            self._kept.clear()
        self._kept[queue] = (now + self._ttl, policy)
        return policy

    def _read(self, queue: str) -> str:
        client = self._client
        stored = client._call(client._redis.hget, QueueKeys.of(queue).meta, EXTRA_PREFIX + "Policy")
        return "" if stored is None else text(stored)

    def forget(self) -> None:
        self._kept.clear()


async def authorize(ctx: Context, policies: Policies, action: str, params: Mapping[str, Any]) -> None:
    """Raise ``AccessDenied`` unless the request's account may take ``action`` on the queue it names."""
    if not ctx.config.access_keys:
        return
    queue = _queue_named(ctx, action, params)
    if queue is None:
        return  # an action on no queue (CreateQueue, ListQueues): in the caller's own account
    owner = ctx.account_of(queue)
    own = owner == ctx.account
    if action in OWNER_ONLY:
        if not own:
            raise _denied(ctx, action, queue, explicit=False)
        return
    permission = _PERMISSION.get(action, action)
    request = Request(ctx.account, permission, ctx.arn_of(queue), secure=ctx.secure)
    decision = evaluate(await policies.of(ctx, queue), request)
    if decision is Decision.DENY or (not own and decision is not Decision.ALLOW):
        raise _denied(ctx, permission, queue, explicit=decision is Decision.DENY)


def after(policies: Policies, action: str) -> None:
    """Forget kept policies after an action that may have changed one."""
    if action in _CHANGES_POLICY:
        policies.forget()


def _queue_named(ctx: Context, action: str, params: Mapping[str, Any]) -> str | None:
    if action == "GetQueueUrl":
        # None for names the action itself refuses: its own checks answer.
        return ctx.named_queue(params.get("QueueName"), params.get("QueueOwnerAWSAccountId"))
    if "QueueUrl" in INPUTS.get(action, {}):
        return ctx.queue_name(params)
    return None


def _denied(ctx: Context, permission: str, queue: str, *, explicit: bool) -> SqsError:
    action = f"sqs:{permission.lower()}"
    why = (
        "with an explicit deny in a resource-based policy"
        if explicit
        else f"because no resource-based policy allows the {action} action"
    )
    return SqsError(
        "AccessDenied",
        f"User: arn:aws:iam::{ctx.account}:root is not authorized to perform: {action} "
        f"on resource: {ctx.arn_of(queue)} {why}",
    )
