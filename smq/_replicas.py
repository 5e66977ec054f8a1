"""Durability you choose: wait for replicas (``WAIT``) or disks (``WAITAOF``) before answering.

Redis replicates asynchronously: a change acknowledged by the primary can be
lost if the primary fails before its replicas have it. With
``Settings(wait_replicas=N)`` every script that changes state is followed, on
the same connection, by ``WAIT N timeout``, which returns once N replicas
have every write of that connection (scripts included); with
``wait_aof=True``, by ``WAITAOF 1 N timeout``, which returns once the
primary's and N replicas' append-only files hold them on disk. When fewer
confirm within the timeout, the change ran on the primary but may be lost:
the call raises ``OutcomeUnknown``.

Scripts that only read need no wait (``READ_ONLY``); a test checks the table
against the Lua sources, so a script that writes cannot be left out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster
from redis.exceptions import NoPermissionError, RedisError, ResponseError

from ._errors import BackendError, UnsafeRedisConfig
from ._settings import Settings

if TYPE_CHECKING:
    from ._client import Client

log = logging.getLogger("smq.replicas")

READ_ONLY = frozenset({"get_attributes", "list_tags", "move_task_list", "peek", "check_access"})
"""Scripts that change no state, so need no wait. ``check_access`` writes probe
keys no queue uses and deletes them again: nothing to keep."""


@dataclass(frozen=True)
class Wait:
    """The command that follows each change, and what its reply must show."""

    replicas: int
    timeout_ms: int
    aof: bool

    @property
    def command(self) -> tuple[Any, ...]:
        if self.aof:
            return ("WAITAOF", 1, self.replicas, self.timeout_ms)
        return ("WAIT", self.replicas, self.timeout_ms)

    @property
    def pipelined(self) -> bool:
        """Whether the wait goes out with the script, or only after its reply.

        ``WAIT`` counts what replicas have applied, so it may follow the
        script at once. ``WAITAOF`` counts what they have on disk: sent with
        the script, its request for acknowledgements reaches a replica before
        that replica has written the change to disk, and the next
        acknowledgement comes a second later; sent after the reply, it
        finds the change on disk (with ``appendfsync always``).
        """
        return not self.aof

    def check(self, reply: Any) -> None:
        """Raise ``NotReplicated`` unless ``reply`` (of ``command``) shows enough confirmations."""
        if self.aof:
            local, replicas = int(reply[0]), int(reply[1])
        else:
            local, replicas = 1, int(reply)
        if local < 1 or replicas < self.replicas:
            raise NotReplicated(self, local >= 1, replicas)


def wait_of(settings: Settings) -> Wait | None:
    """The wait ``settings`` ask for, or None (the default: answer without waiting)."""
    if settings.wait_replicas == 0 and not settings.wait_aof:
        return None
    return Wait(settings.wait_replicas, max(1, round(settings.wait_timeout * 1000)), settings.wait_aof)


class NotReplicated(RedisError):
    """The change ran on the primary, but too few replicas (or disks) confirmed it in time."""

    def __init__(self, wait: Wait, local: bool, replicas: int) -> None:
        self.wait, self.local, self.replicas = wait, local, replicas
        seconds = f"{wait.timeout_ms / 1000:g} s"
        kind = "replicas' AOF" if wait.aof else "replicas"
        if local:
            what = f"only {replicas} of {wait.replicas} {kind} confirmed it within {seconds}"
        else:
            what = f"the primary's AOF did not confirm it within {seconds}"
            if wait.replicas:
                what += f" ({replicas} of {wait.replicas} {kind} did)"
        super().__init__(f"it ran on the primary, but {what}: a failover may lose it")


def check_wait(client: Client) -> None:
    """Refuse, in one line, a wait the server cannot do (called when a client starts).

    ``wait_aof`` needs ``WAITAOF`` (Redis 7.2 and later, Valkey) and the
    primary's append-only file on; both need the ACL to allow the command.
    """
    wait = client._scripts.wait
    if wait is None:
        return
    redis = client._redis
    probe = ("WAITAOF", 0, 0, 1) if wait.aof else ("WAIT", 0, 1)
    where = {"target_nodes": RedisCluster.PRIMARIES} if isinstance(redis, RedisCluster) else {}
    try:
        redis.execute_command(*probe, **where)
    except NoPermissionError as error:
        name = probe[0].lower()
        raise BackendError(f"the Redis user may not run {probe[0]} ({error}): give it +{name}") from error
    except ResponseError as error:
        if wait.aof and "unknown command" in str(error).lower():
            versions = ", ".join(sorted({h.version for h in client.redis_health()}))
            raise UnsafeRedisConfig(
                f"wait_aof needs WAITAOF (Redis 7.2 or later, or Valkey); this server is Redis {versions}: "
                "turn wait_aof off, or upgrade"
            ) from error
        raise
    if wait.aof:
        for health in client.redis_health():
            if not health.aof_enabled:
                raise UnsafeRedisConfig(
                    f"wait_aof waits for the append-only file, which is off on {health.node}: "
                    "set appendonly yes there, or turn wait_aof off"
                )


def note_not_replicated(script: str, queue: str, error: NotReplicated) -> None:
    """One warning line per change whose replicas did not confirm it (see the operations guide)."""
    log.warning("not replicated in time: %s on queue %r: %s", script, queue, error)
