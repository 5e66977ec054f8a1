"""``smq serve`` runs the scripts of its hot actions from the event loop, on a connection of its own.

A real ``smq serve`` on a real Redis: the sends, receives, deletes, changes
of visibility and attribute reads of many clients go over the event loop's
one pipelined connection (named ``smq-serve-loop`` in ``CLIENT LIST``), not
through the thread pool; a flushed script cache, a Redis that stops answering
and requests given up half-way leave every reply matched to its own call.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
from botocore.exceptions import ClientError

from conftest import ACL_PASSWORD, acl_url
from http_support import Server, json_client
from smq.client._loop_scripts import CONNECTION_NAME
from smq.embedded import EmbeddedRedis
from smq.operations._access import acl_rules


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def serve(redis_server: EmbeddedRedis) -> Iterator[Server]:
    server = Server(redis_server.url, "--no-auth")
    yield server
    server.stop()


def _connections(redis_server: EmbeddedRedis) -> list[dict[str, str]]:
    with redis_server.client() as redis:
        return list(redis.client_list())


def _commands(connection: dict[str, str]) -> int:
    return int(connection["tot-cmds"])


def test_the_hot_actions_go_over_the_event_loops_connection(
    redis_server: EmbeddedRedis, serve: Server
) -> None:
    api = json_client(serve.url)
    url = api.create_queue(QueueName="loop")["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="warm")  # the first script call checks Redis (threads)

    def one_round(i: int) -> None:
        api.send_message_batch(
            QueueUrl=url, Entries=[{"Id": str(n), "MessageBody": f"{i}-{n}"} for n in range(10)]
        )
        messages = api.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        receipt = messages[0]["ReceiptHandle"]
        api.change_message_visibility(QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=0)
        api.delete_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)],
        )
        api.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])

    one_round(-1)  # each script's first call on the loop's connection loads it (NOSCRIPT: in a thread)
    before = _connections(redis_server)
    if "tot-cmds" not in before[0]:
        pytest.skip("this Redis has no tot-cmds in CLIENT LIST (Redis 7.2+)")
    loop = [c for c in before if c.get("name") == CONNECTION_NAME]
    assert len(loop) == 1, before
    rounds = 20
    for i in range(rounds):
        one_round(i)
    after = {c["id"]: c for c in _connections(redis_server)}
    ran_on_loop = _commands(after[loop[0]["id"]]) - _commands(loop[0])
    assert ran_on_loop >= 5 * rounds
    others = {c["id"]: _commands(c) for c in before if c["id"] != loop[0]["id"]}
    # tot-cmds counts the commands a script calls too: one hot action sent elsewhere would add 5
    # or more each round, 100 or more in all. The others: the long-poll listener, the threads'
    # (a look for move tasks each second, the eviction policy's INFO memory at most each second
    # before writes, and, when their time falls in the window, the server's own history sample
    # of the queue, every 10 s, and its note of consumers, every 15 s: some 35 commands).
    elsewhere = {i: (after[i]["cmd"], _commands(after[i]) - n) for i, n in others.items() if i in after}
    assert sum(n for _, n in elsewhere.values()) < 3 * rounds, elsewhere
    counts = api.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    # Each round sends 10 and deletes the 10 it received: "warm" or one other is left.
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == (
        "1",
        "0",
    )


def test_a_flushed_script_cache_is_loaded_again(redis_server: EmbeddedRedis, serve: Server) -> None:
    api = json_client(serve.url)
    url = api.create_queue(QueueName="flushed")["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="before")
    with redis_server.client() as redis:
        redis.script_flush()
    api.send_message(QueueUrl=url, MessageBody="after")  # NOSCRIPT on the loop: loaded in a thread
    bodies = sorted(m["Body"] for m in api.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"])
    assert bodies == ["after", "before"]
    # Loaded again, the scripts run on the loop's connection again.
    (loop,) = [c for c in _connections(redis_server) if c.get("name") == CONNECTION_NAME]
    api.send_message(QueueUrl=url, MessageBody="later")
    (again,) = [c for c in _connections(redis_server) if c.get("name") == CONNECTION_NAME]
    assert again["id"] == loop["id"] and _commands(again) > _commands(loop)


def test_many_clients_at_once_each_get_their_own_replies(serve: Server) -> None:
    """Concurrent requests share the loop's connection: every reply must be its own call's."""
    api = json_client(serve.url, max_pool_connections=20)
    urls = [api.create_queue(QueueName=f"q{n}")["QueueUrl"] for n in range(8)]
    errors: list[str] = []
    deleted = dict.fromkeys(urls, 0)

    def client(url: str) -> None:
        name = url.rsplit("/", 1)[1]
        try:
            for i in range(25):
                api.send_message_batch(
                    QueueUrl=url, Entries=[{"Id": str(n), "MessageBody": f"{name}:{i}:{n}"} for n in range(5)]
                )
                got = api.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
                errors.extend(
                    f"{name} received {m['Body']}" for m in got if not m["Body"].startswith(f"{name}:")
                )
                if got:
                    entries = [{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(got)]
                    reply = api.delete_message_batch(QueueUrl=url, Entries=entries)
                    deleted[url] += len(reply["Successful"])
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(f"{name}: {error!r}")

    threads = [threading.Thread(target=client, args=(url,)) for url in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    for url in urls:
        counts = api.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        left = int(counts["ApproximateNumberOfMessages"]) + int(
            counts["ApproximateNumberOfMessagesNotVisible"]
        )
        assert (left, deleted[url]) == (125 - deleted[url], deleted[url])
        assert deleted[url] > 0


def _send_raw(url: str, queue_url: str, body: str, timeout: float) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url,
        data=json.dumps({"QueueUrl": queue_url, "MessageBody": body}).encode(),
        headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_redis_that_stops_answering_is_an_unknown_outcome_then_the_server_goes_on(
    redis_server: EmbeddedRedis, serve: Server
) -> None:
    api = json_client(serve.url)
    url = api.create_queue(QueueName="stalled")["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="first")
    (stalled_connection,) = [c for c in _connections(redis_server) if c.get("name") == CONNECTION_NAME]
    assert redis_server.process is not None
    pid = redis_server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        # Past the client's socket timeout (10 s): the script was written, so its outcome is unknown.
        status, reply = _send_raw(serve.url, url, "stalled", timeout=30)
        # Still stalled: a new connection's set-up waits the same timeout, once for every request
        # waiting on it (not one after the other); nothing was written, so they did not run.
        started = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            later = list(pool.map(lambda n: _send_raw(serve.url, url, f"unsent-{n}", timeout=60), range(4)))
        waited = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    assert (status, reply["__type"].rsplit("#", 1)[-1]) == (500, "InternalFailure"), reply
    assert "may or may not have been made" in reply["message"], reply  # the detail is in the log
    assert [(code, r["__type"].rsplit("#", 1)[-1]) for code, r in later] == [(503, "ServiceUnavailable")] * 4
    # 10 s for the queue's layout (its 10 s cache ran out meanwhile: read in threads, at once),
    # 10 s for the connection; one after the other per request would be 40 s and more.
    assert waited < 28, waited
    # Afterwards each call gets its own reply again, on a new connection of the loop (the first
    # reads the eviction policy again first, as after every Redis error: in a thread).
    deadline = time.monotonic() + 10
    while True:
        try:
            sent = api.send_message(QueueUrl=url, MessageBody="after")
            break
        except ClientError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    api.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    (connection,) = [c for c in _connections(redis_server) if c.get("name") == CONNECTION_NAME]
    assert connection["id"] != stalled_connection["id"]
    bodies = set()
    for _ in range(3):
        for message in api.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            bodies.add(message["Body"])
            api.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    # The stalled send ran once Redis went on: it may be there (that is what unknown means).
    assert {"first", "after"} <= bodies <= {"first", "after", "stalled"}
    assert sent["MessageId"]
    assert "Traceback" not in serve.logs()


def test_a_request_given_up_while_its_script_waits_leaves_every_reply_with_its_call(
    redis_server: EmbeddedRedis, serve: Server
) -> None:
    """A client hangs up while its script waits in Redis: it runs, the next call gets its own reply."""
    api = json_client(serve.url)
    given_up = api.create_queue(QueueName="given-up")["QueueUrl"]
    kept = api.create_queue(QueueName="kept")["QueueUrl"]
    for url in (given_up, kept):
        api.send_message(QueueUrl=url, MessageBody="warm")
        api.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    with redis_server.client() as admin:
        admin.execute_command("CLIENT", "PAUSE", 1500, "WRITE")  # scripts wait; the loop's writes queue up
    body = json.dumps({"QueueUrl": given_up, "MessageBody": "sent by a client that left"}).encode()
    host, port = serve.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as leaving:
        leaving.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
            b"X-Amz-Target: AmazonSQS.SendMessage\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        time.sleep(0.3)  # its script is written, and waits behind the pause
    # The connection closed: the server gives that request up. This call's script waits behind it.
    counts = api.get_queue_attributes(QueueUrl=kept, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == (
        "1",
        "0",
    )
    assert counts["QueueArn"].endswith(":kept")
    # The given-up send ran once Redis went on (the client was not told: at least once).
    counts = api.get_queue_attributes(QueueUrl=given_up, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == "2"
    deadline = time.monotonic() + 5
    while '"status": 499' not in serve.logs():
        assert time.monotonic() < deadline, serve.logs()[-2000:]
        time.sleep(0.05)
    assert "Traceback" not in serve.logs()


@pytest.mark.parametrize("case", ["acl-user", "db-2"])
def test_the_loops_connection_signs_in_as_the_url_says(tmp_path: Path, case: str) -> None:
    """AUTH with the URL's user and password, SELECT of its database: as the threads' connections."""
    config = [f"user smq on >{ACL_PASSWORD} {acl_rules()}"]
    with EmbeddedRedis(tmp_path / "redis", config=config) as redis_server:
        url = acl_url(redis_server) if case == "acl-user" else f"unix://{redis_server.socket_path}?db=2"
        server = Server(url, "--no-auth")
        try:
            api = json_client(server.url)
            queue_url = api.create_queue(QueueName="signed")["QueueUrl"]
            for body in ("one", "two", "three"):
                api.send_message(QueueUrl=queue_url, MessageBody=body)
            got = api.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
            assert sorted(m["Body"] for m in got) == ["one", "three", "two"]
            with redis_server.client() as admin:
                clients = list(admin.client_list())
                loop = [c for c in clients if c.get("name") == CONNECTION_NAME]
                assert len(loop) == 1, clients
                expected = ("smq", "0") if case == "acl-user" else ("default", "2")
                assert (loop[0]["user"], loop[0]["db"]) == expected
                assert loop[0]["cmd"] == "evalsha"
                database = 0 if case == "acl-user" else 2
                assert admin.execute_command("SELECT", database) and admin.exists("smq:{signed}:meta")
        finally:
            server.stop()
        assert "Traceback" not in server.logs()


@pytest.mark.cluster
def test_on_a_redis_cluster_each_primary_gets_a_connection_of_the_loop(redis_cluster: Any) -> None:
    """Scripts go to the node serving their queue's slot, over the loop's connection to that node."""
    server = Server(redis_cluster.url, "--cluster", "--no-auth")
    try:
        api = json_client(server.url)
        urls = [api.create_queue(QueueName=f"loop-spread-{n}")["QueueUrl"] for n in range(12)]
        for url in urls:
            api.send_message_batch(
                QueueUrl=url, Entries=[{"Id": str(n), "MessageBody": url} for n in range(3)]
            )
        for _ in range(2):  # the second round: every script loaded on every node
            for url in urls:
                got = api.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)[
                    "Messages"
                ]
                assert {m["Body"] for m in got} == {url}
        for url in urls:
            got = api.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
            assert len(got) == 3
            done = api.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(got)],
            )
            assert len(done["Successful"]) == 3
            attributes = api.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            assert attributes["ApproximateNumberOfMessages"] == "0"
        named = {}
        for node in redis_cluster.nodes:
            with redis.Redis(host="127.0.0.1", port=node.port) as admin:
                if admin.info("replication")["role"] != "master":
                    continue
                named[node.port] = [c for c in admin.client_list() if c.get("name") == CONNECTION_NAME]
        assert len(named) >= 3 and all(len(found) == 1 for found in named.values()), named
        assert all(found[0]["cmd"] == "evalsha" for found in named.values()), named
    finally:
        server.stop()
    assert "Traceback" not in server.logs()
