"""Sharded queues: one queue of 1 shard against one of 3 shards, on a 3-primary Redis Cluster.

One run starts one ``EmbeddedCluster`` (3 primaries, no replicas, TCP on
127.0.0.1) in a temporary folder. For each process layout and each shard
count (``--shards``, default 1 and 3) a fresh queue is created with
``create_queue(name, shards=N)``; ``P`` producer processes send batches of 10
(``send_batch``) continuously, ``C`` consumer processes ``receive(10,
wait_time_seconds=1)`` and ``delete_batch`` what came. After a warm-up the
messages deleted during the window are counted: **the figure is messages
deleted per second, end to end**.

Over the same window each node's own CPU counters (``INFO cpu``: the whole
process, and its main thread, which runs every command) give **Redis CPU
microseconds per message per node**: that node's CPU time divided by the
messages deleted in the window. On hosts where each primary has a core of its
own and the clients run elsewhere, a queue's ceiling is its busiest node's
main thread: about 1e6 / (that node's CPU µs per message) messages per second.
The run prints that projection for each shard count and their ratio. On a
small machine the clients and the three servers share the cores, so the
end-to-end figures measure the machine, not the queue: both ratios are
reported and ``bench/README.md`` explains the difference.

A node's CPU per message also falls as its load rises, and one shard's node
carries about three times the load of each of three shards' nodes. So per
layout one more cell runs one shard with its consumers paced to the rate each
node of the most-sharded queue carried: at equal load per node, its CPU per
message against the sharded node's CPU per message of its own shard shows
what sharding itself adds (``--no-equal-load`` skips that cell).

Checked on the way: after each cell the messages the producers sent equal
those the consumers deleted plus those left in the queue (``attributes()``),
the queue's own counters agree, and nothing was delivered twice.

Run: ``.venv/bin/python bench/shards.py`` (about 100 s; a quick check:
``--seconds 2 --warmup 1 --layouts 2x2``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from _harness import (
    BODY,
    STOP,
    Fleet,
    Options,
    Run,
    ints,
    layouts,
    machine_cpu,
    median,
    process_cpu,
    produce,
    ready,
    reporting,
    reset,
    table,
    temp_folder,
)
from redis.cluster import RedisCluster

import smq
from smq.core._keys import QueueKeys
from smq.embedded import EmbeddedCluster, EmbeddedRedis

BATCH = 10
POLL_SECONDS = 1
SAMPLE_SECONDS = 0.25  # how often the parent samples the backlog during the window
TARGET_RATIO = 2.4  # 3 shards against 1: 80% of linear; other shard counts are held to 80% too
SCRIPT_COMMANDS = ("evalsha", "eval", "fcall")


# -- worker processes ------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSpec:
    role: str  # "producer" or "consumer"
    index: int  # slot in the shared counter arrays of its role
    url: str
    queue: str
    max_backlog: int
    rate: float  # messages per second this consumer deletes at most (0: no limit)


def worker(spec: WorkerSpec, sent: Any, deleted: Any, failed: Any, flags: Any, events: Any) -> None:
    """A producer or a consumer; its running count goes to its own slot of a shared array."""
    label = f"{spec.role} {spec.index}"
    with reporting(label, events):
        client = smq.Client(settings=smq.Settings(url=spec.url, cluster=True))
        queue = client.queue(spec.queue)
        entries = [smq.SendEntry(f"m{i}", BODY) for i in range(BATCH)]
        ids = [f"d{i}" for i in range(BATCH)]
        queue.attributes()  # connected, and the queue's shards read, before the clock starts
        ready(label, flags, events)
        total = 0
        if spec.role == "producer":

            def send() -> int:
                result = queue.send_batch(entries)
                failed[spec.index] += len(result.failed)
                return len(result.successful)

            produce(send, spec.index, sent, deleted, flags, spec.max_backlog)
        else:
            offset = len(sent)  # consumers' failures follow the producers' in ``failed``
            due = time.monotonic()
            while not flags[STOP]:
                messages = queue.receive(BATCH, wait_time_seconds=POLL_SECONDS)
                if not messages:
                    continue
                gone = queue.delete_batch(
                    [smq.DeleteEntry(i, m.receipt_handle) for i, m in zip(ids, messages, strict=False)]
                )
                total += len(gone.successful)
                failed[offset + spec.index] += len(gone.failed)
                deleted[spec.index] = total
                if spec.rate:  # paced: the queue stays full, so each call still takes a whole batch
                    due = max(due + len(messages) / spec.rate, time.monotonic() - 0.1)
                    time.sleep(max(0.0, due - time.monotonic()))
        client.close()
        events.put(("done", label, ""))


# -- what the machine and the servers did ----------------------------------------------


def node_stats(node: EmbeddedRedis) -> dict[str, float]:
    """A node's own counters so far: CPU seconds (``INFO cpu``: process user and system, main
    thread, forked children), script calls and their time (``INFO commandstats``), and where
    the server reports them its event loop's cycles and time (``INFO stats``, Valkey 8+)."""
    with node.client() as admin:
        cpu = admin.info("cpu")
        commands = admin.info("commandstats")
        stats = admin.info("stats")
    found = {
        "process": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        "process_sys": float(cpu["used_cpu_sys"]),
        "children": float(cpu["used_cpu_sys_children"]) + float(cpu["used_cpu_user_children"]),
    }
    if "used_cpu_sys_main_thread" in cpu:
        found["main_thread"] = float(cpu["used_cpu_sys_main_thread"]) + float(
            cpu["used_cpu_user_main_thread"]
        )
    found["script_calls"] = float(
        sum(commands.get(f"cmdstat_{c}", {}).get("calls", 0) for c in SCRIPT_COMMANDS)
    )
    found["script_usec"] = float(
        sum(commands.get(f"cmdstat_{c}", {}).get("usec", 0) for c in SCRIPT_COMMANDS)
    )
    for key in ("eventloop_cycles", "eventloop_duration_sum", "eventloop_duration_cmd_sum"):
        if key in stats:
            found[key] = float(stats[key])
    return found


