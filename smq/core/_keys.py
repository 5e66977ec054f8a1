"""Redis key names of a queue: the one place where they are built.

Every key of queue ``name`` is ``smq:{name}:<kind>``; the braces are a Redis
Cluster hash tag, so all of a queue's keys live in one slot and one script
may touch them together. A qualified name keeps its namespace inside the tag
(``smq:{eu-west-1:000000000000:orders}:meta``); a bare name's keys are the
ones smq has always used. Scripts name the kinds they use in their headers
(``-- KEYS[n] <kind> ...``); ``smq.core._scripts`` maps those kinds to the
names built here.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "smq"
REGISTRY = f"{PREFIX}:queues"
"""Sorted set of all queue names (score 0), for listing by prefix."""
MOVE_TASKS = f"{PREFIX}:move_tasks"
"""Sorted set of the handles of message move tasks that may be active, scored
by when they started (client ms): where runners find work without scanning
queues. A superset, written before and after a task starts, verified on read."""

KINDS = (
    "meta",
    "visible",
    "inflight",
    "delayed",
    "messages",
    "state",
    "stats",
    "events",
    "outbox",
    "outbox_at",
    "arrivals",
    "origins",
    "tags",  # hash: tag key -> value (at most 50)
    "sources",  # zset, score 0: queues that may name this one as dead-letter queue (a superset)
    "tasks",  # hash: message move tasks of which this queue is the source (the last 10)
    # FIFO queues only (see lua/includes/fifo.lua):
    "fifo",  # hash: id -> "<group> <seq> <sent_ms>"
    "ordered",  # zset, score 0: "<group> <seq> <id>", each group's messages in order
    "groups",  # hash: group -> 'r' (ready) | 'w' (waiting) | messages in flight
    "ready",  # list: groups whose head may be received
    "waiting",  # zset: groups whose head is delayed, by the head's sent ms
    "dedup",  # hash: deduplication key -> "<id> <seq>" of the message it let in
    "dedup_at",  # zset: deduplication keys by when they lapse (ms)
    "attempts",  # hash: receive request attempt id -> "<token> <id> ..."
    "attempts_at",  # zset: attempt ids by when they lapse (ms)
    "deleted",  # string: when a queue of this name was deleted (ms); lapses after 60 s
    # Fair queues: standard queues with grouped messages (see lua/includes/common.lua):
    "tenants",  # hash: group -> its messages in flight
    "group_of",  # hash: id -> group, of grouped messages in flight
    "deferred",  # zset, score 0: "<group> <seq> <visible entry>", noisy groups' messages set aside
    "noisy",  # zset: groups with messages set aside, by their messages in flight
    # Observation, written by `smq serve` and workers, never read by a receive:
    "history",  # list: "<bucket>|<n>|..." samples of the queue's counts, oldest first (capped)
    "consumers",  # hash: consumer id -> "<kind>|<JSON>" of a worker or SQS client receiving here
    "consumers_at",  # zset: consumer ids by their last heartbeat (ms)
)


# The keys of queues named recently: a handle per call (an HTTP request) builds none.
_KNOWN: dict[str, QueueKeys] = {}
_MAX_KNOWN = 10_000


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The Redis keys and Pub/Sub channel of one queue."""

    name: str
    meta: str
    visible: str
    inflight: str
    delayed: str
    messages: str
    state: str
    stats: str
    events: str
    outbox: str
    outbox_at: str
    arrivals: str
    origins: str
    tags: str
    sources: str
    tasks: str
    fifo: str
    ordered: str
    groups: str
    ready: str
    waiting: str
    dedup: str
    dedup_at: str
    attempts: str
    attempts_at: str
    deleted: str
    tenants: str
    group_of: str
    deferred: str
    noisy: str
    history: str
    consumers: str
    consumers_at: str
    wake_channel: str

    @classmethod
    def of(cls, name: str) -> QueueKeys:
        keys = _KNOWN.get(name)
        if keys is None or type(keys) is not cls:
            base = f"{PREFIX}:{{{name}}}:"
            keys = cls(name=name, wake_channel=base + "wake", **{kind: base + kind for kind in KINDS})
            if len(_KNOWN) >= _MAX_KNOWN:
                _KNOWN.clear()
            _KNOWN[name] = keys
        return keys

    def extra(self, suffix: str) -> str:
        """A key of this queue outside ``KINDS`` (in its hash slot), such as the Spark
        stream's records of its micro-batches: ``smq:{name}:<suffix>``."""
        return f"{PREFIX}:{{{self.name}}}:{suffix}"

    def by_kind(self, kind: str) -> str:
        if kind not in KINDS:
            raise KeyError(kind)
        value: str = getattr(self, kind)
        return value
