"""Peek: look at a queue's messages in one state without receiving them.

SQS cannot do this. A peek is one read-only script (``lua/peek.lua``): it
changes no receive count, counter, event or visibility, and reads at most
``MAX_PEEK`` entries of one list or sorted set. Reaching an offset is cheap: a
sorted set finds a rank in O(log n), and a list is walked node by node (each
node holds many entries), from whichever end is nearer; the middle of a list
of 1,000,000 messages costs about 0.3 ms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import InvalidParameter
from ..core._config import check_int
from ..core._ids import message_id
from ..core._keys import QueueKeys
from ..core._message import MessageAttribute, decode_record
from ..core._scripts import text

if TYPE_CHECKING:
    from ..core._backend import Backend

PEEK_STATES = ("visible", "in_flight", "delayed")
"""The states a peek can look at, each one list or sorted set of the queue."""
MAX_PEEK = 100
"""Most messages one peek returns."""
MAX_PEEK_OFFSET = 100_000_000
"""Most entries a peek skips: far beyond any queue's size, a bound on the argument only."""


@dataclass(frozen=True, slots=True)
class PeekedMessage:
    """A message seen by ``Queue.peek``, left where it is.

    Times are seconds since the epoch, by the Redis server's clock.

    Attributes:
        queue: Name of the queue it is in.
        message_id: Its id, the same that receives report.
        state: ``"visible"``, ``"in_flight"`` or ``"delayed"``: the state peeked.
        body: The message body.
        attributes: Its message attributes, by name.
        sent_at: SentTimestamp: when it was sent.
        receive_count: Receives so far (0 if never received; a dead-lettered
            message keeps the count it had).
        first_received_at: When it was first received; None if never.
        receipt_handle: In flight only: the receipt that holds it now, the
            one its receive returned (works for ``delete`` and
            ``change_visibility``); else None.
        received_at: In flight only: when that receipt was issued; else None.
        visible_at: In flight: when its visibility timeout runs out (may be
            in the past: run out, not yet taken back by a receive); delayed:
            when its delay falls due (may be in the past likewise); visible: None.
        origin: The queue it was dead-lettered or redriven from; else None.
        message_group_id: Its MessageGroupId, or None.
        sequence_number: FIFO queues: its SequenceNumber (20 digits); else None.
        deduplication_id: Its MessageDeduplicationId as sent (FIFO queues, and
            standard queues' deduplicated sends), or None.
    """

    queue: str
    message_id: str
    state: str
    body: str
    attributes: Mapping[str, MessageAttribute]
    sent_at: float
    receive_count: int
    first_received_at: float | None
    receipt_handle: str | None
    received_at: float | None
    visible_at: float | None
    origin: str | None
    message_group_id: str | None = None
    sequence_number: str | None = None
    deduplication_id: str | None = None


def check_peek(state: object, limit: object, offset: object) -> None:
    """Raise InvalidParameter unless these are a peek's state, limit and offset."""
    if not isinstance(state, str) or state not in PEEK_STATES:
        raise InvalidParameter(f"state must be one of {', '.join(PEEK_STATES)}, not {state!r}")
    check_int("limit", limit, 1, MAX_PEEK)
    check_int("offset", offset, 0, MAX_PEEK_OFFSET)


def peek(client: Backend, keys: QueueKeys, state: str, limit: int, offset: int) -> list[PeekedMessage]:
    """Run the peek script for queue ``keys.name``, checked; see ``Queue.peek``."""
    check_peek(state, limit, offset)
    name = keys.name
    reply = client.run("peek", keys, (client._now_arg(), state, limit, offset), queue=name)
    return [_peeked(name, state, reply[i : i + 6]) for i in range(1, len(reply), 6)]


def _peeked(queue: str, state: str, entry: Sequence[Any]) -> PeekedMessage:
    stored = text(entry[0])
    sent_ms, attributes, body, group, deduplication_id, _, _ = decode_record(entry[2])
    receive_count, first_ms, token, receive_ms = 0, 0, "", 0
    if entry[3]:
        # "<token>|<receive_count>|<first_ms>|<receive_ms>"; a token has no '|'.
        held_by, count, first, received = text(entry[3]).split("|")
        token, receive_count, first_ms, receive_ms = held_by, int(count), int(first), int(received)
    in_flight = state == "in_flight"
    origin = text(entry[4])
    return PeekedMessage(
        queue=queue,
        message_id=message_id(stored),
        state=state,
        body=body,
        attributes=attributes,
        sent_at=sent_ms / 1000,
        receive_count=receive_count,
        first_received_at=first_ms / 1000 if first_ms else None,
        receipt_handle=f"{queue}:{stored}:{token}" if in_flight and token else None,
        received_at=receive_ms / 1000 if in_flight and receive_ms else None,
        visible_at=None if state == "visible" else float(text(entry[1])) / 1000,
        origin=origin or None,
        message_group_id=group,
        sequence_number=text(entry[5]) or None,
        deduplication_id=deduplication_id,
    )
