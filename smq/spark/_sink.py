"""Write: each row becomes a message, sent in batches of 10 by the task that holds it.

A task that fails halfway, or runs twice (retry, speculation), sends its rows
again. Each message therefore carries a deduplication id that the same row
gets in every attempt, and the queue stores each id once within 5 minutes
(on standard queues too: an smq extension). The id is the SHA-256 of the
write's id, the partition number, a digest of the message's content and how
many equal messages came before it in the partition: it does not depend on row order,
which Spark does not promise to repeat after a shuffle. It does depend on the
partition holding the same rows each attempt, as Spark's retries guarantee
for deterministic input.

A write is named by its ``writeId`` (a new one unless the option gives it),
which the driver prints before any task runs. Each task that has sent its
whole partition notes it in the write's ledger, a hash
``smq:{<queue>}:sink:<writeId>`` (partition -> "<sent> <duplicates>") that
lives as long as the queue keeps messages (a day when smq named the write). The same write run again (the same
``writeId``, as after a driver that died) sends nothing for a partition its
ledger names, however long after; a partition cut short sends only what the
deduplication ids do not drop, so within 5 minutes of the first run nothing twice.
"""

from __future__ import annotations

import decimal
import hashlib
import json
import logging
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import MapType, StringType, StructType

from .._errors import InvalidParameter, SmqError
from ..client._client import Client
from ..client._queue import Queue
from ..core._batch import MAX_BATCH, MAX_BATCH_BYTES
from ..core._keys import QueueKeys
from ..core._message import AttributeValue, SendEntry, attributes_size, to_attributes
from ._options import SourceOptions

log = logging.getLogger("smq.spark")


@dataclass
class SentPartition(WriterCommitMessage):
    """What one task sent: messages stored, and duplicates the queue dropped."""

    partition: int
    sent: int
    duplicates: int
    earlier: bool = False  # sent by an earlier run of this write (its ledger says so)


class SinkError(SmqError):
    """A row the queue refused; the task fails with the row's position and the reason."""


