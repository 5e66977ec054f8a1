"""The HTTP service: ``smq serve`` against moto's ``moto_server``, with boto3 and a raw load generator.

One run starts a private ``redis-server`` (``EmbeddedRedis``, TCP on 127.0.0.1), ``smq serve``
on it, and ``moto_server`` (moto keeps its queues in its own memory), then in each of
``--repeat`` rounds:

1. boto3, the same code against both servers one after the other: ``--boto3-clients``
   processes each loop ``send_message_batch`` (10) / ``receive_message`` (up to 10, no wait) /
   ``delete_message_batch`` on one queue; the figure is messages deleted per second.
2. Server capacity with a load generator that is not boto3 (whose own CPU would dominate):
   asyncio raw HTTP/1.1 on keep-alive connections, request bodies built ahead, no signing.
   The same send-batch / receive-10 / delete-batch cycle on ``--connections`` connections,
   through one ``smq serve`` process, two processes (the connections split between their
   ports), moto, and LocalStack's SQS when ``--localstack-python`` names a Python (3.13+)
   with ``localstack-core`` (skipped with the reason otherwise); then each action alone on
   one process (requests per second and the server's CPU per request, from
   ``/proc/<pid>/stat``).
3. Long-poll wake latency: ``--polls`` concurrent ReceiveMessage long polls
   (WaitTimeSeconds=20, MaxNumberOfMessages=1) held on one ``smq serve`` process while
   ``--wake-messages`` messages are sent one at a time every ``--wake-interval-ms`` from
   another connection; per message, the time from the send's response to the moment a long
   poll returns it; and the number of Redis connections (``CLIENT LIST``) while they wait.

Every response is checked; failures are printed with their request and response, and smq
serve's access log is tallied. See ``bench/README.md`` for the details and the figures.

Run: ``.venv/bin/python bench/serve.py`` (a quick check: ``--repeat 1 --seconds 2
--boto3-seconds 2 --action-seconds 1 --polls 100 --wake-messages 100 --prefill 20000``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import http.client
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import redis
from _harness import Options, Run, redis_version, spread, temp_folder
from _harness import redis_server as start_redis
from _http_clients import (
    ACTIONS,
    AUTHORIZATION,
    BATCH,
    BODY,
    BODY_BYTES,
    DELETED,
    EMPTY,
    ERROR_EXAMPLES,
    ERRORS,
    HOLD_SECONDS,
    REGION,
    SLOTS,
    Boto3Spec,
    Clients,
    Connection,
    LoadSpec,
    Target,
    boto3_process,
    load_process,
    request_bytes,
    summary,
    window,
)

import smq
from smq.embedded import EmbeddedRedis, free_port

PARTS = ("boto3", "load", "actions", "wake")
STARTUP_SECONDS = 60
RELEASE = "release"  # body of the messages that end the long polls after the measurement


# -- servers we start ---------------------------------------------------------------------


class Service:
    """One HTTP server process of ours (smq serve or moto_server), stopped by its own pid.

    Its output goes to a log file; the line announcing its address tells it is ready.
    """

    def __init__(
        self,
        name: str,
        command: list[str],
        ready: str,
        log: Path,
        *,
        url: str = "",
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.command = command
        self.ready = re.compile(ready)
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.url = url  # else group 1 of the ready line
        self.env = env
        self.stop_seconds = 0.0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def start(self) -> Service:
        found = threading.Event()
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=None if self.env is None else {**os.environ, **self.env},
        )

        def drain(stream: Any) -> None:  # a full pipe would block the server: keep reading
            with self.log.open("ab") as sink:
                for line in stream:
                    sink.write(line)
                    sink.flush()
                    match = None if found.is_set() else self.ready.search(line.decode(errors="replace"))
                    if match:
                        self.url = self.url or match.group(1).rstrip("/")
                        found.set()

        threading.Thread(target=drain, args=(self.process.stdout,), daemon=True).start()
        deadline = time.monotonic() + STARTUP_SECONDS
        while not found.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
                raise RuntimeError(f"{self.name} did not start ({' '.join(self.command)}):\n{tail}")
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s; records how long a graceful stop took."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            print(f"\nWARNING: {self.name} (pid {process.pid}) ignored SIGTERM for 15 s: killed")
            process.kill()
            process.wait()
        self.stop_seconds = time.monotonic() - started


def smq_serve(redis_url: str, log: Path, extra: list[str]) -> Service:
    executable = Path(sys.executable).parent / "smq"
    base = [str(executable)] if executable.exists() else [sys.executable, "-m", "smq"]
    command = base + ["serve", "--redis-url", redis_url, "--host", "127.0.0.1", "--port", "0", "--no-auth"]
    command += ["--access-log", "stderr", *extra]  # the log file the run tallies; extra may turn it off
    return Service("smq serve", command, r"listening on (http://\S+)", log)


def moto_server(log: Path) -> Service:
    executable = Path(sys.executable).parent / "moto_server"
    base = [str(executable)] if executable.exists() else [sys.executable, "-m", "moto.server"]
    command = base + ["-H", "127.0.0.1", "-p", str(free_port())]
    return Service("moto_server", command, r"Running on (http://\S+)", log)


def localstack(python: str, folder: Path, log: Path) -> Service:
    """LocalStack's SQS, in host mode: ``python`` (3.13+) has ``localstack-core`` installed."""
    port = free_port()
    env = {
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "SERVICES": "sqs",
        "LOCALSTACK_VOLUME_DIR": str(folder / "localstack"),
        "DNS_ADDRESS": "0",  # no DNS server of its own
        # Nothing from outside: no download of its test certificate, no usage events sent.
        "SKIP_SSL_CERT_DOWNLOAD": "1",
        "DISABLE_EVENTS": "1",
    }
    command = [python, "-m", "localstack.runtime.main"]
    return Service("localstack", command, r"^(Ready)\.", log, url=f"http://127.0.0.1:{port}", env=env)


