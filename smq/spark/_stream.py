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

Offsets are ``{"reader": <id>, "batch": n}``. The reader id is made once, by
the query's initial offset, and Spark keeps it in the checkpoint's offset log,
so the records of a batch (``stream:<reader>:<batch>:...``) and the reader's
index of batches planned but not yet deleted (``stream:<reader>``) are named by
the query, not by the process: another query on the same queue has its own.

A restarted query (same checkpoint) first finishes what the dead driver left:

- every batch its index holds up to the last one Spark committed is deleted
  (its output is written: Spark's commit log says so);
- the batch Spark replays (planned, maybe partly or wholly read and written,
  but not committed) is read again from its records: its recorded shares give
  the same rows, so a sink idempotent per batch id (Spark's file sink, Delta)
  holds each message once. Before its tasks run, the driver hides the recorded
  messages again, even if their timeout ran out while it was down;
- a message of either kind that someone else received in the meantime (or, on
  a FIFO queue, whose receipt expired, so that it can be neither hidden nor
  deleted) is remembered beside the index (``stream:<reader>:given``): if it
  comes back to this query, its receipt is kept for the delete but it is not
  given as a row again;
- a replayed batch the index does not name reads nothing: no task of it ran
  (or an smq that kept no index planned it, whose tasks may have read it and
  whose sink may have written it, so messages taken now could be deleted
  unwritten); messages its tasks took come back by their timeout;
- any other batch of the index (planned, never replayed) is let go.

Offsets of an earlier smq carry no reader id: the reader is then named by the
offset Spark gives first (``v0-<batch>``), the same in every restart from it.

Records live as long as the queue keeps messages (its retention period, and
an hour more), so a driver may be down for as long as that; a query that is
dropped for good leaves its records to expire then.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from .._errors import ReceiptExpired, SmqError, StaleReceipt, VisibilityCeilingExceeded
from ..client._client import Client
from ..client._queue import Queue
from ..core._message import ChangeEntry, DeleteEntry
from ..core._scripts import reply_pairs
from ._consumers import REFRESH_SECONDS, register
from ._options import SourceOptions
from ._stream_read import (
    TALLIES,
    BatchRecord,
    ReceivePartition,
    chunks,
    read_partition,
    share_receipts,
)

log = logging.getLogger("smq.spark")

try:  # PySpark 4.2+: Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # pragma: no cover - PySpark 4.0 and 4.1

    class _AvailableNow:  # type: ignore[no-redef]
        pass


_POLL_SECONDS = 0.05
# A re-hide that fails so means the message may come back to this query: remember it.
_TAKEN = {StaleReceipt.__name__, ReceiptExpired.__name__}


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
        self._reader: str | None = None  # the query's, from the first offset Spark gives
        self._planned: dict[int, int] = {}  # batch not yet committed -> messages it may take
        # Batches whose partitions Spark has asked for -> how many (its record's fields 0 .. n-1):
        self._parts: dict[int, int] = {}
        # Committed batches whose messages the tasks of a later batch delete:
        self._handed: dict[int, list[int]] = {}  # later batch -> the committed batches it deletes
        self._unused = 0  # messages committed batches planned but did not take
        # Messages of an earlier run's batch that another receive took while the driver was down:
        self._given: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._budget: int | None = None  # Trigger.AvailableNow: messages left to take
        self._charged: set[int] = set()  # batches planned under the budget, not yet committed
        self._lasting: int | None = None  # seconds the records live: the queue's retention, and more
        self._client: Client | None = None
        self._held: Queue | None = None
        self._stopping = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._extended = 0  # messages the heartbeat extended, since this process started
        self._latest = 0  # the newest batch Spark knows of
        self._registered = -float(REFRESH_SECONDS)  # when this driver last wrote its line in the registry

    # -- Spark's calls, on the driver --------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """A new query: a new reader id, which every later offset carries (see the module docstring)."""
        return {"reader": uuid.uuid4().hex[:16], "batch": 0}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """Plan the next micro-batch if the queue has visible messages; else return ``start``."""
        start = start or self.initialOffset()
        self._adopt(start, committed=start["batch"], replay=None)
        self._latest = max(self._latest, start["batch"])
        wanted = self.options.max_messages_per_batch
        max_rows = getattr(limit, "max_rows", None)
        if isinstance(max_rows, int):
            wanted = min(wanted, max_rows)
        if self._budget is not None:
            self._settle_budget()
            wanted = min(wanted, self._budget)
        with self._lock:
            waiting = any(self._planned.values())  # a batch that may hold messages awaits its commit
        # With a batch awaiting its commit, do not wait for messages: an empty batch commits it now.
        if wanted <= 0 or not self._visible_soon(0 if waiting else self.options.wait_time_seconds):
            if not waiting:
                return start
            # Spark commits a batch only when it plans the next one. An empty
            # batch makes it commit the last one now, so its messages are
            # deleted instead of waiting, hidden, for more messages to come.
            wanted = 0
        batch = start["batch"] + 1
        with self._lock:
            self._planned[batch] = wanted
        if self._budget is not None:
            self._budget -= wanted
            self._charged.add(batch)
        self._start_heartbeat()
        self._latest = batch
        return {"reader": self._reader, "batch": batch}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._adopt(end, committed=start["batch"], replay=end["batch"])
        self._latest = max(self._latest, end["batch"])
        with self._lock:
            planned = [(b, n) for b, n in sorted(self._planned.items()) if start["batch"] < b <= end["batch"]]
            # A batch the index does not name: planned by a driver that died before any task of
            # it ran, or by an smq that kept no index (whose tasks may have read and the sink
            # written): it reads nothing. Messages its tasks took come back by their timeout.
            unknown = end["batch"] > start["batch"] and end["batch"] not in self._planned
            if unknown:
                self._planned[end["batch"]] = 0
                planned.append((end["batch"], 0))
        options = self.options
        lasting = self._record_seconds()
        if time.monotonic() - self._registered >= REFRESH_SECONDS:
            assert self._reader is not None
            register(self._smq(), options.queue, self._reader, options.visibility_timeout, lasting)
            self._registered = time.monotonic()
        parts: list[InputPartition] = []
        for batch, wanted in planned:
            record = self._record(batch)
            with self._lock:
                handed = [
                    (self._record(old), field)
                    for old in self._handed.get(batch, [])
                    for field in range(self._parts.get(old, 0))
                ]
                # A batch of no messages that carries deletes has tasks that only delete. A
                # replayed batch keeps the shares its records were made with.
                count = self._parts.get(batch) or min(options.num_partitions, wanted or len(handed))
                self._parts[batch] = count
                given = self._given
            # The index names the batch before any task of it can record: a restart finds it.
            self._call("HSET", self._index_key(), str(batch), f"{count} {wanted}")
            self._call("EXPIRE", self._index_key(), lasting)
            for index in range(count):
                share = wanted // count + (1 if index < wanted % count else 0)
                deletes = tuple(handed[index::count])
                parts.append(
                    ReceivePartition(
                        record,
                        index,
                        share,
                        options.visibility_timeout,
                        options.settings,
                        deletes,
                        lasting,
                        given,
                    )
                )
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReceivePartition)
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has committed every batch up to ``end``: have their messages deleted.

        Spark calls this while it plans the next batch, before that batch's
        tasks run: those tasks delete these messages, each a share, riding on
        their receives (an empty batch's tasks only delete), so deleting grows
        with the executors too. Only if Spark asked for the next batch's
        partitions first does the driver delete them itself. Until they are
        deleted the heartbeat keeps them hidden.
        """
        self._adopt(end, committed=end["batch"], replay=None)
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
                if batch in self._charged or carrier is None:
                    receipts = self._receipts(record)
                if batch in self._charged:  # a replayed batch was never charged
                    self._charged.discard(batch)
                    self._unused += max(0, wanted - len(receipts))
                if carrier is None:
                    self._delete(receipts)
                    self._drop(record)
        except SmqError as error:
            # Not worth failing the query: undeleted messages come back; a restart deletes them.
            log.warning("smq: a committed batch's clean-up failed: %s", error)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """What Spark shows as this source's ``latestOffset`` in each ``StreamingQueryProgress``:
        the last batch planned, and the figures a pipeline team watches.

        PySpark's Python data sources have no custom metrics (``SourceProgress.metrics``) to
        report into; this is the one field of the progress a source fills. ``visible``,
        ``in_flight``, ``delayed``: the queue's backlog now. ``held``: messages the tasks
        recorded in batches not yet committed; ``deletes_pending``: in batches committed, not yet
        deleted. ``heartbeat_extensions``: messages the heartbeat extended since the driver
        started. ``received``, ``redelivered``: messages the query's tasks took, and those of
        them received before (by anyone: a restart's, a lost lease's, another consumer's), since
        the query began.
        """
        if self._reader is None:
            return None
        info = self._queue().attributes()
        received, redelivered = self._call("HMGET", self._index_key(), *TALLIES)
        with self._lock:
            planned = set(self._planned)
            committed = {old for olds in self._handed.values() for old in olds}
            read = {batch for batch in planned | committed if batch in self._parts}  # tasks planned
        counts = {batch: len(self._receipts(self._record(batch))) for batch in read}
        return {
            "reader": self._reader,
            "batch": self._latest,
            "visible": info.visible,
            "in_flight": info.in_flight,
            "delayed": info.delayed,
            "held": sum(n for batch, n in counts.items() if batch in planned),
            "deletes_pending": sum(n for batch, n in counts.items() if batch in committed),
            "heartbeat_extensions": self._extended,
            "received": int(received or 0),
            "redelivered": int(redelivered or 0),
        }

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: take only as many messages as are visible now."""
        self._budget = self._queue().attributes().visible

    def stop(self) -> None:
        """The source ends in order: stop the heartbeat, delete what was committed.

        A batch not committed keeps its records and its messages stay hidden
        until their timeout runs out: if the query starts again from its
        checkpoint, Spark replays that batch, and it reads the same rows.
        (PySpark 4.3 kills the source's process when a query stops or fails,
        without this call; a restart finishes the committed deletes then.)
        """
        self._stopping.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=30)  # a pass under way must not race the deletes
        with self._lock:
            committed = sorted(old for olds in self._handed.values() for old in olds)
            self._handed.clear()
        for batch in committed:  # committed, but the tasks that were to delete them never ran
            try:
                record = self._record(batch)
                self._delete(self._receipts(record))
                self._drop(record)
            except SmqError as error:
                log.warning("smq: could not delete the messages of a committed batch: %s", error)
        if self._client is not None:
            self._client.close()

    # -- a restart -----------------------------------------------------------------------

    def _adopt(self, offset: dict[str, Any], committed: int, replay: int | None) -> None:
        """The first offset Spark gives this process names the query's reader: finish what an
        earlier driver of the same query left (see the module docstring)."""
        if self._reader is not None:
            return
        # A checkpoint of an earlier smq has offsets without a reader: one named by that offset,
        # the same in every restart from it.
        self._reader = str(offset.get("reader") or f"v0-{offset['batch']}")
        index = self._call("HGETALL", self._index_key())
        deleted = replayed = released = 0
        known = {field.decode() for field, _ in reply_pairs(self._call("HGETALL", self._given_key()))}
        given: set[str] = set()
        batches = [(int(field), value) for field, value in reply_pairs(index) if field.isdigit()]
        for batch, value in sorted(batches):
            count, wanted = (int(n) for n in value.decode().split())
            with self._lock:
                self._parts[batch] = count
            record = self._record(batch)
            if batch <= committed:  # its output is written: delete its messages
                # Hidden again first: a message someone else took (or, on a FIFO queue, whose
                # receipt expired) cannot be deleted here, and must not be given again.
                receipts = self._receipts(record)
                given |= self._hide_again(record, receipts)
                deleted += len(receipts) - self._delete(receipts)
                self._drop(record)
            elif replay is not None and batch <= replay:  # Spark runs it again: the same rows
                given |= self._hide_again(record, self._receipts(record))
                with self._lock:
                    self._planned[batch] = wanted
                replayed += 1
            else:  # planned, but Spark will not run it again: let its messages go
                receipts = self._receipts(record)
                self._change(receipts, 0)
                self._drop(record)
                released += len(receipts)
        if given - known:
            # Kept beside the index: a later restart of the query keeps them out too.
            self._call("HSET", self._given_key(), *(x for m in sorted(given - known) for x in (m, "1")))
            self._call("EXPIRE", self._given_key(), self._record_seconds())
        with self._lock:
            self._given = frozenset(given | known)
        if batches:
            log.warning(
                "smq: stream %s on %r resumed: %d messages of committed batches deleted, %d batches "
                "replayed from their records (%d messages taken by another receive meanwhile), "
                "%d messages of abandoned batches let go",
                self._reader,
                self.options.queue,
                deleted,
                replayed,
                len(given),
                released,
            )
        if replayed:
            self._start_heartbeat()

    def _hide_again(self, record: BatchRecord, receipts: list[str]) -> set[str]:
        """Extend a batch's recorded messages (``receipts``); return the ids of those that cannot
        be: someone else took them, or (FIFO) their receipts expired."""
        rows = reply_pairs(self._call("HGETALL", record.rows))
        ids = {str(entry[-1]): str(entry[0]) for _, value in rows for entry in json.loads(value)}
        taken: set[str] = set()
        for chunk in chunks(receipts):
            result = self._queue().change_visibility_batch(
                [ChangeEntry(str(i), r, self.options.visibility_timeout) for i, r in enumerate(chunk)]
            )
            for failure in result.failed:
                receipt = chunk[int(failure.id)]
                if failure.code in _TAKEN and receipt in ids:
                    taken.add(ids[receipt])
        return taken

    # -- the queue -----------------------------------------------------------------------

    def _queue(self) -> Queue:
        if self._held is None:
            self._client = Client(settings=self.options.settings)
            self._client._require_noeviction()  # its batch records carry a TTL: volatile-* may take them
            self._held = self._client.get_queue(self.options.queue)
        return self._held

    def _smq(self) -> Client:
        """The driver's client (made with the queue's handle on first use)."""
        self._queue()
        assert self._client is not None
        return self._client

    def _record(self, batch: int) -> BatchRecord:
        assert self._reader is not None
        return BatchRecord(self.options.queue, self._reader, batch)

    def _index_key(self) -> str:
        return self._record(0).index

    def _given_key(self) -> str:
        """Ids this query gave as rows that may come back to it (see the module docstring)."""
        return self._record(0).index + ":given"

    def _call(self, command: str, key: str, *args: Any) -> Any:
        """One command on the reader's index or records (keys in the queue's hash slot)."""
        client, what = self._smq(), "keep a stream's records"
        if command in ("HGETALL", "HGET", "HMGET"):
            return client._read(what, self.options.queue, key, command, key, *args)
        return client._write(what, self.options.queue, key, command, key, *args)

    def _record_seconds(self) -> int:
        if self._lasting is None:
            self._lasting = self._queue().attributes().config.message_retention_period + 3600
        return self._lasting

    def _receipts(self, record: BatchRecord) -> list[str]:
        """The receipts the batch's tasks recorded, in partition order."""
        client = self._smq()
        by_part = {int(part): receipts.decode().split() for part, receipts in self._recorded(record)}
        with self._lock:
            parts = self._parts.get(record.batch, 0)
        for part in range(parts):
            if part not in by_part:  # a task died after its claim, before the copy: from the rows
                by_part[part] = share_receipts(client, record, str(part))
        return [r for part in sorted(by_part) for r in by_part[part]]

    def _recorded(self, record: BatchRecord) -> list[tuple[bytes, bytes]]:
        return reply_pairs(self._call("HGETALL", record.receipts))

    def _delete(self, receipts: list[str]) -> int:
        """Delete committed messages from the driver (at stop, a restart, or when no batch carries
        them); return how many deletes failed."""
        failed = 0
        for chunk in chunks(receipts):
            result = self._queue().delete_batch([DeleteEntry(str(i), r) for i, r in enumerate(chunk)])
            for failure in result.failed:
                log.warning("smq: delete of a committed message failed: %s", failure.message)
            failed += len(result.failed)
        return failed

    def _drop(self, record: BatchRecord) -> None:
        with self._lock:
            self._parts.pop(record.batch, None)
        self._call("DEL", record.rows, record.receipts)  # one command: both in the queue's hash slot
        self._call("HDEL", record.index, str(record.batch))

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
        """Extend a batch's messages: (messages no longer held, messages recorded)."""
        receipts = self._receipts(record)
        lost = self._change(receipts, self.options.visibility_timeout)
        self._extended += len(receipts) - lost
        return lost, len(receipts)

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
