"""Prometheus metrics of ``smq serve``: requests, errors and latency by SQS action."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._actions import ACTIONS

# Long polls wait up to 20 s, so the buckets reach past that.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0)


class ApiMetrics:
    """The API's metrics on a private registry (served at GET /metrics)."""

    def __init__(self, in_flight: Callable[[], int]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry: Any = CollectorRegistry()
        self._requests = Counter(
            "smq_api_requests",
            "Requests by SQS action and HTTP status.",
            labelnames=("action", "code"),
            registry=self.registry,
        )
        self._errors = Counter(
            "smq_api_errors",
            "Error replies by SQS action and error code.",
            labelnames=("action", "error"),
            registry=self.registry,
        )
        self._duration = Histogram(
            "smq_api_request_duration_seconds",
            "Time from request to reply, long-poll waits included.",
            labelnames=("action",),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        Gauge(
            "smq_api_requests_in_flight", "Requests being served now.", registry=self.registry
        ).set_function(lambda: float(in_flight()))
        # The labelled children of each (action, status) met so far, looked up once: ``labels()``
        # takes a lock and builds its key on every call. Bounded: the actions are known names.
        self._children: dict[tuple[str, int], tuple[Any, Any]] = {}

    def watch_connections(self, guard: Any) -> None:
        """Export the connection counts of ``guard`` (a ``ConnectionGuard``), read at each scrape."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        from prometheus_client.registry import Collector

        class _Connections(Collector):
            def collect(self) -> Any:
                yield GaugeMetricFamily("smq_api_connections", "HTTP connections open now.", value=guard.open)
                yield GaugeMetricFamily(
                    "smq_api_connections_max", "The most connections kept open.", value=guard.max_connections
                )
                closed = CounterMetricFamily(
                    "smq_api_connections_closed",
                    "Connections smq serve closed itself, by why: shed (at the limit, to admit a new "
                    "one), refused (503 at once) or header_timeout.",
                    labels=("reason",),
                )
                closed.add_metric(("shed",), guard.shed)
                closed.add_metric(("refused",), guard.refused)
                closed.add_metric(("header_timeout",), guard.timed_out)
                yield closed

        self.registry.register(_Connections())

    def observe(self, action: str, status: int, error: str | None, seconds: float) -> None:
        """Count one finished request; unknown action names count as ``unknown`` (bounded labels)."""
        if action not in ACTIONS:
            action = "unknown"
        children = self._children.get((action, status))
        if children is None:
            children = (self._requests.labels(action, str(status)), self._duration.labels(action))
            self._children[(action, status)] = children
        children[0].inc()
        if error is not None:
            self._errors.labels(action, error).inc()
        children[1].observe(seconds)

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The metrics in the format the scraper accepts, and its content type."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
