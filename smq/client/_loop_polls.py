"""Long polls on an event loop: a waiting poll holds no thread and no connection.

Used by ``smq serve`` (one per server process) and by the asyncio client
(one per client and event loop).

A poll that finds its queue empty subscribes to the queue's wake channel
(one Pub/Sub connection per process, shared by every poll; the first poll
of a channel subscribes it, the last unsubscribes) and parks a future.

A notification wakes *one* parked poll of the channel, not all of them: a
send of one message would otherwise cost one receive script per waiting
poll. A woken poll that comes back with a full batch wakes two more, since
more messages may be waiting; so a burst fans out in a few rounds. A poll
that is between two receive attempts when a notification arrives sees the
channel's count move and tries again at once, so no notification is lost.

Expiries and delays publish nothing; each receive reports when the next one
falls due (by the Redis clock), and the channel keeps one timer for the
earliest, which counts as a notification when it fires.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from .._errors import Status, error_for
from ..connection._wakeup import SHARD_CONFIRM_TIMEOUT
from ..core._message import Message
from ..core._steps import Steps
from ._client import Client
from ._queue import Queue, _Rider

Call = Callable[..., Awaitable[Any]]
Drive = Callable[[Steps[Any]], Awaitable[Any]]

# The server's clock margin past a reported due time: the expiry must have
# passed on Redis's clock too when the receive runs.
_DUE_MARGIN = 0.002
_FAN_OUT = 2


class _Channel:
    __slots__ = ("notified", "waiting", "parked", "watchers", "watch", "lock", "timer", "timer_at")

    def __init__(self) -> None:
        self.notified = 0
        # A sharded queue's poll parks one future on the channel of each shard.
        self.waiting: collections.deque[asyncio.Future[bool]] = collections.deque()
        self.parked = 0  # polls parked here, until they run again
        self.watchers = 0
        self.watch: Any = None  # the core waker's subscription, while any poll watches
        self.lock = asyncio.Lock()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0


class LongPolls:
    """Receives with a wait, for an asyncio server; ``call`` runs blocking core calls."""

    def __init__(self, client: Client, call: Call, drive: Drive) -> None:
        self._client = client
        self._call = call
        self._drive = drive
        self._loop = asyncio.get_running_loop()
        self._channels: dict[str, _Channel] = {}
        self._parked = 0
        self._closing = False
        client._waker.add_listener(self._from_listener)

    @property
    def waiting(self) -> int:
        """Polls parked now, waiting for a notification."""
        return self._parked

    def close(self) -> None:
        """End every poll now: they return what they have (nothing)."""
        self._closing = True
        self._client._waker.remove_listener(self._from_listener)
        for channel in self._channels.values():
            self._wake(channel, len(channel.waiting))

    async def receive(
        self,
        queue: Queue,
        max_messages: int,
        visibility_ms: int,
        wait_seconds: int | None,
        attempt_id: str = "",
        rider: _Rider | None = None,
    ) -> list[Message]:
        """``Queue.receive`` for asyncio (arguments already checked); a ``rider`` goes with the first try."""
        messages, _, wait_ms, over_limit = await self._drive(
            queue._receive_now_steps(max_messages, visibility_ms, attempt_id, rider)
        )
        wait = wait_ms / 1000 if wait_seconds is None else wait_seconds
        if messages or wait <= 0 or self._closing:
            if over_limit and not messages and wait <= 0:
                raise error_for(Status.E_OVER_LIMIT, queue.name)
            return list(messages)
        return await self._poll(queue, max_messages, visibility_ms, self._loop.time() + wait, attempt_id)

    async def _poll(
        self, queue: Queue, max_messages: int, visibility_ms: int, deadline: float, attempt_id: str = ""
    ) -> list[Message]:
        names = queue._wake_channels()
        sharded = len(names) > 1
        async with contextlib.AsyncExitStack() as stack:
            channels = [
                await stack.enter_async_context(self._watching(name, deadline, sharded)) for name in names
            ]
            while True:
                if self._closing:
                    return []
                seen = [channel.notified for channel in channels]
                messages, next_due_ms, _, _ = await self._drive(
                    queue._receive_now_steps(max_messages, visibility_ms, attempt_id)
                )
                if messages:
                    if len(messages) == max_messages:
                        self._wake(channels[0], _FAN_OUT)
                    return list(messages)
                now = self._loop.time()
                if now >= deadline or self._closing:
                    return []
                if [channel.notified for channel in channels] != seen:
                    continue
                if next_due_ms >= 0:
                    self._arm(channels[0], now + next_due_ms / 1000 + _DUE_MARGIN)
                if sharded and not self._client._waker.confirmed(names):
                    self._arm(channels[0], now + SHARD_CONFIRM_TIMEOUT)  # a shard's node may be down
                await self._park(channels, deadline)

    async def _park(self, channels: list[_Channel], deadline: float) -> None:
        future: asyncio.Future[bool] = self._loop.create_future()
        for channel in channels:
            channel.waiting.append(future)
            channel.parked += 1
        self._parked += 1
        timeout = self._loop.call_at(deadline, self._expire, future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.result():
                self._wake(channels[0], 1)  # pass on the notification this poll took
            raise
        finally:
            timeout.cancel()
            if not future.done():
                future.cancel()
            self._parked -= 1
            for channel in channels:
                channel.parked -= 1
                self._compact(channel)

    def _expire(self, future: asyncio.Future[bool]) -> None:
        if not future.done():
            future.set_result(False)

    def _wake(self, channel: _Channel, count: int) -> None:
        while count > 0 and channel.waiting:
            future = channel.waiting.popleft()
            if not future.done():
                future.set_result(True)
                count -= 1

    def _compact(self, channel: _Channel) -> None:
        # Futures that timed out stay in the deque until a wake pops them;
        # drop them when they outnumber the live ones.
        if len(channel.waiting) > 64 and len(channel.waiting) > 2 * channel.parked:
            channel.waiting = collections.deque(f for f in channel.waiting if not f.done())

    def _arm(self, channel: _Channel, at: float) -> None:
        if channel.timer is not None and channel.timer_at <= at:
            return
        if channel.timer is not None:
            channel.timer.cancel()
        channel.timer_at = at
        channel.timer = self._loop.call_at(at, self._due, channel)

    def _due(self, channel: _Channel) -> None:
        channel.timer = None
        channel.notified += 1
        self._wake(channel, 1)

    def _from_listener(self, name: str | None) -> None:
        # On the waker's thread: hand over to the event loop.
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(self._notify, name)

    def _notify(self, name: str | None) -> None:
        if name is None:  # a new connection: every poll tries again
            for channel in self._channels.values():
                channel.notified += 1
                self._wake(channel, len(channel.waiting))
            return
        found = self._channels.get(name)
        if found is not None:
            found.notified += 1
            self._wake(found, 1)

    @contextlib.asynccontextmanager
    async def _watching(self, name: str, deadline: float, sharded: bool) -> AsyncIterator[_Channel]:
        channel = self._channels.get(name) or self._channels.setdefault(name, _Channel())
        channel.watchers += 1
        try:
            async with channel.lock:
                if channel.watch is None:
                    # The core waker counts in time.monotonic, as the loop does.
                    confirm_by = time.monotonic() + (deadline - self._loop.time())
                    if sharded:
                        # Subscribe, but wait for no confirmation: a shard whose node is down
                        # must not hold up the others; the poll looks again each second until
                        # every shard's channel is confirmed (see _poll).
                        confirm_by = time.monotonic()
                    watch = self._client._waker.watch(name, confirm_by)
                    await self._call(watch.__enter__)
                    channel.watch = watch
            yield channel
        finally:
            channel.watchers -= 1
            if channel.watchers == 0:
                await asyncio.shield(self._unwatch(name, channel))

    async def _unwatch(self, name: str, channel: _Channel) -> None:
        async with channel.lock:
            if channel.watchers > 0:
                return
            if channel.watch is not None:
                watch, channel.watch = channel.watch, None
                await self._call(watch.__exit__, None, None, None)
            if channel.watchers == 0 and self._channels.get(name) is channel:
                if channel.timer is not None:
                    channel.timer.cancel()
                del self._channels[name]
