"""The FastAPI example of docs/asyncio.md runs as written: uvicorn serving ``app.py``, an
``smq worker tasks:handle`` process, real HTTP posts, on a real Redis named by SMQ_REDIS_URL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import smq
from smq.embedded import free_port
from worker_support import wait_for

DOC = Path(__file__).resolve().parent.parent / "docs" / "asyncio.md"


def _files(text: str) -> dict[str, str]:
    """The example's files: each python block that begins with ``# <name>.py``."""
    found = {}
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        first = block.splitlines()[0]
        if re.fullmatch(r"# \w+\.py", first):
            found[first[2:]] = block
    return found


def _commands(text: str) -> list[str]:
    (shell,) = re.findall(r"```sh\n(.*?)```", text, re.S)
    return shell.strip().splitlines()


def test_the_fastapi_example_runs_as_written(redis_client: smq.Client, tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    text = DOC.read_text()
    files = _files(text)
    assert set(files) == {"app.py", "tasks.py"}
    for name, source in files.items():
        (tmp_path / name).write_text(source)
    serve, work, post = _commands(text)
    port = free_port()
    serve = serve.replace("--port 8000", f"--port {port}")
    assert serve.startswith("uvicorn ") and work.startswith("smq worker ") and post.startswith("curl ")
    env = {**os.environ, "SMQ_REDIS_URL": redis_client.settings.url}
    bin_dir = Path(sys.executable).parent
    log = (tmp_path / "worker.log").open("w")
    web = subprocess.Popen(
        [str(bin_dir / "uvicorn"), *serve.split()[1:]],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = None
    try:
        wait_for(lambda: redis_client.queue_exists("orders"), 30, "the app's queue")
        worker = subprocess.Popen(
            [sys.executable, "-m", "smq", *work.split()[1:]], cwd=tmp_path, env=env, stdout=log, stderr=log
        )
        payload = json.loads(re.search(r"-d '(.*)'", post).group(1))  # type: ignore[union-attr]
        for n in range(20):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/orders",
                data=json.dumps({**payload, "quantity": n}).encode(),
                headers={"content-type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 202 and json.load(answer)["message_id"]
        output = tmp_path / "worker.log"
        wait_for(lambda: output.read_text().count("shipped ") >= 20, 30, "20 orders shipped")
        time.sleep(0.3)
        shipped = re.findall(r"shipped (\d+) x book", output.read_text())
        assert sorted(map(int, shipped)) == list(range(20))  # each once
        wait_for(
            lambda: redis_client.get_queue("orders").attributes().counters.get("deleted", 0) == 20,
            10,
            "20 deletes",
        )
    finally:
        for process in (worker, web):
            if process is not None:
                process.terminate()
                process.wait(30)
        log.close()
