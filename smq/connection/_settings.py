"""Connection settings of a client: one frozen object instead of many keywords."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from .._errors import LAYOUT

#: The folder ``smq serve`` and the other commands keep their embedded server in.
DEFAULT_DATA_DIR = ".smq"


def embedded_url(data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR) -> str:
    """The ``unix://`` URL of the embedded server that ``smq serve`` runs in ``data_dir``."""
    return f"unix://{(Path(data_dir) / 'redis' / 'redis.sock').resolve()}"


@dataclass(frozen=True)
class Settings:
    """How a ``smq.Client`` reaches Redis.

    Attributes:
        url: ``redis://host:port/db``, ``rediss://...``, ``unix:///path.sock``, or
            Sentinels and the service whose primary to use:
            ``redis+sentinel://host:26379,host2:26379/mymaster[/db]`` (``rediss+sentinel://``
            with TLS; see ``smq.connection._sentinel``).
            None (the default): ``$SMQ_REDIS_URL`` if set, else the embedded
            server that ``smq serve`` runs in ``data_dir``, as the ``smq``
            commands do.
        data_dir: Folder of that embedded server when ``url`` is None
            (``$SMQ_DATA_DIR`` if set, else ``.smq`` in the current directory).
        cluster: Talk to a Redis Cluster (``url`` names any one node).
        socket_timeout: Seconds a Redis call may take before it fails.
        connect_timeout: Seconds to open a connection.
        max_connections: Connection pool size per node.
        allow_eviction: Write to a Redis whose ``maxmemory-policy`` may
            evict queue data (``allkeys-*``), and stop checking the policy.
            Off (the default), a client refuses writes with
            ``EvictionPolicyUnsafe`` from the moment it sees such a policy
            (read again at most a second apart) until it is safe again:
            ``noeviction`` or a ``volatile-*`` policy. An evicting Redis may
            silently drop messages under memory pressure; leave this off in
            production.
        tls_ca: CA file (PEM) that signed the certificate of a ``rediss://``
            server; default: the system's CAs.
        tls_cert: Client certificate (PEM) for a server that asks for one
            (``tls-auth-clients``); with ``tls_key``, its private key.
        tls_key: Private key (PEM) of ``tls_cert``.
        wait_replicas: Replicas that must have each change before a call
            answers (Redis ``WAIT``). None, the default, decides when the
            client starts: 1 where Redis has replicas (a Sentinel URL, or a
            primary that reports a connected replica or sets
            ``min-replicas-to-write``), else 0. 0 is the opt-out: answer as
            soon as the primary has the change, faster, but a failover or a
            paused primary may lose the last changes acknowledged (see the
            operations guide's durability table).
        wait_timeout: Seconds to wait for them (more than 0, less than
            ``socket_timeout``). When fewer confirm in time, the change ran on
            the primary but may be lost: the call raises ``OutcomeUnknown``.
        wait_aof: Wait instead for the change to be on disk, in the
            primary's append-only file and those of ``wait_replicas``
            replicas (``WAITAOF``: Redis 7.2 and later, or Valkey; the
            primary needs ``appendonly yes``). Refused when the client starts
            on a server without it.
        sharded_pubsub: Long-poll wake-ups by sharded Pub/Sub (``SPUBLISH``,
            ``SSUBSCRIBE``) on a Redis Cluster, so each goes only to the
            queue's node. None, the default: when every primary runs Redis 7
            or later (Valkey too); False: plain Pub/Sub, which a cluster sends
            to every node (all clients of a cluster must agree; see the
            operations guide); True: refuse older servers.
        layout: The data layout of the queues this client creates: None, the
            default, is ``$SMQ_LAYOUT`` if set, else the newest this version
            knows (``smq.LAYOUT``) unless a consumer of 0.2.0 may share the
            Redis (its scripts are in a server's script cache, or Redis
            refuses ``SCRIPT EXISTS``): then 1, with a warning. 0.2.0 reads
            only layout 1 and does not check; set 1 while 0.2.0 clients
            remain (see "Rolling upgrades" in the operations guide). Queues
            keep their layout until ``smq upgrade`` moves them.

    When ``url`` comes from ``$SMQ_REDIS_URL``, the TLS files left None come
    from ``$SMQ_REDIS_TLS_CA``, ``$SMQ_REDIS_TLS_CERT`` and ``$SMQ_REDIS_TLS_KEY``.
    """

    url: str | None = None
    cluster: bool = False
    socket_timeout: float = 10.0
    connect_timeout: float = 5.0
    max_connections: int = 64
    allow_eviction: bool = False
    data_dir: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    wait_replicas: int | None = None
    wait_timeout: float = 1.0
    wait_aof: bool = False
    sharded_pubsub: bool | None = None
    layout: int | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("a client certificate needs its key (tls_cert and tls_key)")
        replicas = self.wait_replicas
        if replicas is not None and (
            isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= 1000
        ):
            raise ValueError(f"wait_replicas must be 0 to 1000 (or None: decided at start), not {replicas!r}")
        timeout = self.wait_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0.001 <= timeout:
            raise ValueError(f"wait_timeout must be at least 0.001 seconds, not {timeout!r}")
        if timeout >= self.socket_timeout:
            raise ValueError(
                f"wait_timeout ({timeout:g} s) must be less than socket_timeout ({self.socket_timeout:g} s)"
            )

        layout = self.layout
        if layout is not None and (isinstance(layout, bool) or layout not in range(1, LAYOUT + 1)):
            raise ValueError(f"layout must be 1 to {LAYOUT} (or None: the newest), not {layout!r}")

    def pinned_layout(self) -> int | None:
        """The layout set for the queues this client creates (see ``layout``), None when neither
        ``layout`` nor ``$SMQ_LAYOUT`` is set: reads the environment."""
        if self.layout is not None:
            return self.layout
        text = os.environ.get("SMQ_LAYOUT", "").strip()
        if not text:
            return None
        if text not in {str(n) for n in range(1, LAYOUT + 1)}:
            raise ValueError(f"SMQ_LAYOUT must be 1 to {LAYOUT}, not {text!r}")
        return int(text)

    @property
    def uses_tls_files(self) -> bool:
        """True when a CA file or a client certificate is set (they need a ``rediss://`` URL)."""
        return any(value is not None for value in (self.tls_ca, self.tls_cert, self.tls_key))

    @property
    def uses_embedded(self) -> bool:
        """True when no URL was given or set: the embedded server of the data folder."""
        return self.url is None and not os.environ.get("SMQ_REDIS_URL")

    def resolved(self) -> Settings:
        """These settings with ``url`` filled in (see ``url``): reads the environment."""
        if self.url is not None:
            return self
        from_env = os.environ.get("SMQ_REDIS_URL")
        if from_env:
            return replace(
                self,
                url=from_env,
                tls_ca=self.tls_ca or os.environ.get("SMQ_REDIS_TLS_CA") or None,
                tls_cert=self.tls_cert or os.environ.get("SMQ_REDIS_TLS_CERT") or None,
                tls_key=self.tls_key or os.environ.get("SMQ_REDIS_TLS_KEY") or None,
            )
        data_dir = self.data_dir or os.environ.get("SMQ_DATA_DIR") or DEFAULT_DATA_DIR
        return replace(self, url=embedded_url(data_dir))
