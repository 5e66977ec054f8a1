"""The tasks' side of the streaming source: each partition receives its share of a micro-batch.

A task receives its messages from the queue itself, on the executor, and
records them in Redis before it gives Spark a row: one write (HSETNX, the
claim) of the rows with their receipts, for any later evaluation of the same
partition and for whoever deletes them; then a copy of the receipts alone, for
the driver's heartbeat. Spark may evaluate a partition more than once (a
retried task, a batch a ``foreachBatch`` function reads twice, a speculative
copy): every evaluation after the first that recorded reads the same rows
back, so all of them see the same messages, and the receipts deleted are
those of the rows Spark was given.

Two evaluations that receive at once both hold messages; the first to record
wins, and the other lets its messages go (visibility 0) and returns the
winner's rows. A task that dies between its receive and its record leaves
messages no record names: nobody keeps them hidden, and they come back when
their visibility timeout runs out, to be received again.

The records of a batch are two hashes under the queue's hash tag (so on a
Redis Cluster they live on the queue's node):
``smq:{<queue>}:stream:<reader>:<batch>:rows`` and ``...:receipts``, field:
the partition number; ``<reader>`` names the query (see ``smq.spark._stream``).
When Spark has committed the batch, the tasks of the next one delete its
messages and leave in each share's place an empty share (a tombstone: a late
copy of a task of the committed batch finds it and gives no rows, instead of
recording messages nobody would ever commit); the driver drops the hashes once
those deletes are done. Records expire an hour after the queue's retention
period, as the messages they name would.

A partition may name messages not to give as rows (``given``): messages of a
replayed batch that another receive took while the driver was down. If one
comes back to this query, its receipt is recorded, to be deleted with the
batch, but the batch that first gave it keeps its row.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from .._errors import OverLimit, SmqError
from ..client._client import Client
from ..client._queue import Queue
from ..connection._settings import Settings
from ..core._keys import QueueKeys
from ..core._message import ChangeEntry, DeleteEntry, Message
from ._rows import attribute_strings

log = logging.getLogger("smq.spark")
T = TypeVar("T")
_now = time.monotonic  # a test's clock can stand in


@dataclass(frozen=True)
class BatchRecord:
    """Where the messages of one micro-batch of one reader are recorded."""

    queue: str
    reader: str
    batch: int

    def _key(self, part: str) -> str:
        return QueueKeys.of(self.queue).extra(f"stream:{self.reader}:{self.batch}:{part}")

    @property
    def index(self) -> str:
        """The reader's index: batch -> "<partitions> <messages wanted>", for a restart."""
        return QueueKeys.of(self.queue).extra(f"stream:{self.reader}")

    @property
    def rows(self) -> str:
        return self._key("rows")

    @property
    def receipts(self) -> str:
        return self._key("receipts")


@dataclass
class ReceivePartition(InputPartition):
    """One task's share of a micro-batch: up to ``wanted`` messages, received by the task.

    ``deletes`` names the recorded shares (record, partition number) of batches Spark has
    committed, whose messages this task deletes before it receives.
    """

    record: BatchRecord
    index: int
    wanted: int
    visibility_timeout: int
    settings: Settings
    deletes: tuple[tuple[BatchRecord, int], ...] = ()
    lasting: int = 345_600 + 3600  # seconds the records live
    given: frozenset[str] = frozenset()  # ids not to give as rows


# One client per Python worker process: Spark reuses its workers from task to task.
_CLIENTS: dict[Settings, Client] = {}


def client_for(settings: Settings) -> Client:
    client = _CLIENTS.get(settings)
    if client is None:
        client = _CLIENTS[settings] = Client(settings=settings)
        client._require_noeviction()  # the batch records it writes carry a TTL
    return client


