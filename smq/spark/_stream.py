"""Streaming read: micro-batches that executor tasks receive, deleted only when Spark commits them.

The driver plans; the executors read. Each trigger, ``latestOffset`` (on the
driver, in the Python process Spark keeps for a streaming source) names a new
batch when the queue has visible messages, and ``partitions`` splits up to
``maxMessagesPerBatch`` of them into ``numPartitions`` shares. Each share is a
task that receives its messages from the queue itself and records them in
Redis (``smq.spark._stream_read``), so the read grows with the executors. The
driver keeps every message of a batch hidden (a heartbeat thread extends the
recorded receipts every third of the timeout) until ``commit``, which Spark
calls once the batch's output and its commit log are written, and which
deletes exactly the batch's recorded messages, wherever they were read.

If the driver dies, the heartbeat stops with it and the messages come back
when their timeout runs out, to be received and processed again: at least
once, end to end. A task that fails, or an executor lost mid-batch, reads
again what its partition recorded (or, if it died before recording, its
messages come back by their timeout).

Offsets are ``{"batch": n}``, increasing. A restarted query replays its
last uncommitted batch by offset; this process did not plan that batch (the
old one did, and its heartbeat died with it), so it replays as empty, and the
messages arrive again in a later batch once their timeout runs out.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from .._client import Client
from .._errors import SmqError, VisibilityCeilingExceeded
from .._message import ChangeEntry, DeleteEntry
from .._queue import Queue
from ._options import SourceOptions
from ._stream_read import (
    BatchRecord,
    ReceivePartition,
    chunks,
    read_partition,
    record_seconds,
    share_receipts,
)

log = logging.getLogger("smq.spark")

try:  # PySpark 4.2+: Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # pragma: no cover - PySpark 4.0 and 4.1

    class _AvailableNow:  # type: ignore[no-redef]
        pass


_POLL_SECONDS = 0.05


class QueueStreamReader(DataSourceStreamReader, _AvailableNow):
    """Plans micro-batches of one queue for executor tasks; deletes a batch when Spark commits it."""

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
        # Names this run's records: a restarted query's batch numbers may repeat.
        self._reader = uuid.uuid4().hex[:16]
        self._planned: dict[int, int] = {}  # batch not yet committed -> messages it may take
        # Batches whose partitions Spark has asked for -> how many (its record's fields 0 .. n-1):
        self._parts: dict[int, int] = {}
        # Committed batches whose messages the tasks of a later batch delete:
        self._handed: dict[int, list[int]] = {}  # later batch -> the committed batches it deletes
        self._unused = 0  # messages committed batches planned but did not take
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
        """Plan the next micro-batch if the queue has visible messages; else return ``start``."""
        wanted = self.options.max_messages_per_batch
        max_rows = getattr(limit, "max_rows", None)
        if isinstance(max_rows, int):
            wanted = min(wanted, max_rows)
        if self._budget is not None:
            self._settle_budget()
            wanted = min(wanted, self._budget)
        previous = max(self._last, (start or {}).get("batch", 0))
        with self._lock:
            waiting = any(self._planned.values())  # a batch that may hold messages awaits its commit
        # With a batch awaiting its commit, do not wait for messages: an empty batch commits it now.
        if wanted <= 0 or not self._visible_soon(0 if waiting else self.options.wait_time_seconds):
            if not waiting:
                return {"batch": previous}
            # Spark commits a batch only when it plans the next one. An empty
            # batch makes it commit the last one now, so its messages are
            # deleted instead of waiting, hidden, for more messages to come.
            wanted = 0
        batch = previous + 1
        with self._lock:
            self._planned[batch] = wanted
        if self._budget is not None:
            self._budget -= wanted
        self._last = batch
        self._start_heartbeat()
        return {"batch": batch}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        with self._lock:
            # A batch this process did not plan (a replay after a restart) reads nothing.
            planned = [(b, n) for b, n in sorted(self._planned.items()) if start["batch"] < b <= end["batch"]]
        options = self.options
        parts: list[InputPartition] = []
        for batch, wanted in planned:
            record = BatchRecord(options.queue, self._reader, batch)
            with self._lock:
                handed = [
                    (self._record(old), field)
                    for old in self._handed.get(batch, [])
                    for field in range(self._parts.get(old, 0))
                ]
                # A batch of no messages that carries deletes has tasks that only delete.
                count = min(options.num_partitions, wanted or len(handed))
                self._parts[batch] = count
            for index in range(count):
                share = wanted // count + (1 if index < wanted % count else 0)
                deletes = tuple(handed[index::count])
                parts.append(
                    ReceivePartition(
                        record, index, share, options.visibility_timeout, options.settings, deletes
                    )
                )
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReceivePartition)
        return read_partition(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Spark has committed every batch up to ``end``: have their messages deleted.

        Spark calls this while it plans the next batch, before that batch's
        tasks run: those tasks delete these messages, each a share, riding on
        their receives (an empty batch's tasks only delete), so deleting grows
        with the executors too. Only if Spark asked for the next batch's
        partitions first does the driver delete them itself. Until they are
        deleted the heartbeat keeps them hidden.
        """
        with self._lock:
            done = {batch: wanted for batch, wanted in self._planned.items() if batch <= end["batch"]}
            for batch in done:
                del self._planned[batch]
            # The batches that the tasks of a committed batch deleted are gone now.
            deleted = [old for batch in done for old in self._handed.pop(batch, [])]
            later = [b for b in self._planned if b not in self._parts]
            carrier = min(later) if later else None
            if carrier is not None:
                self._handed.setdefault(carrier, []).extend(sorted(done))
        try:
            for old in deleted:
                self._drop(self._record(old))
            for batch, wanted in sorted(done.items()):
                record = self._record(batch)
                if self._budget is not None or carrier is None:
                    receipts = self._receipts(record)
                    self._unused += max(0, wanted - len(receipts))
                if carrier is None:
                    self._delete(receipts)
                    self._drop(record)
        except SmqError as error:
            # Not worth failing the query: records expire; undeleted messages come back.
            log.warning("smq: a committed batch's clean-up failed: %s", error)

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: take only as many messages as are visible now."""
        self._budget = self._queue().attributes().visible

    def stop(self) -> None:
        """The source ends in order: stop the heartbeat, let uncommitted messages go at once.

        Their batches were not committed here (Spark may have written the last
        one's commit log already, in which case a restarted query does not
        replay it and its messages are processed again: at least once).
        Visibility 0 returns them to the queue now rather than after the
        timeout; committed messages not yet deleted are deleted.
        (PySpark 4.3 kills the source's process when a query stops or fails,
        without this call; the heartbeat dies with it and they come back when
        the timeout runs out.)
        """
        self._stopping.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=30)  # a pass under way must not hide what is let go
        with self._lock:
            batches = sorted(self._planned)
            self._planned.clear()
            committed = sorted(old for olds in self._handed.values() for old in olds)
            self._handed.clear()
        for batch in committed:  # committed, but the tasks that were to delete them never ran
            try:
                record = self._record(batch)
                self._delete(self._receipts(record))
                self._drop(record)
            except SmqError as error:
                log.warning("smq: could not delete the messages of a committed batch: %s", error)
        for batch in batches:
            record = self._record(batch)
            try:
                receipts = self._receipts(record)
                self._change(receipts, 0)
                self._drop(record)
            except SmqError as error:
                log.warning("smq: could not release the messages of an uncommitted batch: %s", error)
        if self._client is not None:
            self._client.close()

    # -- the queue -----------------------------------------------------------------------

    def _queue(self) -> Queue:
        if self._held is None:
            self._client = Client(settings=self.options.settings)
            self._held = self._client.get_queue(self.options.queue)
        return self._held

    def _smq(self) -> Client:
        """The driver's client (made with the queue's handle on first use)."""
        self._queue()
        assert self._client is not None
        return self._client

    def _record(self, batch: int) -> BatchRecord:
        return BatchRecord(self.options.queue, self._reader, batch)

    def _receipts(self, record: BatchRecord) -> list[str]:
        """The receipts the batch's tasks recorded, in partition order."""
        client = self._smq()
        flat = client._read("read a micro-batch", record.queue, record.receipts, "HGETALL", record.receipts)
        pairs = (
            flat.items() if isinstance(flat, dict) else zip(flat[::2], flat[1::2], strict=True)
        )  # RESP3 or 2
        by_part = {int(part): receipts.decode().split() for part, receipts in pairs}
        with self._lock:
            parts = self._parts.get(record.batch, 0)
        for part in range(parts):
            if part not in by_part:  # a task died after its claim, before the copy: from the rows
                by_part[part] = share_receipts(client, record, str(part))
        return [r for part in sorted(by_part) for r in by_part[part]]

    def _delete(self, receipts: list[str]) -> None:
        """Delete committed messages from the driver (at stop, or when no batch carries them)."""
        for chunk in chunks(receipts):
            result = self._queue().delete_batch([DeleteEntry(str(i), r) for i, r in enumerate(chunk)])
            for failure in result.failed:
                log.warning("smq: delete of a committed message failed: %s", failure.message)

    def _drop(self, record: BatchRecord) -> None:
        with self._lock:
            self._parts.pop(record.batch, None)
        # One command: both keys are in the queue's hash slot.
        self._smq()._write(
            "drop a micro-batch's record", record.queue, record.rows, "DEL", record.rows, record.receipts
        )

    def _visible_soon(self, wait_seconds: float) -> bool:
        """Whether the queue has visible messages, waiting up to ``wait_seconds`` for one."""
        deadline = time.monotonic() + wait_seconds
        while True:
            if self._queue().attributes().visible > 0:
                return True
            if time.monotonic() >= deadline or self._stopping.is_set():
                return False
            time.sleep(_POLL_SECONDS)

    def _settle_budget(self) -> None:
        """Trigger.AvailableNow: give back what committed batches planned but did not take."""
        assert self._budget is not None
        self._budget += self._unused
        self._unused = 0

    def _change(self, receipts: list[str], timeout: int) -> int:
        """Set ``timeout`` on the messages of ``receipts``; return how many are no longer held.

        A message at its 12-hour ceiling cannot be extended further but is still
        held until then: a commit before the ceiling still deletes it.
        """
        lost = 0
        for chunk in chunks(receipts):
            result = self._queue().change_visibility_batch(
                [ChangeEntry(str(i), r, timeout) for i, r in enumerate(chunk)]
            )
            for failure in result.failed:
                if failure.code == VisibilityCeilingExceeded.__name__:
                    log.warning("smq: a micro-batch message reached its 12-hour ceiling: %s", failure.message)
                else:
                    lost += 1
        return lost

    def _keep(self, record: BatchRecord) -> tuple[int, int]:
        """Extend a batch's records and messages: (messages no longer held, messages recorded)."""
        lasting = record_seconds(self.options.visibility_timeout)
        for key in (record.rows, record.receipts):
            self._smq()._write("keep a micro-batch's record", record.queue, key, "EXPIRE", key, lasting)
        receipts = self._receipts(record)
        return self._change(receipts, self.options.visibility_timeout), len(receipts)

    def _forget(self, batch: int) -> None:
        """A committed batch whose messages are all gone (its carrier's tasks deleted them)."""
        with self._lock:
            for olds in self._handed.values():
                if batch in olds:
                    olds.remove(batch)
        self._drop(self._record(batch))

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None or not self._heartbeat.is_alive():
            self._heartbeat = threading.Thread(target=self._beat, name="smq-stream-heartbeat", daemon=True)
            self._heartbeat.start()

    def _beat(self) -> None:
        """Every third of the timeout, extend every recorded message not yet deleted by a full timeout."""
        interval = max(0.2, self.options.visibility_timeout / 3)
        while not self._stopping.wait(interval):
            with self._lock:
                batches = sorted(self._planned)
                committed = {old for olds in self._handed.values() for old in olds}
            for batch in sorted({*batches, *committed}):
                try:
                    lost, recorded = self._keep(self._record(batch))
                    with self._lock:
                        settled = batch not in self._planned  # committed: deleted as it goes
                    if settled and lost == recorded:
                        self._forget(batch)  # deleted: nothing left to keep (the carrier may never commit)
                except SmqError as error:  # Redis away: try again next beat
                    log.warning("smq: heartbeat failed: %s", error)
                    break
                except Exception:  # a bug: say so, and keep beating for the other batches
                    log.exception("smq: heartbeat failed")
                    continue
                if lost and not settled:
                    # Another receive holds them now (this lease ran out first):
                    # they will be processed twice.
                    log.warning(
                        "smq: %d in-flight messages of a micro-batch were taken by another receive", lost
                    )
