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
and repeats steps 2 and 3. Step 3 names the move's token, so a late step 3
never drops a newer move of the same message. Markers are kept 24 hours: a
move left unfinished and unrecovered for longer than that could be stored
twice.
"""

from __future__ import annotations

import logging
import secrets
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._errors import QueueDoesNotExist
from ..core._ids import derived_id
from ..core._keys import QueueKeys
from ..core._scripts import text

if TYPE_CHECKING:
    from ..core._backend import Backend
    from ._queues import Queues

log = logging.getLogger("smq.moves")

MOVE_CHUNK = 100
_MAX_RECOVERY_ROUNDS = 1000


def finish_moves(client: Backend, source: str, flat: Sequence[Any], *, park: bool) -> int:
    """Steps 2 and 3 for outbox entries ``[id, entry, id, entry, ...]`` of ``source``.

    When a destination queue does not exist, dead letters stay parked in the
    outbox (they wait for their queue, retried by recovery); redriven messages
    (receive count 0) go back to ``source`` unless ``park``. Returns the
    number of messages stored in their destination.
    """
    by_destination: dict[str, list[list[Any]]] = defaultdict(list)
    for i in range(0, len(flat), 2):
        message_id = text(flat[i])
        token, to, origin, count, first, record = bytes(flat[i + 1]).split(b"|", 5)
        by_destination[text(to)].append([message_id, token, origin, count, first, record])
    source_keys = QueueKeys.of(source)
    finished: list[list[Any]] = []
    arrived = 0
    for destination, entries in by_destination.items():
        try:
            _move_in(client, QueueKeys.of(destination), [_arriving(entry) for entry in entries])
        except QueueDoesNotExist:
            redriven = [] if park else [entry for entry in entries if entry[3] == b"0"]
            if len(redriven) < len(entries):
                log.warning(
                    "queue %r does not exist: %d message(s) of %r wait in its outbox until it does",
                    destination,
                    len(entries) - len(redriven),
                    source,
                )
            if redriven:
                log.warning("queue %r is gone: %d message(s) stay in %r", destination, len(redriven), source)
                # Back as they were (same id, same sent time), still naming the queue they came from.
                back = [[entry[0], entry[1], destination, b"0", b"0", entry[5], ""] for entry in redriven]
                _move_in(client, source_keys, back)
                finished += redriven
            continue
        arrived += len(entries)
        finished += entries
    for start in range(0, len(finished), MOVE_CHUNK):
        chunk = finished[start : start + MOVE_CHUNK]
        args: list[Any] = [client._now_arg(), len(chunk)]
        for entry in chunk:
            args += [entry[0], entry[1]]
        client.run("move_done", source_keys, args, queue=source)
    return arrived


def _arriving(entry: list[Any]) -> list[Any]:
    """The ``move_in`` arguments of an outbox entry. As on SQS, a redriven message
    (receive count 0) arrives as a new message, with a new id and sent time; a dead letter
    keeps its id. The new id follows from the old and the move's token (the marker that
    makes a repeated step a no-op names the old), so the message is stored once."""
    if entry[3] != b"0":
        return [*entry, ""]
    return [*entry, derived_id(entry[0].encode(), entry[1])]


def _move_in(client: Backend, keys: QueueKeys, entries: list[list[Any]]) -> None:
    for start in range(0, len(entries), MOVE_CHUNK):
        chunk = entries[start : start + MOVE_CHUNK]
        args: list[Any] = [client._now_arg(), keys.wake_channel, len(chunk)]
        for entry in chunk:
            args += entry
        client.run("move_in", keys, args, queue=keys.name)


def recover(
    client: Backend, name: str, *, min_age_ms: int, park: bool = True, rounds: int = _MAX_RECOVERY_ROUNDS
) -> int:
    keys = QueueKeys.of(name)
    finished = 0
    claimed: set[str] = set()
    for _ in range(rounds):
        reply = client.run("move_claim", keys, [client._now_arg(), min_age_ms, MOVE_CHUNK], queue=name)
        ids = {text(reply[i]) for i in range(1, len(reply), 2)}
        if not ids or ids <= claimed:
            break  # empty, or only parked entries claimed before in this call
        claimed |= ids
        finished += finish_moves(client, name, reply[1:], park=park)
    return finished


def redrive(client: Queues, name: str, destination: str, max_messages: int | None) -> int:
    return redrive_counted(client, name, destination, max_messages)[1]


def redrive_counted(
    client: Queues, name: str, destination: str, max_messages: int | None
) -> tuple[int, int, int, int]:
    """Redrive; returns (messages taken, messages of those stored in their
    destination, messages of interrupted moves out of ``name`` finished first,
    messages taken that stayed because nothing says where they came from).

    Messages taken but not stored stayed in ``name`` (no destination, or it is gone).
    """
    recovered = recover(client, name, min_age_ms=0, park=False)
    keys = QueueKeys.of(name)
    budget = client._queue_of(name)._attributes_here().visible
    if max_messages is not None:
        budget = min(budget, max_messages)
    moved = taken = unsourced = 0
    while taken < budget:
        take = min(MOVE_CHUNK, budget - taken)
        token = secrets.token_urlsafe(12)
        reply = client.run("move_out", keys, [client._now_arg(), take, token, destination, name], queue=name)
        popped, live = reply[1], reply[2]
        if popped == 0:
            break
        taken += live  # deleted ids popped on the way do not count
        unsourced += reply[3]
        if len(reply) > 4:
            moved += finish_moves(client, name, reply[4:], park=False)
    return taken, moved, recovered, unsourced
