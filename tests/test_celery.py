"""Celery on smq: real Celery workers (subprocesses, ``python -m celery``) with kombu's SQS
transport, against a real ``smq serve``.

Every app here is ``docs/celery.md``'s ``tasks.py`` as the page shows it, the port of the
test's server being the only change: the page's example runs as written (its worker command,
its ``add.delay``), and the other tests' workers run ``tests/celery_app.py``, which imports that
``tasks.py`` and adds tasks that leave traces in a file. The test process sends with the same app.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

import smq
from http_support import ROOT, Server

PAGE = ROOT / "docs" / "celery.md"
#: The broker URL of the page's tasks.py; the tests change only its port.
PAGE_BROKER = "sqs://local:local@localhost:9324"
TESTS = Path(__file__).resolve().parent
#: What the page's tasks.py must say, so that what these tests show is what the page tells.
PAGE_OPTIONS = {
    "is_secure": False,
    "region": "us-east-1",
    "visibility_timeout": 3600,
    "wait_time_seconds": 20,
    "polling_interval": 0,
    "queue_name_prefix": "myapp-",
}
WORKER = ("worker", "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", "INFO")


def _page() -> str:
    return PAGE.read_text()


def page_tasks_py() -> str:
    (block,) = re.findall(r'```python title="tasks\.py"\n(.*?)```', _page(), re.S)
    assert PAGE_BROKER in block
    return str(block)


def page_command(start: str) -> list[str]:
    """The page's ``sh`` block that starts with ``start``, as an argument list."""
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", _page(), re.S) if b.startswith(start)]
    return shlex.split(block)


def tasks_py_for(server_url: str, credentials: str = "local:local") -> str:
    """The page's tasks.py, for the server at ``server_url`` (and with ``credentials``)."""
    port = urlsplit(server_url).port
    return page_tasks_py().replace(PAGE_BROKER, f"sqs://{credentials}@localhost:{port}")


def load_app(source: str) -> Any:
    """The Celery app of a tasks.py, made in this process (to send tasks with)."""
    namespace: dict[str, Any] = {"__name__": "tasks"}
    exec(compile(source, "tasks.py", "exec"), namespace)
    return namespace["app"]