def shard_counters(admin: RedisCluster, names: list[str]) -> list[dict[str, int]]:
    """Each shard's counters (its ``stats`` hash), read straight from its node."""
    found = []
    for name in names:
        raw = admin.hgetall(QueueKeys.of(name).stats)
        found.append({key.decode(): int(value) for key, value in raw.items()})
    return found


def node_of(admin: RedisCluster, cluster: EmbeddedCluster, name: str) -> int:
    """Index in ``cluster.nodes`` of the node that serves queue ``name``."""
    port = int(admin.get_node_from_key(QueueKeys.of(name).meta).port)
    return next(i for i, node in enumerate(cluster.nodes) if node.port == port)


# -- one cell --------------------------------------------------------------------------


def run_cell(
    cluster: EmbeddedCluster,
    admin: RedisCluster,
    *,
    shards: int,
    layout: str,
    number: int,
    args: Any,
    pace: float = 0.0,
) -> dict[str, Any]:
    """One queue of ``shards`` shards under ``layout``; consumers paced to ``pace`` msgs/s if set."""
    producers, consumers = (int(n) for n in layout.split("x"))
    name = f"bench-{shards}shard-{layout}-{number}"
    with smq.Client(settings=smq.Settings(url=cluster.url, cluster=True)) as client:
        shard_names = client.create_queue(name, shards=shards).shard_names()
    placement = [node_of(admin, cluster, shard) for shard in shard_names]
    specs = [
        WorkerSpec(role, i, cluster.url, name, args.max_backlog, pace / consumers)
        for role, count in (("consumer", consumers), ("producer", producers))
        for i in range(count)
    ]
    with Fleet(worker, specs, (producers, consumers, producers + consumers)) as fleet:
        sent, deleted, failed = fleet.arrays

        def read() -> dict[str, Any]:
            return {
                "counters": shard_counters(admin, shard_names),
                "stats": [node_stats(node) for node in cluster.nodes],
                "host": machine_cpu()[0],
                "clients": process_cpu(*fleet.pids),
            }

        measured = fleet.window(
            args.seconds, args.warmup, read, sample=lambda: sum(sent) - sum(deleted), every=SAMPLE_SECONDS
        )
        fleet.stop(timeout=30)
    window, backlog_samples = measured.seconds, measured.samples
    counters_0, counters_1 = measured.before["counters"], measured.after["counters"]
    stats_0, stats_1 = measured.before["stats"], measured.after["stats"]
    messages = sum(measured.counts[1])
    check = check_queue(cluster, admin, name, shard_names, sum(sent), sum(deleted), sum(failed))

    # Each shard's own counters over the window: how evenly the work spread.
    per_shard: list[dict[str, Any]] = [
        {
            "shard": shard,
            "node": at,
            **{
                key: after.get(key, 0) - before.get(key, 0)
                for key in ("sent", "received", "deleted", "empty_receives")
            },
        }
        for shard, at, before, after in zip(shard_names, placement, counters_0, counters_1, strict=True)
    ]
    nodes = []
    for index, (before, after) in enumerate(zip(stats_0, stats_1, strict=True)):
        spent = {kind: after[kind] - before[kind] for kind in after}
        handled = sum(s["deleted"] for s in per_shard if s["node"] == index)

        def per(kind: str, count: int, scale: float = 1e6, spent: dict[str, float] = spent) -> float | None:
            return round(spent[kind] * scale / count, 2) if count and kind in spent else None

        nodes.append(
            {
                "node": index,
                "port": cluster.nodes[index].port,
                "shards": [shard for shard, at in zip(shard_names, placement, strict=True) if at == index],
                "messages_of_its_shards": handled,
                "cpu_s": round(spent["process"], 4),
                "sys_cpu_s": round(spent["process_sys"], 4),
                "main_thread_cpu_s": round(spent["main_thread"], 4) if "main_thread" in spent else None,
                "children_cpu_s": round(spent["children"], 4),
                # Per message of the queue (the whole queue's deletes in the window) ...
                "cpu_us_per_msg": per("process", messages),
                "main_thread_us_per_msg": per("main_thread", messages),
                # ... and per message of the node's own shards.
                "main_thread_us_per_own_msg": per("main_thread", handled),
                "script_calls": int(spent["script_calls"]),
                "script_us_per_msg": per("script_usec", messages, 1),
                "eventloop_cycles": int(spent.get("eventloop_cycles", 0)) or None,
                "eventloop_us_per_msg": per("eventloop_duration_sum", messages, 1),
            }
        )
    redis_cpu = sum(n["cpu_s"] for n in nodes)
    clients_cpu = measured.delta("clients")
    busy = measured.delta("host")
    children_cpu = sum(n["children_cpu_s"] for n in nodes)
    counts = [s["deleted"] for s in per_shard]
    return {
        "kind": "paced" if pace else "saturated",
        "shards": shards,
        "layout": layout,
        "producers": producers,
        "consumers": consumers,
        "pace_msgs_per_s": pace or None,
        "queue": name,
        "shard_names": shard_names,
        "window_s": round(window, 4),
        "deleted": messages,
        "sent": sum(measured.counts[0]),
        "deleted_per_s": round(messages / window, 1),
        "sent_per_s": round(sum(measured.counts[0]) / window, 1),
        "backlog": {
            "mean": round(statistics.fmean(backlog_samples), 1) if backlog_samples else None,
            "min": min(backlog_samples, default=None),
            "max": max(backlog_samples, default=None),
        },
        "nodes": nodes,
        "per_shard_in_window": per_shard,
        "spread": round(max(counts) / min(counts), 3) if min(counts) else None,
        "script_calls_per_msg": round(sum(n["script_calls"] for n in nodes) / messages, 3)
        if messages
        else None,
        "empty_receives": sum(s["empty_receives"] for s in per_shard),
        "redis_cpu_s": round(redis_cpu, 4),
        "redis_cpu_us_per_msg": round(redis_cpu * 1e6 / messages, 2) if messages else None,
        "busiest_node_share": round(max(n["cpu_s"] for n in nodes) / redis_cpu, 3) if redis_cpu else None,
        "busiest_node_us_per_msg": bound_us(nodes),
        "clients_cpu_s": round(clients_cpu, 3),
        "clients_cpu_us_per_msg": round(clients_cpu * 1e6 / messages, 2) if messages else None,
        "host_busy_cores": round(busy / window, 2) if busy else None,
        "others_cores": round((busy - redis_cpu - children_cpu - clients_cpu) / window, 2) if busy else None,
        "check": check,
    }


