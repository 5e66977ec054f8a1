"""Moves of messages between queues: dead-lettering and redrive.

Two queues live in different Redis Cluster slots, so no script can move a
message between them at once. A move takes three steps, each atomic and
each safe to repeat:

1. out (source): the message leaves the source's lists for its outbox
   (``receive`` does this for dead letters, ``move_out`` for redrive);
2. in (destination): ``move_in`` stores it, once: a marker of the move
   (message id and move token) makes a repeated step a no-op;
3. done (source): ``move_done`` drops the outbox entry.

A crash between steps leaves the entry in the outbox, where ``recover``
(run by receives when an entry is older than 30 s, and by redrive) finds it
and repeats steps 2 and 3. Markers are kept 24 hours: a move left
unfinished and unrecovered for longer than that could be stored twice.
"""

from __future__ import annotations

import logging
import secrets
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._errors import QueueDoesNotExist
from ._keys import QueueKeys

if TYPE_CHECKING:
    from ._client import Client

log = logging.getLogger("smq.moves")

MOVE_CHUNK = 100
_MAX_RECOVERY_ROUNDS = 1000


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def finish_moves(client: Client, source: str, flat: Sequence[Any]) -> int:
    """Steps 2 and 3 for outbox entries ``[id, entry, id, entry, ...]`` of ``source``."""
    by_destination: dict[str, list[list[Any]]] = defaultdict(list)
    ids: list[str] = []
    for i in range(0, len(flat), 2):
        message_id = _text(flat[i])
        token, to, origin, count, first, record = bytes(flat[i + 1]).split(b"|", 5)
        by_destination[_text(to)].append([message_id, token, origin, count, first, record])
        ids.append(message_id)
    source_keys = QueueKeys.of(source)
    for destination, entries in by_destination.items():
        try:
            _move_in(client, QueueKeys.of(destination), entries)
        except QueueDoesNotExist:
            # Nothing is lost: the messages go back to where they were.
            log.warning(
                "queue %r does not exist: %d message(s) stay in %r", destination, len(entries), source
            )
            _move_in(client, source_keys, entries)
    for start in range(0, len(ids), MOVE_CHUNK):
        chunk = ids[start : start + MOVE_CHUNK]
        client.run("move_done", source_keys, [client._now_arg(), len(chunk), *chunk], queue=source)
    return len(ids)


def _move_in(client: Client, keys: QueueKeys, entries: list[list[Any]]) -> None:
    for start in range(0, len(entries), MOVE_CHUNK):
        chunk = entries[start : start + MOVE_CHUNK]
        args: list[Any] = [client._now_arg(), keys.wake_channel, len(chunk)]
        for entry in chunk:
            args += entry
        client.run("move_in", keys, args, queue=keys.name)


def recover(client: Client, name: str, *, min_age_ms: int) -> int:
    keys = QueueKeys.of(name)
    finished = 0
    for _ in range(_MAX_RECOVERY_ROUNDS):
        reply = client.run("move_claim", keys, [client._now_arg(), min_age_ms, MOVE_CHUNK], queue=name)
        if len(reply) == 1:
            break
        finished += finish_moves(client, name, reply[1:])
    return finished


def redrive(client: Client, name: str, destination: str, max_messages: int | None) -> int:
    recover(client, name, min_age_ms=0)
    keys = QueueKeys.of(name)
    budget = client.get_queue(name).attributes().visible
    if max_messages is not None:
        budget = min(budget, max_messages)
    moved = 0
    popped = 0
    while popped < budget:
        take = min(MOVE_CHUNK, budget - popped)
        token = secrets.token_urlsafe(12)
        reply = client.run("move_out", keys, [client._now_arg(), take, token, destination, name], queue=name)
        if reply[1] == 0:
            break
        popped += reply[1]
        if len(reply) > 2:
            moved += finish_moves(client, name, reply[2:])
    return moved
