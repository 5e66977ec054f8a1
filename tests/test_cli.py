"""The command line, run as users run it."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import smq
from smq.embedded import EmbeddedRedis


def _smq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "smq", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_demo_runs_on_an_embedded_redis_with_aof(tmp_path: Path) -> None:
    done = _smq("demo", "--data-dir", str(tmp_path), "--visibility-timeout", "1")
    assert done.returncode == 0, done.stderr
    assert "again (receive #2)" in done.stdout
    assert "visible=0 in_flight=0 delayed=0" in done.stdout
    assert list((tmp_path / "redis").glob("appendonly*"))  # AOF on, data in the folder


def test_demo_shares_the_embedded_redis_of_a_running_serve(tmp_path: Path) -> None:
    serve = subprocess.Popen(
        [sys.executable, "-m", "smq", "serve", "--port", "0", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        url = serve.stdout.readline().split("listening on ")[-1].strip()
        assert url.startswith("http://"), serve.stderr.read() if serve.stderr else url
        done = _smq("demo", "--data-dir", str(tmp_path), "--visibility-timeout", "1")
        assert done.returncode == 0, done.stderr
        assert "no Redis runs" not in done.stderr  # it used serve's
        with urllib.request.urlopen(f"{url}/ready", timeout=10) as ready:  # serve still has its Redis
            assert ready.status == 200
        with smq.Client(smq.Settings(data_dir=str(tmp_path))) as client:
            assert client.get_queue("smq-demo").attributes().counters["deleted"] == 3
    finally:
        serve.terminate()
        serve.wait(30)
    assert serve.returncode == 0


def test_demo_against_an_unreachable_redis_fails_with_one_line(tmp_path: Path) -> None:
    done = _smq("demo", "--redis-url", f"unix://{tmp_path}/none.sock")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smq: ")


def test_options_read_smq_environment_variables(tmp_path: Path) -> None:
    env = {"SMQ_REDIS_URL": f"unix://{tmp_path}/from-env.sock", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "smq", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 1 and "from-env.sock" in done.stderr


@pytest.mark.parametrize(
    "command", [["queue", "list"], ["serve", "--port", "0"], ["exporter", "--port", "0"]]
)
def test_a_redis_url_of_an_unknown_scheme_is_one_line_naming_the_option(command: list[str]) -> None:
    done = _smq(*command, "--redis-url", "foo://somewhere:6379")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr, done.stderr
    assert last.startswith("smq: --redis-url (or SMQ_REDIS_URL): Redis URL 'foo://somewhere:6379'"), last
    assert "redis://, rediss://, unix://" in last


def test_a_queue_that_exists_with_other_settings_is_told_in_the_options_words(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "redis") as node:
        assert _smq("queue", "create", "jobs", "--redis-url", node.url).returncode == 0
        done = _smq("queue", "create", "jobs", "--visibility-timeout", "60", "--redis-url", node.url)
        assert done.returncode == 1
        assert done.stderr.strip() == "smq: queue 'jobs' exists with --visibility-timeout 30, not 60"
        done = _smq("queue", "create", "j.fifo", "--content-based-deduplication", "--redis-url", node.url)
        assert done.returncode == 0
        done = _smq("queue", "create", "j.fifo", "--no-content-based-deduplication", "--redis-url", node.url)
        assert (
            done.stderr.strip() == "smq: queue 'j.fifo' exists with --content-based-deduplication on, not off"
        )


def test_smq_serve_says_once_that_redis_is_down_not_once_a_second() -> None:
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "smq",
            "serve",
            "--port",
            "0",
            "--no-auth",
            "--redis-url",
            "redis://127.0.0.1:1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        assert "listening on" in serve.stdout.readline()
        time.sleep(6)  # the move-task loop tries Redis every second or so
    finally:
        serve.terminate()
        _, err = serve.communicate(timeout=30)
    lines = [line for line in err.splitlines() if "127.0.0.1:1" in line and "Redis at" not in line]
    assert len(lines) == 1, err
    assert "said again every 60 s while it lasts" in lines[0]
