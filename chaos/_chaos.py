"""Chaos scenarios with a ledger: load a queue, kill what serves it, check nothing went wrong.

A scenario starts its own Redis in a folder of its own and a queue with a
lifecycle event stream, sends messages each carrying a unique token from
producer threads (recorded in the ledger only once acknowledged), consumes
them with real `smq worker` processes or consumer threads, and kills a part of
the system every few seconds:

- ``worker-kill``: SIGKILL a random `smq worker` and start another;
- ``worker-term``: SIGTERM a random `smq worker` (a graceful stop) and start another;
- ``redis-kill``: SIGKILL Redis (``appendfsync always``) and start it again on
  the same folder and port, under workers and a consumer thread;
- ``serve-kill``: SIGKILL `smq serve` and start it again on the same port,
  under boto3 producers and consumers;
- ``eviction-switch``: ``CONFIG SET maxmemory-policy allkeys-lru`` for a second
  or two, then back to ``noeviction``, under workers and a consumer thread
  (memory stays under ``maxmemory``: smq must stop writing, then go on);
- ``disk-full``: fill the disk under Redis's append-only file (a tmpfs of its
  own: root only) for a second or two, then free it; Redis restarts from its
  files after the load.

Then the load stops, the queue is drained (visible + in flight + delayed = 0,
within a deadline), everything stops, and ``check`` sets the ledger against
the queue's events. Used by ``tests/test_chaos.py`` (short forms) and
``chaos/chaos.py`` (long forms).
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis
from _chaos_ledger import Figures, LedgerWriter, check, read_ledger
from _chaos_procs import Fleet, RedisNode, ServeProcess

import smq

SCENARIOS = ("worker-kill", "worker-term", "redis-kill", "serve-kill", "eviction-switch", "disk-full")
QUEUE = "chaos"
EVENTS_MAX = 10_000_000
# Visibility timeout per scenario, in seconds: short where a kill leaves
# messages to come back; long under SIGTERM, where a stop releases them at
# once and a long timeout keeps a heartbeat delayed by a busy machine from
# letting one run out (which would be a duplicate unrelated to the stop).
VISIBILITY = {
    "worker-kill": 2,
    "worker-term": 10,
    "redis-kill": 3,
    "serve-kill": 3,
    "eviction-switch": 3,
    "disk-full": 3,
}
# Redis's own state: the scenarios that change it under the load rather than kill a part.
REDIS_STATE = ("eviction-switch", "disk-full")
DISK_BYTES = 64 << 20  # the tmpfs of ``disk-full``
_PADDING = "x" * 64


class NotRun(Exception):
    """The send surely did not run: send the same token again."""


class Unknown(Exception):
    """The call may or may not have run."""


class NeedsRoot(RuntimeError):
    """The scenario mounts a filesystem of its own (``disk-full``): it needs root."""


class _Count:
    """A count that threads add to."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.value += 1


@dataclass(frozen=True)
class Options:
    """How long and how hard a scenario runs.

    Attributes:
        seconds: Seconds of load and chaos, not counting the restarts (the drain comes after).
        rate: Messages sent per second, all producers together.
        producers: Producer threads.
        workers: `smq worker` processes (worker and Redis scenarios).
        concurrency: Handlers per worker.
        consumers: Consumer threads (Redis: beside the workers; serve: the only ones).
        kill_every: Mean seconds between two kills (each pause drawn from 0.5x to 1.5x).
        down_seconds: Longest pause before a killed Redis or `smq serve` starts again.
        work_ms: Longest time a handler works, drawn anew for each message.
        handler: ``"sync"`` or ``"async"``: the workers' handler (``async def``: one event loop).
        visibility_timeout: Seconds; None for the scenario's own (``VISIBILITY``).
        drain_timeout: Seconds the queue has to run empty after the load.
        seed: Seed of the random choices (victims, pauses).
        redis_server: Server binary (None: the embedded default).
        down_after_ms: Failover scenarios: the Sentinels' down-after-milliseconds.
        redis_config: Failover scenarios: lines added to every data node's configuration.
    """

    seconds: float = 12.0
    rate: float = 60.0
    producers: int = 2
    workers: int = 3
    concurrency: int = 2
    consumers: int = 2
    kill_every: float = 2.0
    down_seconds: float = 0.5
    work_ms: float = 20.0
    handler: str = "sync"
    visibility_timeout: int | None = None
    drain_timeout: float = 60.0
    seed: int = 17
    redis_server: str | None = None
    down_after_ms: int = 2000
    redis_config: tuple[str, ...] = ()


