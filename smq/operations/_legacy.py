"""Consumers of smq 0.2.0 on this Redis, found by their scripts in the servers' script caches.

0.2.0 reads data layout 1 only and checks no layout: its receive and its redrive (``move_out``)
would take a layout 2 entry of the visible list for a deleted message and drop it. So while a
0.2.0 consumer may share the Redis, new queues are made in layout 1 and ``smq upgrade`` does not
move queues to layout 2. A 0.2.0 client loads its scripts (``SCRIPT LOAD``) on a node the first
time it runs them there, and they stay in that node's cache until Redis restarts or
``SCRIPT FLUSH``: ``SCRIPT EXISTS`` of their SHA-1 on every primary tells whether one has
consumed from this Redis since. A 0.2.0 producer alone is harmless (its sends are layout 1
entries, which layout 2 reads), and its scripts are not looked for.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster
from redis.exceptions import NoPermissionError

from .._errors import BackendError

if TYPE_CHECKING:
    from ..core._backend import Backend

log = logging.getLogger("smq.layout")

OLD_CONSUMER_SCRIPTS = {
    "receive": "5318beb23bfea912dd9f0ff64789ac90b6285c42",
    "move_out": "8c2e82f6806719175c20cbc5a40145cc64e11f55",
}
"""SHA-1 of smq 0.2.0's scripts that take messages off the visible list (the same with sharded
Pub/Sub), as its client loads them (tests/test_rolling_upgrade.py checks them against its wheel)."""


def old_consumers_seen(client: Backend) -> bool | None:
    """Whether a primary holds a 0.2.0 consumer's scripts; None when Redis refuses to say
    (an ACL without ``SCRIPT EXISTS``, such as one 0.2.0's ``smq acl`` wrote)."""
    shas = list(OLD_CONSUMER_SCRIPTS.values())
    redis: Any = client._redis
    try:
        if isinstance(client._redis, RedisCluster):
            answers = [
                client._call(redis.execute_command, "SCRIPT EXISTS", *shas, target_nodes=node)
                for node in redis.get_primaries()
            ]
        else:
            answers = [client._call(redis.execute_command, "SCRIPT EXISTS", *shas)]
    except NoPermissionError:
        return None
    except BackendError as error:  # the client's own calls wrap what Redis refused
        if isinstance(error.__cause__, NoPermissionError):
            return None
        raise
    return any(_found(answer) for answer in answers)


def _found(answer: Any) -> bool:
    if isinstance(answer, dict):  # one reply per node
        return any(_found(one) for one in answer.values())
    if isinstance(answer, (list, tuple)):
        return any(bool(one) for one in answer)
    return bool(answer)
