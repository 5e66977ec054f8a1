"""The SQS clients that receive through ``smq serve``, noted among their queues' consumers.

A ReceiveMessage notes its client in a dict, by (queue, access key id,
User-Agent, address): one dict update on the request's path, nothing sent
to Redis. A background task of the server flushes the dict every
``ServerConfig.consumer_beat_interval`` seconds (15 by default), one
heartbeat per client and queue (``Queue._beat``, kind ``"sqs"``), in one
thread of the server's pool. Clients are told apart by the first product
of their User-Agent (``Boto3/1.34.0``), so the versions of one SDK on one
address count as one client. Between two flushes the dict holds at most
``MAX_NOTED`` clients; more are not noted until the next flush.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from .._errors import InvalidParameter, QueueDoesNotExist

if TYPE_CHECKING:
    from ..client._client import Client

log = logging.getLogger("smq.serve")

MAX_NOTED = 10_000
"""Clients noted between two flushes, at most."""
_MAX_AGENT = 60  # characters of the agent in a consumer's id
_MAX_USER_AGENT = 200  # characters of the User-Agent kept in a consumer's info
_MAX_ID_BYTES = 200

# (core queue name, access key id, User-Agent, address)
_Seen = tuple[str, str, str, str]


class SqsConsumers:
    """Receives of SQS clients, counted since the last flush."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._counts: dict[_Seen, int] = {}
        self.via = f"{socket.gethostname()[:100]}:{os.getpid()}"
        """This ``smq serve`` process, ``host:pid``: in each beat's info."""

    def note(self, queue: str, access_key: str, user_agent: str, address: str) -> None:
        """Count a receive of queue ``queue`` by a client (on the request's path: a dict update)."""
        seen = (queue, access_key, user_agent, address)
        counts = self._counts
        if seen in counts:
            counts[seen] += 1
        elif len(counts) < MAX_NOTED:
            counts[seen] = 1

    def take(self) -> dict[_Seen, int]:
        """The receives counted since the last call (on the event loop, as ``note``)."""
        counts, self._counts = self._counts, {}
        return counts

    def flush(self, counts: dict[_Seen, int]) -> None:
        """One heartbeat per client and queue of ``counts`` (blocking: in a thread of the pool).

        A queue deleted meanwhile is skipped; another failure (Redis down) raises it, and the
        clients not yet beaten are noted again by their next receives.
        """
        beats: dict[tuple[str, str], dict[str, Any]] = {}
        for (queue, access_key, user_agent, address), receives in counts.items():
            agent = (user_agent.split(None, 1) or ["unknown"])[0][:_MAX_AGENT]
            consumer_id = _at_most(f"sqs:{access_key}:{agent}:{address}", _MAX_ID_BYTES)
            earlier = beats.get((queue, consumer_id))
            beats[(queue, consumer_id)] = {
                "agent": agent,
                "user_agent": user_agent[:_MAX_USER_AGENT],
                "access_key": access_key,
                "address": address,
                "receives": receives + (earlier["receives"] if earlier else 0),
                "via": self.via,
            }
        for (queue, consumer_id), info in beats.items():
            try:
                self._client.queue(queue)._beat(consumer_id, "sqs", info)
            except (QueueDoesNotExist, InvalidParameter) as error:
                log.debug("SQS client %s of queue %r not noted: %s", consumer_id, queue, error)


def _at_most(text: str, size: int) -> str:
    """``text`` cut to ``size`` bytes of UTF-8, whole characters only."""
    return text.encode()[:size].decode(errors="ignore")
