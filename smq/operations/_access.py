"""What smq needs of its Redis user: a least-privilege ACL, and a check when a client starts.

smq touches only keys under ``smq:`` and Pub/Sub channels under ``smq:``, and
runs only the commands below: those its Lua scripts call, and those the client
sends itself. ``acl_rules()`` is the ACL for a Redis user that may do exactly
that (see the operations guide); ``check_access`` runs the ``check_access``
script, which tries every script command on keys no queue uses, so a missing
permission is reported when a client starts, in one line, rather than at the
first message.

A Redis Cluster client needs a few commands more (``CLUSTER_COMMANDS``,
``acl_rules(cluster=True)``), and the user on every node: ACL users are not
shared between nodes. Its check runs the script on every primary.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import NoPermissionError

from .._errors import BackendError
from ..connection._redis_errors import refusal_error, refusal_kind
from ..core._keys import PREFIX, QueueKeys

if TYPE_CHECKING:
    from ..core._backend import Backend

SCRIPT_COMMANDS = (
    "del", "exists", "get", "hdel", "hexists", "hget", "hgetall", "hincrby", "hlen", "hmget", "hset",
    "set", "llen", "lpop", "lpush", "lrange", "lset", "publish", "rpush", "time", "unlink", "xadd", "zadd",
    "zcard", "zcount", "zmscore", "zrange", "zrangebylex", "zrangebyscore", "zrem", "zscore",
)  # fmt: skip
"""The commands the Lua scripts call (a test checks this against lua/)."""

CLIENT_COMMANDS = (
    "evalsha", "script|load", "script|exists", "info", "ping", "hello", "client|setinfo", "client|setname",
    "subscribe", "unsubscribe", "exists", "hget", "hmget", "xrange", "zadd", "zrange", "zrangebylex", "zrem",
    "wait", "role", "hsetnx", "hset", "hgetall", "expire", "del",
)  # fmt: skip
"""The commands the client sends itself: scripts (and whether smq 0.2.0's are cached, before a
queue is made or moved to a new data layout), the eviction check, the name of ``smq serve``'s
event-loop connection, long-poll
wake-ups, the queue registry and index reads, the event stream, the wait for
replicas (``Settings.wait_replicas``: WAIT, and ROLE and INFO to count them), the Spark
stream's records of its micro-batches."""

WAIT_AOF_COMMANDS = ("waitaof",)
"""What ``Settings(wait_aof=True)`` sends besides (Redis 7.2 and later, Valkey:
older servers refuse an ACL that names it)."""

CLUSTER_COMMANDS = ("cluster|slots", "command", "asking", "spublish", "ssubscribe", "sunsubscribe")
"""What a Redis Cluster client sends besides: the slot map (redis-py reads it
when it starts, and again after a MOVED reply or a lost node), the command
table (read once when it starts, to find the keys of commands), ASKING
(before a command redirected to a slot being migrated), and sharded Pub/Sub
(long-poll wake-ups on the queue's node, Redis 7 and later)."""

_ACL_REFUSALS = ("NOPERM", "no permissions to run")
"""How Redis (``NOPERM``) and Valkey (``ACL failure in script: ... no permissions``) word a
command the user may not run, inside a script."""

PROBE = "!access"
"""The queue name the access check writes under: no queue can have it (in a
cluster, a number follows, chosen so that each primary serves one probe)."""

_PROBE_TRIES = 200_000
"""Bounds the search for a probe name per primary (a primary with one slot
takes some 16,000 tries on average)."""


def acl_rules(cluster: bool = False, wait_aof: bool = False) -> str:
    """The rules of a Redis ACL user for smq (``ACL SETUSER smq on >PASSWORD <rules>``).

    ``cluster`` adds what a Redis Cluster client needs (``CLUSTER_COMMANDS``),
    ``wait_aof`` what ``Settings(wait_aof=True)`` needs (``WAIT_AOF_COMMANDS``).
    """
    commands = set(SCRIPT_COMMANDS) | set(CLIENT_COMMANDS)
    if cluster:
        commands |= set(CLUSTER_COMMANDS)
    if wait_aof:
        commands |= set(WAIT_AOF_COMMANDS)
    grants = [f"+{command}" for command in sorted(commands)]
    return " ".join([f"resetkeys ~{PREFIX}:*", f"resetchannels &{PREFIX}:*", "-@all", *grants])


def acl_hint(cluster: bool) -> str:
    """Where the ACL smq needs is found, for the end of an error message."""
    command = "smq redis-acl --cluster" if cluster else "smq redis-acl"
    return f"`{command}` prints it; see Operations: least privilege"


def check_access(client: Backend) -> None:
    """Raise BackendError, in one line, if the Redis user may not run a command smq needs.

    On a Redis Cluster the check runs on every primary, each with its own user list.
    """
    cluster = isinstance(client._redis, RedisCluster)
    for name in _probe_names(client._redis) if cluster else [PROBE]:
        keys = QueueKeys.of(name)
        reply = client._scripts.run("check_access", keys, ["", keys.wake_channel])
        if reply[0] != 0:
            detail = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
            if any(words in detail for words in _ACL_REFUSALS):
                raise _refused(detail, cluster)
            kind = refusal_kind(detail)
            if kind is not None:
                # Not a permission: Redis refuses writes now (full, a failing disk, a replica).
                # The probe's first command writes, so nothing was written.
                limit = client._eviction.limit_text() if client._eviction is not None else ""
                raise refusal_error(kind, "the check of the Redis user's commands", detail, limit)
            raise BackendError(f"the check of the Redis user's commands failed: {detail}")


def node_serving(nodes: Any, queue: str) -> str:
    """The name (``host:port``) of the node that serves queue ``queue``'s slot, by the slot map
    of a redis-py cluster's ``nodes_manager``."""
    return str(nodes.get_node_from_slot(key_slot(QueueKeys.of(queue).meta.encode())).name)


def _probe_names(cluster: Any) -> list[str]:
    """One probe name per primary of ``cluster``, whose keys that primary serves."""
    nodes = cluster.nodes_manager
    missing = {node.name for node in cluster.get_primaries()}
    names = []
    for number in range(_PROBE_TRIES):
        if not missing:
            break
        name = f"{PROBE}{number}"
        owner = node_serving(nodes, name)
        if owner in missing:
            missing.discard(owner)
            names.append(name)
    return names


def refusal(error: BaseException, cluster: bool) -> BackendError | None:
    """The one-line error for a NOPERM reply somewhere in ``error``'s chain, if there is one.

    redis-py's cluster client wraps a refused ``CLUSTER SLOTS`` (or ``COMMAND``)
    in errors of its own while it starts; the reply names the command.
    """
    seen: BaseException | None = error
    for _ in range(10):  # a chain of causes is short; bound it all the same
        if seen is None:
            return None
        if isinstance(seen, NoPermissionError):
            found = re.search(r"'([a-z|-]+)'", str(seen))
            command = found.group(1).replace("|", " ").upper() if found else str(seen)
            return _refused(command, cluster)
        seen = seen.__cause__ or seen.__context__
    return None


def _refused(what: str, cluster: bool) -> BackendError:
    return BackendError(f"the Redis user may not run {what}: give it smq's ACL ({acl_hint(cluster)})")
