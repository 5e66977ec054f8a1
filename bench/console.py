"""The web console's requests on a queue of 1,000,000 messages: wall time from the client.

One run starts its own Redis (the embedded server, TCP on 127.0.0.1) and its own ``smq serve``
on it (a subprocess, with an access key, so the console needs a sign-in), then fills it:

- ``big``: ``--messages`` (1,000,000) visible messages of ~200-byte bodies with one message
  attribute (``customer``), plus ``--in-flight`` (10,000) received with a 3600 s visibility
  timeout (sent beyond the million, so that the million stay visible) and ``--delayed``
  (10,000) sent with a 900 s delay; its redrive policy names ``big-dlq``;
- ``big-dlq``: ``--dead`` (100,000) dead-lettered messages, from a second source queue
  (``feeder``, maxReceiveCount 1) whose messages are received twice with visibility_timeout=0;
- ``--small-queues`` (50) small queues, so that the table has rows; one history sample of
  ``big`` (``smq serve`` takes one every 10 s too).

Then it signs in once (POST /console/sign-in) and, over ``--repeat`` (20) rounds, each hitting
every request kind once in a shuffled order, times each GET on one keep-alive connection
(``http.client``), from sending the request to the last byte of the response. Every response
must be 200 and say what it should (the searches: which stretch they looked at). Reported per
kind: median, p95 and max in ms, and the median over the 300 ms budget. Afterwards, per kind, a
few more requests are made to see where the time goes: the CPU of ``smq serve`` (``/proc``)
and of Redis (``INFO cpu``) per request.

``--busy`` runs two busy loops (``python -c 'while True: pass'``) beside the whole run
(``--busy N``: N loops); its record goes to ``bench/results/console-busy.json``.

Run: ``.venv/bin/python bench/console.py [--busy]`` (about 1 minute, 2 busy, most of it the fill;
Redis grows to about 350 MB); a quick check: ``--quick``.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import random
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _harness import (
    RESULTS,
    Options,
    Run,
    percentile,
    process_cpu,
    redis_cpu,
    redis_server,
    redis_version,
    settle,
    table,
    temp_folder,
)

import smq
from smq.aio import AsyncClient, AsyncQueue
from smq.embedded import EmbeddedRedis

BUDGET_MS = 300.0
KEY_ID, SECRET = "bench-console", "bench-console-secret"
COOKIE = "smq_console"
ROOMY_LIMIT = 10_000_000  # inflight_limit of the bench queues (the default, 120,000, is too low)
HOLD_SECONDS = 3600  # visibility timeout of the messages kept in flight
DELAY_SECONDS = 900  # the longest delay: the delayed messages stay delayed through the run
BODY_BYTES = 200
ATTRIBUTE = "customer"
FILL_TASKS = 32  # send_batch calls awaited at once while filling
BREAKDOWN_CALLS = 10  # requests per kind of the CPU breakdown


def body(i: int) -> str:
    head = f"order {i:08d} for customer c{i % 1000:03d}: "
    return (head + "lorem ipsum dolor sit amet consectetur adipiscing elit " * 4)[:BODY_BYTES]


def entry(i: int, first: int, delay: int | None = None) -> smq.SendEntry:
    return smq.SendEntry(
        f"m{i - first}", body(i), delay_seconds=delay, attributes={ATTRIBUTE: f"c{i % 1000:03d}"}
    )


# -- filling ---------------------------------------------------------------------------------


async def send_many(queue: AsyncQueue, first: int, count: int, label: str, delay: int | None = None) -> float:
    """Send messages ``first`` .. ``first + count - 1`` by batches of 10, ``FILL_TASKS`` batches
    awaited at once; the seconds it took."""
    started = time.monotonic()
    batches = iter(range(first, first + count, 10))
    done = 0

    async def sender() -> None:
        nonlocal done
        for start in batches:
            entries = [entry(i, start, delay) for i in range(start, min(start + 10, first + count))]
            result = await queue.send_batch(entries)
            if result.failed:
                raise RuntimeError(f"{queue.name}: send_batch failed: {result.failed}")
            done += len(entries)
            if done % 100_000 < 10:
                show(label, done, count, started)

    await asyncio.gather(*(sender() for _ in range(FILL_TASKS)))
    show(label, count, count, started, end=True)
    return time.monotonic() - started


async def receive_many(queue: AsyncQueue, count: int | None, visibility_timeout: int, label: str) -> float:
    """Receive ``count`` messages (None: until the queue returns none) by 10, ``FILL_TASKS`` at
    once; the seconds it took."""
    started = time.monotonic()
    taken = 0
    empty = False

    async def receiver() -> None:
        nonlocal taken, empty
        while not empty and (count is None or taken < count):
            wanted = 10 if count is None else min(10, count - taken)
            if wanted <= 0:
                return
            got = await queue.receive(wanted, visibility_timeout=visibility_timeout, wait_time_seconds=0)
            if not got:
                empty = True
                return
            taken += len(got)
            if taken % 20_000 < 10:
                show(label, taken, count or taken, started)

    await asyncio.gather(*(receiver() for _ in range(FILL_TASKS if count is None else 1)))
    show(label, taken, count or taken, started, end=True)
    return time.monotonic() - started


def show(label: str, done: int, total: int, started: float, *, end: bool = False) -> None:
    elapsed = time.monotonic() - started
    rate = done / elapsed if elapsed else 0.0
    print(f"\r  {label}: {done:,}/{total:,} ({rate:,.0f}/s)  ", end="\n" if end else "", file=sys.stderr)


async def fill(url: str, args: Any) -> dict[str, Any]:
    """Make the queues the console is measured on; how long each step took."""
    seconds: dict[str, float] = {}
    async with AsyncClient(url) as client:
        await client.create_queue("big-dlq", inflight_limit=ROOMY_LIMIT)
        big = await client.create_queue(
            "big", inflight_limit=ROOMY_LIMIT, redrive_policy=smq.RedrivePolicy("big-dlq", 5)
        )
        feeder = await client.create_queue(
            "feeder", inflight_limit=ROOMY_LIMIT, redrive_policy=smq.RedrivePolicy("big-dlq", 1)
        )
        # The in-flight ones first (receives take the oldest), then the million that stay visible.
        seconds["send_big"] = await send_many(big, 0, args.messages + args.in_flight, "big: send")
        seconds["receive_in_flight"] = await receive_many(big, args.in_flight, HOLD_SECONDS, "big: receive")
        seconds["send_delayed"] = await send_many(
            big, args.messages + args.in_flight, args.delayed, "big: send delayed", DELAY_SECONDS
        )
        seconds["send_feeder"] = await send_many(feeder, 0, args.dead, "feeder: send")
        # maxReceiveCount 1: the first receive hands a message out (visible again at once), the
        # second moves it to big-dlq.
        seconds["dead_letter"] = await receive_many(feeder, None, 0, "feeder: receive twice")
        started = time.monotonic()
        for n in range(args.small_queues):
            small = await client.create_queue(f"small-{n:03d}")
            await small.send_batch([entry(i, 0) for i in range(10)])
            if n % 4:
                await small.receive(n % 4, visibility_timeout=HOLD_SECONDS)
        seconds["small_queues"] = time.monotonic() - started
    with smq.Client(url) as client:
        client.queue("big")._sample()
        counts = {name: client.queue(name).attributes() for name in ("big", "big-dlq", "feeder")}
    big_info, dlq_info, feeder_info = counts["big"], counts["big-dlq"], counts["feeder"]
    expected = (args.messages, args.in_flight, args.delayed)
    if (big_info.visible, big_info.in_flight, big_info.delayed) != expected:
        raise RuntimeError(
            f"big holds {big_info.visible:,} visible, {big_info.in_flight:,} in flight, "
            f"{big_info.delayed:,} delayed; wanted {expected}"
        )
    if dlq_info.visible != args.dead or feeder_info.visible + feeder_info.in_flight:
        raise RuntimeError(f"big-dlq holds {dlq_info.visible:,} visible, feeder {feeder_info}")
    return {
        "seconds": {key: round(value, 1) for key, value in seconds.items()},
        "total_seconds": round(sum(seconds.values()), 1),
        "big": {"visible": big_info.visible, "in_flight": big_info.in_flight, "delayed": big_info.delayed},
        "big_dlq": {"visible": dlq_info.visible},
        "small_queues": args.small_queues,
    }


# -- smq serve -------------------------------------------------------------------------------


class Serve:
    """``smq serve`` as a subprocess on ``redis_url``, with one access key; stopped by its pid."""

    def __init__(self, redis_url: str, folder: Path) -> None:
        self.log_path = folder / "serve.log"
        self.log = self.log_path.open("w")
        command = [sys.executable, "-m", "smq", "serve", "--redis-url", redis_url, "--port", "0"]
        command += ["--access-key", f"{KEY_ID}:{SECRET}"]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.process.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if "listening on" in line or not line:
                break
        if "listening on" not in line:
            self.stop()
            raise RuntimeError(f"smq serve did not start: {line!r}\n{self.log_path.read_text()}")
        parts = urllib.parse.urlsplit(line.split("listening on", 1)[1].strip())
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class Browser:
    """One keep-alive connection to the console, signed in."""

    def __init__(self, host: str, port: int) -> None:
        self.connection = http.client.HTTPConnection(host, port, timeout=60)
        form = urllib.parse.urlencode({"key_id": KEY_ID, "secret": SECRET})
        self.connection.request(
            "POST",
            "/console/sign-in",
            body=form,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        response = self.connection.getresponse()
        response.read()
        cookies = [h for h in response.headers.get_all("Set-Cookie") or [] if h.startswith(f"{COOKIE}=")]
        if response.status != 303 or not cookies:
            raise RuntimeError(f"sign-in: {response.status} {response.reason}, no {COOKIE} cookie")
        self.cookie = cookies[0].split(";", 1)[0]

    def get(self, path: str) -> tuple[float, int, str]:
        """Seconds from sending the request to the response's last byte, the status, the text."""
        started = time.perf_counter()
        self.connection.request("GET", path, headers={"Cookie": self.cookie})
        response = self.connection.getresponse()
        data = response.read()
        return time.perf_counter() - started, response.status, data.decode()

    def close(self) -> None:
        self.connection.close()


