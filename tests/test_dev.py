"""`./dev smq` runs in the caller's directory: a user's handlers, files and data folder are theirs."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import smq
from conftest import ROOT, need_dev_venv
from smq.embedded import EmbeddedRedis

DEV = ROOT / "dev"


def _dev(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(DEV), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_dev_without_a_command_prints_its_usage(tmp_path: Path) -> None:
    done = _dev(cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("usage: ./dev smq ARGS...")


def test_dev_smq_runs_a_handler_and_reads_files_of_the_callers_project(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: smq.Client
) -> None:
    need_dev_venv()
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "tasks.py").write_text(
        "from pathlib import Path\n\n\ndef handle(job):\n    Path('handled.txt').write_text(job.body)\n"
    )
    (tmp_path / "msg.txt").write_text("resize image 42")
    url = ["--redis-url", redis_server.url]
    assert _dev("smq", "queue", "create", "jobs", *url, cwd=tmp_path).returncode == 0
    sent = _dev("smq", "send", "jobs", "--file", "msg.txt", *url, cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    worker = subprocess.Popen(
        [str(DEV), "smq", "worker", "app.tasks:handle", "--queue", "jobs", "--wait-time", "1", *url],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "handled.txt").exists() and worker.poll() is None:
            assert time.monotonic() < deadline, "the handler did not run within 30 s"
            time.sleep(0.05)
        assert (tmp_path / "handled.txt").read_text() == "resize image 42", worker.stderr
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    assert redis_client.get_queue("jobs").attributes().counters["deleted"] == 1


def test_dev_smq_keeps_the_embedded_data_folder_in_the_callers_directory(tmp_path: Path) -> None:
    need_dev_venv()
    done = _dev("smq", "queue", "create", "jobs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".smq" / "redis" / "server.json").exists()
    assert not (tmp_path / ".venv").exists()
