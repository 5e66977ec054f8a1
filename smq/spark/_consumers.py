"""Which Spark streams consume a queue: a registry their drivers keep, and ``smq analyze`` reads.

``smq:{<queue>}:streams`` is a hash: reader id (one per streaming query, see
``smq.spark._stream``) -> ``"<ms when last seen> <visibilityTimeout option>"``.
A driver writes its line when it first plans a batch and once an hour after,
and the hash lives as long as the stream's records do (the queue's retention
period and an hour), so a query dropped for good leaves the registry with them.
The counts of what each query's tasks received are in its index
(``smq.spark._stream_read.TALLIES``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..client._client import Client
from ..core._keys import QueueKeys
from ..core._scripts import reply_pairs
from ._stream_read import TALLIES, BatchRecord

REFRESH_SECONDS = 3600
"""How often a running driver writes its line again."""


@dataclass(frozen=True)
class StreamConsumer:
    """One streaming query that reads a queue.

    Attributes:
        reader: The query's reader id (kept in its checkpoint's offsets).
        visibility_timeout: Its ``visibilityTimeout`` option, in seconds.
        seen_at: When its driver last wrote its line (s since the epoch, the driver's clock).
        received: Messages its tasks received since the query began.
        redelivered: Of those, messages received before (after a restart, a lost lease, or by
            another consumer).
    """

    reader: str
    visibility_timeout: int
    seen_at: float
    received: int
    redelivered: int


def registry(queue: str) -> str:
    return QueueKeys.of(queue).extra("streams")


def register(client: Client, queue: str, reader: str, visibility_timeout: int, lasting: int) -> None:
    """Write (or refresh) the line of ``reader``, and drop the lines of queries whose records
    have expired (their index is gone)."""
    key, what = registry(queue), "register a stream"
    gone = [
        other
        for other, _ in reply_pairs(client._read(what, queue, key, "HGETALL", key))
        if other.decode() != reader and not _alive(client, queue, other.decode())
    ]
    if gone:
        client._write(what, queue, key, "HDEL", key, *gone)
    line = f"{int(time.time() * 1000)} {visibility_timeout}"
    client._write(what, queue, key, "HSET", key, reader, line)
    client._write(what, queue, key, "EXPIRE", key, lasting)


def _alive(client: Client, queue: str, reader: str) -> bool:
    index = BatchRecord(queue, reader, 0).index
    return bool(client._read("read the streams of a queue", queue, index, "EXISTS", index))


def stream_consumers(client: Client, queue: str) -> list[StreamConsumer]:
    """The streaming queries whose records of ``queue`` are still kept, oldest seen first."""
    key, what = registry(queue), "read the streams of a queue"
    found = []
    for reader, line in reply_pairs(client._read(what, queue, key, "HGETALL", key)):
        seen_ms, timeout = line.decode().split()
        index = BatchRecord(queue, reader.decode(), 0).index
        if not _alive(client, queue, reader.decode()):
            continue  # its records expired: a query dropped long ago
        received, redelivered = client._read(what, queue, index, "HMGET", index, *TALLIES)
        found.append(
            StreamConsumer(
                reader.decode(), int(timeout), int(seen_ms) / 1000, int(received or 0), int(redelivered or 0)
            )
        )
    return sorted(found, key=lambda consumer: consumer.seen_at)
