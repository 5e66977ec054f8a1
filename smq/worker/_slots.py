"""Where handlers run: threads for a sync handler, an event loop for an async one."""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .._errors import LeaseLost
from ._config import WorkerConfig
from ._job import Job
from ._leases import Lease, LeaseKeeper
from ._metrics import WorkerMetrics

log = logging.getLogger("smq.worker")

Handler = Callable[[Job], Any]
"""A handler takes a :class:`Job`; it may be ``async def``. Returning means
done (the message is deleted); raising means failed (retried after the backoff)."""


def is_async(handler: Handler) -> bool:
    """True for ``async def`` functions and objects with an ``async def __call__``."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004
    )


class _Outcome:
    """Bookkeeping around one handler call, shared by both kinds of slots."""

    def __init__(self, keeper: LeaseKeeper, metrics: WorkerMetrics, config: WorkerConfig) -> None:
        self.keeper = keeper
        self.metrics = metrics
        self.config = config

    def done(self, lease: Lease, started: float, error: BaseException | None) -> None:
        self.metrics.processing.observe(time.monotonic() - started)
        message = lease.job.message
        if error is None:
            self.keeper.succeeded(lease)
            return
        delay = self.config.retry_delay(message.receive_count)
        if isinstance(error, LeaseLost) or lease.job.lease_lost:
            log.info("handler gave up message %s: %s", message.message_id, lease.job.lost_reason)
        else:
            log.error(
                "handler failed on message %s (receive %d); it is retried in %d s",
                message.message_id,
                message.receive_count,
                delay,
                exc_info=error,
            )
        self.keeper.failed(lease, delay)


class ThreadSlots:
    """``concurrency`` daemon threads, each running a sync handler on one job at a time.

    Daemon threads, so that a handler still running after a graceful stop's
    grace period does not keep the process alive (its message is released).
    """

    def __init__(self, handler: Handler, outcome: _Outcome, concurrency: int) -> None:
        self._handler = handler
        self._outcome = outcome
        self._ready: queue.SimpleQueue[Lease | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"smq-handler-{n}", daemon=True)
            for n in range(concurrency)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, lease: Lease) -> None:
        self._ready.put(lease)

    def stop(self) -> None:
        for _ in self._threads:
            self._ready.put(None)

    def _work(self) -> None:
        while True:
            lease = self._ready.get()
            if lease is None:
                return
            if not self._outcome.keeper.begin(lease):
                continue
            started = time.monotonic()
            error: BaseException | None = None
            try:
                self._handler(lease.job)
            except BaseException as raised:  # SystemExit too: a handler must not end its slot
                error = raised
            self._outcome.done(lease, started, error)


class AsyncSlots:
    """One event loop thread; ``concurrency`` tasks, each awaiting an async handler on one job."""

    def __init__(self, handler: Callable[[Job], Awaitable[Any]], outcome: _Outcome, concurrency: int) -> None:
        self._handler = handler
        self._outcome = outcome
        self._concurrency = concurrency
        self._loop = asyncio.new_event_loop()
        self._ready: asyncio.Queue[Lease] | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="smq-handlers", daemon=True)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False  # set on the loop when stop() cancels the tasks

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def submit(self, lease: Lease) -> None:
        ready = self._ready
        assert ready is not None
        self._loop.call_soon_threadsafe(ready.put_nowait, lease)

    def stop(self) -> None:
        """Cancel the tasks (their messages are released already) and end the loop."""

        def cancel() -> None:
            self._stopping = True
            for task in self._tasks:
                task.cancel()

        if self._loop.is_running():
            self._loop.call_soon_threadsafe(cancel)
        self._thread.join(5.0)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._ready = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self._concurrency)]
        self._started.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _work(self) -> None:
        assert self._ready is not None
        while True:
            lease = await self._ready.get()
            if not self._outcome.keeper.begin(lease):
                continue
            started = time.monotonic()
            error: BaseException | None = None
            try:
                await self._handler(lease.job)
            except asyncio.CancelledError as raised:
                if self._stopping:
                    raise  # a stop past its grace period: the message is released already
                error = raised  # cancelled by something of the handler's own: a failure
            except BaseException as raised:
                error = raised
            self._outcome.done(lease, started, error)
