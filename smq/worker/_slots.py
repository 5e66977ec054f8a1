"""Where handlers run: threads for a sync handler, an event loop for an async one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
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

    def done(
        self, run: Run, index: int, started: float, error: BaseException | None, *, inline: bool = False
    ) -> bool:
        """Settle ``run[index]`` after its handler; True if the next message of the run may start.

        ``inline``: the handler ran on the receiving thread, which takes the delete with its next
        receive; nobody need be woken for it.
        """
        lease = run[index]
        self._settle(lease, started, error, inline)
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

    def _settle(self, lease: Lease, started: float, error: BaseException | None, inline: bool) -> None:
        self.metrics.processing.observe(time.monotonic() - started)
        message = lease.job.message
        if error is None:
            self.keeper.succeeded(lease, wake=not inline)
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


# A sync handler that returns within this many seconds runs on the receiving thread itself,
# the rest of its batch after it: no hand-off to another thread (each a wake-up by the kernel
# and a turn of the GIL, slow on a loaded machine) for handlers that take less than one.
_INLINE_LIMIT = 0.0002
_WATCH_EVERY = 0.01  # seconds between the watchdog's looks at the handler running inline
_WINDOW = 100  # handler calls on the threads judged together for a return to running inline
_SLOW_IN_WINDOW = 5  # at most this many of them slower than _INLINE_LIMIT


class _Inline:
    """One batch the receiving thread runs itself: what the watchdog looks at."""

    __slots__ = ("pending", "calls", "busy", "finished", "retired")

    def __init__(self, batch: list[Run]) -> None:
        self.pending = deque(batch)  # runs not started; the watchdog may take them
        self.calls = 0  # handler calls begun
        self.busy = False  # a handler runs now
        self.finished = False
        self.retired = False  # another thread receives now


class ThreadSlots:
    """``concurrency`` daemon threads, each running a sync handler on one run at a time.

    While handlers are fast (each returns within ``_INLINE_LIMIT``), the
    receiving thread runs a batch's runs itself (``run_batch``), one after
    another, and the threads wait: no hand-offs between threads. A handler
    that takes longer sends the rest of its batch, and the batches after it,
    to the threads. If one is still running ``_WATCH_EVERY`` s after the
    watchdog thread first saw it, the watchdog hands the rest of the batch to
    the threads at once and starts another receiving thread (``on_retire``);
    the one in the handler ends when it returns. So up to ``concurrency``
    handlers run in parallel and receiving goes on, as with threads only.
    When the threads have seen a window of fast handlers, the receiver runs
    them again. At most ``concurrency`` handlers run at once, wherever (one
    permit each), and the lease keeper extends every held message.

    Daemon threads, so that a handler still running after a graceful stop's
    grace period does not keep the process alive (its message is released).
    """

    def __init__(self, handler: Handler, outcome: _Outcome, concurrency: int) -> None:
        self._handler = handler
        self._outcome = outcome
        self._ready: queue.SimpleQueue[Run | None] = queue.SimpleQueue()
        self._permits = threading.Semaphore(concurrency)
        self._threads = [
            threading.Thread(target=self._work, name=f"smq-handler-{n}", daemon=True)
            for n in range(concurrency)
        ]
        self.inline = True  # run batches on the receiving thread (while handlers are fast)
        self.on_retire: Callable[[], None] | None = None  # starts another receiving thread
        self._lock = threading.Lock()  # a batch ends, or the watchdog retires its thread: not both
        self._current: _Inline | None = None  # the latest batch run inline
        self._inline_on: dict[int, _Inline] = {}  # thread id: the batch it runs inline
        self._batches = 0  # batches run inline so far
        self._window = [0, 0]  # handler calls on the threads in this window, and how many were slow
        self._closed = False
        self._active = threading.Event()  # set while batches run inline: the watchdog looks
        self._watchdog: threading.Thread | None = None
        if concurrency > 1:  # with one slot there is nobody to hand the rest of a batch to
            self._watchdog = threading.Thread(target=self._watch, name="smq-inline-watch", daemon=True)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        if self._watchdog is not None:
            self._watchdog.start()

    def in_handler(self, thread: Any) -> bool:
        """True while ``thread`` (a receiving thread) runs a handler."""
        running = self._inline_on.get(thread.ident or 0)
        return running is not None and running.busy

    def run_batch(self, batch: list[Run], stopping: Callable[[], bool]) -> bool:
        """Run one receive's runs: on this thread while handlers are fast, else on the threads.

        Returns False if another thread receives from now on (a handler here got slow).
        """
        if not batch:
            return True
        if not self.inline or not self._permits.acquire(blocking=False):
            for run in batch:
                self._ready.put(run)
            return True
        mine = self._current = _Inline(batch)
        me = threading.get_ident()
        self._inline_on[me] = mine
        pending = mine.pending
        try:
            self._batches += 1
            if not self._active.is_set():
                self._active.set()
            while self.inline and not mine.retired and not stopping():
                try:
                    run = pending.popleft()
                except IndexError:
                    break
                rest = self._run_inline(mine, run, stopping)
                if rest:
                    self._ready.put(rest)
        finally:
            self._permits.release()
            with self._lock:
                mine.finished = True
                del self._inline_on[me]
        while True:  # what is left: to the threads, or, when stopping, to the stop's release
            try:
                run = pending.popleft()
            except IndexError:
                break
            if not stopping():
                self._ready.put(run)
        return not mine.retired

    def _run_inline(self, mine: _Inline, run: Run, stopping: Callable[[], bool]) -> Run:
        """Run ``run`` on this thread; returns the part left to the threads (a handler got slow)."""
        outcome = self._outcome
        handler = self._handler
        for index, lease in enumerate(run):
            if index and stopping():
                return ()  # the rest are released by the stop
            if not outcome.begin(run, index):
                return ()
            mine.calls += 1
            mine.busy = True
            started = time.monotonic()
            error: BaseException | None = None
            try:
                handler(lease.job)
            except BaseException as raised:  # SystemExit too: a handler must not end the receiver
                error = raised
            mine.busy = False
            if time.monotonic() - started > _INLINE_LIMIT:
                self.inline = False
            if not outcome.done(run, index, started, error, inline=True):
                return ()
            if not self.inline or mine.retired:
                return run[index + 1 :]
        return ()

    def _watch(self) -> None:
        """Hand the rest of an inline batch to the threads when one of its handlers runs long."""
        while not self._closed:
            self._active.wait()
            batches, watched = self._batches, self._current
            calls, busy = (watched.calls, watched.busy) if watched else (0, False)
            time.sleep(_WATCH_EVERY)
            if self._closed:
                return
            if watched is not None and busy and watched.busy and watched.calls == calls:
                self._retire(watched)  # one handler ran through the whole look
            elif self._batches == batches and not (watched and watched.busy):
                self._active.clear()  # nothing ran inline meanwhile: sleep until a batch does
                if self._batches != batches:
                    self._active.set()

    def _retire(self, slow: _Inline) -> None:
        """The handler of ``slow`` runs long: its other runs go to the threads, another thread receives."""
        self.inline = False
        with self._lock:
            if slow.finished or slow.retired:
                return
            if self._current is slow:
                self._current = None
            try:
                if self.on_retire is not None:
                    self.on_retire()
                    slow.retired = True
            except Exception:  # no thread to be had: this one goes on receiving after its handler
                log.exception("could not start another receiving thread")
        while True:
            try:
                run = slow.pending.popleft()
            except IndexError:
                break
            self._ready.put(run)

    def stop(self) -> None:
        self._closed = True
        self._active.set()
        for _ in self._threads:
            self._ready.put(None)

    def _work(self) -> None:
        window = self._window
        while True:
            run = self._ready.get()
            if run is None:
                return
            with self._permits:
                for index, lease in enumerate(run):
                    if not self._outcome.begin(run, index):
                        break
                    started = time.monotonic()
                    error: BaseException | None = None
                    try:
                        self._handler(lease.job)
                    except BaseException as raised:  # SystemExit too: a handler must not end its slot
                        error = raised
                    if not self.inline:
                        # Fast handlers again? Then the receiver runs them: fewer hand-offs.
                        window[0] += 1
                        if time.monotonic() - started > _INLINE_LIMIT:
                            window[1] += 1
                        if window[0] >= _WINDOW:
                            self.inline = window[1] <= _SLOW_IN_WINDOW
                            window[0] = window[1] = 0
                    if not self._outcome.done(run, index, started, error):
                        break


class AsyncSlots:
    """One event loop thread: the receive loop, and up to ``concurrency`` runs at once, each
    awaiting an async handler on one message at a time. Receiving, handlers and their deletes
    (riding on the next receive) all happen on the loop: no hand-off between threads on the way.

    A run starts at once, in the turn of the loop that received it, and goes on as a task only
    once its handler first waits (as Python 3.12's eager tasks do): a handler that never waits
    costs no task and no turn of the loop. Each run has a context of its own (``contextvars``),
    as a task would; the one difference is ``asyncio.current_task()`` before the handler first
    waits, which names the receive loop's task.
    """

    def __init__(self, handler: Callable[[Job], Awaitable[Any]], outcome: _Outcome, concurrency: int) -> None:
        self._handler = handler
        self._outcome = outcome
        self._concurrency = concurrency
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="smq-loop", daemon=True)
        self._waiting: deque[Run] = deque()  # runs received, not started (all slots busy)
        self._running = 0  # runs started, not ended
        self._tasks: set[asyncio.Task[None]] = set()  # the runs whose handler waited
        self._stopping = False  # set on the loop when stop() cancels the tasks
        self._stop_asked: asyncio.Future[None] | None = None
        # True while runs start within the receive loop's turn: a handler that returns before it
        # waits has its delete taken by that loop's next receive, which comes at once.
        self._inline = False
        self.changed: asyncio.Event | None = None  # set when the lease keeper's leases change

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def in_handler(self, thread: Any) -> bool:
        return False  # handlers run on the loop, never on a receiving thread

    def on_loop(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def notify(self) -> None:
        """The lease keeper's leases changed (room for more): wake the receive loop."""
        changed = self.changed
        if changed is None or changed.is_set():
            return
        if self.on_loop():
            changed.set()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self.loop.call_soon_threadsafe(changed.set)

    def receive(self, loop: Callable[[], Awaitable[None]]) -> _Receiving:
        """Run the receive loop ``loop()`` on the event loop; its handle, for the runner."""
        return _Receiving(asyncio.run_coroutine_threadsafe(loop(), self.loop))  # type: ignore[arg-type]

    def run_batch(self, batch: list[Run], stopping: Callable[[], bool]) -> bool:
        """Start one receive's runs (those beyond ``concurrency`` wait for a slot); called by the
        receive loop, on the event loop."""
        self._waiting.extend(batch)
        self._inline = True
        try:
            self._start_waiting()
        finally:
            self._inline = False
        return True

    def _start_waiting(self) -> None:
        """Start waiting runs while slots are free; a run whose handlers never wait ends here."""
        waiting = self._waiting
        while waiting and self._running < self._concurrency and not self._stopping:
            run = waiting.popleft()
            self._running += 1
            context = contextvars.copy_context()
            steps = self._work(run)
            try:
                yielded = context.run(steps.send, None)
            except StopIteration:
                self._running -= 1
                continue
            task = self.loop.create_task(_resumed(steps, yielded), context=context)
            self._tasks.add(task)
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._running -= 1
        self._start_waiting()

    def stop(self) -> None:
        """Cancel the running handlers (their messages are released already) and end the loop."""

        def cancel() -> None:
            self._stopping = True
            if self._stop_asked is not None and not self._stop_asked.done():
                self._stop_asked.set_result(None)

        if self.loop.is_running():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(cancel)
        self._thread.join(5.0)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self.loop.close()

    async def _main(self) -> None:
        self.changed = asyncio.Event()
        self._stop_asked = self.loop.create_future()
        self._started.set()
        await self._stop_asked
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _work(self, run: Run) -> None:
        for index, lease in enumerate(run):
            if not self._outcome.begin(run, index):
                return
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
            if not self._outcome.done(run, index, started, error, inline=self._inline):
                return


async def _resumed(steps: Coroutine[Any, Any, None], yielded: Any) -> None:
    """Go on with coroutine ``steps``, which waits for ``yielded`` (a future, or None for a bare
    turn of the loop), as a task: each wait of it is this one's; a cancel is passed into it."""
    while True:
        try:
            if yielded is None:
                await asyncio.sleep(0)
            else:
                # As a task takes a future its coroutine yielded: marked taken, then waited for.
                yielded._asyncio_future_blocking = False
                await yielded
        except BaseException as error:  # the future failed, or this task was cancelled
            try:
                yielded = steps.throw(error)
            except StopIteration:
                return
            continue
        try:
            yielded = steps.send(None)
        except StopIteration:
            return


class _Receiving:
    """The receive loop running on the event loop, seen as the runner sees a receiving thread."""

    def __init__(self, future: concurrent.futures.Future[None]) -> None:
        self._future = future

    def is_alive(self) -> bool:
        return not self._future.done()

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(Exception):  # timed out, cancelled or failed: the runner looks on
            self._future.result(timeout)
