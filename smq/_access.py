"""What smq needs of its Redis user: a least-privilege ACL, and a check when a client starts.

smq touches only keys under ``smq:`` and Pub/Sub channels under ``smq:``, and
runs only the commands below: those its Lua scripts call, and those the client
sends itself. ``acl_rules()`` is the ACL for a Redis user that may do exactly
that (see the operations guide); ``check_access`` runs the ``check_access``
script, which tries every script command on keys no queue uses, so a missing
permission is reported when a client starts, in one line, rather than at the
first message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._errors import BackendError
from ._keys import PREFIX, QueueKeys

if TYPE_CHECKING:
    from ._client import Client

SCRIPT_COMMANDS = (
    "del", "exists", "hdel", "hexists", "hget", "hgetall", "hincrby", "hlen", "hmget", "hset",
    "llen", "lpop", "lpush", "lrange", "publish", "rpush", "time", "unlink", "xadd", "zadd", "zcard",
    "zcount", "zmscore", "zrange", "zrangebylex", "zrangebyscore", "zrem", "zscore",
)  # fmt: skip
"""The commands the Lua scripts call (a test checks this against lua/)."""

CLIENT_COMMANDS = (
    "evalsha", "script|load", "info", "ping", "hello", "client|setinfo", "subscribe", "unsubscribe",
    "exists", "hget", "hmget", "xrange", "zadd", "zrange", "zrangebylex", "zrem",
)  # fmt: skip
"""The commands the client sends itself: scripts, the eviction check, long-poll
wake-ups, the queue registry and index reads, the event stream."""

PROBE = "!access"
"""The queue name the access check writes under: no queue can have it."""


def acl_rules() -> str:
    """The rules of a Redis ACL user for smq (``ACL SETUSER smq on >PASSWORD <rules>``)."""
    commands = sorted(set(SCRIPT_COMMANDS) | set(CLIENT_COMMANDS))
    return " ".join(
        [f"resetkeys ~{PREFIX}:*", f"resetchannels &{PREFIX}:*", "-@all", *(f"+{c}" for c in commands)]
    )


def check_access(client: Client) -> None:
    """Raise BackendError, in one line, if the Redis user may not run a command smq needs."""
    keys = QueueKeys.of(PROBE)
    reply = client._scripts.run("check_access", keys, ["", keys.wake_channel])
    if reply[0] != 0:
        detail = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
        raise BackendError(f"the Redis user may not run {detail}: give it smq's ACL ({ACL_HINT})")


ACL_HINT = "`smq redis-acl` prints it; see Operations: least privilege"
