"""End-to-end throughput (send -> receive -> delete) of smq, PyRSMQ, kombu's Redis transport
and a hand-written Redis Streams consumer group (the raw-Redis baseline).

All systems run in one invocation against the same freshly started Redis
(one ``EmbeddedRedis`` in a temporary folder, reached over TCP on 127.0.0.1 by
default, as clients on other hosts would, or its Unix socket with ``--transport unix``), one
matrix cell at a time: for each process layout and batch size, each system gets
its own queue, its producer processes send continuously, its consumer processes
receive and delete. The figure is messages deleted per second over the measured
window (after a warm-up), and the Redis server's own CPU (``INFO cpu``) over the
same window per message. See ``bench/README.md`` for how each peer is driven.

Run: ``.venv/bin/python bench/throughput.py [--seconds 5] [--systems smq,rsmq,kombu,streams]
[--batches 1,10] [--layouts 1x1,2x2]``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import redis
import scripts as floor
from _harness import (
    BODY,
    BODY_BYTES,
    STOP,
    Fleet,
    Options,
    Run,
    csv,
    ints,
    layouts,
    median,
    produce,
    ready,
    redis_cpu,
    redis_server,
    reporting,
    reset,
    table,
    us_per,
    waiting,
)

import smq
from smq.core._ids import new_ids
from smq.core._keys import QueueKeys
from smq.core._message import encode_payload
from smq.core._scripts import sources
from smq.embedded import EmbeddedRedis

SYSTEMS = ("smq", "smq-separate", "rsmq", "kombu", "streams")
ON_REQUEST = ("lua-floor",)  # run only when named in --systems
LABELS = {
    "smq": "smq",
    "smq-separate": "smq (separate calls)",
    "rsmq": "PyRSMQ",
    "kombu": "kombu",
    "streams": "Streams",
    "lua-floor": "Lua floor",
}
POLL_SECONDS = 1  # longest a consumer blocks waiting for a message (smq long poll, kombu drain)


class Driver(Protocol):
    """One process's view of a system: a producer sends, a consumer receives and deletes."""

    def send(self) -> int:
        """Send one batch; return the number of messages sent."""
        ...

    def consume(self) -> int:
        """Receive up to one batch and delete what came; return the number deleted."""
        ...

    def close(self) -> int:
        """Let go; return the number of messages deleted now (those a consumer still held)."""
        ...


# -- how every system reaches the one Redis ------------------------------------------
# An address is a Unix socket path ("/...") or "host:port".


def address_of(server: EmbeddedRedis) -> str:
    return f"127.0.0.1:{server.port}" if server.port else str(server.socket_path)


def smq_url(address: str) -> str:
    return f"unix://{address}" if address.startswith("/") else f"redis://{address}/0"


def redis_address(address: str) -> dict[str, Any]:
    if address.startswith("/"):
        return {"unix_socket_path": address}
    host, port = address.rsplit(":", 1)
    return {"host": host, "port": int(port)}


def kombu_url(address: str) -> str:
    return f"redis+socket://{address}" if address.startswith("/") else f"redis://{address}/0"


# -- smq ---------------------------------------------------------------------------