@dataclass
class Result:
    """One scenario's run: its figures, the evidence of any fault, and what the chaos did."""

    scenario: str
    figures: Figures
    problems: list[str]
    kills: int
    visibility_timeout: int
    seconds: float
    drain_seconds: float
    notes: list[str] = field(default_factory=list)
    stops: dict[str, int] = field(default_factory=dict)
    resume: list[float] = field(default_factory=list)  # failovers: seconds until sends resumed
    refused_sends: int = 0  # sends refused unrun (Unavailable, 503): Redis's state scenarios count them
    strict: bool = True  # False: a failover without waiting, whose losses are measured, not a fault

    def holds(self) -> bool:
        return self.figures.holds() and not self.notes

    def resume_summary(self) -> dict[str, Any]:
        """Median and max of the seconds until sends resumed after each failover, and each."""
        times = self.resume
        return {"median": round(statistics.median(times), 2), "max": round(max(times), 2), "each": times}

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            **self.figures.as_dict(),
            "kills": self.kills,
            "visibility_timeout": self.visibility_timeout,
            "seconds": round(self.seconds, 1),  # wall time, restarts and drain included
            "drain_seconds": round(self.drain_seconds, 1),
            "graceful_stops": self.stops,
            **({"resume_seconds": self.resume_summary()} if self.resume else {}),
            **({} if self.strict else {"strict": False}),
            **({"refused_sends": self.refused_sends} if self.scenario in REDIS_STATE else {}),
            "problems": self.problems[:50],
            "notes": self.notes,
        }


# -- producers and consumers ---------------------------------------------------


def _python_sender(queue: smq.Queue, refused: _Count | None = None) -> Callable[[str], str]:
    def send(body: str) -> str:
        try:
            return queue.send(body).message_id
        except smq.Unavailable as error:
            if refused is not None:
                refused.add()
            raise NotRun from error
        except smq.OutcomeUnknown as error:
            raise Unknown from error

    return send


