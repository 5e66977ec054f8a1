"""Redis error replies as redis-py's exceptions, the same on every redis-py smq supports.

redis-py 6 and later parse a Redis Cluster node's MOVED, ASK, TRYAGAIN and
CLUSTERDOWN answers into their own exception classes on every connection.
redis-py 5 does so only on the connections of a cluster client (its
``ClusterParser``): a single-node client, and a reader of replies made with
redis-py's ``BaseParser`` (``smq serve``'s event loop), get a plain
``ResponseError`` whose text starts with the code.
"""

from __future__ import annotations

from redis._parsers.base import BaseParser
from redis.exceptions import AskError, ClusterDownError, MovedError, ResponseError, TryAgainError

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
