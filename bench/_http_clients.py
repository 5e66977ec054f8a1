"""The client side of ``bench/serve.py``: processes that drive an SQS server over HTTP.

- a raw HTTP/1.1 client on asyncio (keep-alive connections, request bytes built ahead, no
  signing): the load generator, light enough that the server, not the client, is measured;
- boto3 client processes, the way applications call SQS;
- a runner that starts such processes (spawn), releases them together, and reads their
  counters and everyone's CPU time over a measured window.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from _harness import (
    BODY,
    GO,
    MEASURE,
    STOP,
    Fleet,
    cpu_of,
    cpu_share,
    percentile,
    process_cpu,
    ready,
    reporting,
)
from _harness import BODY_BYTES as BODY_BYTES  # serve.py takes it from here

BATCH = 10
REGION = "us-east-1"
# moto picks the service a request is for from the credential scope of its Authorization header
# (without one it answers as S3); smq serve --no-auth reads no signature. Neither checks this one.
AUTHORIZATION = (
    f"AWS4-HMAC-SHA256 Credential=bench/20240101/{REGION}/sqs/aws4_request, "
    "SignedHeaders=host;x-amz-target, Signature=0"
)
ACTIONS = ("SendMessageBatch", "ReceiveMessage", "DeleteMessageBatch", "SendMessage", "GetQueueAttributes")
HOLD_SECONDS = 300  # visibility timeout of messages received to be deleted later
# ReceiveMessage alone stops at this many messages in flight: SQS, and smq, refuse receives
# (OverLimit) from a standard queue with 120,000 in flight.
INFLIGHT_CAP = 100_000
# Slots of a load generator's counter array: messages deleted, requests per action, errors,
# receives that came back short.
DELETED, ERRORS, EMPTY = 0, 1 + len(ACTIONS), 2 + len(ACTIONS)
SLOTS = 3 + len(ACTIONS)
ERROR_EXAMPLES = 5  # first failing requests kept per run, with their responses


# -- figures ---------------------------------------------------------------------------------


def summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None, "min": None}
    return {
        "p50": round(percentile(values, 0.5), 3),
        "p99": round(percentile(values, 0.99), 3),
        "max": round(max(values), 3),
        "min": round(min(values), 3),
    }


# -- the raw HTTP/1.1 client --------------------------------------------------------------


def request_bytes(host: str, action: str, payload: dict[str, Any]) -> bytes:
    """A whole AWS JSON 1.0 request, ready to write to a connection."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    head = (
        f"POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-amz-json-1.0\r\n"
        f"X-Amz-Target: AmazonSQS.{action}\r\nAuthorization: {AUTHORIZATION}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Connection:
    """One HTTP/1.1 connection, kept alive while the server allows (moto closes after each reply)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, data: bytes) -> tuple[int, bytes]:
        """Status and body of the response to ``data``."""
        reused = self.writer is not None
        if not reused:
            await self.open()
        try:
            return await self._exchange(data)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            if not reused:
                raise
        # The server closed a kept-alive connection before reading this request: a new one.
        await self.open()
        return await self._exchange(data)

    async def _exchange(self, data: bytes) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(data)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, chunked = -1, False
        close = lines[0].startswith(b"HTTP/1.0")
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
        if chunked:
            body = await self._chunks()
        elif length >= 0:
            body = await self.reader.readexactly(length)
        else:
            body, close = await self.reader.read(), True
        if close:
            self.close()
        return status, body

    async def _chunks(self) -> bytes:
        assert self.reader is not None
        parts = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)


# -- load generator processes ---------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One server as a load generator sees it."""

    host: str
    port: int
    queue_url: str

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class LoadSpec:
    index: int  # which row of the shared counters is this process's
    targets: tuple[Target, ...]  # connections go round-robin over them
    connections: int
    mode: str  # "cycle": send-batch / receive / delete-batch; "actions": each action alone
    warmup: float = 0.0  # "actions" only: each action's warm-up and window, timed in the process
    action_seconds: float = 0.0
    server_pids: tuple[int, ...] = ()


class Recorder:
    """A load generator's counters (a row of a shared array) and its first failures."""

    def __init__(self, spec: LoadSpec, counts: Any, flags: Any, events: Any) -> None:
        self.base = spec.index * SLOTS
        self.counts = counts
        self.flags = flags
        self.events = events
        self.label = f"load generator {spec.index}"
        self.examples = 0
        self.latency: dict[str, list[float]] = {a: [] for a in ACTIONS}  # ms, requests inside the window

    async def exchange(self, connection: Connection, action: str, data: bytes) -> dict[str, Any] | None:
        """One request: timed, counted, and its parsed response (None on a failure)."""
        started = time.perf_counter()
        status, body = await connection.request(data)
        if self.flags[MEASURE]:
            self.latency[action].append((time.perf_counter() - started) * 1000)
        return self.ok(action, data, status, body)

    def add(self, slot: int, n: int = 1) -> None:
        self.counts[self.base + slot] += n

    def ok(self, action: str, request: bytes, status: int, body: bytes) -> dict[str, Any] | None:
        """The parsed response, or None (counted, and kept as an example) if it is a failure."""
        self.add(1 + ACTIONS.index(action))
        result: dict[str, Any] | None = None
        if status == 200:
            try:
                result = json.loads(body) if body.strip() else {}
            except ValueError:
                result = None
        if result is not None and not result.get("Failed"):
            return result
        self.failure(action, request, status, body)
        return result if status == 200 and result is not None else None

    def failure(self, action: str, request: bytes, status: int, body: bytes) -> None:
        """Count a failed request; keep the first few, with their responses, as examples."""
        self.add(ERRORS)
        if self.examples < ERROR_EXAMPLES:
            self.examples += 1
            example = {"action": action, "request": request.decode(errors="replace")[-1500:]}
            example |= {"status": status, "response": body.decode(errors="replace")[:1500]}
            self.events.put(("failure", self.label, json.dumps(example)))


