"""The Celery app that the workers of ``tests/test_celery.py`` run (``celery -A celery_app``).

Its app is ``docs/celery.md``'s ``tasks.py``, which the test writes into the worker's folder
with the port of the test's ``smq serve``: the workers run with the page's settings, unchanged.
The tasks here leave their traces in the file named by ``CELERY_TEST_TRACE``, one line each.
"""

from __future__ import annotations

import os
import time

from tasks import app

__all__ = ["app", "record", "long_once"]


def _trace(line: str) -> None:
    """Append one line to the trace file (one ``write`` in append mode: lines never interleave)."""
    descriptor = os.open(os.environ["CELERY_TEST_TRACE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{line}\n".encode())
    finally:
        os.close(descriptor)


@app.task
def record(number: int) -> int:
    _trace(f"record {number}")
    return number


@app.task
def long_once(seconds: float) -> None:
    """Record the start; the first run then sleeps ``seconds`` (time to be killed in), later runs do not."""
    _trace(f"started {time.time()} {os.getpid()}")
    with open(os.environ["CELERY_TEST_TRACE"]) as trace:
        starts = sum(1 for line in trace if line.startswith("started "))
    if starts == 1:
        time.sleep(seconds)
    _trace(f"finished {time.time()}")
