"""Throughput and heartbeat cost of the worker runner (`smq worker`, `smq.Worker`).

The baseline is the loop a user would write by hand with the core API in one
process: receive 10 (long poll), delete those 10 in one batch. Against it, the
runner with a handler that does nothing: in-process with 1 and 8 handler
threads, 8 async tasks, and 1 and 2 `smq worker` processes. Each case drains
the same number of preloaded 100-byte messages from its own queue on one
freshly started Redis (TCP on 127.0.0.1); the figure is messages deleted per
second, from the first delete to the last (start-up excluded). The ratio says what the
runner's heartbeat, threads and bookkeeping cost against the bare loop. For
the cases in this process, the bench also counts context switches of the
process per batch of 10 (voluntary: a thread waited, for Redis or for another
thread; involuntary: the kernel took its core) and its CPU time per message.

Then the heartbeat alone: one `smq worker` process holds --held messages
(async handlers that sleep) under a 2 s visibility timeout, so each is
extended about once a second; we count extension calls and messages extended
per second, and the worker's CPU.

``--busy N`` starts N busy loops (``python -c 'while True: pass'``) before the
rounds and stops them after, so that the cases compete for the cores as on a
loaded machine; the load average is recorded after every round either way.

Run: ``.venv/bin/python bench/worker.py [--messages 20000] [--repeat 3] [--held 1000] [--busy 0]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import smq
from smq.embedded import EmbeddedRedis, free_port

RESULTS = Path(__file__).resolve().parent / "results"
BODY = ("0123456789abcdefghijklmnopqrstuvwxyz" * 3)[:100]
BASE = "hand-written loop (receive 10, delete batch)"
HANDLERS = """
import asyncio

def noop(job):
    pass

async def hold(job):
    await asyncio.sleep(3600)
