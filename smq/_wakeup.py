"""Wakes long polls: one Pub/Sub connection per client, shared by all waiters.

Scripts that make a message visible publish on the queue's wake channel.
A waiter subscribes (and waits for Redis to confirm) before its last
receive attempt, notes the channel's notification count, and sleeps until
that count moves or its deadline (or the next expiry the script reported)
comes. A publish that lands between the attempt and the sleep is therefore
never missed, and Redis is not polled in a loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from redis.exceptions import RedisError

from ._errors import BackendError

log = logging.getLogger("smq.wakeup")

_CONFIRM_TIMEOUT = 5.0
_RECONNECT_DELAY = 0.5


class Waker:
    """Per-client registry of long polls waiting for their queues' wake channels."""

    def __init__(self, make_pubsub: Callable[[], Any]) -> None:
        self._make_pubsub = make_pubsub
        self._reset()
        _register_for_fork(self)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        # Held while a channel's watcher count changes and its subscribe or
        # unsubscribe is sent, so the two always reach Redis in that order.
        self._send_lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._watchers: dict[str, int] = {}
        self._subscribes_sent: dict[str, int] = {}
        self._subscribes_confirmed: dict[str, int] = {}
        self._pubsub: Any = None
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextlib.contextmanager
    def watch(self, channel: str) -> Iterator[None]:
        """Keep ``channel`` subscribed (and confirmed) inside the block."""
        with self._send_lock:
            with self._cond:
                self._start()
                self._watchers[channel] = self._watchers.get(channel, 0) + 1
                self._counts.setdefault(channel, 0)
                first = self._watchers[channel] == 1
                if first:
                    self._subscribes_sent[channel] = self._subscribes_sent.get(channel, 0) + 1
                wanted = self._subscribes_sent[channel]
            try:
                if first:
                    self._pubsub.subscribe(channel)
            except RedisError as error:
                self._leave(channel)
                with self._cond:
                    self._subscribes_sent[channel] -= 1
                raise BackendError(f"cannot subscribe to {channel}: {error}") from error
        try:
            with self._cond:
                confirmed = self._cond.wait_for(
                    lambda: self._subscribes_confirmed.get(channel, 0) >= wanted, _CONFIRM_TIMEOUT
                )
            if not confirmed:
                raise BackendError(f"Redis did not confirm the subscription to {channel}")
            yield
        finally:
            with self._send_lock:
                if self._leave(channel):
                    with contextlib.suppress(RedisError, AttributeError):
                        self._pubsub.unsubscribe(channel)

    def _leave(self, channel: str) -> bool:
        """Count one watcher out; True if it was the last (caller holds the send lock)."""
        with self._cond:
            self._watchers[channel] -= 1
            if self._watchers[channel]:
                return False
            del self._watchers[channel]
            return True

    def count(self, channel: str) -> int:
        with self._cond:
            return self._counts.get(channel, 0)

    def wait(self, channel: str, seen: int, timeout: float) -> bool:
        """Sleep until ``channel`` is notified after count ``seen``, or ``timeout`` s."""
        with self._cond:
            return self._cond.wait_for(lambda: self._counts.get(channel, 0) != seen, timeout)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            pubsub = self._pubsub
        if pubsub is not None:
            with contextlib.suppress(Exception):
                pubsub.close()

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._closed = False
            self._pubsub = self._make_pubsub()
            self._thread = threading.Thread(target=self._listen, name="smq-waker", daemon=True)
            self._thread.start()

    def _listen(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                pubsub = self._pubsub
            try:
                message = pubsub.get_message(timeout=1.0)
            except Exception as error:  # connection lost: wake everyone, then resubscribe
                if self._closed:
                    return
                log.warning("wake channel connection lost (%s); reconnecting", error)
                self._reconnect()
                continue
            if message is not None:
                self._handle(message)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        channel = message["channel"]
        if isinstance(channel, bytes):
            channel = channel.decode()
        with self._cond:
            if kind == "message":
                self._counts[channel] = self._counts.get(channel, 0) + 1
            elif kind == "subscribe":
                self._subscribes_confirmed[channel] = self._subscribes_confirmed.get(channel, 0) + 1
            self._cond.notify_all()

    def _reconnect(self) -> None:
        with self._cond:
            old = self._pubsub
            for channel in self._counts:
                self._counts[channel] += 1  # a poll that missed a publish polls again
            self._cond.notify_all()
        with contextlib.suppress(Exception):
            old.close()
        time.sleep(_RECONNECT_DELAY)
        with self._send_lock:
            with self._cond:
                self._pubsub = self._make_pubsub()
                channels = list(self._watchers)
                for channel in channels:
                    self._subscribes_sent[channel] = self._subscribes_sent.get(channel, 0) + 1
            for channel in channels:
                with contextlib.suppress(Exception):
                    self._pubsub.subscribe(channel)


_wakers: weakref.WeakSet[Waker] = weakref.WeakSet()
_fork_hook_lock = threading.Lock()
_fork_hook_registered = False


def _register_for_fork(waker: Waker) -> None:
    global _fork_hook_registered
    with _fork_hook_lock:
        _wakers.add(waker)
        if not _fork_hook_registered:
            os.register_at_fork(after_in_child=_reset_in_child)
            _fork_hook_registered = True


def _reset_in_child() -> None:
    # A forked child has none of its parent's threads: every waker starts from
    # nothing (the parent's socket is left alone; the child opens its own).
    for waker in list(_wakers):
        waker._reset()
