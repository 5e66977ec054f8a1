"""The asyncio client: ``smq.Client``'s queue operations, awaited on an event loop.

::

    from smq.aio import AsyncClient

    async def main() -> None:
        async with AsyncClient("redis://localhost:6379/0") as client:
            jobs = await client.create_queue("jobs")
            await jobs.send("hello")
            for message in await jobs.receive(10, wait_time_seconds=20):
                ...
                await jobs.delete(message)

Each operation is the sync client's own logic (the same checks, errors,
scripts and guarantees, see ``smq.core._steps``); only the I/O differs. Sends,
receives, deletes, visibility changes and attributes go to Redis from the
event loop, on one pipelined connection per Redis node: calls awaited at
once by many tasks reach Redis together. A long poll parks on the loop (no
thread, no connection of its own). The rest (creating, listing and deleting
queues, peek, tags, redrive and move tasks, and every call on a Sentinel
deployment or one that waits for replicas) runs the sync client's method in a
thread of the client's own pool, so it never blocks the loop either.

A client serves one event loop at a time: the loop of its first call (once
that loop is closed, the next loop's). Make one per process and loop, and
``await client.aclose()`` (or use ``async with``) when done.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .client._client import Client
from .client._loop_polls import LongPolls
from .client._loop_scripts import LoopScripts
from .client._queue import Queue, _Rider
from .connection._health import RedisHealth
from .connection._settings import Settings
from .core._config import QueueInfo
from .core._keys import QueueKeys
from .core._message import (
    AttributeValue,
    BatchResult,
    ChangeEntry,
    DeleteEntry,
    Message,
    SendEntry,
    SendResult,
)
from .core._steps import Steps
from .operations._consumers import Consumer
from .operations._declared import QueueChange
from .operations._events import Event
from .operations._history import HISTORY_KEPT, Sample
from .operations._move_tasks import MoveTask
from .operations._peek import PeekedMessage
from .operations._upgrade import QueueUpgrade

__all__ = ["AsyncClient", "AsyncQueue"]

T = TypeVar("T")

CONNECTION_NAME = "smq-aio"
"""The name of the asyncio client's connections in ``CLIENT LIST``."""


