"""The exporter's collector: queue and Redis numbers read from Redis at scrape time."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from .._errors import QueueDoesNotExist, SmqError
from .._version import __version__
from ..client._client import Client
from ..connection._eviction import policy_safe
from ..connection._health import RedisHealth
from ..core._config import QueueInfo
from ._config import DEPRECATED_NAMES, ExporterConfig

log = logging.getLogger("smq.exporter")

# Counter kept in each queue's stats hash -> (metric name without _total, help).
COUNTER_METRICS: dict[str, tuple[str, str]] = {
    "sent": ("smq_queue_messages_sent", "Messages sent to the queue."),
    "received": ("smq_queue_messages_received", "Receives of messages, redeliveries included."),
    "redelivered": (
        "smq_queue_messages_redelivered",
        "Receives of a message that was received before (receive count above 1).",
    ),
    "deleted": ("smq_queue_messages_deleted", "Messages deleted by their consumers."),
    "visibility_expired": (
        "smq_queue_visibility_expired",
        "In-flight messages whose visibility timeout ran out (lease expiries).",
    ),
    "visibility_changed": ("smq_queue_visibility_changes", "Visibility changes that took effect."),
    "stale_receipts": (
        "smq_queue_stale_receipts",
        "Deletes and visibility changes with a receipt that no longer holds its message.",
    ),
    "dead_lettered": ("smq_queue_messages_dead_lettered", "Messages moved to the dead-letter queue."),
    "retention_expired": (
        "smq_queue_messages_retention_expired",
        "Messages dropped because their retention period ran out.",
    ),
    "empty_receives": ("smq_queue_empty_receives", "Receives that returned no message."),
    "moved_in": ("smq_queue_messages_moved_in", "Messages that arrived by redrive or a move task."),
    "deduplicated": (
        "smq_queue_deduplicated",
        "FIFO sends accepted and dropped as repeats of a deduplication id seen within 5 minutes.",
    ),
}


@dataclasses.dataclass(frozen=True)
class _Snapshot:
    """Everything one scrape read from Redis."""

    queues: list[QueueInfo]
    dead_letter_depths: dict[str, int]  # dead-letter queue name -> messages
    health: list[RedisHealth]
    skipped: int


class QueueCollector:
    """A Prometheus collector that reads queue and Redis numbers from Redis on every scrape.

    Its numbers come from Redis, not from the processes, so one exporter
    reports the whole fleet. When Redis cannot be read, a scrape still
    succeeds and reports ``smq_up 0``.
    """

    def __init__(self, client: Client, config: ExporterConfig | None = None) -> None:
        self.client = client
        self.config = config or ExporterConfig()
        self._version = __version__
        self._errors = 0
        self._lock = threading.Lock()
        self._was_up: bool | None = None

    def collect(self) -> Iterator[Any]:
        """Read Redis and yield the metric families (called by the registry per scrape)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        started = time.perf_counter()
        try:
            snapshot: _Snapshot | None = self._read()
        except Exception as error:  # a scrape answers whatever happens; smq_up says it failed
            snapshot = None
            with self._lock:
                self._errors += 1
                if self._was_up is not False:
                    if isinstance(error, SmqError):
                        log.warning("cannot read Redis, reporting smq_up 0: %s", error)
                    else:
                        log.exception("scrape failed, reporting smq_up 0")
                self._was_up = False
        else:
            with self._lock:
                if self._was_up is False:
                    log.info("Redis answers again")
                self._was_up = True
        yield GaugeMetricFamily(
            "smq_up", "1 when the last scrape read Redis, else 0.", 0 if snapshot is None else 1
        )
        info = GaugeMetricFamily("smq_build_info", "The smq version the exporter runs.", labels=["version"])
        info.add_metric([self._version], 1)
        yield info
        yield CounterMetricFamily(
            "smq_exporter_scrape_errors", "Scrapes that could not read Redis.", self._errors
        )
        if snapshot is not None:
            yield GaugeMetricFamily("smq_exporter_queues", "Queues reported.", len(snapshot.queues))
            yield GaugeMetricFamily(
                "smq_exporter_queues_skipped",
                "Queues matching the filter left out by the cap (--max-queues).",
                snapshot.skipped,
            )
            yield from _queue_families(snapshot, self.config.deprecated_names)
            yield from _health_families(snapshot.health)
        yield GaugeMetricFamily(
            "smq_exporter_scrape_duration_seconds",
            "Time this scrape took to read Redis.",
            time.perf_counter() - started,
        )

    def _read(self) -> _Snapshot:
        names = list(self.config.queues) if self.config.queues else self.client.list_queues()
        chosen, skipped = self.config.select(names)
        infos: dict[str, QueueInfo] = {}
        for name in chosen:
            info = self._attributes(name)
            if info is not None:
                infos[name] = info
        depths: dict[str, int] = {}
        for info in infos.values():
            policy = info.config.redrive_policy
            if policy is None or policy.dead_letter_queue in depths:
                continue
            target = infos.get(policy.dead_letter_queue) or self._attributes(policy.dead_letter_queue)
            if target is not None:
                depths[target.name] = target.visible + target.in_flight + target.delayed
        return _Snapshot(list(infos.values()), depths, self.client.redis_health(), skipped)

    def _attributes(self, name: str) -> QueueInfo | None:
        try:
            return self.client.queue(name).attributes()
        except QueueDoesNotExist:  # deleted since it was listed, or not created yet
            return None