class QueueWriter(DataSourceWriter):
    """Sends a DataFrame's rows to one queue, at most once per row (see the module docstring)."""

    def __init__(self, options: SourceOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise InvalidParameter('the smq sink appends messages; write with mode("append")')
        self.options = options
        self.write_id = options.write_id or uuid.uuid4().hex
        with Client(settings=options.settings) as client:
            queue = client.get_queue(options.queue)
            self.fifo = queue.fifo
            # A ledger of a write named by the user lasts as long as its messages could; one of
            # a write with a new id, a day (for a rerun by the id it printed).
            retention = queue.attributes().config.message_retention_period + 3600
            self.lasting = retention if options.write_id else 86_400
        fields = {f.name: f.dataType for f in schema.fields}
        if fields.get(options.body_column) != StringType():
            raise InvalidParameter(f"the smq sink needs a string column {options.body_column!r} for the body")
        for name in options.attribute_columns:
            if name not in fields:
                raise InvalidParameter(f"attributeColumns: no column {name!r}")
        self.map_column = "attributes" if isinstance(fields.get("attributes"), MapType) else None
        self.group_column = options.group_column if options.group_column in fields else None
        self.dedup_column = options.deduplication_column if options.deduplication_column in fields else None
        self.delay_column = options.delay_column if options.delay_column in fields else None
        # Every row of such a write is a body alone, so the body alone can name it.
        self.body_only = not (
            self.map_column or options.attribute_columns or self.group_column or self.delay_column
        )
        if self.fifo and self.group_column is None:
            raise InvalidParameter(
                f"queue {options.queue!r} is a FIFO queue: the rows need a {options.group_column!r} column"
            )
        if self.fifo and self.delay_column is not None:
            raise InvalidParameter(f"FIFO queue {options.queue!r} takes no per-message delay column")
        # Before any task runs: a driver killed mid-write has said how to run it again.
        said = (
            f"smq: write {self.write_id} to queue {options.queue!r} begins; to run it again without "
            f'duplicates (after a failure), use option("writeId", "{self.write_id}")'
        )
        print(said, file=sys.stderr, flush=True)
        log.info(said)

    @property
    def ledger(self) -> str:
        """The write's ledger: partition -> "<sent> <duplicates>", for each one sent whole."""
        return QueueKeys.of(self.options.queue).extra(f"sink:{self.write_id}")

    def write(self, iterator: Iterator[Any]) -> SentPartition:
        """Runs in each task: send the partition's rows, 10 to a call."""
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        seen: Counter[bytes] = Counter()
        sent = duplicates = 0
        with Client(settings=self.options.settings) as client:
            what, name, ledger = "keep a write's ledger", self.options.queue, self.ledger
            if client._read(what, name, ledger, "HGET", ledger, str(partition)) is not None:
                return SentPartition(partition, 0, 0, earlier=True)
            queue = client.queue(self.options.queue)
            batch: list[SendEntry] = []
            size = 0
            for row in iterator:
                entry = self._entry(row, partition, seen)
                entry_size = _size(entry)
                if batch and (len(batch) == MAX_BATCH or size + entry_size > MAX_BATCH_BYTES):
                    more, dropped = self._send(queue, batch)
                    sent, duplicates, batch, size = sent + more, duplicates + dropped, [], 0
                batch.append(entry)
                size += entry_size
            if batch:
                more, dropped = self._send(queue, batch)
                sent, duplicates = sent + more, duplicates + dropped
            client._write(what, name, ledger, "HSET", ledger, str(partition), f"{sent} {duplicates}")
            client._write(what, name, ledger, "EXPIRE", ledger, self.lasting)
        return SentPartition(partition, sent, duplicates)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        parts = [m for m in messages if isinstance(m, SentPartition)]
        earlier = sum(p.earlier for p in parts)
        if earlier:
            # Loud: a writeId used again for other rows would send nothing for these partitions.
            said = (
                f"smq: write {self.write_id} to {self.options.queue!r}: {earlier} of {len(parts)} partitions "
                "were sent whole by an earlier run of this write, and skipped"
            )
            print(said, file=sys.stderr, flush=True)
        log.info(
            "smq: write %s to %r: %d messages sent, %d duplicates from retried tasks dropped, "
            "%d partitions sent by an earlier run of this write",
            self.write_id,
            self.options.queue,
            sum(p.sent for p in parts),
            sum(p.duplicates for p in parts),
            earlier,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.sent for m in messages if isinstance(m, SentPartition))
        log.warning(
            "smq: write %s to %r failed; the %d messages its finished tasks sent stay in the queue "
            "(writing again with option writeId=%s sends only the rest)",
            self.write_id,
            self.options.queue,
            sent,
            self.write_id,
        )

    # -- one row ----------------------------------------------------------------------

    def _entry(self, row: Any, partition: int, seen: Counter[bytes]) -> SendEntry:
        body = row[self.options.body_column]
        if body is None:
            raise SinkError(f"a row has a null {self.options.body_column!r}: a message needs a body")
        attributes: dict[str, AttributeValue] = {}
        if self.map_column is not None and row[self.map_column]:
            attributes.update({str(k): str(v) for k, v in row[self.map_column].items() if v is not None})
        for name in self.options.attribute_columns:
            value = _attribute(row[name])
            if value is not None:
                attributes[name] = value
        group = row[self.group_column] if self.group_column else None
        delay = row[self.delay_column] if self.delay_column else None
        dedup = row[self.dedup_column] if self.dedup_column else None
        if dedup is None and self.options.deduplicate:
            if self.body_only:
                content = body.encode()
            else:
                fields = [body, sorted((k, str(v)) for k, v in attributes.items()), group, delay]
                content = json.dumps(fields, ensure_ascii=False).encode()
            # Count equal messages by a short digest: a task keeps one per distinct message.
            digest = hashlib.blake2b(content, digest_size=16).digest()
            seen[digest] += 1
            key = b"%s\n%d\n%d\n%s" % (self.write_id.encode(), partition, seen[digest], digest)
            dedup = hashlib.sha256(key).hexdigest()
        return SendEntry("0", body, delay, attributes or None, group, dedup)

    def _send(self, queue: Queue, batch: list[SendEntry]) -> tuple[int, int]:
        numbered = [
            SendEntry(str(i), e.body, e.delay_seconds, e.attributes, e.message_group_id, e.deduplication_id)
            for i, e in enumerate(batch)
        ]
        result = queue.send_batch(numbered)
        if result.failed:
            first = result.failed[0]
            raise SinkError(f"queue {self.options.queue!r} refused a row: {first.code}: {first.message}")
        return (
            sum(1 for r in result.successful if not r.duplicate),
            sum(1 for r in result.successful if r.duplicate),
        )


def _size(entry: SendEntry) -> int:
    """The bytes ``entry`` counts toward a batch's size, as the queue counts them."""
    return len(entry.body.encode()) + attributes_size(to_attributes(entry.attributes))


def _attribute(value: Any) -> AttributeValue | None:
    """A column value as a message attribute: numbers as Number, bytes as Binary, the rest as String."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, decimal.Decimal, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return str(value)
