"""One drain of a backlog of no-op jobs by one asyncio worker, for bench/aio.py (run as a program).

``python bench/_aio_drain.py SYSTEM --url URL --messages N --concurrency C`` preloads N no-op
jobs with SYSTEM's own producer API, then runs SYSTEM's worker in this process with C jobs at
once until the N-th job has run, and prints one JSON line: jobs per second from the first job's
start to the N-th job's end, and this process's CPU per job over that window. SYSTEM is one of
``smq-async`` and ``smq-threads`` (the project's venv), ``saq``, ``arq``, ``taskiq`` (a venv with
those installed: only the chosen system is imported). Each peer runs with its own defaults but
for the concurrency; the job records only its count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from collections.abc import Awaitable, Callable
from typing import Any


class Count:
    """Jobs run so far; the moments of the first start and of the N-th end, and the CPU then."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.first = 0.0
        self.cpu_first = 0.0
        self.finished = asyncio.Event()
        self.last = 0.0
        self.cpu_last = 0.0

    def job(self) -> None:
        if self.done == 0:
            self.first, self.cpu_first = time.monotonic(), _cpu()
        self.done += 1
        if self.done == self.total:
            self.last, self.cpu_last = time.monotonic(), _cpu()
            self.finished.set()

    def result(self) -> dict[str, float]:
        seconds = self.last - self.first
        return {"rate": self.total / seconds, "cpu_us": (self.cpu_last - self.cpu_first) / self.total * 1e6}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _in_chunks(make: Callable[[], Awaitable[Any]], n: int, chunk: int = 50) -> None:
    for start in range(0, n, chunk):
        await asyncio.gather(*(make() for _ in range(min(chunk, n - start))))


async def smq_worker(url: str, n: int, concurrency: int, threads: bool) -> dict[str, float]:
    import threading

    import smq

    count = Count(n)
    loop = asyncio.get_running_loop()
    client = smq.Client(url)
    queue = client.create_queue("bench")
    for start in range(0, n, 10):
        queue.send_batch([smq.SendEntry(str(i), "x" * 100) for i in range(min(10, n - start))])

    def note() -> None:
        loop.call_soon_threadsafe(count.job)

    async def noop_async(job: smq.Job) -> None:
        note()

    def noop(job: smq.Job) -> None:
        note()

    config = smq.WorkerConfig(concurrency=concurrency)
    worker = smq.Worker(client, queue, noop if threads else noop_async, config=config)
    runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    runner.start()
    await count.finished.wait()
    worker.stop()
    await asyncio.to_thread(runner.join, 60)
    client.close()
    return count.result()


async def saq_worker(url: str, n: int, concurrency: int) -> dict[str, float]:
    from saq import Queue, Worker

    count = Count(n)
    queue = Queue.from_url(url)
    await queue.connect()

    async def noop(ctx: Any) -> None:
        count.job()

    noop.__qualname__ = "noop"  # the name jobs call it by
    await _in_chunks(lambda: queue.enqueue("noop"), n)
    worker = Worker(queue, functions=[noop], concurrency=concurrency)
    running = asyncio.create_task(worker.start())
    await count.finished.wait()
    await worker.stop()
    running.cancel()
    return count.result()


async def arq_worker(url: str, n: int, concurrency: int) -> dict[str, float]:
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker

    count = Count(n)
    settings = RedisSettings.from_dsn(url)
    pool = await create_pool(settings)

    async def noop(ctx: Any) -> None:
        count.job()

    noop.__qualname__ = "noop"  # the name jobs call it by
    await _in_chunks(lambda: pool.enqueue_job("noop"), n)
    worker = Worker(functions=[noop], redis_settings=settings, max_jobs=concurrency, handle_signals=False)
    running = asyncio.create_task(worker.async_run())
    await count.finished.wait()
    await worker.close()
    running.cancel()
    return count.result()


async def taskiq_worker(url: str, n: int, concurrency: int) -> dict[str, float]:
    from taskiq.receiver import Receiver
    from taskiq_redis import RedisStreamBroker

    count = Count(n)
    broker = RedisStreamBroker(url)

    @broker.task
    async def noop() -> None:
        count.job()

    await broker.startup()
    await _in_chunks(noop.kiq, n)
    receiver = Receiver(broker, max_async_tasks=concurrency, run_startup=False)
    finish = asyncio.Event()
    running = asyncio.create_task(receiver.listen(finish))
    await count.finished.wait()
    finish.set()
    running.cancel()
    await broker.shutdown()
    return count.result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("system", choices=("smq-async", "smq-threads", "saq", "arq", "taskiq"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    runs: dict[str, Callable[[], Awaitable[dict[str, float]]]] = {
        "smq-async": lambda: smq_worker(args.url, args.messages, args.concurrency, threads=False),
        "smq-threads": lambda: smq_worker(args.url, args.messages, args.concurrency, threads=True),
        "saq": lambda: saq_worker(args.url, args.messages, args.concurrency),
        "arq": lambda: arq_worker(args.url, args.messages, args.concurrency),
        "taskiq": lambda: taskiq_worker(args.url, args.messages, args.concurrency),
    }
    print(json.dumps(asyncio.run(runs[args.system]())), flush=True)


if __name__ == "__main__":
    main()
