"""Connection settings of a client: one frozen object instead of many keywords."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """How a :class:`~smq.Client` reaches Redis.

    Attributes:
        url: ``redis://host:port/db``, ``rediss://...`` or ``unix:///path.sock``.
        cluster: Talk to a Redis Cluster (``url`` names any one node).
        socket_timeout: Seconds a Redis call may take before it fails.
        connect_timeout: Seconds to open a connection.
        max_connections: Connection pool size per node.
        allow_eviction: Accept a Redis whose ``maxmemory-policy`` is not
            ``noeviction``. Such a Redis may silently drop messages under
            memory pressure; leave this off in production.
    """

    url: str = "redis://localhost:6379/0"
    cluster: bool = False
    socket_timeout: float = 10.0
    connect_timeout: float = 5.0
    max_connections: int = 64
    allow_eviction: bool = False
