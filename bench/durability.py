"""What waiting for replicas costs: smq with no wait, WAIT 1, WAIT 2, and WAITAOF, side by side.

One primary and two replicas on this machine (embedded servers on TCP ports of
127.0.0.1, AOF on), one client thread through smq's public API. A cycle is
send, receive, delete of one message; each call is timed. Every setting runs
``--rounds`` rounds of ``--seconds`` each, the settings taking turns within a
round, so a drift of the machine falls on all of them alike.

Two deployments, one after the other:

- ``appendfsync everysec`` (smq's embedded default): no wait, ``wait_replicas``
  1 and 2, and ``wait_aof`` with no replica (the primary's own disk).
- ``appendfsync always`` on all three servers: no wait, and ``wait_aof`` with
  1 and 2 replicas (a replica under ``everysec`` writes its file to disk once a
  second, so a ``WAITAOF`` for it waits up to that second).

Reported: messages per second (end to end), p50/p99 of a cycle and of each
call, and each setting's ratio to no wait in its deployment (the median over
rounds of each round's ratio), with the 1-minute load average at each round.
The default (``wait_replicas`` unset) waits for every replica: 2 here.

Run: ``.venv/bin/python bench/durability.py`` (about 2 minutes; a quick check:
``--seconds 1 --rounds 1``); ``--busy 2`` runs two busy loops beside it, for
the figure on a busy machine.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _harness import Options, Run, ratios, redis_version, summary, temp_folder

import smq
from smq.embedded import EmbeddedRedis, free_port

BODY = "x" * 100
OPERATIONS = ("send", "receive", "delete")
# The first setting of each deployment is the base of its ratios.
DEPLOYMENTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "everysec": [
        ("no wait (wait_replicas=0)", {"wait_replicas": 0}),
        ("default: every replica (2)", {}),
        ("wait_replicas=1", {"wait_replicas": 1}),
        ("wait_replicas=2", {"wait_replicas": 2}),
        ("wait_aof (primary only)", {"wait_aof": True, "wait_replicas": 0}),
    ],
    "always": [
        ("no wait (wait_replicas=0)", {"wait_replicas": 0}),
        ("wait_aof, wait_replicas=1", {"wait_aof": True, "wait_replicas": 1}),
        ("wait_aof, wait_replicas=2", {"wait_aof": True, "wait_replicas": 2}),
    ],
}


# As the operations guide recommends: a primary without a replica refuses writes.
_GUARD = ["min-replicas-to-write 1", "min-replicas-max-lag 5"]


class Deployment:
    """A primary with two replicas, all with ``appendfsync`` as given."""

    def __init__(self, directory: Path, appendfsync: str, server: str | None) -> None:
        self.primary = EmbeddedRedis(
            directory / "primary",
            port=free_port(),
            server=server,
            appendfsync=appendfsync,
            config=["repl-diskless-sync-delay 0", *_GUARD],
        ).start()
        self.replicas = [
            EmbeddedRedis(
                directory / f"replica{n}",
                port=free_port(),
                server=server,
                appendfsync=appendfsync,
                config=[f"replicaof 127.0.0.1 {self.primary.port}", *_GUARD],
            ).start()
            for n in range(2)
        ]
        deadline = time.monotonic() + 60
        with self.primary.client() as admin:
            while admin.execute_command("WAIT", 2, 100) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the replicas did not come online")
        self.version = redis_version(self.primary)

    def stop(self) -> None:
        for node in [*self.replicas, self.primary]:
            node.stop()


def run_cycles(queue: smq.Queue, seconds: float, samples: dict[str, list[int]]) -> int:
    """Send, receive, delete one message at a time for ``seconds``; returns the cycles done."""
    cycles = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        t0 = time.perf_counter_ns()
        queue.send(BODY)
        t1 = time.perf_counter_ns()
        (message,) = queue.receive(1)
        t2 = time.perf_counter_ns()
        queue.delete(message)
        t3 = time.perf_counter_ns()
        samples["send"].append(t1 - t0)
        samples["receive"].append(t2 - t1)
        samples["delete"].append(t3 - t2)
        samples["cycle"].append(t3 - t0)
        cycles += 1
    return cycles


def measure(
    deployment: Deployment, settings: list[tuple[str, dict[str, Any]]], args: Any, run: Run
) -> list[dict[str, Any]]:
    clients = {
        label: smq.Client(smq.Settings(url=deployment.primary.url, wait_timeout=5, **options))
        for label, options in settings
    }
    queues = {label: client.create_queue(f"bench-{n}") for n, (label, client) in enumerate(clients.items())}
    samples: dict[str, dict[str, list[int]]] = {
        label: {op: [] for op in (*OPERATIONS, "cycle")} for label in clients
    }
    cycles = dict.fromkeys(clients, 0)
    elapsed = dict.fromkeys(clients, 0.0)
    per_round: dict[str, list[float]] = {label: [] for label in clients}
    try:
        for label in clients:  # warm up: scripts loaded, connections open
            run_cycles(queues[label], 0.2, {op: [] for op in (*OPERATIONS, "cycle")})
        for _ in run.each_round(args.repeat):
            for label in clients:
                started = time.perf_counter()
                done = run_cycles(queues[label], args.seconds, samples[label])
                took = time.perf_counter() - started
                cycles[label] += done
                elapsed[label] += took
                per_round[label].append(done / took)
    finally:
        for client in clients.values():
            client.close()
    rows = []
    for label, options in settings:
        rows.append(
            {
                "setting": label,
                "options": options,
                "messages_per_second": round(cycles[label] / elapsed[label], 1),
                "cycle": summary(samples[label]["cycle"]),
                **{op: summary(samples[label][op]) for op in OPERATIONS},
            }
        )
    base = rows[0]
    loads = [load["start"][0] for load in run.loads[-args.repeat :]]
    for row in rows:
        # Ratio: the median over rounds of each round's ratio (the settings take turns in a round).
        ratio = statistics.median(ratios(per_round[row["setting"]], per_round[base["setting"]]))
        row["throughput_ratio"] = round(ratio, 2)
        row["load_1min"] = loads
        row["p50_ratio"] = round(row["cycle"]["p50_us"] / base["cycle"]["p50_us"], 2)
        row["p99_ratio"] = round(row["cycle"]["p99_us"] / base["cycle"]["p99_us"], 2)
    return rows


def table(fsync: str, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"appendfsync {fsync} on all three servers",
        "",
        "| setting | msgs/s | ratio | cycle p50 µs | cycle p99 µs | p50 ratio | p99 ratio "
        "| send p50/p99 µs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['setting']} | {row['messages_per_second']:,.0f} | {row['throughput_ratio']:.2f} "
            f"| {row['cycle']['p50_us']:.0f} | {row['cycle']['p99_us']:.0f} | {row['p50_ratio']:.2f} "
            f"| {row['p99_ratio']:.2f} | {row['send']['p50_us']:.0f} / {row['send']['p99_us']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = Options(__doc__, "durability", repeat_flags=("--rounds", "--repeat"))
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one round of one setting")
    parser.add_argument("--busy", type=int, default=0, help="busy loops (processes) beside the run")
    args = parser.parse_args(argv)
    run = Run(__file__, args, argv)
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(args.busy)
    ]
    try:
        deployments: dict[str, Any] = {}
        for fsync, settings in DEPLOYMENTS.items():
            with temp_folder("smq-durability-") as folder:
                deployment = Deployment(folder, fsync, args.redis_server)
                try:
                    deployments[fsync] = measure(deployment, settings, args, run)
                finally:
                    deployment.stop()
            print(table(fsync, deployments[fsync]) + "\n", flush=True)
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()
    run.write(
        args.output,
        {"deployments": deployments},
        seconds_per_round=args.seconds,
        rounds=args.repeat,
        busy_loops=args.busy,
        server_version=deployment.version,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