# -- the requests ----------------------------------------------------------------------------

Check = Callable[[str], str | None]  # a response's text -> what is wrong with it, or None


def rows(expected: int) -> Check:
    def check(text: str) -> str | None:
        found = text.count("<tr data-message=")
        return None if found == expected else f"{found} message rows, not {expected}"

    return check


def says(*needles: str) -> Check:
    def check(text: str) -> str | None:
        missing = [n for n in needles if n not in text]
        return f"does not say {missing}" if missing else None

    return check


def json_with(*keys: str) -> Check:
    def check(text: str) -> str | None:
        missing = [key for key in keys if f'"{key}"' not in text]
        return f"JSON without {missing}" if missing else None

    return check


def requests(args: Any) -> dict[str, tuple[str, Check]]:
    """kind -> (path, check)."""
    n = args.messages
    middle, end = n // 2, max(0, n - 50)
    searched = f"Searched visible messages {middle + 1:,} to {min(middle + 1000, n):,}"
    search = f"/console/queues/big?state=visible&offset={middle}"
    return {
        "table page": (
            "/console",
            says('data-queue="big"', *(['data-queue="small-'] if args.small_queues else [])),
        ),
        "api queues": ("/console/api/queues", json_with("queues", "next")),
        "api queues details": ("/console/api/queues?details=1", json_with("queues", "trend")),
        "big, visible, first page": ("/console/queues/big", rows(50)),
        "big, visible, middle": (
            f"/console/queues/big?state=visible&offset={middle}",
            lambda text: rows(50)(text) or says(f"Messages {middle + 1:,} to {middle + 50:,}")(text),
        ),
        "big, visible, end": (
            f"/console/queues/big?state=visible&offset={end}",
            lambda text: rows(n - end)(text) or says(f"Messages {end + 1:,} to {n:,}")(text),
        ),
        "big, in flight, offset 5000": (
            f"/console/queues/big?state=in_flight&offset={min(5000, args.in_flight // 2)}",
            rows(50),
        ),
        "big, delayed": ("/console/queues/big?state=delayed", rows(50)),
        "search body, none found": (f"{search}&in=body&q=no-such-text", says(searched, ": 0 found")),
        "search attribute, none found": (
            f"{search}&in=attribute&q={ATTRIBUTE}%3Dnobody",
            says(searched, ": 0 found"),
        ),
        "search id, none found": (f"{search}&in=id&q=zzzz", says(searched, ": 0 found")),
        "big-dlq page": ("/console/queues/big-dlq", rows(50)),
        "api queue big": ("/console/api/queue/big", json_with("visible", "in_flight", "consumers")),
        "api queue big history": ("/console/api/queue/big/history", json_with("samples", "fields")),
    }


