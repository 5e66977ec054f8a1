"""The command line, run as users run it."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import smq


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
