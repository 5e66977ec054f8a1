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

Scripts that only read, or only observe, need no wait (``NO_WAIT``); a test checks the table
against the Lua sources, so a script that writes cannot be left out.

By default (``wait_replicas=None``) the client decides when it starts
(``decide_wait``): where Redis has replicas, a failover or a paused primary
can erase what the primary alone acknowledged, so every change waits for
every replica a failover could promote (``Wait.every``); where it has none,
there is nothing to wait for. ``wait_replicas=0``
is the explicit opt-out. A primary that refuses writes for want of replicas
(``min-replicas-to-write``: ``NOREPLICAS``) ran nothing: the call is
``TooFewReplicas``, an ``Unavailable`` (see ``smq.connection._redis_errors``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import NoPermissionError, RedisError, ResponseError

from .._errors import BackendError, UnsafeRedisConfig
from ._health import RedisHealth
from ._sentinel import is_sentinel_url
from ._settings import Settings

log = logging.getLogger("smq.replicas")

READ_ONLY = frozenset(
    {"get_attributes", "list_tags", "move_task_list", "peek", "check_access", "history", "consumers"}
)
"""Scripts that change no state. ``check_access`` writes probe keys no queue uses and
deletes them again: nothing to keep."""
OBSERVATIONS = frozenset({"history_add", "consumer_beat"})
"""Scripts that write only what smq observes of a queue, never a message or a setting: a
sample of its counts for the console's charts, a consumer's heartbeat. One lost in a failover
is a gap in a chart or a beat late, nothing more."""
NO_WAIT = READ_ONLY | OBSERVATIONS
"""Scripts whose changes need no wait for replicas."""


@dataclass
class _Replicas:
    """What a waiting client knows of one node's replicas (addresses ``host:port``)."""

    needed: int = 0  # replicas a change waits for
    listed: frozenset[str] = frozenset()  # ROLE's list when last counted (online replicas)
    raw: Any = None  # ROLE's addresses as Redis sent them, to tell a change cheaply
    # Without Sentinels: each replica counted, and since when it is gone or silent (None: it answers)
    departed: dict[str, float | None] = field(default_factory=dict)
    counted_at: float = float("-inf")  # when the count was last read afresh (monotonic seconds)


SentinelCount = Callable[[Any], "frozenset[str] | None"]
"""The replicas (``host:port``) the Sentinels count for the node of a connection, or None
when they do not name it the primary (see ``smq.connection._sentinel.sentinel_replicas``)."""


@dataclass(frozen=True)
class Wait:
    """The commands that follow each change, and what their replies must show.

    With ``every`` (smq's default where Redis has replicas), a change waits
    for every replica of the node that a failover could promote, at least
    ``replicas``; a Sentinel promotes a replica by the offsets it last read,
    which may be seconds old, so only a change every candidate holds is sure
    to be on the one it picks. ``ROLE`` follows the wait on the same write
    and lists the node's online replicas; when that list changes, when a
    wait falls short, on the first change through a node and every
    ``RECOUNT_SECONDS``, the client counts the candidates afresh:

    - On a Sentinel deployment, the Sentinels are asked (``sentinel_count``):
      they must still name this node the primary (else it is deposed: every
      change fails until the client reaches the new one), and every replica
      they hold up and last saw following this node counts, besides those
      ROLE lists. A replica that left because the Sentinels promoted it so
      still counts until they name it the primary: a deposed primary cannot
      find enough replicas to acknowledge anything. A replica that died
      stops counting once the Sentinels mark it down.
    - Without Sentinels (a primary and its replicas, a Redis Cluster), the
      node's own list: a replica that left, or that is online but has
      acknowledged nothing for ``LAGGING_SECONDS``, still counts for
      ``DEPARTED_SECONDS``, so changes fail meanwhile.
    """

    replicas: int
    timeout_ms: int
    aof: bool
    every: bool = False
    # node -> what this client knows of its replicas; shared by threads (a race costs a recount)
    known: dict[str, _Replicas] = field(default_factory=dict, compare=False, repr=False)

    @property
    def command(self) -> tuple[Any, ...]:
        """The wait for ``replicas`` (of a fixed count)."""
        return self.command_for(self.replicas)

    def command_for(self, replicas: int) -> tuple[Any, ...]:
        if self.aof:
            return ("WAITAOF", 1, replicas, self.timeout_ms)
        return ("WAIT", replicas, self.timeout_ms)

    def commands_for(self, asked: int) -> list[tuple[Any, ...]]:
        """What follows a change that waits for ``asked`` replicas (see ``asked``)."""
        return [self.command_for(asked), ("ROLE",)] if self.every else [self.command_for(asked)]

    def asked(self, node: str, connection: Any) -> int:
        """Replicas a change on ``node``, through ``connection``, waits for now."""
        known = self.known.get(_server(node, connection)) if self.every else None
        return self.replicas if known is None else max(self.replicas, known.needed)

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

    def check(self, reply: Any, asked: int | None = None) -> int:
        """Raise ``NotReplicated`` unless ``reply`` (of a wait) shows ``asked`` confirmations.

        Returns how many replicas confirmed.
        """
        asked = self.replicas if asked is None else asked
        if self.aof:
            local, replicas = int(reply[0]), int(reply[1])
        else:
            local, replicas = 1, int(reply)
        if local < 1 or replicas < asked:
            raise NotReplicated(self, local >= 1, replicas, asked)
        return replicas

    def settle(
        self, node: str, connection: Any, asked: int, sentinel_count: SentinelCount | None = None
    ) -> None:
        """Read the replies of ``commands_for(asked)`` on ``connection`` to ``node``; raise
        ``NotReplicated`` unless the change is on enough replicas.

        With ``every``: counts the replicas to wait for when due (see the
        class), and waits again, on the same connection, when they are more
        than the first wait asked for.
        """
        reply = connection.read_response()
        if not self.every:
            self.check(reply, asked)
            return
        role = connection.read_response()
        short = False
        try:
            confirmed = self.check(reply, asked)
        except NotReplicated as error:
            if not error.local:
                raise
            confirmed, short = error.replicas, True
        server = _server(node, connection)
        known = self.known.get(server)
        now = time.monotonic()
        # The steady state costs a comparison of ROLE's addresses with the last ones (each
        # entry is [host, port, offset]: the offsets move with every write).
        raw = [entry[:2] for entry in role[2]] if len(role) > 2 else None
        if known is None or short or raw != known.raw or now - known.counted_at >= RECOUNT_SECONDS:
            known = known or self.known.setdefault(server, _Replicas())
            listed = _listed(role)
            if sentinel_count is not None:
                candidates = sentinel_count(connection)
                if candidates is None:
                    raise NotReplicated(self, True, confirmed, asked, deposed=True)
                known.needed = len(candidates | listed)
            else:
                known.needed = _count_departed(known, listed, _lagging(connection), now)
            known.listed, known.raw, known.counted_at = listed, raw, now
        needed = max(self.replicas, known.needed)
        if confirmed >= needed:
            return
        if needed <= asked or len(known.listed) < needed:
            raise NotReplicated(self, True, confirmed, needed)
        connection.send_command(*self.command_for(needed))
        self.check(connection.read_response(), needed)


def _count_departed(known: _Replicas, listed: frozenset[str], lagging: frozenset[str], now: float) -> int:
    """Without Sentinels: the replicas answering now, and those gone for less than DEPARTED_SECONDS."""
    answering = listed - lagging
    for replica in answering:
        known.departed[replica] = None
    for replica, since in list(known.departed.items()):
        if replica in answering:
            continue
        if since is None:
            known.departed[replica] = now  # gone (or silent) from now on
        elif now - since >= DEPARTED_SECONDS:
            del known.departed[replica]
    return len(known.departed)


RECOUNT_SECONDS = 5.0
"""How often a waiting client reads afresh which replicas of a node are silent, besides
when a wait falls short and when ROLE's list changes."""

LAGGING_SECONDS = 3
"""A replica whose last acknowledgement is this old or older counts as departed: it is
stalled or cut off (Redis drops it only after ``repl-timeout``, 60 s by default)."""

DEPARTED_SECONDS = 5.0
"""Without Sentinels: how long a replica that left (or went silent) is still waited for,
so that changes fail meanwhile (it may have left because it was promoted)."""


def _server(node: str, connection: Any) -> str:
    """The server a connection reaches: ``node`` on a cluster, else the address it connected to
    (which a Sentinel deployment changes on a failover)."""
    if node:
        return node
    path = getattr(connection, "path", None)
    return str(path) if path else f"{getattr(connection, 'host', '')}:{getattr(connection, 'port', '')}"


def _listed(role: Any) -> frozenset[str]:
    """The replicas (``host:port``) that a primary's ``ROLE`` reply lists."""
    if len(role) < 3 or role[0] not in (b"master", "master"):
        return frozenset()
    return frozenset(f"{_text(entry[0])}:{_text(entry[1])}" for entry in role[2])


def _lagging(connection: Any) -> frozenset[str]:
    """The node's replicas (``host:port``) that are online but silent (``INFO replication``)."""
    connection.send_command("INFO", "replication")
    text = _text(connection.read_response())
    silent = set()
    for line in text.splitlines():
        if not line.startswith("slave") or ":" not in line:
            continue
        fields = dict(item.partition("=")[::2] for item in line.split(":", 1)[1].split(","))
        if fields.get("state") == "online" and int(fields.get("lag", "0") or 0) >= LAGGING_SECONDS:
            silent.add(f"{fields.get('ip')}:{fields.get('port')}")
    return frozenset(silent)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def wait_of(settings: Settings, replicas: int | None = None) -> Wait | None:
    """The wait ``settings`` ask for, or None (answer without waiting).

    ``replicas`` stands for ``settings.wait_replicas`` when that is None (to
    be decided at start, see ``decide_wait``); until then, no wait. A count
    decided so waits for every replica online, at least that many.
    """
    count = settings.wait_replicas if settings.wait_replicas is not None else replicas
    if count is None or (count == 0 and not settings.wait_aof):
        return None
    every = settings.wait_replicas is None and count > 0
    return Wait(count, max(1, round(settings.wait_timeout * 1000)), settings.wait_aof, every)


def decide_wait(settings: Settings, healths: list[RedisHealth]) -> Wait | None:
    """The wait of a client whose ``wait_replicas`` is None, from what Redis says at start.

    Every replica online, at least one, where the deployment has replicas: a
    Sentinel URL, or a primary (any primary of a cluster) that reports a
    connected replica or refuses writes without one
    (``min-replicas-to-write``). Else none: a single node has nothing to wait
    for, and its durability is its AOF's.
    """
    replicated = [h.node for h in healths if h.connected_replicas > 0 or h.writes_need_replicas]
    sentinel = is_sentinel_url(settings.url or "")
    wait = wait_of(settings, 1 if sentinel or replicated else 0)
    if wait is not None and wait.replicas:
        log.info(
            "Redis has replicas (%s): each change waits for every replica online "
            "(wait_replicas=0 answers sooner, at the risk of losing acknowledged changes in a failover)",
            "a Sentinel deployment" if sentinel else ", ".join(replicated),
        )
    return wait


def warn_deposable(wait: Wait | None, healths: list[RedisHealth]) -> None:
    """One warning per primary with replicas that would go on taking writes after losing them.

    Without ``min-replicas-to-write``, a primary cut off from its replicas or
    paused past a failover answers writes until it is demoted, and the
    demotion erases them: waiting clients report those ``OutcomeUnknown``,
    clients that do not wait lose them.
    """
    for health in healths:
        if health.connected_replicas > 0 and not health.writes_need_replicas:
            log.warning(
                "Redis %s has replicas but no min-replicas-to-write: once deposed, it keeps taking "
                "writes that a failover erases%s; set min-replicas-to-write 1 and min-replicas-max-lag "
                "(see the operations guide)",
                health.node,
                "" if wait is not None and wait.replicas else " (and this client does not wait for replicas)",
            )


class NotReplicated(RedisError):
    """The change ran on the primary, but too few replicas (or disks) confirmed it in time,
    or the primary was deposed (the Sentinels name another)."""

    def __init__(
        self, wait: Wait, local: bool, replicas: int, asked: int | None = None, *, deposed: bool = False
    ) -> None:
        asked = wait.replicas if asked is None else asked
        self.wait, self.local, self.replicas, self.asked = wait, local, replicas, asked
        self.deposed = deposed
        seconds = f"{wait.timeout_ms / 1000:g} s"
        kind = "replicas' AOF" if wait.aof else "replicas"
        if deposed:
            what = "the Sentinels do not name it the primary any more (deposed, or none of them answered)"
        elif local:
            what = f"only {replicas} of {asked} {kind} confirmed it within {seconds}"
        else:
            what = f"the primary's AOF did not confirm it within {seconds}"
            if asked:
                what += f" ({replicas} of {asked} {kind} did)"
        super().__init__(f"it ran on the primary, but {what}: a failover may lose it")


def check_wait(redis: Any, wait: Wait | None, healths: Callable[[], list[RedisHealth]]) -> None:
    """Refuse, in one line, a wait the server cannot do (called when a client starts, with its
    connection, its wait, and how to read the health of its nodes).

    ``wait_aof`` needs ``WAITAOF`` (Redis 7.2 and later, Valkey) and the
    primary's append-only file on; both need the ACL to allow the command.
    """
    if wait is None:
        return
    probe = ("WAITAOF", 0, 0, 1) if wait.aof else ("WAIT", 0, 1)
    # The nodes themselves: redis-py finds no node to send a keyless ROLE to by the PRIMARIES flag.
    where = {"target_nodes": redis.get_primaries()} if isinstance(redis, RedisCluster) else {}  # type: ignore[no-untyped-call]
    try:
        if wait.every:
            try:
                redis.execute_command("ROLE", **where)
            except NoPermissionError as error:
                raise BackendError(
                    f"the Redis user may not run ROLE ({error}), which counts the replicas to wait for: "
                    "give it +role (smq redis-acl), or set wait_replicas"
                ) from error
        redis.execute_command(*probe, **where)
    except NoPermissionError as error:
        name = probe[0].lower()
        raise BackendError(f"the Redis user may not run {probe[0]} ({error}): give it +{name}") from error
    except ResponseError as error:
        if wait.aof and "unknown command" in str(error).lower():
            versions = ", ".join(sorted({h.version for h in healths()}))
            raise UnsafeRedisConfig(
                f"wait_aof needs WAITAOF (Redis 7.2 or later, or Valkey); this server is Redis {versions}: "
                "turn wait_aof off, or upgrade"
            ) from error
        raise
    if wait.aof:
        for health in healths():
            if not health.aof_enabled:
                raise UnsafeRedisConfig(
                    f"wait_aof waits for the append-only file, which is off on {health.node}: "
                    "set appendonly yes there, or turn wait_aof off"
                )


def note_not_replicated(script: str, queue: str, error: NotReplicated) -> None:
    """One warning line per change whose replicas did not confirm it (see the operations guide)."""
    log.warning("not replicated in time: %s on queue %r: %s", script, queue, error)
