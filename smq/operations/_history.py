"""A queue's history: its counts sampled once per step, kept in Redis beside the queue.

``smq serve`` samples the queues it knows every ``HISTORY_STEP`` seconds
(``lua/history_add.lua``), so that the console's charts show the last hour
when a page opens rather than starting blank. Any number of processes may
sample the same queue: a bucket keeps its first sample only. A sample costs
a read of the newest sample, an attributes read and one short script; a queue
another process sampled this step costs the first read only. The history
holds at most ``HISTORY_KEPT`` samples (a few tens of KB per queue).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from .._errors import QueueDoesNotExist
from ..core._config import QueueInfo, check_int
from ..core._keys import QueueKeys
from ..core._scripts import text

if TYPE_CHECKING:
    from ._queues import Queues

HISTORY_STEP = 10
"""Seconds between two samples of a queue."""
HISTORY_KEPT = 360
"""Samples kept per queue: an hour at ``HISTORY_STEP``."""
MAX_HISTORY = 10_000
"""Most samples one read returns (and most a history keeps)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """A queue's counts at one moment, as ``Queue.history`` returns them.

    ``at`` is the start of the sample's step, seconds since the epoch by the
    Redis server's clock; the counts are ``Queue.attributes()``'s approximate
    ones, and the counters the fleet-wide totals since the queue was created
    (a rate is the difference of two samples over their time apart).
    """

    at: float
    visible: int
    in_flight: int
    delayed: int
    sent: int
    received: int
    deleted: int
    visibility_expired: int
    dead_lettered: int


_COUNTS = tuple(field.name for field in fields(Sample))[1:]


def sample_text(info: QueueInfo) -> str:
    """The stored form of ``info``'s counts (the fields of ``Sample`` after ``at``, in order)."""
    counters = info.counters
    values = [info.visible, info.in_flight, info.delayed]
    values += [counters.get(name, 0) for name in _COUNTS[3:]]
    return "|".join(str(max(0, int(value))) for value in values)


def record(client: Queues, keys: QueueKeys, info: QueueInfo, step: int, keep: int) -> bool:
    """Keep ``info``'s counts as the sample of the current step; False if it has one already."""
    check_int("step", step, 1, 3600)
    check_int("keep", keep, 1, MAX_HISTORY)
    args = (client._now_arg(), step * 1000, keep, sample_text(info))
    reply = client.run("history_add", keys, args, queue=keys.name)
    return bool(reply[1])


def read(client: Queues, keys: QueueKeys, limit: int, stride: int = 1) -> tuple[float, list[Sample]]:
    """(Redis time now in seconds, the newest ``limit`` samples, oldest first); with ``stride``,
    every stride-th of them counting back from the newest (fewer to decode, for a trend)."""
    check_int("limit", limit, 1, MAX_HISTORY)
    check_int("stride", stride, 1, MAX_HISTORY)
    reply = client.run("history", keys, (client._now_arg(), limit), queue=keys.name)
    stored = reply[2:]
    chosen = stored[len(stored) - 1 :: -stride][::-1] if stride > 1 else stored
    return int(reply[1]) / 1000, [_sample(text(one)) for one in chosen]


def _sample(stored: str) -> Sample:
    parts = [int(part) for part in stored.split("|")]
    counts = (parts[1:] + [0] * len(_COUNTS))[: len(_COUNTS)]  # a shorter sample: a field added since
    return Sample(parts[0] / 1000, *counts)


HISTORY_QUEUES = 1000
"""Most queues ``smq serve`` samples, the first by name: a round costs three short scripts per
queue (one where another process sampled it first), so a Redis with more queues keeps history for
these only."""


def sample_queues(
    client: Queues, limit: int = HISTORY_QUEUES, stopping: Callable[[], bool] = lambda: False
) -> int:
    """Keep a sample of each of the first ``limit`` queues (by name) not sampled this step yet;
    returns how many were kept. A queue deleted meanwhile is passed over; once ``stopping()``
    says so, the rest are (a server that stops must not wait for a round of 1,000 queues)."""
    kept = 0
    for name in client.list_queues(limit=limit):
        if stopping():
            break
        try:
            kept += client.queue(name)._sample()
        except QueueDoesNotExist:
            continue
    return kept
