"""Sharded Pub/Sub on a Redis Cluster: wake-up channels subscribed on their own node.

With ``SPUBLISH`` a notification goes only to the node that serves its
channel's hash slot (the queue's node), where ``PUBLISH`` makes a Redis
Cluster send it to every node. ``ShardedSubscriber`` gives the long-poll
listener (``smq._wakeup.Waker``) the interface it uses of a redis-py
``PubSub`` (``subscribe``, ``unsubscribe``, ``get_message``, ``close``) over
one ``SSUBSCRIBE`` connection per node, read together. Messages come as a
plain subscriber's (``subscribe``, ``message``), so the listener does not
tell the two apart. A broken connection, or a slot that moved, raises from
``get_message`` or ``subscribe``; the listener then makes a new subscriber,
which reads the slot map afresh.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from typing import Any

from redis.exceptions import ConnectionError, RedisClusterException

_KINDS = {"ssubscribe": "subscribe", "sunsubscribe": "unsubscribe", "smessage": "message"}


class ShardedSubscriber:
    """Shard channels of a ``redis.cluster.RedisCluster``, each subscribed on its node."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = cluster
        self._lock = threading.Lock()
        self._by_node: dict[str, Any] = {}  # node name -> its redis-py PubSub
        self._node_of: dict[str, str] = {}  # channel -> node name
        # Written when a node joins, so that a reader waiting on the others looks again.
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        # A new subscriber (after a lost connection: a failover?) starts from the current slot
        # map; if it cannot be read now, subscribe fails and the listener tries again.
        with contextlib.suppress(Exception):
            cluster.nodes_manager.initialize()

    def subscribe(self, channel: str) -> None:
        try:
            node = self._cluster.get_node_from_key(channel)
        except RedisClusterException as error:  # no node serves the slot yet
            raise ConnectionError(f"no node serves {channel}: {error}") from error
        with self._lock:
            pubsub = self._by_node.get(node.name)
            added = pubsub is None
            if pubsub is None:
                pubsub = self._cluster.get_redis_connection(node).pubsub(ignore_subscribe_messages=False)
                self._by_node[node.name] = pubsub
            self._node_of[channel] = node.name
        pubsub.ssubscribe(channel)
        if added:
            os.write(self._wake_write, b"n")

    def unsubscribe(self, channel: str) -> None:
        with self._lock:
            name = self._node_of.pop(channel, None)
            pubsub = self._by_node.get(name) if name is not None else None
        if pubsub is not None:
            pubsub.sunsubscribe(channel)

    def ping(self) -> None:
        """Prove the cluster answers (the listener's check when it holds no channel)."""
        try:
            self._cluster.ping()
        except RedisClusterException as error:
            raise ConnectionError(str(error)) from error

    def get_message(self, timeout: float = 0.0) -> dict[str, Any] | None:
        """The next message of any node, waiting up to ``timeout`` seconds; None if none came."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                subscribers = list(self._by_node.values())
            for pubsub in subscribers:
                message = pubsub.get_message(ignore_subscribe_messages=False, timeout=0)
                if message is not None:
                    kind = message["type"]
                    kind = kind.decode() if isinstance(kind, bytes) else kind
                    return {**message, "type": _KINDS.get(kind, kind)}
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sockets = [p.connection._sock for p in subscribers if p.connection is not None]
            ready, _, _ = select.select(
                [self._wake_read, *[s for s in sockets if s is not None]], [], [], left
            )
            if self._wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_read, 4096)

    def close(self) -> None:
        with self._lock:
            subscribers, self._by_node = list(self._by_node.values()), {}
            self._node_of.clear()
        for pubsub in subscribers:
            with contextlib.suppress(Exception):
                pubsub.close()
        for end in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(end)
        self._wake_read = self._wake_write = -1
