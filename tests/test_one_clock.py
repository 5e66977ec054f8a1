"""One clock: client clocks that disagree by minutes change nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from smq.embedded import EmbeddedRedis

SKEWED_CLIENT = Path(__file__).with_name("skewed_client.py")


def _run(url: str, skew_seconds: int, *command: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(SKEWED_CLIENT), url, str(skew_seconds), *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_clients_with_clocks_minutes_apart_agree_on_visibility(redis_server: EmbeddedRedis) -> None:
    with redis_server.client() as admin:
        admin.flushall()
    url = redis_server.url
    ahead, behind = 300, -420  # seven minutes behind, five ahead
    sent = _run(url, ahead, "send", "hello")
    assert sent["clock_skew"] == ahead
    got = _run(url, ahead, "receive", "2")
    received_at = time.monotonic()
    assert got["bodies"] == ["hello"]
    # The client behind cannot take the message while it is in flight ...
    assert _run(url, behind, "receive", "2")["bodies"] == []
    # ... and gets it once the 2 s ran out by the Redis clock, not its own.
    again = _run(url, behind, "wait-receive", "10")
    assert again["bodies"] == ["hello"] and again["receive_count"] == 2
    assert time.monotonic() - received_at >= 1.9
    # Timestamps are the server's: the same whatever each client's clock says.
    assert abs(again["sent_at"] - time.time()) < 30
