"""Sharded Pub/Sub on a Redis Cluster: wake-up channels subscribed on their own node.

With ``SPUBLISH`` a notification goes only to the node that serves its
channel's hash slot (the queue's node), where ``PUBLISH`` makes a Redis
Cluster send it to every node. ``ShardedSubscriber`` gives the long-poll
listener (``smq.connection._wakeup.Waker``) the interface it uses of a redis-py
``PubSub`` (``subscribe``, ``unsubscribe``, ``get_message``, ``close``) over
one ``SSUBSCRIBE`` connection per node, read together. Messages come as a
plain subscriber's (``subscribe``, ``message``), so the listener does not
tell the two apart. Every connection is used by the listener's thread only:
``subscribe`` and ``unsubscribe`` (called by the polls' threads) hand their
request over, and ``get_message`` carries it out (two threads on one redis-py
connection can each read the other's reply).

A node that cannot be reached costs only its own channels: they wait, and
are subscribed again every half second (on whichever node then serves their
slot, read afresh), while the other nodes' channels go on. Each channel of a
lost connection gets one wake-up (a notification may have been missed), and
its next confirmation comes when it is subscribed again. A sharded queue's
long poll watches one channel per shard, so one primary down must not keep
wake-ups of the others (or of other queues) away.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import select
import threading
import time
from typing import Any

from redis.exceptions import ConnectionError, RedisClusterException, RedisError

log = logging.getLogger("smq.wakeup")

_RETRY_SECONDS = 0.5
_KINDS = {"ssubscribe": "subscribe", "sunsubscribe": "unsubscribe", "smessage": "message"}


class ShardedSubscriber:
    """Shard channels of a ``redis.cluster.RedisCluster``, each subscribed on its node."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = cluster
        self._lock = threading.Lock()
        self._requests: collections.deque[tuple[bool, str]] = collections.deque()  # (subscribe?, channel)
        # The listener thread's alone:
        self._by_node: dict[str, Any] = {}  # node name -> its redis-py PubSub
        self._node_of: dict[str, str] = {}  # channel -> node name
        self._pending: set[str] = set()  # channels whose node could not be reached
        self._retry_at = 0.0
        self._lost: collections.deque[str] = collections.deque()  # channels owed a wake-up
        # Written when a request comes, so that a reader waiting on the nodes looks again.
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        # A new subscriber (after a lost connection: a failover?) starts from the current slot
        # map; if it cannot be read now, subscribing fails and is tried again.
        with contextlib.suppress(Exception):
            cluster.nodes_manager.initialize()

    def subscribe(self, channel: str) -> None:
        self._request(True, channel)

    def unsubscribe(self, channel: str) -> None:
        self._request(False, channel)

    def _request(self, subscribe: bool, channel: str) -> None:
        with self._lock:
            self._requests.append((subscribe, channel))
        with contextlib.suppress(OSError):  # closed meanwhile
            os.write(self._wake_write, b"r")

    def _carry_out(self) -> None:
        while True:
            with self._lock:
                if not self._requests:
                    return
                subscribe, channel = self._requests.popleft()
            if subscribe:
                self._subscribe_on_node(channel)
            else:
                self._unsubscribe_on_node(channel)

    def _subscribe_on_node(self, channel: str) -> None:
        name = ""
        try:
            node = self._cluster.get_node_from_key(channel)
            name = node.name
            pubsub = self._by_node.get(name)
            if pubsub is None:
                pubsub = self._cluster.get_redis_connection(node).pubsub(ignore_subscribe_messages=False)
                self._by_node[name] = pubsub
            self._node_of[channel] = name
            self._pending.discard(channel)
            pubsub.ssubscribe(channel)
        except (RedisError, RedisClusterException, OSError) as error:
            log.warning("subscribe to %s failed (%s); trying again shortly", channel, error)
            self._pending.add(channel)
            self._node_of.pop(channel, None)
            if name:
                self._lose(name)

    def _unsubscribe_on_node(self, channel: str) -> None:
        self._pending.discard(channel)
        name = self._node_of.pop(channel, None)
        pubsub = self._by_node.get(name) if name is not None else None
        if pubsub is None or name is None:
            return
        if name not in self._node_of.values():
            # No channel left there: close it rather than watch a silent socket.
            del self._by_node[name]
            with contextlib.suppress(Exception):
                pubsub.close()
            return
        try:
            pubsub.sunsubscribe(channel)
        except (RedisError, OSError):
            self._lose(name)

    def _lose(self, name: str) -> None:
        """Drop node ``name``'s connection: its channels wait to be subscribed again."""
        pubsub = self._by_node.pop(name, None)
        channels = [channel for channel, node in self._node_of.items() if node == name]
        for channel in channels:
            del self._node_of[channel]
            self._pending.add(channel)
        self._lost.extend(channels)
        if pubsub is not None:
            with contextlib.suppress(Exception):
                pubsub.close()

    def _retry(self) -> None:
        if not self._pending or time.monotonic() < self._retry_at:
            return
        self._retry_at = time.monotonic() + _RETRY_SECONDS
        with contextlib.suppress(Exception):
            self._cluster.nodes_manager.initialize()  # a failover may have moved the slots
        for channel in list(self._pending):
            self._subscribe_on_node(channel)

    def unreachable(self, channel: str) -> bool:
        """True while ``channel`` waits to be subscribed again: its node could not be reached."""
        return channel in self._pending

    def ping(self) -> None:
        """Prove the cluster answers (the listener's check when it holds no channel)."""
        try:
            self._cluster.ping()
        except RedisClusterException as error:
            raise ConnectionError(str(error)) from error

    def get_message(self, timeout: float = 0.0) -> dict[str, Any] | None:
        """The next message of any node, waiting up to ``timeout`` seconds; None if none came.

        Called by the listener's thread only: it also carries out the requests.
        """
        deadline = time.monotonic() + timeout
        while True:
            self._carry_out()
            if self._lost:
                channel = self._lost.popleft()
                return {"type": "message", "channel": channel, "pattern": None, "data": b""}
            for name, pubsub in list(self._by_node.items()):
                try:
                    message = pubsub.get_message(ignore_subscribe_messages=False, timeout=0)
                except (RedisError, OSError) as error:
                    log.warning("wake channel connection to %s lost (%s); subscribing again", name, error)
                    self._lose(name)
                    message = None
                if message is not None:
                    kind = message["type"]
                    kind = kind.decode() if isinstance(kind, bytes) else kind
                    return {**message, "type": _KINDS.get(kind, kind)}
            self._retry()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self._pending:
                left = min(left, _RETRY_SECONDS)
            # Only connections with channels: redis-py reads nothing from one without any, so
            # a peer's hang-up there would leave its socket readable, and this loop spinning.
            subscribers = [p for p in self._by_node.values() if p.subscribed and p.connection is not None]
            sockets = [p.connection._sock for p in subscribers]
            readable = [sock for sock in sockets if sock is not None and sock.fileno() >= 0]
            ready, _, _ = select.select([self._wake_read, *readable], [], [], left)
            if self._wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_read, 4096)

    def close(self) -> None:
        subscribers, self._by_node = list(self._by_node.values()), {}
        for pubsub in subscribers:
            with contextlib.suppress(Exception):
                pubsub.close()
        for end in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(end)
        self._wake_read = self._wake_write = -1