def _boto3_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(errors that say the request never reached a server, errors that leave it unknown).

    A reply with an error is neither: ``_server_fault`` tells a 5xx (unknown) from a refusal.
    """
    from botocore import exceptions

    return (exceptions.EndpointConnectionError,), (exceptions.ConnectionError, exceptions.HTTPClientError)


def _status(error: Exception) -> int:
    """The HTTP status of a boto3 ClientError (0 for any other error)."""
    from botocore.exceptions import ClientError

    if not isinstance(error, ClientError):
        return 0
    return int(getattr(error, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _server_fault(error: Exception) -> bool:
    """True for a boto3 ClientError with a 5xx status: the server failed, the call may have run."""
    return _status(error) >= 500


def _boto3_sender(sqs: Any, url: str) -> Callable[[str], str]:
    not_run, unknown = _boto3_errors()

    def send(body: str) -> str:
        try:
            return str(sqs.send_message(QueueUrl=url, MessageBody=body)["MessageId"])
        except not_run as error:
            raise NotRun from error
        except unknown as error:
            raise Unknown from error
        except Exception as error:
            if _status(error) == 503:  # ServiceUnavailable: smq.Unavailable, the send did not run
                raise NotRun from error
            if _server_fault(error):
                raise Unknown from error
            raise

    return send


def _produce(
    index: int, send: Callable[[str], str], ledger: LedgerWriter, rate: float, stop: threading.Event
) -> None:
    """Send paced messages until ``stop``; record each once acknowledged, or as unknown."""
    interval = 1 / rate
    next_at = time.monotonic()
    sequence = 0
    while not stop.is_set():
        token = f"p{index}-{sequence:07d}"
        sequence += 1
        while not stop.is_set():
            begun = time.monotonic()
            try:
                message_id = send(f"{token} {_PADDING}")
                # When the send began and was acknowledged (monotonic, this process): the time
                # until service resumed after a kill is measured from these.
                ledger.write("sent", t=token, m=message_id, s=round(begun, 4), at=round(time.monotonic(), 4))
                break
            except NotRun:
                time.sleep(0.05)  # the same token again: nothing landed
            except Unknown:
                ledger.write("unknown", t=token)
                break
        next_at = max(next_at + interval, time.monotonic() - 1)
        stop.wait(max(0.0, next_at - time.monotonic()))


def _consume_python(queue: smq.Queue, ledger: LedgerWriter, visibility: int, stop: threading.Event) -> None:
    """Receive and delete one by one with the Python API; ``delete`` says whether it deleted."""
    pid = os.getpid()
    while not stop.is_set():
        try:
            messages = queue.receive(10, visibility_timeout=visibility, wait_time_seconds=1)
        except smq.BackendError:
            stop.wait(0.1)
            continue
        for message in messages:
            token = message.body.split(" ", 1)[0]
            ledger.write("delivered", t=token, m=message.message_id, n=message.receive_count, p=pid)
            while True:
                try:
                    deleted = queue.delete(message)
                except smq.Unavailable:
                    time.sleep(0.1)
                    continue
                except smq.OutcomeUnknown:
                    break  # it may come back: a duplicate, not a fault
                ledger.write("deleted", t=token, m=message.message_id, n=message.receive_count, d=deleted)
                break


def _consume_boto3(sqs: Any, url: str, ledger: LedgerWriter, visibility: int, stop: threading.Event) -> None:
    """Receive and delete in batches over the SQS API (a stale receipt's delete also succeeds there)."""
    not_run, unknown = _boto3_errors()
    pid = os.getpid()
    while not stop.is_set():
        try:
            reply = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=1,
                VisibilityTimeout=visibility,
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
        except Exception as error:
            if not isinstance(error, not_run + unknown) and not _server_fault(error):
                raise
            stop.wait(0.1)
            continue
        messages = reply.get("Messages", [])
        if not messages:
            continue
        known = {}
        for i, message in enumerate(messages):
            token = message["Body"].split(" ", 1)[0]
            count = int(message["Attributes"]["ApproximateReceiveCount"])
            known[str(i)] = (token, message["MessageId"], count)
            ledger.write("delivered", t=token, m=message["MessageId"], n=count, p=pid)
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        while True:
            try:
                done = sqs.delete_message_batch(QueueUrl=url, Entries=entries)
            except not_run:
                time.sleep(0.1)
                continue
            except Exception as error:
                if not isinstance(error, unknown) and not _server_fault(error):
                    raise
                break  # they may come back: duplicates, not faults
            for entry in done.get("Successful", []):
                token, mid, count = known[entry["Id"]]
                ledger.write("deleted", t=token, m=mid, n=count, d=False)
            break


def boto3_client(url: str) -> Any:
    """boto3's SQS client on ``url``, without retries: a retried send of unknown outcome could land twice."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="chaos",
        aws_secret_access_key="chaos",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=10),
    )


class _Threads:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def start(self, target: Callable[..., None], *args: Any) -> None:
        def run() -> None:
            try:
                target(*args, self.stop)
            except BaseException as error:  # reported with the figures, not lost in a thread
                self.errors.append(f"{target.__name__}: {error!r}")

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
            if thread.is_alive():
                self.errors.append("a thread did not stop within 30 s")


# -- the run -------------------------------------------------------------------


def _drain(queue: smq.Queue, timeout: float) -> int:
    """Wait until the queue holds nothing; returns what it still holds after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = queue.attributes()
            left = info.visible + info.in_flight + info.delayed
        except smq.BackendError:
            left = -1
        if left == 0 or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _all_events(queue: smq.Queue) -> list[smq.Event]:
    events: list[smq.Event] = []
    after = "-"
    while True:
        page = queue.events(after=after, limit=10_000)
        events += page
        if len(page) < 10_000:
            return events
        after = page[-1].event_id


def paced_kills(seconds: float, every: float, chance: random.Random) -> Iterator[None]:
    """Yield at each kill time: after pauses of 0.5 to 1.5 times ``every``, each drawn from
    ``chance`` as it comes, that add up to ``seconds``; the time left after the last kill is
    slept at the end. Restarts come on top, so a slow machine gets as many kills as a fast one
    (the seed fixes how many)."""
    budget = seconds
    while True:
        pause = every * chance.uniform(0.5, 1.5)
        if pause > budget:
            break
        budget -= pause
        time.sleep(pause)
        yield
    time.sleep(budget)


def run(scenario: str, folder: Path, options: Options = Options()) -> Result:
    """Run ``scenario`` (one of ``SCENARIOS``) in ``folder``, which it fills with its servers' files."""
    if scenario.startswith(("sentinel-", "cluster-")):
        from _chaos_failover import run_failover

        return run_failover(scenario, folder, options)
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}: one of {', '.join(SCENARIOS)}")
    options = replace(options, visibility_timeout=options.visibility_timeout or VISIBILITY[scenario])
    folder.mkdir(parents=True, exist_ok=True)
    appendfsync = "always" if scenario == "redis-kill" else "everysec"
    with contextlib.ExitStack() as stack:
        data = folder
        if scenario == "disk-full":
            data = stack.enter_context(_small_disk(folder / "disk"))
        node = RedisNode(data / "redis", appendfsync=appendfsync, server=options.redis_server)
        stack.callback(node.stop)
        ledger = LedgerWriter(folder / "ledger.jsonl")
        stack.callback(ledger.close)
        client = smq.Client(node.url)
        stack.callback(client.close)
        return _run(scenario, folder, options, node, client, ledger, data)
    raise AssertionError("unreachable")  # for the type checker: the with block returns