def wait_for(condition: Callable[[], Any], timeout: float, what: str, log: Callable[[], str]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s\n--- worker logs ---\n{log()}")


class Worker:
    """``python -m celery ARGS`` in ``folder``, its output in a log file; stopped by its own pid."""

    def __init__(self, folder: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = folder / f"worker-{uuid.uuid4().hex[:8]}.log"
        paths = [str(folder), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", *args],
                cwd=folder,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(paths), **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def logs(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM (Celery's warm shutdown), then SIGKILL if it has not exited within ``timeout``."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        return self.process.returncode


@pytest.fixture
def workers() -> Iterator[Callable[..., Worker]]:
    """Start workers; any still running at the end of the test are stopped."""
    started: list[Worker] = []

    def start(folder: Path, *args: str, env: dict[str, str] | None = None) -> Worker:
        worker = Worker(folder, *args, env=env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def folder(tmp_path: Path, sqs_server: Server) -> Path:
    """A folder with the page's tasks.py for the test's server, as a user would have it."""
    (tmp_path / "tasks.py").write_text(tasks_py_for(sqs_server.url))
    return tmp_path


@pytest.fixture
def app(folder: Path, core: smq.Client) -> Iterator[Any]:
    """The page's app in this process, on the emptied server: tasks are sent with it."""
    made = load_app((folder / "tasks.py").read_text())
    yield made
    made.close()


def access_log(server: Server) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.logs().splitlines() if line.startswith("{")]


def trace_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def queue_settled(core: smq.Client, name: str) -> Callable[[], smq.QueueInfo | None]:
    """A condition: the queue's attributes once nothing is visible or in flight in it."""

    def settled() -> smq.QueueInfo | None:
        info = core.get_queue(name).attributes()
        return info if info.visible == 0 and info.in_flight == 0 and info.delayed == 0 else None

    return settled


def test_the_page_states_the_settings_its_tests_rely_on(app: Any) -> None:
    assert app.conf.broker_transport_options == PAGE_OPTIONS
    assert app.conf.task_acks_late is True
    assert "pip install '.[embedded]' 'celery[sqs]'" in _page()


def test_the_celery_page_example_runs_as_written(
    folder: Path, core: smq.Client, workers: Callable[..., Worker]
) -> None:
    command = page_command("celery ")
    assert command == ["celery", "-A", "tasks", "worker", "--loglevel", "INFO"]
    worker = workers(folder, *command[1:])  # the page's command, with this interpreter's celery
    send = page_command("python ")
    done = subprocess.run([sys.executable, *send[1:]], cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

    wait_for(
        lambda: re.search(r"Task tasks\.add\[[-0-9a-f]+\] succeeded in [0-9.e-]+s: 5\n", worker.logs()),
        30,
        "the worker ran add(2, 3)",
        worker.logs,
    )
    info = wait_for(queue_settled(core, "myapp-celery"), 10, "the message was deleted", worker.logs)
    assert info.config.visibility_timeout == 3600  # the page's visibility_timeout, set at creation
    assert info.counters == {**info.counters, "sent": 1, "received": 1, "deleted": 1}
    assert worker.stop() == 0
    assert "ERROR" not in worker.logs() and "CRITICAL" not in worker.logs()


def test_a_celery_worker_runs_tasks_through_smq_serve(
    app: Any, folder: Path, core: smq.Client, workers: Callable[..., Worker]
) -> None:
    trace = folder / "trace"
    queue = f"many-{uuid.uuid4().hex[:8]}"
    worker = workers(
        folder,
        "-A",
        "celery_app",
        *WORKER,
        "--pool",
        "threads",
        "--concurrency",
        "4",
        "--queues",
        queue,
        env={"CELERY_TEST_TRACE": str(trace)},
    )
    for number in range(50):
        app.send_task("celery_app.record", args=[number], queue=queue)

    wait_for(lambda: len(trace_lines(trace)) >= 50, 30, "50 tasks ran", worker.logs)
    info = wait_for(queue_settled(core, f"myapp-{queue}"), 10, "every message was deleted", worker.logs)
    assert sorted(trace_lines(trace)) == sorted(f"record {number}" for number in range(50))
    assert info.config.visibility_timeout == 3600
    assert info.counters["sent"] == info.counters["received"] == info.counters["deleted"] == 50
    assert "redelivered" not in info.counters
    assert worker.stop() == 0
    assert "ERROR" not in worker.logs() and "CRITICAL" not in worker.logs()


@pytest.mark.slow
def test_a_task_whose_worker_was_killed_runs_again_after_the_visibility_timeout(
    app: Any, folder: Path, core: smq.Client, workers: Callable[..., Worker]
) -> None:
    visibility_timeout = 3
    trace = folder / "trace"
    queue = f"killed-{uuid.uuid4().hex[:8]}"
    # The queue exists before Celery meets it: kombu keeps its timeout (3 s, not the page's 3600).
    core.create_queue(f"myapp-{queue}", visibility_timeout=visibility_timeout)
    args = ("-A", "celery_app", *WORKER, "--pool", "threads", "--concurrency", "1", "--queues", queue)
    env = {"CELERY_TEST_TRACE": str(trace)}
    first = workers(folder, *args, env=env)
    app.send_task("celery_app.long_once", args=[120], queue=queue)
    app.send_task("celery_app.record", args=[1], queue=queue)  # prefetched while the first task runs

    wait_for(lambda: trace_lines(trace), 30, "the task started", first.logs)
    on_smq = core.get_queue(f"myapp-{queue}")
    wait_for(lambda: on_smq.attributes().in_flight == 2, 10, "the second task was prefetched", first.logs)
    first.kill()
    assert trace_lines(trace) == [trace_lines(trace)[0]] and trace_lines(trace)[0].startswith("started ")
    in_flight = on_smq.attributes()
    assert (in_flight.visible, in_flight.in_flight) == (0, 2)  # both received, neither deleted

    def both_done() -> bool:
        lines = trace_lines(trace)
        return len(lines) >= 4 and any(line.startswith("finished ") for line in lines)

    second = workers(folder, *args, env=env)
    wait_for(both_done, 30, "the task ran again and finished, and the prefetched one ran", second.logs)
    lines = trace_lines(trace)
    starts = [line.split() for line in lines if line.startswith("started ")]
    assert len(starts) == 2 and starts[0][2] != starts[1][2]  # two runs, in two processes
    # The second run began once the first receive's visibility timeout had run out.
    assert float(starts[1][1]) - float(starts[0][1]) >= visibility_timeout - 0.5
    assert lines.count("record 1") == 1 and sum(line.startswith("finished ") for line in lines) == 1

    info = wait_for(queue_settled(core, f"myapp-{queue}"), 10, "both messages were deleted", second.logs)
    assert info.config.visibility_timeout == visibility_timeout
    counters = info.counters
    assert (counters["sent"], counters["received"], counters["deleted"]) == (2, 4, 2)
    assert counters["redelivered"] == counters["visibility_expired"] == 2
    assert "visibility_changed" not in counters  # they came back by the timeout, not by a release
    assert second.stop() == 0


def test_a_fifo_queue_runs_celery_tasks_in_order_and_once_per_deduplication_id(
    app: Any, folder: Path, core: smq.Client, workers: Callable[..., Worker]
) -> None:
    trace = folder / "trace"
    queue = f"ordered-{uuid.uuid4().hex[:8]}.fifo"
    for number in range(20):
        app.send_task("celery_app.record", args=[number], queue=queue)
        if number == 7:  # the same task again, with the id it was first sent with
            options = {"MessageGroupId": "default", "MessageDeduplicationId": "seven"}
            app.send_task("celery_app.record", args=[7], queue=queue, **options)
            app.send_task("celery_app.record", args=[7], queue=queue, **options)
    worker = workers(
        folder,
        "-A",
        "celery_app",
        *WORKER,
        "--concurrency",
        "1",
        "--queues",
        queue,
        env={"CELERY_TEST_TRACE": str(trace)},
    )
    wait_for(lambda: len(trace_lines(trace)) >= 21, 30, "21 tasks ran", worker.logs)
    info = wait_for(queue_settled(core, f"myapp-{queue}"), 10, "every message was deleted", worker.logs)
    expected = [f"record {number}" for number in range(20)]
    expected.insert(8, "record 7")
    assert trace_lines(trace) == expected
    assert info.config.fifo_queue
    assert (info.counters["sent"], info.counters["deduplicated"], info.counters["deleted"]) == (21, 1, 21)
    assert worker.stop() == 0


def test_celery_signs_its_requests_with_the_access_key_of_smq_serve(
    http_redis: Any, core: smq.Client, tmp_path: Path, workers: Callable[..., Worker]
) -> None:
    key_id, secret = "AKIDCELERY", "s3cr/et+with=reserved@chars"
    server = Server(http_redis.url, "--access-key", f"{key_id}:{secret}")
    try:
        quoted = f"{quote(key_id, safe='')}:{quote(secret, safe='')}"  # as the page says
        (tmp_path / "tasks.py").write_text(tasks_py_for(server.url, quoted))
        app = load_app(tasks_py_for(server.url, quoted))
        wrong = load_app(tasks_py_for(server.url, f"{key_id}:not-the-secret"))
        try:
            with pytest.raises(Exception, match="SignatureDoesNotMatch"):
                wrong.send_task("celery_app.record", args=[0], queue="signed")
            trace = tmp_path / "trace"
            worker = workers(
                tmp_path,
                "-A",
                "celery_app",
                *WORKER,
                "--pool",
                "threads",
                "--queues",
                "signed",
                env={"CELERY_TEST_TRACE": str(trace)},
            )
            app.send_task("celery_app.record", args=[1], queue="signed")
            wait_for(lambda: trace_lines(trace) == ["record 1"], 30, "the task ran", worker.logs)
            wait_for(queue_settled(core, "myapp-signed"), 10, "its message was deleted", worker.logs)
            assert worker.stop() == 0
        finally:
            app.close()
            wrong.close()
        # Refused: the one request of the wrong key; a long poll ended by the worker's stop is no error.
        refused = [entry["error"] for entry in access_log(server) if entry["status"] >= 400]
        assert [error for error in refused if error != "ClientClosedRequest"] == ["SignatureDoesNotMatch"]
    finally:
        server.stop()
