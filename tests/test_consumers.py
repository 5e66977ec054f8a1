"""A queue's consumers: workers and SQS clients note heartbeats, ``Queue.consumers`` reads them."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import smq
from conftest import Clock, raw
from http_support import Server, json_client
from smq.core._keys import QueueKeys
from smq.embedded import EmbeddedRedis
from smq.server._consumers import MAX_NOTED, SqsConsumers
from worker_support import Running, wait_for

START = 1_800_000_000  # the clock fixture's start, in seconds
HOUR_MS = 3_600_000


def _ids(queue: Any, limit: int = 100) -> list[str]:
    return [c.id for c in queue.consumers(limit)]


def test_a_beat_shows_the_consumer_with_its_kind_info_and_age(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    assert queue.consumers() == []
    queue._beat("host-a:12:x1", "worker", {"host": "host-a", "pid": 12, "held": 3})
    clock.advance(2.5)
    (seen,) = queue.consumers()
    assert seen == smq.Consumer(
        id="host-a:12:x1",
        kind="worker",
        last_seen=START,
        age=2.5,
        info={"host": "host-a", "pid": 12, "held": 3},
    )


def test_consumers_come_newest_heartbeat_first_up_to_the_limit(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    for name in ("a", "b", "c"):
        queue._beat(name, "worker", {})
        clock.advance(1)
    queue._beat("sqs:KEY:Boto3/1.34.0:127.0.0.1", "sqs", {"agent": "Boto3/1.34.0", "receives": 2})
    clock.advance(1)
    queue._beat("a", "worker", {"held": 1})  # a beats again: the newest now
    assert _ids(queue) == ["a", "sqs:KEY:Boto3/1.34.0:127.0.0.1", "c", "b"]
    assert _ids(queue, 2) == ["a", "sqs:KEY:Boto3/1.34.0:127.0.0.1"]
    by_id = {c.id: c for c in queue.consumers()}
    assert by_id["a"].info == {"held": 1} and by_id["a"].age == 0
    assert by_id["sqs:KEY:Boto3/1.34.0:127.0.0.1"].kind == "sqs"
    assert by_id["b"].age == 3


def test_forget_drops_the_consumer(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue._beat("a", "worker", {})
    queue._beat("b", "worker", {})
    queue._beat("a", "worker", {}, forget=True)
    assert _ids(queue) == ["b"]
    queue._beat("never-seen", "sqs", {}, forget=True)  # nothing to forget: no error
    assert _ids(queue) == ["b"]


def test_a_deleted_queue_refuses_the_beat_and_gets_no_key_back(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue._beat("a", "worker", {})
    assert client.delete_queue("jobs")
    redis = raw(client)
    assert not redis.exists(queue.keys.consumers) and not redis.exists(queue.keys.consumers_at)
    with pytest.raises(smq.QueueDoesNotExist):
        queue._beat("a", "worker", {})
    with pytest.raises(smq.QueueDoesNotExist):
        queue._beat("a", "worker", {}, forget=True)
    with pytest.raises(smq.QueueDoesNotExist):
        queue.consumers()
    for key in (queue.keys.meta, queue.keys.consumers, queue.keys.consumers_at):
        assert not redis.exists(key), key


def test_heartbeats_older_than_an_hour_are_dropped_ten_a_beat(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    for n in range(12):
        queue._beat(f"old-{n:02}", "worker", {})
    clock.advance(HOUR_MS / 1000 - 1)
    queue._beat("recent", "worker", {})
    assert len(_ids(queue)) == 13  # an hour has not passed for any of them yet
    clock.advance(2)
    queue._beat("new", "sqs", {})
    assert _ids(queue) == ["new", "recent", "old-11", "old-10"]  # ten dropped by this beat
    queue._beat("new", "sqs", {})
    assert _ids(queue) == ["new", "recent"]
    assert raw(client).hlen(queue.keys.consumers) == 2


def test_a_queue_keeps_at_most_a_thousand_consumers(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    redis = raw(client)
    start_ms = clock.now_ms
    # 1,005 written straight to Redis, one a ms: as many beats would leave the same keys.
    redis.zadd(queue.keys.consumers_at, {f"c{n:04}": start_ms + n for n in range(1005)})
    redis.hset(queue.keys.consumers, mapping={f"c{n:04}": "worker|{}" for n in range(1005)})
    clock.advance(10)
    queue._beat("newest", "worker", {})
    # 1,006 kept before the trim: the oldest six go, and no more (bounded work per beat).
    assert redis.zcard(queue.keys.consumers_at) == 1000
    assert redis.hlen(queue.keys.consumers) == 1000
    assert redis.zscore(queue.keys.consumers_at, "c0006") is not None
    assert redis.zscore(queue.keys.consumers_at, "c0005") is None
    assert _ids(queue, 3) == ["newest", "c1004", "c1003"]
    # Far over (written by hand): a beat drops ten at most.
    redis.zadd(queue.keys.consumers_at, {f"d{n:02}": start_ms + 5000 + n for n in range(30)})
    queue._beat("newest", "worker", {})
    assert redis.zcard(queue.keys.consumers_at) == 1020


def test_a_sharded_queue_keeps_its_consumers_under_its_first_shard(redis_client: smq.Client) -> None:
    orders = redis_client.create_queue("orders", shards=3)
    assert orders.shard_names()[0] == "orders"
    orders._beat("a", "worker", {})
    assert _ids(orders) == ["a"]
    assert raw(redis_client).zscore(orders.keys.consumers_at, "a") is not None
    for shard in orders.shard_names()[1:]:
        assert not raw(redis_client).exists(QueueKeys.of(shard).consumers_at)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q: q.consumers(0), "limit"),
        (lambda q: q.consumers(101), "limit"),
        (lambda q: q.consumers("5"), "limit"),
        (lambda q: q._beat("", "worker", {}), "consumer id"),
        (lambda q: q._beat("x" * 201, "worker", {}), "consumer id"),
        (lambda q: q._beat("a", "browser", {}), "kind"),
        (lambda q: q._beat("a", "worker", {"big": "x" * 2048}), "2048 bytes"),
        (lambda q: q._beat("a", "worker", ["not", "a", "mapping"]), "mapping"),
    ],
)
def test_arguments_are_checked_before_redis_is_asked(
    client: smq.Client, call: Callable[[Any], Any], message: str
) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter, match=message):
        call(queue)
    assert queue.consumers() == []


@pytest.mark.parametrize(
    "args",
    [
        ["", "", "worker", "{}", "0"],
        ["", "x" * 201, "worker", "{}", "0"],
        ["", "a", "browser", "{}", "0"],
        ["", "a", "worker", "x" * 2049, "0"],
        ["", "a", "worker", "{}", "yes"],
        ["soon", "a", "worker", "{}", "0"],
    ],
)
def test_the_beat_script_checks_its_arguments_before_any_write(client: smq.Client, args: list[str]) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter):
        client.run("consumer_beat", queue.keys, args, queue="jobs")
    assert not raw(client).exists(queue.keys.consumers_at)


@pytest.mark.parametrize("args", [["", "0"], ["", "101"], ["", "ten"], ["later", "5"]])
def test_the_read_script_checks_its_arguments(client: smq.Client, args: list[str]) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter):
        client.run("consumers", queue.keys, args, queue="jobs")


# -- workers register ------------------------------------------------------------------------


def _workers(queue: smq.Queue) -> list[smq.Consumer]:
    return [c for c in queue.consumers() if c.kind == "worker"]


@pytest.mark.parametrize("mode", ["threads", "async"])
def test_a_running_worker_shows_with_its_info_and_is_forgotten_at_a_graceful_stop(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running], mode: str
) -> None:
    jobs = redis_client.create_queue("jobs")
    release = threading.Event()

    def handle(job: smq.Job) -> None:
        release.wait(20)

    async def handle_async(job: smq.Job) -> None:
        while not release.is_set():
            await asyncio.sleep(0.01)

    handler: Any = handle if mode == "threads" else handle_async
    worker = smq.Worker(redis_client, "jobs", handler, config=smq.WorkerConfig(concurrency=3))
    worker._beat_every = 0.2
    before = time.time()
    run = running(worker)
    (seen,) = wait_for(lambda: _workers(jobs), 10, "the worker's first beat")
    host, pid = socket.gethostname(), os.getpid()
    assert seen.id.startswith(f"{host}:{pid}:") and len(seen.id.rsplit(":", 1)[1]) == 6
    info = dict(seen.info)
    assert before - 1 <= info.pop("started") <= time.time()
    assert info == {
        "host": host,
        "pid": pid,
        "concurrency": 3,
        "mode": mode,
        "held": 0,
        "version": smq.__version__,
    }
    assert seen.age < 5
    # It beats on: the next beats say how many messages it holds.
    jobs.send_batch([smq.SendEntry("a", "one"), smq.SendEntry("b", "two")])
    wait_for(lambda: [c.info["held"] for c in _workers(jobs)] == [2], 10, "a beat with two held")
    release.set()
    run.stop()
    assert jobs.consumers() == []


class _FailingBeats(smq.Queue):
    """A real queue whose first registration beats fail, as during a Redis outage."""

    __slots__ = ("failures",)

    def __init__(self, client: smq.Client, name: str, failures: int) -> None:
        super().__init__(client, name)
        self.failures = failures

    def _beat(self, consumer_id: str, kind: str, info: Any, forget: bool = False) -> None:
        if not forget and self.failures > 0:
            self.failures -= 1
            raise smq.Unavailable("Redis is down (a test's outage)")
        super()._beat(consumer_id, kind, info, forget)


def test_a_failed_beat_is_logged_and_tried_again_and_the_worker_works_on(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running], caplog: pytest.LogCaptureFixture
) -> None:
    jobs = redis_client.create_queue("jobs")
    jobs.send("hello")
    seen: list[str] = []
    worker = smq.Worker(
        redis_client, _FailingBeats(redis_client, "jobs", 3), lambda job: seen.append(job.body)
    )
    worker._beat_every = 0.1
    with caplog.at_level(logging.WARNING, logger="smq.worker"):
        run = running(worker)
        wait_for(lambda: seen == ["hello"], 10, "the message handled")
        wait_for(lambda: _workers(jobs), 10, "a beat that went through")
        run.stop()
    assert "registration heartbeat" in caplog.text and "a test's outage" in caplog.text
    assert "recovered" in caplog.text
    assert jobs.attributes().visible == 0 and jobs.consumers() == []


# -- SQS clients register through smq serve --------------------------------------------------


@pytest.fixture
def fast_beating_server(redis_server: EmbeddedRedis) -> Iterator[Server]:
    """`smq serve` (no authentication) that notes its SQS clients every 0.2 s."""
    server = Server(redis_server.url, "--no-auth", "--consumer-beat-interval", "0.2")
    yield server
    server.stop()


def test_an_sqs_client_that_receives_through_smq_serve_shows_with_its_agent(
    redis_client: smq.Client, fast_beating_server: Server
) -> None:
    jobs = redis_client.create_queue("jobs")
    sqs = json_client(fast_beating_server.url)
    url = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    assert jobs.consumers() == []  # a send does not make a consumer
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    assert [m["Body"] for m in got["Messages"]] == ["hello"]
    (seen,) = wait_for(jobs.consumers, 10, "the server's beat for its SQS client")
    agent = seen.info["agent"]
    assert agent.startswith("Boto3/") and seen.kind == "sqs"
    assert seen.id == f"sqs::{agent}:127.0.0.1"
    assert seen.info["user_agent"].startswith(agent + " ") and len(seen.info["user_agent"]) <= 200
    assert seen.info["access_key"] == "" and seen.info["address"] == "127.0.0.1"
    assert seen.info["receives"] == 1
    assert seen.info["via"] == f"{socket.gethostname()[:100]}:{fast_beating_server.pid}"
    # Receives of an empty queue count too: the client consumes it, there is nothing to take.
    for _ in range(3):
        sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    wait_for(lambda: jobs.consumers()[0].info["receives"] > 1 or None, 10, "a beat of later receives")


def test_a_server_that_stops_notes_the_clients_it_served_since_its_last_beat(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    jobs = redis_client.create_queue("jobs")
    server = Server(redis_server.url, "--no-auth", "--consumer-beat-interval", "3600")
    try:
        sqs = json_client(server.url)
        url = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
        sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
        assert jobs.consumers() == []  # the next beat is an hour away
    finally:
        assert server.stop() == 0  # a graceful stop
    (seen,) = jobs.consumers()
    assert seen.kind == "sqs" and seen.info["receives"] == 1


def test_the_servers_notes_are_bounded_and_one_per_agent_address_key_and_queue(
    redis_client: smq.Client,
) -> None:
    jobs = redis_client.create_queue("jobs")
    noted = SqsConsumers(redis_client)
    for n in range(MAX_NOTED + 5):
        noted.note("jobs", "KEY", f"Boto3/1.{n} md/x", "10.0.0.1")
    noted.note("jobs", "KEY", "Boto3/1.0 md/x", "10.0.0.1")  # counted: it is noted already
    counts = noted.take()
    assert len(counts) == MAX_NOTED and counts[("jobs", "KEY", "Boto3/1.0 md/x", "10.0.0.1")] == 2
    assert noted.take() == {}
    noted.note("jobs", "KEY", "Boto3/1.34.0 md/Botocore#1.34.0", "10.0.0.1")
    noted.note("jobs", "KEY", "Boto3/1.34.0 md/Botocore#1.34.1", "10.0.0.1")  # the same agent
    noted.note("jobs", "KEY", "aws-cli/2.15.0 md/x", "10.0.0.1")
    noted.note("jobs", "OTHER", "", "10.0.0.2")
    noted.note("gone", "KEY", "Boto3/1.34.0", "10.0.0.1")  # no such queue: skipped
    noted.flush(noted.take())
    by_id = {c.id: c.info for c in jobs.consumers()}
    assert set(by_id) == {
        "sqs:KEY:Boto3/1.34.0:10.0.0.1",
        "sqs:KEY:aws-cli/2.15.0:10.0.0.1",
        "sqs:OTHER:unknown:10.0.0.2",
    }
    assert by_id["sqs:KEY:Boto3/1.34.0:10.0.0.1"]["receives"] == 2
    assert by_id["sqs:OTHER:unknown:10.0.0.2"]["agent"] == "unknown"  # no User-Agent
