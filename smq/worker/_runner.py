"""The worker: receive in batches, run the handler, delete on success, stop gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from types import FrameType
from typing import Any

from .._errors import InvalidParameter, QueueDoesNotExist, SmqError
from .._version import __version__
from ..aio import AsyncClient, AsyncQueue
from ..client._client import Client
from ..client._queue import Queue, _Rider
from ..core._batch import MAX_BATCH
from ..core._message import DeleteEntry, Message
from ..operations._consumers import BEAT_SECONDS
from ._config import WorkerConfig
from ._leases import CEILING_SECONDS, Lease, LeaseKeeper
from ._metrics import WorkerMetrics
from ._runs import runs
from ._slots import AsyncSlots, Handler, ThreadSlots, _Outcome, _Receiving, is_async

log = logging.getLogger("smq.worker")

_ERROR_PAUSES = (0.1, 0.5, 1.0, 2.0, 5.0)  # after a failed receive, growing
_FLUSH_TIMEOUT = 10.0  # seconds a stop waits for the last deletes and releases


class Worker:
    """Runs a handler on the messages of one queue, with heartbeat and graceful stop.

    ::

        worker = smq.Worker(client, "jobs", config=smq.WorkerConfig(concurrency=4))

        @worker.handler
        def handle(job: smq.Job) -> None:
            print(job.body)

        worker.run()  # until SIGTERM / SIGINT, or worker.stop() from another thread

    Any number of workers may serve one queue, on any number of hosts: the
    queue hands each message to one of them at a time. A message is deleted
    when its handler returns, released for a retry after the backoff when it
    raises, and kept hidden by a heartbeat for as long as it runs (up to the
    12-hour ceiling). If the process dies, its messages come back when their
    visibility timeouts run out.

    On a FIFO queue the messages of one group run one after another, in
    order, and different groups in parallel; a failure holds back the rest
    of its group until its retry succeeds.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        queue: str | Queue | AsyncQueue,
        handler: Handler | None = None,
        *,
        config: WorkerConfig | None = None,
    ) -> None:
        if isinstance(client, AsyncClient):
            client = client.sync
        if isinstance(queue, AsyncQueue):
            queue = queue.sync
        self.client = client
        self.queue = queue if isinstance(queue, Queue) else client.queue(queue)
        self.config = config or WorkerConfig()
        self._handler = handler
        self._stop = threading.Event()
        self._now = False  # skip the grace period
        # Signal handlers only count (no locks there); the main loop acts on it.
        self._signals = 0
        self._fatal: BaseException | None = None
        self._running = False
        self.visibility_timeout = 0
        self.metrics_url: str | None = None
        """``http://host:port/metrics`` while the metrics server runs."""
        self._keeper: LeaseKeeper | None = None
        # The last one receives; others run a handler. An async handler's receive loop runs on
        # the event loop (_Receiving).
        self._receivers: list[threading.Thread | _Receiving] = []
        self._aio: AsyncClient | None = None  # an async handler's receive loop's client
        self.metrics = WorkerMetrics(self.queue.name, self._held, self._busy)

    _ceiling: float = CEILING_SECONDS  # tests shorten it; Redis enforces the real one
    _beat_every: float = BEAT_SECONDS  # seconds between registration heartbeats; tests shorten it

    def __repr__(self) -> str:
        return f"<smq.Worker of {self.queue.name!r}>"

    def handler(self, function: Handler) -> Handler:
        """Register the handler (usable as a decorator); returns it unchanged."""
        if not callable(function):
            raise InvalidParameter(f"a handler must be callable, not {type(function).__name__}")
        self._handler = function
        return function

    def stop(self, *, now: bool = False) -> None:
        """Ask ``run`` to stop gracefully (``now``: without the grace period).

        Safe from any thread.
        """
        self._now = self._now or now
        self._stop.set()

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Work until ``stop``, SIGTERM or SIGINT, then stop gracefully.

        A graceful stop receives no more, releases (visibility 0) the
        messages no handler has started, lets running handlers finish for
        ``grace_period`` seconds, then releases the rest and tells their
        handlers (``job.lease_lost``). A second signal skips the grace period.

        Raises QueueDoesNotExist (at start, or when the queue is deleted
        while the worker runs), or InvalidParameter when the visibility
        timeout is 0 (nothing could keep a message hidden while it runs).
        """
        if self._handler is None:
            raise InvalidParameter("no handler: pass one to Worker() or decorate it with @worker.handler")
        if self._running:
            raise RuntimeError("this worker is running already")
        self._running = True
        restore = self._install_signals() if install_signal_handlers else None
        try:
            self._run(self._handler)
        finally:
            if restore is not None:
                restore()
            self._running = False
            self._stop.clear()
            self._now = False
            self._signals = 0
        fatal, self._fatal = self._fatal, None
        if fatal is not None:
            raise fatal

    # -- internals ---------------------------------------------------------------

    def _held(self) -> int:
        return self._keeper.held() if self._keeper else 0

    def _busy(self) -> int:
        return self._keeper.running() if self._keeper else 0

    def _install_signals(self) -> Callable[[], None] | None:
        if threading.current_thread() is not threading.main_thread():
            return None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self._signals += 1

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def _run(self, handler: Handler) -> None:
        config = self.config
        timeout = config.visibility_timeout
        if timeout is None:
            timeout = self.queue.attributes().config.visibility_timeout
        else:
            self.queue.attributes()  # the queue must exist
        if timeout < 1:
            raise InvalidParameter(
                f"queue {self.queue.name!r} has a visibility timeout of 0 s, which cannot hide a "
                "message while its handler runs: give the worker a visibility timeout"
            )
        self.visibility_timeout = timeout
        keeper = self._keeper = LeaseKeeper(self.queue, self.metrics, self._ceiling)
        # Registration: the keeper thread notes this worker among the queue's consumers.
        consumer_id = _consumer_id()
        keeper.set_beat(
            partial(self._beat, keeper, consumer_id, _registration(config, handler)), self._beat_every
        )
        outcome = _Outcome(keeper, self.metrics, config)
        slots: ThreadSlots | AsyncSlots
        if is_async(handler):
            slots = AsyncSlots(handler, outcome, config.concurrency)
        else:
            slots = ThreadSlots(handler, outcome, config.concurrency)
        server = self._serve_metrics()
        keeper.start()
        if isinstance(slots, ThreadSlots):
            slots.on_retire = partial(self._start_receiver, keeper, slots, timeout)
        slots.start()
        self._receivers = []
        if isinstance(slots, AsyncSlots):
            self._aio = AsyncClient(client=self.client, threads=2)
            keeper.on_change(slots.notify)
            self._receivers = [slots.receive(partial(self._receive_on_loop, keeper, slots, timeout))]
        else:
            self._start_receiver(keeper, slots, timeout)
        log.info(
            "worker on queue %r: %s handler, concurrency %d, up to %d messages held, visibility timeout %d s",
            self.queue.name,
            "async" if is_async(handler) else "sync",
            config.concurrency,
            config.max_held,
            timeout,
        )
        try:
            while not self._stop.wait(0.25) and not self._signals:
                if not self._receivers[-1].is_alive() or not keeper.alive():
                    break
        finally:
            if keeper.failure is not None and self._fatal is None:
                self._fatal = keeper.failure
            self._shut_down(keeper, slots, server)
            self._forget(consumer_id)

    def _beat(self, keeper: LeaseKeeper, consumer_id: str, info: dict[str, Any]) -> None:
        """Note this worker among the queue's consumers, with the messages it holds now."""
        self.queue._beat(consumer_id, "worker", {**info, "held": keeper.held()})

    def _forget(self, consumer_id: str) -> None:
        """Drop this worker from the queue's consumers (a graceful stop); a failure is only logged."""
        try:
            self.queue._beat(consumer_id, "worker", {}, forget=True)
        except SmqError as error:
            log.debug("the worker on queue %r was not unregistered: %s", self.queue.name, error)

    def _start_receiver(self, keeper: LeaseKeeper, slots: ThreadSlots | AsyncSlots, timeout: int) -> None:
        """Start the receiving thread: at start, and when the receiving one runs a slow handler."""
        if self._stop.is_set():
            return
        receiver = threading.Thread(
            target=self._guarded,
            args=(self._receive_loop, keeper, slots, timeout),
            name="smq-receiver",
            daemon=True,
        )
        receiver.start()  # before it is listed: run() takes the newest one's end for a failure
        # Those that ended are dropped; the newest is the one that receives.
        self._receivers = [*(r for r in self._receivers if r.is_alive()), receiver]

    def _hurry(self) -> bool:
        """True when the stop must skip (the rest of) the grace period: a second signal."""
        return self._now or self._signals >= 2

    def _serve_metrics(self) -> Any:
        port = self.config.metrics_port
        if port is None:
            return None
        server, bound = self.metrics.serve(self.config.metrics_host, port)
        host = self.config.metrics_host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        self.metrics_url = f"http://{shown}:{bound}/metrics"
        log.info("metrics on %s", self.metrics_url)
        return server

    def _guarded(self, loop: Callable[..., None], *args: Any) -> None:
        """Run a worker thread; an error it did not expect stops the worker and is raised by run()."""
        try:
            loop(*args)
        except BaseException as error:
            log.exception("worker thread %s failed; stopping", threading.current_thread().name)
            self._fatal = self._fatal or error
            self._stop.set()

    def _receive_loop(self, keeper: LeaseKeeper, slots: ThreadSlots | AsyncSlots, timeout: int) -> None:
        config = self.config
        stopping = self._stop.is_set
        errors = 0
        while not stopping():
            # The deletes of finished messages ride on this receive (one round trip for both),
            # except on a sharded queue (its receive may go to another shard): the keeper sends those.
            try:
                ride = not self.queue._shards()
            except SmqError:
                ride = False  # the receive below meets the same trouble, and pauses
            room, done = keeper.wait_for_room(config.max_held, stopping, take_deletes=ride)
            if room <= 0:
                return
            rider = self._rider(done, keeper)
            received = time.monotonic()
            try:
                messages = self._receive_with(rider, done, keeper, min(room, MAX_BATCH), timeout, stopping)
            except SmqError as error:
                pause = self._receive_failed(error, errors)
                if pause is None:
                    return
                errors += 1
                self._stop.wait(pause)
                continue
            errors = 0
            # Held from here on: a stop now releases them with the others.
            # Sync handlers that are fast run here, on this thread (see ThreadSlots).
            if not slots.run_batch(runs(keeper.add(messages, timeout, received), self.queue.fifo), stopping):
                return  # a handler here ran long: another thread receives meanwhile
            if not messages and config.wait_time_seconds == 0:
                self._stop.wait(0.5)

    def _rider(self, done: list[Lease], keeper: LeaseKeeper) -> _Rider | None:
        """The deletes of ``done`` (handed over by the keeper) to ride on the next receive."""
        if not done:
            return None
        entries = [DeleteEntry(str(i), lease.receipt) for i, lease in enumerate(done)]
        return self.queue._delete_rider(entries, partial(keeper.deleted, done))

    def _receive_failed(self, error: SmqError, errors: int) -> float | None:
        """A receive raised ``error`` after ``errors`` failures in a row: seconds to pause, or None
        when the worker must stop (the queue was deleted)."""
        if isinstance(error, QueueDoesNotExist):
            log.error("queue %r was deleted: the worker stops", self.queue.name)
            self._fatal = error
            self._stop.set()
            return None
        pause = _ERROR_PAUSES[min(errors, len(_ERROR_PAUSES) - 1)]
        self.metrics.redis_errors.inc()
        log.warning("receive from queue %r failed, again in %.1f s: %s", self.queue.name, pause, error)
        return pause

    async def _receive_on_loop(self, keeper: LeaseKeeper, slots: AsyncSlots, timeout: int) -> None:
        """The receive loop of an async handler, on the event loop; as ``_receive_loop``, whose
        steps it takes, with the async client's calls. Deletes ride on the receives."""
        aio = self._aio
        assert aio is not None and slots.changed is not None
        queue = AsyncQueue(aio, self.queue)
        config = self.config
        stopping = self._stop.is_set
        errors = 0
        try:
            while not stopping():
                try:
                    ride = not await aio._drive(self.queue._shards_steps())
                except SmqError:
                    ride = False
                room, done = await keeper.wait_for_room_async(
                    config.max_held, stopping, slots.changed, take_deletes=ride
                )
                if room <= 0:
                    return
                rider = self._rider(done, keeper)
                received = time.monotonic()
                try:
                    with _handed_back_unless_sent(rider, done, keeper):
                        messages = await queue._receive(
                            min(room, MAX_BATCH), timeout * 1000, config.wait_time_seconds, rider=rider
                        )
                except SmqError as error:
                    pause = self._receive_failed(error, errors)
                    if pause is None:
                        return
                    errors += 1
                    await self._pause(pause)
                    continue
                errors = 0
                slots.run_batch(runs(keeper.add(messages, timeout, received), self.queue.fifo), stopping)
                if not messages and config.wait_time_seconds == 0:
                    await self._pause(0.5)
        except BaseException as error:
            if not isinstance(error, asyncio.CancelledError):
                log.exception("the worker's receive loop failed; stopping")
                self._fatal = self._fatal or error
            self._stop.set()
        finally:
            await aio.aclose()

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds`` on the loop, or until the worker stops."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.05))

    def _receive_with(
        self,
        rider: _Rider | None,
        done: list[Lease],
        keeper: LeaseKeeper,
        max_messages: int,
        timeout: int,
        stopping: Callable[[], bool],
    ) -> list[Message]:
        """Receive, the deletes of ``done`` riding along; on any failure before they ran, hand them back."""
        with _handed_back_unless_sent(rider, done, keeper):
            return self.queue._receive(
                max_messages, timeout * 1000, self.config.wait_time_seconds, stop=stopping, rider=rider
            )

    def _shut_down(self, keeper: LeaseKeeper, slots: ThreadSlots | AsyncSlots, server: Any) -> None:
        self._stop.set()
        self.client._waker.interrupt()  # a long poll in progress returns at once
        if isinstance(slots, AsyncSlots) and self._aio is not None:
            slots.notify()  # a receive loop waiting for room sees the stop at once
            with contextlib.suppress(RuntimeError):  # the loop is closed
                slots.loop.call_soon_threadsafe(self._aio._interrupt)
        # Wait for the receiving threads to end, but not for a handler one runs: the grace period is for that.
        deadline = time.monotonic() + _FLUSH_TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            busy = [r for r in self._receivers if r.is_alive() and not slots.in_handler(r)]
            if not busy:
                break
            busy[0].join(min(0.05, left))
        released = keeper.release_waiting()
        running = keeper.running()
        log.info(
            "worker on queue %r stopping: released %d unstarted messages; %d handlers running",
            self.queue.name,
            released,
            running,
        )
        if running and not self._hurry():
            grace = self.config.grace_period
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and not self._hurry():
                if keeper.wait_idle(min(0.25, deadline - time.monotonic())):
                    break
        late = keeper.release_running()
        if late:
            log.warning("released %d messages whose handlers did not finish in time", late)
        slots.stop()
        left = keeper.close(_FLUSH_TIMEOUT)
        if left:
            log.warning("%d messages not released: they come back when their timeouts run out", left)
        if server is not None:
            server.shutdown()
            server.server_close()
            self.metrics_url = None
        log.info("worker on queue %r stopped", self.queue.name)


def _consumer_id() -> str:
    """A worker run's id among a queue's consumers: ``<host>:<pid>:<random>``."""
    return f"{socket.gethostname()[:160]}:{os.getpid()}:{secrets.token_hex(3)}"


def _registration(config: WorkerConfig, handler: Handler) -> dict[str, Any]:
    """What a worker says of itself in its heartbeats (``held`` is added at each)."""
    return {
        "host": socket.gethostname()[:160],
        "pid": os.getpid(),
        "concurrency": config.concurrency,
        "mode": "async" if is_async(handler) else "threads",
        "started": round(time.time(), 3),
        "version": __version__,
    }


@contextlib.contextmanager
def _handed_back_unless_sent(rider: _Rider | None, done: list[Lease], keeper: LeaseKeeper) -> Iterator[None]:
    """Around a receive that carries the deletes of ``done``: on any failure before they ran,
    hand them back to the keeper (perhaps not run: it deletes them again, which is harmless)."""
    try:
        yield
    except BaseException:
        if rider is not None and rider.reply is None:
            keeper.hand_back(done)
        raise
