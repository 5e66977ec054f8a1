"""The Prometheus exporter of smq: backlog, counters and Redis health of the whole fleet.

Run it as ``smq exporter``, or from Python::

    from smq.exporter import Exporter, ExporterConfig

    exporter = Exporter(client, ExporterConfig(queue_pattern="jobs-.*"))
    server = exporter.serve("0.0.0.0", 9327)
"""

from ._collector import COUNTER_METRICS, QueueCollector
from ._config import ExporterConfig
from ._exporter import Exporter
from ._http import MetricsServer

__all__ = ["COUNTER_METRICS", "Exporter", "ExporterConfig", "MetricsServer", "QueueCollector"]
