"""The lifecycle event stream of a queue, read back as typed events.

A queue created with ``event_stream_max_len=N`` keeps a capped Redis stream
(key kind ``events``) to which the scripts append one entry per step of a
message's life. Reading it is one ``XRANGE`` per page: read-only, bounded by
``limit``, in the order the scripts ran.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import InvalidParameter, QueueDoesNotExist
from ..core._config import check_int
from ..core._ids import message_id
from ..core._keys import QueueKeys
from ..core._scripts import text

if TYPE_CHECKING:
    from ..core._backend import Backend

EVENT_KINDS = (
    "sent",
    "received",
    "visibility_changed",
    "visibility_expired",
    "deleted",
    "stale_receipt",
    "dead_lettered",
    "retention_expired",
    "moved_out",
    "moved_in",
)
"""Every kind of event the scripts record (``e`` in the stream)."""
MAX_EVENTS_PAGE = 10_000
"""Most events one call of ``Queue.events`` returns."""
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a queue's lifecycle event stream (see ``Queue.events``).

    Attributes:
        queue: Name of the queue whose stream holds it.
        event_id: The stream entry id (``<ms>-<seq>``), increasing in the order
            the scripts ran; pass the last one as ``after`` to read on.
        kind: One of ``EVENT_KINDS``.
        message_id: The message it is about. A redriven message arrives as a new
            message (as on SQS): its ``moved_out`` names the id it had, its
            ``moved_in`` the new one.
        receive_count: The message's receive count at that moment: 0 when
            sent, ``n`` for the ``n``-th receive and for what that receipt
            does next. For ``stale_receipt`` it is the message's current count,
            not the (older, unknown) one of the stale receipt; ``moved_out``
            records 0.
        at_ms: When, in ms since the epoch, by the Redis clock. ``visibility_expired``
            is recorded when a receive takes the expired message back, so it
            is the time of that receive, not of the expiry itself.
        extra: Depends on ``kind``: ``sent``: the delay in ms; ``received``:
            the visibility timeout of that receive in ms; ``visibility_changed``:
            the new timeout in ms, counted from ``at_ms``; ``stale_receipt``:
            ``delete`` or ``change``, what the stale receipt tried;
            ``moved_in``: the queue it came from; ``moved_out``: the queue
            it went to; otherwise empty.
    """

    queue: str
    event_id: str
    kind: str
    message_id: str
    receive_count: int
    at_ms: int
    extra: str = ""

    @property
    def at(self) -> float:
        """When, in seconds since the epoch (``at_ms / 1000``)."""
        return self.at_ms / 1000


def timestamp_of(at_ms: int) -> datetime:
    """``at_ms`` (ms since the epoch) as an aware UTC datetime, exact to the millisecond."""
    return _EPOCH + timedelta(milliseconds=at_ms)


def read_events(client: Backend, keys: QueueKeys, after: str, limit: int) -> list[Event]:
    """Up to ``limit`` events of queue ``keys.name`` after entry ``after``; see ``Queue.events``."""
    check_int("limit", limit, 1, MAX_EVENTS_PAGE)
    if not isinstance(after, str) or not _is_position(after):
        raise InvalidParameter(f"after must be '-' or an event id such as '1700000000000-0', not {after!r}")
    low = "-" if after == "-" else f"({after}"
    return [
        event_of(keys.name, text(entry_id), fields)
        for entry_id, fields in read_stream(client, keys, low, limit)
    ]


def read_stream(client: Backend, keys: QueueKeys, low: str, limit: int) -> list[tuple[Any, Any]]:
    """Up to ``limit`` raw entries of the queue's event stream from ``low`` (an XRANGE start) on."""
    entries: list[tuple[Any, Any]] = client._call(client._redis.xrange, keys.events, low, "+", count=limit)
    if not entries and not client._call(client._redis.exists, keys.meta):
        raise QueueDoesNotExist(f"queue {keys.name!r} does not exist")
    return entries


class EventSource(Protocol):
    """A queue handle as ``event_pages`` reads it."""

    def events(self, *, after: str = "-", limit: int = 1000) -> list[Event]: ...


def event_pages(queue: EventSource, size: int = MAX_EVENTS_PAGE) -> Iterator[list[Event]]:
    """All of ``queue``'s kept events, oldest first, in non-empty pages of up to ``size``."""
    after = "-"
    while True:
        page = queue.events(after=after, limit=size)
        if page:
            yield page
        if len(page) < size:
            return
        after = page[-1].event_id


def _is_position(after: str) -> bool:
    if after == "-":
        return True
    ms, dash, seq = after.partition("-")
    return bool(dash) and ms.isdigit() and seq.isdigit() and ms.isascii() and seq.isascii()


def event_of(queue: str, event_id: str, fields: Mapping[Any, Any]) -> Event:
    """The Event of stream entry ``fields``, under ``event_id``."""
    values = {text(key): text(value) for key, value in fields.items()}
    return Event(
        queue=queue,
        event_id=event_id,
        kind=values.get("e", ""),
        message_id=message_id(values.get("m", "")),
        receive_count=int(values.get("n") or 0),
        at_ms=int(values.get("t") or 0),
        extra=values.get("x", ""),
    )
