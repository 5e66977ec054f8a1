"""A queue handle: send, receive, change visibility, delete, inspect."""

from __future__ import annotations

import binascii
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import (
    InvalidParameter,
    SmqError,
    Status,
    error_for,
)
from ..connection._wakeup import SHARD_CONFIRM_TIMEOUT
from ..core._batch import MAX_BATCH, check_entries, failure
from ..core._config import (
    EXTRA_PREFIX,
    MAX_VISIBILITY_TIMEOUT,
    QueueConfig,
    QueueInfo,
    changed_config,
    check_extra_attributes,
    check_int,
    is_fifo_name,
)
from ..core._keys import QueueKeys
from ..core._message import (
    AttributeValue,
    BatchFailure,
    BatchResult,
    ChangeEntry,
    DeleteEntry,
    Message,
    SendEntry,
    SendResult,
    check_fifo_id,
    parse_receipt,
    received,
)
from ..core._scripts import text_pairs
from ..core._send import send_steps
from ..core._steps import Blocking, ScriptCall, ScriptCalls, Steps, drive
from ..operations import _take_one as take_one
from ..operations._consumers import Consumer, beat, consumers
from ..operations._events import Event, read_events
from ..operations._history import HISTORY_KEPT, HISTORY_STEP, MAX_HISTORY, Sample
from ..operations._history import read as read_history
from ..operations._history import record as record_sample
from ..operations._moves import finish_moves
from ..operations._moves import recover as recover_moves
from ..operations._peek import PeekedMessage, peek
from ..operations._sources import note_source
from ..operations._tags import check_tag_keys, check_tags
from . import _shards as sharded

if TYPE_CHECKING:
    from ._client import Client

MAX_WAIT_SECONDS = 20
_SKIP_ROUNDS = 10

log = logging.getLogger("smq.queue")


_URL_SAFE = bytes.maketrans(b"+/", b"-_")


def _new_token() -> str:
    """A receive's token: ``secrets.token_urlsafe(12)`` (16 characters), without its layers."""
    return binascii.b2a_base64(os.urandom(12), newline=False).translate(_URL_SAFE).decode()


def _no_extra(entry: Any) -> list[int]:
    """A by-receipt script's arguments of an entry beyond its receipt: none (delete's)."""
    return []


@dataclass
class _Rider:
    """A script call that rides on the next receive's write to Redis, and its reply once run.

    ``ran`` (if given) is called with the reply as soon as it comes, before a long poll waits.
    """

    script: str
    args: list[Any]
    reply: Any = None
    ran: Callable[[Any], None] | None = None

    def answer(self, reply: Any) -> None:
        """Note the reply of the call, and pass it on."""
        self.reply = reply
        if self.ran is not None:
            self.ran(reply)