def check_queue(
    cluster: EmbeddedCluster,
    admin: RedisCluster,
    name: str,
    shard_names: list[str],
    sent: int,
    deleted: int,
    failed: int,
) -> dict[str, Any]:
    """After a cell: nothing lost, nothing delivered twice, the queue's counters agree; then delete it."""
    with smq.Client(settings=smq.Settings(url=cluster.url, cluster=True)) as client:
        info = client.queue(name).attributes()
        per_shard = shard_counters(admin, shard_names)
        client.delete_queue(name)
    remaining = info.visible + info.in_flight + info.delayed
    counted = {key: info.counters.get(key, 0) for key in ("sent", "received", "deleted", "redelivered")}
    problems = []
    if sent != deleted + remaining:
        problems.append(f"sent {sent} != deleted {deleted} + remaining {remaining}")
    if counted["sent"] != sent or counted["deleted"] != deleted:
        problems.append(f"the queue counted {counted}; the workers sent {sent}, deleted {deleted}")
    if counted["redelivered"]:
        problems.append(f"{counted['redelivered']} messages delivered more than once")
    if info.in_flight:
        problems.append(f"{info.in_flight} messages in flight after every consumer stopped")
    if failed:
        problems.append(f"{failed} batch entries failed")
    return {
        "sent_total": sent,
        "deleted_total": deleted,
        "remaining": remaining,
        "queue_counters": counted,
        "shard_counters": dict(zip(shard_names, per_shard, strict=True)),
        "failed_entries": failed,
        "problems": problems,
        "ok": not problems,
    }


