"""Queue names and settings: SQS names, ranges and defaults, validated here.

The public API speaks seconds; Redis stores milliseconds (fields ``*_ms`` of
the queue's ``meta`` hash).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from .._errors import InvalidAttributeName, InvalidAttributeValue, InvalidParameter
from ._names import FIFO_SUFFIX, split_name
from ._names import check_queue_name as check_queue_name  # re-exported: its old home

MAX_VISIBILITY_TIMEOUT = 43200
"""12 hours, in seconds: the most a receipt may keep a message invisible."""


def is_fifo_name(name: str) -> bool:
    """True for the name of a FIFO queue (it ends in ``.fifo``)."""
    return name.endswith(FIFO_SUFFIX)


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
    "shards": ("shards", 1, 32, 1, 1),  # at most MAX_SHARDS
}
MAX_SHARDS = _INT_SETTINGS["shards"][2]
"""Most shards a queue may have (see ``smq.client._shards``)."""


def setting_range(name: str) -> tuple[int, int]:
    """The (lowest, highest) value of integer setting ``name`` of QueueConfig."""
    _, low, high, _, _ = _INT_SETTINGS[name]
    return low, high


def setting_choices(name: str) -> tuple[object, ...]:
    """The values FIFO setting ``name`` of QueueConfig may take."""
    return tuple(_FIFO_SETTINGS[name][1])


def check_int(
    name: str, value: object, low: int, high: int, error: type[InvalidParameter] = InvalidParameter
) -> int:
    """``value`` if it is an integer in [low, high], else raise ``error`` naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(f"{name} must be an integer from {low} to {high}, not {value!r}")
    return value


EXTRA_ATTRIBUTE_NAMES = (
    "Policy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
    "RedriveAllowPolicy",
)
"""SQS attributes smq stores and returns but does not act on (IAM, encryption,
redrive permissions), so that Terraform and CloudFormation templates apply."""
EXTRA_PREFIX = "x:"
"""``meta`` hash fields of the stored SQS attributes: ``x:<name>``."""
MAX_EXTRA_VALUE = 65536
_REDRIVE_PERMISSIONS = ("allowAll", "denyAll", "byQueue")
DEDUPLICATION_SCOPES = ("queue", "messageGroup")
THROUGHPUT_LIMITS = ("perQueue", "perMessageGroupId")
FIFO_INFLIGHT_LIMIT = 20_000
"""The default in-flight limit of a FIFO queue (SQS: 20,000)."""
# name: (meta field, allowed values, default); FIFO queues only
_FIFO_SETTINGS: dict[str, tuple[str, tuple[Any, ...], Any]] = {
    "content_based_deduplication": ("content_dedup", (False, True), False),
    "deduplication_scope": ("dedup_scope", DEDUPLICATION_SCOPES, "queue"),
    "fifo_throughput_limit": ("throughput_limit", THROUGHPUT_LIMITS, "perQueue"),
}
_MAX_REDRIVE_SOURCES = 10


