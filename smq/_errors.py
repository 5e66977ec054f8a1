"""The exception tree of smq, and the status codes the Lua scripts return.

::

    SmqError
    ├── InvalidParameter                 bad input, refused before any write
    │   ├── InvalidQueueName
    │   ├── InvalidAttributeName
    │   ├── InvalidAttributeValue
    │   ├── InvalidMessageContents
    │   ├── MessageTooLong
    │   ├── MissingParameter             e.g. a FIFO send without MessageGroupId
    │   ├── VisibilityCeilingExceeded    change past 12 h after the receive
    │   ├── InvalidDeclaration           a declared-queues file smq refuses
    │   └── BatchError
    │       ├── EmptyBatchRequest
    │       ├── TooManyEntriesInBatchRequest
    │       ├── BatchEntryIdsNotDistinct
    │       ├── InvalidBatchEntryId
    │       └── BatchRequestTooLong
    ├── QueueDoesNotExist
    ├── QueueNameExists                  same name, other attributes
    ├── QueueDeletedRecently             SQS's 60 s after a delete (opt-in)
    ├── ReceiptError
    │   ├── ReceiptHandleIsInvalid       malformed, or not of this queue
    │   ├── MessageNotInflight           deleted, or never received
    │   ├── StaleReceipt                 a newer receive holds the message
    │   └── ReceiptExpired               FIFO: the receipt's timeout ran out
    ├── PurgeQueueInProgress             purged again too soon
    ├── OverLimit                        in-flight limit reached (short poll)
    ├── MoveTaskNotFound                 malformed or unknown move task handle,
    │                                    or a task no longer running (cancel)
    ├── MoveTaskActive                   the source queue has an active move task
    ├── UnsupportedLayout                the queue's data is in a newer layout
    ├── UnsafeRedisConfig                Redis is set up so that smq cannot keep
    │                                    its promises (see EvictionPolicyUnsafe)
    ├── LeaseLost                        a worker no longer holds the message
    └── BackendError                     Redis unreachable or failing
        ├── Unavailable                  the call surely did not run: retry it
        │   │                            (no connection, Redis still loading, or
        │   │                            Redis refused it before it wrote anything)
        │   ├── RedisOutOfMemory         OOM: used memory is over maxmemory
        │   ├── RedisCannotPersist       MISCONF: Redis cannot write its AOF or
        │   │                            RDB file (a full disk?)
        │   ├── RedisReadOnly            READONLY: the node is a replica
        │   ├── TooFewReplicas           NOREPLICAS: min-replicas-to-write unmet
        │   └── EvictionPolicyUnsafe     maxmemory-policy may evict queue data:
        │                                writes refused until it is safe (also
        │                                an UnsafeRedisConfig)
        └── OutcomeUnknown               connection lost mid-call: the script
                                         may or may not have run
"""

from __future__ import annotations

import enum

from ._version import __version__

LAYOUT = 2
"""The newest data layout this version reads and writes (``LAYOUT`` in lua/includes/common.lua)."""


class SmqError(Exception):
    """Root of every error smq raises."""


class InvalidParameter(SmqError, ValueError):
    """Input that smq refuses before anything is written."""


class InvalidQueueName(InvalidParameter):
    """A queue name outside 1-80 of ``[A-Za-z0-9_-]`` (FIFO: plus ``.fifo``)."""


class InvalidAttributeName(InvalidParameter):
    """An unknown queue attribute, or a malformed message attribute name."""


class InvalidAttributeValue(InvalidParameter):
    """A queue or message attribute value out of range or of the wrong type."""


class InvalidMessageContents(InvalidParameter):
    """A body with characters SQS does not allow, or an empty body."""


class MessageTooLong(InvalidParameter):
    """Body plus attributes larger than the queue's MaximumMessageSize."""


class MissingParameter(InvalidParameter):
    """A parameter the call needs is missing (MessageGroupId on a FIFO queue...)."""


class VisibilityCeilingExceeded(InvalidParameter):
    """A visibility change that would pass 12 hours after the receive."""


class InvalidDeclaration(InvalidParameter):
    """A declared-queues file (or mapping) that smq refuses, before anything was applied.

    Its text is one line that names the file, the queue and the field:
    ``queues.toml: queue "jobs": VisibilityTimeout: must be an integer from 0 to 43200, not 50000``.

    Attributes:
        source: The file's name (``"declared queues"`` for a mapping).
        queue: The queue the error is about, or None (the file as a whole).
        field: The attribute the error is about, as the file names it
            (``VisibilityTimeout``, ``tags``), or None.
        reason: What is wrong, without the file, queue and field.
    """

    def __init__(self, source: str, reason: str, queue: str | None = None, field: str | None = None) -> None:
        where = [source] + ([f'queue "{queue}"'] if queue is not None else []) + ([field] if field else [])
        super().__init__(": ".join([*where, reason]))
        self.source = source
        self.queue = queue
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[type[InvalidDeclaration], tuple[str, str, str | None, str | None]]:
        return type(self), (self.source, self.reason, self.queue, self.field)


