"""An example handler for ``smq worker``: logs each message and pretends to work.

The image puts this folder on ``PYTHONPATH``, so a worker runs it as
``smq worker example:handle --queue jobs``. Your own handlers go in your own
image (``FROM`` this one, copy your package, run ``smq worker yourpkg.tasks:handle``).

Returning deletes the message; raising releases it for a retry after the
worker's backoff, and after the queue's maxReceiveCount it goes to the
dead-letter queue. A body of ``fail`` raises, to show that path.
"""

from __future__ import annotations

import logging
import os

import smq

log = logging.getLogger("example")


def handle(job: smq.Job) -> None:
    """Log the message, sleep a little (stopping early if the lease is lost), return."""
    log.info("message %s (receive %d): %s", job.message_id, job.receive_count, job.body[:200])
    if job.body == "fail":
        raise RuntimeError("the example handler fails messages whose body is 'fail'")
    # Seconds each message "works": EXAMPLE_WORK_SECONDS (default 0.2, 0 for none).
    # wait_lost doubles as the sleep: it returns at once if the worker lost the lease.
    if job.wait_lost(float(os.environ.get("EXAMPLE_WORK_SECONDS", "0.2"))):
        log.warning("message %s: lease lost (%s), stopping early", job.message_id, job.lost_reason)
        return