def localstack_version(python: str | None) -> str:
    if python is None:
        return ""
    found = subprocess.run(
        [
            python,
            "-c",
            "import sys, importlib.metadata as m; "
            "print(m.version('localstack-core'), sys.version.split()[0])",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    version, _, interpreter = found.stdout.strip().partition(" ")
    return f"localstack-core {version} on Python {interpreter}, host mode, SERVICES=sqs"


def localstack_python(given: str | None) -> tuple[str | None, str]:
    """(the Python to run LocalStack with, or None; why not)."""
    if not given:
        return None, "not run: no --localstack-python given (it needs Python 3.13+ with localstack-core)"
    found = subprocess.run(
        [given, "-c", "import sys, localstack.runtime.main; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        return None, f"not run: {given} cannot import localstack ({found.stderr.strip().splitlines()[-1:]})"
    return given, ""


# -- requests outside the measured parts ----------------------------------------------------


def call(url: str, action: str, payload: dict[str, Any]) -> dict[str, Any]:
    """One request outside the measured parts (set-up, clean-up); raises on an error response."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        body = json.dumps(payload)
        headers = {
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": f"AmazonSQS.{action}",
            "Authorization": AUTHORIZATION,
        }
        connection.request("POST", "/", body=body, headers=headers)
        response = connection.getresponse()
        text = response.read()
    finally:
        connection.close()
    if response.status != 200:
        raise RuntimeError(f"{action} {body} -> HTTP {response.status}: {text[:2000]!r}")
    return dict(json.loads(text)) if text.strip() else {}


def create_queue(url: str, name: str) -> str:
    return str(call(url, "CreateQueue", {"QueueName": name})["QueueUrl"])


def queue_url(url: str, name: str) -> str:
    return str(call(url, "GetQueueUrl", {"QueueName": name})["QueueUrl"])


def messages_in(url: str, queue: str) -> int:
    """Visible, in-flight and delayed messages of a queue, by GetQueueAttributes."""
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    attributes = call(url, "GetQueueAttributes", {"QueueUrl": queue, "AttributeNames": names})["Attributes"]
    return sum(int(attributes.get(name, 0)) for name in names)


def report_failures(label: str, failures: list[dict[str, Any]]) -> None:
    for failure in failures[:ERROR_EXAMPLES]:
        print(f"\nFAILURE ({label}): {json.dumps(failure)[:3000]}")


# -- part 1: boto3 against smq serve and moto -------------------------------------------------


def boto3_cell(
    system: str, endpoint: str, name: str, args: argparse.Namespace, pids: dict[str, int]
) -> dict[str, Any]:
    import boto3

    admin = boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    url = admin.create_queue(QueueName=name)["QueueUrl"]
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(BATCH)]
    for _ in range(0, args.boto3_backlog, BATCH):  # messages that wait throughout, if asked for
        admin.send_message_batch(QueueUrl=url, Entries=entries)
    specs = [Boto3Spec(i, endpoint, name) for i in range(args.boto3_clients)]
    with Clients("boto3 client", boto3_process, specs, len(specs)) as clients:
        measured = window(clients, args.boto3_seconds, args.warmup, pids)
        clients.stop()
    admin.delete_queue(QueueUrl=url)
    deleted = sum(measured["counts"])
    seconds = measured["window_s"]
    report_failures(f"boto3 {system}", clients.failures)
    return {
        "system": system,
        "clients": args.boto3_clients,
        "backlog": args.boto3_backlog,
        "window_s": round(seconds, 4),
        "deleted": deleted,
        "msgs_per_s": round(deleted / seconds, 1),
        "client_failures": sum(int(d) for kind, d in clients.reports if kind == "done"),
        "failure_examples": clients.failures,
        "server_cpu_us_per_message": per_message(measured["cpu_percent"], seconds, deleted),
        "cpu_percent": measured["cpu_percent"],
    }


def per_message(cpu_percent: dict[str, float], seconds: float, messages: int) -> float | None:
    """Microseconds of CPU the server processes (``server`` ...) used per message deleted."""
    if not messages:
        return None
    used = sum(v for k, v in cpu_percent.items() if k.startswith("server")) / 100 * seconds
    return round(used / messages * 1e6, 1)


# -- part 2: the load generator ------------------------------------------------------------------


def load_cell(
    label: str,
    services: list[Service],
    name: str,
    connections: int,
    args: argparse.Namespace,
    pids: dict[str, int],
) -> dict[str, Any]:
    """The send-batch / receive / delete-batch cycle through ``services`` (one queue, all ports)."""
    create_queue(services[0].url, name)
    targets = tuple(Target("127.0.0.1", s.port, queue_url(s.url, name)) for s in services)
    specs = [LoadSpec(i, targets, connections, "cycle") for i in range(args.load_processes)]
    with Clients("load generator", load_process, specs, SLOTS * len(specs)) as clients:
        measured = window(clients, args.seconds, args.warmup, pids)
        clients.stop()
    # Every cycle ends with its delete, so what is left is what was sent and not deleted.
    final = [sum(clients.counts[i * SLOTS + s] for i in range(len(specs))) for s in range(SLOTS)]
    expected = final[1 + ACTIONS.index("SendMessageBatch")] * BATCH - final[DELETED]
    left = messages_in(services[0].url, targets[0].queue_url)
    if left != expected and not final[ERRORS]:
        print(f"\nWARNING: {label}: {left} messages left in the queue, but sent - deleted = {expected}")
    call(services[0].url, "DeleteQueue", {"QueueUrl": targets[0].queue_url})
    report_failures(label, clients.failures)
    seconds = measured["window_s"]
    totals = [sum(measured["counts"][i * SLOTS + s] for i in range(len(specs))) for s in range(SLOTS)]
    latency: dict[str, list[float]] = {}
    for kind, detail in clients.reports:
        if kind == "latency":
            for action, values in json.loads(detail).items():
                latency.setdefault(action, []).extend(values)
    requests = {a: totals[1 + i] for i, a in enumerate(ACTIONS) if totals[1 + i]}
    cpu = measured["cpu_percent"]
    server_cpu = sum(cpu[k] for k in cpu if k.startswith("server")) / 100 * seconds
    return {
        "label": label,
        "server_processes": len(services),
        "load_processes": len(specs),
        "connections_per_load_process": connections,
        "window_s": round(seconds, 4),
        "deleted": totals[DELETED],
        "msgs_per_s": round(totals[DELETED] / seconds, 1),
        "requests_per_s": {a: round(n / seconds, 1) for a, n in requests.items()},
        "all_requests_per_s": round(sum(requests.values()) / seconds, 1),
        "errors": totals[ERRORS],
        "empty_receives": totals[EMPTY],
        "left_in_queue": left,
        "sent_minus_deleted": expected,
        "failure_examples": clients.failures,
        "server_cpu_us_per_request": round(server_cpu / sum(requests.values()) * 1e6, 1)
        if requests
        else None,
        "server_cpu_us_per_message": per_message(cpu, seconds, totals[DELETED]),
        "cpu_percent": measured["cpu_percent"],
        "latency_ms": {a: summary(v) for a, v in latency.items() if v}
        | {"all": summary([x for v in latency.values() for x in v])},
    }


def actions_cell(
    service: Service, name: str, connections: int, args: argparse.Namespace, redis_url: str | None
) -> dict[str, Any]:
    """Each action alone on one server process, one load generator process.

    With ``redis_url`` (smq), ``--prefill`` messages go to the queue through smq's Python API
    first, so that ReceiveMessage does not run it dry.
    """
    create_queue(service.url, name)
    filled = prefill(redis_url, name, args.prefill) if redis_url else 0
    target = Target("127.0.0.1", service.port, queue_url(service.url, name))
    spec = LoadSpec(0, (target,), connections, "actions", args.warmup, args.action_seconds, (service.pid,))
    with Clients("load generator", load_process, [spec], SLOTS) as clients:
        clients.go()
        clients.expect("done", timeout=len(ACTIONS) * (args.warmup + args.action_seconds) + 120)
    call(service.url, "DeleteQueue", {"QueueUrl": target.queue_url})
    report_failures("actions", clients.failures)
    results = [json.loads(detail) for kind, detail in clients.reports if kind == "actions"][0]
    return {"prefilled": filled, "failure_examples": clients.failures, "actions": results}


def prefill(redis_url: str, name: str, count: int) -> int:
    with smq.Client(redis_url) as client:
        queue = client.queue(name)
        entries = [smq.SendEntry(str(i), BODY) for i in range(BATCH)]
        for _ in range(0, count, BATCH):
            queue.send_batch(entries)
        return queue.attributes().visible


# -- part 3: long-poll wake latency ------------------------------------------------------------


def redis_clients(admin: redis.Redis) -> int:
    """Connections to the private Redis other than ``admin``'s own."""
    return sum(redis_client_commands(admin).values())


def redis_client_commands(admin: redis.Redis) -> dict[str, int]:
    """The other connections to the private Redis, counted by the last command each ran."""
    own = admin.client_id()
    commands = collections.Counter(str(c["cmd"]) for c in admin.client_list() if int(c["id"]) != own)
    return dict(commands.most_common())


async def wake_latency(
    service: Service, admin: redis.Redis, name: str, args: argparse.Namespace
) -> dict[str, Any]:
    urls = [create_queue(service.url, f"{name}-{q}") for q in range(args.poll_queues)]
    authority = f"127.0.0.1:{service.port}"
    polls = [
        request_bytes(
            authority,
            "ReceiveMessage",
            {
                "QueueUrl": url,
                "MaxNumberOfMessages": 1,
                "WaitTimeSeconds": 20,
                "VisibilityTimeout": HOLD_SECONDS,
            },
        )
        for url in urls
    ]
    clients_before = redis_clients(admin)
    received: dict[str, float] = {}
    returned = {"any": 0, "empty": 0, "errors": 0, "duplicates": 0, "broken": 0}
    failures: list[dict[str, Any]] = []
    stopping = False

    async def poller(connection: Connection, data: bytes) -> None:
        while not stopping:
            try:
                status, body = await connection.request(data)
            except (OSError, asyncio.IncompleteReadError) as error:
                returned["broken"] += 1  # the connection failed: this poll ends
                if len(failures) < ERROR_EXAMPLES:
                    failures.append({"request": data.decode()[-800:], "exception": repr(error)})
                return
            now = time.perf_counter()
            returned["any"] += 1
            if status != 200:
                returned["errors"] += 1
                if len(failures) < ERROR_EXAMPLES:
                    failures.append(
                        {"request": data.decode()[-800:], "status": status, "response": body.decode()[:1500]}
                    )
                await asyncio.sleep(0.05)
                continue
            messages = json.loads(body).get("Messages") or []
            if not messages:
                returned["empty"] += 1
            for message in messages:
                if message["Body"] == RELEASE:
                    continue
                if message["Body"] in received:
                    returned["duplicates"] += 1
                received.setdefault(message["Body"], now)

    connections = [Connection("127.0.0.1", service.port) for _ in range(args.polls)]
    for start in range(0, len(connections), 100):  # in steps, within the server's listen backlog
        await asyncio.gather(*(c.open() for c in connections[start : start + 100]))
    tasks = [asyncio.ensure_future(poller(c, polls[i % len(polls)])) for i, c in enumerate(connections)]
    await asyncio.sleep(args.poll_settle)
    held = [redis_clients(admin)]
    commands = redis_client_commands(admin)
    early = returned["any"]  # polls that returned before any message was sent (should be none)
    sender = Connection("127.0.0.1", service.port)
    sent: dict[str, tuple[float, float]] = {}
    send_failures = 0
    began = time.perf_counter()
    for k in range(args.wake_messages):
        delay = began + k * args.wake_interval_ms / 1000 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        body = f"wake-{k:07d}"
        data = request_bytes(authority, "SendMessage", {"QueueUrl": urls[k % len(urls)], "MessageBody": body})
        t_0 = time.perf_counter()
        status, response = await sender.request(data)
        sent[body] = (t_0, time.perf_counter())
        if status != 200:
            send_failures += 1
            if len(failures) < ERROR_EXAMPLES:
                failures.append(
                    {"request": data.decode()[-800:], "status": status, "response": response.decode()[:1500]}
                )
        if k % max(1, args.wake_messages // 4) == 0:
            held.append(redis_clients(admin))
    deadline = time.perf_counter() + 5
    while len(received) < len(sent) - send_failures and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    held.append(redis_clients(admin))
    # A poll whose client goes away may wait on in the server until it times out: release every
    # poll with a message of its own instead, so none is left behind for the next measurement.
    stopping = True
    for q, url in enumerate(urls):
        waiting = len(range(q, args.polls, len(urls)))
        for start in range(0, waiting, BATCH):
            entries = [{"Id": str(i), "MessageBody": RELEASE} for i in range(min(BATCH, waiting - start))]
            await sender.request(
                request_bytes(authority, "SendMessageBatch", {"QueueUrl": url, "Entries": entries})
            )
    finished, unfinished = await asyncio.wait(tasks, timeout=10)
    for task in unfinished:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for connection in [*connections, sender]:
        connection.close()
    await asyncio.sleep(0.2)
    for url in urls:
        call(service.url, "DeleteQueue", {"QueueUrl": url})
    after_response = [(received[b] - s[1]) * 1000 for b, s in sent.items() if b in received]
    after_request = [(received[b] - s[0]) * 1000 for b, s in sent.items() if b in received]
    send_ms = [(s[1] - s[0]) * 1000 for s in sent.values()]
    report_failures("long polls", failures)
    return {
        "polls": args.polls,
        "queues": args.poll_queues,
        "messages": len(sent),
        "interval_ms": args.wake_interval_ms,
        "delivered": len(after_response),
        "missing": len(sent) - send_failures - len(after_response),
        "send_failures": send_failures,
        "poll_errors": returned["errors"],
        "polls_broken": returned["broken"],
        "polls_returned_before_first_send": early,
        "polls_not_released": len(unfinished),
        "empty_returns": returned["empty"],
        "duplicates": returned["duplicates"],
        "failure_examples": failures,
        "after_send_response_ms": summary(after_response),
        "after_send_request_ms": summary(after_request),
        "send_ms": summary(send_ms),
        "redis_clients_before": clients_before,
        "redis_clients_while_polling": held,
        "redis_clients_by_last_command": commands,
    }


# -- a round, and the report ---------------------------------------------------------------------


def one_round(
    number: int,
    args: argparse.Namespace,
    folder: Path,
    redis_server: EmbeddedRedis,
    smq_a: Service | None,
    moto: Service,
    stack: Service | None = None,
) -> dict[str, Any]:
    prefix = f"[{number}/{args.repeat}]"
    result: dict[str, Any] = {"round": number, "boto3": [], "load": [], "actions": None, "wake": None}
    redis_pid = redis_server.process.pid if redis_server.process else 0
    if "boto3" in args.parts:
        endpoints = [("moto", moto)] if smq_a is None else [("smq", smq_a), ("moto", moto)]
        endpoints += [("localstack", stack)] if stack is not None else []
        for system, service in endpoints:
            print(f"{prefix} boto3 {system:>10} ...", end=" ", flush=True)
            pids = {"server": service.pid} | ({"redis": redis_pid} if system == "smq" else {})
            cell = boto3_cell(system, service.url, f"boto3-{system}-r{number}", args, pids)
            result["boto3"].append(cell)
            print(
                f"{cell['msgs_per_s']:>8,.0f} msgs/s  {cell['server_cpu_us_per_message']} µs server CPU/msg  "
                f"({cell['client_failures']} failures)"
            )
    if "load" in args.parts:
        result["load"] = load_layouts(prefix, number, args, folder, redis_server, smq_a, moto, stack)
    primary = moto if smq_a is None else smq_a  # moto only with --moto-only, to try the bench out
    if "actions" in args.parts:
        print(f"{prefix} actions one at a time ...", flush=True)
        connections = args.moto_connections if smq_a is None else args.connections
        redis_url = None if smq_a is None else redis_server.url
        result["actions"] = actions_cell(primary, f"actions-r{number}", connections, args, redis_url)
        for a in result["actions"]["actions"]:
            print(f"    {a['action']:>20}: {a['requests_per_s']:>8,.0f} req/s ({a['errors']} errors)")
    if "wake" in args.parts:
        print(f"{prefix} long polls: {args.polls} waiting, {args.wake_messages} messages ...", end=" ")
        with redis_server.client() as admin:
            result["wake"] = asyncio.run(wake_latency(primary, admin, f"wake-r{number}", args))
        wake = result["wake"]
        after = wake["after_send_response_ms"]
        print(
            f"p50 {after['p50']} ms, p99 {after['p99']} ms, {wake['missing']} missing, "
            f"Redis connections {wake['redis_clients_while_polling']}"
        )
    return result


def load_layouts(
    prefix: str,
    number: int,
    args: argparse.Namespace,
    folder: Path,
    redis_server: EmbeddedRedis,
    smq_a: Service | None,
    moto: Service,
    stack: Service | None = None,
) -> list[dict[str, Any]]:
    """The load generator's cycle through one smq serve process, two, moto and LocalStack."""
    redis_pid = redis_server.process.pid if redis_server.process else 0
    layouts: list[tuple[str, list[Service], int]] = []
    if args.load_moto:
        layouts.append(("moto", [moto], args.moto_connections))
    if stack is not None:
        layouts.append(("localstack", [stack], args.localstack_connections))
    second: Service | None = None
    if smq_a is not None:
        # The second process runs only for its layout: the long-poll part counts one process's
        # connections to Redis.
        second = smq_serve(redis_server.url, folder / "smq-serve-b.log", args.serve_args).start()
        layouts = [
            ("smq x1", [smq_a], args.connections),
            ("smq x2", [smq_a, second], args.connections),
        ] + layouts
    cells = []
    try:
        for label, services, connections in layouts:
            print(f"{prefix} load  {label:>6} ...", end=" ", flush=True)
            pids = {f"server {i}": s.pid for i, s in enumerate(services)}
            pids |= {"redis": redis_pid} if label.startswith("smq") else {}
            name = f"load-{label.replace(' ', '')}-r{number}"
            cell = load_cell(label, services, name, connections, args, pids)
            cells.append(cell)
            print(
                f"{cell['msgs_per_s']:>8,.0f} msgs/s  {cell['all_requests_per_s']:,.0f} req/s  "
                f"({cell['errors']} errors)"
            )
    finally:
        if second is not None:
            second.stop()
    return cells


def markdown(rounds: list[dict[str, Any]], server: str) -> str:
    """The tables: medians over the rounds, with the range when there are several."""
    parts = [boto3_table(rounds), load_table(rounds), actions_table(rounds, server), wake_table(rounds)]
    return "\n\n".join(p for p in parts if p)


def boto3_table(rounds: list[dict[str, Any]]) -> str:
    if not rounds[0]["boto3"]:
        return ""
    rates: dict[str, list[float]] = {}
    costs: dict[str, list[float]] = {}
    for r in rounds:
        for cell in r["boto3"]:
            rates.setdefault(cell["system"], []).append(cell["msgs_per_s"])
            if cell.get("server_cpu_us_per_message"):
                costs.setdefault(cell["system"], []).append(cell["server_cpu_us_per_message"])
    lines = [
        "boto3, send_message_batch (10) / receive_message (10) / delete_message_batch:",
        "",
        "| server | msgs/s | server CPU µs/message |",
        "|---|---|---|",
    ]
    lines += [
        f"| {system} | {spread(values)} | {spread(costs.get(system, []))} |"
        for system, values in rates.items()
    ]
    for peer in ("moto", "localstack"):
        if "smq" in rates and peer in rates:
            ratios = [s / m for s, m in zip(rates["smq"], rates[peer], strict=True) if m]
            cheaper = [p / s for s, p in zip(costs.get("smq", []), costs.get(peer, []), strict=False) if s]
            lines.append(f"| smq / {peer} | {spread(ratios, '×', 1)} | {spread(cheaper, '× less', 1)} |")
    return "\n".join(lines)


def load_table(rounds: list[dict[str, Any]]) -> str:
    if not rounds[0]["load"]:
        return ""
    lines = [
        "Load generator, the same cycle (raw HTTP/1.1):",
        "",
        "| servers | msgs/s | requests/s | request p50 / p99 ms | server CPU µs/request "
        "| server CPU µs/message | CPU % of a core |",
        "|---|---|---|---|---|---|---|",
    ]
    for label in [c["label"] for c in rounds[0]["load"]]:
        cells = [c for r in rounds for c in r["load"] if c["label"] == label]
        cpu = {k: statistics.median(c["cpu_percent"][k] for c in cells) for k in cells[0]["cpu_percent"]}
        per_request = [c["server_cpu_us_per_request"] for c in cells if c["server_cpu_us_per_request"]]
        per_message = [c["server_cpu_us_per_message"] for c in cells if c.get("server_cpu_us_per_message")]
        latency = [c["latency_ms"]["all"] for c in cells]
        lines.append(
            f"| {label} | {spread([c['msgs_per_s'] for c in cells])} "
            f"| {spread([c['all_requests_per_s'] for c in cells])} "
            f"| {median_of(latency, 'p50')} / {median_of(latency, 'p99')} "
            f"| {spread(per_request)} | {spread(per_message)} | {cpu_text(cpu)} |"
        )
    rates: dict[str, list[float]] = {}
    costs: dict[str, list[float]] = {}
    for label in [c["label"] for c in rounds[0]["load"]]:
        cells = [c for r in rounds for c in r["load"] if c["label"] == label]
        rates[label] = [c["msgs_per_s"] for c in cells]
        costs[label] = [c["server_cpu_us_per_message"] for c in cells if c.get("server_cpu_us_per_message")]
    for peer in ("moto", "localstack"):
        if "smq x1" in rates and peer in rates:
            ratios = [s / p for s, p in zip(rates["smq x1"], rates[peer], strict=True) if p]
            cheaper = [p / s for s, p in zip(costs["smq x1"], costs[peer], strict=False) if s]
            lines.append(
                f"| smq x1 / {peer} | {spread(ratios, '×', 1)} | | | | {spread(cheaper, '× less', 1)} | |"
            )
    return "\n".join(lines)


def actions_table(rounds: list[dict[str, Any]], server: str) -> str:
    if not rounds[0]["actions"]:
        return ""
    lines = [
        f"Each action alone, one {server} process:",
        "",
        "| action | requests/s | p50 / p99 ms | server CPU µs/request |",
        "|---|---|---|---|",
    ]
    for action in ACTIONS:
        rows = [a for r in rounds for a in r["actions"]["actions"] if a["action"] == action]
        cpu = [a["server_cpu_us_per_request"] for a in rows if a["server_cpu_us_per_request"]]
        latency = [a["latency_ms"] for a in rows]
        lines.append(
            f"| {action} | {spread([a['requests_per_s'] for a in rows])} "
            f"| {median_of(latency, 'p50')} / {median_of(latency, 'p99')} | {spread(cpu)} |"
        )
    return "\n".join(lines)


def wake_table(rounds: list[dict[str, Any]]) -> str:
    if not rounds[0]["wake"]:
        return ""
    wakes = [r["wake"] for r in rounds]
    after = [w["after_send_response_ms"] for w in wakes]
    values = {k: [a[k] for a in after if a[k] is not None] for k in ("p50", "p99", "max")}
    lines = [
        f"Long polls: {wakes[0]['polls']} waiting; {wakes[0]['messages']} messages, one every "
        f"{wakes[0]['interval_ms']:g} ms; ms from the send's response to the poll's:",
        "",
        "| p50 | p99 | max | missing | Redis connections while polling |",
        "|---|---|---|---|---|",
        f"| {spread(values['p50'], digits=2)} | {spread(values['p99'], digits=2)} "
        f"| {spread(values['max'], digits=2)} | {sum(w['missing'] for w in wakes)} "
        f"| {max(max(w['redis_clients_while_polling']) for w in wakes)} at most "
        f"({min(w['redis_clients_before'] for w in wakes)} before the polls) |",
    ]
    return "\n".join(lines)


def cpu_text(cpu: dict[str, float]) -> str:
    """CPU % of a core by process, the machine's total left out (it is the sum)."""
    return ", ".join(
        f"{k.replace('load generator', 'load gen')} {v:.0f}" for k, v in cpu.items() if k != "machine"
    )


def median_of(summaries: list[dict[str, Any]], key: str) -> str:
    values = [s[key] for s in summaries if s.get(key) is not None]
    return f"{statistics.median(values):.2f}" if values else "n/a"


def log_findings(log: Path) -> dict[str, Any]:
    """What went wrong by smq serve's own account: failed requests (access log) and tracebacks."""
    failed: collections.Counter[str] = collections.Counter()
    tracebacks: list[str] = []
    requests = 0
    lines = log.read_text(errors="replace").splitlines()
    for number, line in enumerate(lines):
        if line.startswith("Traceback") and len(tracebacks) < ERROR_EXAMPLES:
            tracebacks.append("\n".join(lines[max(0, number - 1) : number + 40]))
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        requests += 1
        if entry.get("status", 200) != 200:
            failed[f"{entry.get('action')} {entry.get('status')} {entry.get('error')}"] += 1
    return {"requests": requests, "failed": dict(failed.most_common()), "tracebacks": tracebacks}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Options(__doc__, "http", repeat_help="rounds; medians and ranges reported")
    add = parser.add_argument
    add("--warmup", type=float, default=1.0, help="seconds run before each window (default 1)")
    add("--boto3-seconds", type=float, default=5.0, help="boto3 window per server (default 5)")
    add("--boto3-clients", type=int, default=2, help="boto3 client processes (default 2)")
    add(
        "--boto3-backlog",
        type=int,
        default=0,
        help="messages sent to the boto3 queue before the clients start, so it never runs empty (default 0)",
    )
    add("--seconds", type=float, default=5.0, help="load generator window per layout (default 5)")
    add("--load-processes", type=int, default=1, help="load generator processes (default 1)")
    add("--connections", type=int, default=32, help="connections per load generator process (default 32)")
    add("--action-seconds", type=float, default=2.0, help="window of each action alone (default 2)")
    add(
        "--prefill",
        type=int,
        default=50_000,
        help="messages put in the queue before the actions alone, for ReceiveMessage (default 50000)",
    )
    add("--no-load-moto", dest="load_moto", action="store_false", help="skip moto in the load-generator part")
    add(
        "--moto-connections",
        type=int,
        default=1,
        help="load generator connections to moto (default 1: moto's best; its receive walks every "
        "message in the queue, so more connections, more messages in flight, fewer msgs/s)",
    )
    add("--polls", type=int, default=1000, help="concurrent long polls (default 1000)")
    add("--poll-queues", type=int, default=1, help="queues the long polls spread over (default 1)")
    add(
        "--poll-settle",
        type=float,
        default=1.0,
        help="seconds the polls wait before the first send (default 1)",
    )
    add("--wake-messages", type=int, default=1000, help="messages sent to the long polls (default 1000)")
    add("--wake-interval-ms", type=float, default=5.0, help="pause between those sends (default 5 ms)")
    add(
        "--parts",
        type=lambda text: {p.strip() for p in text.split(",") if p.strip()},
        default=set(PARTS),
        help=f"comma list of {','.join(PARTS)} (default all)",
    )
    add(
        "--localstack-python",
        default=os.environ.get("SMQ_BENCH_LOCALSTACK_PYTHON"),
        help="a Python (3.13+) with localstack-core installed: adds LocalStack's SQS to the load-generator "
        "part (default $SMQ_BENCH_LOCALSTACK_PYTHON; without it LocalStack is skipped, with the reason)",
    )
    add(
        "--localstack-connections",
        type=int,
        default=2,
        help="load generator connections to LocalStack (default 2: its best of 1, 2, 4, 8 and 32 here)",
    )
    add("--moto-only", action="store_true", help="skip smq serve (to try the bench before it exists)")
    add(
        "--serve-args",
        type=str.split,
        default=[],
        help="more flags for smq serve, one string after '=' "
        "(e.g. --serve-args='--no-access-log --threads 4')",
    )
    args = parser.parse_args(argv)
    if not args.parts or args.parts - set(PARTS):
        parser.error(f"--parts: choose from {','.join(PARTS)}")
    for name in (
        "boto3_clients",
        "load_processes",
        "connections",
        "moto_connections",
        "polls",
        "poll_queues",
        "wake_messages",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(__file__, args, argv, name="http")
    # 1,000 long polls are 1,000 sockets in this process and in the server, which inherits the limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = args.polls + 1000
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted, hard)
        )
    rounds: list[dict[str, Any]] = []
    with temp_folder("smq-bench-http-") as folder:
        with start_redis(args.redis_server, folder / "redis") as redis:
            version = redis_version(redis)
            smq_a = (
                None if args.moto_only else smq_serve(redis.url, folder / "smq-serve-a.log", args.serve_args)
            )
            moto = moto_server(folder / "moto.log")
            python, stack_note = localstack_python(args.localstack_python)
            stack = None if python is None else localstack(python, folder, folder / "localstack.log")
            if stack_note:
                print(f"LocalStack: {stack_note}")
            try:
                if smq_a is not None:
                    smq_a.start()
                moto.start()
                if stack is not None:
                    stack.start()
                for number in run.each_round(args.repeat):
                    rounds.append(one_round(number, args, folder, redis, smq_a, moto, stack))
            finally:
                for service in (smq_a, moto, stack):
                    if service is not None:
                        service.stop()
                logs = {log.name: log_findings(log) for log in sorted(folder.glob("smq-serve-*.log"))}
    table = markdown(rounds, "moto_server" if args.moto_only else "smq serve")
    print()
    print(table)
    for name, findings in logs.items():
        if findings["failed"] or findings["tracebacks"]:
            print(f"\nNOTE: {name}: {json.dumps(findings, indent=1)[:4000]}")
    meta = {
        "rounds": args.repeat,
        "body_bytes": BODY_BYTES,
        "redis_version": version,
        "redis_transport": "tcp 127.0.0.1, one embedded redis-server, AOF everysec",
        "localstack": stack_note or localstack_version(args.localstack_python),
        "smq_serve_logs": logs,
        "graceful_stop_seconds": {s.name: round(s.stop_seconds, 2) for s in (smq_a, moto) if s is not None},
        "figures": "msgs_per_s: messages deleted per second in the window; cpu_percent: of one core",
    }
    packages = ("aiohttp", "boto3", "botocore", "moto", "werkzeug")
    run.write(args.output, {"rounds": rounds}, packages=packages, **meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
