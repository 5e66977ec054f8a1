"""Redis Sentinel: a real primary, two replicas and three Sentinels (started here);
clients find the primary through the Sentinels and follow a failover after the
primary is killed -9, without a restart: script calls, long polls, `smq serve`."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aio_support import Blocked
from botocore.exceptions import ClientError

import smq
import smq.aio
from http_support import BIN, Server, json_client
from smq.connection._sentinel import parse_sentinel_url, sentinel_url
from smq.embedded import EmbeddedSentinel


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[EmbeddedSentinel]:
    # Sentinels that call a primary down after 1 s (production wants more, see the operations
    # guide): the failovers of these tests take seconds, not tens of them.
    with EmbeddedSentinel(tmp_path / "sentinel", down_after_ms=1000) as deployment:
        yield deployment


def kill_primary(deployment: EmbeddedSentinel) -> int:
    """Make the replicas hold all the primary has (WAIT), kill -9 it, and wait until the
    Sentinels name another; return the new primary's port."""
    old = deployment.primary_port()
    assert old is not None
    node = deployment.node_at(old)
    with node.client() as primary:
        assert primary.execute_command("WAIT", len(deployment.nodes) - 1, 5000) == len(deployment.nodes) - 1
    assert node.process is not None
    node.process.kill()
    node.process.wait()
    return int(eventually(lambda: (port := deployment.primary_port()) != old and port, 30, "a new primary"))


def eventually(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except smq.SmqError:
            value = None  # the old primary is gone and the new one not yet named: try again
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.1)


@pytest.mark.parametrize("kind", ["sync", "aio"])
def test_a_client_follows_a_failover_without_a_restart(sentinel: EmbeddedSentinel, kind: str) -> None:
    # "aio": the asyncio client (behind the sync interface), whose calls take its threads here.
    with smq.Client(sentinel.url) as made, contextlib.ExitStack() as stack:
        client: Any = made
        if kind == "aio":
            client = Blocked(smq.aio.AsyncClient(client=made))
            stack.callback(client.close)
        queue = client.create_queue("jobs", visibility_timeout=60)
        queue.send("before")
        (held,) = queue.receive(1)
        new = kill_primary(sentinel)
        # The first calls may find the old primary gone, or the new one not yet with all the
        # replicas the Sentinels count (OutcomeUnknown: the send may have landed); then they
        # reach the new one.
        eventually(lambda: queue.send("after") is not None, 30, "send after the failover")
        info = queue.attributes()
        assert info.visible >= 1 and info.in_flight == 1
        queue.delete(held)  # the receipt of the old primary is good on the new one
        assert {m.body for m in queue.receive(10)} == {"after"}
        with sentinel.node_at(new).client() as primary:
            assert primary.info("replication")["role"] == "master"


@pytest.mark.parametrize("kind", ["sync", "aio"])
def test_a_long_poll_is_woken_through_the_new_primary(sentinel: EmbeddedSentinel, kind: str) -> None:
    with (
        smq.Client(sentinel.url) as made,
        smq.Client(sentinel.url) as producer,
        contextlib.ExitStack() as stack,
    ):
        client: Any = made
        if kind == "aio":  # its long poll parks on an event loop; the waker is the same
            client = Blocked(smq.aio.AsyncClient(client=made))
            stack.callback(client.close)
        queue = client.create_queue("jobs")
        assert queue.receive(1, wait_time_seconds=0) == []
        kill_primary(sentinel)
        eventually(lambda: producer.get_queue("jobs").send("warm up") is not None, 30, "a send")
        while queue.receive(10):  # take the warm-up messages (an unknown outcome may have landed)
            pass
        got: list[list[smq.Message]] = []
        waiting = threading.Thread(target=lambda: got.append(queue.receive(1, wait_time_seconds=20)))
        started = time.monotonic()
        waiting.start()
        time.sleep(1)
        producer.get_queue("jobs").send("wake")
        waiting.join(30)
        assert [m.body for m in got[0]] == ["wake"]
        assert time.monotonic() - started < 10, "the poll was not woken: it waited out its 20 s"


