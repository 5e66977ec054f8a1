"""Prometheus metrics of one worker process, on a registry of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

OUTCOMES = ("succeeded", "failed", "lost", "released")
"""How a message held by a worker ends: handler returned (deleted); handler
raised (released for retry after the backoff); lease lost (another consumer
may hold it; not deleted); released unfinished by a graceful stop."""

# Handlers run from milliseconds to hours: the default buckets stop at 10 s.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 43200)


class WorkerMetrics:
    """The worker's counters, histogram and gauges, labelled by queue."""

    def __init__(self, queue: str, held: Callable[[], int], running: Callable[[], int]) -> None:
        # Imported here: importing smq must not import (and configure) prometheus_client.
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        messages = Counter(
            "smq_worker_messages",
            "Messages a worker finished with, by outcome.",
            labelnames=("queue", "outcome"),
            registry=self.registry,
        )
        self._outcomes = {outcome: messages.labels(queue, outcome) for outcome in OUTCOMES}
        self.processing = Histogram(
            "smq_worker_processing_seconds",
            "Time a handler ran, from start to return or raise.",
            buckets=_BUCKETS,
            labelnames=("queue",),
            registry=registry,
        ).labels(queue)
        self.extensions = Counter(
            "smq_worker_visibility_extensions",
            "Visibility timeouts extended by the heartbeat (one per message).",
            labelnames=("queue",),
            registry=registry,
        ).labels(queue)
        self.lost_leases = Counter(
            "smq_worker_lost_leases",
            "Messages whose lease the worker lost: stale receipt or timeout already run out.",
            labelnames=("queue",),
            registry=registry,
        ).labels(queue)
        self.ceiling_reached = Counter(
            "smq_worker_visibility_ceiling_reached",
            "Messages whose heartbeat stopped at the 12-hour visibility ceiling.",
            labelnames=("queue",),
            registry=registry,
        ).labels(queue)
        self.redis_errors = Counter(
            "smq_worker_redis_errors",
            "Calls to Redis that failed (receive, extend, delete, release); retried.",
            labelnames=("queue",),
            registry=registry,
        ).labels(queue)
        Gauge(
            "smq_worker_messages_in_flight",
            "Messages this worker holds: received and not yet deleted or released.",
            labelnames=("queue",),
            registry=registry,
        ).labels(queue).set_function(lambda: float(held()))
        Gauge(
            "smq_worker_handlers_running",
            "Handlers running now.",
            labelnames=("queue",),
            registry=registry,
        ).labels(queue).set_function(lambda: float(running()))

    def outcome(self, outcome: str) -> None:
        self._outcomes[outcome].inc()

    def serve(self, host: str, port: int) -> tuple[Any, int]:
        """Start the /metrics HTTP server; returns (server, port)."""
        from prometheus_client import start_http_server

        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return server, int(server.server_address[1])