class Queue:
    """One queue. Get it from ``Client.create_queue``, ``get_queue`` or ``queue``.

    Durations are in seconds. Every method is one atomic Lua script on Redis
    (a long poll may run several), judged by the Redis server's clock.
    """

    __slots__ = ("_client", "name", "keys", "fifo", "_home", "_is_shard")

    def __init__(self, client: Client, name: str, *, home: str = "") -> None:
        self._client = client
        self.name = name
        self.keys = QueueKeys.of(name)
        self.fifo = is_fifo_name(name)
        """True for a FIFO queue (its name ends in ``.fifo``)."""
        # A shard's: the sharded queue's name (see smq.client._shards).
        self._home = home or name
        self._is_shard = bool(home)

    def _shards(self) -> tuple[Queue, ...]:
        """The shards of a sharded queue (itself first), or () for a queue of one shard."""
        if self._is_shard:
            return ()  # a shard is one queue
        return self._client._layouts.shards(self)

    def _shards_steps(self) -> Steps[tuple[Queue, ...]]:
        """``_shards`` as steps: a layout read recently takes no step."""
        if self._is_shard:
            return ()
        shards = self._client._layouts.known(self)
        if shards is None:
            shards = yield Blocking(self._shards)
        return shards

    def _wake_channels(self) -> list[str]:
        """The Pub/Sub channels that announce this queue's messages: one per shard."""
        return [shard.keys.wake_channel for shard in self._shards()] or [self.keys.wake_channel]

    def shard_names(self) -> list[str]:
        """Names of the queues that hold this queue's messages: its own, then its other shards'."""
        return [shard.name for shard in self._shards()] or [self.name]

    def __repr__(self) -> str:
        return f"<smq.Queue {self.name!r}>"

    # -- send -------------------------------------------------------------------

    def send(
        self,
        body: str,
        *,
        delay_seconds: int | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        message_group_id: str | None = None,
        deduplication_id: str | None = None,
        trace_header: str | None = None,
        sender_id: str | None = None,
    ) -> SendResult:
        """Send one message. Raises MessageTooLong, InvalidMessageContents, ...

        On a FIFO queue ``message_group_id`` is required and ``delay_seconds``
        refused (the queue's delay applies); ``deduplication_id`` is required
        unless the queue has content-based deduplication. A duplicate within
        5 minutes is accepted and not stored again (``SendResult.duplicate``).
        On a standard queue ``deduplication_id`` is optional and works the
        same way: an smq extension for producers that may retry a send.
        ``trace_header`` is the AWSTraceHeader system attribute, returned with
        the message on every receive; ``sender_id`` says who sent it
        (``Message.sender_id``, SenderId over HTTP).
        """
        entry = SendEntry(
            "single",
            body,
            delay_seconds,
            attributes,
            message_group_id,
            deduplication_id,
            trace_header,
            sender_id,
        )
        return drive(self._client, self._send_one_steps(entry))

    def _send_one_steps(self, entry: SendEntry) -> Steps[SendResult]:
        """``send`` as steps."""
        sent = yield from self._send_steps([entry], single=True)
        return sent.successful[0]

    def send_batch(self, entries: Sequence[SendEntry]) -> BatchResult[SendResult]:
        """Send 1-10 messages; each entry succeeds or fails on its own.

        A batch malformed as a whole (no entries, more than 10, repeated or
        invalid ids, more than 1 MiB in all) raises a BatchError and sends nothing.
        On a FIFO queue the messages of one group are stored in entry order.
        """
        return drive(self._client, self._send_batch_steps(entries))

    def _send_batch_steps(self, entries: Sequence[SendEntry]) -> Steps[BatchResult[SendResult]]:
        """``send_batch`` as steps."""
        check_entries(entries, SendEntry)
        return (yield from self._send_steps(entries, single=False))

    def _send_steps(self, entries: Sequence[SendEntry], *, single: bool) -> Steps[BatchResult[SendResult]]:
        """Send checked entries, as steps; ``single`` raises what refused the one entry."""
        shards = yield from self._shards_steps()
        if shards:
            sent: BatchResult[SendResult] = yield Blocking(
                lambda: sharded.send(self._client._layouts, shards, entries, single=single)
            )
            return sent
        return (yield from send_steps(self, entries, single=single))

    # -- receive ----------------------------------------------------------------

    def receive(
        self,
        max_messages: int = 1,
        *,
        visibility_timeout: int | None = None,
        wait_time_seconds: int | None = None,
        attempt_id: str | None = None,
    ) -> list[Message]:
        """Receive up to ``max_messages`` (1-10) messages.

        Each comes with a new receipt handle and stays invisible to other
        consumers for ``visibility_timeout`` seconds (default: the queue's).
        With ``wait_time_seconds`` (0-20; default: the queue's
        ReceiveMessageWaitTimeSeconds) it waits for a message to arrive, a
        timeout to run out or a delay to fall due, and returns as soon as one
        does; it returns an empty list when the wait ends with none.
        Raises OverLimit on a short poll of a queue at its in-flight limit.

        On a FIFO queue, messages come in order within each message group, and
        a group with a message in flight gives out no other message until that
        one is deleted or visible again. ``attempt_id`` (FIFO only:
        ReceiveRequestAttemptId, 1-128 ASCII letters, digits or punctuation)
        makes a retry safe: repeated within 5 minutes it returns the messages
        of the first call still in flight under it, with the same receipts and
        a fresh visibility timeout. A FIFO queue at its in-flight limit returns
        no messages rather than raising OverLimit, as SQS does.
        """
        visibility_ms = self._check_receive(max_messages, visibility_timeout, wait_time_seconds, attempt_id)
        return self._receive(max_messages, visibility_ms, wait_time_seconds, attempt_id=attempt_id or "")

    def delete_and_receive(
        self,
        entries: Sequence[DeleteEntry],
        max_messages: int = 1,
        *,
        visibility_timeout: int | None = None,
        wait_time_seconds: int | None = None,
        attempt_id: str | None = None,
    ) -> tuple[BatchResult[str], list[Message]]:
        """Delete 0-10 messages by receipt, then receive, in one round trip to Redis.

        The same as ``delete_batch(entries)`` followed by ``receive(...)`` (the
        same outcomes, checks and arguments), but both calls go to Redis in
        one write: a consumer acknowledges the batch it finished on the fetch
        of its next one, and Redis wakes once for both. The deletes run first,
        so on a FIFO queue a group they unlock may be received at once.
        Returns (the deletes' outcome per entry, the messages received).

        If the call raises after checking its arguments, the deletes may have
        run: delete the same receipts again, which is safe (a receipt that
        already deleted its message succeeds again).
        """
        visibility_ms = self._check_receive(max_messages, visibility_timeout, wait_time_seconds, attempt_id)
        deleted, rider = drive(self._client, self._deletes_before_receive_steps(entries))
        messages = self._receive(
            max_messages, visibility_ms, wait_time_seconds, attempt_id=attempt_id or "", rider=rider
        )
        return (deleted[0] if deleted else BatchResult([], [])), messages

    def _deletes_before_receive_steps(
        self, entries: Sequence[DeleteEntry]
    ) -> Steps[tuple[list[BatchResult[str]], _Rider | None]]:
        """``delete_and_receive``'s deletes, as steps: (their outcome once run, the rider that runs them).

        The outcome list is empty until the rider ran; with no rider the deletes ran here.
        """
        deleted: list[BatchResult[str]] = []
        rider = None
        if entries:
            check_entries(entries, DeleteEntry)
            if (yield from self._shards_steps()):
                # The receive may go to any shard: the deletes take their own round trips.
                deleted.append((yield from self._delete_steps(entries, single=False)))
            else:
                rider = self._delete_rider(entries, deleted.append)
        return deleted, rider

    def _delete_rider(
        self, entries: Sequence[DeleteEntry], ran: Callable[[BatchResult[str]], None]
    ) -> _Rider | None:
        """A delete of ``entries`` to ride on the next receive; ``ran`` gets its outcome.

        None when no entry names a valid receipt (``ran`` has the outcome already).
        Not for a sharded queue, whose receive may go to another shard.
        """
        args, pending, failed = self._receipt_args(entries, single=False)
        if args is None:
            ran(BatchResult([], failed))
            return None

        def done(reply: Any) -> None:
            ran(self._delete_result(pending, failed, list(reply[1:]), single=False))

        return _Rider("delete", args, ran=done)

    def _check_receive(
        self,
        max_messages: int,
        visibility_timeout: int | None,
        wait_time_seconds: int | None,
        attempt_id: str | None,
    ) -> int:
        """Check a receive's arguments; its visibility timeout in ms (-1: the queue's)."""
        check_int("max_messages", max_messages, 1, MAX_BATCH)
        if attempt_id is not None:
            check_fifo_id("ReceiveRequestAttemptId", attempt_id)
            if not self.fifo:
                raise InvalidParameter("ReceiveRequestAttemptId applies to FIFO queues only")
        visibility_ms = -1
        if visibility_timeout is not None:
            visibility_ms = (
                check_int("visibility_timeout", visibility_timeout, 0, MAX_VISIBILITY_TIMEOUT) * 1000
            )
        if wait_time_seconds is not None:
            check_int("wait_time_seconds", wait_time_seconds, 0, MAX_WAIT_SECONDS)
        return visibility_ms

    def _receive(
        self,
        max_messages: int,
        visibility_ms: int,
        wait_time_seconds: int | None,
        stop: Callable[[], bool] | None = None,
        attempt_id: str = "",
        rider: _Rider | None = None,
    ) -> list[Message]:
        """Receive, checked; a long poll ends early once ``stop()`` is true.

        Whoever sets the stop condition calls ``Waker.interrupt`` so that a
        waiting poll looks at it at once. A ``rider`` runs just before the
        first receive, in the same write to Redis.
        """
        messages, next_due_ms, wait_ms, over_limit = self._receive_now(
            max_messages, visibility_ms, attempt_id, rider
        )
        wait = wait_ms / 1000 if wait_time_seconds is None else wait_time_seconds
        if messages or wait <= 0:
            if over_limit:
                raise error_for(Status.E_OVER_LIMIT, self.name)
            return messages
        return self._long_poll(max_messages, visibility_ms, time.monotonic() + wait, stop, attempt_id)

    def _long_poll(
        self,
        max_messages: int,
        visibility_ms: int,
        deadline: float,
        stop: Callable[[], bool] | None = None,
        attempt_id: str = "",
    ) -> list[Message]:
        waker = self._client._waker
        channels = self._wake_channels()
        several = len(channels) > 1
        with waker.watch(channels, deadline):
            while True:
                seen = {channel: waker.count(channel) for channel in channels}
                if stop is not None and stop():
                    return []
                messages, next_due_ms, _, _ = self._receive_now(max_messages, visibility_ms, attempt_id)
                if messages:
                    return messages
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                if next_due_ms >= 0:
                    # A timeout or delay falls due then (by the Redis clock);
                    # the small margin lets it pass on the server too.
                    remaining = min(remaining, next_due_ms / 1000 + 0.002)
                if several and not waker.confirmed(channels):
                    remaining = min(remaining, SHARD_CONFIRM_TIMEOUT)
                woken = waker.wait_any(seen, remaining)
                if not woken and time.monotonic() >= deadline:
                    return []

    def _receive_now(
        self, max_messages: int, visibility_ms: int, attempt_id: str = "", rider: _Rider | None = None
    ) -> tuple[list[Message], int, int, bool]:
        """One receive, no wait: (messages, next due in ms or -1, the queue's wait in ms, over the limit)."""
        return drive(self._client, self._receive_now_steps(max_messages, visibility_ms, attempt_id, rider))

    def _receive_now_steps(
        self, max_messages: int, visibility_ms: int, attempt_id: str = "", rider: _Rider | None = None
    ) -> Steps[tuple[list[Message], int, int, bool]]:
        """``_receive_now`` as steps."""
        # A receive script skips at most 100 deleted, expired or dead-lettered
        # ids; when it runs out of skips (next due 0, nothing received) there
        # may be messages behind them, so look again, a bounded number of times.
        shards = yield from self._shards_steps()
        if shards:
            if rider is not None and rider.reply is None:
                # Sharded since the rider was made (deleted and created again): it goes alone.
                rider.answer((yield ScriptCall(rider.script, self.keys, rider.args, self.name)))
            received: tuple[list[Message], int, int, bool] = yield Blocking(
                sharded.receive_now,
                self._client._layouts,
                shards,
                max_messages,
                visibility_ms,
                attempt_id,
            )
            return received
        for _ in range(_SKIP_ROUNDS):
            messages, next_due_ms, wait_ms, over_limit = yield from self._receive_once_steps(
                max_messages, visibility_ms, attempt_id, rider
            )
            rider = None
            if messages or over_limit or next_due_ms != 0:
                break
        return messages, next_due_ms, wait_ms, over_limit

    def _receive_once_steps(
        self, max_messages: int, visibility_ms: int, attempt_id: str = "", rider: _Rider | None = None
    ) -> Steps[tuple[list[Message], int, int, bool]]:
        token = _new_token()
        args: tuple[Any, ...] = (self._client._now_arg(), max_messages, visibility_ms, token, self.name)
        script = "receive"
        if self.fifo:
            script = "receive_fifo"
            args += (attempt_id,)
        if rider is None:
            reply = yield ScriptCall(script, self.keys, args, self.name, Status.E_OVER_LIMIT)
        else:
            calls = [(rider.script, self.keys, rider.args), (script, self.keys, args)]
            ridden, reply = yield ScriptCalls(calls, self.name, Status.E_OVER_LIMIT)
            rider.answer(ridden)
        if reply[0] == Status.E_OVER_LIMIT:
            # SQS answers a FIFO queue at its limit with no messages, not an error.
            return [], int(reply[1]), int(reply[2]), not self.fifo
        next_due_ms, recover, wait_ms, moved_n = reply[1], reply[2], reply[3], reply[4]
        position, stride, first_suffix = 6, 4, ""
        if self.fifo:
            token = reply[5].decode()  # an earlier receive's, on a repeated attempt
            stride = 5
        elif reply[5]:
            first_suffix = reply[5].decode()
        if moved_n or recover:
            yield Blocking(self._after_receive_moves, reply[position : position + 2 * moved_n], recover)
            position += 2 * moved_n
        messages = received(self._home, self.name, token, reply, position, stride, first_suffix)
        return messages, next_due_ms, wait_ms, False

    def _after_receive_moves(self, moved: list[Any], recover: int) -> None:
        """Finish the moves (dead letters) a receive began, and recover a round of old ones."""
        # The messages received are in flight already: a failure to finish
        # moves must not keep them from the caller. Unfinished moves stay
        # in the outbox, where a later recovery takes them up.
        try:
            if moved:
                finish_moves(self._client, self.name, moved, park=True)
            if recover:
                # One round (100 moves) per receive: parked dead letters
                # cost a receive little; the rest waits for later ones.
                recover_moves(self._client, self.name, min_age_ms=30_000, rounds=1)
        except SmqError as error:
            log.warning("moves out of queue %r left for recovery: %s", self.name, error)

    # -- visibility and delete ----------------------------------------------------

    def change_visibility(self, receipt_handle: str | Message, visibility_timeout: int) -> None:
        """Make a received message visible again ``visibility_timeout`` s from now.

        ``receipt_handle`` is the handle of a receive, or the Message itself.

        0 makes it visible at once. Counted from this call, for this receipt
        only. The newest receipt may do this after its timeout ran out, as long
        as nobody received the message since: the message is hidden again
        (on a FIFO queue that raises ``ReceiptExpired``, as on SQS). Raises
        MessageNotInflight (deleted), StaleReceipt (received again since), or
        VisibilityCeilingExceeded (past 12 h after the receive).
        """
        drive(self._client, self._change_one_steps(receipt_handle, visibility_timeout))

    def _change_one_steps(self, receipt_handle: str | Message, visibility_timeout: int) -> Steps[None]:
        """``change_visibility`` as steps."""
        entries = [ChangeEntry("single", _receipt_of(receipt_handle), visibility_timeout)]
        yield from self._change_steps(entries, single=True)

    def change_visibility_batch(self, entries: Sequence[ChangeEntry]) -> BatchResult[str]:
        """Change the visibility of 1-10 messages; returns the entry ids per outcome."""
        return drive(self._client, self._change_batch_steps(entries))

    def _change_batch_steps(self, entries: Sequence[ChangeEntry]) -> Steps[BatchResult[str]]:
        """``change_visibility_batch`` as steps."""
        check_entries(entries, ChangeEntry)
        return (yield from self._change_steps(entries, single=False))

    def _change_steps(self, entries: Sequence[ChangeEntry], *, single: bool) -> Steps[BatchResult[str]]:
        """Change the visibility of checked entries, as steps; ``single`` raises what failed."""

        def timeout_ms(entry: ChangeEntry) -> list[int]:
            return [
                check_int("visibility_timeout", entry.visibility_timeout, 0, MAX_VISIBILITY_TIMEOUT) * 1000
            ]

        pending, failed, statuses = yield from self._by_receipt_steps(
            "change_visibility", entries, single, timeout_ms
        )
        successful: list[str] = []
        for entry_id, status in zip(pending, statuses, strict=True):
            if status == Status.OK:
                successful.append(entry_id)
            elif single:
                raise error_for(status, self.name)
            else:
                failed.append(failure(entry_id, error_for(status, self.name)))
        return BatchResult(successful, failed)

    def _by_receipt(
        self,
        script: str,
        entries: Sequence[Any],
        single: bool,
        extra: Callable[[Any], list[int]] = _no_extra,
    ) -> tuple[list[str], list[BatchFailure], list[int]]:
        """Run ``script`` for entries that name a receipt: (entry ids run, failures, statuses)."""
        return drive(self._client, self._by_receipt_steps(script, entries, single, extra))

    def _by_receipt_steps(
        self,
        script: str,
        entries: Sequence[Any],
        single: bool,
        extra: Callable[[Any], list[int]] = _no_extra,
    ) -> Steps[tuple[list[str], list[BatchFailure], list[int]]]:
        """``_by_receipt`` as steps."""
        shards = yield from self._shards_steps()
        if shards:
            ran: tuple[list[str], list[BatchFailure], list[int]] = yield Blocking(
                sharded.by_receipt, shards, script, entries, single, extra
            )
            return ran
        args, pending, failed = self._receipt_args(entries, single, extra)
        if args is None:
            return pending, failed, []
        reply = yield ScriptCall(script, self.keys, args, self.name)
        return pending, failed, list(reply[1:])

    def _receipt_args(
        self,
        entries: Sequence[Any],
        single: bool,
        extra: Callable[[Any], list[int]] = _no_extra,
    ) -> tuple[list[Any] | None, list[str], list[BatchFailure]]:
        """(a by-receipt script's arguments, or None when no entry is valid; entry ids in them; failures)."""
        args: list[Any] = [self._client._now_arg(), self.keys.wake_channel, 0]
        pending: list[str] = []
        failed: list[BatchFailure] = []
        name = self.name
        more: list[int] = []
        for entry in entries:
            try:
                if extra is not _no_extra:
                    more = extra(entry)  # the entry's own checks first
                stored, token = parse_receipt(name, entry.receipt_handle)
            except SmqError as error:
                if single:
                    raise
                failed.append(failure(entry.id, error))
                continue
            args += (stored, token, *more) if more else (stored, token)
            pending.append(entry.id)
        if not pending:
            return None, pending, failed
        args[2] = len(pending)
        return args, pending, failed

    def delete(self, receipt_handle: str | Message) -> bool:
        """Delete a received message by its receipt handle (or the Message itself).

        Returns True if this call deleted it. The newest receipt of a message
        deletes it even after its timeout ran out (the work is done), except on
        a FIFO queue, where that raises ``ReceiptExpired`` as on SQS. A stale
        receipt, from before the message was received again, deletes nothing
        and returns False, as SQS does; smq counts it in ``stale_receipts``.
        Deleting a message already gone returns False too.
        """
        return drive(self._client, self._delete_one_steps(receipt_handle))

    def _delete_one_steps(self, receipt_handle: str | Message) -> Steps[bool]:
        """``delete`` as steps."""
        entries = [DeleteEntry("single", _receipt_of(receipt_handle))]
        deleted = yield from self._delete_steps(entries, single=True)
        return bool(deleted.successful)

    def delete_batch(self, entries: Sequence[DeleteEntry]) -> BatchResult[str]:
        """Delete 1-10 messages. Stale or already-used receipts count as success, as in SQS."""
        return drive(self._client, self._delete_batch_steps(entries))

    def _delete_batch_steps(self, entries: Sequence[DeleteEntry]) -> Steps[BatchResult[str]]:
        """``delete_batch`` as steps."""
        check_entries(entries, DeleteEntry)
        return (yield from self._delete_steps(entries, single=False))

    def _delete_steps(self, entries: Sequence[DeleteEntry], *, single: bool) -> Steps[BatchResult[str]]:
        """Delete checked entries, as steps; ``single`` raises what failed."""
        pending, failed, statuses = yield from self._by_receipt_steps("delete", entries, single)
        return self._delete_result(pending, failed, statuses, single=single)

    def _delete_result(
        self, pending: list[str], failed: list[BatchFailure], statuses: list[int], *, single: bool
    ) -> BatchResult[str]:
        """The outcome per entry of the delete script's ``statuses`` for the ``pending`` entries."""
        if not single and len(statuses) == len(pending) and (not statuses or min(statuses) >= 0):
            return BatchResult(pending, failed)  # each deleted, or stale or gone: a success in a batch
        successful: list[str] = []
        for entry_id, status in zip(pending, statuses, strict=True):
            if status < 0:  # E_RECEIPT_EXPIRED: a FIFO receipt whose timeout ran out
                if single:
                    raise error_for(status, self.name)
                failed.append(failure(entry_id, error_for(status, self.name)))
            elif status == Status.DELETED or not single:
                successful.append(entry_id)
        return BatchResult(successful, failed)

    # -- the queue itself ----------------------------------------------------------

    def attributes(self) -> QueueInfo:
        """Settings, exact message counts, timestamps and counters of the queue.

        Of a sharded queue: its settings and times, the counts added up over its shards.
        """
        return drive(self._client, self._attributes_steps())

    def _attributes_steps(self) -> Steps[QueueInfo]:
        """``attributes`` as steps."""
        shards = yield from self._shards_steps()
        if shards:
            info: QueueInfo = yield Blocking(sharded.attributes, self, shards)
            return info
        return (yield from self._attributes_here_steps())

    def _attributes_here(self) -> QueueInfo:
        """This queue's own attributes (of one shard, for a sharded queue)."""
        return drive(self._client, self._attributes_here_steps())

    def _attributes_here_steps(self) -> Steps[QueueInfo]:
        reply = yield ScriptCall("get_attributes", self.keys, [self._client._now_arg()], self.name)
        now_ms = reply[1]
        meta = text_pairs(reply[2])
        counters = {k: int(v) for k, v in text_pairs(reply[3]).items()}
        oldest = reply[8]
        return QueueInfo(
            name=self._home,
            config=QueueConfig.from_meta(meta),
            visible=reply[4],
            in_flight=reply[5],
            delayed=reply[6],
            moving=reply[7],
            created_at=int(meta["created_ms"]) / 1000,
            modified_at=int(meta["modified_ms"]) / 1000,
            oldest_age=_age(now_ms, oldest),
            counters=counters,
            groups=reply[9],
            groups_in_flight=reply[10],
            noisy_groups=reply[11] if len(reply) > 11 else 0,
            visible_in_quiet_groups=reply[12] if len(reply) > 11 else reply[4],
            in_flight_in_quiet_groups=reply[13] if len(reply) > 11 else reply[5],
            oldest_age_in_quiet_groups=_age(now_ms, reply[14] if len(reply) > 14 else oldest),
        )

    def peek(self, state: str = "visible", *, limit: int = 10, offset: int = 0) -> list[PeekedMessage]:
        """Look at up to ``limit`` (1-100) messages in one state without receiving them.

        ``state`` is ``"visible"`` (in receive order, next first), ``"in_flight"``
        (by visibility expiry, soonest first) or ``"delayed"`` (by due time,
        soonest first). ``offset`` (0-100,000,000) skips that many entries, to page
        (cheaply: see ``smq.operations._peek``).
        Changes nothing: no receive count, counter, event or visibility.
        Each state is shown as stored: a message whose timeout or delay ran
        out shows where it was until a receive moves it. Ids of visible
        messages deleted since are skipped but count toward ``offset`` and
        ``limit``, so a page may hold fewer than ``limit`` messages with more
        after it. On a sharded queue the shards are paged in turn, as if one
        after the other. Raises InvalidParameter or QueueDoesNotExist.
        """
        shards = self._shards()
        if shards:
            return sharded.peek(self, shards, state, limit, offset)
        return peek(self._client, self.keys, state, limit, offset)

    def discard(self, message_id: str, *, near: int = 0) -> bool:
        """Delete one visible message by its id, found near index ``near`` of the visible messages.

        For a tool that lists messages with ``peek`` and acts on one: ``near`` is the index the
        message was seen at (the peek's ``offset`` plus its place on the page, 0-100,000,099). The
        message is looked for within 100 entries either side of it (receives since then move it
        toward 0); not there, or no longer visible (received, deleted, moved), the call returns
        False and changes nothing: list again. The message is gone at once, counted as deleted
        (and recorded in the queue's events, if it keeps them), as a delete by receipt is;
        a message in flight needs its receipt. Standard queues only: raises InvalidParameter on
        a FIFO or a sharded queue, QueueDoesNotExist when the queue does not exist. On a fair
        queue, a noisy tenant's messages set aside (listed by ``peek`` after the others) are not
        found: only the list of visible messages is looked at.
        """
        return take_one.discard(self, message_id, near)

    def move_message(self, message_id: str, destination: str | None = None, *, near: int = 0) -> bool:
        """Move one visible message by its id to queue ``destination``, or back where it came from.

        A redrive of one message: found as ``discard`` finds it (``near``; False when it is not
        there), it goes to ``destination``, or with None to the queue it was dead-lettered or
        redriven from, and arrives as a new message (new id and sent time, receive count 0),
        as ``Client.redrive`` moves messages. Raises InvalidParameter when the message came from
        no other queue and no destination is named, and QueueDoesNotExist, before anything is
        taken out, when the destination does not exist (should it be deleted during the call,
        the message comes back to this queue, at the back, and the call raises
        QueueDoesNotExist). The move takes the two steps of every move between queues: should
        the call fail between them, the message waits in this queue's outbox (``moving``) and
        ``Client.recover`` (or a later receive or redrive here) finishes the move, once. Standard
        queues only, not sharded, as ``discard``.
        """
        return take_one.move_message(self, message_id, destination, near)

    def events(self, *, after: str = "-", limit: int = 1000) -> list[Event]:
        """Up to ``limit`` (1-10,000) lifecycle events of the queue, oldest first.

        Only a queue with ``event_stream_max_len`` set records events (the
        oldest are trimmed beyond about that many). ``after`` is ``"-"`` (from
        the oldest kept) or the ``event_id`` of the last event of the previous
        page, to read on; a page shorter than ``limit`` is the end, for now.
        Changes nothing. Raises InvalidParameter or QueueDoesNotExist.
        Of a sharded queue: the events of all its shards, in one order; an
        event's id then ends in its shard's index (``<ms>-<seq>-<shard>``).
        """
        shards = self._shards()
        if shards:
            return sharded.events(self, shards, after, limit)
        return read_events(self._client, self.keys, after, limit)

    def consumers(self, limit: int = 100) -> list[Consumer]:
        """The workers and SQS clients seen receiving from the queue, the latest heartbeat first.

        Up to ``limit`` (1-100) of them, each a ``Consumer`` with its kind,
        last heartbeat and what it says of itself. Every ``smq.Worker`` beats
        every 15 s per queue while it runs and is forgotten at a graceful
        stop; ``smq serve`` beats every 15 s for the SQS clients that received
        through it since its last beat. A consumer that stopped otherwise
        shows with a growing ``age`` until it is dropped, an hour after its
        last heartbeat. On a sharded queue, consumers are kept under the first
        shard (the queue's own keys). Changes nothing. Raises InvalidParameter
        or QueueDoesNotExist.
        """
        return consumers(self._client, self.keys, limit)

    def _beat(self, consumer_id: str, kind: str, info: Mapping[str, Any], forget: bool = False) -> None:
        """Note a heartbeat of consumer ``consumer_id`` (``kind`` ``"worker"`` or ``"sqs"``,
        ``info`` JSON-able, at most 2 KiB) on this queue, or with ``forget`` drop it.

        Kept under the first shard of a sharded queue (its own keys). Raises
        InvalidParameter or QueueDoesNotExist (and writes nothing then).
        """
        beat(self._client, self.keys, consumer_id, kind, info, forget)

    def set_attributes(self, **settings: Any) -> None:
        """Change settings (QueueConfig fields); applies to later calls.

        ``extra_attributes`` changes only the attributes it names; an empty
        value removes one (as SQS does when Policy is set to ""). A sharded
        queue's shards take the change one after the other, in this call.
        """
        config = changed_config(self.name, settings, fifo=self.fifo, sharded=False)  # before Redis is asked
        shards = self._shards()
        if shards:
            config = changed_config(self.name, settings, fifo=self.fifo, sharded=True)
        self._client._check_dead_letter_target(self.name, config, sharded=bool(shards))
        meta = config.to_meta(set(settings) - {"extra_attributes"})
        if "extra_attributes" in settings:
            for name, value in check_extra_attributes(settings["extra_attributes"]).items():
                meta[EXTRA_PREFIX + name] = value
        if not meta:
            raise InvalidParameter("set_attributes needs at least one setting")
        args: list[Any] = [self._client._now_arg()]
        for field, value in meta.items():
            args += [field, value]
        policy = config.redrive_policy
        if policy is not None:
            # The dead-letter queue's index of sources, before and after: a
            # superset of the queues whose policy names it (see _sources).
            note_source(self._client, self.name, policy.dead_letter_queue)
        for shard in shards or (self,):
            self._client.run("set_attributes", shard.keys, args, queue=self.name)
        if policy is not None:
            note_source(self._client, self.name, policy.dead_letter_queue)

    # -- tags --------------------------------------------------------------------

    def tag(self, tags: Mapping[str, str]) -> None:
        """Add tags to the queue, or change their values (SQS TagQueue).

        A queue has at most 50 tags: a change that would leave more raises
        InvalidParameter and changes nothing. Keys are 1-128 characters,
        case-sensitive, not starting with ``aws:``; values 0-256 characters.
        """
        checked = check_tags(tags)
        if not checked:
            raise InvalidParameter("tag needs at least one tag")
        args: list[Any] = [self._client._now_arg()]
        for key, value in checked.items():
            args += [key, value]
        self._client.run("tag_queue", self.keys, args, queue=self.name)

    def untag(self, keys: Sequence[str]) -> None:
        """Remove the tags with these keys (SQS UntagQueue); absent keys are ignored."""
        checked = check_tag_keys(keys)
        self._client.run("untag_queue", self.keys, [self._client._now_arg(), *checked], queue=self.name)

    def history(self, limit: int = HISTORY_KEPT) -> list[Sample]:
        """The newest ``limit`` (1-10,000) samples of the queue's counts, oldest first.

        ``smq serve`` keeps one sample per 10 s step, an hour of them (see
        ``Sample``); a queue no ``smq serve`` samples has none. Of a sharded
        queue: the counts added up over its shards. Changes nothing. Raises
        InvalidParameter or QueueDoesNotExist.
        """
        return read_history(self._client, self.keys, limit)[1]

    def _sample(self, step: int = HISTORY_STEP, keep: int = HISTORY_KEPT) -> bool:
        """Keep the queue's counts now as its history's sample of this step (``smq serve``
        does, for the queues it serves); False when another process took it already."""
        check_int("step", step, 1, 3600)
        check_int("keep", keep, 1, MAX_HISTORY)
        now, newest = read_history(self._client, self.keys, 1)
        now_ms = round(now * 1000)
        if newest and round(newest[-1].at * 1000) >= now_ms - now_ms % (step * 1000):
            return False  # taken: spare the attributes read (every smq serve samples every queue)
        return record_sample(self._client, self.keys, self.attributes(), step, keep)

    def tags(self) -> dict[str, str]:
        """The queue's tags, key -> value (SQS ListQueueTags)."""
        reply = self._client.run("list_tags", self.keys, [self._client._now_arg()], queue=self.name)
        return text_pairs(reply[1:])

    def purge(self, *, interval: float = 0) -> int:
        """Delete every message of the queue; returns how many there were.

        The queue's deduplication ids go too, as on SQS. With ``interval``,
        raise ``PurgeQueueInProgress`` if the queue was purged less than that
        many seconds ago (SQS allows one purge per 60 seconds; the HTTP API
        passes 60).
        """
        interval_ms = check_int("interval", round(interval * 1000), 0, 86_400_000)
        args = [self._client._now_arg(), interval_ms]
        purged = 0
        for shard in self._shards() or (self,):
            # The first shard's purge checks the interval for all of them.
            reply = self._client.run("purge", shard.keys, args, queue=self.name)
            purged += int(reply[1])
            args[1] = 0
        return purged


def _age(now_ms: int, sent_ms: int) -> float | None:
    """Seconds since ``sent_ms`` by the server's clock; None for -1 (no message)."""
    return (now_ms - sent_ms) / 1000 if sent_ms >= 0 else None


def _receipt_of(receipt_or_message: str | Message) -> str:
    if isinstance(receipt_or_message, Message):
        return receipt_or_message.receipt_handle
    return receipt_or_message  # whatever it is, parse_receipt checks it
