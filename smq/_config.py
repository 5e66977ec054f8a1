"""Queue names and settings: SQS names, ranges and defaults, validated here.

The public API speaks seconds; Redis stores milliseconds (fields ``*_ms`` of
the queue's ``meta`` hash).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ._errors import InvalidAttributeName, InvalidAttributeValue, InvalidParameter, InvalidQueueName

_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
MAX_VISIBILITY_TIMEOUT = 43200
"""12 hours, in seconds: the most a receipt may keep a message invisible."""


def check_queue_name(name: object) -> str:
    """Return ``name`` if it is a valid standard queue name, else raise InvalidQueueName."""
    if not isinstance(name, str):
        raise InvalidQueueName(f"queue name must be a string, not {type(name).__name__}")
    if name.endswith(".fifo"):
        stem = name[: -len(".fifo")]
        if _NAME.fullmatch(stem) and len(name) <= 80:
            raise InvalidQueueName(
                f"queue name {name!r}: the .fifo suffix is reserved for FIFO queues, "
                "which this version of smq does not support yet"
            )
    if not _NAME.fullmatch(name):
        raise InvalidQueueName(f"queue name {name!r} is invalid: use 1 to 80 letters, digits, '-' or '_'")
    return name


@dataclass(frozen=True)
class RedrivePolicy:
    """Where messages go after too many receives.

    Attributes:
        dead_letter_queue: Name of the dead-letter queue (same Redis).
        max_receive_count: Receives (1-1000) after which the next receive moves
            the message to the dead-letter queue instead of returning it.
    """

    dead_letter_queue: str
    max_receive_count: int

    def __post_init__(self) -> None:
        check_queue_name(self.dead_letter_queue)
        check_int("max_receive_count", self.max_receive_count, 1, 1000, InvalidAttributeValue)


# name: (meta field, low, high, default, scale to ms)
_INT_SETTINGS: dict[str, tuple[str, int, int, int, int]] = {
    "visibility_timeout": ("vis_ms", 0, MAX_VISIBILITY_TIMEOUT, 30, 1000),
    "delay_seconds": ("delay_ms", 0, 900, 0, 1000),
    "message_retention_period": ("retention_ms", 60, 1209600, 345600, 1000),
    "maximum_message_size": ("max_size", 1024, 1048576, 1048576, 1),
    "receive_message_wait_time_seconds": ("wait_ms", 0, 20, 0, 1000),
    "inflight_limit": ("inflight_limit", 1, 10_000_000, 120_000, 1),
    "event_stream_max_len": ("events_max", 0, 10_000_000, 0, 1),
}


def check_int(
    name: str, value: object, low: int, high: int, error: type[InvalidParameter] = InvalidParameter
) -> int:
    """``value`` if it is an integer in [low, high], else raise ``error`` naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(f"{name} must be an integer from {low} to {high}, not {value!r}")
    return value


@dataclass(frozen=True)
class QueueConfig:
    """Settings of a queue, with the SQS defaults and ranges (seconds, bytes).

    Attributes:
        visibility_timeout: Seconds a received message stays invisible (0-43200).
        delay_seconds: Seconds a sent message stays delayed (0-900).
        message_retention_period: Seconds a message is kept (60-1209600).
        maximum_message_size: Bytes of body plus attributes (1024-1048576).
        receive_message_wait_time_seconds: Default long-poll wait (0-20).
        redrive_policy: Dead-letter queue and maxReceiveCount, or None.
        inflight_limit: Messages in flight at most (SQS: about 120,000).
        event_stream_max_len: Length of the lifecycle event stream (0: none).
    """

    visibility_timeout: int = 30
    delay_seconds: int = 0
    message_retention_period: int = 345600
    maximum_message_size: int = 1048576
    receive_message_wait_time_seconds: int = 0
    redrive_policy: RedrivePolicy | None = None
    inflight_limit: int = 120_000
    event_stream_max_len: int = 0

    def __post_init__(self) -> None:
        for name, (_, low, high, _, _) in _INT_SETTINGS.items():
            check_int(name, getattr(self, name), low, high, InvalidAttributeValue)
        if self.redrive_policy is not None and not isinstance(self.redrive_policy, RedrivePolicy):
            raise InvalidAttributeValue("redrive_policy must be a RedrivePolicy or None")

    def to_meta(self, names: Any = None) -> dict[str, str]:
        """The ``meta`` hash fields of these settings (all, or those named)."""
        chosen = set(names) if names is not None else {f.name for f in fields(self)}
        meta: dict[str, str] = {}
        for name, (field, _, _, _, scale) in _INT_SETTINGS.items():
            if name in chosen:
                meta[field] = str(getattr(self, name) * scale)
        if "redrive_policy" in chosen:
            policy = self.redrive_policy
            meta["dlq"] = policy.dead_letter_queue if policy else ""
            meta["max_receives"] = str(policy.max_receive_count) if policy else "0"
        return meta

    @classmethod
    def from_meta(cls, meta: Mapping[str, str]) -> QueueConfig:
        values: dict[str, Any] = {}
        for name, (field, _, _, default, scale) in _INT_SETTINGS.items():
            values[name] = int(meta[field]) // scale if field in meta else default
        if meta.get("dlq"):
            values["redrive_policy"] = RedrivePolicy(meta["dlq"], int(meta["max_receives"]))
        return cls(**values)


SETTING_NAMES = frozenset(f.name for f in fields(QueueConfig))


def check_setting_names(settings: Mapping[str, object]) -> None:
    unknown = sorted(set(settings) - SETTING_NAMES)
    if unknown:
        raise InvalidAttributeName(
            f"unknown queue attribute(s) {', '.join(unknown)}; known: {', '.join(sorted(SETTING_NAMES))}"
        )


@dataclass(frozen=True)
class QueueInfo:
    """A queue's settings and state, as :meth:`Queue.attributes` reads them.

    Counts are exact at the moment of the call (SQS calls them approximate).

    Attributes:
        name: The queue's name.
        config: Its settings.
        visible: ApproximateNumberOfMessages: messages ready to be received.
        in_flight: ApproximateNumberOfMessagesNotVisible.
        delayed: ApproximateNumberOfMessagesDelayed.
        moving: Messages between the steps of a move to another queue.
        created_at: CreatedTimestamp, seconds since the epoch.
        modified_at: LastModifiedTimestamp, seconds since the epoch.
        oldest_age: Seconds since the oldest visible message was sent, or None.
        counters: Fleet-wide counters kept by the scripts (sent, received, ...).
    """

    name: str
    config: QueueConfig
    visible: int
    in_flight: int
    delayed: int
    moving: int
    created_at: float
    modified_at: float
    oldest_age: float | None
    counters: Mapping[str, int]


COUNTERS = (
    "sent",
    "received",
    "deleted",
    "visibility_expired",
    "visibility_changed",
    "stale_receipts",
    "dead_lettered",
    "retention_expired",
    "empty_receives",
    "moved_in",
)
"""The counters the scripts keep in each queue's ``stats`` hash."""