@contextlib.contextmanager
def _small_disk(where: Path) -> Iterator[Path]:
    """A tmpfs of ``DISK_BYTES`` at ``where`` (mounting needs root), unmounted after."""
    if os.geteuid() != 0:
        raise NeedsRoot("disk-full mounts a small tmpfs of its own: run it as root")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _switch_eviction(url: str, hold: float) -> None:
    """Turn eviction on (``allkeys-lru``) for ``hold`` seconds, then off again."""
    with redis.Redis.from_url(url) as admin:
        admin.config_set("maxmemory-policy", "allkeys-lru")
        time.sleep(hold)
        admin.config_set("maxmemory-policy", "noeviction")


def _fill_disk(disk: Path, hold: float) -> None:
    """Fill ``disk`` to its last byte for ``hold`` seconds, then free it."""
    filler = disk / f"filler-{time.monotonic_ns()}"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = 1 << 20
        while size:
            try:
                os.write(descriptor, b"\0" * size)
            except OSError:  # ENOSPC: full, but for less than ``size``; halve it down to a byte
                size //= 2
        time.sleep(hold)
    finally:
        os.close(descriptor)
        filler.unlink(missing_ok=True)


def _evicted_keys(url: str) -> int:
    with redis.Redis.from_url(url) as admin:
        return int(admin.info("stats")["evicted_keys"])


