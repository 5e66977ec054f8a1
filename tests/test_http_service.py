"""The service around the actions: authentication, many processes, many long polls,
health, graceful stop. Every server here is a real `smq serve` subprocess."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import botocore.exceptions
import pytest

import smq
from http_support import ACCOUNT, BIN, KEY_ID, SECRET, Server, json_client, query_client
from smq.embedded import EmbeddedRedis


def _raw(
    url: str, path: str = "/", body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("POST" if body else "GET", path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _json_request(url: str, action: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, body = _raw(
        url,
        body=json.dumps(params).encode(),
        headers={"X-Amz-Target": f"AmazonSQS.{action}", "Content-Type": "application/x-amz-json-1.0"},
    )
    return status, json.loads(body)


# -- authentication ---------------------------------------------------------------


@pytest.fixture
def signed_server(http_redis: EmbeddedRedis, core: smq.Client) -> Iterator[Server]:
    server = Server(http_redis.url, "--access-key", f"{KEY_ID}:{SECRET}")
    yield server
    server.stop()


def test_requests_signed_with_a_configured_key_are_served_on_both_protocols(signed_server: Server) -> None:
    url = json_client(signed_server.url).create_queue(QueueName="signed")["QueueUrl"]
    query_client(signed_server.url).send_message(QueueUrl=url, MessageBody="hello")
    (message,) = json_client(signed_server.url).receive_message(QueueUrl=url)["Messages"]
    assert message["Body"] == "hello"


def test_a_wrong_secret_is_refused_and_does_nothing(signed_server: Server, core: smq.Client) -> None:
    wrong = json_client(signed_server.url)
    wrong._request_signer._credentials = botocore.credentials.Credentials(KEY_ID, "not-the-secret")
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        wrong.create_queue(QueueName="forged")
    assert caught.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert not core.queue_exists("forged")


def test_an_unknown_access_key_is_refused(signed_server: Server, core: smq.Client) -> None:
    stranger = json_client(signed_server.url)
    stranger._request_signer._credentials = botocore.credentials.Credentials("AKIDSTRANGER", SECRET)
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        stranger.create_queue(QueueName="stranger")
    assert caught.value.response["Error"]["Code"] == "InvalidClientTokenId"
    assert not core.queue_exists("stranger")


def test_an_unsigned_request_is_refused_and_does_nothing(signed_server: Server, core: smq.Client) -> None:
    status, body = _json_request(signed_server.url, "CreateQueue", {"QueueName": "unsigned"})
    assert status == 403
    assert body["__type"].endswith("#MissingAuthenticationToken")
    status, xml = _raw(signed_server.url, body=b"Action=CreateQueue&QueueName=unsigned")
    assert status == 403 and b"<Code>MissingAuthenticationToken</Code>" in xml
    assert not core.queue_exists("unsigned")


def test_a_get_naming_no_operation_is_404_before_any_signature_check(signed_server: Server) -> None:
    # As SQS's front answers a browser or a probe: nothing to authenticate, nothing done.
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{signed_server.url}/{ACCOUNT}/jobs", timeout=10)
    assert caught.value.code == 404
    assert caught.value.read().endswith(b"<UnknownOperationException/>")


def test_serving_beyond_loopback_without_keys_needs_an_explicit_opt_out(http_redis: EmbeddedRedis) -> None:
    done = subprocess.run(
        [str(BIN / "smq"), "serve", "--redis-url", http_redis.url, "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert "--access-key" in done.stderr and "Traceback" not in done.stderr


# -- many processes ---------------------------------------------------------------


def test_two_processes_serve_one_queue_and_killing_one_loses_nothing(
    http_redis: EmbeddedRedis, core: smq.Client
) -> None:
    core.create_queue("shared", visibility_timeout=2)
    first, second = Server(http_redis.url, "--no-auth"), Server(http_redis.url, "--no-auth")
    try:
        clients = [json_client(first.url), json_client(second.url)]
        url = clients[0].get_queue_url(QueueName="shared")["QueueUrl"]
        sent: set[str] = set()
        for n in range(200):  # alternate between the processes
            body = f"m{n}"
            clients[n % 2].send_message(QueueUrl=url, MessageBody=body)
            sent.add(body)
        received: set[str] = set()
        # Receive through the second process without deleting, then kill it:
        # what it handed out comes back when the timeout runs out.
        held = clients[1].receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        second.stop(signal.SIGKILL)
        with pytest.raises(botocore.exceptions.EndpointConnectionError):
            clients[1].send_message(QueueUrl=url, MessageBody="to a dead process")
        late = {"late"}
        clients[0].send_message(QueueUrl=url, MessageBody="late")
        deadline = time.monotonic() + 30
        while received != sent | late and time.monotonic() < deadline:
            messages = clients[0].receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            for message in messages.get("Messages", []):
                received.add(message["Body"])
                clients[0].delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        assert received == sent | late
        assert {m["Body"] for m in held} <= received
        info = core.get_queue("shared").attributes()
        assert (info.visible, info.in_flight) == (0, 0)
    finally:
        first.stop()
        second.stop()


# -- long polls at scale ----------------------------------------------------------


def _redis_clients(server: EmbeddedRedis) -> int:
    with server.client() as admin:
        return len(admin.client_list())


async def _long_polls(url: str, queue_url: str, count: int, ready: threading.Event) -> list[list[str]]:
    connector = aiohttp.TCPConnector(limit=0)
    headers = {"X-Amz-Target": "AmazonSQS.ReceiveMessage", "Content-Type": "application/x-amz-json-1.0"}
    body = json.dumps({"QueueUrl": queue_url, "WaitTimeSeconds": 20, "MaxNumberOfMessages": 1})
    async with aiohttp.ClientSession(connector=connector) as session:

        async def poll() -> list[str]:
            async with session.post(url, data=body, headers=headers) as response:
                assert response.status == 200, await response.text()
                reply = json.loads(await response.read())
                return [m["Body"] for m in reply.get("Messages", [])]

        tasks = [asyncio.create_task(poll()) for _ in range(count)]
        await asyncio.sleep(0)
        ready.set()
        return await asyncio.gather(*tasks)


@pytest.mark.slow
def test_one_process_holds_a_thousand_long_polls_on_a_few_redis_connections(
    http_redis: EmbeddedRedis, core: smq.Client
) -> None:
    core.create_queue("polled")
    server = Server(http_redis.url, "--no-auth", "--no-access-log")
    try:
        queue_url = json_client(server.url).get_queue_url(QueueName="polled")["QueueUrl"]
        before = _redis_clients(http_redis)
        ready = threading.Event()
        results: list[list[list[str]]] = []
        runner = threading.Thread(
            target=lambda: results.append(asyncio.run(_long_polls(server.url, queue_url, 1000, ready)))
        )
        runner.start()
        ready.wait(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status, state = _raw(server.url, "/ready")
            if json.loads(state)["in_flight"] >= 1000:
                break
            time.sleep(0.1)
        assert json.loads(state)["in_flight"] >= 1000
        time.sleep(0.5)  # every poll past its first receive, parked
        held = _redis_clients(http_redis) - before
        # Each of the 16 threads may hold a script connection and a pooled one (reads such as
        # /ready's), plus the listener's: far fewer than one per poll.
        assert held <= 2 * 16 + 4, f"{held} Redis connections for 1,000 waiting polls"
        # 1,000 sends wake 1,000 polls, each with its own message.
        sender = json_client(server.url)
        for start in range(0, 1000, 10):
            entries = [{"Id": f"e{n}", "MessageBody": f"m{start + n}"} for n in range(10)]
            sender.send_message_batch(QueueUrl=queue_url, Entries=entries)
        runner.join(60)
        assert not runner.is_alive()
        bodies = [body for result in results[0] for body in result]
        assert sorted(bodies) == sorted(f"m{n}" for n in range(1000))
    finally:
        server.stop()


# -- health and stopping ----------------------------------------------------------


def test_health_and_readiness_follow_redis(tmp_path: Path) -> None:
    redis_server = EmbeddedRedis(tmp_path / "redis").start()
    server = Server(redis_server.url, "--no-auth")
    try:
        assert _raw(server.url, "/health")[0] == 200
        assert _raw(server.url, "/ready")[0] == 200
        redis_server.stop()
        status, body = _raw(server.url, "/ready")
        assert status == 503 and json.loads(body) == {
            "status": "not ready",
            "reason": "Redis does not answer",
        }
        assert _raw(server.url, "/health")[0] == 200
        # A request that needs Redis gets an SQS error, never a hang or a crash.
        status, error = _json_request(server.url, "ListQueues", {})
        assert status == 503 and error["__type"].endswith("#ServiceUnavailable")
    finally:
        server.stop()
        redis_server.stop()


def test_a_graceful_stop_ends_long_polls_empty_and_exits_cleanly(
    http_redis: EmbeddedRedis, core: smq.Client
) -> None:
    core.create_queue("stopping")
    server = Server(http_redis.url, "--no-auth")
    client = json_client(server.url, read_timeout=30)
    url = client.get_queue_url(QueueName="stopping")["QueueUrl"]
    replies: list[Any] = []
    poll = threading.Thread(
        target=lambda: replies.append(client.receive_message(QueueUrl=url, WaitTimeSeconds=20))
    )
    poll.start()
    deadline = time.monotonic() + 10
    while json.loads(_raw(server.url, "/ready")[1]).get("in_flight", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    assert server.stop(signal.SIGTERM) == 0
    poll.join(10)
    assert replies and replies[0]["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert "Messages" not in replies[0]
    assert time.monotonic() - started < 10
    assert "stopping" in server.logs()


def test_each_request_is_logged_as_one_json_line(sqs_server: Server, sqs: Any) -> None:
    name = f"logged-{uuid.uuid4().hex[:8]}"
    sqs.create_queue(QueueName=name)
    with pytest.raises(botocore.exceptions.ClientError):
        sqs.get_queue_url(QueueName="missing-" + name)
    lines = [json.loads(line) for line in sqs_server.logs().splitlines() if line.startswith("{")]
    actions = [(line["action"], line["status"], line["error"]) for line in lines]
    assert ("CreateQueue", 200, None) in actions
    assert ("GetQueueUrl", 400, "QueueDoesNotExist") in actions
    assert all({"time", "request_id", "remote", "protocol", "ms"} <= set(line) for line in lines)


@pytest.mark.cluster
def test_serves_queues_on_a_redis_cluster(redis_cluster: Any) -> None:
    from redis.cluster import RedisCluster

    admin = smq.Client(settings=smq.Settings(url=redis_cluster.url, cluster=True))
    admin._redis.flushall(target_nodes=RedisCluster.PRIMARIES)
    admin.close()
    server = Server(redis_cluster.url, "--cluster", "--no-auth")
    try:
        sqs = json_client(server.url)
        urls = [sqs.create_queue(QueueName=f"spread-{n}")["QueueUrl"] for n in range(6)]
        dead = sqs.create_queue(QueueName="spread-dlq")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sqs.set_queue_attributes(
            QueueUrl=urls[0],
            Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 1})},
        )
        for url in urls:
            sqs.send_message(QueueUrl=url, MessageBody=url)
        receipts = {}
        for url in urls:
            (message,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
            assert message["Body"] == url
            receipts[url] = message["ReceiptHandle"]
        sqs.delete_message(QueueUrl=urls[1], ReceiptHandle=receipts[urls[1]])
        # maxReceiveCount 1: the next receive moves it across slots to the dead-letter queue.
        assert "Messages" not in sqs.receive_message(QueueUrl=urls[0])
        (moved,) = sqs.receive_message(QueueUrl=dead, WaitTimeSeconds=5)["Messages"]
        assert moved["Body"] == urls[0]
        # A long poll on a cluster wakes on a send.
        started = time.monotonic()
        timer = threading.Timer(0.5, lambda: sqs.send_message(QueueUrl=urls[1], MessageBody="late"))
        timer.start()
        replies = sqs.receive_message(QueueUrl=urls[1], WaitTimeSeconds=10, VisibilityTimeout=30)
        timer.join()
        assert [m["Body"] for m in replies["Messages"]] == ["late"]
        assert 0.4 < time.monotonic() - started < 5
    finally:
        server.stop()


# -- the command --------------------------------------------------------------------


def test_serve_without_a_redis_url_runs_on_an_embedded_redis(tmp_path: Path) -> None:
    command = [str(BIN / "smq"), "serve", "--port", "0", "--data-dir", str(tmp_path / "data")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "listening on http://127.0.0.1:" in line
        url = line.split("listening on", 1)[1].strip()
        sqs = json_client(url)
        queue = sqs.create_queue(QueueName="embedded")["QueueUrl"]
        sqs.send_message(QueueUrl=queue, MessageBody="kept")
        assert (tmp_path / "data" / "redis").is_dir()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    assert not list((tmp_path / "data" / "redis").glob("*.sock"))  # the embedded Redis stopped too


def test_serve_reads_the_redis_url_from_the_environment(http_redis: EmbeddedRedis, core: smq.Client) -> None:
    command = [str(BIN / "smq"), "serve", "--port", "0", "--no-auth"]
    env = {**os.environ, "SMQ_REDIS_URL": http_redis.url}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split("listening on", 1)[1].strip()
        json_client(url).create_queue(QueueName="from-env")
        assert core.queue_exists("from-env")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def test_serve_on_a_port_in_use_fails_with_one_line(sqs_server: Server, http_redis: EmbeddedRedis) -> None:
    port = str(urlsplit(sqs_server.url).port)
    done = subprocess.run(
        [str(BIN / "smq"), "serve", "--redis-url", http_redis.url, "--port", port],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert "cannot listen on" in done.stderr and "Traceback" not in done.stderr


def test_a_long_poll_whose_client_hangs_up_stops_waiting_and_takes_no_message(
    sqs_server: Server, sqs: Any, core: smq.Client
) -> None:
    url = sqs.create_queue(QueueName="hang-up")["QueueUrl"]
    parts = urlsplit(sqs_server.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    body = json.dumps({"QueueUrl": url, "WaitTimeSeconds": 20}).encode()
    headers = {"X-Amz-Target": "AmazonSQS.ReceiveMessage", "Content-Type": "application/x-amz-json-1.0"}
    connection.request("POST", "/", body=body, headers=headers)
    deadline = time.monotonic() + 10
    while json.loads(_raw(sqs_server.url, "/ready")[1])["in_flight"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    connection.close()  # hang up while the poll waits
    deadline = time.monotonic() + 10
    while json.loads(_raw(sqs_server.url, "/ready")[1])["in_flight"] > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(_raw(sqs_server.url, "/ready")[1])["in_flight"] == 0
    sqs.send_message(QueueUrl=url, MessageBody="for a live client")
    (message,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert message["Body"] == "for a live client"
    assert '"status": 499' in sqs_server.logs()
