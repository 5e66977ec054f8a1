"""Throughput of smq's PySpark data source (format "smq") on Spark local mode, against the plain client.

One run starts one ``redis-server`` (``EmbeddedRedis`` in a temporary folder, TCP on
127.0.0.1, as Spark's Python workers reach it) and one SparkSession (``--master``,
default ``local[2]``), and measures side by side, in ``--repeat`` rounds:

- **sink**: ``df.write.format("smq")...save()`` of ``--rows`` rows (100-byte bodies)
  in 2 and 4 partitions, with deduplication ids and without (``deduplicate=false``);
  only the ``save()`` call is timed, after warm-up writes. Beside it: the sink's own
  code (``QueueWriter.write``) on the same rows without Spark, and the plain client
  (``Queue.send_batch`` of 10) in 1 and 2 processes, with and without ids.
- **stream**: ``spark.readStream.format("smq")`` over ``--messages`` preloaded messages,
  into ``foreachBatch`` (a count) and the ``noop`` sink, ``maxMessagesPerBatch`` 1,000
  and 10,000, timed from ``start()`` until the queue is empty; beside it the plain
  consumer loop (``receive(10)`` + ``delete_batch``) in 1 and 2 processes.

Figures are messages per second (median of the rounds) and their ratio to the plain
client; CPU by process over each timed window (``others`` is CPU used by anything
else on the host). See ``bench/README.md``.

Run: ``.venv/bin/python bench/spark.py`` (about 6 minutes) or ``--quick`` (about 45 s).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from _harness import (
    BODY,
    BODY_BYTES,
    CLOCK_TICKS,
    Fleet,
    Options,
    Run,
    cpu_share,
    ints,
    machine_cpu,
    ready,
    redis_server,
    redis_version,
    reporting,
    reset,
    send_all,
    spread,
    used_memory,
    waiting,
)

import smq
from smq.embedded import EmbeddedRedis

FILLER = BODY[: BODY_BYTES - 10]
POLL_SECONDS = 0.02  # how often the bench looks whether a streamed queue is empty
BATCH_KEYS = ("latestOffset", "walCommit", "addBatch", "commitOffsets")


def body(index: int) -> str:
    """Message ``index``'s 100-byte body (the Spark side builds the same string)."""
    return f"{index:010d}{FILLER}"


# -- CPU by process ------------------------------------------------------------------------


def _processes() -> dict[int, tuple[int, str, tuple[int, int]]]:
    """pid -> (parent pid, command line, (its own CPU ticks, those of the children it has reaped))."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile
            continue
        own = int(fields[11]) + int(fields[12])  # utime, stime
        reaped = int(fields[13]) + int(fields[14])  # cutime, cstime
        found[int(entry.name)] = (int(fields[1]), command, (own, reaped))
    return found


_GROUPS: dict[int, str] = {}  # pid -> group, for processes that have ended since (no command line)


def _group(pid: int, command: str, redis_pid: int, parent_group: str = "") -> str:
    if not command and pid in _GROUPS:
        return _GROUPS[pid]
    _GROUPS[pid] = _classify(pid, command, redis_pid, parent_group)
    return _GROUPS[pid]


EXECUTOR = {"executor jvm", "executor py workers"}
"""The groups of a standalone cluster's executors (JVMs the workers start, and their Pythons)."""


def _classify(pid: int, command: str, redis_pid: int, parent_group: str) -> str:
    if pid == os.getpid():
        return "bench"
    if pid == redis_pid:
        return "redis"
    if "java" in command.split(" ", 1)[0]:
        if "CoarseGrainedExecutorBackend" in command:
            return "executor jvm"
        if "deploy.master.Master" in command or "deploy.worker.Worker" in command:
            return "cluster daemons"
        return "jvm"  # the driver's (in local mode, the executors' too)
    if parent_group in EXECUTOR:
        return "executor py workers"
    if "python_streaming_source_runner" in command:
        return "source runner"
    if "pyspark" in command:
        return "spark python workers"
    if "multiprocessing" in command:
        return "client processes"
    return "bench children"


