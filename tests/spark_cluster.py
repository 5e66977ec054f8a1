"""A Spark standalone cluster started by a test, from the pip PySpark (which has no ``sbin/``).

``standalone_cluster(workers=2)`` starts a master and the workers with Spark's own
``spark-class`` on free ports of 127.0.0.1, everything they write (logs, work and local
folders) in a private temp folder, waits until the master's JSON status shows every worker
ALIVE, and yields a :class:`StandaloneCluster`. On exit it stops every process it started, by
pid (SIGTERM, then SIGKILL after a deadline), the executor JVMs the workers started and their
Python workers included.

Linux only: processes are found through ``/proc``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import spark_jvm

from conftest import patience
from smq.embedded import free_port
from smq.spark import java_home

EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"
_START_ATTEMPTS = 5  # a free port taken by someone else before the daemon bound it: try others


def spark_home() -> Path:
    """The pip PySpark's Spark home: the ``pyspark`` package folder (``bin/``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).parent


def spark_java_home() -> str:
    """The JAVA_HOME Spark's scripts need (what ``smq java-home`` prints)."""
    home = java_home()
    if home is not None:
        return home
    java = shutil.which("java")
    assert java is not None, "java_home() said java on PATH will do, yet there is none"
    return str(Path(java).resolve().parent.parent)


def _children(pid: int) -> list[int]:
    found = []
    for tasks in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found.extend(int(child) for child in tasks.read_text().split())
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first then theirs."""
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in _children(todo.pop()):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited: only its parent's wait is missing


@dataclass
class StandaloneCluster:
    """A running standalone cluster: its master URL and the pids of its daemons."""

    master_url: str
    webui_url: str
    master_pid: int
    worker_pids: list[int]
    folder: Path
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    def status(self) -> dict[str, Any]:
        """The master's JSON status (workers, applications, ...)."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as reply:
            return dict(json.load(reply))

    def executor_pids(self) -> list[int]:
        """The executor JVMs running now: children of a worker running ``CoarseGrainedExecutorBackend``."""
        return [
            child
            for worker in self.worker_pids
            for child in _children(worker)
            if EXECUTOR_CLASS in command_line(child) and _alive(child)
        ]

    def wait_for_executors(self, count: int, timeout: float = 60) -> list[int]:
        """Wait until at least ``count`` executor JVMs run; their pids."""
        deadline = time.monotonic() + patience(timeout)
        while True:
            found = self.executor_pids()
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(found)} executors after {timeout} s, not {count}\n{self.logs()}")
            time.sleep(0.2)

    def logs(self, tail: int = 3000) -> str:
        """The end of every daemon's output, for a failure message."""
        return _logs(self.folder, tail)


def _logs(folder: Path, tail: int = 3000) -> str:
    parts = []
    for path in sorted(folder.glob("*.out")):
        parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-tail:]}")
    return "\n".join(parts)


def _environment(folder: Path) -> dict[str, str]:
    env = dict(os.environ, JAVA_HOME=spark_java_home())
    for name, sub in (
        ("SPARK_LOG_DIR", "logs"),
        ("SPARK_LOCAL_DIRS", "local"),
        ("SPARK_WORKER_DIR", "work"),
        ("SPARK_PID_DIR", "pids"),
        ("SPARK_CONF_DIR", "conf"),
    ):
        (folder / sub).mkdir(exist_ok=True)
        env[name] = str(folder / sub)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    # A port taken between free_port() and the bind fails the daemon (no silent move to the next
    # port, which the URLs here would not know): it starts again on other ports.
    env["SPARK_MASTER_OPTS"] = env["SPARK_WORKER_OPTS"] = "-Dspark.port.maxRetries=0"
    # The master's REST submission server listens on the fixed port 6066 by default: a second
    # cluster on the machine (another worker's, another run's) failed to start there, and its
    # master never accepted its workers. Jobs go to spark://, so it is off.
    env["SPARK_MASTER_OPTS"] += " -Dspark.master.rest.enabled=false"
    # Set, so that spark-class need not find it by running whichever python3 is on PATH.
    env["SPARK_HOME"] = str(spark_home())
    env["SPARK_DAEMON_JAVA_OPTS"] = spark_jvm.options()
    return env


def _status(webui_url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{webui_url}/json/", timeout=2) as reply:
            return dict(json.load(reply))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def _wait_until(ready: Any, process: subprocess.Popen[bytes], deadline: float, what: str, log: Path) -> bool:
    """Poll ``ready()`` until it is true (True), or ``process`` exits (False); raise at the deadline."""
    while not ready():
        if process.poll() is not None:
            return False
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready in time\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)
    return True