def bound_us(nodes: list[dict[str, Any]]) -> float | None:
    """CPU µs per message of the busiest node: its main thread's where Redis reports one."""
    per_node = [n["main_thread_us_per_msg"] or n["cpu_us_per_msg"] or 0.0 for n in nodes]
    return max(per_node) or None


# -- figures ---------------------------------------------------------------------------


def summarize(cells: list[dict[str, Any]], layouts: list[str], shard_counts: list[int]) -> dict[str, Any]:
    """Medians over the rounds: the saturated cells with their projection, and the equal-load check."""
    saturated = []
    for layout in layouts:
        base: dict[str, Any] | None = None
        for shards in shard_counts:
            mine = [
                c
                for c in cells
                if c["kind"] == "saturated" and c["layout"] == layout and c["shards"] == shards
            ]
            # Nodes busiest first: which node holds a one-shard queue depends on its name.
            ranked = [sorted(c["nodes"], key=lambda n: -n["cpu_s"]) for c in mine]
            row: dict[str, Any] = {
                "layout": layout,
                "shards": shards,
                "rounds": len(mine),
                "deleted_per_s": median([c["deleted_per_s"] for c in mine]),
                "cpu_us_per_msg_by_node": [
                    median([r[k]["cpu_us_per_msg"] for r in ranked]) for k in range(len(ranked[0]))
                ],
                "redis_cpu_us_per_msg": median([c["redis_cpu_us_per_msg"] for c in mine]),
                "busiest_node_share": median([c["busiest_node_share"] for c in mine]),
                "busiest_node_us_per_msg": median([c["busiest_node_us_per_msg"] for c in mine]),
                "spread": median([c["spread"] for c in mine]),
                "script_calls_per_msg": median([c["script_calls_per_msg"] for c in mine]),
                "empty_receives": sum(c["empty_receives"] for c in mine),
                "clients_cpu_us_per_msg": median([c["clients_cpu_us_per_msg"] for c in mine]),
                "host_busy_cores": median([c["host_busy_cores"] for c in mine]),
                "others_cores": median([c["others_cores"] for c in mine]),
                "all_checks_ok": all(c["check"]["ok"] for c in mine),
            }
            bound = row["busiest_node_us_per_msg"]
            row["projected_max_per_s"] = round(1e6 / bound) if bound else None
            base = base or row
            row["measured_ratio"] = round(row["deleted_per_s"] / base["deleted_per_s"], 2)
            row["projected_ratio"] = (
                round(row["projected_max_per_s"] / base["projected_max_per_s"], 2)
                if row["projected_max_per_s"] and base["projected_max_per_s"]
                else None
            )
            if row is not base and row["projected_ratio"] is not None:
                row["projected_meets_target"] = row["projected_ratio"] >= TARGET_RATIO * (shards / 3)
            saturated.append(row)
    equal_load = []
    for layout in layouts:
        for paced in (c for c in cells if c["kind"] == "paced" and c["layout"] == layout):
            sharded = next(
                c
                for c in cells
                if c["kind"] == "saturated"
                and c["layout"] == layout
                and c["round"] == paced["round"]
                and c["shards"] == paced["paced_for"]
            )
            busiest = max(sharded["nodes"], key=lambda n: n["main_thread_cpu_s"] or n["cpu_s"])
            equal_load.append(
                {
                    "layout": layout,
                    "round": paced["round"],
                    "shards": sharded["shards"],
                    "pace_msgs_per_s": paced["pace_msgs_per_s"],
                    "paced_deleted_per_s": paced["deleted_per_s"],
                    "one_shard_us_per_msg": paced["busiest_node_us_per_msg"],
                    "sharded_node_msgs_per_s": round(
                        busiest["messages_of_its_shards"] / sharded["window_s"], 1
                    ),
                    "sharded_us_per_own_msg": busiest["main_thread_us_per_own_msg"],
                    "sharded_busiest_us_per_msg": sharded["busiest_node_us_per_msg"],
                }
            )
    rows = []
    for layout in layouts:
        mine = [e for e in equal_load if e["layout"] == layout]
        if not mine:
            continue
        row = {key: median([e[key] for e in mine]) for key in mine[0] if key not in ("layout", "round")}
        row["layout"] = layout
        row["rounds"] = len(mine)
        one, own = row["one_shard_us_per_msg"], row["sharded_us_per_own_msg"]
        row["extra_cost_per_own_msg"] = round(own / one - 1, 3) if one and own else None
        rows.append(row)
    return {"saturated": saturated, "equal_load": rows, "equal_load_rounds": equal_load}


