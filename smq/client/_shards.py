"""Sharded queues: one queue made of several full queues, each in its own hash slot.

A queue created with ``shards=N`` (N > 1) is N queues behind one name. Shard
0 is the queue itself, under its own keys; shards 1 to N-1 are full queues
under derived names no user can create (``orders.s1``, ``jobs.s2.fifo``: an
SQS name holds no ``.`` before ``.fifo``), chosen at creation so that on a
Redis Cluster the shards fall on the primaries in turn. Each script still
runs on one shard, so on one slot; only the client sees the whole.

Sends spread over the shards: each call goes to the next shard in turn,
except that a message with a group id (FIFO) or a deduplication id always
goes to the shard its id hashes to, so a group keeps its order and a retried
send meets its first copy. Receives rotate over the shards and take from
the first one that has messages; a long poll watches every shard's wake
channel. A receipt names its shard, so deletes and visibility changes go
straight there. Attributes, counters and peeks add the shards up.

The main queue's ``meta`` lists the shards (field ``shard_names``). A client
reads that once per queue and keeps it ``LAYOUT_TTL`` seconds: a queue
deleted and created again with other shards is seen within that time.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster

from .._errors import BackendError, InvalidParameter, OutcomeUnknown, SmqError, Unavailable
from ..core._batch import failure
from ..core._config import QueueInfo, check_int, is_fifo_name
from ..core._keys import QueueKeys
from ..core._message import (
    BatchFailure,
    BatchResult,
    Message,
    SendEntry,
    SendResult,
    parse_receipt,
    receipt_queue,
)
from ..core._names import FIFO_SUFFIX
from ..core._scripts import text
from ..core._send import send_messages
from ..operations._access import node_serving
from ..operations._events import MAX_EVENTS_PAGE, Event, event_of, read_stream
from ..operations._peek import PeekedMessage, check_peek
from ..operations._peek import peek as peek_one

if TYPE_CHECKING:
    from ._client import Client
    from ._queue import Queue

log = logging.getLogger("smq.shards")

SHARD_NAMES = "shard_names"
"""The main queue's ``meta`` field listing shards 1 to N-1, space-separated."""
SHARD_OF = "shard_of"
"""A shard's ``meta`` field naming the queue it belongs to."""
LAYOUT_TTL = 10.0
"""Seconds a client trusts what it read of a queue's shards."""
_RETRY_READ = 1.0  # seconds until a read that found the first shard's node down is tried again
_PLACEMENT_TRIES = 500
_MAX_KNOWN = 10_000


