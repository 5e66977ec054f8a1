"""The eviction policies smq writes under, and the check a client repeats while it runs.

Redis deletes keys to stay under ``maxmemory`` when its ``maxmemory-policy``
allows it; a queue's keys evicted are messages gone, with nothing to say so.
Which policies are safe:

- ``noeviction``: a full Redis refuses writes (``RedisOutOfMemory``) and
  deletes nothing;
- the ``volatile-*`` policies evict only keys that carry a TTL, and no key
  that holds a queue's messages or state carries one (a test sweeps every
  key kind): they lose smq only the recently-deleted mark of a queue name and
  the Spark stream's records of its micro-batches. A client that relies on
  those records (the Spark stream) asks for ``noeviction`` itself (``strict``);
- the ``allkeys-*`` policies may evict anything: unsafe.

The policy is read when a client starts and again at most ``CHECK_SECONDS``
apart before its writes, and at once after an error that may come with a
change (any Redis error, a new connection): a policy switched to an unsafe
one while smq runs stops its writes within about a second. Redis evicts only
above ``maxmemory``, so while memory stays below it nothing is lost; a switch
made while Redis is already full evicts at its next command, before any
client can look (the operations guide says what that can lose).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._errors import EvictionPolicyUnsafe
from ._health import node_name

log = logging.getLogger("smq.redis")

SAFE_POLICIES = ("noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl")
"""Policies under which no key of a queue's messages or state can be evicted."""

STRICT_POLICIES = ("noeviction",)
"""Policies under which no key of smq's at all can be evicted (what ``strict`` asks for)."""

CHECK_SECONDS = 1.0
"""The longest a writing client goes without reading the policy again."""

_EVICTIONS_SAID_EVERY = 10.0  # seconds between two log lines about evicted keys, per node


class Reading(Protocol):
    """What one server says of its memory (``RedisHealth`` or ``MemoryReading``)."""

    @property
    def node(self) -> str: ...
    @property
    def maxmemory_policy(self) -> str: ...
    @property
    def memory_max_bytes(self) -> int: ...
    @property
    def memory_used_bytes(self) -> int: ...
    @property
    def evicted_keys(self) -> int | None: ...


@dataclass(frozen=True)
class MemoryReading:
    """``INFO memory`` and ``INFO stats`` of one server: what the periodic check needs."""

    node: str
    maxmemory_policy: str
    memory_max_bytes: int
    memory_used_bytes: int
    evicted_keys: int | None  # None: not read (the policy was noeviction, which evicts nothing)


def read_memory(redis_client: Any) -> list[MemoryReading]:
    """The memory readings of every server that holds queues (each primary of a cluster).

    ``INFO stats`` (the count of evicted keys) only where the policy can evict: one command a
    reading on a server at ``noeviction``.
    """
    if isinstance(redis_client, RedisCluster):
        return _cluster_readings(redis_client)
    memory = redis_client.info("memory")
    stats = redis_client.info("stats") if _policy(memory) != "noeviction" else {}
    return [_reading(node_name(redis_client), memory, stats)]


def _cluster_readings(cluster: RedisCluster) -> list[MemoryReading]:
    """Each primary's reading. A primary that does not answer is left out: the writes to its
    slots fail on their own, and its first answer again brings a reading (``suspect``); the
    others' queues go on. Only when no primary answers is that the error."""
    readings = []
    failure: RedisError | None = None
    primaries = cluster.get_primaries()  # type: ignore[no-untyped-call]
    for node in sorted(primaries, key=lambda node: str(node.name)):
        try:
            memory = cluster.info("memory", target_nodes=node)
            stats = cluster.info("stats", target_nodes=node) if _policy(memory) != "noeviction" else {}
        except (RedisConnectionError, RedisTimeoutError) as error:
            failure = error
            continue
        readings.append(_reading(str(node.name), memory, stats))
    if not readings and failure is not None:
        raise failure
    return readings


def _policy(memory: Any) -> str:
    policy = memory.get("maxmemory_policy", "noeviction")
    return policy.decode() if isinstance(policy, bytes) else str(policy)


def _reading(node: str, memory: Any, stats: Any) -> MemoryReading:
    return MemoryReading(
        node=node,
        maxmemory_policy=_policy(memory),
        memory_max_bytes=int(memory.get("maxmemory", 0)),
        memory_used_bytes=int(memory.get("used_memory", 0)),
        evicted_keys=int(stats["evicted_keys"]) if "evicted_keys" in stats else None,
    )


def policy_safe(policy: str, strict: bool = False) -> bool:
    """Whether ``policy`` keeps every queue's data (``strict``: every key of smq's)."""
    return policy in (STRICT_POLICIES if strict else SAFE_POLICIES)


def size_text(size: int) -> str:
    """A byte count as Redis's configuration writes it: ``64mb``, ``1gb``, ``1500b``."""
    for unit, factor in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}b"