"""


def _preload(client: smq.Client, name: str, count: int) -> smq.Queue:
    client.delete_queue(name)
    queue = client.create_queue(name, visibility_timeout=30)
    for start in range(0, count, 10):
        queue.send_batch([smq.SendEntry(str(i), BODY) for i in range(min(10, count - start))])
    return queue


def _deleted(queue: smq.Queue) -> int:
    return queue.attributes().counters.get("deleted", 0)


def _drain_rate(queue: smq.Queue, count: int, timeout: float = 600) -> float:
    """Messages deleted per second, from the first delete seen to the last (start-up excluded)."""
    deadline = time.monotonic() + timeout
    first: tuple[float, int] | None = None
    while True:
        deleted = _deleted(queue)
        now = time.monotonic()
        if first is None and deleted > 0:
            first = (now, deleted)
        if deleted >= count and first is not None:
            return (count - first[1]) / (now - first[0])
        if now > deadline:
            raise RuntimeError(f"{queue.name}: only {deleted} of {count} deleted")
        time.sleep(0.01)


def hand_loop(client: smq.Client, queue: smq.Queue, count: int) -> float:
    started = time.monotonic()
    done = 0
    while done < count:
        messages = queue.receive(10, wait_time_seconds=1)
        if messages:
            queue.delete_batch([smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(messages)])
            done += len(messages)
    return count / (time.monotonic() - started)


def hand_loop_pipelined(client: smq.Client, queue: smq.Queue, count: int) -> float:
    started = time.monotonic()
    received = 0
    finished: list[smq.DeleteEntry] = []
    while received < count:
        _, messages = queue.delete_and_receive(finished, 10, wait_time_seconds=1)
        received += len(messages)
        finished = [smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(messages)]
    queue.delete_batch(finished)  # the last batch: no receive to ride on
    return count / (time.monotonic() - started)


def in_process(handler: Callable[[smq.Job], Any], concurrency: int) -> Callable[..., float]:
    def run(client: smq.Client, queue: smq.Queue, count: int) -> float:
        config = smq.WorkerConfig(concurrency=concurrency, prefetch=10)
        worker = smq.Worker(client, queue, handler, config=config)
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        rate = _drain_rate(queue, count)
        worker.stop()
        thread.join(60)
        return rate

    return run


def processes(
    folder: Path, url: str, n: int, concurrency: int, source: str | None = None
) -> Callable[..., float]:
    """``n`` `smq worker` processes; with ``source``, of the smq checkout in that folder."""

    def run(client: smq.Client, queue: smq.Queue, count: int) -> float:
        workers = [
            _spawn(folder, url, queue.name, "bench_handlers:noop", concurrency, source=source)
            for _ in range(n)
        ]
        try:
            return _drain_rate(queue, count)
        finally:
            for worker in workers:
                worker.terminate()
                worker.wait(60)

    return run


def _spawn(
    folder: Path, url: str, queue: str, handler: str, concurrency: int, *args: str, source: str | None = None
) -> Any:
    command = [sys.executable, "-m", "smq", "worker", handler, "--queue", queue, "--redis-url", url]
    command += ["--concurrency", str(concurrency), "--prefetch", "10", "--log-level", "warning", *args]
    env = None
    if source is not None:
        env = {**os.environ, "PYTHONPATH": source}  # before the installed smq; `-m` adds the folder
    return subprocess.Popen(
        command, cwd=folder, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env
    )


def _busy_loops(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` processes that only burn CPU: the other tenants of a loaded machine."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _stop(loops: list[subprocess.Popen[bytes]]) -> None:
    for loop in loops:
        loop.kill()
        loop.wait(10)


def _cost(before: resource.struct_rusage, messages: int) -> tuple[float, float, float]:
    """This process's (voluntary, involuntary) context switches per batch of 10, CPU µs per message."""
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    batches = messages / 10
    return (
        (after.ru_nvcsw - before.ru_nvcsw) / batches,
        (after.ru_nivcsw - before.ru_nivcsw) / batches,
        cpu / messages * 1e6,
    )


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def heartbeat(client: smq.Client, folder: Path, url: str, held: int, seconds: float) -> dict[str, float]:
    queue = _preload(client, "bench-heartbeat", held)
    worker = _spawn(
        folder, url, queue.name, "bench_handlers:hold", held, "--prefetch", "0", "--visibility-timeout", "2"
    )
    try:
        deadline = time.monotonic() + 60
        while queue.attributes().in_flight < held:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("the worker did not take every message")
            time.sleep(0.05)
        time.sleep(2.5)  # into the steady state
        changed, cpu, started = _changed(queue), _cpu_seconds(worker.pid), time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - started
        extended = (_changed(queue) - changed) / elapsed
        cpu_share = (_cpu_seconds(worker.pid) - cpu) / elapsed
        info = queue.attributes()
        expired = info.counters.get("visibility_expired", 0)
    finally:
        worker.terminate()
        worker.wait(60)
    return {"held": held, "extended_per_s": extended, "worker_cpu": cpu_share, "expired": expired}


def _changed(queue: smq.Queue) -> int:
    return queue.attributes().counters.get("visibility_changed", 0)


