"""Redis error replies as redis-py's exceptions, and which of them refused a write unrun.

redis-py 6 and later parse a Redis Cluster node's MOVED, ASK, TRYAGAIN and
CLUSTERDOWN answers into their own exception classes on every connection.
redis-py 5 does so only on the connections of a cluster client (its
``ClusterParser``): a single-node client, and a reader of replies made with
redis-py's ``BaseParser`` (``smq serve``'s event loop), get a plain
``ResponseError`` whose text starts with the code.
"""

from __future__ import annotations

from redis._parsers.base import BaseParser
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)

from .._errors import RedisCannotPersist, RedisOutOfMemory, RedisReadOnly, TooFewReplicas, Unavailable

_CLUSTER_ERRORS: dict[str, type[ResponseError]] = {
    "MOVED": MovedError,
    "ASK": AskError,
    "TRYAGAIN": TryAgainError,
    "CLUSTERDOWN": ClusterDownError,
}

# Answers of a Redis Cluster node that refused to run a command: CLUSTERDOWN while the
# cluster lacks a primary for some slot (a failover under way), TRYAGAIN while a slot moves.
REFUSED = (ClusterDownError, TryAgainError)


def reply_error(text: str) -> ResponseError:
    """The exception of an error reply (its text without the leading ``-``), as redis-py 6+ makes it."""
    code, _, rest = text.partition(" ")
    kind = _CLUSTER_ERRORS.get(code)
    if kind is not None:
        return kind(rest)
    error: ResponseError = BaseParser.parse_error(text)  # type: ignore[no-untyped-call]
    return error


def refused(error: BaseException) -> bool:
    """Whether ``error`` is a Cluster node's refusal to run the command (CLUSTERDOWN, TRYAGAIN)."""
    if type(error) is ResponseError:  # redis-py 5, not a cluster client's connection
        error = reply_error(str(error))
    return isinstance(error, REFUSED)


# How Redis words its refusals of a write, in its own replies (``OOM ...``) and inside a script's
# error (Redis 7: ``OOM ... script: <sha>, on @user_script:12.``; Redis 6.2: ``Error running
# script (...): @user_script:12: -OOM ...``; redis-py drops the ``OOM `` of a reply it parses).
_REFUSALS: tuple[tuple[str, type[Unavailable]], ...] = (
    ("used memory > 'maxmemory'", RedisOutOfMemory),
    ("MISCONF ", RedisCannotPersist),
    ("READONLY ", RedisReadOnly),
    ("write against a read only replica", RedisReadOnly),
    ("NOREPLICAS ", TooFewReplicas),
)


def refusal_kind(error: BaseException | str) -> type[Unavailable] | None:
    """The kind of Redis's refusal of a write that ``error`` (or an error's text) is, if it is one.

    Redis checks these before a command runs, and inside a script before its
    first write only (``scriptVerifyWriteCommandAllow``, ``scriptVerifyOOM``:
    never once the script has written), so a script refused so wrote
    nothing. The chain of causes is followed: smq wraps some of them.
    """
    seen: BaseException | str | None = error
    for _ in range(5):  # a chain of causes is short; bound it all the same
        if seen is None:
            return None
        if isinstance(seen, OutOfMemoryError):
            return RedisOutOfMemory
        if isinstance(seen, ReadOnlyError):
            return RedisReadOnly
        text = seen if isinstance(seen, str) else str(seen)
        for words, kind in _REFUSALS:
            if words in text:
                return kind
        if isinstance(seen, str):
            return None
        seen = seen.__cause__ or seen.__context__
    return None


def refusal_error(kind: type[Unavailable], what: str, detail: str, limit: str = "") -> Unavailable:
    """The error of a refused write: ``what`` (``send on queue 'jobs'``) did not run.

    ``limit`` is `` (maxmemory 64mb)``, where known, for an out-of-memory refusal.
    """
    if kind is RedisOutOfMemory:
        text = (
            f"Redis is out of memory{limit}: {what} did not run and wrote nothing; retry once memory is "
            f"freed (receive and delete or purge messages, or raise maxmemory) ({detail})"
        )
    elif kind is RedisCannotPersist:
        text = (
            f"Redis cannot write its data to disk (a full disk?), so it refuses writes: {what} did not run "
            f"and wrote nothing; retry once it can ({detail})"
        )
    elif kind is RedisReadOnly:
        text = f"{what} did not run: the Redis node is a read-only replica; retry after a failover ({detail})"
    elif kind is TooFewReplicas:
        text = f"{what} did not run: the primary has too few replicas to keep it in a failover ({detail})"
    else:
        text = f"{what} did not run: {detail}"
    return kind(text)
