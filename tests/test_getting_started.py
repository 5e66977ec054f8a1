"""The getting-started material runs as written, in order, against one server.

``docs/getting-started.md`` and then the README's tour (which assumes the service that page
starts is running, and uses queues of its own): every ``sh`` block runs in bash (the
``source``/``export`` lines of earlier blocks first, as a shell the reader keeps open would),
every ``python`` block in a Python process, all in one folder that holds the checkout's ``dev``
and ``.venv``, as a fresh clone does. The only change to what is written: the server's free
port instead of 9324. Two blocks carry a marker the page does not show:

- ``<!-- test: serve -->``: the run command; the test starts it (on a free port) and keeps it
  running for the blocks after it.
- ``<!-- test: until QUEUE is empty -->``: a command that runs until Ctrl-C (a worker); the test
  starts it, waits until QUEUE has no message left, then sends Ctrl-C's SIGINT.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import smq
from conftest import ROOT, need_dev_venv

DOC_URL = "http://127.0.0.1:9324"
_BLOCK = re.compile(
    r"(?:<!-- test: (?P<marker>[^>]*?) -->\n)?```(?P<language>sh|python)\n(?P<code>.*?)```", re.S
)
_UNTIL = re.compile(r"until (\S+) is empty")


@dataclass(frozen=True)
class Block:
    where: str
    language: str
    code: str
    marker: str


def _tour() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## A short tour")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def blocks() -> list[Block]:
    found: list[Block] = []
    for where, text in (
        ("docs/getting-started.md", _read("docs/getting-started.md")),
        ("README.md", _tour()),
    ):
        for match in _BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 1
            found.append(Block(f"{where}:{line}", match["language"], match["code"], match["marker"] or ""))
    return found


def _read(relative: str) -> str:
    return (ROOT / relative).read_text()


class Folder:
    """A reader's clone: ``dev`` and ``.venv`` of the checkout, and their own files."""

    def __init__(self, path: Path) -> None:
        self.path = path
        (path / "dev").symlink_to(ROOT / "dev")
        (path / ".venv").symlink_to(ROOT / ".venv")
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("SMQ_", "AWS_", "VIRTUAL_ENV"))
        }
        self.env.update(
            AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, PYTHONUNBUFFERED="1"
        )
        self.shell_state: list[str] = []  # the `source` and `export` lines run so far
        self.url = DOC_URL

    def shell(self, code: str) -> str:
        script = "\n".join([*self.shell_state, code.replace(DOC_URL, self.url)])
        self.shell_state += [
            line for line in code.splitlines() if line.startswith(("source ", "export ", ". "))
        ]
        return script

    def run(self, block: Block) -> subprocess.CompletedProcess[str]:
        if block.language == "sh":
            command = ["bash", "-eo", "pipefail", "-c", self.shell(block.code)]
        else:
            command = [sys.executable, "-c", block.code.replace(DOC_URL, self.url)]
        return subprocess.run(
            command, cwd=self.path, env=self.env, capture_output=True, text=True, timeout=120
        )

    def client(self) -> smq.Client:
        return smq.Client(smq.Settings(data_dir=str(self.path / ".smq")))


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Folder]:
    need_dev_venv()
    yield Folder(tmp_path)


def _serve(folder: Folder, block: Block) -> subprocess.Popen[str]:
    assert block.code.strip() == "./dev smq serve", f"{block.where}: the serve marker names the run command"
    process = subprocess.Popen(
        ["./dev", "smq", "serve", "--port", "0"],
        cwd=folder.path,
        env=folder.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # blocks until it listens (or exits)
    match = re.search(r"listening on (http://\S+)", line)
    if not match:
        process.kill()
        raise AssertionError(f"{block.where}: smq serve did not start: {line!r} {process.communicate()}")
    folder.url = match[1]
    return process


def _until_empty(folder: Folder, block: Block) -> str:
    queue = _UNTIL.fullmatch(block.marker)
    assert queue, f"{block.where}: unknown marker {block.marker!r}"
    process = subprocess.Popen(
        ["bash", "-eo", "pipefail", "-c", folder.shell(block.code)],
        cwd=folder.path,
        env=folder.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        with folder.client() as client:
            deadline = time.monotonic() + 60
            while True:
                info = client.get_queue(queue[1]).attributes()
                if info.visible == info.in_flight == info.delayed == 0:
                    break
                assert process.poll() is None, f"{block.where} ended early: {process.communicate()[0]}"
                assert time.monotonic() < deadline, (
                    f"{block.where}: {queue[1]} still holds messages after 60 s"
                )
                time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, f"{block.where} after Ctrl-C: exit {process.returncode}\n{output}"
    return output


def test_the_getting_started_material_runs_as_written_in_order(folder: Folder) -> None:
    found = blocks()
    assert [b.marker for b in found if b.marker == "serve"] == ["serve"], "one run command, marked"
    server: subprocess.Popen[str] | None = None
    outputs: list[str] = []
    try:
        for block in found:
            if block.marker == "serve":
                server = _serve(folder, block)
                continue
            assert server is not None, f"{block.where} comes before the run command"
            if block.marker:
                outputs.append(_until_empty(folder, block))
                continue
            done = folder.run(block)
            assert done.returncode == 0, f"{block.where} failed:\n{block.code}\n{done.stdout}\n{done.stderr}"
            outputs.append(done.stdout)
        everything = "\n".join(outputs)
        assert "my first message" in everything
        assert "got resize image 42" in everything
        assert "sending welcome mail for user 7" in everything
        assert "resizing resize image 7 receive 1" in everything, everything
        assert "resizing resize image 8" in everything, everything
        assert "building weekly report for team 3" in everything  # the README's tour
        with folder.client() as client:  # what the blocks did is in the folder's own server
            assert set(client.list_queues()) >= {"hello", "jobs", "emails", "reports"}
            assert client.get_queue("reports").attributes().counters["deleted"] == 1
            assert client.get_queue("jobs").attributes().counters["deleted"] >= 3
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            server.wait(60)
    assert server.returncode == 0