class ExtraAttributes(Mapping[str, str]):
    """An immutable, hashable mapping of stored SQS attribute names to values."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items: dict[str, str] = dict(sorted((items or {}).items()))

    def __getitem__(self, name: str) -> str:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return repr(self._items)

    def __reduce__(self) -> tuple[type[ExtraAttributes], tuple[dict[str, str]]]:
        return ExtraAttributes, (self._items,)


def check_extra_attributes(values: object) -> dict[str, str]:
    """The stored SQS attributes in ``values``, validated and normalised.

    An empty value stands for "not set" (on a change: remove it), as in SQS.
    Raises InvalidAttributeName for a name smq does not store and
    InvalidAttributeValue for a value SQS would refuse.
    """
    if not isinstance(values, Mapping):
        raise InvalidAttributeValue(
            f"extra_attributes must be a mapping of attribute names to strings, not {type(values).__name__}"
        )
    checked: dict[str, str] = {}
    for name, value in values.items():
        if name not in EXTRA_ATTRIBUTE_NAMES:
            raise InvalidAttributeName(
                f"unknown queue attribute {name!r}; stored SQS attributes: {', '.join(EXTRA_ATTRIBUTE_NAMES)}"
            )
        if not isinstance(value, str):
            raise InvalidAttributeValue(f"{name} must be a string, not {type(value).__name__}")
        if len(value) > MAX_EXTRA_VALUE:
            raise InvalidAttributeValue(f"{name} is {len(value)} characters long; at most {MAX_EXTRA_VALUE}")
        checked[name] = _check_extra_value(name, value) if value else ""
    return checked


def _check_extra_value(name: str, value: str) -> str:
    if name == "KmsDataKeyReusePeriodSeconds":
        if not re.fullmatch("[0-9]{1,5}", value) or not 60 <= int(value) <= 86400:
            raise InvalidAttributeValue(f"{name} must be an integer from 60 to 86400, not {value!r}")
        return str(int(value))
    if name == "SqsManagedSseEnabled":
        if value.lower() not in ("true", "false"):
            raise InvalidAttributeValue(f"{name} must be 'true' or 'false', not {value!r}")
        return value.lower()
    if name in ("Policy", "RedriveAllowPolicy"):
        try:
            document = json.loads(value)
        except ValueError as error:
            raise InvalidAttributeValue(f"{name} is not valid JSON: {error}") from None
        except RecursionError:
            raise InvalidAttributeValue(f"{name} is nested too deeply") from None
        if not isinstance(document, dict):
            raise InvalidAttributeValue(f"{name} must be a JSON object")
        if name == "RedriveAllowPolicy":
            _check_redrive_allow_policy(document)
    return value


def _check_redrive_allow_policy(document: dict[str, Any]) -> None:
    name = "RedriveAllowPolicy"
    unknown = sorted(set(document) - {"redrivePermission", "sourceQueueArns"})
    if unknown:
        raise InvalidAttributeValue(f"{name}: unknown field(s) {', '.join(unknown)}")
    permission = document.get("redrivePermission")
    if permission not in _REDRIVE_PERMISSIONS:
        raise InvalidAttributeValue(
            f"{name}: redrivePermission must be one of {', '.join(_REDRIVE_PERMISSIONS)}, not {permission!r}"
        )
    arns = document.get("sourceQueueArns")
    if permission != "byQueue":
        if arns is not None:
            raise InvalidAttributeValue(f"{name}: sourceQueueArns goes only with redrivePermission byQueue")
        return
    if not isinstance(arns, list) or not all(isinstance(arn, str) and arn for arn in arns):
        raise InvalidAttributeValue(f"{name}: byQueue needs sourceQueueArns, a list of queue ARNs")
    if not 1 <= len(arns) <= _MAX_REDRIVE_SOURCES:
        raise InvalidAttributeValue(
            f"{name}: sourceQueueArns lists 1 to {_MAX_REDRIVE_SOURCES} queues, not {len(arns)}"
        )


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
        shards: Shards (1-32), set at creation only: a sharded queue is that
            many full queues in their own hash slots, on different primaries
            of a Redis Cluster, behind one name (see Topologies: sharded
            queues). A sharded FIFO queue deduplicates within message groups.
        extra_attributes: SQS attributes smq stores but does not act on
            (``Policy``, ``KmsMasterKeyId``, ``KmsDataKeyReusePeriodSeconds``,
            ``SqsManagedSseEnabled``, ``RedriveAllowPolicy``), name -> value.
        fifo_queue: FifoQueue: a FIFO queue (its name ends in ``.fifo``);
            set at creation only. Its in-flight limit defaults to 20,000.
        content_based_deduplication: FIFO: a send without a deduplication id
            uses the SHA-256 of its body.
        deduplication_scope: FIFO: ``"queue"`` or ``"messageGroup"`` (ids
            deduplicate within their group only). Deduplication keeps the
            scope the queue was created with: a later change is reported,
            not applied, as on SQS.
        fifo_throughput_limit: FIFO: ``"perQueue"`` or ``"perMessageGroupId"``;
            stored and returned. smq imposes no per-queue rate quota, so it
            does not throttle anything.
    """

    visibility_timeout: int = 30
    delay_seconds: int = 0
    message_retention_period: int = 345600
    maximum_message_size: int = 1048576
    receive_message_wait_time_seconds: int = 0
    redrive_policy: RedrivePolicy | None = None
    inflight_limit: int = 120_000
    event_stream_max_len: int = 0
    shards: int = 1
    extra_attributes: Mapping[str, str] = dataclasses.field(default_factory=ExtraAttributes)
    fifo_queue: bool = False
    content_based_deduplication: bool = False
    deduplication_scope: str = "queue"
    fifo_throughput_limit: str = "perQueue"

    def __post_init__(self) -> None:
        for name, (_, low, high, _, _) in _INT_SETTINGS.items():
            check_int(name, getattr(self, name), low, high, InvalidAttributeValue)
        if not isinstance(self.fifo_queue, bool):
            raise InvalidAttributeValue(f"fifo_queue must be True or False, not {self.fifo_queue!r}")
        for name, (_, allowed, default) in _FIFO_SETTINGS.items():
            value = getattr(self, name)
            if type(value) is not type(default) or value not in allowed:
                raise InvalidAttributeValue(
                    f"{name} must be one of {', '.join(map(repr, allowed))}, not {value!r}"
                )
            if value != default and not self.fifo_queue:
                raise InvalidAttributeName(f"{name} applies to FIFO queues only")
        if self.redrive_policy is not None and not isinstance(self.redrive_policy, RedrivePolicy):
            raise InvalidAttributeValue("redrive_policy must be a RedrivePolicy or None")
        if not isinstance(self.extra_attributes, ExtraAttributes):  # else checked when made
            extra = check_extra_attributes(self.extra_attributes)
            # Empty means "not set": a config holds only the attributes that are.
            object.__setattr__(
                self, "extra_attributes", ExtraAttributes({k: v for k, v in extra.items() if v})
            )

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
        if "extra_attributes" in chosen:
            for name, value in self.extra_attributes.items():
                meta[EXTRA_PREFIX + name] = value
        if "fifo_queue" in chosen:
            meta["fifo"] = "1" if self.fifo_queue else "0"
        for name, (field, _, _) in _FIFO_SETTINGS.items():
            if name in chosen and self.fifo_queue:
                value = getattr(self, name)
                meta[field] = ("1" if value else "0") if isinstance(value, bool) else value
        return meta

    @classmethod
    def from_meta(cls, meta: Mapping[str, str]) -> QueueConfig:
        values: dict[str, Any] = {}
        for name, (field, _, _, default, scale) in _INT_SETTINGS.items():
            values[name] = int(meta[field]) // scale if field in meta else default
        if meta.get("dlq"):
            values["redrive_policy"] = RedrivePolicy(meta["dlq"], int(meta["max_receives"]))
        # Checked when stored: read back as they are.
        values["extra_attributes"] = ExtraAttributes(
            {
                name[len(EXTRA_PREFIX) :]: value
                for name, value in meta.items()
                if name.startswith(EXTRA_PREFIX) and name[len(EXTRA_PREFIX) :] in EXTRA_ATTRIBUTE_NAMES
            }
        )
        if meta.get("fifo") == "1":
            values["fifo_queue"] = True
            for name, (field, _, default) in _FIFO_SETTINGS.items():
                if field in meta:
                    text = meta[field]
                    values[name] = text == "1" if isinstance(default, bool) else text
        return cls(**values)