def stop_processes(pids: list[int], processes: list[subprocess.Popen[bytes]], timeout: float = 30) -> None:
    """SIGTERM each of ``pids``, then SIGKILL those still running after ``timeout``; reap ``processes``."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + patience(timeout)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
    kill_deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids) and time.monotonic() < kill_deadline:
        time.sleep(0.1)  # killed children of a daemon: reaped by init once their parent is gone


@contextlib.contextmanager
def standalone_cluster(
    workers: int = 2, cores_per_worker: int = 1, memory: str = "1g", timeout: float = 300
) -> Iterator[StandaloneCluster]:
    """Start a master and ``workers`` workers; yield the cluster once every worker is ALIVE."""
    folder = Path(tempfile.mkdtemp(prefix="smq-spark-cluster-"))
    env = _environment(folder)
    launcher = str(spark_home() / "bin" / "spark-class")
    processes: list[subprocess.Popen[bytes]] = []
    deadline = time.monotonic() + patience(timeout)
    try:
        for attempt in range(_START_ATTEMPTS):
            port, webui = free_port(), free_port()
            webui_url = f"http://127.0.0.1:{webui}"
            log = folder / f"master-{attempt}.out"
            master = _start(
                [launcher, "org.apache.spark.deploy.master.Master"]
                + ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)],
                env,
                log,
            )
            processes.append(master)
            up = _wait_until(lambda: _status(webui_url) is not None, master, deadline, "the master", log)  # noqa: B023
            if up:
                break
            _raise_unless_port_taken("the master", log)
        else:
            raise RuntimeError(f"the master did not start in {_START_ATTEMPTS} attempts\n{log.read_text()}")
        master_url = f"spark://127.0.0.1:{port}"

        def start_worker(n: int, attempt: int) -> tuple[subprocess.Popen[bytes], str, Path]:
            work = folder / "work" / f"worker-{n}"
            work.mkdir(parents=True, exist_ok=True)
            log = folder / f"worker-{n}-{attempt}.out"
            webui = free_port()
            worker = _start(
                [launcher, "org.apache.spark.deploy.worker.Worker", master_url]
                + ["--host", "127.0.0.1", "--cores", str(cores_per_worker), "--memory", memory]
                + ["--webui-port", str(webui), "--work-dir", str(work)],
                env,
                log,
            )
            processes.append(worker)
            return worker, f"http://127.0.0.1:{webui}", log

        # All at once; each known by the web UI address the master shows for it.
        pending = {n: (0, *start_worker(n, 0)) for n in range(workers)}
        registered: dict[int, int] = {}
        while pending:
            alive = _alive_workers(webui_url)
            for n, (attempt, worker, address, log) in list(pending.items()):
                if address in alive:
                    registered[n] = worker.pid
                    del pending[n]
                elif worker.poll() is not None:
                    _raise_unless_port_taken(f"worker {n}", log)
                    if attempt + 1 == _START_ATTEMPTS:
                        raise RuntimeError(f"worker {n} did not start in {_START_ATTEMPTS} attempts")
                    pending[n] = (attempt + 1, *start_worker(n, attempt + 1))
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"workers {sorted(pending)} not ALIVE in time\n{_logs(folder)}")
            time.sleep(0.2)
        cluster = StandaloneCluster(
            master_url=master_url,
            webui_url=webui_url,
            master_pid=master.pid,
            worker_pids=[registered[n] for n in range(workers)],
            folder=folder,
            _processes=processes,
        )
        yield cluster
    finally:
        started = [p.pid for p in processes]
        everything = [child for pid in started for child in descendants(pid)] + started
        stop_processes(everything, processes)
        shutil.rmtree(folder, ignore_errors=True)


def _raise_unless_port_taken(what: str, log: Path) -> None:
    """After a daemon exited: go on (to try other ports) if it lost a port, else fail with its log."""
    output = log.read_text(errors="replace")
    if "BindException" not in output and "Address already in use" not in output:
        raise RuntimeError(f"{what} exited\n{output[-3000:]}")


def _alive_workers(webui_url: str) -> list[str]:
    """The web UI addresses of the workers the master shows ALIVE."""
    status = _status(webui_url) or {}
    return [str(w.get("webuiaddress")) for w in status.get("workers", []) if w.get("state") == "ALIVE"]


# -- jobs ------------------------------------------------------------------------------------

SMQ = str(Path(sys.executable).parent / "smq")


def submit(
    master: str, job: Path, env: dict[str, str], *options: str, new_session: bool = False
) -> subprocess.Popen[str]:
    """Start ``smq spark-submit`` of ``job`` on ``master`` (no UI, small executors), in ``job``'s folder
    (with ``new_session``, as a process group of its own, for a kill -9 of the whole driver)."""
    command = [SMQ, "spark-submit", "--master", master]
    command += ["--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=512m"]
    jvm = spark_jvm.options()
    command += [
        "--conf",
        f"spark.driver.extraJavaOptions={jvm}",
        "--conf",
        f"spark.executor.extraJavaOptions={jvm}",
    ]
    command += [*options, str(job)]
    return subprocess.Popen(
        command,
        cwd=job.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


def finish(job: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str, str]:
    """Wait for a submitted job: its exit code, stdout and stderr (killed at the deadline)."""
    try:
        out, err = job.communicate(timeout=patience(timeout))
    except subprocess.TimeoutExpired:
        job.kill()
        out, err = job.communicate()
    return job.returncode, out, err
