"""A queue's consumers: the workers and SQS clients seen receiving from it.

Each consumer beats now and then (``BEAT_SECONDS``): one small script
(``lua/consumer_beat.lua``) notes its kind, what it says of itself and when,
by the Redis clock, in two keys of the queue; a graceful stop forgets it.
Entries silent for an hour are dropped a few at a time by later beats, and
a queue keeps at most ``MAX_KEPT`` of them. ``lua/consumers.lua`` reads the
newest, for the web console's "who consumes this queue".

A sharded queue keeps its consumers under its first shard, which is the
queue's own keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import InvalidParameter
from ..core._config import check_int
from ..core._keys import QueueKeys
from ..core._scripts import text

if TYPE_CHECKING:
    from ..core._backend import Backend

CONSUMER_KINDS = ("worker", "sqs")
"""A ``worker`` (``smq.Worker``, ``smq worker``) or an ``sqs`` client receiving through ``smq serve``."""
BEAT_SECONDS = 15.0
"""Seconds between a consumer's heartbeats."""
MAX_LISTED = 100
"""Most consumers one ``Queue.consumers`` call returns."""
MAX_KEPT = 1000
"""Most consumers a queue keeps (lua/consumer_beat.lua drops the oldest beyond)."""
MAX_ID_BYTES = 200
MAX_INFO_BYTES = 2048


@dataclass(frozen=True, slots=True)
class Consumer:
    """A worker or SQS client seen receiving from a queue (``Queue.consumers``).

    Times are by the Redis server's clock.

    Attributes:
        id: Who it is: a worker's ``"<host>:<pid>:<random>"``, an SQS
            client's ``"sqs:<access key id>:<agent>:<address>"``.
        kind: ``"worker"`` or ``"sqs"``.
        last_seen: Its last heartbeat, in seconds since the epoch.
        age: Seconds since ``last_seen``. A worker beats every 15 s and
            ``smq serve`` every 15 s for the SQS clients it served since;
            an entry silent for an hour is dropped.
        info: What it said of itself. A worker: ``host``, ``pid``,
            ``concurrency``, ``mode`` (``"threads"`` or ``"async"``),
            ``held`` (messages it holds), ``started`` (epoch seconds) and
            ``version`` (of smq). An SQS client: ``agent`` (the first
            product of its User-Agent, such as ``"Boto3/1.34.0"``),
            ``user_agent``, ``access_key``, ``address``, ``receives`` (since
            its previous beat) and ``via`` (the ``smq serve`` process,
            ``host:pid``).
    """

    id: str
    kind: str
    last_seen: float
    age: float
    info: Mapping[str, Any]


def beat_args(consumer_id: str, kind: str, info: Mapping[str, Any], forget: bool) -> list[str]:
    """The consumer_beat script's arguments after now_ms, checked (InvalidParameter)."""
    if not isinstance(consumer_id, str) or not 1 <= len(consumer_id.encode()) <= MAX_ID_BYTES:
        raise InvalidParameter(f"a consumer id is 1-{MAX_ID_BYTES} bytes of text, not {consumer_id!r:.60}")
    if kind not in CONSUMER_KINDS:
        raise InvalidParameter(f"a consumer's kind is one of {', '.join(CONSUMER_KINDS)}, not {kind!r}")
    if not isinstance(info, Mapping):
        raise InvalidParameter(f"a consumer's info is a mapping, not {type(info).__name__}")
    encoded = json.dumps(dict(info), separators=(",", ":"), default=str)
    if len(encoded.encode()) > MAX_INFO_BYTES:
        raise InvalidParameter(f"a consumer's info is at most {MAX_INFO_BYTES} bytes as JSON")
    return [consumer_id, kind, encoded, "1" if forget else "0"]


def beat(
    client: Backend, keys: QueueKeys, consumer_id: str, kind: str, info: Mapping[str, Any], forget: bool
) -> None:
    """Note (or with ``forget``, drop) one consumer's heartbeat on queue ``keys.name``."""
    args = [client._now_arg(), *beat_args(consumer_id, kind, info, forget)]
    client.run("consumer_beat", keys, args, queue=keys.name)


def consumers(client: Backend, keys: QueueKeys, limit: int) -> list[Consumer]:
    """The newest ``limit`` consumers of queue ``keys.name``; see ``Queue.consumers``."""
    check_int("limit", limit, 1, MAX_LISTED)
    reply = client.run("consumers", keys, [client._now_arg(), limit], queue=keys.name)
    now_ms = int(reply[1])
    return [_consumer(now_ms, reply[i : i + 3]) for i in range(2, len(reply), 3)]


def _consumer(now_ms: int, entry: Sequence[Any]) -> Consumer:
    last_ms = int(entry[1])
    kind, _, encoded = text(entry[2]).partition("|")
    try:
        info = json.loads(encoded)
    except ValueError:
        info = None
    return Consumer(
        id=text(entry[0]),
        kind=kind,
        last_seen=last_ms / 1000,
        age=max(now_ms - last_ms, 0) / 1000,
        info=info if isinstance(info, dict) else {},
    )