async def cycle(connection: Connection, target: Target, recorder: Recorder) -> None:
    """Send a batch, receive up to 10, delete what came; until told to stop."""
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(BATCH)]
    send = request_bytes(
        target.authority, "SendMessageBatch", {"QueueUrl": target.queue_url, "Entries": entries}
    )
    receive = request_bytes(
        target.authority,
        "ReceiveMessage",
        {"QueueUrl": target.queue_url, "MaxNumberOfMessages": BATCH, "WaitTimeSeconds": 0},
    )
    while not recorder.flags[STOP]:
        if await recorder.exchange(connection, "SendMessageBatch", send) is None:
            await asyncio.sleep(0.01)
            continue
        got = await recorder.exchange(connection, "ReceiveMessage", receive)
        messages = (got or {}).get("Messages") or []
        if not messages:
            recorder.add(EMPTY)
            continue
        if any(m.get("Body") != BODY for m in messages):
            recorder.failure("ReceiveMessage", receive, 200, json.dumps(got).encode())
        delete_entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        payload = {"QueueUrl": target.queue_url, "Entries": delete_entries}
        delete = request_bytes(target.authority, "DeleteMessageBatch", payload)
        deleted = await recorder.exchange(connection, "DeleteMessageBatch", delete)
        recorder.add(DELETED, len((deleted or {}).get("Successful") or []))


async def one_action(
    action: str,
    connection: Connection,
    target: Target,
    recorder: Recorder,
    stop: list[bool],
    receipts: collections.deque[str],
) -> None:
    """Repeat one action until told to stop, or until what it consumes runs out.

    ReceiveMessage stops at its first short receive or at INFLIGHT_CAP messages in flight,
    DeleteMessageBatch when no 10 receipts are left.
    """
    url = target.queue_url
    fixed = {
        "SendMessageBatch": {
            "QueueUrl": url,
            "Entries": [{"Id": str(i), "MessageBody": BODY} for i in range(BATCH)],
        },
        "ReceiveMessage": {"QueueUrl": url, "MaxNumberOfMessages": BATCH, "VisibilityTimeout": HOLD_SECONDS},
        "SendMessage": {"QueueUrl": url, "MessageBody": BODY},
        "GetQueueAttributes": {"QueueUrl": url, "AttributeNames": ["All"]},
    }
    data = request_bytes(target.authority, action, fixed[action]) if action in fixed else b""
    while not stop[0]:
        if action == "ReceiveMessage" and len(receipts) >= INFLIGHT_CAP:
            return
        if action == "DeleteMessageBatch":
            if len(receipts) < BATCH:
                return
            entries = [{"Id": str(i), "ReceiptHandle": receipts.popleft()} for i in range(BATCH)]
            data = request_bytes(target.authority, action, {"QueueUrl": url, "Entries": entries})
        result = await recorder.exchange(connection, action, data)
        if result is None:
            await asyncio.sleep(0.01)
        elif action == "ReceiveMessage":
            messages = result.get("Messages") or []
            receipts.extend(m["ReceiptHandle"] for m in messages)
            if len(messages) < BATCH:  # the queue ran dry: an empty receive costs less, stop here
                recorder.add(EMPTY)
                return


def snapshot(
    recorder: Recorder, slot: int, pids: tuple[int, ...]
) -> tuple[float, int, int, int, float, float]:
    """Time, requests of one action, errors, short receives, the servers' CPU and this process's."""
    count = recorder.counts
    return (
        time.perf_counter(),
        count[slot],
        count[recorder.base + ERRORS],
        count[recorder.base + EMPTY],
        process_cpu(*pids),
        time.process_time(),
    )