def _run(
    scenario: str,
    folder: Path,
    options: Options,
    node: RedisNode,
    client: smq.Client,
    ledger: LedgerWriter,
    data: Path,
) -> Result:
    visibility = options.visibility_timeout
    assert visibility is not None
    queue = client.create_queue(QUEUE, visibility_timeout=visibility, event_stream_max_len=EVENTS_MAX)
    chance = random.Random(options.seed)
    kills = 0  # of Redis's state: each change made and undone
    producers, consumers = _Threads(), _Threads()
    fleet: Fleet | None = None
    serve: ServeProcess | None = None
    notes: list[str] = []
    refused = _Count()
    started = time.monotonic()
    if scenario == "eviction-switch":
        with redis.Redis.from_url(node.url) as admin:  # far above what the run holds: nothing evicted
            admin.config_set("maxmemory", "512mb")
    try:
        if scenario == "serve-kill":
            serve = ServeProcess(folder, node.url)
            url = boto3_client(serve.url).get_queue_url(QueueName=QUEUE)["QueueUrl"]
            for index in range(options.producers):
                send = _boto3_sender(boto3_client(serve.url), url)
                producers.start(_produce, index, send, ledger, options.rate / options.producers)
            for _ in range(options.consumers):
                consumers.start(_consume_boto3, boto3_client(serve.url), url, ledger, visibility)
        else:
            args = ["--visibility-timeout", str(visibility), "--concurrency", str(options.concurrency)]
            args += ["--wait-time", "1", "--grace-period", "20"]
            fleet = Fleet(folder, node.url, QUEUE, options.workers, args, options.work_ms, options.handler)
            for index in range(options.producers):
                producers.start(
                    _produce, index, _python_sender(queue, refused), ledger, options.rate / options.producers
                )
            if scenario in ("redis-kill", *REDIS_STATE):
                for _ in range(options.consumers):
                    consumers.start(_consume_python, queue, ledger, visibility)
        for _ in paced_kills(options.seconds, options.kill_every, chance):
            down = chance.uniform(0, options.down_seconds)
            if fleet is not None:
                fleet.check()
            if scenario == "worker-kill":
                assert fleet is not None
                fleet.kill(chance.randrange(len(fleet.workers)))
            elif scenario == "worker-term":
                assert fleet is not None
                fleet.terminate(chance.randrange(len(fleet.workers)))
                fleet.reap()
            elif scenario == "redis-kill":
                node.kill(down)
            elif scenario == "eviction-switch":
                _switch_eviction(node.url, chance.uniform(1.0, 2.5))
                kills += 1
            elif scenario == "disk-full":
                _fill_disk(data, chance.uniform(1.0, 2.5))
                kills += 1
            else:
                assert serve is not None
                serve.kill(down)
        producers.join()  # consumers keep going until the queue is empty
        loaded = time.monotonic()
        if scenario == "disk-full":  # what was acknowledged is in the files: Redis starts from them
            node.server.stop()
            node.server.start()
        if fleet is not None:
            fleet.await_started()
        left = _drain(queue, options.drain_timeout)
        drain_seconds = time.monotonic() - loaded
    finally:
        producers.join()
        consumers.join()
        if fleet is not None:
            fleet.stop()
            notes += fleet.bad_exits
        if serve is not None:
            serve.stop()
        notes += producers.errors + consumers.errors
    if scenario not in REDIS_STATE:
        kills = {"redis-kill": node.kills, "serve-kill": serve.kills if serve else 0}.get(
            scenario, fleet.kills if fleet else 0
        )
    evicted = _evicted_keys(node.url)
    if evicted:
        notes.append(f"Redis evicted {evicted} key(s)")
    figures, problems = check(read_ledger(folder / "ledger.jsonl"), _all_events(queue), left)
    return Result(
        scenario,
        figures,
        problems,
        kills,
        visibility,
        time.monotonic() - started,
        drain_seconds,
        notes,
        fleet.stop_counts if fleet is not None and scenario == "worker-term" else {},
        refused_sends=refused.value,
    )