def markdown(summary: dict[str, Any]) -> str:
    header = [
        "layout",
        "shards",
        "msgs/s",
        "÷ 1 shard",
        "Redis CPU µs/msg by node, busiest first",
        "all nodes",
        "busiest node's share",
        "spread",
        "clients µs/msg",
        "busiest node, main thread µs/msg",
        "projected max msgs/s",
        "projected ÷ 1 shard",
    ]
    rows = []
    for row in summary["saturated"]:
        per_node = " / ".join(f"{v:.1f}" for v in row["cpu_us_per_msg_by_node"])
        projected = f"{row['projected_max_per_s']:,}" if row["projected_max_per_s"] else "n/a"
        ratio = f"{row['projected_ratio']:.2f}x" if row["projected_ratio"] else "n/a"
        spread = f"{row['spread']:.2f}" if row["spread"] and row["shards"] > 1 else "-"
        rows.append(
            [
                row["layout"],
                str(row["shards"]),
                f"{row['deleted_per_s']:,.0f}",
                f"{row['measured_ratio']:.2f}x",
                per_node,
                f"{row['redis_cpu_us_per_msg']:.1f}",
                f"{row['busiest_node_share']:.0%}",
                spread,
                f"{row['clients_cpu_us_per_msg']:.0f}",
                f"{row['busiest_node_us_per_msg']:.1f}",
                projected,
                ratio,
            ]
        )
    lines = [table(header, rows)]
    if summary["equal_load"]:
        lines += [
            "",
            "| layout | 1 shard paced to msgs/s | its node, CPU µs/msg | N shards: busiest node's msgs/s "
            "| its CPU µs per message of its own shards | sharded node against single node |",
            "|---|---|---|---|---|---|",
        ]
        for row in summary["equal_load"]:
            extra = row["extra_cost_per_own_msg"]
            lines.append(
                f"| {row['layout']} | {row['paced_deleted_per_s']:,.0f} | {row['one_shard_us_per_msg']:.1f} "
                f"| {row['sharded_node_msgs_per_s']:,.0f} ({row['shards']} shards) "
                f"| {row['sharded_us_per_own_msg']:.1f} | {extra:+.0%} |"
            )
    return "\n".join(lines)


