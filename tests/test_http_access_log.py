"""Where `smq serve` writes its access log: stderr, a file, or nowhere; by default (auto) stderr
unless stderr is a terminal, where a line per request would bury what a developer reads."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from http_support import BIN, Server, json_client
from smq.embedded import EmbeddedRedis


def _access_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _list_queues(server: Server) -> None:
    json_client(server.url).list_queues()


def test_auto_writes_the_access_log_on_a_stderr_that_is_not_a_terminal(http_redis: EmbeddedRedis) -> None:
    server = Server(http_redis.url, "--no-auth", env={"SMQ_ACCESS_LOG": "auto"})
    try:
        _list_queues(server)
    finally:
        server.stop()
    assert [line["action"] for line in _access_lines(server.logs())] == ["ListQueues"]
    assert "access log is off" not in server.logs()


def test_auto_is_off_on_a_terminal_and_says_how_to_turn_it_on(http_redis: EmbeddedRedis) -> None:
    terminal, its_end = pty.openpty()  # stderr is a terminal, as in a developer's shell
    process = subprocess.Popen(
        [str(BIN / "smq"), "serve", "--redis-url", http_redis.url, "--port", "0", "--no-auth"],
        stdout=subprocess.PIPE,
        stderr=its_end,
        text=True,
        env={key: value for key, value in os.environ.items() if key != "SMQ_ACCESS_LOG"},
    )
    os.close(its_end)
    try:
        assert process.stdout is not None
        listening = re.search(r"listening on (\S+)", process.stdout.readline())
        assert listening is not None
        json_client(listening[1]).list_queues()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    shown = b""
    while select.select([terminal], [], [], 1)[0]:
        try:
            chunk = os.read(terminal, 4096)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        shown += chunk
    os.close(terminal)
    text = shown.decode()
    assert process.returncode == 0, text
    assert "the access log is off on a terminal; --access-log stderr (or a file) turns it on" in text
    assert not _access_lines(text.replace("\r\n", "\n")), text


def test_the_access_log_is_appended_to_a_file(http_redis: EmbeddedRedis, tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text('{"kept": "a line from before"}\n')
    server = Server(http_redis.url, "--no-auth", "--access-log", str(path))
    try:
        _list_queues(server)
        moved = path.rename(tmp_path / "access.log.1")  # as logrotate moves it
        time.sleep(0.1)
        _list_queues(server)
    finally:
        server.stop()
    assert f"access log appended to {path}" in server.logs()
    assert not _access_lines(server.logs())
    assert [line.get("action") for line in _access_lines(moved.read_text())] == [None, "ListQueues"]
    assert [line["action"] for line in _access_lines(path.read_text())] == ["ListQueues"]


def test_a_file_serve_cannot_write_is_one_line_at_start(http_redis: EmbeddedRedis, tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "access.log"
    done = subprocess.run(
        [str(BIN / "smq"), "serve", "--redis-url", http_redis.url, "--port", "0", "--no-auth"]
        + ["--access-log", str(missing)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"smq: --access-log {missing}: No such file or directory\n"


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--access-log", "off"), {}),
        (("--no-access-log",), {}),  # the flag of earlier versions
        ((), {"SMQ_ACCESS_LOG": "false"}),  # the value it read from the environment
        (("--access-log", "stderr", "--no-access-log"), {}),
    ],
)
def test_the_access_log_can_be_turned_off(
    http_redis: EmbeddedRedis, args: tuple[str, ...], env: dict[str, str]
) -> None:
    server = Server(http_redis.url, "--no-auth", *args, env=env)
    try:
        _list_queues(server)
    finally:
        server.stop()
    assert not _access_lines(server.logs())
    assert "access log" not in server.logs()


def test_the_old_true_value_of_smq_access_log_means_stderr(http_redis: EmbeddedRedis) -> None:
    server = Server(http_redis.url, "--no-auth", env={"SMQ_ACCESS_LOG": "true"})
    try:
        _list_queues(server)
    finally:
        server.stop()
    assert [line["action"] for line in _access_lines(server.logs())] == ["ListQueues"]
