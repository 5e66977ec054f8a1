"""Does the smq streaming source grow with its partitions? P partitions against P plain consumers.

One run starts one Redis (``EmbeddedRedis`` in a temporary folder, TCP on 127.0.0.1) and,
for each Spark mode, one Spark application:

- ``local``: ``local[4]`` (4 task slots in the bench's own JVM);
- ``cluster``: a standalone cluster the bench starts itself from the pip PySpark (a
  master and 2 workers of 2 cores each, by ``spark-class``; see ``tests/spark_cluster.py``),
  the application's executors being JVMs of their own.

For P in ``--partitions`` (1, 2, 4), in ``--repeat`` rounds, each over every cell:

- **stream**: ``--messages`` (100,000) preloaded 100-byte messages, then
  ``spark.readStream.format("smq")`` with ``numPartitions`` P and ``maxMessagesPerBatch``
  ``--batch`` (25,000) into the ``noop`` sink, timed from ``start()`` until the queue is
  empty (its start, its batches and the empty batch that commits the last one);
- **consumers**: the same messages, then P plain consumer processes (``receive(10)`` +
  ``delete_batch``, started and connected before the clock starts), timed until the
  last is done.

The figure is messages per second, the median of the rounds; the ratio is stream ÷
consumers for the same P. The issue's target: >= 0.8x. See ``bench/README.md``.

Run: ``.venv/bin/python bench/spark_scale.py`` (about 8 minutes), ``--quick`` (1 round,
20,000 messages, local only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from _harness import ROOT, Options, Run, cpu_share, ints, redis_server, reset, send_all, waiting
from spark import ClientSpec, body, cpu_snapshot, run_clients, split

import smq
from smq.embedded import EmbeddedRedis

sys.path.insert(0, str(ROOT / "tests"))
from spark_cluster import standalone_cluster

POLL_SECONDS = 0.02


def start_spark(master: str) -> Any:
    from smq.spark import spark_session

    spark = spark_session(
        master,
        app_name="smq-bench-scale",
        **{
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.executor.memory": "1g",
            "spark.sql.streaming.numRecentProgressUpdates": "100000",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stream_cell(
    spark: Any, client: smq.Client, folder: Path, partitions: int, args: argparse.Namespace, redis_pid: int
) -> dict[str, Any]:
    queue = client.create_queue("scale")
    send_all(queue, args.messages, body=body)
    checkpoint = folder / f"ck-{time.monotonic_ns()}"
    query = (
        spark.readStream.format("smq")
        .option("url", client.settings.url)
        .option("queue", "scale")
        .option("numPartitions", str(partitions))
        .option("maxMessagesPerBatch", str(args.batch))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
    )
    cpu_0, started = cpu_snapshot(redis_pid), time.perf_counter()
    running = query.start()
    try:
        while waiting(queue):
            if not running.isActive:
                raise RuntimeError(f"the query ended: {running.exception()}")
            time.sleep(POLL_SECONDS)
        seconds = time.perf_counter() - started
        cpu = cpu_share(cpu_0, cpu_snapshot(redis_pid), seconds)
        batches = [p for p in running.recentProgress if p["numInputRows"] > 0]
    finally:
        running.stop()
    deleted = queue.attributes().counters.get("deleted", 0)
    if deleted != args.messages:
        print(f"warning: stream P={partitions} deleted {deleted} of {args.messages}", file=sys.stderr)
    durations = [p["durationMs"] for p in batches]
    # While the batches ran: from the first data batch's trigger to the end of the last one
    # (leaves out the query's start, and the wait and empty batch that commit the last one).
    starts = [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() for p in batches]
    running_s = starts[-1] + durations[-1]["triggerExecution"] / 1000 - starts[0] if batches else seconds
    rows = sum(p["numInputRows"] for p in batches)
    return {
        "seconds": round(seconds, 3),
        "msgs_per_s": round(args.messages / seconds, 1),
        "batches_seconds": round(running_s, 3),
        "batches_msgs_per_s": round(rows / running_s, 1),
        "batches": len(batches),
        "cpu_percent_of_a_core": cpu,
        "machine_cpu_us_per_message": round(cpu["machine"] / 100 * seconds * 1e6 / args.messages, 1),
        "cpu_us_per_message": per_role(cpu, seconds, args.messages),
        "ms_per_batch": {
            key: statistics.median(d.get(key, 0) for d in durations) if durations else None
            for key in ("latestOffset", "walCommit", "addBatch", "commitOffsets", "triggerExecution")
        },
    }


ROLES = {
    "driver": ("jvm", "source runner", "spark python workers"),
    "executors": ("executor jvm", "executor py workers"),
    "redis": ("redis",),
}
"""CPU groups of ``bench/spark.py`` by role. In local mode the one JVM and its Python workers
are driver and executors at once, counted as the driver."""


def per_role(cpu: dict[str, float], seconds: float, messages: int) -> dict[str, float]:
    """CPU µs per message of the driver, the executors and Redis (from % of a core over ``seconds``)."""
    return {
        role: round(sum(cpu.get(group, 0.0) for group in groups) / 100 * seconds * 1e6 / messages, 1)
        for role, groups in ROLES.items()
    }


def consumer_cell(
    server: EmbeddedRedis, client: smq.Client, partitions: int, args: argparse.Namespace
) -> dict[str, Any]:
    queue = client.create_queue("scale")
    send_all(queue, args.messages, body=body)
    specs = [
        ClientSpec("consume", client.settings.url, "scale", first, count, False, n)
        for n, (first, count) in enumerate(split(args.messages, partitions))
    ]
    result = run_clients(specs, server.process.pid)
    cpu = result["cpu_percent_of_a_core"]
    return {
        "seconds": result["seconds"],
        "msgs_per_s": result["msgs_per_s"],
        "cpu_percent_of_a_core": cpu,
        "machine_cpu_us_per_message": round(
            cpu["machine"] / 100 * result["seconds"] * 1e6 / args.messages, 1
        ),
    }


def run_mode(
    mode: str, server: EmbeddedRedis, folder: Path, args: argparse.Namespace, run: Run
) -> list[dict[str, Any]]:
    client = smq.Client(server.url)
    cells: list[dict[str, Any]] = []

    def measure(master: str) -> None:
        spark = start_spark(master)
        try:
            # Warm-up, not measured: the first query starts Spark's Python workers.
            stream_cell(
                spark,
                client,
                folder,
                max(args.partitions),
                argparse.Namespace(**{**vars(args), "messages": 2_000}),
                server.process.pid,
            )
            reset(server)
            for round_ in run.each_round(args.repeat):
                for partitions in args.partitions:
                    for kind in ("stream", "consumers"):
                        if kind == "stream":
                            cell = stream_cell(spark, client, folder, partitions, args, server.process.pid)
                        else:
                            cell = consumer_cell(server, client, partitions, args)
                        reset(server)
                        cell.update(mode=mode, kind=kind, partitions=partitions, round=round_ - 1)
                        print(json.dumps(cell), flush=True)
                        cells.append(cell)
        finally:
            spark.stop()

    if mode == "local":
        measure("local[4]")
    else:
        with standalone_cluster(workers=2, cores_per_worker=2, memory="2g") as cluster:
            measure(cluster.master_url)
    client.close()
    return cells


def _of(
    cells: list[dict[str, Any]], cell: tuple[str, int], kind: str, key: str = "msgs_per_s"
) -> list[float]:
    return [c[key] for c in cells if (c["mode"], c["partitions"], c["kind"]) == (*cell, kind)]


def summarise(cells: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for mode in args.modes:
        for partitions in args.partitions:
            cell = (mode, partitions)
            rates = {
                "stream": _of(cells, cell, "stream"),
                "consumers": _of(cells, cell, "consumers"),
                "batches": _of(cells, cell, "stream", "batches_msgs_per_s"),
            }
            if not all(rates.values()):
                continue
            stream, consumers = (statistics.median(rates[k]) for k in ("stream", "consumers"))
            streams = [c for c in cells if (c["mode"], c["partitions"], c["kind"]) == (*cell, "stream")]
            rows.append(
                {
                    "mode": mode,
                    "partitions": partitions,
                    "stream": stream,
                    "stream_range": [min(rates["stream"]), max(rates["stream"])],
                    "consumers": consumers,
                    "consumers_range": [min(rates["consumers"]), max(rates["consumers"])],
                    "ratio": round(stream / consumers, 2),
                    "batches": statistics.median(rates["batches"]),
                    "batches_ratio": round(statistics.median(rates["batches"]) / consumers, 2),
                    "stream_cpu_us_per_message": {
                        role: statistics.median(c["cpu_us_per_message"][role] for c in streams)
                        for role in ROLES
                    },
                }
            )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| mode | P | stream, start() to empty, msgs/s | while batches ran | P plain consumers, msgs/s "
        "| ÷ consumers: whole / batches | stream CPU µs/msg: driver / executors / Redis |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        stream = f"{r['stream']:,.0f} ({r['stream_range'][0]:,.0f}–{r['stream_range'][1]:,.0f})"
        consumers = f"{r['consumers']:,.0f} ({r['consumers_range'][0]:,.0f}–{r['consumers_range'][1]:,.0f})"
        cpu = " / ".join(f"{r['stream_cpu_us_per_message'][role]:.0f}" for role in ROLES)
        lines.append(
            f"| {r['mode']} | {r['partitions']} | {stream} | {r['batches']:,.0f} | {consumers} "
            f"| {r['ratio']:.2f}× / {r['batches_ratio']:.2f}× "
            f"| {cpu} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    quick = {"repeat": 1, "modes": "local", "messages": 20_000}
    parser = Options(__doc__, "spark-scale", quick=quick)
    parser.add_argument("--messages", type=int, default=100_000, help="default 100,000")
    parser.add_argument("--batch", type=int, default=25_000, help="maxMessagesPerBatch")
    parser.add_argument("--partitions", default="1,2,4")
    parser.add_argument("--modes", default="local,cluster")
    args = parser.parse_args(argv)
    args.partitions = ints(args.partitions)
    args.modes = [m for m in args.modes.split(",") if m]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(__file__, args, argv, name="spark-scale")
    cells: list[dict[str, Any]] = []
    with redis_server(args.redis_server) as server:
        for mode in args.modes:
            cells += run_mode(mode, server, server.directory, args, run)
    rows = summarise(cells, args)
    print(table(rows))
    run.write(args.output, {"cells": cells, "summary": rows}, packages=("pyspark", "pyarrow"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