def read_partition(partition: ReceivePartition) -> Iterator[Any]:
    """The rows of ``partition`` as one Arrow record batch (none if it has no rows): those
    recorded by an earlier evaluation, else newly received."""
    client = client_for(partition.settings)
    record = partition.record
    queue = client.get_queue(record.queue)
    field = str(partition.index)
    stored = _recorded(client, record, field)
    if stored is None:
        # The deletes come first (a FIFO group they unlock can be received at once). An
        # evaluation that finds a record knows the one that recorded did them.
        committed = [r for old, part in partition.deletes for r in share_receipts(client, old, str(part))]
        messages = _receive(queue, partition.wanted, partition.visibility_timeout, committed)
        for old, part in partition.deletes:  # deleted: their shares become tombstones
            what = "drop a micro-batch's record"
            client._write(what, old.queue, old.rows, "HSET", old.rows, str(part), _TOMBSTONE)
            client._write(
                what, old.queue, old.rows, "EXPIRE", old.rows, partition.lasting
            )  # if HSET made it anew
            client._write(what, old.queue, old.receipts, "HDEL", old.receipts, str(part))
        if partition.wanted == 0:
            return iter(())  # only deleted: nothing to record (doing it again is harmless)
        entries = [_entry(m) for m in messages if m.message_id not in partition.given]
        if len(entries) < len(messages):
            log.warning(
                "smq: %d messages given by a batch before a restart came back; their receipts are kept "
                "for the delete, their rows are not given again",
                len(messages) - len(entries),
            )
        payload = json.dumps(entries, separators=(",", ":"))
        if not _claim(partition, client, payload, [m.receipt_handle for m in messages]):
            # Another evaluation of this partition recorded first: its rows stand.
            _release(queue, messages)
            stored = _recorded(client, record, field)
            if stored is None:  # its record expired in between: nothing to give
                return iter(())
        elif messages:
            _tally(client, record, messages)
    if stored is not None:
        entries = json.loads(stored)
    return iter([arrow_batch(entries)] if entries else [])


def _recorded(client: Client, record: BatchRecord, field: str) -> str | None:
    value = client._read("read a micro-batch", record.queue, record.rows, "HGET", record.rows, field)
    return None if value is None else value.decode()


def _claim(partition: ReceivePartition, client: Client, payload: str, receipts: list[str]) -> bool:
    """Record the rows and their receipts if no evaluation has; then (the winner only) a copy
    of the receipts alone, which the driver reads without the bodies."""
    what, record, field = "record a micro-batch", partition.record, str(partition.index)
    lasting = partition.lasting
    if not client._write(what, record.queue, record.rows, "HSETNX", record.rows, field, payload):
        return False
    client._write(what, record.queue, record.rows, "EXPIRE", record.rows, lasting)
    client._write(what, record.queue, record.receipts, "HSET", record.receipts, field, " ".join(receipts))
    client._write(what, record.queue, record.receipts, "EXPIRE", record.receipts, lasting)
    return True


def _tally(client: Client, record: BatchRecord, messages: list[Message]) -> None:
    """Count what a share received in the reader's index (for the query's progress)."""
    what, index = "count a micro-batch", record.index
    client._write(what, record.queue, index, "HINCRBY", index, TALLIES[0], len(messages))
    again = sum(1 for m in messages if m.receive_count > 1)
    if again:
        client._write(what, record.queue, index, "HINCRBY", index, TALLIES[1], again)


_TOMBSTONE = "[]"  # a share whose messages were deleted: no rows, no receipts
# Fields of the reader's index beside its batches: messages the tasks received, and of those
# received before.
TALLIES = ("received", "redelivered")


def share_receipts(client: Client, record: BatchRecord, field: str) -> list[str]:
    """The receipts of one recorded share: from their copy, else from the rows (the copy is
    written after the claim, so a task that died in between left none)."""
    value = client._read("read a micro-batch", record.queue, record.receipts, "HGET", record.receipts, field)
    if value is not None:
        return str(value.decode()).split()
    stored = _recorded(client, record, field)
    return [] if stored is None else [str(entry[-1]) for entry in json.loads(stored)]