PROJECTION = (
    "Projection: where each primary has a core of its own and the clients run on other hosts, a "
    "queue's ceiling is its busiest node's main thread: about 1e6 / (that node's CPU µs per "
    "message) messages per second. With one shard one node does all of the queue's work; with "
    "three each does about a third. A node's CPU per message falls as its load rises (more "
    "commands per event-loop cycle, warmer caches), and in the saturated cells the one-shard node "
    "carries about three times the load of each sharded node, which counts against the shards. The "
    "equal-load rows pace one shard to the load each sharded node carried and compare the CPU each "
    "node spends per message it handles: were sharding adding work on the servers, the sharded node "
    "would spend more (a paced node idles between calls, which costs too: read only a clear "
    "difference). On a machine where the clients and the three servers share a few cores, the "
    "end-to-end rate is bounded by those cores, not by any one node: spreading the same work over "
    "more servers cannot raise it."
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Options(__doc__, "shards", repeat=1, repeat_help="rounds over all cells; medians reported")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per cell (default 10)")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds run before the window (default 2)")
    parser.add_argument(
        "--layouts", default="2x2,4x4", help="PxC producers x consumers, comma list (default 2x2,4x4)"
    )
    parser.add_argument(
        "--shards",
        default="1,3",
        help="shard counts to compare, comma list; ratios are to the first (default 1,3)",
    )
    parser.add_argument(
        "--no-equal-load",
        dest="equal_load",
        action="store_false",
        help="skip the cell per layout that paces one shard to the load of each node of the most shards",
    )
    parser.add_argument(
        "--max-backlog",
        type=int,
        default=2_000,
        help="producers pause 1 ms while this many messages wait unconsumed (default 2000; 0: no limit)",
    )
    args = parser.parse_args(argv)
    args.layouts = layouts(parser, args.layouts)
    try:
        args.shards = ints(args.shards)
    except ValueError:
        parser.error("--shards: a comma list of numbers, e.g. 1,3")
    if not args.shards or any(n < 1 for n in args.shards):
        parser.error("--shards: each shard count must be 1 or more")
    return args