class SmqDriver:
    """smq's public API: send/send_batch; delete_and_receive (the deletes of one batch ride on
    the receive of the next), or with ``separate`` receive(n) then delete/delete_batch; long polling.
    """

    def __init__(self, address: str, name: str, batch: int, separate: bool = False) -> None:
        self.client = smq.Client(smq_url(address))
        self.queue = self.client.queue(name)
        self.batch = batch
        self.separate = separate
        self.entries = [smq.SendEntry(f"m{i}", BODY) for i in range(batch)]
        self.delete_ids = [f"d{i}" for i in range(batch)]
        self.done: list[smq.DeleteEntry] = []  # handled, deleted with the next receive

    def send(self) -> int:
        if self.batch == 1:
            self.queue.send(BODY)
            return 1
        return len(self.queue.send_batch(self.entries).successful)

    def consume(self) -> int:
        if not self.separate:
            deleted, messages = self.queue.delete_and_receive(
                self.done, self.batch, wait_time_seconds=POLL_SECONDS
            )
            self.done = [
                smq.DeleteEntry(i, m.receipt_handle) for i, m in zip(self.delete_ids, messages, strict=False)
            ]
            return len(deleted.successful)
        messages = self.queue.receive(self.batch, wait_time_seconds=POLL_SECONDS)
        if not messages:
            return 0
        if self.batch == 1:
            return int(self.queue.delete(messages[0].receipt_handle))
        entries = [
            smq.DeleteEntry(i, m.receipt_handle) for i, m in zip(self.delete_ids, messages, strict=False)
        ]
        return len(self.queue.delete_batch(entries).successful)

    def close(self) -> int:
        deleted = len(self.queue.delete_batch(self.done).successful) if self.done else 0
        self.client.close()
        return deleted

    @staticmethod
    def create(address: str, name: str) -> None:
        with smq.Client(smq_url(address)) as client:
            client.create_queue(name)

    @staticmethod
    def count(address: str, name: str) -> int:
        with smq.Client(smq_url(address)) as client:
            return waiting(client.queue(name))

    @staticmethod
    def destroy(address: str, name: str) -> None:
        with smq.Client(smq_url(address)) as client:
            client.delete_queue(name)


# -- PyRSMQ ------------------------------------------------------------------------


def _rsmq(address: str) -> Any:
    from rsmq import RedisSMQ

    # The same options PyRSMQ uses when it builds its own client.
    connection = redis.Redis(**redis_address(address), encoding="utf-8", decode_responses=True)
    return RedisSMQ(client=connection, exceptions=False)


class RsmqDriver:
    """PyRSMQ has no batch calls: a batch of n is n sendMessage / receiveMessage / deleteMessage calls.

    It has no long poll either: a consumer that finds the queue empty sleeps 1 ms.
    """

    def __init__(self, address: str, name: str, batch: int) -> None:
        self.rsmq = _rsmq(address)
        self.name = name
        self.batch = batch

    def send(self) -> int:
        for _ in range(self.batch):
            self.rsmq.sendMessage(qname=self.name, message=BODY).execute()
        return self.batch

    def consume(self) -> int:
        ids = []
        for _ in range(self.batch):
            message = self.rsmq.receiveMessage(qname=self.name, quiet=True).execute()
            if not message:
                break
            ids.append(message["id"])
        if not ids:
            time.sleep(0.001)
            return 0
        return sum(bool(self.rsmq.deleteMessage(qname=self.name, id=i).execute()) for i in ids)

    def close(self) -> int:
        self.rsmq.client.close()
        return 0

    @staticmethod
    def create(address: str, name: str) -> None:
        rsmq = _rsmq(address)
        rsmq.createQueue(qname=name, vt=30).execute()
        rsmq.client.close()

    @staticmethod
    def count(address: str, name: str) -> int:
        rsmq = _rsmq(address)
        count = int(rsmq.getQueueAttributes(qname=name).execute()["msgs"])
        rsmq.client.close()
        return count

    @staticmethod
    def destroy(address: str, name: str) -> None:
        rsmq = _rsmq(address)
        rsmq.deleteQueue(qname=name, quiet=True).execute()
        rsmq.client.close()


# -- kombu -------------------------------------------------------------------------