def _receive(queue: Queue, wanted: int, timeout: int, deletes: list[str]) -> list[Message]:
    """Receive up to ``wanted`` messages, deleting ``deletes`` on the way, 10 a round trip each.

    Receiving stops after a third of the visibility timeout: until the share is
    recorded, its first messages are held by their receive alone, and the
    driver's heartbeat (every third of the timeout) must find them recorded
    while they still are.
    """
    messages: list[Message] = []
    empty = False
    done = 0  # of deletes
    until = _now() + timeout / 3
    while done < len(deletes) or (len(messages) < wanted and not empty):
        if messages and not empty and _now() > until:
            empty = True  # enough for this share: the rest waits for the next batch
            continue
        entries = [DeleteEntry(str(n), r) for n, r in enumerate(deletes[done : done + 10])]
        done += len(entries)
        count = min(10, wanted - len(messages))
        got: list[Message] = []
        if count <= 0 or empty:
            result = queue.delete_batch(entries)
        else:
            try:
                if entries:
                    result, got = queue.delete_and_receive(
                        entries, count, visibility_timeout=timeout, wait_time_seconds=0
                    )
                else:
                    got = queue.receive(count, visibility_timeout=timeout, wait_time_seconds=0)
            except OverLimit:  # the queue's in-flight limit: this share takes what it has
                if entries:
                    result = queue.delete_batch(entries)  # safe to repeat
            messages += got
            empty = not got
        if entries:
            for failure in result.failed:
                log.warning("smq: delete of a committed message failed: %s", failure.message)
    return messages


def chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """``items`` 10 at a time, as batch calls take them."""
    for start in range(0, len(items), 10):
        yield items[start : start + 10]


def _release(queue: Queue, messages: list[Message]) -> None:
    for chunk in chunks(messages):
        try:
            queue.change_visibility_batch(
                [ChangeEntry(str(i), m.receipt_handle, 0) for i, m in enumerate(chunk)]
            )
        except SmqError:
            pass  # they come back when their timeout runs out instead


def _entry(message: Message) -> list[Any]:
    return [
        message.message_id,
        message.body,
        attribute_strings(message.attributes),
        message.sent_at,
        message.receive_count,
        message.first_received_at,
        message.message_group_id,
        message.sequence_number,
        message.deduplication_id,
        message.receipt_handle,  # not a column: whoever deletes the share reads it
    ]


def arrow_batch(entries: list[list[Any]]) -> Any:
    """Recorded messages as one ``pyarrow.RecordBatch`` of ``MESSAGE_SCHEMA``'s columns.

    Spark takes Arrow from a Python data source as it is; tuples it would convert
    row by row in Python, which costs more than receiving the messages.
    """
    columns = list(zip(*entries, strict=True))
    ids, bodies, attributes, sent, counts, first, groups, sequences, dedups, _ = columns
    count = len(entries)
    arrays = [
        pa.array(ids, pa.string()),
        pa.array(bodies, pa.string()),
        pa.array([list(a.items()) for a in attributes], _MAP),
        pa.array([_micros(t) for t in sent], _TIME),
        pa.array(counts, pa.int32()),
        pa.array([_micros(t) for t in first], _TIME),
        pa.array(groups, pa.string()),
        pa.array(sequences, pa.string()),
        pa.array(dedups, pa.string()),
        pa.array(["in_flight"] * count, pa.string()),
        pa.nulls(count, _TIME),
        pa.nulls(count, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema())


def _micros(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1_000_000)


_MAP = pa.map_(pa.string(), pa.string())
_TIME = pa.timestamp("us", tz="UTC")  # as Spark's to_arrow_schema(..., timezone="UTC") has it


_ARROW_TYPES = {"string": pa.string(), "int": pa.int32(), "timestamp": _TIME, "map<string,string>": _MAP}


@cache
def arrow_schema() -> Any:
    """``MESSAGE_SCHEMA`` in Arrow, as Spark expects it from a Python data source (UTC times)."""
    from ._source import MESSAGE_SCHEMA

    columns = [column.split(" ", 1) for column in MESSAGE_SCHEMA.split(", ")]
    return pa.schema([pa.field(name, _ARROW_TYPES[kind]) for name, kind in columns])