def _queue_families(snapshot: _Snapshot, deprecated_names: bool = False) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def gauge(name: str, help_text: str) -> Any:
        return GaugeMetricFamily(name, help_text, labels=["queue"])

    visible = gauge("smq_queue_messages_visible", "Messages ready to be received.")
    in_flight = gauge(
        "smq_queue_messages_in_flight", "Messages received and not yet deleted or visible again."
    )
    delayed = gauge("smq_queue_messages_delayed", "Messages waiting for their delay to pass.")
    moving = gauge("smq_queue_messages_moving", "Messages between the two steps of a move to another queue.")
    oldest = gauge("smq_queue_oldest_message_age_seconds", "Age of the oldest visible message; 0 when none.")
    dead = GaugeMetricFamily(
        "smq_queue_dead_letter_messages",
        "Messages in the queue's dead-letter queue (visible, in flight and delayed).",
        labels=["queue", "dead_letter_queue"],
    )
    limit = gauge(
        "smq_queue_in_flight_limit", "The most messages the queue lets be in flight (over all its shards)."
    )
    used = gauge("smq_queue_in_flight_limit_used_ratio", "Messages in flight over the in-flight limit.")
    settings = {
        "visibility_timeout": gauge("smq_queue_visibility_timeout_seconds", "Default visibility timeout."),
        "message_retention_period": gauge(
            "smq_queue_message_retention_seconds", "How long a message is kept."
        ),
        "delay_seconds": gauge("smq_queue_delay_seconds", "Default delay of sent messages."),
        "receive_message_wait_time_seconds": gauge(
            "smq_queue_receive_wait_time_seconds", "Default long-poll wait of receives."
        ),
        "maximum_message_size": gauge("smq_queue_maximum_message_size_bytes", "Largest message accepted."),
    }
    max_receives = gauge(
        "smq_queue_max_receives", "Receives before a message moves to the dead-letter queue; 0: none."
    )
    old_max_receives = gauge(
        DEPRECATED_NAMES["smq_queue_max_receives"], "Deprecated: smq_queue_max_receives (removed in 0.3.0)."
    )
    # FIFO queues only: a standard queue has no groups, so no series rather than a 0 on
    # every queue (as dead_letter_messages has none for a queue without a dead-letter queue).
    groups = gauge("smq_queue_message_groups", "FIFO: message groups with messages stored.")
    groups_in_flight = gauge(
        "smq_queue_message_groups_in_flight",
        "FIFO: message groups with a message in flight (no other message of the group is handed out).",
    )
    # Standard queues whose messages carry group ids (fair queues), as SQS's metrics of the name.
    noisy = gauge("smq_queue_noisy_groups", "Fair queues: message groups noisy now (their messages wait).")
    visible_quiet = gauge(
        "smq_queue_messages_visible_in_quiet_groups",
        "Fair queues: messages ready to be received, outside noisy groups.",
    )
    in_flight_quiet = gauge(
        "smq_queue_messages_in_flight_in_quiet_groups",
        "Fair queues: messages in flight, outside noisy groups.",
    )
    oldest_quiet = gauge(
        "smq_queue_oldest_message_age_in_quiet_groups_seconds",
        "Fair queues: age of the oldest visible message outside noisy groups; 0 when none.",
    )
    counters = {
        counter: CounterMetricFamily(name, help_text, labels=["queue"])
        for counter, (name, help_text) in COUNTER_METRICS.items()
    }
    for info in snapshot.queues:
        label = [info.name]
        visible.add_metric(label, info.visible)
        in_flight.add_metric(label, info.in_flight)
        delayed.add_metric(label, info.delayed)
        moving.add_metric(label, info.moving)
        oldest.add_metric(label, info.oldest_age or 0.0)
        config = info.config
        # Each shard of a sharded queue has the limit.
        limit.add_metric(label, config.inflight_limit * config.shards)
        used.add_metric(label, info.in_flight / (config.inflight_limit * config.shards))
        for field, family in settings.items():
            family.add_metric(label, getattr(config, field))
        policy = config.redrive_policy
        max_receives.add_metric(label, policy.max_receive_count if policy else 0)
        old_max_receives.add_metric(label, policy.max_receive_count if policy else 0)
        if policy is not None and policy.dead_letter_queue in snapshot.dead_letter_depths:
            dlq = policy.dead_letter_queue
            dead.add_metric([info.name, dlq], snapshot.dead_letter_depths[dlq])
        for counter, family in counters.items():
            family.add_metric(label, info.counters.get(counter, 0))
        if config.fifo_queue:
            groups.add_metric(label, info.groups)
            groups_in_flight.add_metric(label, info.groups_in_flight)
        else:
            noisy.add_metric(label, info.noisy_groups)
            visible_quiet.add_metric(label, info.visible_in_quiet_groups)
            in_flight_quiet.add_metric(label, info.in_flight_in_quiet_groups)
            oldest_quiet.add_metric(label, info.oldest_age_in_quiet_groups or 0.0)
    yield from (visible, in_flight, delayed, moving, oldest, dead, limit, used)
    yield from settings.values()
    yield from (max_receives, groups, groups_in_flight, noisy, visible_quiet, in_flight_quiet, oldest_quiet)
    if deprecated_names:
        yield old_max_receives
    yield from counters.values()


