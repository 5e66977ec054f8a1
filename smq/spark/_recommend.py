"""What the lifecycle numbers of a queue suggest: VisibilityTimeout, heartbeat, maxReceiveCount.

Pure Python (no Spark): ``QueueStats`` holds what ``smq.spark._analyze``
measured for one queue, ``recommend`` turns it into three pieces of
``Advice``, each with a value and one sentence that says why.

The rules:

- **VisibilityTimeout** = 6 × the p99 processing time, rounded up to whole
  seconds, kept within 1 s to 12 h. Six times the p99 leaves room for slow
  runs (a busy host, a cold cache) while a crashed consumer's message still
  comes back soon. (1 s, not SQS's 0 s, at the bottom: a timeout of 0 makes
  every received message visible again at once.)
- **Heartbeat**, when that timeout would not do: when the p99.9 is longer than
  it (more than 1 in 1,000 messages would run past their timeout and be
  processed twice), or when it is longer than 15 minutes (a crashed
  consumer's message would wait that long). Then: a timeout of 6 × the p50,
  kept within 30 s and 15 min (and never above the 6 × p99 one), extended
  every third of it, so two lost heartbeats in a row still leave the message
  hidden. No heartbeat holds a message past 12 hours after its receive.
- **maxReceiveCount** = the receive on which 99.9% of the deleted messages
  had succeeded (nearest rank), plus one for a transient failure, and at
  least 3, so that one crash or one expiry never dead-letters a good
  message; at most 1000 (the SQS limit).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_TIMEOUT = 43_200
"""12 hours: the SQS (and smq) maximum visibility timeout, in seconds."""
TIMEOUT_FACTOR = 6
"""The recommended timeout is this many times the p99 processing time."""
HEARTBEAT_ABOVE = 900
"""A timeout longer than this (s) is better replaced by a shorter one and a heartbeat."""
HEARTBEAT_MIN_TIMEOUT = 30
"""The shortest timeout recommended with a heartbeat (s): beats every 10 s at most."""
HEARTBEATS_PER_TIMEOUT = 3
"""Heartbeats per timeout: two may be lost before the message becomes visible."""
MIN_RECEIVES = 3
MAX_RECEIVES = 1000
SUCCESS_SHARE = 0.999
"""maxReceiveCount covers the receives on which this share of deleted messages succeeded."""


@dataclass(frozen=True)
class QueueStats:
    """What the lifecycle events of one queue show. Durations in seconds.

    Attributes:
        queue: The queue's name.
        events: Events read (after dropping repeats of the same event id).
        first_at, last_at: Times of the first and last event (s since the epoch).
        messages_sent: ``sent`` events.
        messages_received: Distinct messages received at least once.
        receives: ``received`` events.
        redeliveries: Receives of a message received before (receive count > 1).
        deletes: ``deleted`` events.
        stale_receipts: ``stale_receipt`` events (stale deletes and changes).
        visibility_expired: ``visibility_expired`` events: flights whose timeout ran out
            (by the timeout, or by a change that set a shorter one).
        late_deletes: Deletes at or after the effective deadline of their receive (its
            timeout, or the last visibility change of that receipt): the holder was still
            working when the message became visible again, though nobody took it meanwhile.
        duplicate_deliveries: Receives during which an earlier holder of the same message
            was still working: distinct (message, receive count) of ``stale_receipt``
            events (that count is the current receive's). Duplicate processing.
        dead_lettered: ``dead_lettered`` events.
        retention_expired: ``retention_expired`` events.
        processing_samples: Processing times measured (see ``processing_p50``).
        stale_samples: Of those, ones ended by a stale delete.
        processing_p50, processing_p99, processing_p999, processing_max: Exact
            percentiles (linear interpolation between the closest ranks) of the
            time from a receive to the delete by the consumer that received it: a
            ``deleted`` event of receive count n pairs with the ``received`` event of
            the same message and count n; a stale delete (current count n) pairs with
            the receive before the current one (count n - 1).
        wait_samples, wait_p50, wait_p99: Queue wait, from when a sent message
            became receivable (sent time + its delay) to its first receive.
        current_timeout: The visibility timeout of the latest receive.
        max_receive_count_seen: The receive count at which messages were
            dead-lettered (the queue's maxReceiveCount then), if any were.
        deleted_on_receive: Receive count -> messages deleted on that receive.
        processing_cdf: Processing-time quantiles at 0, 0.1%, ..., 100% (for charts).
        stream_readers: Spark streaming queries that consume the queue (known only when
            the events are read from Redis: ``smq.spark._consumers``). Their processing
            time is a micro-batch's life, from a task's receive to the delete after Spark
            commits the batch, and their driver extends what they hold.
        stream_timeout: The longest ``visibilityTimeout`` option among them, in seconds.
        stream_received, stream_redelivered: Messages their tasks received, and of those,
            messages received before (after a driver's restart, a lost lease, or by
            another consumer).
    """

    queue: str
    events: int = 0
    first_at: float | None = None
    last_at: float | None = None
    messages_sent: int = 0
    messages_received: int = 0
    receives: int = 0
    redeliveries: int = 0
    deletes: int = 0
    stale_receipts: int = 0
    visibility_expired: int = 0
    late_deletes: int = 0
    duplicate_deliveries: int = 0
    dead_lettered: int = 0
    retention_expired: int = 0
    processing_samples: int = 0
    stale_samples: int = 0
    processing_p50: float | None = None
    processing_p99: float | None = None
    processing_p999: float | None = None
    processing_max: float | None = None
    wait_samples: int = 0
    wait_p50: float | None = None
    wait_p99: float | None = None
    current_timeout: float | None = None
    max_receive_count_seen: int | None = None
    deleted_on_receive: Mapping[int, int] = field(default_factory=dict)
    processing_cdf: tuple[float, ...] = ()
    stream_readers: int = 0
    stream_timeout: int | None = None
    stream_received: int = 0
    stream_redelivered: int = 0

    @property
    def redelivery_rate(self) -> float | None:
        """Redeliveries / receives."""
        return self.redeliveries / self.receives if self.receives else None

    @property
    def expired_while_working(self) -> int:
        """Visibility timeouts that ran out while a consumer was still working: late deletes
        plus duplicate deliveries."""
        return self.late_deletes + self.duplicate_deliveries

    @property
    def expired_while_working_rate(self) -> float | None:
        """Expiries while working / receives."""
        return self.expired_while_working / self.receives if self.receives else None

    @property
    def dead_letter_rate(self) -> float | None:
        """Dead-lettered / messages received."""
        return self.dead_lettered / self.messages_received if self.messages_received else None

    def metrics(self) -> dict[str, Any]:
        """The numbers as a JSON-ready dict (without the chart's quantiles)."""
        numbers: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            if name in ("queue", "processing_cdf"):
                continue
            value = getattr(self, name)
            numbers[name] = (
                {str(k): v for k, v in sorted(value.items())} if name == "deleted_on_receive" else value
            )
        for name in (
            "redelivery_rate",
            "expired_while_working",
            "expired_while_working_rate",
            "dead_letter_rate",
        ):
            numbers[name] = getattr(self, name)
        return numbers


@dataclass(frozen=True)
class Advice:
    """One recommended setting: ``value`` (None: no change to recommend) and why."""

    setting: str
    value: int | None
    why: str


@dataclass(frozen=True)
class Recommendations:
    """The three recommendations for one queue."""

    visibility_timeout: Advice
    heartbeat: Advice
    max_receive_count: Advice

    def all(self) -> tuple[Advice, Advice, Advice]:
        """The three, in report order."""
        return (self.visibility_timeout, self.heartbeat, self.max_receive_count)


def seconds(value: float | None) -> str:
    """A duration for a sentence: 0.4996 s, 12.5 s, 192 s."""
    if value is None:
        return "-"
    return f"{value:.4g} s" if value < 100 else f"{value:,.0f} s"


def _ceil_seconds(value: float) -> int:
    # Round first: 6 x 0.35 is 2.0999999999999996 in binary, and must stay 3, not become 2.
    return math.ceil(round(value, 6))


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def nearest_rank(counts: Mapping[int, int], share: float) -> int | None:
    """The smallest key whose cumulative count reaches ``share`` of the total (nearest rank)."""
    total = sum(counts.values())
    if total <= 0:
        return None
    needed = share * total
    running = 0
    for key in sorted(counts):
        running += counts[key]
        if running >= needed - 1e-9:
            return key
    return max(counts)


def recommend(stats: QueueStats) -> Recommendations:
    """VisibilityTimeout, heartbeat and maxReceiveCount for one queue, each with a reason."""
    timeout, heartbeat = _timeout_and_heartbeat(stats)
    return Recommendations(timeout, heartbeat, _max_receive_count(stats))


def _timeout_and_heartbeat(stats: QueueStats) -> tuple[Advice, Advice]:
    p50, p99, p999 = stats.processing_p50, stats.processing_p99, stats.processing_p999
    if p50 is None or p99 is None or p999 is None:
        why = "no receive was followed by a delete from its consumer yet, so there is nothing to size it by"
        return Advice("VisibilityTimeout", None, why), Advice("heartbeat", None, why)
    if stats.stream_readers:
        return _stream_timeout(stats, p50)
    plain = _clamp(_ceil_seconds(TIMEOUT_FACTOR * p99), 1, MAX_TIMEOUT)
    clamped = " (kept within 12 h)" if TIMEOUT_FACTOR * p99 > MAX_TIMEOUT else ""
    long_tail = p999 > plain
    long_timeout = plain > HEARTBEAT_ABOVE
    if not (long_tail or long_timeout):
        timeout = Advice(
            "VisibilityTimeout",
            plain,
            f"6 × the p99 processing time ({seconds(p99)}), rounded up: room for slow runs, "
            f"and a crashed consumer's message is back within {seconds(plain)}",
        )
        heartbeat = Advice(
            "heartbeat",
            None,
            f"not needed: the p99.9 ({seconds(p999)}) fits in the {seconds(plain)} timeout, "
            "which is short enough to wait out after a crash",
        )
        return timeout, heartbeat
    short = min(plain, _clamp(_ceil_seconds(TIMEOUT_FACTOR * p50), HEARTBEAT_MIN_TIMEOUT, HEARTBEAT_ABOVE))
    every = max(1, short // HEARTBEATS_PER_TIMEOUT)
    reason = (
        f"the p99.9 ({seconds(p999)}) outruns 6 × the p99 ({seconds(plain)}{clamped})"
        if long_tail
        else f"6 × the p99 ({seconds(plain)}) would keep a crashed consumer's message hidden over 15 min"
    )
    ceiling = (
        "; no heartbeat holds a message past 12 h after its receive, so split work that takes longer"
        if p999 > MAX_TIMEOUT
        else ""
    )
    timeout = Advice(
        "VisibilityTimeout",
        short,
        f"{reason}: a timeout of 6 × the p50 ({seconds(p50)}, kept within 30 s-15 min) with a "
        f"heartbeat covers the tail and brings a crashed consumer's message back within {seconds(short)}",
    )
    heartbeat = Advice(
        "heartbeat",
        every,
        f"extend the visibility every {seconds(every)} (a third of the {seconds(short)} timeout) while "
        f"working, so two lost heartbeats still leave the message hidden{ceiling}",
    )
    return timeout, heartbeat


def _stream_timeout(stats: QueueStats, p50: float) -> tuple[Advice, Advice]:
    """A queue a Spark stream consumes: its driver already beats, so the option only bounds how
    long a dead driver's batch stays hidden (and spaces the beats)."""
    short = _clamp(_ceil_seconds(TIMEOUT_FACTOR * p50), HEARTBEAT_MIN_TIMEOUT, HEARTBEAT_ABOVE)
    timeout = Advice(
        "VisibilityTimeout",
        short,
        f"consumed by a Spark stream: set its visibilityTimeout option (its tasks receive with it, not "
        f"with the queue's). Its driver extends what a batch holds every third of it, so it only "
        f"bounds how long a dead driver's batch stays hidden: 6 × the p50 batch life ({seconds(p50)}), "
        f"kept within 30 s-15 min",
    )
    heartbeat = Advice(
        "heartbeat",
        max(1, short // HEARTBEATS_PER_TIMEOUT),
        "the stream's driver does it, every third of visibilityTimeout: nothing to add",
    )
    return timeout, heartbeat


def _max_receive_count(stats: QueueStats) -> Advice:
    succeeded_by = nearest_rank(stats.deleted_on_receive, SUCCESS_SHARE)
    if succeeded_by is None:
        return Advice(
            "maxReceiveCount",
            None,
            "no message was deleted yet, so nothing shows how many receives a success takes",
        )
    value = _clamp(max(MIN_RECEIVES, succeeded_by + 1), 1, MAX_RECEIVES)
    now = (
        f"; messages were dead-lettered after {stats.max_receive_count_seen} receives"
        if stats.max_receive_count_seen is not None
        else ""
    )
    return Advice(
        "maxReceiveCount",
        value,
        f"99.9% of the deleted messages succeeded by receive {succeeded_by}: one more for a transient "
        f"failure, at least {MIN_RECEIVES} so one crash or expiry never dead-letters a good message{now}",
    )
