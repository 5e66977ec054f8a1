"""Dead-letter sources (SQS ListDeadLetterSourceQueues): a reverse index.

A source queue's redrive policy lives in its own ``meta`` hash; the queue it
names as dead-letter queue lives in another slot. So each dead-letter queue
keeps a sorted set ``sources`` (score 0, for paging by name) of the queues
that may name it, written with a plain command before a policy naming it is
set and again after. The index is a superset: a queue that changed or
dropped its policy stays in it until a read checks that queue's policy and
drops it. (Writing again after the policy is set undoes a drop by a reader
that looked in between.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core._keys import QueueKeys
from ..core._message import parse_receipt, receipt_queue
from ..core._scripts import text

if TYPE_CHECKING:
    from ..core._backend import Backend
    from ..core._message import Message


def note_source(client: Backend, source: str, dead_letter_queue: str) -> None:
    """Record that ``source`` may name ``dead_letter_queue`` in its redrive policy."""
    index = QueueKeys.of(dead_letter_queue).sources
    client._write("indexing a dead-letter source", source, index, "ZADD", index, 0, source)


def list_sources(client: Backend, name: str, limit: int | None, after: str) -> list[str]:
    """Names of the queues whose redrive policy names ``name``, sorted, after ``after``.

    Reads candidates from the index a page at a time and checks each one's
    current policy (one read per candidate); those that no longer name
    ``name`` are dropped from the index, and the page is filled from the
    candidates that follow.
    """
    index = QueueKeys.of(name).sources
    found: list[str] = []
    low = f"({after}" if after else "-"
    while limit is None or len(found) < limit:
        want = 1000 if limit is None else limit - len(found)
        candidates = [
            text(c) for c in client._call(client._redis.zrangebylex, index, low, "+", start=0, num=want)
        ]
        if not candidates:
            break
        naming = _naming(client, name, candidates)
        found += [c for c in candidates if c in naming]
        stale = [c for c in candidates if c not in naming]
        if stale:
            # Tidying, not a change anyone is told of: no wait (it is done again if lost).
            client._call(client._redis.zrem, index, *stale)
        low = f"({candidates[-1]}"
        if len(candidates) < want:
            break
    return found


def is_dead_letter_queue(client: Backend, name: str) -> bool:
    """Whether some queue's redrive policy names ``name`` now."""
    return bool(list_sources(client, name, 1, ""))


def dead_letter_origins(client: Backend, name: str, messages: Sequence[Message]) -> dict[str, str]:
    """The queue each of these messages of ``name`` was dead-lettered from (SQS's
    DeadLetterQueueSourceArn), by message id, for those that came by a dead-letter move.

    A moved message records the queue it came from; it came as a dead letter
    when that queue's redrive policy names ``name`` (a message redriven back
    from its dead-letter queue came from a queue that names none).
    """
    if not messages:
        return {}
    # Origins are kept by stored id, which the receipt handle carries.
    stored = [parse_receipt(receipt_queue(m.receipt_handle), m.receipt_handle)[0] for m in messages]
    found = client._call(client._redis.hmget, QueueKeys.of(name).origins, stored)
    origins = {m.message_id: text(o) for m, o in zip(messages, found, strict=True) if o is not None}
    if not origins:
        return {}
    naming = _naming(client, name, sorted(set(origins.values())))
    return {m: o for m, o in origins.items() if o in naming}


def _naming(client: Backend, name: str, candidates: Sequence[str]) -> set[str]:
    """Those of ``candidates`` whose redrive policy names ``name`` now (one pipelined read)."""
    pipe = client._redis.pipeline(transaction=False)
    for candidate in candidates:
        pipe.hget(QueueKeys.of(candidate).meta, "dlq")
    targets = client._call(pipe.execute)
    return {c for c, t in zip(candidates, targets, strict=True) if t is not None and text(t) == name}