class EvictionWatch:
    """What a client last read of the eviction policy, and when to read it again (thread-safe).

    ``claim`` tells one caller at a time that a reading is due; it reads and
    hands the readings to ``note``, which sets ``refusal`` (the text of the
    error writes raise, ``error()``) while any server's policy is unsafe, and
    logs each change of state and the keys evicted since the last reading.
    """

    def __init__(self, strict: bool = False, interval: float = CHECK_SECONDS) -> None:
        self.strict = strict
        self.interval = interval
        self.refusal: str | None = None
        self.readings: dict[str, Reading] = {}
        self._next = 0.0  # time.monotonic() from which a reading is due
        self._lock = threading.Lock()
        self._evicted: dict[str, int] = {}  # node -> its evicted_keys when last read
        self._unsaid: dict[str, tuple[float, int]] = {}  # node -> (when last said, evictions since)

    def error(self) -> EvictionPolicyUnsafe:
        """A new exception of the refusal (one object raised again and again would pile up
        tracebacks, in every thread that raised it)."""
        return EvictionPolicyUnsafe(self.refusal or "Redis's eviction policy is unsafe")

    def due(self) -> bool:
        """Whether a reading is due (without claiming it)."""
        return time.monotonic() >= self._next

    def claim(self) -> bool:
        """Whether a reading is due; if so, the caller reads: no other caller is told so until
        ``interval`` has passed (or ``suspect`` is called)."""
        now = time.monotonic()
        if now < self._next:
            return False
        with self._lock:
            if now < self._next:
                return False
            self._next = now + self.interval
            return True

    def suspect(self) -> None:
        """Something happened that may come with a new policy (an error, a new connection):
        read again before the next write."""
        self._next = 0.0

    def note(self, readings: Sequence[Reading]) -> None:
        """Take new readings: set or clear ``refusal``; log what changed."""
        unsafe = [r for r in readings if not policy_safe(r.maxmemory_policy, self.strict)]
        for reading in readings:
            self._note_evictions(reading)
            self.readings[reading.node] = reading
        was = self.refusal
        self.refusal = _refusal(unsafe[0], self.strict) if unsafe else None
        if self.refusal is not None and was is None:
            log.error("%s", self.refusal)
        elif self.refusal is None and was is not None:
            nodes = ", ".join(f"{r.node}: {r.maxmemory_policy}" for r in readings)
            log.warning("Redis's maxmemory-policy is safe again (%s): smq writes again", nodes)

    def limit_text(self) -> str:
        """`` (maxmemory 64mb)`` as last read, for an out-of-memory error; empty if unknown."""
        limits = sorted({r.memory_max_bytes for r in self.readings.values() if r.memory_max_bytes})
        if not limits:
            return ""
        return f" (maxmemory {', '.join(size_text(limit) for limit in limits)})"

    def _note_evictions(self, reading: Reading) -> None:
        """Log the keys ``reading``'s server evicted since the last reading (at most one line per
        node every ``_EVICTIONS_SAID_EVERY`` seconds, with the count since the last line)."""
        count = reading.evicted_keys
        if count is None:
            return
        known = self._evicted.get(reading.node)
        self._evicted[reading.node] = count
        if known is None or count <= known:  # the first reading, none since, or a restarted server
            return
        said_at, unsaid = self._unsaid.get(reading.node, (0.0, 0))
        unsaid += count - known
        now = time.monotonic()
        if now - said_at < _EVICTIONS_SAID_EVERY:
            self._unsaid[reading.node] = (said_at, unsaid)
            return
        self._unsaid[reading.node] = (now, 0)
        if policy_safe(reading.maxmemory_policy):
            log.warning(
                "Redis %s evicted %d key(s) with a TTL under %s (%d since it started): no queue's messages "
                "or state carry one, but the Spark stream's batch records and recently-deleted marks may",
                reading.node,
                unsaid,
                reading.maxmemory_policy,
                count,
            )
        else:
            log.error(
                "Redis %s EVICTED %d key(s) under maxmemory-policy %s (%d since it started): "
                "queue messages or state may be lost",
                reading.node,
                unsaid,
                reading.maxmemory_policy,
                count,
            )


def _refusal(reading: Reading, strict: bool) -> str:
    wanted = "'noeviction'" if strict else "'noeviction' (or a volatile-* policy)"
    limit = f", maxmemory {size_text(reading.memory_max_bytes)}" if reading.memory_max_bytes else ""
    evicted = reading.evicted_keys
    evicted_text = f"; it has evicted {evicted} key(s) since it started" if evicted else ""
    return (
        f"Redis {reading.node} has maxmemory-policy {reading.maxmemory_policy!r}{limit}: it may evict "
        f"queue data, so smq refuses to write until it is {wanted}{evicted_text}. Nothing was written; "
        "Settings(allow_eviction=True) accepts the risk"
    )