class KombuDriver:
    """kombu's Redis transport with acknowledgements (the at-least-once mode, like the others).

    Producers publish to the default exchange with the queue name as routing key
    (kombu's cheapest route: one LPUSH, no binding lookup). Batch n: the n
    publishes go through ``Producer.batch`` (one pipeline) where the installed
    kombu offers it, else one by one. Consumers use ``prefetch_count`` = n and
    ``drain_events``, acking each message; the transport delivers one message
    per BRPOP, so a consume step handles one message per event.
    """

    def __init__(self, address: str, name: str, batch: int, role: str) -> None:
        import kombu

        self.connection = kombu.Connection(kombu_url(address))
        self.name = name
        self.batch = batch
        self.acked = 0
        if role == "producer":
            self.producer = self.connection.Producer(serializer="json")
            self.batched = batch > 1 and publish_mode(self.producer) == "pipeline"
        else:
            self.consumer = self.connection.Consumer(
                [kombu.Queue(name)], callbacks=[self._on_message], accept=["json"], prefetch_count=batch
            )
            self.consumer.consume()

    def _on_message(self, body: Any, message: Any) -> None:
        message.ack()
        self.acked += 1

    def send(self) -> int:
        if self.batched:
            with self.producer.batch(max_size=self.batch):
                for _ in range(self.batch):
                    self.producer.publish(BODY, routing_key=self.name)
        else:
            for _ in range(self.batch):
                self.producer.publish(BODY, routing_key=self.name)
        return self.batch

    def consume(self) -> int:
        before = self.acked
        try:
            self.connection.drain_events(timeout=POLL_SECONDS)
        except TimeoutError:
            pass
        return self.acked - before

    def close(self) -> int:
        self.connection.release()
        return 0

    @staticmethod
    def create(address: str, name: str) -> None:
        import kombu

        with kombu.Connection(kombu_url(address)) as connection:
            kombu.Queue(name, channel=connection.default_channel).declare()

    @staticmethod
    def count(address: str, name: str) -> int:
        import kombu

        with kombu.Connection(kombu_url(address)) as connection:
            bound = kombu.Queue(name, channel=connection.default_channel)
            return int(bound.queue_declare(passive=True).message_count)

    @staticmethod
    def destroy(address: str, name: str) -> None:
        import kombu

        with kombu.Connection(kombu_url(address)) as connection:
            bound = kombu.Queue(name, channel=connection.default_channel)
            bound.purge()
            bound.delete()


def publish_mode(producer: Any) -> str:
    """'pipeline' if this kombu can batch publishes (Producer.batch, kombu >= 5.7), else 'one-by-one'."""
    return "pipeline" if hasattr(producer, "batch") and producer.supports_batch_publish else "one-by-one"


# -- Redis Streams --------------------------------------------------------------------

_GROUP = "workers"


class StreamsDriver:
    """A hand-written Redis Streams consumer group: the raw-Redis baseline, with none of SQS's
    semantics (no visibility timeout taken back, no receive counts, counters, dead letters,
    delays or checks).

    A send of n is n ``XADD`` in one pipeline; a consume is one ``XREADGROUP COUNT n BLOCK``
    (1 s, as the others' long polls) and, for what came, ``XACK`` and ``XDEL`` of all its ids in
    one pipeline: acknowledged and gone, as a delete is.
    """

    def __init__(self, address: str, name: str, batch: int, role: str) -> None:
        self.redis = redis.Redis(**redis_address(address))
        self.name = name
        self.batch = batch
        self.consumer = f"{role}-{os.getpid()}"

    def send(self) -> int:
        with self.redis.pipeline(transaction=False) as pipe:
            for _ in range(self.batch):
                pipe.xadd(self.name, {"b": BODY})
            pipe.execute()
        return self.batch

    def consume(self) -> int:
        reply = self.redis.xreadgroup(
            _GROUP, self.consumer, {self.name: ">"}, count=self.batch, block=POLL_SECONDS * 1000
        )
        if not reply:
            return 0
        ids = [entry_id for entry_id, _ in reply[0][1]]
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.xack(self.name, _GROUP, *ids)
            pipe.xdel(self.name, *ids)
            acked, _ = pipe.execute()
        return int(acked)

    def close(self) -> int:
        self.redis.close()
        return 0

    @staticmethod
    def create(address: str, name: str) -> None:
        with redis.Redis(**redis_address(address)) as connection:
            connection.xgroup_create(name, _GROUP, id="$", mkstream=True)

    @staticmethod
    def count(address: str, name: str) -> int:
        with redis.Redis(**redis_address(address)) as connection:
            return int(connection.xlen(name))  # waiting and pending: every entry not yet deleted

    @staticmethod
    def destroy(address: str, name: str) -> None:
        with redis.Redis(**redis_address(address)) as connection:
            connection.delete(name)


