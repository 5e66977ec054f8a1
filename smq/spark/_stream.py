"""Streaming read: micro-batches of received messages, deleted only when Spark commits them.

The reader lives on the driver, in the one Python process that Spark keeps for
a streaming source. Each trigger, ``latestOffset`` receives up to
``maxMessagesPerBatch`` messages and names them a new batch; ``partitions``
hands their rows to the tasks; ``commit`` deletes them once Spark has written
the batch's output and its commit log. Until then a heartbeat thread keeps
them invisible. If the driver dies, the heartbeat stops with it and the
messages come back when their timeout runs out, to be received and processed
again: at least once, end to end.

Offsets are ``{"batch": n}``, increasing. A restarted query replays its
last uncommitted batch by offset; that batch's messages are no longer held by
this process (their receipts died with the old one), so it replays as empty,
and the messages arrive again in a later batch once their timeout runs out.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from .._client import Client
from .._errors import SmqError, VisibilityCeilingExceeded
from .._message import ChangeEntry, DeleteEntry, Message
from .._queue import Queue
from ._options import SourceOptions
from ._rows import message_row

log = logging.getLogger("smq.spark")

try:  # PySpark 4.2+: Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # pragma: no cover - PySpark 4.0 and 4.1

    class _AvailableNow:  # type: ignore[no-redef]
        pass


@dataclass
class RowsPartition(InputPartition):
    """The rows of part of a micro-batch, carried to the task that reads them."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)


