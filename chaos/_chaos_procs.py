"""The processes a chaos run starts, kills and starts again: Redis, `smq worker`, `smq serve`.

Each is stopped by its own pid; nothing here looks a process up by name.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _chaos_ledger import LEDGER_ENV, WORK_ENV

from smq.embedded import EmbeddedRedis, free_port

HERE = Path(__file__).resolve().parent  # workers import _chaos_ledger from here
_START_TIMEOUT = 30.0
_STOPPING = re.compile(r"stopping: released (\d+) unstarted messages; (\d+) handlers running")


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


class RedisNode:
    """A Redis server on a data folder and TCP port that stay the same across kills."""

    def __init__(self, folder: Path, *, appendfsync: str, server: str | None = None) -> None:
        self.kills = 0
        for _ in range(5):  # a port found free may be taken before the server binds it
            self.server = EmbeddedRedis(folder, port=free_port(), server=server, appendfsync=appendfsync)
            try:
                self.server.start()
                break
            except RuntimeError:
                continue
        else:
            raise RuntimeError("Redis did not start on any of 5 free ports")

    @property
    def url(self) -> str:
        return self.server.url

    def kill(self, down_seconds: float = 0.0) -> None:
        """SIGKILL the server, wait ``down_seconds``, start it again on the same folder and port."""
        process = self.server.process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.kills += 1
        time.sleep(down_seconds)
        for attempt in range(20):  # the port is ours again once the kernel lets go of it
            try:
                self.server.start()
                return
            except RuntimeError:
                time.sleep(0.1 * (attempt + 1))
        raise RuntimeError(f"Redis did not start again on port {self.server.port}")

    def stop(self) -> None:
        self.server.stop()


class WorkerProcess:
    """One `smq worker _chaos_ledger:handle` process writing to the ledger."""

    def __init__(
        self, folder: Path, redis_url: str, queue: str, args: list[str], work_ms: float, handler: str = "sync"
    ) -> None:
        self.stderr_path = folder / f"worker-{time.monotonic_ns()}.log"
        env = {
            **os.environ,
            LEDGER_ENV: str(folder / "ledger.jsonl"),
            WORK_ENV: str(work_ms),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
        }
        entry = "_chaos_ledger:handle_async" if handler == "async" else "_chaos_ledger:handle"
        command = [sys.executable, "-m", "smq", "worker", entry, "--queue", queue]
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [*command, "--redis-url", redis_url, *args],
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    def started(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"a worker exited with {self.process.returncode}:\n{self.log()[-2000:]}")
        return "worker on queue" in self.log()

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)


class Fleet:
    """``size`` worker processes; a killed or stopped one is replaced at once."""

    def __init__(
        self,
        folder: Path,
        redis_url: str,
        queue: str,
        size: int,
        args: list[str],
        work_ms: float,
        handler: str = "sync",
    ) -> None:
        self._where = (folder, redis_url, queue, args, work_ms, handler)
        self.workers = [self._spawn() for _ in range(size)]
        self.stopping: list[WorkerProcess] = []  # sent SIGTERM, not yet gone
        self.kills = 0
        self.bad_exits: list[str] = []
        # Over the graceful stops: unstarted messages released, handlers that were running.
        self.stop_counts = {"released_unstarted": 0, "handlers_running": 0}
        self.await_started()

    def _spawn(self) -> WorkerProcess:
        return WorkerProcess(*self._where)

    def await_started(self) -> None:
        _wait(lambda: all(worker.started() for worker in self.workers), _START_TIMEOUT, "workers to start")

    def check(self) -> None:
        """Raise if a worker of the fleet exited without being told to."""
        for worker in self.workers:
            if worker.process.poll() is not None:
                raise RuntimeError(
                    f"a worker exited with {worker.process.returncode}:\n{worker.log()[-2000:]}"
                )

    def kill(self, index: int) -> None:
        """SIGKILL worker ``index`` and start another in its place."""
        victim = self.workers[index]
        victim.signal(signal.SIGKILL)
        victim.process.wait()
        self.kills += 1
        self.workers[index] = self._spawn()

    def terminate(self, index: int) -> None:
        """SIGTERM worker ``index`` (a graceful stop) and start another in its place.

        A replacement still starting has no handler for SIGTERM yet (which would end it at once, with
        nothing to stop gracefully): the signal waits until the victim says it runs."""
        victim = self.workers[index]
        _wait(victim.started, _START_TIMEOUT, "the worker to start before its SIGTERM")
        victim.signal(signal.SIGTERM)
        self.stopping.append(victim)
        self.kills += 1
        self.workers[index] = self._spawn()

    def reap(self, timeout: float = 0.0) -> None:
        """Collect the workers that finished a graceful stop; each must exit 0 within ``timeout``."""
        deadline = time.monotonic() + timeout
        for worker in list(self.stopping):
            left = max(0.0, deadline - time.monotonic())
            try:
                code = worker.process.wait(left)
            except subprocess.TimeoutExpired:
                if timeout:
                    worker.signal(signal.SIGKILL)
                    worker.process.wait()
                    self.bad_exits.append(f"pid {worker.process.pid} did not stop within {timeout:g} s")
                    self.stopping.remove(worker)
                continue
            log = worker.log()
            if code != 0:
                self.bad_exits.append(f"pid {worker.process.pid} exited {code}:\n{log[-1500:]}")
            for released, running in _STOPPING.findall(log):
                self.stop_counts["released_unstarted"] += int(released)
                self.stop_counts["handlers_running"] += int(running)
            self.stopping.remove(worker)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every worker gracefully; those still alive after ``timeout`` s are killed."""
        for index in range(len(self.workers)):
            self.workers[index].signal(signal.SIGTERM)
            self.stopping.append(self.workers[index])
        self.workers = []
        self.reap(timeout)


class ServeProcess:
    """`smq serve` on a port that stays the same across kills."""

    def __init__(self, folder: Path, redis_url: str, args: Sequence[str] = ()) -> None:
        self.folder = folder
        self.redis_url = redis_url
        self.args = list(args)
        self.kills = 0
        self.process: subprocess.Popen[str] | None = None
        for _ in range(5):
            self.port = free_port()
            try:
                self._start()
                return
            except RuntimeError:
                continue
        raise RuntimeError("smq serve did not start on any of 5 free ports")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _start(self) -> None:
        log = (self.folder / f"serve-{time.monotonic_ns()}.log").open("w")
        command = [sys.executable, "-m", "smq", "serve", "--redis-url", self.redis_url]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port), "--no-auth", *self.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        log.close()
        ready = threading.Event()
        stdout = self.process.stdout
        assert stdout is not None

        def watch() -> None:
            for line in stdout:
                if "listening on" in line:
                    ready.set()

        threading.Thread(target=watch, daemon=True).start()
        deadline = time.monotonic() + _START_TIMEOUT
        while not ready.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"smq serve did not start on port {self.port}")

    def kill(self, down_seconds: float = 0.0) -> None:
        """SIGKILL the server and start it again on the same port."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.kills += 1
        time.sleep(down_seconds)
        for attempt in range(20):
            try:
                self._start()
                return
            except RuntimeError:
                time.sleep(0.1 * (attempt + 1))
        raise RuntimeError(f"smq serve did not start again on port {self.port}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.wait()