# -- a Lua floor: smq's layout with no semantics -------------------------------------------


class LuaFloorDriver:
    """The least a Lua queue on smq's layout can do: bench/scripts.py's minimal scripts of data
    layout 2 (smq's default), which run only the data commands of smq's send, receive and delete
    (no checks, no reclaim of timeouts, no delays, no retention, no dead letters, no long poll: an
    empty receive sleeps 1 ms). Not a queue anyone should use; a floor for what scripts on this
    layout cost.

    Driven as smq is: a send of n is one script call; a consume is the delete of the last
    batch and the receive of the next, two script calls in one write.
    """

    def __init__(self, address: str, name: str, batch: int) -> None:
        self.redis = redis.Redis(**redis_address(address))
        self.keys = QueueKeys.of(name)
        self.batch = batch
        own = sources()
        self.key_lists = {
            script: [self.keys.by_kind(kind) for kind in own[script].key_kinds]
            for script in ("send", "receive", "delete")
        }
        self.shas = {
            "send": self.redis.script_load(floor.MINIMAL_INLINE_SEND),
            "receive": self.redis.script_load(floor.MINIMAL_INLINE_RECEIVE),
            "delete": self.redis.script_load(floor.MINIMAL_INLINE_DELETE),
        }
        self.payload = encode_payload(BODY.encode(), {})
        self.done: list[Any] = []

    def _call(self, pipe: Any, script: str, *args: Any) -> None:
        keys = self.key_lists[script]
        pipe.evalsha(self.shas[script], len(keys), *keys, *args)

    def send(self) -> int:
        args: list[Any] = ["", self.keys.wake_channel, self.batch]
        for stored, _ in new_ids(self.batch):
            args += [stored, -1, len(BODY), self.payload, ""]
        with self.redis.pipeline(transaction=False) as pipe:
            self._call(pipe, "send", *args)
            pipe.execute()
        return self.batch

    def consume(self) -> int:
        deleted = len(self.done) // 2
        token = secrets.token_urlsafe(12)
        with self.redis.pipeline(transaction=False) as pipe:
            if self.done:
                self._call(pipe, "delete", "", self.keys.wake_channel, deleted, *self.done)
            self._call(pipe, "receive", "", self.batch, -1, token, self.keys.name)
            reply = pipe.execute()[-1]
        self.done = []
        for i in range(1, len(reply), 3):  # id, its token, its record
            self.done += [reply[i], reply[i + 1]]
        if not self.done:
            time.sleep(0.001)
        return deleted

    def close(self) -> int:
        deleted = len(self.done) // 2
        if self.done:
            with self.redis.pipeline(transaction=False) as pipe:
                self._call(pipe, "delete", "", self.keys.wake_channel, deleted, *self.done)
                pipe.execute()
        self.redis.close()
        return deleted


def make_driver(system: str, address: str, name: str, batch: int, role: str) -> Driver:
    if system in ("smq", "smq-separate"):
        return SmqDriver(address, name, batch, separate=system == "smq-separate")
    if system == "rsmq":
        return RsmqDriver(address, name, batch)
    if system == "streams":
        return StreamsDriver(address, name, batch, role)
    if system == "lua-floor":
        return LuaFloorDriver(address, name, batch)
    return KombuDriver(address, name, batch, role)


ADMIN: dict[str, Any] = {
    "smq": SmqDriver,
    "smq-separate": SmqDriver,
    "rsmq": RsmqDriver,
    "kombu": KombuDriver,
    "streams": StreamsDriver,
    "lua-floor": SmqDriver,  # smq's keys: created, counted and deleted as smq's
}


# -- worker processes ------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSpec:
    system: str
    role: str  # "producer" or "consumer"
    index: int  # slot in the shared counter array of its role
    address: str
    queue: str
    batch: int
    max_backlog: int


