"""smq: Amazon SQS semantics on your own Redis.

Start with ``Client``::

    import smq

    client = smq.Client("redis://localhost:6379/0")
    queue = client.create_queue("jobs")
    queue.send("hello")
    for message in queue.receive(10, wait_time_seconds=20):
        ...
        queue.delete(message.receipt_handle)
"""

from ._errors import (
    BackendError,
    BatchEntryIdsNotDistinct,
    BatchError,
    BatchRequestTooLong,
    EmptyBatchRequest,
    EvictionPolicyUnsafe,
    InvalidAttributeName,
    InvalidAttributeValue,
    InvalidBatchEntryId,
    InvalidDeclaration,
    InvalidMessageContents,
    InvalidParameter,
    InvalidQueueName,
    LeaseLost,
    MessageNotInflight,
    MessageTooLong,
    MissingParameter,
    MoveTaskActive,
    MoveTaskNotFound,
    OldClientsPresent,
    OutcomeUnknown,
    OverLimit,
    PurgeQueueInProgress,
    QueueDeletedRecently,
    QueueDoesNotExist,
    QueueNameExists,
    ReceiptError,
    ReceiptExpired,
    ReceiptHandleIsInvalid,
    RedisCannotPersist,
    RedisOutOfMemory,
    RedisReadOnly,
    SmqError,
    StaleReceipt,
    TooFewReplicas,
    TooManyEntriesInBatchRequest,
    Unavailable,
    UnsafeRedisConfig,
    UnsupportedLayout,
    VisibilityCeilingExceeded,
)
from ._version import __version__ as __version__
from .client._client import Client
from .client._queue import Queue
from .connection._health import RedisHealth
from .connection._settings import Settings
from .core._config import COUNTERS, MAX_VISIBILITY_TIMEOUT, QueueConfig, QueueInfo, RedrivePolicy
from .core._digest import md5_of_attributes, md5_of_body
from .core._message import (
    BatchFailure,
    BatchResult,
    ChangeEntry,
    DeleteEntry,
    Message,
    MessageAttribute,
    SendEntry,
    SendResult,
)
from .operations._consumers import Consumer
from .operations._declared import QueueChange
from .operations._events import Event
from .operations._history import Sample
from .operations._move_tasks import MoveTask
from .operations._peek import PeekedMessage
from .operations._upgrade import QueueUpgrade
from .worker import Job, Worker, WorkerConfig

__all__ = [
    "COUNTERS",
    "MAX_VISIBILITY_TIMEOUT",
    "BackendError",
    "BatchEntryIdsNotDistinct",
    "BatchError",
    "BatchFailure",
    "BatchRequestTooLong",
    "BatchResult",
    "ChangeEntry",
    "Client",
    "Consumer",
    "DeleteEntry",
    "EmptyBatchRequest",
    "Event",
    "EvictionPolicyUnsafe",
    "InvalidAttributeName",
    "InvalidAttributeValue",
    "InvalidBatchEntryId",
    "InvalidDeclaration",
    "InvalidMessageContents",
    "InvalidParameter",
    "InvalidQueueName",
    "Job",
    "LeaseLost",
    "Message",
    "MessageAttribute",
    "MessageNotInflight",
    "MessageTooLong",
    "MissingParameter",
    "MoveTask",
    "MoveTaskActive",
    "MoveTaskNotFound",
    "OldClientsPresent",
    "OutcomeUnknown",
    "OverLimit",
    "PeekedMessage",
    "PurgeQueueInProgress",
    "Queue",
    "QueueChange",
    "QueueConfig",
    "QueueDeletedRecently",
    "QueueDoesNotExist",
    "QueueInfo",
    "QueueNameExists",
    "QueueUpgrade",
    "ReceiptError",
    "ReceiptExpired",
    "ReceiptHandleIsInvalid",
    "RedisCannotPersist",
    "RedisHealth",
    "RedisOutOfMemory",
    "RedisReadOnly",
    "RedrivePolicy",
    "Sample",
    "SendEntry",
    "SendResult",
    "Settings",
    "SmqError",
    "StaleReceipt",
    "TooFewReplicas",
    "TooManyEntriesInBatchRequest",
    "Unavailable",
    "UnsafeRedisConfig",
    "UnsupportedLayout",
    "VisibilityCeilingExceeded",
    "Worker",
    "WorkerConfig",
    "md5_of_attributes",
    "md5_of_body",
]