def cpu_snapshot(redis_pid: int) -> dict[str, float]:
    """CPU seconds so far of this process's tree by group, and of the whole machine.

    A process counts its own time plus that of the children it has reaped
    (the bench itself only its own: its children are counted on their own, and
    the snapshot is taken before it joins them), so a worker that ends within
    a window still counts.
    """
    machine = machine_cpu()[0]
    processes = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    groups: dict[str, float] = {}
    stack: list[tuple[int, str]] = [(os.getpid(), "")]
    while stack:
        pid, parent_group = stack.pop()
        if pid not in processes:
            continue
        _, command, (own, reaped) = processes[pid]
        ticks = own if pid == os.getpid() else own + reaped
        # Redis's forks (AOF rewrites) count as Redis.
        group = "redis" if parent_group == "redis" else _group(pid, command, redis_pid, parent_group)
        groups[group] = groups.get(group, 0.0) + ticks / CLOCK_TICKS
        stack += [(child, group) for child in children.get(pid, [])]
    groups["machine"] = machine
    return groups


def source_runner_memory() -> dict[str, int] | None:
    """VmRSS and VmHWM (peak) in bytes of the streaming source's Python process, if one runs."""
    processes = _processes()
    for pid, (_, command, _) in processes.items():
        if "python_streaming_source_runner" not in command:
            continue
        parent = processes[pid][0]
        while parent > 1 and parent != os.getpid():  # ours only: our JVM started it
            parent = processes.get(parent, (1, "", (0, 0)))[0]
        if parent != os.getpid():
            continue
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        values = dict(line.split(":", 1) for line in status if line.startswith("Vm"))
        return {
            "rss_bytes": int(values["VmRSS"].split()[0]) * 1024,
            "peak_rss_bytes": int(values["VmHWM"].split()[0]) * 1024,
        }
    return None


# -- the plain client, in processes of its own -------------------------------------------------


@dataclass(frozen=True)
class ClientSpec:
    role: str  # "send", "consume" or "sink-code" (the sink's QueueWriter.write, no Spark)
    url: str
    queue: str
    first: int  # the bodies this process sends: first .. first + count - 1
    count: int
    dedup: bool
    index: int


def client_worker(spec: ClientSpec, flags: Any, events: Any) -> None:
    """One client process: get ready, wait for the go, do its part, report its own timings."""
    label = f"{spec.role} {spec.index}"
    with reporting(label, events):
        client = smq.Client(spec.url)
        queue = client.queue(spec.queue)
        if spec.role == "sink-code":
            from pyspark.sql import Row
            from pyspark.sql.types import StringType, StructField, StructType

            from smq.spark._options import SourceOptions
            from smq.spark._sink import QueueWriter

            options = {"queue": spec.queue, "url": spec.url, "deduplicate": str(spec.dedup).lower()}
            writer = QueueWriter(
                SourceOptions.parse(options), StructType([StructField("body", StringType())]), False
            )
            rows = [Row(body=body(i)) for i in range(spec.first, spec.first + spec.count)]
        ready(label, flags, events)
        cpu_0, started = time.process_time(), time.perf_counter()
        payload: dict[str, Any] = {}
        if spec.role == "send":
            write_id = f"bench-{spec.index}"
            batch: list[smq.SendEntry] = []
            for i in range(spec.first, spec.first + spec.count):
                text = body(i)
                dedup = (
                    hashlib.sha256(f"{write_id}\n{i}\n{text}".encode()).hexdigest() if spec.dedup else None
                )
                batch.append(smq.SendEntry(str(len(batch)), text, deduplication_id=dedup))
                if len(batch) == 10:
                    queue.send_batch(batch)
                    batch = []
            if batch:
                queue.send_batch(batch)
            payload["messages"] = spec.count
        elif spec.role == "sink-code":
            result = writer.write(iter(rows))
            payload["messages"] = result.sent
        else:
            receive_s = delete_s = 0.0
            done = 0
            while True:
                t_0 = time.perf_counter()
                messages = queue.receive(10, wait_time_seconds=0)
                t_1 = time.perf_counter()
                receive_s += t_1 - t_0
                if not messages:
                    break
                queue.delete_batch(
                    [smq.DeleteEntry(str(n), m.receipt_handle) for n, m in enumerate(messages)]
                )
                delete_s += time.perf_counter() - t_1
                done += len(messages)
            payload.update(messages=done, receive_seconds=receive_s, delete_seconds=delete_s)
        payload["seconds"] = time.perf_counter() - started
        payload["cpu_seconds"] = time.process_time() - cpu_0
        client.close()
        events.put(("done", label, payload))