class QueueStreamReader(DataSourceStreamReader, _AvailableNow):
    """Receives micro-batches from one queue; deletes a batch when Spark commits it."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._setup()

    # Spark pickles a reader to its tasks for read(); only the options travel.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._setup()

    def _setup(self) -> None:
        self._batches: dict[int, list[Message]] = {}  # batch -> messages not yet committed
        self._lock = threading.Lock()
        self._last = int(time.time() * 1000)  # above any batch number of an earlier run
        self._budget: int | None = None  # Trigger.AvailableNow: messages left to take
        self._client: Client | None = None
        self._held: Queue | None = None
        self._stopping = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # -- Spark's calls, on the driver --------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        return {"batch": 0}

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        """Receive the next micro-batch; return ``start`` unchanged when the queue has none."""
        wanted = self.options.max_messages_per_batch
        max_rows = getattr(limit, "max_rows", None)
        if isinstance(max_rows, int):
            wanted = min(wanted, max_rows)
        if self._budget is not None:
            wanted = min(wanted, self._budget)
        messages = self._receive(wanted) if wanted > 0 else []
        previous = max(self._last, (start or {}).get("batch", 0))
        if not messages:
            with self._lock:
                waiting = any(self._batches.values())
            if not waiting:
                return {"batch": previous}
            # Spark commits a batch only when it plans the next one. An empty
            # batch makes it commit the last one now, so its messages are
            # deleted instead of waiting, hidden, for more messages to come.
            self._last = previous + 1
            return {"batch": self._last}
        if self._budget is not None:
            self._budget -= len(messages)
        batch = previous + 1
        with self._lock:
            self._batches[batch] = messages
        self._last = batch
        self._start_heartbeat()
        return {"batch": batch}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        with self._lock:
            messages = [
                message
                for batch, held in sorted(self._batches.items())
                if start["batch"] < batch <= end["batch"]
                for message in held
            ]
        if not messages:
            return []
        count = min(self.options.num_partitions, len(messages))
        parts: list[list[tuple[Any, ...]]] = [[] for _ in range(count)]
        for n, message in enumerate(messages):
            # A FIFO group's messages stay together, in order, in one partition.
            group = message.message_group_id
            parts[zlib.crc32(group.encode()) % count if group is not None else n % count].append(
                message_row(message)
            )
        return [RowsPartition(rows) for rows in parts if rows]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, RowsPartition)
        return iter(partition.rows)

    def commit(self, end: dict[str, int]) -> None:
        """Spark has committed every batch up to ``end``: delete their messages."""
        with self._lock:
            done = [batch for batch in self._batches if batch <= end["batch"]]
            messages = [m for batch in done for m in self._batches.pop(batch)]
        for chunk in _chunks(messages):
            result = self._queue().delete_batch(
                [DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(chunk)]
            )
            for failure in result.failed:
                log.warning("smq: delete of a committed message failed: %s", failure.message)

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: take only as many messages as are visible now."""
        self._budget = self._queue().attributes().visible

    def stop(self) -> None:
        """The source ends in order: stop the heartbeat and let uncommitted messages go at once.

        Their batches were not committed, so Spark will not count them done:
        visibility 0 returns them to the queue now rather than after the timeout.
        (PySpark 4.3 kills the source's process when a query stops or fails,
        without this call; the heartbeat dies with it and they come back when
        the timeout runs out.)
        """
        self._stopping.set()
        with self._lock:
            messages = [m for held in self._batches.values() for m in held]
            self._batches.clear()
        try:
            self._change(messages, 0)
        except SmqError as error:
            log.warning("smq: could not release %d uncommitted messages: %s", len(messages), error)
        if self._client is not None:
            self._client.close()

    # -- the queue -----------------------------------------------------------------------

    def _queue(self) -> Queue:
        if self._held is None:
            self._client = Client(settings=self.options.settings)
            self._held = self._client.get_queue(self.options.queue)
        return self._held

    def _receive(self, wanted: int) -> list[Message]:
        queue = self._queue()
        timeout = self.options.visibility_timeout
        # The first receive may wait for a message; the rest take what is there.
        got = queue.receive(
            min(10, wanted), visibility_timeout=timeout, wait_time_seconds=self.options.wait_time_seconds
        )
        messages = list(got)
        while got and len(messages) < wanted:
            got = queue.receive(
                min(10, wanted - len(messages)), visibility_timeout=timeout, wait_time_seconds=0
            )
            messages += got
        return messages

    def _change(self, messages: list[Message], timeout: int) -> list[Message]:
        """Set ``timeout`` on ``messages``; return those whose receipt no longer holds them.

        A message at its 12-hour ceiling cannot be extended further but is still
        held until then: it stays in its batch, and a commit before the ceiling
        still deletes it.
        """
        lost: list[Message] = []
        for chunk in _chunks(messages):
            result = self._queue().change_visibility_batch(
                [ChangeEntry(str(i), m.receipt_handle, timeout) for i, m in enumerate(chunk)]
            )
            for failure in result.failed:
                if failure.code == VisibilityCeilingExceeded.__name__:
                    log.warning("smq: a micro-batch message reached its 12-hour ceiling: %s", failure.message)
                else:
                    lost.append(chunk[int(failure.id)])
        return lost

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._beat, name="smq-stream-heartbeat", daemon=True)
            self._heartbeat.start()

    def _beat(self) -> None:
        """Every third of the timeout, extend every uncommitted message by a full timeout."""
        interval = max(0.2, self.options.visibility_timeout / 3)
        while not self._stopping.wait(interval):
            with self._lock:
                held = [m for messages in self._batches.values() for m in messages]
            try:
                lost = self._change(held, self.options.visibility_timeout)
            except SmqError as error:  # Redis away: try again next beat
                log.warning("smq: heartbeat failed: %s", error)
                continue
            if lost:
                # Another receive holds them now (this lease ran out first): the
                # batch still carries them, so they will be processed twice.
                log.warning(
                    "smq: %d in-flight messages of a micro-batch were taken by another receive", len(lost)
                )
                gone = {m.receipt_handle for m in lost}
                with self._lock:
                    self._batches = {
                        batch: [m for m in messages if m.receipt_handle not in gone]
                        for batch, messages in self._batches.items()
                    }


def _chunks(messages: list[Message]) -> Iterator[list[Message]]:
    for start in range(0, len(messages), 10):
        yield messages[start : start + 10]
