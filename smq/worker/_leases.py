"""The leases a worker holds, and the one thread that talks to Redis about them.

A lease is a received message the worker has not yet deleted or released.
The keeper thread does all of a worker's visibility traffic in batches of up
to 10: it extends every lease when half of its timeout is left (running or
still waiting for a handler), deletes messages whose handler returned, and
releases failed or abandoned ones with a visibility change. Doing this on
one thread keeps handler threads free of Redis calls and turns many small
calls into few batched ones.

The keeper thread also runs the worker's registration heartbeat (``set_beat``):
every so often it notes the worker among the queue's consumers. A failed beat
is logged and tried again at the next one; it never stops the thread.

Times here are the worker's monotonic clock. Redis decides expiries by its
own clock; the worker only needs to extend early enough, so it counts each
timeout from just before the call that set it, which is never later than
the moment Redis counted from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence

from .._errors import QueueDoesNotExist, SmqError
from ..client._queue import Queue
from ..connection._outage import Outage
from ..core._batch import MAX_BATCH
from ..core._message import BatchResult, ChangeEntry, DeleteEntry, Message
from ._job import Job
from ._metrics import WorkerMetrics

log = logging.getLogger("smq.worker")

CEILING_SECONDS = 43200
"""No receipt hides a message longer than 12 hours after its receive."""
_CEILING_MARGIN = 5.0  # seconds kept from the ceiling: clocks of two machines drift
_RETRY_DELAY = 1.0  # seconds before a failed Redis call is tried again
# Deletes and releases wait this long for company, so that a busy worker
# sends full batches of 10 rather than many calls of one.
_LINGER = 0.002

WAITING, RUNNING, FINISHING, DONE = "waiting", "running", "finishing", "done"


class _Changed(threading.Condition):
    """A condition whose ``notify_all`` also calls ``on_change`` (set by an async receiver)."""

    on_change: Callable[[], None] | None = None

    def notify_all(self) -> None:
        super().notify_all()
        if self.on_change is not None:
            self.on_change()


class Lease:
    """One held message: its job, timeout, deadline and where it is in its life."""

    __slots__ = ("job", "timeout", "deadline", "ceiling", "state", "capped", "stale", "retry_at", "riding")

    def __init__(self, message: Message, timeout: int, received: float, ceiling: float) -> None:
        self.job = Job(message)
        self.timeout = timeout
        self.deadline = received + timeout
        self.ceiling = received + ceiling - _CEILING_MARGIN
        self.state = WAITING
        self.capped = False  # the heartbeat reached the 12-hour ceiling
        self.stale = False  # another receive holds the message: never delete it
        self.retry_at = 0.0
        self.riding = False  # its delete rides on the receiver's call: not extended meanwhile

    @property
    def receipt(self) -> str:
        return self.job.message.receipt_handle

    def extend_at(self) -> float:
        return max(self.deadline - self.timeout / 2, self.retry_at)

    def heartbeating(self) -> bool:
        return self.state != DONE and not self.capped and not self.job.lease_lost and not self.riding


class LeaseKeeper:
    """Holds a worker's leases; one thread extends, deletes and releases them."""

    def __init__(self, queue: Queue, metrics: WorkerMetrics, ceiling: float = CEILING_SECONDS) -> None:
        self._queue = queue
        self._metrics = metrics
        self._ceiling = ceiling
        # Held with ``with self._lock`` (cheaper than entering a Condition); both Conditions use it.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # the keeper thread waits on it
        # The receiver (for room) and wait_idle wait on it; an async receiver is told by ``on_change``.
        self._changed = _Changed(self._lock)
        self._sleeping_until = 0.0  # while the keeper waits: when it wakes by itself (0: not waiting)
        self._leases: dict[str, Lease] = {}
        self._deletes: list[Lease] = []
        self._changes: list[tuple[Lease, int]] = []
        self._actions_at = 0.0  # after a failed delete or release: not before this
        self._pending_since = 0.0  # when the oldest queued delete or release was queued
        self._closing = False
        self._accepting = True  # False once a stop released the waiting messages
        self._abandoned = False  # close() gave up waiting: the thread ends at once
        self._receiver_waiting = False  # the receiver will send the deletes with its receive
        self._beat: Callable[[], None] | None = None  # the registration heartbeat (see set_beat)
        self._beat_every = 0.0
        self._beat_at = 0.0  # when the next beat is due (0: at once)
        self._beat_outage = Outage(log, f"the registration heartbeat of the worker on queue {queue.name!r}")
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="smq-leases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def on_change(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (quick; any thread, the lock held) whenever room or idleness may have changed."""
        self._changed.on_change = callback

    def alive(self) -> bool:
        return self._thread.is_alive()

    def set_beat(self, beat: Callable[[], None], every: float) -> None:
        """Call ``beat`` on the keeper thread when it starts, then every ``every`` seconds, until
        it closes. Call before ``start``. Whatever ``beat`` raises is logged, never raised."""
        self._beat, self._beat_every, self._beat_at = beat, every, 0.0

    # -- called by the receiver and the handlers ---------------------------------

    def add(self, messages: Sequence[Message], timeout: int, received: float) -> list[Lease]:
        """Hold newly received messages (``received``: monotonic time before the receive)."""
        leases = [Lease(message, timeout, received, self._ceiling) for message in messages]
        with self._lock:
            for lease in leases:
                self._leases[lease.receipt] = lease
            if not self._accepting:
                # A receive that returned after the stop began: give them back at once.
                for lease in leases:
                    self._metrics.outcome("released")
                    lease.state = FINISHING
                    self._queued()
                    self._changes.append((lease, 0))
                leases = []
                self._cond.notify()
            elif leases and leases[0].extend_at() < self._sleeping_until:
                self._cond.notify()  # the keeper would wake too late for these (a short timeout)
        return leases

    def begin(self, lease: Lease) -> bool:
        """Mark a lease running; False if it was released meanwhile (do not run it)."""
        with self._lock:
            if lease.state != WAITING:
                return False
            lease.state = RUNNING
            return True

    def succeeded(self, lease: Lease, *, wake: bool = True) -> None:
        """The handler returned: delete the message (unless another receive holds it).

        ``wake=False``: the caller is the receiver, which sends the delete with its next
        receive; nobody is woken for it (the keeper still sends it if it comes first).
        """
        with self._lock:
            if lease.state != RUNNING:
                return  # released by a graceful stop meanwhile
            lost = lease.job.lease_lost
            self._metrics.outcome("lost" if lost else "succeeded")
            if lease.stale:
                self._finish(lease)
                self._changed.notify_all()
                return
            # Also after a timeout ran out unnoticed: the newest receipt still
            # deletes (on a FIFO queue it has expired, as on SQS: the delete
            # fails, is logged, and the message comes back), and a stale one
            # is ignored by the script (fencing).
            lease.state = FINISHING
            self._queued()
            self._deletes.append(lease)
            if wake or not self._accepting:
                self._changed.notify_all()  # the receiver's room, a stop's wait_idle
                if self._closing or not self._receiver_waiting or not self._accepting:
                    self._wake_keeper()  # the keeper's delete, unless the receiver takes it

    def failed(self, lease: Lease, retry_delay: int) -> None:
        """The handler raised: hide the message for ``retry_delay`` s, then it is retried."""
        with self._lock:
            if lease.state != RUNNING:
                return
            if lease.job.lease_lost:
                self._metrics.outcome("lost")
                self._finish(lease)
                self._changed.notify_all()
                return
            self._metrics.outcome("failed")
            lease.state = FINISHING
            self._queued()
            self._changes.append((lease, retry_delay))
            self._cond.notify()
            self._changed.notify_all()

    def release_waiting(self) -> int:
        """Release (visibility 0) every message no handler has started; returns how many."""
        with self._lock:
            self._accepting = False
        return self._release({WAITING}, "")

    def release_running(self) -> int:
        """Release every message whose handler still runs, and tell each handler."""
        return self._release({RUNNING}, "released by a graceful stop that ran out of grace")

    def release_unstarted(self, leases: Sequence[Lease]) -> int:
        """Release (visibility 0) those of ``leases`` no handler has started; returns how many.

        A slot calls it for the rest of a FIFO group's run when one of its
        messages did not succeed: they must not run before that one does.
        """
        with self._lock:
            return self._release_chosen([lease for lease in leases if lease.state == WAITING], "")

    def _release(self, states: set[str], reason: str) -> int:
        with self._lock:
            chosen = [lease for lease in self._leases.values() if lease.state in states]
            return self._release_chosen(chosen, reason)

    def _release_chosen(self, chosen: list[Lease], reason: str) -> int:
        """Release ``chosen`` (call with the lock held), telling their handlers ``reason`` if given."""
        for lease in chosen:
            self._metrics.outcome("lost" if lease.job.lease_lost else "released")
            lease.state = FINISHING
            if reason:
                lease.job._lose(reason)
            if lease.stale:
                self._finish(lease)
            else:
                self._queued()
                self._changes.append((lease, 0))
        self._cond.notify()
        self._changed.notify_all()
        return len(chosen)

    # -- counts and waits --------------------------------------------------------

    def held(self) -> int:
        with self._lock:
            return len(self._leases)

    def running(self) -> int:
        with self._lock:
            return sum(1 for lease in self._leases.values() if lease.state == RUNNING)

    def wait_for_room(
        self, limit: int, stopping: Callable[[], bool], *, take_deletes: bool = False
    ) -> tuple[int, list[Lease]]:
        """Block until fewer than ``limit`` leases are held; returns (the room, 0 when stopping; deletes).

        With ``take_deletes``, up to 10 queued deletes are handed to the
        caller, which sends them with its next receive and then reports with
        ``deleted`` or ``hand_back``; their leases count as room, since the
        receive deletes them before it takes more. While the caller waits here
        the keeper thread leaves the deletes to it.
        """
        with self._lock:
            self._receiver_waiting = take_deletes
            try:
                return self._room(limit, stopping, take_deletes)
            finally:
                self._receiver_waiting = False
                if self._deletes:
                    self._wake_keeper()  # deletes left over are the keeper's again

    async def wait_for_room_async(
        self, limit: int, stopping: Callable[[], bool], changed: asyncio.Event, *, take_deletes: bool = False
    ) -> tuple[int, list[Lease]]:
        """``wait_for_room`` for a receiver on an event loop: it awaits ``changed``, which
        ``on_change`` must set (from any thread) whenever the leases change."""
        room_since: float | None = None
        try:
            while not stopping():
                with self._lock:
                    self._receiver_waiting = take_deletes
                    changed.clear()
                    found, wait, room_since = self._room_step(limit, take_deletes, room_since)
                    if found is not None:
                        return found
                if not changed.is_set():
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(changed.wait(), wait)
            return 0, []
        finally:
            with self._lock:
                self._receiver_waiting = False
                if self._deletes:
                    self._wake_keeper()

    def _room(self, limit: int, stopping: Callable[[], bool], take_deletes: bool) -> tuple[int, list[Lease]]:
        """wait_for_room's wait, with the lock held."""
        room_since: float | None = None
        while not stopping():
            found, wait, room_since = self._room_step(limit, take_deletes, room_since)
            if found is not None:
                return found
            self._changed.wait(wait)
        return 0, []

    def _room_step(
        self, limit: int, take_deletes: bool, room_since: float | None
    ) -> tuple[tuple[int, list[Lease]] | None, float, float | None]:
        """One look for room, with the lock held: (the room and deletes to return, or None;
        how long to wait before the next look; since when there is some room)."""
        now = time.monotonic()
        room = limit - len(self._leases)
        taken: list[Lease] = []
        wait = 0.5
        if take_deletes and self._deletes and now >= self._actions_at:
            # As the keeper does, wait a moment for company rather than
            # delete (and receive) one message a call, unless none can come.
            ready_at = self._pending_since + _LINGER
            full = len(self._deletes) >= MAX_BATCH
            alone = len(self._deletes) + len(self._changes) >= len(self._leases)
            if room > 0 or full or alone or now >= ready_at:
                taken = self._deletes[:MAX_BATCH]
            else:
                wait = ready_at - now
        room += len(taken)
        if room > 0:
            # A little room: wait a moment for more, rather than receive a message or
            # two a call while those already held keep the handlers busy.
            room_since = now if room_since is None else room_since
            if room >= min(MAX_BATCH, limit) or now >= room_since + _LINGER:
                del self._deletes[: len(taken)]
                for lease in taken:
                    lease.riding = True
                return (room, taken), 0.0, room_since
            wait = min(wait, room_since + _LINGER - now)
        return None, wait, room_since

    def deleted(self, leases: list[Lease], result: BatchResult[str]) -> None:
        """The deletes of ``leases`` ran (entry ids are their positions): done with them."""
        for failure in result.failed:
            log.warning("delete of message %s failed: %s", leases[int(failure.id)].job.message_id, failure)
        with self._lock:
            for lease in leases:
                self._finish(lease)
            self._changed.notify_all()

    def hand_back(self, leases: list[Lease]) -> None:
        """Deletes taken by ``wait_for_room`` that did not surely run: the keeper sends them."""
        if leases:
            with self._lock:
                for lease in leases:
                    lease.riding = False
                self._queued()
                self._deletes.extend(leases)
                self._cond.notify()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no handler runs, for ``timeout`` s at most; True if none does."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while any(lease.state == RUNNING for lease in self._leases.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
            return True

    def close(self, timeout: float) -> int:
        """Finish the deletes and releases queued, for ``timeout`` s at most.

        Returns how many leases are still held (their messages come back
        when their timeouts run out).
        """
        with self._lock:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        with self._lock:
            self._abandoned = True  # a Redis that stays down must not keep the thread looping
            self._cond.notify()
            return len(self._leases)

    # -- the keeper thread -------------------------------------------------------

    def _wake_keeper(self) -> None:
        """Wake the keeper for the deletes and releases queued if it would sleep past their time."""
        due = max(self._actions_at, self._pending_since + _LINGER)
        if len(self._deletes) + len(self._changes) >= MAX_BATCH or self._closing:
            due = self._actions_at
        if self._sleeping_until > due:  # 0 while it works: it looks again before it sleeps
            self._cond.notify()

    def _queued(self) -> None:
        if not self._deletes and not self._changes:
            self._pending_since = time.monotonic()

    def _finish(self, lease: Lease) -> None:
        """Done with ``lease`` (call with the lock held, then notify ``_changed``: room for more)."""
        lease.state = DONE
        self._leases.pop(lease.receipt, None)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as error:
            log.exception("the heartbeat thread of queue %r failed", self._queue.name)
            self.failure = error

    def _loop(self) -> None:
        while True:
            with self._lock:
                work = self._next_work()
                if work is None:
                    return
            deletes, changes, extensions, beat = work
            if beat:
                self._run_beat()
            if deletes:
                self._delete(deletes)
            if changes:
                self._change(changes)
            if extensions:
                self._extend(extensions)

    def _run_beat(self) -> None:
        """The registration heartbeat, due now; it is cheap and never stops the thread."""
        assert self._beat is not None
        self._beat_at = time.monotonic() + self._beat_every
        try:
            self._beat()
        except Exception as error:
            self._beat_outage.failed(error)
        else:
            self._beat_outage.succeeded()

    def _next_work(self) -> tuple[list[Lease], list[tuple[Lease, int]], list[Lease], bool] | None:
        """Wait (holding the lock) until something is due; None when closed and done."""
        while True:
            now = time.monotonic()
            # Deletes wait for the receiver while it waits for room (not while closing).
            mine = self._closing or not self._receiver_waiting
            pending = (len(self._deletes) if mine else 0) + len(self._changes)
            actions_at = max(self._actions_at, self._pending_since + _LINGER)
            if pending >= MAX_BATCH or self._closing:
                actions_at = self._actions_at
            actions_due = pending > 0 and now >= actions_at
            if self._abandoned or (self._closing and not self._deletes and not self._changes):
                return None
            extend_due = math.inf
            for lease in self._leases.values():
                if lease.heartbeating():
                    extend_due = min(extend_due, lease.extend_at())
            beat_due = self._beat is not None and not self._closing and now >= self._beat_at
            if actions_due or extend_due <= now or beat_due:
                break
            wake = extend_due
            if self._beat is not None and not self._closing:
                wake = min(wake, self._beat_at)
            if pending:
                wake = min(wake, actions_at)
            wait = min(wake - now, 1.0)
            self._sleeping_until = now + wait
            try:
                self._cond.wait(wait)
            finally:
                self._sleeping_until = 0.0
        deletes: list[Lease] = []
        changes: list[tuple[Lease, int]] = []
        if actions_due:
            if mine:
                deletes, self._deletes = self._deletes, []
            changes, self._changes = self._changes, []
        # Extend early the leases that would be due soon anyway: fewer calls.
        extensions = [
            lease
            for lease in self._leases.values()
            if lease.heartbeating() and lease.extend_at() <= now + lease.timeout / 4
        ]
        return deletes, changes, extensions, beat_due

    def _delete(self, leases: list[Lease]) -> None:
        for start in range(0, len(leases), MAX_BATCH):
            chunk = leases[start : start + MAX_BATCH]
            entries = [DeleteEntry(str(i), lease.receipt) for i, lease in enumerate(chunk)]
            try:
                result = self._queue.delete_batch(entries)
            except QueueDoesNotExist:
                self._queue_gone(chunk)
                continue
            except SmqError as error:
                self._redis_failed("delete", error)
                with self._lock:
                    self._deletes.extend(chunk)
                continue
            self.deleted(chunk, result)

    def _change(self, changes: list[tuple[Lease, int]]) -> None:
        for start in range(0, len(changes), MAX_BATCH):
            chunk = changes[start : start + MAX_BATCH]
            entries = [
                ChangeEntry(str(i), lease.receipt, seconds) for i, (lease, seconds) in enumerate(chunk)
            ]
            try:
                result = self._queue.change_visibility_batch(entries)
            except QueueDoesNotExist:
                self._queue_gone([lease for lease, _ in chunk])
                continue
            except SmqError as error:
                self._redis_failed("release", error)
                with self._lock:
                    self._changes.extend(chunk)
                continue
            for failure in result.failed:
                # Not in flight or held by another receive: it is not ours to release.
                lease = chunk[int(failure.id)][0]
                log.info("message %s was not released: %s", lease.job.message_id, failure.message)
            with self._lock:
                for lease, _ in chunk:
                    self._finish(lease)
                self._changed.notify_all()

    def _queue_gone(self, leases: list[Lease]) -> None:
        """The queue was deleted: its messages are gone, and so are these leases."""
        log.error("queue %r was deleted: %d held messages are gone with it", self._queue.name, len(leases))
        with self._lock:
            for lease in leases:
                self._finish(lease)
            self._changed.notify_all()

    def _lose_to_deletion(self, lease: Lease) -> None:
        lease.job._lose("the queue was deleted")
        if lease.state == WAITING:
            self._finish(lease)
            self._changed.notify_all()

    def _redis_failed(self, what: str, error: SmqError) -> None:
        self._metrics.redis_errors.inc()
        log.warning("%s on queue %r failed, will retry: %s", what, self._queue.name, error)
        with self._lock:
            self._actions_at = time.monotonic() + _RETRY_DELAY

    def _extend(self, leases: list[Lease]) -> None:
        now = time.monotonic()
        calls: list[tuple[Lease, int]] = []
        for lease in leases:
            if lease.state == DONE or lease.riding:
                continue  # deleted or released earlier in this round, or being deleted
            left = math.floor(lease.ceiling - now)
            seconds = min(lease.timeout, left)
            if seconds < 1:
                self._cap(lease)
                continue
            calls.append((lease, seconds))
        for start in range(0, len(calls), MAX_BATCH):
            self._extend_batch(calls[start : start + MAX_BATCH])

    def _extend_batch(self, chunk: list[tuple[Lease, int]]) -> None:
        entries = [ChangeEntry(str(i), lease.receipt, seconds) for i, (lease, seconds) in enumerate(chunk)]
        sent = time.monotonic()
        try:
            result = self._queue.change_visibility_batch(entries)
        except QueueDoesNotExist:
            for lease, _ in chunk:
                with self._lock:
                    if lease.state == WAITING:
                        self._metrics.outcome("lost")
                    self._lose_to_deletion(lease)
            return
        except SmqError as error:
            self._metrics.redis_errors.inc()
            log.warning("heartbeat on queue %r failed, will retry: %s", self._queue.name, error)
            with self._lock:
                for lease, _ in chunk:
                    lease.retry_at = time.monotonic() + _RETRY_DELAY
            return
        failures = {int(failure.id): failure for failure in result.failed}
        with self._lock:
            for i, (lease, seconds) in enumerate(chunk):
                failure = failures.get(i)
                if lease.state == DONE or lease.riding:
                    continue  # deleted, released or being deleted while the call was on its way
                if failure is None:
                    lease.deadline = sent + seconds
                    lease.retry_at = 0.0
                    self._metrics.extensions.inc()
                    if seconds < lease.timeout:
                        self._cap(lease)
                elif failure.code == "VisibilityCeilingExceeded":
                    self._cap(lease)
                else:
                    self._lose(lease, failure.code, failure.message)

    def _cap(self, lease: Lease) -> None:
        if lease.capped:
            return
        lease.capped = True
        self._metrics.ceiling_reached.inc()
        left = max(0.0, lease.deadline - time.monotonic())
        log.warning(
            "message %s of queue %r reached the 12-hour visibility ceiling: the heartbeat stops, "
            "and it becomes visible again in %.0f s unless its handler finishes first",
            lease.job.message_id,
            self._queue.name,
            left,
        )

    def _lose(self, lease: Lease, code: str, detail: str) -> None:
        if lease.job.lease_lost:
            return
        stale = code == "StaleReceipt"
        lease.stale = stale
        self._metrics.lost_leases.inc()
        reason = (
            "another receive holds the message (stale receipt)"
            if stale
            else "its visibility timeout ran out before the heartbeat extended it"
        )
        lease.job._lose(reason)
        log.warning(
            "lost the lease of message %s of queue %r: %s (%s)",
            lease.job.message_id,
            self._queue.name,
            reason,
            detail,
        )
        if lease.state == WAITING:
            # No handler started it: nothing to tell, nothing to delete.
            self._metrics.outcome("lost")
            self._finish(lease)
            self._changed.notify_all()