def _health_families(health: list[RedisHealth]) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    used = GaugeMetricFamily("smq_redis_memory_used_bytes", "Memory Redis uses.", labels=["node"])
    limit = GaugeMetricFamily(
        "smq_redis_memory_max_bytes", "Redis maxmemory; 0 means no limit.", labels=["node"]
    )
    policy = GaugeMetricFamily(
        "smq_redis_maxmemory_policy_info",
        "Redis maxmemory-policy; smq needs noeviction or a volatile-* policy.",
        labels=["node", "policy"],
    )
    safe = GaugeMetricFamily(
        "smq_redis_eviction_policy_safe",
        "1 when maxmemory-policy keeps queue data (noeviction, volatile-*); at 0 smq refuses writes.",
        labels=["node"],
    )
    aof = GaugeMetricFamily("smq_redis_aof_enabled", "1 when the append-only file is on.", labels=["node"])
    aof_ok = GaugeMetricFamily(
        "smq_redis_aof_last_write_ok", "1 when the last append-only file write succeeded.", labels=["node"]
    )
    evicted = CounterMetricFamily("smq_redis_evicted_keys", "Keys Redis evicted.", labels=["node"])
    version = GaugeMetricFamily("smq_redis_version_info", "Redis server version.", labels=["node", "version"])
    for node in health:
        label = [node.node]
        used.add_metric(label, node.memory_used_bytes)
        limit.add_metric(label, node.memory_max_bytes)
        policy.add_metric([node.node, node.maxmemory_policy], 1)
        safe.add_metric(label, int(policy_safe(node.maxmemory_policy)))
        aof.add_metric(label, int(node.aof_enabled))
        aof_ok.add_metric(label, int(node.aof_last_write_ok))
        evicted.add_metric(label, node.evicted_keys)
        version.add_metric([node.node, node.version], 1)
    yield from (used, limit, policy, safe, aof, aof_ok, evicted, version)
