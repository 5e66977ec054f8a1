"""Real `smq worker` processes for tests, and the handler module they run.

The handler reads what to do from the message body (JSON: sleep seconds,
fail, wait for a lost lease) and appends one JSON line per event to the file
named by SMQ_TEST_LOG, so a test sees what every process did.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import smq

HANDLERS = """
import json, os, time

LOG = os.environ["SMQ_TEST_LOG"]


def record(kind, job):
    line = json.dumps({"event": kind, "id": job.message_id, "body": job.body, "n": job.receive_count,
                       "pid": os.getpid(), "at": time.time()})
    with open(LOG, "a") as log:
        log.write(line + "\\n")


def handle(job):
    record("start", job)
    spec = json.loads(job.body)
    deadline = time.monotonic() + spec.get("sleep", 0)
    while time.monotonic() < deadline and not job.lease_lost:
        time.sleep(0.02)
    if job.lease_lost:
        record("lost", job)
        return
    if spec.get("fail"):
        record("fail", job)
        raise RuntimeError("told to fail")
    record("end", job)


async def handle_async(job):
    import asyncio
    record("start", job)
    await asyncio.sleep(json.loads(job.body).get("sleep", 0))
    record("end", job)
"""


def body(**spec: Any) -> str:
    return json.dumps(spec)


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


class WorkerProcess:
    """One `python -m smq worker` subprocess, stopped by its own pid."""

    def __init__(
        self, folder: Path, redis_url: str, queue: str, *args: str, handler: str = "handlers:handle"
    ):
        self.folder = folder
        (folder / "handlers.py").write_text(HANDLERS)
        self.log_path = folder / "events.jsonl"
        self.stderr_path = folder / f"worker-{time.monotonic_ns()}.stderr"
        env = {**os.environ, "SMQ_TEST_LOG": str(self.log_path)}
        command = [sys.executable, "-m", "smq", "worker", handler, "--queue", queue]
        if redis_url is not None:
            command += ["--redis-url", redis_url]
        self._stderr = self.stderr_path.open("wb")
        self.process = subprocess.Popen(
            [*command, *args], cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=self._stderr
        )
        self.pid = self.process.pid
        wait_for(self._started, 30, "the worker to start")

    def _started(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"worker exited with {self.process.returncode}: {self.stderr()}")
        return "worker on queue" in self.stderr()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self._stderr.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.signal(signal.SIGKILL)
        self.wait(30)


def events(log_path: Path) -> list[dict[str, Any]]:
    if not log_path.exists():
        return []
    return [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]


class Running:
    """A worker run on a thread of the test, stopped (and joined) at the end."""

    def __init__(self, worker: smq.Worker) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        wait_for(lambda: worker._keeper is not None or self.error, 10, "the worker to start")

    def _run(self) -> None:
        try:
            self.worker.run(install_signal_handlers=False)
        except BaseException as error:
            self.error = error

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive()
        assert self.error is None
