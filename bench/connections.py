"""Connections of ``smq serve``: memory per idle connection, and ordinary clients served while
slow sockets fill the connection limit.

One run starts one embedded server (TCP on 127.0.0.1) and, for every cell, a fresh ``smq serve``
on it (``--no-auth --metrics-port 0``; the access log as by default), stopped after the cell. The
server's ``/metrics`` listener says how many connections it holds (``smq_api_connections``) and
how many it closed to make room (``smq_api_connections_closed_total``).

1. **Memory per idle connection** (``--max-connections 20000 --header-timeout 120``, no cap per
   address): the server's RSS (``VmRSS`` of ``/proc/PID/status``) after a few warm-up requests,
   then ``--connections`` (16,000) sockets opened from this process (4,000 from each address of
   127.0.1.1 onwards; in batches the server's accept queue can take) that (a) send nothing or
   (b) send half a request's headers (``POST / HTTP/1.1\\r\\nHost: x\\r\\n``); once the server
   holds them all and its RSS has settled, the RSS again: KiB per connection. ListQueues (POST
   /, ``{}``) from a fresh connection (from 127.0.0.1) is timed ``--requests`` (30) times before
   and while they are held: the median, from the connect to the reply's last byte. None of them
   is shed: the limit is above what is held. The kernel's own memory for the sockets is not in
   the RSS.
2. **Slow sockets from several addresses** (``--max-connections 300``; the cap per address is its
   default, half of it): each of ``--slow-addresses`` (3) addresses, 127.0.0.2 onwards, opens
   ``--slow-per-address`` (150) sockets that send half a request's headers and stop (in turns,
   one from each address), more than the limit; once the server holds the limit in them and
   the oldest has waited a second, ``--requests`` (30) ListQueues, one after another, each on a
   fresh connection from the next address (127.0.0.5): 200 (served) or 503 (refused), and their
   latency. Before each request the slow clients open new stalled sockets until the server holds
   the limit again, so that every request meets a full limit (without that only the first would).
   The same requests without slow sockets, on the same server before them, give the baseline.

Each round runs both parts quiet and with ``--busy`` (2) busy loops (``python -c 'while True:
pass'``) beside them, the two taking turns (the order swapped every round); figures are medians
over ``--repeat`` (``--rounds``, 3) rounds. There is no peer: the figures are absolute.

Run: ``.venv/bin/python bench/connections.py`` (about 2 minutes; a quick check: ``--quick``).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import select
import socket
import statistics
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _harness import (
    Options,
    Run,
    percentile,
    redis_server,
    redis_version,
    spread,
    table,
    temp_folder,
)
from serve import Service

PARTS = ("memory", "slow")
KINDS = ("nothing", "partial")  # what the held connections of the memory part send
PARTIAL = b"POST / HTTP/1.1\r\nHost: x\r\n"  # half a request's headers
LIST_QUEUES = (
    b"POST / HTTP/1.1\r\n"
    b"Host: 127.0.0.1\r\n"
    b"X-Amz-Target: AmazonSQS.ListQueues\r\n"
    b"Content-Type: application/x-amz-json-1.0\r\n"
    b"Content-Length: 2\r\n"
    b"Connection: close\r\n"
    b"\r\n"
    b"{}"
)
WARMUP_REQUESTS = 5
WAIT_BEFORE_SHED = 1.0  # seconds a connection waits for its headers before it may be shed (_guard.py)
HOLD_TIMEOUT = 120.0  # seconds to wait for the server to hold what was opened
PACE_BATCH = 64  # connections opened before waiting for the server to accept them
CLIENT = "127.0.0.1"
# The memory part's held connections come from 127.0.1.1 onwards, this many from each: from one
# address, the ephemeral ports (28,000 by default, a half of them preferred) would run short, and
# picking one would take longer with every socket held.
PER_HELD_ADDRESS = 4000
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux: the port at connect
LINGER_0 = struct.pack("ii", 1, 0)  # close with a reset: no TIME_WAIT left behind


# -- smq serve and its metrics ---------------------------------------------------------------


class Serve:
    """One ``smq serve`` of a cell, with its metrics listener; stopped on leaving."""

    def __init__(self, redis_url: str, log: Path, flags: Sequence[str], env: dict[str, str]) -> None:
        executable = Path(sys.executable).parent / "smq"
        base = [str(executable)] if executable.exists() else [sys.executable, "-m", "smq"]
        command = [*base, "serve", "--redis-url", redis_url, "--host", CLIENT, "--port", "0", "--no-auth"]
        command += ["--metrics-port", "0", *flags]
        self.log = log
        self.service = Service("smq serve", command, r"listening on (http://\S+)", log, env=env)

    def __enter__(self) -> Serve:
        self.service.start()
        self.port = self.service.port
        self.pid = self.service.pid
        deadline = time.monotonic() + 30
        while (found := re.search(r"metrics on (http://\S+/metrics)", self.logs())) is None:
            if time.monotonic() > deadline:
                self.service.stop()
                raise RuntimeError(f"smq serve did not say where its metrics are:\n{self.logs()[-3000:]}")
            time.sleep(0.05)
        self.metrics_url = found.group(1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.service.stop()

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def connections(self) -> dict[str, int]:
        """Connections held now (``open``) and closed so far, by reason (shed, refused, header_timeout)."""
        with urllib.request.urlopen(self.metrics_url, timeout=30) as reply:
            text = reply.read().decode()
        counts = {"open": _sample(text, "smq_api_connections")}
        for reason in ("shed", "refused", "header_timeout"):
            counts[reason] = _sample(text, "smq_api_connections_closed_total", f'reason="{reason}"')
        return counts

    def until_open(self, count: int, timeout: float = HOLD_TIMEOUT) -> float:
        """Wait until the server holds ``count`` connections; the seconds it took."""
        started = time.monotonic()
        while (held := self.connections()["open"]) != count:
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"smq serve holds {held} connections, not {count}, after {timeout:g} s")
            time.sleep(0.05)
        return time.monotonic() - started


def _sample(text: str, name: str, labels: str = "") -> int:
    pattern = "^" + re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return int(float(found.group(1))) if found else 0


def rss_kib(pid: int) -> int:
    """Resident set size of a process in KiB (``VmRSS`` of ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def settled_rss(pid: int, timeout: float = 10.0) -> int:
    """The RSS once two readings 0.5 s apart agree within 0.5 % (or after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    last = rss_kib(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_kib(pid)
        if abs(now - last) <= 0.005 * last:
            return now
        last = now
    return last


# -- clients ---------------------------------------------------------------------------------


def connect(port: int, source: str) -> socket.socket:
    """A connection to the server from ``source`` (its port chosen at the connect)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(30)
        sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((source, 0))
        sock.connect((CLIENT, port))
    except BaseException:
        sock.close()
        raise
    return sock


def list_queues(port: int, source: str = CLIENT) -> tuple[int, float]:
    """ListQueues on a fresh connection from ``source``: (HTTP status, 0 if none; ms from the
    connect to the connection's end)."""
    started = time.perf_counter()
    reply = b""
    try:
        with connect(port, source) as sock:
            sock.sendall(LIST_QUEUES)
            while chunk := sock.recv(65536):
                reply += chunk
    except OSError:
        pass
    took = (time.perf_counter() - started) * 1000
    parts = reply.split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, took


def timed_requests(
    port: int, count: int, source: str = CLIENT, before: Callable[[], None] | None = None
) -> dict[str, Any]:
    """``count`` ListQueues one after another (``before()`` ahead of each, untimed): statuses and ms."""
    statuses: list[int] = []
    took: list[float] = []
    for _ in range(count):
        if before is not None:
            before()
        status, ms = list_queues(port, source)
        statuses.append(status)
        took.append(ms)
    return latency(statuses, took)


def latency(statuses: list[int], took: list[float]) -> dict[str, Any]:
    served = [ms for status, ms in zip(statuses, took, strict=True) if status == 200]
    return {
        "requests": len(statuses),
        "served": statuses.count(200),
        "refused": statuses.count(503),
        "other": len(statuses) - statuses.count(200) - statuses.count(503),
        "p50_ms": round(statistics.median(took), 2) if took else None,
        "max_ms": round(max(took), 2) if took else None,
        "served_p50_ms": round(statistics.median(served), 2) if served else None,
        "served_p90_ms": round(percentile(served, 0.9), 2) if served else None,
        "samples_ms": [round(ms, 2) for ms in took],
        "statuses": statuses,
    }


def stall(port: int, source: str, send: bytes) -> socket.socket:
    """A connection from ``source`` that sends ``send`` (maybe nothing) and then nothing more."""
    sock = connect(port, source)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_0)
    if send:
        sock.sendall(send)
    return sock