def worker(spec: WorkerSpec, sent: Any, deleted: Any, flags: Any, events: Any) -> None:
    """Body of a producer or consumer process; counts go to its own slot of a shared array."""
    label = f"{spec.system} {spec.role} {spec.index}"
    with reporting(label, events):
        driver = make_driver(spec.system, spec.address, spec.queue, spec.batch, spec.role)
        ready(label, flags, events)
        total = 0
        if spec.role == "producer":
            produce(driver.send, spec.index, sent, deleted, flags, spec.max_backlog)
            driver.close()
        else:
            while not flags[STOP]:
                total += driver.consume()
                deleted[spec.index] = total
            # After the window (its figures are read already): counted only for the check of what is left.
            deleted[spec.index] = total + driver.close()
        events.put(("done", label, ""))


# -- one cell ------------------------------------------------------------------------


@dataclass
class Cell:
    system: str
    batch: int
    layout: str
    producers: int
    consumers: int
    window_s: float
    deleted: int
    sent: int
    deleted_per_s: float
    sent_per_s: float
    backlog_at_end: int
    left_in_queue: int
    redis_cpu_us_per_msg: float | None = None
    round: int = 1


def run_cell(
    system: str,
    batch: int,
    layout: str,
    server: EmbeddedRedis,
    seconds: float,
    warmup: float,
    max_backlog: int,
) -> Cell:
    producers, consumers = (int(n) for n in layout.split("x"))
    address = address_of(server)
    name = f"bench-{system}-b{batch}-{layout}"
    ADMIN[system].create(address, name)
    specs = [
        WorkerSpec(system, role, i, address, name, batch, max_backlog)
        for role, count in (("consumer", consumers), ("producer", producers))
        for i in range(count)
    ]
    with Fleet(worker, specs, (producers, consumers)) as fleet:
        sent, deleted = fleet.arrays
        measured = fleet.window(seconds, warmup, lambda: {"redis": redis_cpu(server)})
        fleet.stop(timeout=30)
    backlog = sum(sent) - sum(deleted)
    left = ADMIN[system].count(address, name)
    if left != backlog:
        print(f"\nWARNING: {system}: {left} messages left in the queue, but sent - deleted = {backlog}")
    ADMIN[system].destroy(address, name)
    reset(server)
    sent_n, deleted_n = (sum(counts) for counts in measured.counts)
    return Cell(
        system=system,
        batch=batch,
        layout=layout,
        producers=producers,
        consumers=consumers,
        window_s=round(measured.seconds, 4),
        deleted=deleted_n,
        sent=sent_n,
        deleted_per_s=round(deleted_n / measured.seconds, 1),
        sent_per_s=round(sent_n / measured.seconds, 1),
        backlog_at_end=backlog,
        left_in_queue=left,
        redis_cpu_us_per_msg=us_per(measured.delta("redis"), deleted_n),
    )


# -- report ----------------------------------------------------------------------------


def medians(cells: list[Cell], key: str) -> dict[tuple[str, int, str], float]:
    """Median of ``key`` of each system and cell over the rounds (where there is one)."""
    runs: dict[tuple[str, int, str], list[Any]] = {}
    for c in cells:
        runs.setdefault((c.system, c.batch, c.layout), []).append(getattr(c, key))
    return {cell: value for cell, values in runs.items() if (value := median(values)) is not None}


