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
from ._runs import Run

log = logging.getLogger("smq.worker")

Handler = Callable[[Job], Any]
"""A handler takes a ``Job``; it may be ``async def``. Returning means
done (the message is deleted); raising means failed (retried after the backoff)."""


def is_async(handler: Handler) -> bool:
    """True for ``async def`` functions and objects with an ``async def __call__``."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004
    )


class _Outcome:
    """Bookkeeping around each handler call of a run, shared by both kinds of slots."""

    def __init__(self, keeper: LeaseKeeper, metrics: WorkerMetrics, config: WorkerConfig) -> None:
        self.keeper = keeper
        self.metrics = metrics
        self.config = config

    def begin(self, run: Run, index: int) -> bool:
        """Mark ``run[index]`` running; False if it must not run (the rest is released)."""
        if self.keeper.begin(run[index]):
            return True
        self._release_rest(run, index)
        return False

    def done(self, run: Run, index: int, started: float, error: BaseException | None) -> bool:
        """Settle ``run[index]`` after its handler; True if the next message of the run may start."""
        lease = run[index]
        self._settle(lease, started, error)
        if error is None and not lease.job.lease_lost:
            return True
        self._release_rest(run, index)
        return False

    def _release_rest(self, run: Run, index: int) -> None:
        """The messages after ``run[index]`` (a FIFO group's) must not run before it succeeds."""
        released = self.keeper.release_unstarted(run[index + 1 :])
        if released:
            log.info(
                "released %d later messages of group %r behind message %s",
                released,
                run[index].job.message.message_group_id,
                run[index].job.message_id,
            )

    def _settle(self, lease: Lease, started: float, error: BaseException | None) -> None:
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
    """``concurrency`` daemon threads, each running a sync handler on one run at a time.

    Daemon threads, so that a handler still running after a graceful stop's
    grace period does not keep the process alive (its message is released).
    """

    def __init__(self, handler: Handler, outcome: _Outcome, concurrency: int) -> None:
        self._handler = handler
        self._outcome = outcome
        self._ready: queue.SimpleQueue[Run | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"smq-handler-{n}", daemon=True)
            for n in range(concurrency)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, run: Run) -> None:
        self._ready.put(run)

    def stop(self) -> None:
        for _ in self._threads:
            self._ready.put(None)

    def _work(self) -> None:
        while True:
            run = self._ready.get()
            if run is None:
                return
            for index, lease in enumerate(run):
                if not self._outcome.begin(run, index):
                    break
                started = time.monotonic()
                error: BaseException | None = None
                try:
                    self._handler(lease.job)
                except BaseException as raised:  # SystemExit too: a handler must not end its slot
                    error = raised
                if not self._outcome.done(run, index, started, error):
                    break


class AsyncSlots:
    """One event loop thread; ``concurrency`` tasks, each awaiting an async handler on one run."""

    def __init__(self, handler: Callable[[Job], Awaitable[Any]], outcome: _Outcome, concurrency: int) -> None:
        self._handler = handler
        self._outcome = outcome
        self._concurrency = concurrency
        self._loop = asyncio.new_event_loop()
        self._ready: asyncio.Queue[Run] | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="smq-handlers", daemon=True)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False  # set on the loop when stop() cancels the tasks

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def submit(self, run: Run) -> None:
        ready = self._ready
        assert ready is not None
        self._loop.call_soon_threadsafe(ready.put_nowait, run)

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
            run = await self._ready.get()
            for index, lease in enumerate(run):
                if not self._outcome.begin(run, index):
                    break
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
                if not self._outcome.done(run, index, started, error):
                    break