def fetch(browser: Browser, kind: str, path: str, check: Check) -> float:
    """One timed GET of ``path``, checked; its wall time in ms."""
    seconds, status, text = browser.get(path)
    if status != 200:
        raise RuntimeError(f"{kind}: GET {path} answered {status}:\n{text[:2000]}")
    wrong = check(text)
    if wrong:
        raise RuntimeError(f"{kind}: GET {path}: {wrong}\n{text[:2000]}")
    return seconds * 1000


def breakdown(
    browser: Browser, kinds: dict[str, tuple[str, Check]], serve_pid: int, server: EmbeddedRedis
) -> dict[str, dict[str, float]]:
    """Per kind, over ``BREAKDOWN_CALLS`` requests: the wall time and the CPU of smq serve and of
    Redis per request, in ms."""
    found = {}
    with server.client() as admin:
        for kind, (path, check) in kinds.items():
            serve_0, redis_0, wall = process_cpu(serve_pid), redis_cpu(admin), 0.0
            for _ in range(BREAKDOWN_CALLS):
                wall += fetch(browser, kind, path, check)
            serve_1, redis_1 = process_cpu(serve_pid), redis_cpu(admin)
            found[kind] = {
                "wall_ms": round(wall / BREAKDOWN_CALLS, 1),
                "serve_cpu_ms": round((serve_1 - serve_0) * 1000 / BREAKDOWN_CALLS, 1),
                "redis_cpu_ms": round((redis_1 - redis_0) * 1000 / BREAKDOWN_CALLS, 1),
            }
    return found