def paced(serve: Serve, count: int, open_one: Callable[[], None], most: int | None = None) -> float:
    """Call ``open_one`` ``count`` times, in batches that the server's accept queue (100 by
    asyncio's default) can take: a connection the kernel finds no room for waits a second for its
    SYN to be sent again. The server should then hold up to ``most`` connections (None: every
    one opened); the seconds it took."""
    started = time.monotonic()
    base = serve.connections()["open"]
    done = 0
    while done < count:
        for _ in range(min(PACE_BATCH, count - done)):
            open_one()
        done += PACE_BATCH
        expected = min(base + done, most if most is not None else base + count) - PACE_BATCH // 2
        while serve.connections()["open"] < expected:
            if time.monotonic() - started > HOLD_TIMEOUT:
                raise RuntimeError(f"smq serve did not accept {count} connections in {HOLD_TIMEOUT:g} s")
            time.sleep(0.002)
    return time.monotonic() - started


def close_all(sockets: Sequence[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


def closed_by_server(sockets: Sequence[socket.socket]) -> set[socket.socket]:
    """The sockets the server has answered (503) or closed: readable, at end of file or reset."""
    poller = select.poll()
    by_fd = {sock.fileno(): sock for sock in sockets}
    for fd in by_fd:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return {by_fd[fd] for fd, _ in poller.poll(0)}


# -- part 1: memory per idle connection ------------------------------------------------------


def held_address(index: int) -> str:
    """The source address of the memory part's held connection ``index`` (127.0.1.1 onwards)."""
    number = 1 + index // PER_HELD_ADDRESS
    return f"127.0.{1 + number // 256}.{number % 256}"


def memory_cell(
    kind: str, redis_url: str, folder: Path, args: argparse.Namespace, tag: str
) -> dict[str, Any]:
    flags = ["--header-timeout", "120", "--max-connections", str(args.max_connections)]
    env = {"SMQ_MAX_CONNECTIONS_PER_ADDRESS": "0"}
    send = b"" if kind == "nothing" else PARTIAL
    held: list[socket.socket] = []
    with Serve(redis_url, folder / f"serve-{tag}-{kind}.log", flags, env) as serve:
        for _ in range(WARMUP_REQUESTS):
            list_queues(serve.port)
        serve.connections()
        before_requests = timed_requests(serve.port, args.requests)
        rss_before = settled_rss(serve.pid)
        started = time.monotonic()
        try:
            opened = paced(
                serve,
                args.connections,
                lambda: held.append(stall(serve.port, held_address(len(held)), send)),
            )
            serve.until_open(args.connections)
            accepted = time.monotonic() - started
            rss_held = settled_rss(serve.pid)
            while_held = timed_requests(serve.port, args.requests)
            counts = serve.connections()
        finally:
            close_all(held)
        warned = "open file limit" in serve.logs()
    per_connection = (rss_held - rss_before) / args.connections
    return {
        "sent": send.decode(),
        "connections": args.connections,
        "rss_before_kib": rss_before,
        "rss_held_kib": rss_held,
        "kib_per_connection": round(per_connection, 2),
        "open_seconds": round(opened, 2),
        "held_after_seconds": round(accepted, 2),
        "list_queues_before": before_requests,
        "list_queues_while_held": while_held,
        "metrics_while_held": counts,
        "file_limit_warning": warned,
    }


# -- part 2: slow sockets from several addresses ----------------------------------------------


def slow_cell(redis_url: str, folder: Path, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    addresses = [f"127.0.0.{2 + i}" for i in range(args.slow_addresses)]
    client = f"127.0.0.{2 + args.slow_addresses}"
    limit = args.slow_limit
    flags = ["--max-connections", str(limit)]
    # The cap per address as by default (half the limit); set here only if this shell set another.
    env = (
        {"SMQ_MAX_CONNECTIONS_PER_ADDRESS": str(limit // 2)}
        if "SMQ_MAX_CONNECTIONS_PER_ADDRESS" in os.environ
        else {}
    )
    stalled: dict[str, list[socket.socket]] = {address: [] for address in addresses}
    opened = {address: 0 for address in addresses}
    turn = 0

    def open_one() -> None:
        nonlocal turn
        address = addresses[turn % len(addresses)]
        turn += 1
        try:
            stalled[address].append(stall(serve.port, address, PARTIAL))
            opened[address] += 1
        except OSError:
            pass

    def reap() -> int:
        """Drop the sockets the server has answered or closed; how many."""
        every = [sock for socks in stalled.values() for sock in socks]
        gone = closed_by_server(every) if every else set()
        for address in addresses:
            stalled[address] = [s for s in stalled[address] if s not in gone]
        close_all(list(gone))
        return len(gone)

    def refill() -> None:
        """Open stalled sockets until the server holds the limit again."""
        reap()
        deadline = time.monotonic() + 30
        while (held := serve.connections()["open"]) < limit:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the slow clients could not bring the server back to {limit} ({held})")
            for _ in range(limit - held):
                open_one()
            reap()

    with Serve(redis_url, folder / f"serve-{tag}-slow.log", flags, env) as serve:
        try:
            for _ in range(WARMUP_REQUESTS):
                list_queues(serve.port, client)
            baseline = timed_requests(serve.port, args.requests, client)
            paced(serve, args.slow_per_address * len(addresses), open_one, most=limit)
            serve.until_open(limit)
            time.sleep(WAIT_BEFORE_SHED + 0.2)  # the oldest has waited long enough to make room
            initial = serve.connections()
            reap()
            held_initially = {address: len(socks) for address, socks in stalled.items()}
            under = timed_requests(serve.port, args.requests, client, before=refill)
            after = serve.connections()
        finally:
            for socks in stalled.values():
                close_all(socks)
        logs = serve.logs()
    return {
        "max_connections": limit,
        "slow_addresses": addresses,
        "client_address": client,
        "slow_sockets_attempted_first": args.slow_per_address * len(addresses),
        "slow_sockets_opened_in_all": sum(opened.values()),
        "slow_sockets_held_before_the_requests": held_initially,
        "metrics_before_the_requests": initial,
        "metrics_after": after,
        "without_slow_sockets": baseline,
        "under_slow_sockets": under,
        "traceback_in_log": "Traceback" in logs,
    }


# -- a round ---------------------------------------------------------------------------------


def variant(
    busy: int, redis_url: str, folder: Path, args: argparse.Namespace, run: Run
) -> Callable[[], dict[str, Any]]:
    def measure() -> dict[str, Any]:
        tag = f"r{run.round}-{'busy' if busy else 'quiet'}"
        loops = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
            for _ in range(busy)
        ]
        try:
            result: dict[str, Any] = {
                "busy_loops": busy,
                "load_start": [round(x, 2) for x in os.getloadavg()],
            }
            if "memory" in args.parts:
                result["memory"] = {kind: memory_cell(kind, redis_url, folder, args, tag) for kind in KINDS}
            if "slow" in args.parts:
                result["slow"] = slow_cell(redis_url, folder, args, tag)
            result["load_end"] = [round(x, 2) for x in os.getloadavg()]
            return result
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()

    return measure


def show(result: dict[str, Any]) -> str:
    parts = []
    for kind, cell in result.get("memory", {}).items():
        parts.append(
            f"{kind} {cell['kib_per_connection']:.1f} KiB/conn, "
            f"ListQueues {cell['list_queues_while_held']['p50_ms']:.1f} ms"
        )
    if "slow" in result:
        under = result["slow"]["under_slow_sockets"]
        parts.append(f"slow: {under['served']}/{under['requests']} served, {under['refused']} refused")
    return "; ".join(parts)


# -- tables ----------------------------------------------------------------------------------


def memory_table(results: dict[str, list[dict[str, Any]]], connections: int) -> str:
    rows = []
    for kind in KINDS:
        for machine, rounds in results.items():
            cells = [r["memory"][kind] for r in rounds if "memory" in r]
            if not cells:
                continue
            rows.append(
                [
                    "nothing" if kind == "nothing" else "half the headers",
                    machine,
                    spread([c["rss_before_kib"] / 1024 for c in cells], " MiB", 1),
                    spread([c["rss_held_kib"] / 1024 for c in cells], " MiB", 1),
                    spread([c["kib_per_connection"] for c in cells], digits=2),
                    spread([c["list_queues_before"]["p50_ms"] for c in cells], digits=2),
                    spread([c["list_queues_while_held"]["p50_ms"] for c in cells], digits=2),
                    spread([c["held_after_seconds"] for c in cells], " s", 1),
                ]
            )
    header = [
        "held connections send",
        "machine",
        "RSS before",
        f"RSS holding {connections:,}",
        "KiB per connection",
        "ListQueues p50 ms, none held",
        "while held",
        "opened and held in",
    ]
    return table(header, rows, "llrrrrrr")


def slow_table(results: dict[str, list[dict[str, Any]]]) -> str:
    rows = []
    for machine, rounds in results.items():
        cells = [r["slow"] for r in rounds if "slow" in r]
        if not cells:
            continue
        under = [c["under_slow_sockets"] for c in cells]
        base = [c["without_slow_sockets"] for c in cells]
        rows.append(
            [
                machine,
                f"{sum(u['served'] for u in under)}/{sum(u['requests'] for u in under)}",
                str(sum(u["refused"] for u in under)),
                str(sum(u["other"] for u in under)),
                spread([u["p50_ms"] for u in under], digits=2),
                spread([u["max_ms"] for u in under], digits=1),
                spread([b["p50_ms"] for b in base], digits=2),
                spread([c["metrics_after"]["shed"] for c in cells]),
                spread([c["metrics_before_the_requests"]["refused"] for c in cells]),
            ]
        )
    header = [
        "machine",
        "served (200), all rounds",
        "refused (503)",
        "other",
        "p50 ms",
        "max ms",
        "p50 ms without slow sockets",
        "slow sockets shed",
        "slow sockets refused (503)",
    ]
    return table(header, rows, "lrrrrrrrr")


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Options(
        __doc__,
        "connections",
        repeat_flags=("--rounds", "--repeat"),
        repeat_help="rounds, quiet and busy taking turns in each",
        quick={"connections": 2000, "repeat": 1, "requests": 10},
    )
    add = parser.add_argument
    add("--connections", type=int, default=16_000, help="idle connections held (default 16000)")
    add(
        "--max-connections",
        type=int,
        default=20_000,
        help="smq serve's --max-connections in the memory part (default 20000)",
    )
    add("--requests", type=int, default=30, help="timed ListQueues per measurement (default 30)")
    add(
        "--slow-limit", type=int, default=300, help="--max-connections in the slow-sockets part (default 300)"
    )
    add(
        "--slow-addresses",
        type=int,
        default=3,
        help="addresses of the slow clients, from 127.0.0.2 (default 3)",
    )
    add("--slow-per-address", type=int, default=150, help="stalled sockets each opens first (default 150)")
    add("--busy", type=int, default=2, help="busy loops beside the busy variant (default 2; 0: quiet only)")
    add(
        "--parts",
        type=lambda text: {p.strip() for p in text.split(",") if p.strip()},
        default=set(PARTS),
        help=f"comma list of {','.join(PARTS)} (default both)",
    )
    args: argparse.Namespace = parser.parse_args(argv)
    if not args.parts or args.parts - set(PARTS):
        parser.error(f"--parts: choose from {','.join(PARTS)}")
    if args.connections < 1 or args.requests < 1 or args.slow_limit < 2 or args.busy < 0:
        parser.error("--connections and --requests at least 1, --slow-limit at least 2, --busy at least 0")
    if not 1 <= args.slow_addresses <= 250:
        parser.error("--slow-addresses: 1 to 250")
    if args.max_connections <= args.connections:
        parser.error("--max-connections must be above --connections: none of them is to be shed")
    return args


def raise_file_limit(wanted: int) -> int:
    """Raise this process's soft limit on open files to the hard limit; the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        sys.exit(f"the open file limit ({soft}) is below {wanted}: lower --connections or raise ulimit -n")
    return int(soft)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(__file__, args, argv)
    file_limit = raise_file_limit(args.connections + 200 if "memory" in args.parts else 1024)
    with (
        temp_folder("smq-bench-connections-") as folder,
        redis_server(args.redis_server, folder / "redis") as server,
    ):
        version = redis_version(server)
        variants = {"quiet": variant(0, server.url, folder, args, run)}
        if args.busy:
            variants["busy"] = variant(args.busy, server.url, folder, args, run)
        results = run.rounds(variants, args.repeat, order="alternate", show=show)
    print(
        f"\n{args.repeat} rounds, quiet and with {args.busy} busy loops taking turns; Redis {version}. "
        "No peer: the figures are absolute."
    )
    if "memory" in args.parts:
        print(
            f"\nMemory per idle connection: {args.connections:,} connections held by one smq serve "
            f"(--max-connections {args.max_connections}, --header-timeout 120, no cap per address); "
            "RSS of its process, medians (range):\n"
        )
        print(memory_table(results, args.connections))
    if "slow" in args.parts:
        print(
            f"\nSlow sockets: --max-connections {args.slow_limit} (per address: half), "
            f"{args.slow_addresses} addresses opening {args.slow_per_address} stalled sockets each and "
            f"refilling the limit before each request; {args.requests} ListQueues from another address "
            "per round:\n"
        )
        print(slow_table(results))
    run.write(
        args.output,
        {"rounds": results},
        packages=("aiohttp",),
        redis_version=version,
        busy_loops=args.busy,
        file_limit=file_limit,
        peers="none: the figures are absolute",
        transport="TCP on 127.0.0.1 (clients to smq serve, smq serve to Redis)",
        figures="RSS: VmRSS of smq serve's process; latency: ms from connect to the reply's end",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
