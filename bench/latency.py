"""smq per-call latency, its cost at scale, and Redis memory per message.

Three parts, each on a freshly started embedded Redis reached over its Unix
socket, all in one process, through smq's public API only:

1. Latency and scale. Two queues on one server: an empty one and a big one
   holding ``--visible`` visible messages (default 1,000,000) and
   ``--inflight`` in flight (default 100,000; received with a 3600 s
   visibility timeout). In ``--rounds`` alternating rounds, at batch 1 and
   batch 10, each queue gets timed cycles of send (one batch), receive (one
   batch) and delete (what the receive returned), ``--calls`` cycles in all
   per queue and batch size. The empty queue holds at most one batch; the big
   one keeps its size (sends go to one end, receives take the oldest).
   Reported: p50/p99 per operation, and the big/empty ratio (target <= 1.3).
2. Memory. ``used_memory`` (INFO memory) before and after sending
   ``--memory-n`` messages (default 200,000) with a 100-byte body, and again
   after receiving all of them; bytes per message beyond the body (target <= 200
   for visible messages).

Run: ``.venv/bin/python bench/latency.py`` (a quick check:
``--visible 20000 --inflight 2000 --memory-n 20000 --calls 500``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from _harness import (
    BODY,
    BODY_BYTES,
    Cycles,
    Options,
    Run,
    Samples,
    progress,
    redis_server,
    redis_version,
    send_all,
    settle,
    summary,
    temp_folder,
    used_memory,
)

import smq

OPERATIONS = ("send", "receive", "delete")
BATCHES = (1, 10)
RATIO_TARGET = 1.3
MEMORY_TARGETS = (120, 200)  # bytes beyond the body: visible, in flight
HOLD_SECONDS = 3600  # visibility timeout of messages kept in flight on purpose
ROOMY_LIMIT = 10_000_000  # inflight_limit of the bench queues (the default, 120,000, is too low)

# -- part 1: latency, empty versus big -----------------------------------------------------


def fill(queue: smq.Queue, visible: int, inflight: int) -> dict[str, float]:
    """Make ``queue`` hold ``visible`` visible and ``inflight`` in-flight messages, by batches of 10."""
    total = visible + inflight
    send_seconds = send_all(queue, total, label="send")
    started = time.monotonic()
    held = 0
    while held < inflight:
        got = queue.receive(min(10, inflight - held), visibility_timeout=HOLD_SECONDS)
        if not got:
            raise RuntimeError("receive returned nothing while filling")
        held += len(got)
        if held % 20_000 < 10 or held == inflight:
            progress("receive", held, inflight, started)
    receive_seconds = time.monotonic() - started
    if inflight:
        print(file=sys.stderr)
    info = queue.attributes()
    if (info.visible, info.in_flight) != (visible, inflight):
        raise RuntimeError(f"filled queue holds {info.visible} visible and {info.in_flight} in flight")
    return {
        "send_msgs_per_s": round(total / send_seconds),
        "receive_msgs_per_s": round(inflight / receive_seconds) if inflight else 0,
    }


def latency_part(folder: Path, args: argparse.Namespace, run: Run) -> dict[str, Any]:
    with (
        redis_server(args.redis_server, folder / "latency", tcp=False) as server,
        smq.Client(server.url) as client,
    ):
        empty = client.create_queue("bench-empty", inflight_limit=ROOMY_LIMIT)
        big = client.create_queue("bench-big", inflight_limit=ROOMY_LIMIT)
        print(f"filling bench-big: {args.visible:,} visible + {args.inflight:,} in flight", file=sys.stderr)
        fill_rates = fill(big, args.visible, args.inflight)
        if args.settle:  # steady state: no AOF rewrite running, the grown hashes rehashed
            with server.client() as admin:
                settle(admin, [(big.keys.messages, "hash"), (big.keys.state, "hash")])
        queues = {"empty": empty, "big": big}
        samples: dict[str, dict[int, Samples]] = {
            state: {b: {op: [] for op in OPERATIONS} for b in BATCHES} for state in queues
        }
        per_round = max(1, args.calls // args.repeat)
        for queue in queues.values():  # warm up: scripts loaded, code paths hot
            for batch in BATCHES:
                Cycles(queue, batch, HOLD_SECONDS).measure(min(200, per_round), {op: [] for op in OPERATIONS})
        for round_number in run.each_round(args.repeat):
            print(f"  round {round_number}/{args.repeat}", file=sys.stderr)
            for state, queue in queues.items():
                for batch in BATCHES:
                    Cycles(queue, batch, HOLD_SECONDS).measure(per_round, samples[state][batch])
        info = big.attributes()
        if (info.visible, info.in_flight) != (args.visible, args.inflight):
            raise RuntimeError(f"bench-big now holds {info.visible} visible, {info.in_flight} in flight")
        version = redis_version(server)
    rows = []
    for batch in BATCHES:
        for operation in OPERATIONS:
            small = summary(samples["empty"][batch][operation])
            large = summary(samples["big"][batch][operation])
            rows.append(
                {
                    "operation": operation,
                    "batch": batch,
                    "empty": small,
                    "big": large,
                    "ratio_p50": round(large["p50_us"] / small["p50_us"], 2),
                    "ratio_p99": round(large["p99_us"] / small["p99_us"], 2),
                }
            )
    return {
        "redis_version": version,
        "calls_per_operation": per_round * args.repeat,
        "rounds": args.repeat,
        "big_queue": {"visible": args.visible, "in_flight": args.inflight, **fill_rates},
        "settled": args.settle,
        "rows": rows,
    }


# -- part 2: memory per message ----------------------------------------------------------


def memory_part(folder: Path, n: int, binary: str | None) -> dict[str, Any]:
    with redis_server(binary, folder / "memory", tcp=False) as server, smq.Client(server.url) as client:
        queue = client.create_queue("bench-memory", inflight_limit=ROOMY_LIMIT)
        queue.send(BODY)  # load the scripts and create every key, then leave the queue empty
        queue.delete(queue.receive(1)[0].receipt_handle)
        with server.client() as admin:
            server_info = admin.info("server")
            allocator = str(admin.info("memory")["mem_allocator"])
            before = used_memory(admin, rewrites=False)
            send_all(queue, n)
            visible = used_memory(admin, rewrites=False)
            held = 0
            while held < n:
                held += len(queue.receive(10, visibility_timeout=HOLD_SECONDS))
            inflight = used_memory(admin, rewrites=False)
        info = queue.attributes()
        if (info.visible, info.in_flight) != (0, n):
            raise RuntimeError(f"memory queue: {info.visible} visible, {info.in_flight} in flight")

    def per_message(after: int) -> float:
        return round((after - before) / n - BODY_BYTES, 1)

    return {
        "redis_version": server_info["redis_version"],
        "mem_allocator": allocator,
        "messages": n,
        "body_bytes": BODY_BYTES,
        "used_memory_before": before,
        "used_memory_visible": visible,
        "used_memory_in_flight": inflight,
        "overhead_bytes_per_visible_message": per_message(visible),
        "overhead_bytes_per_in_flight_message": per_message(inflight),
    }


# -- report ----------------------------------------------------------------------------


def markdown(latency: dict[str, Any] | None, memory: dict[str, Any] | None) -> str:
    out: list[str] = []
    if latency:
        out += [
            f"Per-call latency on an empty queue (µs; Redis {latency['redis_version']}, Unix socket):",
            "",
            "| operation | batch | p50 | p99 | mean |",
            "|---|---|---|---|---|",
        ]
        for row in latency["rows"]:
            small = row["empty"]
            out.append(
                f"| {row['operation']} | {row['batch']} | {small['p50_us']:.1f} | {small['p99_us']:.1f} "
                f"| {small['mean_us']:.1f} |"
            )
        big = latency["big_queue"]
        out += [
            "",
            f"Cost at scale: empty queue versus one with {big['visible']:,} visible and "
            f"{big['in_flight']:,} in flight (µs, target big/empty <= {RATIO_TARGET}; "
            f"{'settled' if latency.get('settled') else 'not settled: during AOF rewrite and rehashing'}):",
            "",
            "| operation | batch | empty p50 | big p50 | big/empty p50 "
            "| empty p99 | big p99 | big/empty p99 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in latency["rows"]:
            small, large = row["empty"], row["big"]
            flag = "" if row["ratio_p50"] <= RATIO_TARGET else " (over)"
            out.append(
                f"| {row['operation']} | {row['batch']} | {small['p50_us']:.1f} | {large['p50_us']:.1f} "
                f"| {row['ratio_p50']:.2f}{flag} | {small['p99_us']:.1f} | {large['p99_us']:.1f} "
                f"| {row['ratio_p99']:.2f} |"
            )
    if memory:
        if out:
            out.append("")
        out += [
            f"Memory per message ({memory['messages']:,} messages, {memory['body_bytes']}-byte body, "
            f"Redis {memory['redis_version']} with {memory['mem_allocator']} malloc; "
            f"bytes beyond the body, targets <= {MEMORY_TARGETS[0]} visible and "
            f"<= {MEMORY_TARGETS[1]} in flight):",
            "",
            "| state | used_memory before | after | bytes/message beyond the body |",
            "|---|---|---|---|",
            f"| visible | {memory['used_memory_before']:,} | {memory['used_memory_visible']:,} "
            f"| {memory['overhead_bytes_per_visible_message']:.1f} |",
            f"| in flight | {memory['used_memory_before']:,} | {memory['used_memory_in_flight']:,} "
            f"| {memory['overhead_bytes_per_in_flight_message']:.1f} |",
        ]
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Options(
        __doc__,
        "latency",
        repeat=5,
        repeat_flags=("--rounds", "--repeat"),
        repeat_help="alternating empty/big rounds",
    )
    parser.add_argument("--visible", type=int, default=1_000_000, help="visible messages in the big queue")
    parser.add_argument("--inflight", type=int, default=100_000, help="in-flight messages in the big queue")
    parser.add_argument("--memory-n", type=int, default=200_000, help="messages of the memory measurement")
    parser.add_argument("--calls", type=int, default=5000, help="timed calls per operation, batch and queue")
    parser.add_argument(
        "--no-settle",
        dest="settle",
        action="store_false",
        help="measure right after the fill, during AOF rewrites and hash rehashing",
    )
    parser.add_argument("--skip-latency", action="store_true", help="only measure memory")
    parser.add_argument("--skip-memory", action="store_true", help="only measure latency")
    args = parser.parse_args(argv)
    for name in ("visible", "inflight", "calls", "memory_n"):
        if getattr(args, name) < (0 if name == "inflight" else 1):
            parser.error(f"--{name.replace('_', '-')} is too small")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(__file__, args, argv)
    latency: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    with temp_folder() as folder:
        if not args.skip_memory:
            print(f"memory: {args.memory_n:,} messages ...", file=sys.stderr)
            memory = memory_part(folder, args.memory_n, args.redis_server)
        if not args.skip_latency:
            print("latency ...", file=sys.stderr)
            latency = latency_part(folder, args, run)
    print(markdown(latency, memory))
    run.write(
        args.output,
        {"latency": latency, "memory": memory},
        transport="unix socket, embedded redis-server",
        body_bytes=BODY_BYTES,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