def test_smq_serve_keeps_serving_through_a_failover(sentinel: EmbeddedSentinel) -> None:
    server = Server(sentinel.url, "--no-auth")
    try:
        sqs = json_client(server.url)
        url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="before")
        kill_primary(sentinel)
        eventually(lambda: _sent_over_http(sqs, url, "after"), 30, "a send over HTTP")
        bodies = sorted(
            m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        )
        assert sorted(set(bodies)) == ["after", "before"]  # a 500 (outcome unknown) may have landed
    finally:
        server.stop()


def _sent_over_http(sqs: Any, url: str, body: str) -> bool:
    """Whether a send was acknowledged; a 503 (no primary yet) or 500 (cut off) is not."""
    try:
        sqs.send_message(QueueUrl=url, MessageBody=body)
    except ClientError as error:
        if error.response["ResponseMetadata"]["HTTPStatusCode"] in (500, 503):
            return False
        raise
    return True


def test_sentinel_urls_name_what_is_wrong() -> None:
    target = parse_sentinel_url("redis+sentinel://smq:p%40ss@h1:26380,[::1],h3/orders/2?sentinel_password=s")
    assert target.sentinels == (("h1", 26380), ("::1", 26379), ("h3", 26379))
    assert (target.service, target.db, target.username, target.password) == ("orders", 2, "smq", "p@ss")
    assert target.sentinel_password == "s" and not target.tls
    assert parse_sentinel_url("rediss+sentinel://h1/orders").tls
    for url, message in [
        ("redis+sentinel://h1", "names its service after the hosts"),
        ("redis+sentinel://h1:0/orders", "'h1:0' is not host:port"),
        ("redis+sentinel://h1:x/orders", "'h1:x' is not host:port"),
        ("redis+sentinel://h1/orders/one", "must be a number, not 'one'"),
        ("redis+sentinel://h1/orders?timeout=1", "unknown Sentinel URL option 'timeout'"),
        ("redis://h1/orders", "not a Sentinel URL"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_sentinel_url(url)
    assert sentinel_url(["h1:26379", "h2:26380"], "orders") == "redis+sentinel://h1:26379,h2:26380/orders"
    with pytest.raises(ValueError, match="a primary and replicas, not a Cluster"):
        smq.Client(settings=smq.Settings(url="redis+sentinel://h1/orders", cluster=True)).list_queues()


def test_the_command_line_takes_sentinels_as_options_or_environment(sentinel: EmbeddedSentinel) -> None:
    target = parse_sentinel_url(sentinel.url)
    addresses = [f"{host}:{port}" for host, port in target.sentinels]
    options = [arg for address in addresses for arg in ("--sentinel", address)]
    created = smq_command("queue", "create", "jobs", *options, "--sentinel-service", target.service)
    assert created.returncode == 0, created.stderr
    env = {"SMQ_SENTINELS": ",".join(addresses), "SMQ_SENTINEL_SERVICE": target.service}
    listed = smq_command("queue", "list", env=env)
    assert listed.returncode == 0 and "jobs" in listed.stdout, listed.stderr
    wrong = smq_command("queue", "list", "--sentinel", addresses[0], "--redis-url", "redis://127.0.0.1:1")
    assert wrong.returncode != 0
    assert wrong.stderr.strip().splitlines() == [
        "smq: --sentinel and --redis-url exclude each other (a redis+sentinel:// URL may name both)"
    ]


def smq_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "smq"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_a_replica_refuses_writes_as_unavailable_not_as_unknown(sentinel: EmbeddedSentinel) -> None:
    # A node demoted by a failover answers READONLY: the script ran nothing, so it is safe to retry.
    primary_port = sentinel.primary_port()
    replica = next(node for node in sentinel.nodes if node.port != primary_port)
    with smq.Client(sentinel.url) as client:
        client.create_queue("jobs")
    with smq.Client(replica.url) as client:
        with pytest.raises(smq.RedisReadOnly, match="did not run: the Redis node is a read-only replica"):
            client.get_queue("jobs").send("to a replica")