class AsyncClient:
    """Entry point of smq for asyncio programs: creates, lists and deletes queues.

    Takes the arguments of ``smq.Client`` (a URL, ``Settings`` or a redis-py
    client), or ``client=``, an ``smq.Client`` to share (its connections, its
    settings); ``threads`` caps the calls that run in threads at once.
    Constructing one opens no connection; the first call does.
    """

    def __init__(
        self,
        url: str | Settings | None = None,
        *,
        settings: Settings | None = None,
        redis_client: Any = None,
        client: Client | None = None,
        threads: int | None = None,
    ) -> None:
        if client is not None:
            if url is not None or settings is not None or redis_client is not None:
                raise TypeError("pass either client or url/settings/redis_client, not both")
            self._client, self._owns = client, False
        else:
            self._client, self._owns = Client(url, settings=settings, redis_client=redis_client), True
        if threads is None:
            threads = min(32, (os.cpu_count() or 1) + 4)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="smq-aio")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scripts: LoopScripts | None = None
        self._polls: LongPolls | None = None
        self._closed = False

    @property
    def sync(self) -> Client:
        """The blocking ``smq.Client`` this one runs on (the same connections and settings)."""
        return self._client

    @property
    def settings(self) -> Settings:
        """The settings in use (see ``Settings``)."""
        return self._client.settings

    def __repr__(self) -> str:
        return f"<smq.aio.AsyncClient of {self._client.settings.url!r}>"

    # -- running on the loop -----------------------------------------------------

    def _bound(self) -> tuple[LoopScripts, LongPolls]:
        """The script runner and long polls of the running loop."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._scripts is None or self._polls is None:
            if self._closed:
                raise RuntimeError("this AsyncClient is closed")
            if self._loop is not None and not self._loop.is_closed():
                raise RuntimeError(
                    "this AsyncClient serves another event loop; make one client per event loop"
                )
            self._unbind()
            self._loop = loop
            self._scripts = LoopScripts(self._client, self._in_thread, CONNECTION_NAME)
            self._polls = LongPolls(self._client, self._in_thread, self._scripts.drive)
        return self._scripts, self._polls

    def _unbind(self) -> None:
        # Of a loop that is closed, the connections cannot be closed on it: they are dropped.
        if self._polls is not None:
            with contextlib.suppress(RuntimeError):
                self._polls.close()
        if self._scripts is not None:
            with contextlib.suppress(RuntimeError):
                self._scripts.close()
        self._loop = self._scripts = self._polls = None

    def _interrupt(self) -> None:
        """End every waiting long poll now, and wait in none from now on (a worker's stop).

        Call it on the client's event loop."""
        if self._polls is not None:
            self._polls.close()

    async def _in_thread(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)`` in a thread of the client's pool."""
        if self._closed:
            raise RuntimeError("this AsyncClient is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(function, *args, **kwargs))

    async def _drive(self, steps: Steps[T]) -> T:
        """Run a core call's steps (see ``smq.core._steps``) on the running loop."""
        scripts, _ = self._bound()
        return await scripts.drive(steps)  # type: ignore[no-any-return]

    # -- queues ------------------------------------------------------------------

    async def create_queue(
        self,
        name: str,
        *,
        tags: Mapping[str, str] | None = None,
        refuse_recently_deleted: bool = False,
        **settings: Any,
    ) -> AsyncQueue:
        """Create a queue, or return the existing one if its settings match (``Client.create_queue``)."""
        made = await self._in_thread(
            self._client.create_queue,
            name,
            tags=tags,
            refuse_recently_deleted=refuse_recently_deleted,
            **settings,
        )
        return AsyncQueue(self, made)

    async def get_queue(self, name: str) -> AsyncQueue:
        """The queue called ``name``; raises QueueDoesNotExist if there is none."""
        return AsyncQueue(self, await self._in_thread(self._client.get_queue, name))

    def queue(self, name: str) -> AsyncQueue:
        """A handle on queue ``name`` without checking that it exists (no I/O)."""
        return AsyncQueue(self, self._client.queue(name))

    async def queue_exists(self, name: str) -> bool:
        """True if there is a queue called ``name``."""
        return await self._in_thread(self._client.queue_exists, name)

    async def list_queues(
        self, prefix: str = "", *, limit: int | None = None, after: str = "", qualified: bool = True
    ) -> list[str]:
        """Names of queues starting with ``prefix``, sorted; page with ``after`` (``Client.list_queues``)."""
        return await self._in_thread(
            self._client.list_queues, prefix, limit=limit, after=after, qualified=qualified
        )

    async def delete_queue(self, name: str) -> bool:
        """Delete a queue and all its messages; False if it did not exist."""
        return await self._in_thread(self._client.delete_queue, name)

    async def recover(self, name: str, *, min_age: float = 0.0) -> int:
        """Finish moves of queue ``name`` interrupted between their steps (``Client.recover``)."""
        return await self._in_thread(self._client.recover, name, min_age=min_age)

    async def redrive(
        self, name: str, *, destination: str | None = None, max_messages: int | None = None
    ) -> int:
        """Move the visible messages of dead-letter queue ``name`` back (``Client.redrive``)."""
        return await self._in_thread(
            self._client.redrive, name, destination=destination, max_messages=max_messages
        )

    async def apply_queues(
        self, declared: str | os.PathLike[str] | Mapping[str, Any], *, dry_run: bool = False
    ) -> list[QueueChange]:
        """Create or update the queues a declared-queues file declares (``Client.apply_queues``)."""
        return await self._in_thread(self._client.apply_queues, declared, dry_run=dry_run)

    async def upgrade(self, *, dry_run: bool = False, force: bool = False) -> list[QueueUpgrade]:
        """Move every queue's data to the newest layout (``Client.upgrade``)."""
        return await self._in_thread(self._client.upgrade, dry_run=dry_run, force=force)

    async def dead_letter_sources(self, name: str, *, limit: int | None = None, after: str = "") -> list[str]:
        """Names of the queues whose redrive policy names ``name`` (``Client.dead_letter_sources``)."""
        return await self._in_thread(self._client.dead_letter_sources, name, limit=limit, after=after)

    # -- message move tasks --------------------------------------------------------

    async def start_move_task(
        self, source: str, *, destination: str | None = None, max_per_second: int | None = None
    ) -> MoveTask:
        """Start moving the messages of dead-letter queue ``source`` (``Client.start_move_task``)."""
        return await self._in_thread(
            self._client.start_move_task, source, destination=destination, max_per_second=max_per_second
        )

    async def list_move_tasks(self, source: str, *, limit: int = 10) -> list[MoveTask]:
        """The most recent move tasks of queue ``source``, newest first (``Client.list_move_tasks``)."""
        return await self._in_thread(self._client.list_move_tasks, source, limit=limit)

    async def cancel_move_task(self, handle: str) -> MoveTask:
        """Ask a running move task to stop (``Client.cancel_move_task``)."""
        return await self._in_thread(self._client.cancel_move_task, handle)

    async def run_move_tasks(self, *, owner: str, lease: float = 10.0, deadline: float | None = None) -> int:
        """Work on running move tasks; returns how many it worked on (``Client.run_move_tasks``)."""
        return await self._in_thread(self._client.run_move_tasks, owner=owner, lease=lease, deadline=deadline)

    async def redis_health(self) -> list[RedisHealth]:
        """Memory, eviction policy and persistence of the Redis servers (``Client.redis_health``)."""
        return await self._in_thread(self._client.redis_health)

    # -- the client itself -----------------------------------------------------------

    async def aclose(self) -> None:
        """End waiting long polls, close the loop's connections, then the client's (if it made it)."""
        if self._closed:
            return
        self._unbind()
        if self._owns:
            await self._in_thread(self._client.close)
        self._closed = True
        self._pool.shutdown(wait=False)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncQueue:
    """One queue, for asyncio. Get it from ``AsyncClient.create_queue``, ``get_queue`` or ``queue``.

    The methods are ``smq.Queue``'s, awaited: the same arguments, results
    and errors (see there for the details of each).
    """

    __slots__ = ("_client", "_queue")

    def __init__(self, client: AsyncClient, queue: Queue) -> None:
        self._client = client
        self._queue = queue

    @property
    def name(self) -> str:
        """The queue's name."""
        return self._queue.name

    @property
    def fifo(self) -> bool:
        """True for a FIFO queue (its name ends in ``.fifo``)."""
        return self._queue.fifo

    @property
    def keys(self) -> QueueKeys:
        return self._queue.keys

    @property
    def sync(self) -> Queue:
        """The same queue as a blocking ``smq.Queue``."""
        return self._queue

    def __repr__(self) -> str:
        return f"<smq.aio.AsyncQueue {self.name!r}>"

    # -- send ----------------------------------------------------------------------

    async def send(
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
        """Send one message (``Queue.send``)."""
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
        return await self._client._drive(self._queue._send_one_steps(entry))

    async def send_batch(self, entries: Sequence[SendEntry]) -> BatchResult[SendResult]:
        """Send 1-10 messages; each entry succeeds or fails on its own (``Queue.send_batch``)."""
        return await self._client._drive(self._queue._send_batch_steps(entries))

    # -- receive ---------------------------------------------------------------------

    async def receive(
        self,
        max_messages: int = 1,
        *,
        visibility_timeout: int | None = None,
        wait_time_seconds: int | None = None,
        attempt_id: str | None = None,
    ) -> list[Message]:
        """Receive up to ``max_messages`` (1-10) messages (``Queue.receive``).

        A long poll (``wait_time_seconds``, or the queue's default wait)
        waits on the event loop; cancelling the task ends it.
        """
        visibility_ms = self._queue._check_receive(
            max_messages, visibility_timeout, wait_time_seconds, attempt_id
        )
        return await self._receive(max_messages, visibility_ms, wait_time_seconds, attempt_id or "")

    async def delete_and_receive(
        self,
        entries: Sequence[DeleteEntry],
        max_messages: int = 1,
        *,
        visibility_timeout: int | None = None,
        wait_time_seconds: int | None = None,
        attempt_id: str | None = None,
    ) -> tuple[BatchResult[str], list[Message]]:
        """Delete 0-10 messages by receipt, then receive, in one round trip (``Queue.delete_and_receive``)."""
        queue = self._queue
        visibility_ms = queue._check_receive(max_messages, visibility_timeout, wait_time_seconds, attempt_id)
        deleted, rider = await self._client._drive(queue._deletes_before_receive_steps(entries))
        messages = await self._receive(
            max_messages, visibility_ms, wait_time_seconds, attempt_id or "", rider
        )
        return (deleted[0] if deleted else BatchResult([], [])), messages

    async def _receive(
        self,
        max_messages: int,
        visibility_ms: int,
        wait_time_seconds: int | None,
        attempt_id: str = "",
        rider: _Rider | None = None,
    ) -> list[Message]:
        """A checked receive (a long poll parks on the loop); a ``rider`` goes with its first try."""
        _, polls = self._client._bound()
        return await polls.receive(
            self._queue, max_messages, visibility_ms, wait_time_seconds, attempt_id, rider
        )

    # -- visibility and delete ---------------------------------------------------------

    async def change_visibility(self, receipt_handle: str | Message, visibility_timeout: int) -> None:
        """Hide a received message for ``visibility_timeout`` s from now (``Queue.change_visibility``)."""
        await self._client._drive(self._queue._change_one_steps(receipt_handle, visibility_timeout))

    async def change_visibility_batch(self, entries: Sequence[ChangeEntry]) -> BatchResult[str]:
        """Change the visibility of 1-10 messages (``Queue.change_visibility_batch``)."""
        return await self._client._drive(self._queue._change_batch_steps(entries))

    async def delete(self, receipt_handle: str | Message) -> bool:
        """Delete a received message; True if this call deleted it (``Queue.delete``)."""
        return await self._client._drive(self._queue._delete_one_steps(receipt_handle))

    async def delete_batch(self, entries: Sequence[DeleteEntry]) -> BatchResult[str]:
        """Delete 1-10 messages (``Queue.delete_batch``)."""
        return await self._client._drive(self._queue._delete_batch_steps(entries))

    # -- the queue itself ----------------------------------------------------------------

    async def attributes(self) -> QueueInfo:
        """Settings, exact message counts, timestamps and counters (``Queue.attributes``)."""
        return await self._client._drive(self._queue._attributes_steps())

    async def shard_names(self) -> list[str]:
        """Names of the queues that hold this queue's messages (``Queue.shard_names``)."""
        return await self._client._in_thread(self._queue.shard_names)

    async def peek(self, state: str = "visible", *, limit: int = 10, offset: int = 0) -> list[PeekedMessage]:
        """Look at messages in one state without receiving them (``Queue.peek``)."""
        return await self._client._in_thread(self._queue.peek, state, limit=limit, offset=offset)

    async def discard(self, message_id: str, *, near: int = 0) -> bool:
        """Delete one visible message by its id, found near index ``near`` (``Queue.discard``)."""
        return await self._client._in_thread(self._queue.discard, message_id, near=near)

    async def move_message(self, message_id: str, destination: str | None = None, *, near: int = 0) -> bool:
        """Move one visible message by its id to a queue, or back (``Queue.move_message``)."""
        return await self._client._in_thread(self._queue.move_message, message_id, destination, near=near)

    async def events(self, *, after: str = "-", limit: int = 1000) -> list[Event]:
        """Lifecycle events of the queue, oldest first (``Queue.events``)."""
        return await self._client._in_thread(self._queue.events, after=after, limit=limit)

    async def consumers(self, limit: int = 100) -> list[Consumer]:
        """The workers and SQS clients seen receiving from the queue (``Queue.consumers``)."""
        return await self._client._in_thread(self._queue.consumers, limit)

    async def set_attributes(self, **settings: Any) -> None:
        """Change settings (``Queue.set_attributes``)."""
        await self._client._in_thread(self._queue.set_attributes, **settings)

    async def tag(self, tags: Mapping[str, str]) -> None:
        """Add tags to the queue, or change their values (``Queue.tag``)."""
        await self._client._in_thread(self._queue.tag, tags)

    async def untag(self, keys: Sequence[str]) -> None:
        """Remove the tags with these keys (``Queue.untag``)."""
        await self._client._in_thread(self._queue.untag, keys)

    async def history(self, limit: int = HISTORY_KEPT) -> list[Sample]:
        """The newest samples of the queue's counts, oldest first (``Queue.history``)."""
        return await self._client._in_thread(self._queue.history, limit)

    async def tags(self) -> dict[str, str]:
        """The queue's tags (``Queue.tags``)."""
        return await self._client._in_thread(self._queue.tags)

    async def purge(self, *, interval: float = 0) -> int:
        """Delete every message of the queue; returns how many there were (``Queue.purge``)."""
        return await self._client._in_thread(self._queue.purge, interval=interval)