def run_clients(specs: list[ClientSpec], redis_pid: int) -> dict[str, Any]:
    """Start the processes, let them go at once; the figure runs from the go to the last one done."""
    with Fleet(client_worker, specs, join_timeout=30) as fleet:
        cpu_0, started = cpu_snapshot(redis_pid), time.perf_counter()
        fleet.go()
        reports = fleet.expect("done", timeout=600)
        seconds = time.perf_counter() - started
        cpu_1 = cpu_snapshot(redis_pid)
    messages = sum(r["messages"] for r in reports)
    result: dict[str, Any] = {
        "processes": len(specs),
        "seconds": round(seconds, 4),
        "messages": messages,
        "msgs_per_s": round(messages / seconds, 1),
        "client_cpu_us_per_message": round(1e6 * sum(r["cpu_seconds"] for r in reports) / messages, 1),
        "cpu_percent_of_a_core": cpu_share(cpu_0, cpu_1, seconds),
    }
    if specs[0].role == "consume":
        result["receive_us_per_message"] = round(
            1e6 * sum(r["receive_seconds"] for r in reports) / messages, 1
        )
        result["delete_us_per_message"] = round(1e6 * sum(r["delete_seconds"] for r in reports) / messages, 1)
    return result


def split(count: int, parts: int) -> list[tuple[int, int]]:
    """(first, count) of each of ``parts`` slices of 0 .. count - 1."""
    bounds = [count * p // parts for p in range(parts + 1)]
    return [(bounds[p], bounds[p + 1] - bounds[p]) for p in range(parts)]


# -- the Spark side --------------------------------------------------------------------------------


class Bench:
    """The server, the SparkSession and what every cell needs."""

    def __init__(self, server: EmbeddedRedis, spark: Any, folder: Path, args: argparse.Namespace) -> None:
        self.server = server
        self.spark = spark
        self.folder = folder
        self.args = args
        self.url = server.url
        self.client = smq.Client(self.url)
        self.admin = server.client()
        assert server.process is not None
        self.redis_pid = server.process.pid
        self.cells: list[dict[str, Any]] = []

    def frame(self, rows: int, partitions: int) -> Any:
        from pyspark.sql import functions as F

        column = F.concat(F.format_string("%010d", F.col("id")), F.lit(FILLER)).alias("body")
        return self.spark.range(0, rows, 1, partitions).select(column)

    def save(self, name: str, rows: int, partitions: int, dedup: bool) -> tuple[float, dict[str, float]]:
        """Write ``rows`` rows to queue ``name`` with the sink; return the seconds save() took and CPU."""
        writer = (
            self.frame(rows, partitions)
            .write.format("smq")
            .option("queue", name)
            .option("url", self.url)
            .option("deduplicate", str(dedup).lower())
            .mode("append")
        )
        cpu_0, started = cpu_snapshot(self.redis_pid), time.perf_counter()
        writer.save()
        seconds = time.perf_counter() - started
        return seconds, cpu_share(cpu_0, cpu_snapshot(self.redis_pid), seconds)

    def check_count(self, queue: smq.Queue, expected: int, what: str) -> int:
        found = waiting(queue)
        if found != expected:
            print(
                f"\nWARNING: {what}: {found:,} messages in the queue, expected {expected:,}", file=sys.stderr
            )
        return found

    # -- cells ----------------------------------------------------------------------------------

    def sink_cell(self, partitions: int, dedup: bool) -> dict[str, Any]:
        rows = self.args.rows
        name = f"sink-p{partitions}-{'ids' if dedup else 'noids'}"
        queue = self.client.create_queue(name)
        memory_0 = used_memory(self.admin)
        seconds, cpu = self.save(name, rows, partitions, dedup)
        found = self.check_count(queue, rows, name)
        memory_1 = used_memory(self.admin)
        reset(self.server)
        return {
            "part": "sink",
            "writer": "spark",
            "partitions": partitions,
            "dedup": dedup,
            "messages": rows,
            "in_queue_after": found,
            "seconds": round(seconds, 4),
            "msgs_per_s": round(rows / seconds, 1),
            "redis_bytes_per_message": round((memory_1 - memory_0) / rows, 1),
            "cpu_percent_of_a_core": cpu,
        }

    def client_send_cell(self, processes: int, dedup: bool, role: str = "send") -> dict[str, Any]:
        rows = self.args.rows
        name = f"{role}-x{processes}-{'ids' if dedup else 'noids'}"
        queue = self.client.create_queue(name)
        specs = [
            ClientSpec(role, self.url, name, first, count, dedup, index)
            for index, (first, count) in enumerate(split(rows, processes))
        ]
        result = run_clients(specs, self.redis_pid)
        result["in_queue_after"] = self.check_count(queue, rows, name)
        reset(self.server)
        writer = "sink code, no spark" if role == "sink-code" else "client"
        return {"part": "sink", "writer": writer, "dedup": dedup, **result}

    def stream_cell(self, sink: str, per_batch: int, messages: int, label: str) -> dict[str, Any]:
        name = f"stream-{sink}-{per_batch}"
        queue = self.client.create_queue(name)
        memory_0 = used_memory(self.admin)
        preload_s = send_all(queue, messages, body=body)
        memory_1 = used_memory(self.admin)
        checkpoint = self.folder / f"checkpoint-{label}"
        counted: list[int] = []

        def count(frame: Any, batch_id: int) -> None:
            counted.append(frame.count())

        stream = (
            self.spark.readStream.format("smq")
            .option("queue", name)
            .option("url", self.url)
            .option("maxMessagesPerBatch", str(per_batch))
            .load()
        )
        writer = stream.writeStream.foreachBatch(count) if sink == "foreachBatch" else stream.writeStream
        if sink == "noop":
            writer = writer.format("noop")
        writer = writer.option("checkpointLocation", str(checkpoint))
        deadline = time.monotonic() + max(120.0, messages / 200)
        cpu_0, started, wall_started = cpu_snapshot(self.redis_pid), time.perf_counter(), time.time()
        query = writer.start()
        try:
            while left := waiting(queue):
                if not query.isActive:
                    raise RuntimeError(f"the streaming query ended: {query.exception()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: {left:,} messages left at the deadline")
                time.sleep(POLL_SECONDS)
            seconds = time.perf_counter() - started
            cpu = cpu_share(cpu_0, cpu_snapshot(self.redis_pid), seconds)
            runner = source_runner_memory()
            progress = list(query.recentProgress)
            quiet_stop(query)
        finally:
            query.stop()
        error = query.exception()
        if error is not None:
            print(f"\nWARNING: {name}: the query ended with {error}", file=sys.stderr)
        shutil.rmtree(checkpoint, ignore_errors=True)
        info = queue.attributes()
        deleted = int(info.counters.get("deleted", 0))
        if deleted != messages:
            print(f"\nWARNING: {name}: {deleted:,} messages deleted, expected {messages:,}", file=sys.stderr)
        reset(self.server)
        return {
            "part": "stream",
            "reader": "spark",
            "sink": sink,
            "max_messages_per_batch": per_batch,
            "messages": messages,
            "deleted": deleted,
            "rows_counted": sum(counted) if sink == "foreachBatch" else None,
            "seconds": round(seconds, 4),
            "msgs_per_s": round(messages / seconds, 1),
            "batches": batch_breakdown(progress, seconds, wall_started),
            "preload_seconds": round(preload_s, 3),
            "redis_bytes_per_message_preloaded": round((memory_1 - memory_0) / messages, 1),
            "source_runner_memory": runner,
            "cpu_percent_of_a_core": cpu,
        }

    def consume_cell(self, processes: int) -> dict[str, Any]:
        messages = self.args.messages
        name = f"consume-x{processes}"
        queue = self.client.create_queue(name)
        send_all(queue, messages, body=body)
        specs = [
            ClientSpec("consume", self.url, name, first, count, False, index)
            for index, (first, count) in enumerate(split(messages, processes))
        ]
        result = run_clients(specs, self.redis_pid)
        result["left_in_queue"] = self.check_count(queue, 0, name)
        reset(self.server)
        return {"part": "stream", "reader": "client", **result}


def quiet_stop(query: Any, timeout: float = 5.0) -> None:
    """Stop ``query`` once it waits for offsets rather than runs a batch.

    ``stop()`` interrupts the stream's thread; inside ``foreachBatch`` the
    interrupt comes back as a Py4J error, which Spark recognises by matching a
    regular expression on its message (SPARK-39218), and with a long message
    that match overflows the thread's stack (``java.lang.StackOverflowError`` on
    stderr; the query still stops). Waiting for the empty batch to finish avoids it.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and query.isActive:
        if query.status.get("message", "").startswith(("Getting offsets", "Waiting")):
            break
        time.sleep(0.01)
    query.stop()


def batch_breakdown(progress: list[Any], seconds: float, wall_started: float) -> dict[str, Any]:
    """Spark's own timings of the micro-batches that carried rows (StreamingQueryProgress.durationMs).

    latestOffset is the source's receive loop on the driver; walCommit writes the
    offset log and runs the source's commit of the previous batch (its deletes);
    addBatch plans the batch (the rows go to the JVM), runs its tasks and the sink;
    commitOffsets writes the commit log; triggerExecution is the whole batch.
    What the data batches leave of the run is the query's start (until the first
    batch's trigger) and its end: the last receive's long poll, the empty batch
    that commits the last one, and its deletes.
    """
    data = [p for p in progress if (p.numInputRows or 0) > 0]
    keys = (*BATCH_KEYS, "triggerExecution")
    totals = {key: sum(p.durationMs.get(key, 0) for p in data) for key in keys}
    batches = len(data)
    rows = sum(p.numInputRows for p in data)
    trigger_s = totals["triggerExecution"] / 1000
    first = None
    if data:
        stamp = datetime.fromisoformat(data[0].timestamp.replace("Z", "+00:00")).timestamp()
        first = round(stamp - wall_started, 3)
    return {
        "count": batches,
        "rows": rows,
        "ms_per_batch": {k: round(v / batches, 1) for k, v in totals.items()} if batches else {},
        "ms_total": totals,
        "rows_per_s_while_batches_ran": round(rows / trigger_s, 1) if trigger_s else None,
        "seconds_outside_data_batches": round(seconds - trigger_s, 3),
        "seconds_to_first_batch": first,
        "whole_batch_ms_p50_max": [
            statistics.median(p.durationMs.get("triggerExecution", 0) for p in data) if data else None,
            max((p.durationMs.get("triggerExecution", 0) for p in data), default=None),
        ],
        "first_batch_ms": {k: data[0].durationMs.get(k, 0) for k in keys} if data else None,
    }


# -- report ----------------------------------------------------------------------------------------


def _median(cells: list[dict[str, Any]], key: str = "msgs_per_s") -> float:
    return statistics.median(c[key] for c in cells)


def _spread(cells: list[dict[str, Any]]) -> str:
    return spread([c["msgs_per_s"] for c in cells])


def _cpu_text(cells: list[dict[str, Any]]) -> str:
    """Median % of a core by group over the rounds, largest first."""
    groups = sorted({g for c in cells for g in c["cpu_percent_of_a_core"] if g != "machine"})
    medians = {g: statistics.median(c["cpu_percent_of_a_core"].get(g, 0.0) for c in cells) for g in groups}
    shown = [(g, v) for g, v in sorted(medians.items(), key=lambda kv: -kv[1]) if v >= 1 or g == "others"]
    return ", ".join(f"{g.replace('spark python workers', 'py workers')} {v:.0f}" for g, v in shown)


def _select(cells: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [c for c in cells if all(c.get(k) == v for k, v in match.items())]


def summarise(cells: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Medians over the rounds and the ratios to the plain client, for the JSON and the tables."""
    out: dict[str, Any] = {"sink": [], "stream": []}
    for dedup in (True, False):
        base = {
            p: _select(cells, part="sink", writer="client", dedup=dedup, processes=p) for p in args.processes
        }
        for partitions in args.partitions:
            runs = _select(cells, part="sink", writer="spark", dedup=dedup, partitions=partitions)
            if not runs:
                continue
            row = {
                "writer": f"spark sink, {partitions} partitions",
                "dedup": dedup,
                "msgs_per_s": _median(runs),
            }
            for p, peer in base.items():
                if peer:
                    row[f"ratio_to_client_x{p}"] = round(_median(runs) / _median(peer), 3)
            out["sink"].append(row)
        for writer, runs in [
            ("sink code without Spark, 1 process", _select(cells, writer="sink code, no spark", dedup=dedup)),
            *[(f"plain client, {p} process{'es' if p > 1 else ''}", base[p]) for p in args.processes],
        ]:
            if runs:
                row = {"writer": writer, "dedup": dedup, "msgs_per_s": _median(runs)}
                if base.get(1):
                    row["ratio_to_client_x1"] = round(_median(runs) / _median(base[1]), 3)
                out["sink"].append(row)
    consumers = {p: _select(cells, part="stream", reader="client", processes=p) for p in args.processes}
    for sink in args.sinks:
        for per_batch in args.batch_sizes:
            runs = _select(cells, part="stream", reader="spark", sink=sink, max_messages_per_batch=per_batch)
            if not runs:
                continue
            row = {
                "reader": f"spark, {sink}",
                "max_messages_per_batch": per_batch,
                "msgs_per_s": _median(runs),
            }
            for p, peer in consumers.items():
                if peer:
                    row[f"ratio_to_client_x{p}"] = round(_median(runs) / _median(peer), 4)
            out["stream"].append(row)
    for p, runs in consumers.items():
        if runs:
            label = f"plain consumer, {p} process{'es' if p > 1 else ''}"
            out["stream"].append({"reader": label, "msgs_per_s": _median(runs)})
    return out


def _ratio(value: float, base: list[dict[str, Any]]) -> str:
    return f"{value / _median(base):.2f}×" if base else "n/a"


def tables(cells: list[dict[str, Any]], startup: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"Sink: {args.rows:,} rows of {BODY_BYTES} bytes, {args.master}, {os.cpu_count()} cores; "
        "save() only, after warm-up writes; msgs/s, median (range) of "
        f"{args.repeat} round(s); CPU % of a core (medians)",
        "",
        "| writer | dedup ids | msgs/s | ÷ client ×1 | ÷ client ×2 | CPU % of a core |",
        "|---|---|---|---|---|---|",
    ]
    for dedup in (True, False):
        base = {
            p: _select(cells, part="sink", writer="client", dedup=dedup, processes=p)
            for p in {1, 2, *args.processes}
        }
        rows = [
            (
                f"Spark sink, {partitions} partitions",
                _select(cells, writer="spark", dedup=dedup, partitions=partitions),
            )
            for partitions in args.partitions
        ]
        rows.append(
            (
                "sink code alone, no Spark, 1 process",
                _select(cells, writer="sink code, no spark", dedup=dedup),
            )
        )
        rows += [(f"plain client, {p} process{'es' if p > 1 else ''}", base[p]) for p in args.processes]
        for label, runs in rows:
            if not runs:
                continue
            value = _median(runs)
            lines.append(
                f"| {label} | {'on' if dedup else 'off'} | {_spread(runs)} | {_ratio(value, base[1])} "
                f"| {_ratio(value, base[2])} | {_cpu_text(runs)} |"
            )
    lines += [
        "",
        f"Stream: {args.messages:,} preloaded messages, {args.master}; from start() until the queue is "
        "empty; msgs/s, median (range); per batch: Spark's durationMs (medians), ms",
        "",
        "| reader → sink | maxMessagesPerBatch | msgs/s | ÷ consumer ×1 | batches "
        "| receive (latestOffset) | walCommit (+ deletes) | addBatch | commit log | whole batch "
        "| start, s | end, s | CPU % of a core |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    consumers = {
        p: _select(cells, part="stream", reader="client", processes=p) for p in {1, 2, *args.processes}
    }
    for sink in args.sinks:
        for per_batch in args.batch_sizes:
            runs = _select(cells, reader="spark", sink=sink, max_messages_per_batch=per_batch)
            if not runs:
                continue
            per = [r["batches"]["ms_per_batch"] for r in runs if r["batches"]["count"]]
            keys = (*BATCH_KEYS, "triggerExecution")
            ms = [f"{statistics.median(p[k] for p in per):,.0f}" if per else "n/a" for k in keys]
            timed = [r["batches"] for r in runs if r["batches"]["seconds_to_first_batch"] is not None]
            start = end = float("nan")
            if timed:
                start = statistics.median(b["seconds_to_first_batch"] for b in timed)
                end = statistics.median(
                    b["seconds_outside_data_batches"] - b["seconds_to_first_batch"] for b in timed
                )
            batches = statistics.median(r["batches"]["count"] for r in runs)
            lines.append(
                f"| smq → {sink} | {per_batch:,} | {_spread(runs)} | {_ratio(_median(runs), consumers[1])} "
                f"| {batches:.0f} | {' | '.join(ms)} | {start:.1f} | {end:.1f} | {_cpu_text(runs)} |"
            )
    for p in args.processes:
        runs = consumers[p]
        if runs:
            receive = statistics.median(r["receive_us_per_message"] for r in runs)
            delete = statistics.median(r["delete_us_per_message"] for r in runs)
            lines.append(
                f"| plain consumer, {p} process{'es' if p > 1 else ''} | 10 per call | {_spread(runs)} "
                f"| {_ratio(_median(runs), consumers[1])} | | receive {receive:.0f} µs/msg | "
                f"delete {delete:.0f} µs/msg | | | | | | {_cpu_text(runs)} |"
            )
    streams = _select(cells, reader="spark")
    runners = [c["source_runner_memory"]["peak_rss_bytes"] for c in streams if c["source_runner_memory"]]
    sinks = {d: _select(cells, writer="spark", dedup=d) for d in (True, False)}
    lines += [
        "",
        "| start-up and memory | |",
        "|---|---|",
        f"| SparkSession start (JVM) | {startup['session_seconds']:.1f} s |",
        f"| first save(), {startup['warmup_rows']:,} rows, 2 partitions, with Python worker start-up "
        f"| {startup['first_save_seconds']:.2f} s |",
        f"| second save(), the same | {startup['second_save_seconds']:.2f} s |",
        f"| first streaming query, {startup['warmup_messages']:,} messages, start() until empty "
        f"| {startup['first_stream_seconds']:.2f} s |",
    ]
    if streams:
        per_message = statistics.median(c["redis_bytes_per_message_preloaded"] for c in streams)
        lines.append(f"| Redis used_memory per preloaded message (100-byte body) | {per_message:,.0f} B |")
    for dedup, runs in sinks.items():
        if runs:
            per_message = statistics.median(c["redis_bytes_per_message"] for c in runs)
            lines.append(
                f"| Redis used_memory per message written by the sink, ids {'on' if dedup else 'off'} "
                f"| {per_message:,.0f} B |"
            )
    if runners:
        lines.append(
            f"| streaming source's Python process, peak RSS | {min(runners) / 2**20:,.0f}–"
            f"{max(runners) / 2**20:,.0f} MB |"
        )
    return "\n".join(lines)


# -- the run ---------------------------------------------------------------------------------------


def start_spark(master: str) -> tuple[Any, float]:
    from smq.spark import spark_session

    started = time.perf_counter()
    spark = spark_session(
        master,
        app_name="smq-bench",
        **{
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.numRecentProgressUpdates": "100000",
        },
    )
    seconds = time.perf_counter() - started
    spark.sparkContext.setLogLevel("ERROR")
    return spark, seconds


def warm_up(bench: Bench) -> dict[str, Any]:
    """First writes and a first query, timed: what start-up costs, kept out of the cells."""
    rows, messages = bench.args.warmup_rows, bench.args.warmup_messages
    timings: dict[str, Any] = {"warmup_rows": rows, "warmup_messages": messages}
    for key in ("first_save_seconds", "second_save_seconds"):
        bench.client.create_queue("warm-up")
        timings[key] = round(bench.save("warm-up", rows, 2, True)[0], 3)
        reset(bench.server)
    for partitions in bench.args.partitions:  # every layout once
        bench.client.create_queue("warm-up")
        bench.save("warm-up", rows, partitions, False)
        reset(bench.server)
    cell = bench.stream_cell("foreachBatch", messages, messages, "warm-up")
    timings["first_stream_seconds"] = cell["seconds"]
    return timings


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    quick = {"rows": 20_000, "messages": 10_000, "repeat": 1, "warmup_rows": 2_000}
    parser = Options(__doc__, "spark", quick=quick)  # --quick: about 45 s
    add = parser.add_argument
    add("--parts", default="sink,stream", help="comma list of sink,stream (default both)")
    add("--master", default="local[2]", help="Spark master (default local[2])")
    add("--rows", type=int, default=200_000, help="rows per sink write (default 200,000)")
    add("--partitions", default="2,4", help="sink partitions, comma list (default 2,4)")
    add("--messages", type=int, default=100_000, help="messages per streamed queue (default 100,000)")
    add("--batch-sizes", default="1000,10000", help="maxMessagesPerBatch, comma list (default 1000,10000)")
    add("--sinks", default="foreachBatch,noop", help="stream sinks: foreachBatch,noop (default both)")
    add("--processes", default="1,2", help="plain client process counts, comma list (default 1,2)")
    add("--warmup-rows", type=int, default=10_000, help="rows of the warm-up writes (default 10,000)")
    add("--warmup-messages", type=int, default=1_000, help="messages of the warm-up query (default 1,000)")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    args.partitions = ints(args.partitions)
    args.batch_sizes = ints(args.batch_sizes)
    args.processes = ints(args.processes)
    args.sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    if set(args.parts) - {"sink", "stream"}:
        parser.error("--parts: choose from sink,stream")
    if set(args.sinks) - {"foreachBatch", "noop"}:
        parser.error("--sinks: choose from foreachBatch,noop")
    if 1 not in args.processes:
        parser.error("--processes must include 1 (the ratios' baseline)")
    for name in ("rows", "messages", "warmup_rows", "warmup_messages"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(__file__, args, argv)
    with redis_server(args.redis_server) as server:
        folder = server.directory
        version = redis_version(server)
        print(f"starting Spark ({args.master}) ...", file=sys.stderr, flush=True)
        spark, session_seconds = start_spark(args.master)
        try:
            bench = Bench(server, spark, folder, args)
            java_version = spark.sparkContext._jvm.java.lang.System.getProperty("java.version")
            print("warm-up ...", file=sys.stderr, flush=True)
            startup = {"session_seconds": round(session_seconds, 2), **warm_up(bench)}
            steps: dict[str, Any] = {}
            if "sink" in args.parts:
                for dedup in (True, False):
                    ids = f"ids {'on' if dedup else 'off'}"
                    for partitions in args.partitions:
                        steps[f"sink {partitions} partitions, {ids}"] = lambda p=partitions, d=dedup: (
                            bench.sink_cell(p, d)
                        )
                    steps[f"sink code alone, {ids}"] = lambda d=dedup: bench.client_send_cell(
                        1, d, "sink-code"
                    )
                    for processes in args.processes:
                        steps[f"client x{processes}, {ids}"] = lambda p=processes, d=dedup: (
                            bench.client_send_cell(p, d)
                        )
            if "stream" in args.parts:
                for sink in args.sinks:
                    for per_batch in args.batch_sizes:
                        steps[f"stream → {sink}, {per_batch:,} per batch"] = lambda s=sink, b=per_batch: (
                            bench.stream_cell(s, b, args.messages, f"{s}-{b}-r{run.round}")
                        )
                for processes in args.processes:
                    steps[f"consumer x{processes}"] = lambda p=processes: bench.consume_cell(p)
            results = run.rounds(
                steps,
                args.repeat,
                order="fixed",
                show=lambda cell: (
                    f"{cell['msgs_per_s']:>9,.0f} msgs/s "
                    f"(others {cell['cpu_percent_of_a_core']['others']:.0f}%)"
                ),
            )
        finally:
            spark.stop()
    cells = [{"round": n, **cell} for runs in results.values() for n, cell in enumerate(runs, 1)]
    print()
    print(tables(cells, startup, args))
    run.write(
        args.output,
        {"startup": startup, "summary": summarise(cells, args), "cells": cells},
        packages=("pyspark", "py4j", "pyarrow"),
        quick=args.quick,
        master=args.master,
        cpus_usable=len(os.sched_getaffinity(0)),
        java=java_version,
        redis_version=version,
        transport="TCP on 127.0.0.1, one embedded redis-server",
        body_bytes=BODY_BYTES,
        rows=args.rows,
        messages=args.messages,
        rounds=args.repeat,
        figure="messages / seconds; medians over the rounds in summary",
        sink_timing="the save() call only, after warm-up writes (JVM and Python worker start-up excluded)",
        stream_timing="from query.start() until visible + in_flight + delayed == 0 (polled every 20 ms); "
        "includes the query's start and the last long poll (waitTimeSeconds 1) before the empty batch "
        "that commits the last batch",
        cpu="% of one core per process group over the timed window; others = machine busy time not ours",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