async def _noop_async(job: smq.Job) -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--held", type=int, default=1000, help="messages of the heartbeat part (0: skip it)")
    parser.add_argument(
        "--cases",
        default="hand-pipelined,worker-1,worker-8,worker-async,process-1,process-2",
        help="comma list of hand-pipelined, worker-1, worker-8, worker-async, process-1, process-2 "
        "(the hand-written loop always runs, first in each round), and process-1-other",
    )
    parser.add_argument(
        "--other-source",
        default=None,
        help="another smq checkout (a git worktree): case process-1-other runs its `smq worker`, for a "
        "before/after in one run",
    )
    parser.add_argument(
        "--busy", type=int, default=0, help="busy loops (one core each) that run beside the rounds"
    )
    parser.add_argument("--heartbeat-seconds", type=float, default=10)
    parser.add_argument("--redis-server", default=None)
    parser.add_argument("--output", type=Path, default=RESULTS / "worker.json")
    args = parser.parse_args()
    # A SIGTERM unwinds like an error: the busy loops, workers and Redis this run started stop too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        (folder / "bench_handlers.py").write_text(HANDLERS)
        server = EmbeddedRedis(folder / "redis", port=free_port(), server=args.redis_server)
        with server, smq.Client(server.url) as client:
            every: dict[str, tuple[str, Callable[..., float]]] = {
                "hand": (BASE, hand_loop),
                "hand-pipelined": ("hand-written loop (delete_and_receive)", hand_loop_pipelined),
                "worker-1": ("smq.Worker, 1 thread", in_process(lambda job: None, 1)),
                "worker-8": ("smq.Worker, 8 threads", in_process(lambda job: None, 8)),
                "worker-async": ("smq.Worker, 8 async tasks", in_process(_noop_async, 8)),
                "process-1": ("smq worker, 1 process (8 threads)", processes(folder, server.url, 1, 8)),
                "process-2": ("smq worker, 2 processes (8 threads)", processes(folder, server.url, 2, 8)),
            }
            if args.other_source:
                every["process-1-other"] = (
                    f"smq worker, 1 process (8 threads), code of {args.other_source}",
                    processes(folder, server.url, 1, 8, source=args.other_source),
                )
            chosen = ["hand", *(key for key in args.cases.split(",") if key != "hand")]
            cases = dict(every[key] for key in chosen)
            rates: dict[str, list[float]] = {name: [] for name in cases}
            costs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
            loads: list[float] = []  # the 1-minute load average after each round
            loops = _busy_loops(args.busy)
            try:
                for _ in range(args.repeat):
                    for n, (name, case) in enumerate(cases.items()):
                        queue = _preload(client, f"bench-{n}", args.messages)
                        before = resource.getrusage(resource.RUSAGE_SELF)
                        rates[name].append(case(client, queue, args.messages))
                        costs[name].append(_cost(before, args.messages))
                    loads.append(os.getloadavg()[0])
            finally:
                _stop(loops)
            beat = None
            if args.held:
                beat = heartbeat(client, folder, server.url, args.held, args.heartbeat_seconds)
    base = statistics.median(rates[BASE])
    print(f"\n{args.messages} messages per case, median of {args.repeat}\n")
    load = (load_before, os.getloadavg())
    print(f"load average (1, 5, 15 min) before {load[0]}, after {load[1]}")
    shown = ", ".join(f"{value:.1f}" for value in loads)
    print(f"{args.busy} busy loops; 1-minute load average after each round: {shown}\n")
    print(
        "| case | msgs/s (median) | min-max | vs hand-written loop | per round: median (min-max) |\n"
        "|---|---:|---:|---:|---:|"
    )
    for name, values in rates.items():
        median = statistics.median(values)
        # Each round's case against that round's hand loop, run just before it: drift cancels.
        ratios = [value / hand for value, hand in zip(values, rates[BASE], strict=True)]
        print(
            f"| {name} | {median:,.0f} | {min(values):,.0f}-{max(values):,.0f} | {median / base:.2f}x "
            f"| {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )
    print(
        "\nIn this process (not for `smq worker` cases), medians: context switches per batch of 10, "
        "voluntary / involuntary; CPU µs per message\n"
    )
    for name, values in costs.items():
        if name.startswith("smq worker"):
            continue
        voluntary, involuntary, cpu = (statistics.median(value[i] for value in values) for i in range(3))
        print(f"- {name}: {voluntary:.1f} / {involuntary:.1f}; {cpu:.1f} µs")
    if beat is not None:
        print(
            f"\nheartbeat: {beat['held']} messages held under a 2 s timeout: "
            f"{beat['extended_per_s']:,.0f} extensions/s, worker CPU {beat['worker_cpu']:.1%} of a core, "
            f"{beat['expired']} expired"
        )
    record = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average": {"before": load[0], "after": load[1], "rounds": loads},
        "busy": args.busy,
        "messages": args.messages,
        "repeat": args.repeat,
        "rates": rates,
        "costs": {name: values for name, values in costs.items() if not name.startswith("smq worker")},
        "heartbeat": beat,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nraw results: {args.output}")


if __name__ == "__main__":
    main()
