"""The asyncio client and async workers: smq.aio against smq.Client, and against saq, arq, taskiq.

Part 1, the client, in this process on one Redis (TCP on 127.0.0.1), 100-byte messages:
- ``send x1``: one send at a time (``await queue.send`` against ``queue.send``);
- ``send x8``: 8 senders at once (8 asyncio tasks against 8 threads);
- ``drain x1``: one consumer of a backlog, ``delete_and_receive`` of 10 in a loop;
- ``drain x8``: 8 such consumers (tasks against threads).
Each figure is messages per second; the ratio is async / sync of the same round.

Part 2, workers: a backlog of ``--messages`` no-op jobs drained by one worker process with 8 jobs
at once (``bench/_aio_drain.py``: each system's own producer API preloads, then its worker runs in
that process until the last job ran; jobs per second from the first job's start to the last one's
end). smq: ``smq.Worker`` with an ``async def`` handler (and with a sync one, 8 threads); saq
(``Worker(concurrency=8)``), arq (``max_jobs=8``) and taskiq-redis (``RedisStreamBroker``,
``Receiver(max_async_tasks=8)``), each with its other defaults. The peers run from their own
virtualenv (``--peers-python``; ``--setup-peers`` makes ``bench/.peers`` with the versions below),
as their redis-py pins differ from the project's.

Rounds are interleaved (each case once per round, the order turning), medians reported, the load
average recorded after each round; ``--busy N`` runs N busy loops beside the rounds.

Run: ``.venv/bin/python bench/aio.py [--setup-peers] [--messages 20000] [--repeat 3] [--busy 0]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis
from _harness import Options, redis_server, table, temp_folder

import smq
from smq.aio import AsyncClient, AsyncQueue

HERE = Path(__file__).resolve().parent
PEERS = HERE / ".peers"
PEER_VERSIONS = ("saq==0.26.4", "arq==0.25.0", "taskiq==0.13.0", "taskiq-redis==1.2.4", "hiredis")
BODY = "x" * 100


# -- part 1: the client ----------------------------------------------------------------


def _entries(count: int) -> list[smq.SendEntry]:
    return [smq.SendEntry(str(i), BODY) for i in range(count)]


def _preload(queue: smq.Queue, n: int) -> None:
    for start in range(0, n, 10):
        queue.send_batch(_entries(min(10, n - start)))


def _sync_send(queue: smq.Queue, n: int, workers: int) -> None:
    def send(count: int) -> None:
        for _ in range(count):
            queue.send(BODY)

    _threads([lambda: send(n // workers)] * workers)


def _sync_drain(queue: smq.Queue, n: int, workers: int) -> None:
    def drain() -> None:
        finished: list[smq.DeleteEntry] = []
        while True:
            _, messages = queue.delete_and_receive(finished, 10, wait_time_seconds=0)
            if not messages:
                return
            finished = [smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(messages)]

    _threads([drain] * workers)


def _threads(functions: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=f) for f in functions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


async def _async_send(queue: AsyncQueue, n: int, workers: int) -> None:
    async def send(count: int) -> None:
        for _ in range(count):
            await queue.send(BODY)

    await asyncio.gather(*(send(n // workers) for _ in range(workers)))


async def _async_drain(queue: AsyncQueue, n: int, workers: int) -> None:
    async def drain() -> None:
        finished: list[smq.DeleteEntry] = []
        while True:
            _, messages = await queue.delete_and_receive(finished, 10, wait_time_seconds=0)
            if not messages:
                return
            finished = [smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(messages)]

    await asyncio.gather(*(drain() for _ in range(workers)))


def client_round(url: str, n: int) -> dict[str, float]:
    """One round of part 1: msgs/s per (operation, client)."""
    rates: dict[str, float] = {}
    with smq.Client(url) as client:
        loop = asyncio.new_event_loop()
        aio = AsyncClient(client=client)
        for operation, workers in (("send", 1), ("send", 8), ("drain", 1), ("drain", 8)):
            for kind in ("sync", "async"):
                client.delete_queue("bench")
                queue = client.create_queue("bench")
                if operation == "drain":
                    _preload(queue, n)
                started = time.perf_counter()
                if kind == "sync":
                    (_sync_send if operation == "send" else _sync_drain)(queue, n, workers)
                else:
                    aqueue = AsyncQueue(aio, queue)
                    coroutine = (_async_send if operation == "send" else _async_drain)(aqueue, n, workers)
                    loop.run_until_complete(coroutine)
                rates[f"{operation} x{workers}|{kind}"] = n / (time.perf_counter() - started)
                assert queue.attributes().counters.get("sent" if operation == "send" else "deleted") == n
        loop.run_until_complete(aio.aclose())
        loop.close()
    return rates


# -- part 2: workers -------------------------------------------------------------------

WORKERS = {
    "smq-async": "smq.Worker, async def handler",
    "smq-threads": "smq.Worker, sync handler (8 threads)",
    "taskiq": "taskiq-redis (RedisStreamBroker)",
    "saq": "saq",
    "arq": "arq",
}


def worker_run(system: str, url: str, n: int, peers_python: str) -> dict[str, float]:
    redis.Redis.from_url(url).flushall()
    python = sys.executable if system.startswith("smq") else peers_python
    done = subprocess.run(
        [python, str(HERE / "_aio_drain.py"), system, "--url", url, "--messages", str(n)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def setup_peers() -> None:
    print(f"making {PEERS} with {' '.join(PEER_VERSIONS)} ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(PEERS)], check=True)
    subprocess.run([str(PEERS / "bin" / "pip"), "install", "-q", *PEER_VERSIONS], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = Options(__doc__, "aio", quick={"messages": 2000, "repeat": 1})
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--client-messages", type=int, default=10000, help="messages per part-1 case")
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside the rounds")
    parser.add_argument("--peers-python", default=str(PEERS / "bin" / "python"))
    parser.add_argument("--setup-peers", action="store_true", help=f"make {PEERS.name} first")
    parser.add_argument("--workers", default=",".join(WORKERS), help="comma list of " + ", ".join(WORKERS))
    args = parser.parse_args(argv)
    if args.setup_peers:
        setup_peers()
    systems = [s for s in args.workers.split(",") if s]
    if any(not s.startswith("smq") for s in systems) and not Path(args.peers_python).exists():
        parser.error(f"no {args.peers_python}: run with --setup-peers once (or pass --peers-python)")
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    client_rates: dict[str, list[float]] = {}
    worker_rates: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    loads: list[float] = []
    try:
        with temp_folder() as folder, redis_server(args.redis_server, folder / "redis") as server:
            for round_ in range(args.repeat):
                for key, rate in client_round(server.url, args.client_messages).items():
                    client_rates.setdefault(key, []).append(rate)
                turned = systems[round_ % len(systems) :] + systems[: round_ % len(systems)]
                for system in turned:
                    worker_rates[system].append(
                        worker_run(system, server.url, args.messages, args.peers_python)
                    )
                    print(
                        f"round {round_ + 1} {system}: {worker_rates[system][-1]['rate']:,.0f} jobs/s",
                        file=sys.stderr,
                        flush=True,
                    )
                loads.append(os.getloadavg()[0])
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    print(
        f"\n{args.repeat} interleaved rounds, {args.busy} busy loops; load average after each round: "
        + ", ".join(f"{load:.1f}" for load in loads)
        + "\n"
    )
    rows = []
    for operation in ("send x1", "send x8", "drain x1", "drain x8"):
        sync, aio = client_rates[f"{operation}|sync"], client_rates[f"{operation}|async"]
        ratios = [a / s for a, s in zip(aio, sync, strict=True)]
        rows.append(
            [
                operation,
                f"{statistics.median(sync):,.0f}",
                f"{statistics.median(aio):,.0f}",
                f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})",
            ]
        )
    print(table(["operation", "smq.Client msgs/s", "smq.aio msgs/s", "async / sync (min-max)"], rows))
    fastest_peer = max(
        (s for s in systems if not s.startswith("smq")),
        key=lambda s: statistics.median(r["rate"] for r in worker_rates[s]),
        default=None,
    )
    rows = []
    for system in systems:
        rates = [r["rate"] for r in worker_rates[system]]
        cpu = statistics.median(r["cpu_us"] for r in worker_rates[system])
        versus = ""
        if fastest_peer is not None and "smq-async" in worker_rates:
            mine = [r["rate"] for r in worker_rates["smq-async"]]
            per_round = [m / r for m, r in zip(mine, rates, strict=True)]
            versus = f"{statistics.median(per_round):.1f}x ({min(per_round):.1f}-{max(per_round):.1f})"
        rows.append(
            [
                WORKERS[system],
                f"{statistics.median(rates):,.0f}",
                f"{min(rates):,.0f}-{max(rates):,.0f}",
                f"{cpu:.0f}",
                versus,
            ]
        )
    print()
    print(
        table(
            ["worker (8 at once)", "jobs/s (median)", "min-max", "CPU us/job", "smq async / it, per round"],
            rows,
        )
    )
    record = {
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "loads": loads,
        "client": client_rates,
        "workers": worker_rates,
        "python": sys.version,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=1))
    print(f"\nraw results: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