class BatchError(InvalidParameter):
    """A batch request malformed as a whole."""


class EmptyBatchRequest(BatchError):
    """A batch with no entries."""


class TooManyEntriesInBatchRequest(BatchError):
    """A batch with more than 10 entries."""


class BatchEntryIdsNotDistinct(BatchError):
    """Two entries of one batch with the same id."""


class InvalidBatchEntryId(BatchError):
    """An entry id outside 1-80 of ``[A-Za-z0-9_-]``."""


class BatchRequestTooLong(BatchError):
    """A batch whose messages add up to more than 1 MiB."""


class QueueDoesNotExist(SmqError):
    """The queue named does not exist."""


class TooManyTags(InvalidParameter):
    """A queue would have more than 50 tags (an InvalidParameter, named for the HTTP API)."""


class QueueDeletedRecently(SmqError):
    """A queue of that name was deleted less than 60 seconds ago (only where the
    caller asked for SQS's rule: ``create_queue(..., refuse_recently_deleted=True)``)."""


class QueueNameExists(SmqError):
    """A queue of that name exists with different attributes.

    Attributes:
        setting: The first setting that differs (a ``QueueConfig`` field, or
            the name of an extra attribute such as ``Policy``).
    """

    def __init__(self, message: str, setting: str = "") -> None:
        super().__init__(message)
        self.setting = setting


class ReceiptError(SmqError):
    """A receipt handle that cannot do what was asked."""


class ReceiptHandleIsInvalid(ReceiptError):
    """A receipt handle that smq did not issue, or issued for another queue."""


class MessageNotInflight(ReceiptError):
    """The message is not in flight: deleted, or never received."""


class StaleReceipt(ReceiptError):
    """The message was received again since: a newer receipt holds it."""


class ReceiptExpired(ReceiptError):
    """On a FIFO queue: the receipt's visibility timeout ran out, so it can no longer act."""


class PurgeQueueInProgress(SmqError):
    """The queue was purged less than the interval asked for ago (SQS: 60 seconds)."""


class OverLimit(SmqError):
    """The queue's in-flight limit is reached; delete or release messages."""


class MoveTaskNotFound(SmqError):
    """No message move task has that handle (or it is no longer running, for a cancel)."""


class MoveTaskActive(SmqError):
    """The source queue has a running or cancelling message move task already.

    Attributes:
        handle: The handle of the active task.
    """

    def __init__(self, message: str, handle: str = "") -> None:
        super().__init__(message)
        self.handle = handle


class UnsupportedLayout(SmqError):
    """The queue's data is in a layout newer than this version of smq reads.

    A newer smq moved the queue forward (``smq upgrade``); this one refuses
    the whole call, before any change, rather than misread the data. Upgrade
    this client (see "Rolling upgrades" in the operations guide).
    """


class OldClientsPresent(SmqError):
    """``smq upgrade`` refused: consumers of smq 0.2.0 may share this Redis.

    0.2.0 reads only data layout 1 and checks no layout, so a queue moved
    forward would lose messages to it. Raised, before any change, while a
    0.2.0 consumer's scripts are in a server's script cache, or when Redis
    refuses ``SCRIPT EXISTS``. Stop every 0.2.0 client, then ``SCRIPT FLUSH``
    (or restart Redis) or upgrade with ``force=True`` (``smq upgrade --force``).
    """


class UnsafeRedisConfig(SmqError):
    """Redis is configured so that smq cannot keep its promises on it.

    An eviction policy that may drop queue data (``EvictionPolicyUnsafe``), or
    a setting a client asked for that the server lacks (sharded Pub/Sub before
    Redis 7, ``wait_aof`` without WAITAOF or the append-only file).
    """


class LeaseLost(SmqError):
    """A worker no longer holds a message: another consumer may be processing it.

    Raised by ``Job.raise_if_lost``; the worker does not delete such a message.
    """


class BackendError(SmqError):
    """Redis could not be reached or failed."""


class Unavailable(BackendError):
    """Redis could not take the call, which surely did not run: retry it.

    Raised when no connection could be made (refused, no socket, connect
    timeout), Redis answered that it is still loading its data, or Redis
    refused the call before it wrote anything; the subclasses name the
    reasons Redis gives. Nothing was written, so retrying is safe for every
    call, sends included.
    """


class RedisOutOfMemory(Unavailable):
    """Redis is out of memory (``OOM``: used memory over ``maxmemory``, under a policy that
    refuses writes rather than evict): the call wrote nothing.

    Redis refuses a script only at its first write, and only when nothing has
    been written yet in that script, so a refused call changed nothing and a
    retry is safe. Calls that free memory (deletes, purges) still run. Free
    memory (receive and delete, purge, shorter retention) or raise
    ``maxmemory``.
    """