def markdown(cells: list[Cell], systems: list[str]) -> str:
    by_key = medians(cells, "deleted_per_s")
    cpu = medians(cells, "redis_cpu_us_per_msg")
    header = ["batch", "layout"] + [f"{LABELS[s]} msg/s" for s in systems]
    peers = [p for p in ("smq-separate", "rsmq", "kombu", "streams") if p in systems and "smq" in systems]
    header += [f"smq/{LABELS[p]}" for p in peers]
    header += [f"{LABELS[s]} Redis CPU µs/msg" for s in systems]
    rows = []
    for batch, layout in sorted({(c.batch, c.layout) for c in cells}, key=lambda k: (k[1], k[0])):
        row = [str(batch), layout]
        row += [f"{by_key[(s, batch, layout)]:,.0f}" for s in systems]
        for peer in peers:
            peer_rate = by_key[(peer, batch, layout)]
            ratio = by_key[("smq", batch, layout)] / peer_rate if peer_rate else float("inf")
            row.append(f"{ratio:.2f}x")
        row += [f"{cpu[(s, batch, layout)]:.1f}" if (s, batch, layout) in cpu else "-" for s in systems]
        rows.append(row)
    return table(header, rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Options(__doc__, "throughput", repeat_help="rounds over the matrix; median reported")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per cell (default 5)")
    parser.add_argument(
        "--warmup", type=float, default=0.5, help="seconds run before the window (default 0.5)"
    )
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help="comma list of smq,smq-separate,rsmq,kombu,streams (default: all), and lua-floor",
    )
    parser.add_argument("--batches", default="1,10", help="comma list of batch sizes, 1-10 (default 1,10)")
    parser.add_argument("--layouts", default="1x1,2x2", help="PxC producers x consumers (default 1x1,2x2)")
    parser.add_argument(
        "--max-backlog",
        type=int,
        default=2_000,
        help="producers pause 1 ms while this many messages wait unconsumed, so the figure is a "
        "sustained rate (default 2000; 0: no limit, producers flat out)",
    )
    parser.add_argument(
        "--transport",
        choices=("tcp", "unix"),
        default="tcp",
        help="how every system reaches Redis (default tcp)",
    )
    args = parser.parse_args(argv)
    args.systems = csv(args.systems)
    args.batches = ints(args.batches)
    args.layouts = layouts(parser, args.layouts)
    unknown = sorted(set(args.systems) - set(SYSTEMS) - set(ON_REQUEST))
    if unknown or not args.systems:
        parser.error(f"--systems: unknown {unknown}; choose from {','.join(SYSTEMS + ON_REQUEST)}")
    if any(not 1 <= b <= 10 for b in args.batches):
        parser.error("--batches: each batch size must be 1 to 10")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(__file__, args, argv)
    with redis_server(args.redis_server, tcp=args.transport == "tcp") as server:
        redis_version = str(server.identity)  # "Valkey 9.1.2", "Redis 7.0.15": what the binary is
        kombu_publish = "n/a"
        if "kombu" in args.systems:
            import kombu

            with kombu.Connection(kombu_url(address_of(server))) as connection:
                kombu_publish = publish_mode(connection.Producer())
        # Rounds go over the whole matrix, so a drift in machine load touches every cell alike.
        matrix = [(s, b, layout) for layout in args.layouts for b in args.batches for s in args.systems]
        results = run.rounds(
            {
                f"{LABELS[s]:>7}  b{b:>2}  {layout}": lambda s=s, b=b, layout=layout: run_cell(
                    s, b, layout, server, args.seconds, args.warmup, args.max_backlog
                )
                for s, b, layout in matrix
            },
            args.repeat,
            order="fixed",
            show=lambda c: f"{c.deleted_per_s:>10,.0f} msg/s deleted  (sent {c.sent_per_s:,.0f}/s)",
        )
    cells = [replace(c, round=n) for runs in results.values() for n, c in enumerate(runs, 1)]
    print()
    print(markdown(cells, args.systems))
    run.write(
        args.output,
        {"cells": [asdict(c) for c in cells]},
        packages=("pyrsmq", "kombu"),
        seconds=args.seconds,
        rounds=args.repeat,
        figure="median over the rounds of messages deleted per second",
        warmup_seconds=args.warmup,
        max_backlog=args.max_backlog,
        body_bytes=BODY_BYTES,
        transport=f"{args.transport}, one embedded redis-server for all systems",
        redis_version=redis_version,
        kombu_batch_publish=kombu_publish,
        rsmq_batch="n single calls per batch of n (PyRSMQ has no batch calls)",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