async def actions(
    connections: list[tuple[Connection, Target]], spec: LoadSpec, recorder: Recorder
) -> list[Any]:
    """Each action alone, one after another, each with a warm-up and a window timed here.

    ReceiveMessage takes the messages found in the queue (filled beforehand) and those
    SendMessageBatch left, with visibility 300 s, up to INFLIGHT_CAP; DeleteMessageBatch deletes
    what ReceiveMessage received. Their windows end early when they reach those limits.
    """
    receipts: collections.deque[str] = collections.deque()
    results = []
    for action in ACTIONS:
        stop = [False]
        slot = recorder.base + 1 + ACTIONS.index(action)
        tasks = [
            asyncio.ensure_future(one_action(action, c, t, recorder, stop, receipts)) for c, t in connections
        ]
        everything = asyncio.gather(*tasks)
        await asyncio.wait([everything], timeout=spec.warmup)

        recorder.flags[MEASURE] = 1
        first = snapshot(recorder, slot, spec.server_pids)
        await asyncio.wait([everything], timeout=spec.action_seconds)
        last = snapshot(recorder, slot, spec.server_pids)
        recorder.flags[MEASURE] = 0
        stop[0] = True
        await everything
        window = last[0] - first[0]
        requests = last[1] - first[1]
        results.append(
            {
                "action": action,
                "window_s": round(window, 4),
                "requests": requests,
                "requests_per_s": round(requests / window, 1) if window > 0 else 0.0,
                "errors": last[2] - first[2],
                "short_receives": last[3] - first[3] if action == "ReceiveMessage" else 0,
                "server_cpu_us_per_request": round((last[4] - first[4]) / requests * 1e6, 1)
                if requests
                else None,
                "load_generator_cpu_percent": round((last[5] - first[5]) / window * 100, 1)
                if window > 0
                else None,
                "latency_ms": summary(recorder.latency[action]),
            }
        )
    return results


def load_process(spec: LoadSpec, counts: Any, flags: Any, events: Any) -> None:
    """Body of a load generator process: one asyncio loop over ``spec.connections`` connections."""
    recorder = Recorder(spec, counts, flags, events)

    async def run() -> None:
        pairs = []
        for i in range(spec.connections):
            target = spec.targets[(i + spec.index) % len(spec.targets)]
            connection = Connection(target.host, target.port)
            await connection.open()
            pairs.append((connection, target))
        events.put(("ready", recorder.label, ""))
        while not flags[GO]:
            await asyncio.sleep(0.001)
        if spec.mode == "cycle":
            await asyncio.gather(*(cycle(c, t, recorder) for c, t in pairs))
            events.put(("latency", recorder.label, json.dumps(recorder.latency)))
        else:
            events.put(("actions", recorder.label, json.dumps(await actions(pairs, spec, recorder))))
        for connection, _ in pairs:
            connection.close()

    with reporting(recorder.label, events):
        asyncio.run(run())
        events.put(("done", recorder.label, ""))


# -- boto3 client processes -----------------------------------------------------------------


@dataclass(frozen=True)
class Boto3Spec:
    index: int
    endpoint: str
    queue: str


def boto3_process(spec: Boto3Spec, counts: Any, flags: Any, events: Any) -> None:
    """Body of a boto3 client process; its running count of deleted messages goes to its slot."""
    label = f"boto3 client {spec.index}"
    with reporting(label, events):
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "sqs",
            endpoint_url=spec.endpoint,
            region_name=REGION,
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            # No retries: a failure shows as one, instead of as a slower server.
            config=Config(retries={"total_max_attempts": 1}),
        )
        url = client.get_queue_url(QueueName=spec.queue)["QueueUrl"]
        entries = [{"Id": str(i), "MessageBody": BODY} for i in range(BATCH)]
        ready(label, flags, events)
        deleted = failures = 0
        while not flags[STOP]:
            try:
                sent = client.send_message_batch(QueueUrl=url, Entries=entries)
                got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=BATCH, WaitTimeSeconds=0)
                messages = got.get("Messages", [])
                failed = list(sent.get("Failed", []))
                if messages:
                    receipts = [
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
                    ]
                    done = client.delete_message_batch(QueueUrl=url, Entries=receipts)
                    deleted += len(done.get("Successful", []))
                    failed += done.get("Failed", [])
                    counts[spec.index] = deleted
                if failed:
                    raise RuntimeError(f"batch entries failed: {failed[:3]}")
            except Exception as error:
                failures += 1
                if failures <= ERROR_EXAMPLES:
                    events.put(("failure", label, json.dumps({"error": repr(error)[:1500]})))
                time.sleep(0.01)
        events.put(("done", label, str(failures)))


# -- running a set of client processes ---------------------------------------------------------


class Clients(Fleet):
    """Client processes running ``target(spec, counts, flags, events)``, ``slots`` shared counters."""

    def __init__(self, name: str, target: Any, specs: Sequence[Any], slots: int) -> None:
        super().__init__(target, specs, (slots,), name=name, join_timeout=15)
        self.counts = self.arrays[0]


def window(clients: Clients, seconds: float, warmup: float, pids: dict[str, int]) -> dict[str, Any]:
    """Release the clients; after a warm-up, the counters' growth over the window and the CPU use
    (% of one core) of ``pids``, of the clients, of this process and of the whole machine."""
    pids = pids | {f"{clients.name} {i}": int(p.pid or 0) for i, p in enumerate(clients.processes)}
    pids["bench"] = os.getpid()  # this process, with the threads that read the servers' logs
    measured = clients.window(seconds, warmup, lambda: cpu_of(pids))
    return {
        "window_s": measured.seconds,
        "counts": measured.counts[0],
        "cpu_percent": cpu_share(measured.before, measured.after, measured.seconds),
    }
