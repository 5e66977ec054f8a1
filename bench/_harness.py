"""What several benchmarks share: percentiles, a clean server between cells, worker events."""

from __future__ import annotations

import queue as queue_module
import time
from typing import Any

import redis

from smq.embedded import EmbeddedRedis


def percentile(values: list[int], fraction: float) -> float:
    """Percentile by linear interpolation between closest ranks."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(values: list[int]) -> dict[str, float]:
    """Calls, p50, p99 and mean in µs of durations in ns."""
    return {
        "calls": len(values),
        "p50_us": round(percentile(values, 0.50) / 1000, 1),
        "p99_us": round(percentile(values, 0.99) / 1000, 1),
        "mean_us": round(sum(values) / len(values) / 1000, 1),
    }


def await_rewrite(admin: redis.Redis, timeout: float = 120) -> None:
    """Wait until no append-only file rewrite runs or is scheduled."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = admin.info("persistence")
        if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the append-only file rewrite did not finish within {timeout:g} s")


def reset(server: EmbeddedRedis) -> None:
    """Leave nothing of a cell behind: empty the server and shrink its append-only file."""
    with server.client() as admin:
        admin.flushall()
        await_rewrite(admin)  # Redis may have started one of its own
        admin.bgrewriteaof()
        await_rewrite(admin)


def await_events(events: Any, processes: list[Any], kind: str, count: int, timeout: float) -> list[Any]:
    """Wait for ``count`` events of ``kind``; return their payloads; raise on a worker error or death."""
    deadline = time.monotonic() + timeout
    payloads: list[Any] = []
    while len(payloads) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers: {len(payloads)} of {count} reported {kind!r} within {timeout} s")
        try:
            got, label, payload = events.get(timeout=0.5)
        except queue_module.Empty:
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a worker exited with code {dead[0].exitcode}") from None
            continue
        if got == "error":
            raise RuntimeError(f"{label} failed:\n{payload}")
        if got == kind:
            payloads.append(payload)
    return payloads


def join_or_end(processes: list[Any], timeout: float) -> None:
    """Wait up to ``timeout`` s for each process to finish; terminate one that does not."""
    for process in processes:
        process.join(timeout=timeout)
        if process.is_alive():
            process.terminate()
            process.join()
