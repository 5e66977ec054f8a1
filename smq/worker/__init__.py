"""The worker runner: receive in batches, run a handler, heartbeat, delete.

Public names are re-exported by ``smq``: ``Worker``, ``WorkerConfig``, ``Job``.
"""

from ._config import WorkerConfig
from ._job import Job
from ._loader import load_handler
from ._metrics import OUTCOMES
from ._runner import Worker
from ._slots import Handler

__all__ = ["OUTCOMES", "Handler", "Job", "Worker", "WorkerConfig", "load_handler"]
