"""Wakes long polls: one Pub/Sub connection per client, shared by all waiters.

Scripts that make a message visible, or bring the moment one will be
sooner, publish on the queue's wake channel. A waiter subscribes (and waits
for Redis to confirm) before its last receive attempt, notes the channel's
notification count, and sleeps until that count moves or its deadline (or
the next expiry the script reported) comes. A publish that lands between the
attempt and the sleep is therefore never missed, and Redis is not polled in
a loop.

Subscription bookkeeping is per Pub/Sub connection: when the connection is
lost, the listener makes a new one, subscribes every watched channel on it,
and counts confirmations afresh; polls that were waiting poll once more.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from redis.exceptions import RedisError

from .._errors import BackendError
from ._fork import reset_after_fork
from ._outage import Outage

log = logging.getLogger("smq.wakeup")

_CONFIRM_TIMEOUT = 5.0
SHARD_CONFIRM_TIMEOUT = 1.0
"""How long a sharded queue's poll waits for each shard's subscription before it goes on
without it (that shard's node may be down): it then looks again every second instead."""
_RECONNECT_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0)


class Waker:
    """Per-client registry of long polls waiting for their queues' wake channels."""

    def __init__(self, make_pubsub: Callable[[], Any]) -> None:
        self._make_pubsub = make_pubsub
        self._after_fork()
        reset_after_fork(self)

    def _after_fork(self) -> None:
        # Also the initial state: in a forked child the parent's listener
        # thread is gone, and its socket is left alone (the child opens its own).
        self._cond = threading.Condition()
        # Held while a channel's watchers change and its (un)subscribe is sent,
        # and while the connection is replaced, so that what Redis sees follows
        # the order of the decisions.
        self._send_lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._watchers: dict[str, int] = {}
        # Of the current connection only; both start again at a reconnect.
        self._sent: dict[str, int] = {}
        self._confirmed: dict[str, int] = {}
        # Confirmations still due for subscribes whose watchers all left.
        self._late: dict[str, int] = {}
        self._pubsub: Any = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._listeners: list[Callable[[str | None], None]] = []

    def add_listener(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(channel)`` on every notification of a watched channel.

        ``callback(None)`` means every channel: the connection was replaced
        or the waker closed. It runs on the listener thread, under the
        waker's lock: it must be quick and must not call the waker.
        """
        with self._cond:
            self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[str | None], None]) -> None:
        with self._cond:
            if callback in self._listeners:
                self._listeners.remove(callback)

    @contextlib.contextmanager
    def watch(self, channels: str | Sequence[str], deadline: float) -> Iterator[None]:
        """Keep ``channels`` (one, or a sharded queue's one per shard) subscribed inside the block.

        Subscribes them all, then waits for the confirmations until ``deadline``
        (time.monotonic), or five seconds at the most: one channel still not
        confirmed then raises BackendError. Of several, the block goes on after
        ``SHARD_CONFIRM_TIMEOUT`` at the most without those not confirmed (their
        node may be down; ``confirmed`` tells): the poll looks again every second.
        """
        names = [channels] if isinstance(channels, str) else list(channels)
        several = len(names) > 1
        entered: list[str] = []
        try:
            for name in names:
                self._add_watcher(name)
                entered.append(name)
            wait = SHARD_CONFIRM_TIMEOUT if several else _CONFIRM_TIMEOUT
            limit = min(deadline, time.monotonic() + wait)
            with self._cond:
                while not all(
                    self._is_confirmed(name) or (several and self._unreachable(name)) for name in names
                ):
                    left = limit - time.monotonic()
                    if left <= 0:
                        break
                    # Short steps: a channel found unreachable is told by no message.
                    self._cond.wait(min(left, 0.05) if several else left)
                missing = [name for name in names if not self._is_confirmed(name)]
            if missing and not several and time.monotonic() < deadline:
                raise BackendError(f"Redis did not confirm the subscription to {missing[0]}")
            yield
        finally:
            for name in entered:
                self._remove_watcher(name)

    def _add_watcher(self, channel: str) -> None:
        with self._send_lock:
            with self._cond:
                self._start()
                self._watchers[channel] = self._watchers.get(channel, 0) + 1
                self._counts.setdefault(channel, 0)
                first = self._watchers[channel] == 1
                pubsub = self._pubsub
            if first and pubsub is not None:
                self._subscribe(pubsub, channel)

    def _remove_watcher(self, channel: str) -> None:
        with self._send_lock:
            with self._cond:
                self._watchers[channel] -= 1
                last = self._watchers[channel] == 0
                if last:
                    del self._watchers[channel]
                    due = self._sent.pop(channel, 0) - self._confirmed.pop(channel, 0)
                    if due > 0:
                        self._late[channel] = self._late.get(channel, 0) + due
                pubsub = self._pubsub
            if last and pubsub is not None:
                with contextlib.suppress(RedisError, OSError, AttributeError):
                    pubsub.unsubscribe(channel)

    def confirmed(self, channels: Iterable[str]) -> bool:
        """True when Redis confirmed the subscription of every one of ``channels``."""
        with self._cond:
            return all(self._is_confirmed(channel) for channel in channels)

    def _unreachable(self, channel: str) -> bool:
        # A channel whose node is down (ShardedSubscriber): not waited for among several.
        unreachable = getattr(self._pubsub, "unreachable", None)
        return bool(unreachable(channel)) if unreachable is not None else False

    def _is_confirmed(self, channel: str) -> bool:
        sent = self._sent.get(channel, 0)
        return self._pubsub is not None and sent > 0 and self._confirmed.get(channel, 0) >= sent

    def _subscribe(self, pubsub: Any, channel: str) -> None:
        """Send a subscribe (caller holds the send lock); a failure means a lost connection."""
        with self._cond:
            self._sent[channel] = self._sent.get(channel, 0) + 1
        try:
            pubsub.subscribe(channel)
        except (RedisError, OSError) as error:
            # The listener sees the same broken connection, reconnects and
            # subscribes every watched channel again: wait for that.
            log.warning("subscribe to %s failed (%s); reconnecting", channel, error)
            with contextlib.suppress(Exception):
                pubsub.close()

    def count(self, channel: str) -> int:
        with self._cond:
            return self._counts.get(channel, 0)

    def wait(self, channel: str, seen: int, timeout: float) -> bool:
        """Sleep until ``channel`` is notified after count ``seen``, or ``timeout`` s."""
        return self.wait_any({channel: seen}, timeout)

    def wait_any(self, seen: Mapping[str, int], timeout: float) -> bool:
        """Sleep until any channel of ``seen`` is notified after its count there, or ``timeout`` s.

        A sharded queue's long poll watches the wake channel of every shard.
        """
        with self._cond:
            return self._cond.wait_for(
                lambda: any(self._counts.get(channel, 0) != count for channel, count in seen.items()), timeout
            )

    def interrupt(self) -> None:
        """Make every waiting poll look once more (a worker that stops uses it)."""
        with self._cond:
            for channel in self._counts:
                self._counts[channel] += 1
            self._cond.notify_all()

    def close(self) -> None:
        with self._send_lock:
            with self._cond:
                self._closed = True
                pubsub, self._pubsub = self._pubsub, None
                self._wake_everyone()
        if pubsub is not None:
            with contextlib.suppress(Exception):
                pubsub.close()

    def _wake_everyone(self) -> None:
        for channel in self._counts:
            self._counts[channel] += 1  # each waiting poll polls once more
        for callback in self._listeners:
            callback(None)
        self._cond.notify_all()

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._closed = False
            self._pubsub = self._make_pubsub()
            self._sent.clear()
            self._confirmed.clear()
            self._late.clear()
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
            except Exception as error:
                if self._closed:
                    return
                log.warning("wake channel connection lost (%s); reconnecting", error)
                self._reconnect(pubsub)
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
                for callback in self._listeners:
                    callback(channel)
            elif kind == "subscribe":
                if self._late.get(channel, 0) > 0:
                    self._late[channel] -= 1  # answers a subscribe of watchers gone since
                elif channel in self._watchers:
                    self._confirmed[channel] = self._confirmed.get(channel, 0) + 1
            self._cond.notify_all()

    def _reconnect(self, broken: Any) -> None:
        with self._send_lock:
            with self._cond:
                if self._pubsub is broken:
                    self._pubsub = None
                self._sent.clear()
                self._confirmed.clear()
                self._late.clear()
                self._wake_everyone()
        with contextlib.suppress(Exception):
            broken.close()
        outage = Outage(log, "wake channel still unreachable")
        for attempt in range(10**9):
            time.sleep(_RECONNECT_DELAYS[min(attempt, len(_RECONNECT_DELAYS) - 1)])
            with self._send_lock:
                if self._closed:
                    return
                pubsub = self._make_pubsub()
                with self._cond:
                    channels = list(self._watchers)
                    for channel in channels:
                        self._sent[channel] = 1
                try:
                    for channel in channels:
                        pubsub.subscribe(channel)
                    if not channels:
                        pubsub.ping()  # prove the connection before using it
                except (RedisError, OSError) as error:
                    outage.failed(error)
                    with self._cond:
                        self._sent.clear()
                    with contextlib.suppress(Exception):
                        pubsub.close()
                    continue
                with self._cond:
                    self._pubsub = pubsub
                    self._cond.notify_all()
                outage.succeeded()
                return