SETTING_NAMES = frozenset(f.name for f in fields(QueueConfig))


def check_setting_names(settings: Mapping[str, object]) -> None:
    unknown = sorted(set(settings) - SETTING_NAMES)
    if unknown:
        raise InvalidAttributeName(
            f"unknown queue attribute(s) {', '.join(unknown)}; known: {', '.join(sorted(SETTING_NAMES))}"
        )


def new_queue_config(name: str, settings: Mapping[str, Any]) -> QueueConfig:
    """The config of a new queue ``name`` with ``settings`` (QueueConfig fields) over its kind's defaults.

    Checks all a creation can without Redis (``Client.create_queue`` calls
    it): the name, each setting's range, FIFO settings on a FIFO queue only,
    ``fifo_queue`` agreeing with the name, a sharded FIFO queue's
    deduplication scope, and the dead-letter queue's name and kind (whether
    it exists is the caller's to check). Raises InvalidParameter subclasses.
    """
    check_queue_name(name)
    check_setting_names(settings)
    fifo = is_fifo_name(name)
    if settings.get("fifo_queue", fifo) != fifo:
        raise InvalidAttributeValue(
            f"queue {name!r}: a FIFO queue's name ends in .fifo, and only a FIFO queue's does"
        )
    defaults: dict[str, Any] = {"fifo_queue": fifo}
    if fifo:
        defaults["inflight_limit"] = FIFO_INFLIGHT_LIMIT
        if settings.get("shards", 1) != 1:
            # A group maps to one shard, so a deduplication id is checked in its group's.
            if settings.get("deduplication_scope", "messageGroup") != "messageGroup":
                raise InvalidAttributeValue(
                    f"queue {name!r}: a sharded FIFO queue deduplicates within message groups "
                    "(deduplication_scope 'messageGroup')"
                )
            defaults["deduplication_scope"] = "messageGroup"
    config = QueueConfig(**{**defaults, **settings})
    check_dead_letter_target(name, config)
    return config