# -- the run ---------------------------------------------------------------------------------


def figures(samples: Sequence[float]) -> dict[str, float]:
    middle = percentile(samples, 0.5)
    return {
        "median_ms": round(middle, 1),
        "p95_ms": round(percentile(samples, 0.95), 1),
        "max_ms": round(max(samples), 1),
        "median_over_budget": round(middle / BUDGET_MS, 3),
    }


def parse_args(argv: list[str] | None) -> Any:
    parser = Options(
        __doc__,
        "console",
        repeat=20,
        repeat_help="rounds, each hitting every request kind once in a shuffled order",
        quick={"messages": 20_000, "in_flight": 1_000, "delayed": 1_000, "dead": 2_000, "repeat": 3},
    )
    parser.add_argument("--messages", type=int, default=1_000_000, help="visible messages of big")
    parser.add_argument("--in-flight", type=int, default=10_000, help="in-flight messages of big")
    parser.add_argument("--delayed", type=int, default=10_000, help="delayed messages of big")
    parser.add_argument("--dead", type=int, default=100_000, help="dead-lettered messages in big-dlq")
    parser.add_argument("--small-queues", type=int, default=50, help="small queues beside them")
    parser.add_argument(
        "--busy", type=int, nargs="?", const=2, default=0, help="busy loops beside the run (--busy: 2)"
    )
    parser.add_argument("--seed", type=int, default=1, help="of the rounds' shuffled orders")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    if args.busy and not any(arg.startswith("--output") for arg in given):
        args.output = RESULTS / (args.output.stem + "-busy.json")
    if args.messages < 1000 or args.in_flight < 100 or args.delayed < 50 or args.dead < 50:
        parser.error("too few messages: --messages >= 1000, --in-flight >= 100, --delayed and --dead >= 50")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(__file__, args, argv)
    kinds = requests(args)
    # Beside the whole run, the fill too: the load average has risen to them by the rounds.
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        with temp_folder() as folder, redis_server(args.redis_server, folder / "redis") as server:
            version = redis_version(server)
            print(
                f"filling: big {args.messages:,} visible + {args.in_flight:,} in flight + "
                f"{args.delayed:,} delayed, big-dlq {args.dead:,}, {args.small_queues} small queues",
                file=sys.stderr,
            )
            filled = asyncio.run(fill(server.url, args))
            print(f"  filled in {filled['total_seconds']:.0f} s; settling ...", file=sys.stderr)
            with smq.Client(server.url) as client:
                big_keys = client.queue("big").keys
            with server.client() as admin:
                settle(admin, [(big_keys.messages, "hash"), (big_keys.state, "hash")])
                used_memory = int(admin.info("memory")["used_memory"])
            serve = Serve(server.url, folder)
            try:
                browser = Browser(serve.host, serve.port)
                warmup = {kind: fetch(browser, kind, path, check) for kind, (path, check) in kinds.items()}
                samples: dict[str, list[float]] = {kind: [] for kind in kinds}
                shuffler = random.Random(args.seed)
                serve_0, redis_0, timed_0 = process_cpu(serve.pid), redis_cpu(server), time.monotonic()
                for number in run.each_round(args.repeat):
                    order = list(kinds)
                    shuffler.shuffle(order)
                    for kind in order:
                        path, check = kinds[kind]
                        samples[kind].append(fetch(browser, kind, path, check))
                    slowest = max(order, key=lambda kind: samples[kind][-1])
                    print(
                        f"  round {number}/{args.repeat}: slowest {slowest} {samples[slowest][-1]:.0f} ms, "
                        f"load {os.getloadavg()[0]:.2f}",
                        file=sys.stderr,
                    )
                timed_seconds = time.monotonic() - timed_0
                cpu = {
                    "seconds": round(timed_seconds, 1),
                    "serve_percent_of_a_core": round(
                        100 * (process_cpu(serve.pid) - serve_0) / timed_seconds, 1
                    ),
                    "redis_percent_of_a_core": round(100 * (redis_cpu(server) - redis_0) / timed_seconds, 1),
                }
                spent = breakdown(browser, kinds, serve.pid, server)
                browser.close()
            finally:
                serve.stop()
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    results = {kind: figures(values) for kind, values in samples.items()}
    header = [
        "request",
        "path",
        "median ms",
        "p95 ms",
        "max ms",
        "median / 300 ms",
        "serve CPU ms",
        "Redis CPU ms",
    ]
    lines = [
        [
            kind,
            f"`{kinds[kind][0]}`",
            f"{r['median_ms']:.1f}",
            f"{r['p95_ms']:.1f}",
            f"{r['max_ms']:.1f}",
            f"{r['median_over_budget']:.2f}",
            f"{spent[kind]['serve_cpu_ms']:.1f}",
            f"{spent[kind]['redis_cpu_ms']:.1f}",
        ]
        for kind, r in results.items()
    ]
    loads = [entry["end"][0] for entry in run.loads]
    print(
        f"\n{args.repeat} rounds, {args.busy} busy loops, Redis {version}; load average (1 min) "
        f"{run.load_before[0]:.2f} before, {min(loads):.2f}-{max(loads):.2f} after the rounds\n"
    )
    print(table(header, lines, "llrrrrrr"))
    over = [kind for kind, r in results.items() if r["p95_ms"] > BUDGET_MS]
    print(f"\nover the {BUDGET_MS:.0f} ms budget at p95: {', '.join(over) if over else 'none'}")
    run.write(
        args.output,
        {
            "budget_ms": BUDGET_MS,
            "fill": filled,
            "used_memory_bytes": used_memory,
            "requests": {kind: {"path": kinds[kind][0], **results[kind]} for kind in kinds},
            "samples_ms": {kind: [round(v, 2) for v in values] for kind, values in samples.items()},
            "warmup_ms": {kind: round(value, 1) for kind, value in warmup.items()},
            "cpu_over_the_rounds": cpu,
            "breakdown_per_request": spent,
        },
        redis_version=version,
        busy_loops=args.busy,
        transport="TCP on 127.0.0.1 (smq serve to Redis, and the client to smq serve)",
        body_bytes=BODY_BYTES,
        breakdown_calls=BREAKDOWN_CALLS,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
