"""The exporter: one registry with the queue collector and the process metrics."""

from __future__ import annotations

from typing import Any

from ..client._client import Client
from ._collector import QueueCollector
from ._config import ExporterConfig
from ._http import MetricsServer


class Exporter:
    """Serves queue backlog, counters and Redis health to Prometheus.

    ::

        exporter = Exporter(smq.Client(settings=Settings(url=..., allow_eviction=True)))
        server = exporter.serve("0.0.0.0", 9327)   # /metrics and /healthz
        ...
        server.stop()

    Every scrape reads Redis (one script call per reported queue, plus one
    ``INFO`` per Redis server), so one exporter reports the whole fleet.
    Give it a client with ``allow_eviction=True``: it must report a Redis
    whose eviction policy is unsafe rather than refuse to read it.
    """

    def __init__(self, client: Client, config: ExporterConfig | None = None) -> None:
        from prometheus_client import CollectorRegistry, ProcessCollector

        self.config = config or ExporterConfig()
        self.collector = QueueCollector(client, self.config)
        self.registry: Any = CollectorRegistry()
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)

    def metrics_text(self) -> str:
        """One scrape, in the Prometheus text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def serve(self, host: str = "127.0.0.1", port: int = 9327) -> MetricsServer:
        """Start serving ``/metrics`` and ``/healthz`` in a background thread."""
        server = MetricsServer(self.registry, host, port)
        server.start()
        return server