def changed_config(name: str, settings: Mapping[str, Any], *, fifo: bool, sharded: bool) -> QueueConfig:
    """A QueueConfig of ``settings``, a change to queue ``name`` (FIFO or not, sharded or not).

    Checks all a change can without Redis (``Queue.set_attributes`` calls
    it): names and ranges, settings fixed at creation, a sharded queue's
    deduplication scope, and the dead-letter queue's name and kind.
    """
    check_setting_names(settings)
    if not settings:
        raise InvalidParameter("set_attributes needs at least one setting")
    for fixed in ("fifo_queue", "shards"):
        if fixed in settings:
            raise InvalidAttributeValue(f"{fixed} is set when queue {name!r} is created, never changed")
    if sharded and settings.get("deduplication_scope", "messageGroup") != "messageGroup":
        raise InvalidAttributeValue(
            f"queue {name!r} is sharded: its deduplication_scope is messageGroup, never queue"
        )
    config = QueueConfig(**settings, fifo_queue=fifo)
    check_dead_letter_target(name, config, sharded=sharded)
    return config


def check_dead_letter_target(name: str, config: QueueConfig, *, sharded: bool = False) -> None:
    """Check the dead-letter queue of queue ``name``'s ``config``, but for whether it exists.

    A queue may be its own dead-letter queue (not a sharded one); another
    must share its region and account, and its kind (FIFO or standard).
    """
    policy = config.redrive_policy
    if policy is None:
        return
    if policy.dead_letter_queue == name:
        # Accepted, as SQS does: no message ever leaves for it (receive counts just grow).
        if sharded or config.shards > 1:
            raise InvalidAttributeValue(f"sharded queue {name!r} cannot be its own dead-letter queue")
        return
    if split_name(policy.dead_letter_queue)[:2] != split_name(name)[:2]:
        raise InvalidAttributeValue(
            f"the dead-letter queue of {name!r} must be in its region and account, "
            f"not {policy.dead_letter_queue!r}"
        )
    if is_fifo_name(policy.dead_letter_queue) != is_fifo_name(name):
        kind = "a FIFO queue" if is_fifo_name(name) else "a standard queue"
        raise InvalidAttributeValue(
            f"the dead-letter queue of {kind} must be {kind}, not {policy.dead_letter_queue!r}"
        )


@dataclass(frozen=True)
class QueueInfo:
    """A queue's settings and state, as ``Queue.attributes`` reads them.

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
        groups: FIFO: message groups with messages stored (0 on a standard queue).
        groups_in_flight: FIFO: groups locked by messages in flight.
        noisy_groups: Standard queues with message groups (fair queues): groups
            noisy now, whose visible messages wait while other groups' are
            visible (SQS's ApproximateNumberOfNoisyGroups metric).
        visible_in_quiet_groups: Messages ready to be received outside noisy
            groups (ApproximateNumberOfMessagesVisibleInQuietGroups).
        in_flight_in_quiet_groups: Messages in flight outside noisy groups
            (ApproximateNumberOfMessagesNotVisibleInQuietGroups).
        oldest_age_in_quiet_groups: Seconds since the oldest visible message
            outside noisy groups was sent, or None
            (ApproximateAgeOfOldestMessageInQuietGroups).
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
    groups: int = 0
    groups_in_flight: int = 0
    noisy_groups: int = 0
    visible_in_quiet_groups: int = 0
    in_flight_in_quiet_groups: int = 0
    oldest_age_in_quiet_groups: float | None = None


COUNTERS = (
    "sent",
    "received",
    "redelivered",
    "deleted",
    "visibility_expired",
    "visibility_changed",
    "stale_receipts",
    "dead_lettered",
    "retention_expired",
    "empty_receives",
    "moved_in",
    "deduplicated",
)
"""The counters the scripts keep in each queue's ``stats`` hash."""