class Layouts:
    """Per-client cache: queue name -> its shards (``Queue`` handles), read from Redis."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._known: dict[str, tuple[float, tuple[Queue, ...]]] = {}
        self._turns = itertools.count()
        self._lock = threading.Lock()

    def shards(self, queue: Queue) -> tuple[Queue, ...]:
        """Handles on the shards of ``queue`` (its main name), or ``()`` if it has one shard."""
        known = self.known(queue)
        if known is not None:
            return known
        found = self._known.get(queue.name)
        try:
            names = self.read(queue.name)
        except Unavailable:
            if found is None:
                raise
            # The first shard's node is down (failing over?): the shards are fixed at
            # creation, so keep what was read and let the other shards serve.
            self._remember(queue.name, found[1], _RETRY_READ)
            return found[1]
        shards = tuple(type(queue)(self._client, name, home=queue.name) for name in names) if names else ()
        self._remember(queue.name, shards, LAYOUT_TTL)
        return shards

    def known(self, queue: Queue) -> tuple[Queue, ...] | None:
        """``shards(queue)`` if read recently, else None (without asking Redis)."""
        found = self._known.get(queue.name)
        if found is not None and found[0] > time.monotonic():
            return found[1]
        return None

    def _remember(self, name: str, shards: tuple[Queue, ...], seconds: float) -> None:
        with self._lock:
            if len(self._known) >= _MAX_KNOWN:
                self._known.clear()
            self._known[name] = (time.monotonic() + seconds, shards)

    def read(self, name: str) -> list[str]:
        """The names of every shard of queue ``name`` from Redis, itself first; [] if unsharded."""
        meta = QueueKeys.of(name).meta
        listed = self._client._read("reading the shards", name, meta, "HGET", meta, SHARD_NAMES)
        return [name, *listed.decode().split()] if listed else []

    def forget(self, name: str) -> None:
        self._known.pop(name, None)

    def turn(self) -> int:
        """A number that goes up by one per call: where the next send or receive starts."""
        return next(self._turns)


def shard_names(client: Client, name: str, count: int) -> list[str]:
    """Names for the ``count`` shards of queue ``name``, itself first.

    On a Redis Cluster, shard k is placed on the k-th primary after the one
    serving shard 0 (sorted by address), where the current slot map allows:
    its name takes the first suffix whose slot that primary serves. The
    choice depends only on the name and the slot map, so two clients that
    create the same queue at once agree.
    """
    stem, suffix = (name[: -len(FIFO_SUFFIX)], FIFO_SUFFIX) if is_fifo_name(name) else (name, "")

    def candidate(k: int, attempt: int) -> str:
        return f"{stem}.s{k}{f'-{attempt}' if attempt else ''}{suffix}"

    if not isinstance(client._redis, RedisCluster):
        return [name, *(candidate(k, 0) for k in range(1, count))]
    cluster: Any = client._redis  # redis-py leaves get_primaries untyped
    nodes = cluster.nodes_manager
    primaries = sorted(node.name for node in cluster.get_primaries())
    own = node_serving(nodes, name)
    first = primaries.index(own) if own in primaries else 0
    names = [name]
    for k in range(1, count):
        wanted = primaries[(first + k) % len(primaries)]
        chosen = candidate(k, 0)
        for attempt in range(_PLACEMENT_TRIES):
            if node_serving(nodes, candidate(k, attempt)) == wanted:
                chosen = candidate(k, attempt)
                break
        names.append(chosen)
    return names


def _index(key: str, count: int) -> int:
    return zlib.crc32(key.encode()) % count


def send(
    layouts: Layouts, shards: Sequence[Queue], entries: Sequence[SendEntry], *, single: bool
) -> BatchResult[SendResult]:
    """Send ``entries`` (checked as a batch already) to the shards they map to.

    Entries with no group or deduplication id may go to any shard: when
    theirs is unavailable (the call surely did not run there, say while its
    primary fails over), they go to the next.
    """
    count = len(shards)
    turn = layouts.turn() % count
    by_shard: dict[tuple[int, bool], list[SendEntry]] = {}
    for entry in entries:
        key = entry.message_group_id if shards[0].fifo else entry.deduplication_id
        place = (_index(key, count), False) if isinstance(key, str) and key else (turn, True)
        by_shard.setdefault(place, []).append(entry)
    if len(by_shard) == 1:
        ((place, chosen),) = by_shard.items()
        return _send_to(shards, place, chosen, single)
    successful: list[SendResult] = []
    failed: list[BatchFailure] = []
    for place, chosen in by_shard.items():
        result = _send_to(shards, place, chosen, single)
        successful += result.successful
        failed += result.failed
    return BatchResult(successful, failed)


def _send_to(
    shards: Sequence[Queue], place: tuple[int, bool], entries: list[SendEntry], single: bool
) -> BatchResult[SendResult]:
    index, movable = place
    others = len(shards) - 1 if movable else 0
    for step in range(others):
        shard = shards[(index + step) % len(shards)]
        try:
            return send_messages(shard, entries, single=single)
        except Unavailable as error:
            log.warning(
                "shard %r of queue %r unavailable, sending to the next: %s", shard.name, shard._home, error
            )
    return send_messages(shards[(index + others) % len(shards)], entries, single=single)


def receive_now(
    layouts: Layouts, shards: Sequence[Queue], max_messages: int, visibility_ms: int, attempt_id: str
) -> tuple[list[Message], int, int, bool]:
    """One receive attempt over the shards, from the next one in turn: ``Queue._receive_now``'s reply.

    A FIFO receive with an attempt id starts at the shard the id hashes to,
    so that a retry looks where the first call found its messages.
    """
    count = len(shards)
    start = _index(attempt_id, count) if attempt_id else layouts.turn() % count
    next_due_ms = -1
    wait_ms = -1
    over_limit = True
    unavailable: BackendError | None = None
    for step in range(count):
        shard = shards[(start + step) % count]
        try:
            messages, due_ms, shard_wait_ms, shard_over = shard._receive_now(
                max_messages, visibility_ms, attempt_id
            )
        except (Unavailable, OutcomeUnknown) as error:
            # Its primary may be failing over: the other shards still serve. A receive that
            # may have run there leaves its messages to their visibility timeout either way.
            log.warning(
                "shard %r of queue %r did not answer, receiving from the others: %s",
                shard.name,
                shard._home,
                error,
            )
            unavailable = unavailable or error
            continue
        if wait_ms < 0:
            wait_ms = shard_wait_ms  # the queue's setting: the same on every shard
        if messages:
            return messages, due_ms, wait_ms, False
        over_limit = over_limit and shard_over
        if due_ms >= 0:
            next_due_ms = due_ms if next_due_ms < 0 else min(next_due_ms, due_ms)
    if wait_ms < 0 and unavailable is not None:
        raise unavailable  # no shard answered
    if unavailable is not None and next_due_ms < 0:
        next_due_ms = 1000  # a long poll looks again within a second, for the shard that did not answer
    return [], next_due_ms, wait_ms, over_limit


def by_receipt(
    shards: Sequence[Queue],
    script: str,
    entries: Sequence[Any],
    single: bool,
    extra: Callable[[Any], list[int]],
) -> tuple[list[str], list[BatchFailure], list[int]]:
    """``Queue._by_receipt`` for a sharded queue: each entry runs on the shard its receipt names."""
    index_of = {shard.name: i for i, shard in enumerate(shards)}
    by_shard: dict[int, list[Any]] = {}
    failed: list[BatchFailure] = []
    for entry in entries:
        index = index_of.get(receipt_queue(entry.receipt_handle))
        if index is None:
            try:
                extra(entry)  # the entry's own checks first, as on a queue of one shard
                parse_receipt(shards[0].name, entry.receipt_handle)  # no shard issued it: raises
            except SmqError as error:
                if single:
                    raise
                failed.append(failure(entry.id, error))
            continue
        by_shard.setdefault(index, []).append(entry)
    pending: list[str] = []
    statuses: list[int] = []
    for index, chosen in by_shard.items():
        shard_pending, shard_failed, shard_statuses = shards[index]._by_receipt(script, chosen, single, extra)
        pending += shard_pending
        failed += shard_failed
        statuses += shard_statuses
    return pending, failed, statuses


def attributes(queue: Queue, shards: Sequence[Queue]) -> QueueInfo:
    """The queue's attributes: the main queue's settings and times, counts added up over the shards."""
    infos = [shard._attributes_here() for shard in shards]
    main = infos[0]
    counters: dict[str, int] = {}
    for info in infos:
        for name, value in info.counters.items():
            counters[name] = counters.get(name, 0) + value
    ages = [info.oldest_age for info in infos if info.oldest_age is not None]
    quiet_ages = [i.oldest_age_in_quiet_groups for i in infos if i.oldest_age_in_quiet_groups is not None]
    return dataclasses.replace(
        main,
        name=queue.name,
        visible=sum(info.visible for info in infos),
        in_flight=sum(info.in_flight for info in infos),
        delayed=sum(info.delayed for info in infos),
        moving=sum(info.moving for info in infos),
        oldest_age=max(ages) if ages else None,
        counters=counters,
        groups=sum(info.groups for info in infos),
        groups_in_flight=sum(info.groups_in_flight for info in infos),
        noisy_groups=sum(info.noisy_groups for info in infos),
        visible_in_quiet_groups=sum(info.visible_in_quiet_groups for info in infos),
        in_flight_in_quiet_groups=sum(info.in_flight_in_quiet_groups for info in infos),
        oldest_age_in_quiet_groups=max(quiet_ages) if quiet_ages else None,
    )


def peek(queue: Queue, shards: Sequence[Queue], state: str, limit: int, offset: int) -> list[PeekedMessage]:
    """Peek the shards in order as if they were one list: ``offset`` skips over whole shards first.

    A shard's length in ``state`` is its count from ``attributes``; entries
    the peek script skips (ghosts) are not in that count, so a page may
    hold a few messages less or repeat one of the previous page's.
    """
    check_peek(state, limit, offset)
    found: list[PeekedMessage] = []
    for shard in shards:
        info = shard._attributes_here()
        length = {"visible": info.visible, "in_flight": info.in_flight, "delayed": info.delayed}.get(state, 0)
        if offset >= length and shard is not shards[-1]:
            offset -= length
            continue
        page = peek_one(shard._client, shard.keys, state, limit, offset)
        found += (dataclasses.replace(message, queue=queue.name) for message in page)
        limit -= max(len(page), min(limit, length - offset))
        offset = 0
        if limit <= 0:
            break
    return found


def events(queue: Queue, shards: Sequence[Queue], after: str, limit: int) -> list[Event]:
    """The shards' event streams as one, ordered by (stream id, shard): ``Queue.events``.

    An event's id is ``<ms>-<seq>-<shard>`` (its stream id, then its shard's
    index), so ids stay unique and ``after`` says where to go on in every
    shard: after that id in the shards up to its own, from it in the later ones.
    """
    check_int("limit", limit, 1, MAX_EVENTS_PAGE)
    position = _event_position(after)
    found: list[tuple[int, int, int, Any, Any]] = []
    for index, shard in enumerate(shards):
        if position is None:
            low = "-"
        else:
            ms, seq, at = position
            low = f"({ms}-{seq}" if index <= at else f"{ms}-{seq}"
        for entry_id, fields in read_stream(shard._client, shard.keys, low, limit):
            ms_text, _, seq_text = text(entry_id).partition("-")
            found.append((int(ms_text), int(seq_text), index, entry_id, fields))
    found.sort(key=lambda entry: entry[:3])
    return [
        event_of(queue.name, f"{ms}-{seq}-{index}", fields) for ms, seq, index, _, fields in found[:limit]
    ]


def _event_position(after: object) -> tuple[int, int, int] | None:
    if after == "-":
        return None
    parts = after.split("-") if isinstance(after, str) else []
    if len(parts) == 2:
        parts.append("-1")  # a plain stream id: after it in every shard
    if len(parts) != 3 or not all(part.lstrip("-").isdigit() and part.isascii() for part in parts):
        raise InvalidParameter(
            f"after must be '-' or an event id of this queue such as '1700000000000-0-1', not {after!r}"
        )
    return int(parts[0]), int(parts[1]), int(parts[2])
