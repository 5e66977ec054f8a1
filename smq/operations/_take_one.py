"""One visible message, by its id: delete it, or move it to another queue.

For a dead-letter queue's page in the console, which lists the messages with ``Queue.peek`` and
lets an operator delete or redrive one of them. A visible message has no receipt, and taking an
entry out of the middle of a Redis list costs O(n); so ``lua/take_one.lua`` looks for the
message's entry near the place the peek showed it (within ``NEAR_WINDOW`` entries either way)
and leaves the entry there as a ghost, as a delete of a visible message does. A move is a
redrive of one message: its first step is the script's, its second and third and its recovery
are those of every move (``smq.operations._moves``).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from .._errors import InvalidParameter, QueueDoesNotExist
from ..core._config import check_int, is_fifo_name
from ..core._ids import stored_ids
from ..core._names import check_queue_name
from ..core._scripts import text
from ._moves import finish_moves
from ._peek import MAX_PEEK, MAX_PEEK_OFFSET

if TYPE_CHECKING:
    from ..core._backend import QueueRef

MAX_NEAR = MAX_PEEK_OFFSET + MAX_PEEK - 1
"""The furthest place a peek shows a message at: the last of a page at the deepest offset."""
NEAR_WINDOW = 100
"""Entries looked at on either side of ``near`` (the script's WINDOW)."""


def discard(queue: QueueRef, message_id: str, near: int) -> bool:
    """``Queue.discard``."""
    ids = _checked(queue, message_id, near)
    reply = _take(queue, "delete", near, ids, token="", destination="")
    return bool(reply[1])


def move_message(queue: QueueRef, message_id: str, destination: str | None, near: int) -> bool:
    """``Queue.move_message``."""
    ids = _checked(queue, message_id, near)
    client = queue._client
    if destination is not None:
        if check_queue_name(destination) == queue.name:
            raise InvalidParameter(f"the message is in queue {queue.name!r} already")
        if is_fifo_name(destination):
            # It has no message group: a FIFO queue could not hand it out as FIFO clients expect.
            raise InvalidParameter(
                f"a message of standard queue {queue.name!r} can move only to a standard queue, "
                f"not to FIFO queue {destination!r}"
            )
        if not client.queue_exists(destination):  # nothing is taken out
            raise QueueDoesNotExist(f"queue {destination!r} does not exist")
    else:
        # The queue it came from, read first so that a missing one is told before anything is
        # taken out. The script reads it again: the message may have gone meanwhile.
        origins = client._read(
            "reading an origin", queue.name, queue.keys.origins, "HMGET", queue.keys.origins, *ids
        )
        origin = next((text(found) for found in origins if found), "")
        if origin and origin != queue.name and not client.queue_exists(origin):
            raise QueueDoesNotExist(f"queue {origin!r}, which the message came from, does not exist")
    reply = _take(queue, "move", near, ids, token=secrets.token_urlsafe(12), destination=destination or "")
    if not reply[1]:
        return False
    to = bytes(reply[3]).split(b"|", 2)[1].decode()  # "<token>|<dest>|...": the record may be any bytes
    # Steps 2 and 3. Should the destination be gone since it was checked, the message comes back
    # here (under its id, at the back); should this process stop, recovery finishes the move.
    if finish_moves(client, queue.name, reply[2:4], park=False) == 0:
        raise QueueDoesNotExist(f"queue {to!r} does not exist: the message stays in queue {queue.name!r}")
    return True


def _checked(queue: QueueRef, message_id: str, near: int) -> list[str]:
    """The stored ids the message may have; raise InvalidParameter for what the call cannot do."""
    check_int("near", near, 0, MAX_NEAR)
    ids = stored_ids(message_id) if isinstance(message_id, str) else []
    if not ids:
        raise InvalidParameter(f"{message_id!r} is not a message id")
    if queue.fifo:
        raise InvalidParameter(
            f"queue {queue.name!r} is a FIFO queue: one message by its id is taken from standard queues only"
        )
    if queue._shards():
        raise InvalidParameter(
            f"queue {queue.name!r}: one message by its id is not supported on a sharded queue"
        )
    return ids


def _take(
    queue: QueueRef, mode: str, near: int, ids: list[str], *, token: str, destination: str
) -> list[Any]:
    client = queue._client
    other = ids[1] if len(ids) > 1 else ""
    args = [client._now_arg(), mode, near, ids[0], other, token, destination, queue.name]
    reply: list[Any] = client.run("take_one", queue.keys, args, queue=queue.name)
    return reply