class RedisCannotPersist(Unavailable):
    """Redis refuses writes because it cannot persist them (``MISCONF``): the append-only
    file or the last RDB snapshot failed to write, most often a full disk. Nothing was
    written; writes come back once Redis can write to disk again."""


class RedisReadOnly(Unavailable):
    """The Redis node is a read-only replica (``READONLY``: after a failover, or a URL that
    names a replica): nothing was written. Retry: a client reaches the new primary."""


class TooFewReplicas(Unavailable):
    """The primary refuses writes for want of replicas (``NOREPLICAS``:
    ``min-replicas-to-write``): nothing was written."""


class EvictionPolicyUnsafe(UnsafeRedisConfig, Unavailable):
    """Redis's ``maxmemory-policy`` may evict queue data, so smq refuses to write.

    Checked when a client starts and at most a second apart while it runs
    (and at once after an error): from the moment a client sees the policy
    unsafe, each write raises this, without running, until the policy is
    safe again (``noeviction``, or a ``volatile-*`` policy: see the operations
    guide, "Redis settings smq relies on"). ``Settings(allow_eviction=True)``
    accepts the risk.
    """


class OutcomeUnknown(BackendError):
    """The connection broke during a call: it may or may not have taken effect.

    Also raised, with ``Settings(wait_replicas=...)``, when a change ran on the
    primary but fewer replicas than asked confirmed it in time: it may be lost
    in a failover. The message says how many confirmed.

    smq never retries such a call itself, because sends and receives are not
    idempotent. Receipts and visibility timeouts make a retry safe for the
    caller: a message received by a lost call comes back when its timeout ends.
    """


class Status(enum.IntEnum):
    """Status codes returned by the Lua scripts (see ``lua/includes/common.lua``)."""

    OK = 0
    E_QUEUE_MISSING = -1
    E_TOO_LONG = -2
    E_NOT_INFLIGHT = -3
    E_STALE_RECEIPT = -4
    E_CEILING = -5
    E_OVER_LIMIT = -6
    E_BAD_ARGUMENT = -7
    E_TAG_LIMIT = -8
    E_TASK_ACTIVE = -9
    E_TASK_MISSING = -10
    E_NO_DEDUPLICATION_ID = -11
    E_PURGE_IN_PROGRESS = -12
    E_RECEIPT_EXPIRED = -13
    E_DELETED_RECENTLY = -14
    E_LAYOUT = -15
    DELETED = 1
    ALREADY_GONE = 2
    STALE_IGNORED = 3
    DUPLICATE = 4


_ERRORS: dict[int, tuple[type[SmqError], str]] = {
    Status.E_QUEUE_MISSING: (QueueDoesNotExist, "queue {queue!r} does not exist"),
    Status.E_TOO_LONG: (
        MessageTooLong,
        "One or more parameters are invalid. Reason: Message must be shorter than {detail} bytes.",
    ),
    Status.E_NOT_INFLIGHT: (MessageNotInflight, "message is not in flight"),
    Status.E_RECEIPT_EXPIRED: (ReceiptExpired, "The receipt handle has expired."),
    Status.E_LAYOUT: (
        UnsupportedLayout,
        f"queue {{queue!r}} is stored in data layout {{detail}}, newer than this smq ({__version__}) reads "
        f"(up to {LAYOUT}): upgrade smq",
    ),
    Status.E_DELETED_RECENTLY: (
        QueueDeletedRecently,
        "You must wait 60 seconds after deleting a queue before you can create another with the same name.",
    ),
    Status.E_PURGE_IN_PROGRESS: (
        PurgeQueueInProgress,
        "Only one PurgeQueue operation on {queue} is allowed every 60 seconds.",
    ),
    Status.E_STALE_RECEIPT: (
        StaleReceipt,
        "receipt is stale: the message was received again since",
    ),
    Status.E_CEILING: (
        VisibilityCeilingExceeded,
        "visibility would pass 12 hours after the receive of this receipt",
    ),
    Status.E_OVER_LIMIT: (OverLimit, "queue {queue!r} has reached its in-flight limit"),
    Status.E_BAD_ARGUMENT: (InvalidParameter, "script refused its arguments: {detail}"),
    Status.E_TAG_LIMIT: (
        TooManyTags,
        "queue {queue!r} would have {detail} tags; a queue has at most 50",
    ),
    Status.E_TASK_ACTIVE: (MoveTaskActive, "queue {queue!r} has an active message move task"),
    Status.E_TASK_MISSING: (MoveTaskNotFound, "no message move task {detail} on queue {queue!r}"),
    Status.E_NO_DEDUPLICATION_ID: (
        InvalidParameter,
        "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId "
        "provided explicitly",
    ),
}


def error_for(code: int, queue: str, detail: object = "") -> SmqError:
    """The exception for a script status code (the one place codes become errors)."""
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    kind, template = _ERRORS.get(code, (SmqError, "script returned unknown status {code}"))
    return kind(template.format(queue=queue, detail=detail, code=code))