def idle_cores(seconds: float = 1.0) -> float | None:
    """How many cores the machine kept busy over ``seconds`` before the run (None without /proc)."""
    before = machine_cpu()
    time.sleep(seconds)
    after = machine_cpu()
    return round((after[0] - before[0]) / seconds, 2) if after[1] else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(__file__, args, argv)
    busy_before = idle_cores()
    if busy_before and busy_before > 0.25:
        print(f"WARNING: the machine kept {busy_before:.2f} cores busy before the run: figures will be off")
    cells: list[dict[str, Any]] = []
    with (
        temp_folder("smq-bench-shards-") as folder,
        EmbeddedCluster(folder, masters=3, server=args.redis_server) as cluster,
    ):
        server_version = str(cluster.nodes[0].identity)
        admin = RedisCluster.from_url(cluster.url)
        try:
            number = 0
            for round_number in run.each_round(args.repeat):
                for layout in args.layouts:
                    plan: list[tuple[int, int]] = [(shards, 0) for shards in args.shards]
                    most = max(args.shards)
                    if args.equal_load and most > 1 and 1 in args.shards:
                        plan.append((1, most))  # one shard paced to the load of each node of ``most``
                    done: dict[int, dict[str, Any]] = {}
                    for shards, paced_for in plan:
                        number += 1
                        pace = round(done[paced_for]["deleted_per_s"] / paced_for, -1) if paced_for else 0.0
                        label = f"{layout}  shards={shards}" + (f" paced to {pace:,.0f}/s" if pace else "")
                        print(
                            f"[{round_number}/{args.repeat}] {label} ...",
                            end=" ",
                            file=sys.stderr,
                            flush=True,
                        )
                        cell = run_cell(
                            cluster, admin, shards=shards, layout=layout, number=number, args=args, pace=pace
                        )
                        cell["round"] = round_number
                        cell["paced_for"] = paced_for or None
                        cells.append(cell)
                        done.setdefault(shards, cell)
                        per_node = " / ".join(f"{n['cpu_us_per_msg'] or 0:.1f}" for n in cell["nodes"])
                        print(
                            f"{cell['deleted_per_s']:>9,.0f} msgs/s  Redis µs/msg by node {per_node}"
                            f"  {'ok' if cell['check']['ok'] else 'CHECK FAILED'}",
                            file=sys.stderr,
                            flush=True,
                        )
                        for problem in cell["check"]["problems"]:
                            print(f"WARNING: {label}: {problem}")
                        if cell["spread"] and cell["spread"] > 1.1:
                            print(f"WARNING: {label}: uneven spread over the shards ({cell['spread']:.2f})")
                        for node in cluster.nodes:
                            reset(node)
        finally:
            admin.close()
    summary = summarize(cells, args.layouts, args.shards)
    print()
    print(markdown(summary))
    for row in summary["saturated"]:
        if "projected_meets_target" in row:
            verdict = "meets" if row["projected_meets_target"] else "does NOT meet"
            target = TARGET_RATIO * row["shards"] / 3
            print(
                f"\n{row['layout']}, {row['shards']} shards: projected {row['projected_ratio']:.2f}x "
                f"one shard ({verdict} the target of {target:.1f}x); measured end to end "
                f"{row['measured_ratio']:.2f}x on this machine"
            )
    print()
    print(PROJECTION)
    cpus = os.cpu_count()
    print(f"\nThis machine: {cpus} cores for the 3 servers and the client processes.")
    failures = [c for c in cells if not c["check"]["ok"]]
    meta = {
        "seconds": args.seconds,
        "warmup_seconds": args.warmup,
        "rounds": args.repeat,
        "layouts": args.layouts,
        "shard_counts": args.shards,
        "batch": BATCH,
        "body_bytes": len(BODY),
        "max_backlog": args.max_backlog,
        "figure": "messages deleted per second over the window, end to end (median over the rounds)",
        "cpu": "INFO cpu of each node over the window: used_cpu_sys + used_cpu_user (process) and "
        "used_cpu_sys_main_thread + used_cpu_user_main_thread, divided by the messages deleted",
        "projection": PROJECTION,
        "projected_max": "1e6 / the busiest node's main-thread CPU µs per message",
        "target_ratio": TARGET_RATIO,
        "deployment": "EmbeddedCluster: 3 primaries, no replicas, TCP on 127.0.0.1, AOF everysec",
        "server_version": server_version,
        "busy_cores_before": busy_before,
    }
    run.write(args.output, {"summary": summary, "cells": cells}, **meta)
    if failures:
        print(f"\n{len(failures)} cell(s) failed their checks: see the warnings above and the JSON")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
