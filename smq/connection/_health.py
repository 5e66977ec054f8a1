"""Redis health as the exporter reports it: memory, eviction policy, persistence."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from redis.cluster import RedisCluster


@dataclasses.dataclass(frozen=True)
class RedisHealth:
    """What one Redis server (a primary, in a cluster) says of itself in ``INFO``.

    Attributes:
        node: ``host:port`` or the socket path of the server.
        version: ``redis_version``.
        memory_used_bytes: ``used_memory``.
        memory_max_bytes: ``maxmemory``; 0 means no limit.
        maxmemory_policy: ``maxmemory_policy``; smq needs ``noeviction``.
        aof_enabled: The append-only file is on.
        aof_last_write_ok: The last write to the append-only file succeeded.
        evicted_keys: Keys evicted since the server started.
        connected_replicas: Replicas connected to it (``connected_slaves``).
        writes_need_replicas: ``min-replicas-to-write`` and
            ``min-replicas-max-lag`` are set (the server then shows
            ``min_slaves_good_slaves``): it refuses writes while too few
            replicas have answered within the lag.
    """

    node: str
    version: str
    memory_used_bytes: int
    memory_max_bytes: int
    maxmemory_policy: str
    aof_enabled: bool
    aof_last_write_ok: bool
    evicted_keys: int
    connected_replicas: int = 0
    writes_need_replicas: bool = False


def read_health(redis_client: Any) -> list[RedisHealth]:
    """``INFO`` of every server that holds queues: the node, or each cluster primary."""
    if isinstance(redis_client, RedisCluster):
        replies = redis_client.info(target_nodes=RedisCluster.PRIMARIES)
        return [_health(node, info) for node, info in sorted(replies.items())]
    return [_health(node_name(redis_client), redis_client.info())]


def node_name(redis_client: Any) -> str:
    """``host:port`` (or the socket path) of the server a single-node redis-py client talks to."""
    kwargs = redis_client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _health(node: str, info: Mapping[str, Any]) -> RedisHealth:
    return RedisHealth(
        node=node,
        version=_text(info.get("redis_version", "")),
        memory_used_bytes=int(info.get("used_memory", 0)),
        memory_max_bytes=int(info.get("maxmemory", 0)),
        maxmemory_policy=_text(info.get("maxmemory_policy", "noeviction")),
        aof_enabled=bool(int(info.get("aof_enabled", 0))),
        aof_last_write_ok=_text(info.get("aof_last_write_status", "ok")) == "ok",
        evicted_keys=int(info.get("evicted_keys", 0)),
        connected_replicas=int(info.get("connected_slaves", 0)),
        writes_need_replicas="min_slaves_good_slaves" in info,
    )
