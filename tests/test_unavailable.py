"""Redis down: a call that surely did not run is ``Unavailable`` (HTTP 503), not ``OutcomeUnknown``.

A real Redis is stopped and started again under a client, a real `smq serve`
and a producer under load. Calls made while it is down never ran (no
connection), so they must say so: ``smq.Unavailable`` in Python, 503
ServiceUnavailable over HTTP (which SDKs retry). ``OutcomeUnknown`` (500) is
kept for a connection that broke after the script was sent.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    ResponseError,
    TryAgainError,
)

import smq
from http_support import Server, http_get, json_client, query_client
from smq.connection._redis_errors import refused, reply_error
from smq.embedded import EmbeddedRedis
from smq.server._errors import UNAVAILABLE


@pytest.fixture
def redis_dir(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path / "redis", appendfsync="always").start()
    yield server
    server.stop()


def _core_calls(queue: smq.Queue, receipt: str) -> dict[str, Callable[[], Any]]:
    return {
        "send": lambda: queue.send("x"),
        "send_batch": lambda: queue.send_batch([smq.SendEntry("a", "x")]),
        "receive": lambda: queue.receive(1),
        "delete": lambda: queue.delete(receipt),
        "change_visibility": lambda: queue.change_visibility(receipt, 5),
        "attributes": lambda: queue.attributes(),
        "purge": lambda: queue.purge(),
    }


def test_calls_while_redis_is_down_are_unavailable_and_work_again_after(redis_dir: EmbeddedRedis) -> None:
    client = smq.Client(redis_dir.url)
    queue = client.create_queue("jobs")
    queue.send("kept")
    (held,) = queue.receive(1, visibility_timeout=300)
    redis_dir.stop()
    for name, call in _core_calls(queue, held.receipt_handle).items():
        with pytest.raises(smq.Unavailable):
            call()  # refused as not run, whatever the call
        assert name
    with pytest.raises(smq.Unavailable):
        client.list_queues()
    redis_dir.start()
    assert queue.attributes().in_flight == 1  # nothing was lost or done by the refused calls
    queue.change_visibility(held.receipt_handle, 0)
    (again,) = queue.receive(1)
    assert again.body == "kept"
    assert queue.delete(again.receipt_handle)
    client.close()


def test_a_producer_under_load_sees_unavailable_while_redis_is_dead_and_loses_no_acknowledged_send(
    redis_dir: EmbeddedRedis,
) -> None:
    client = smq.Client(redis_dir.url)
    queue = client.create_queue("jobs")
    acknowledged: list[str] = []
    outcomes: list[tuple[float, str]] = []
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                queue.send(f"m{n}")
                acknowledged.append(f"m{n}")
                outcomes.append((started, "ok"))
            except smq.Unavailable:
                outcomes.append((started, "unavailable"))
                time.sleep(0.01)
            except smq.OutcomeUnknown:
                outcomes.append((started, "unknown"))
            n += 1

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        time.sleep(0.3)
        assert redis_dir.process is not None
        redis_dir.process.kill()  # kill -9, mid-load
        redis_dir.process.wait()
        dead_at = time.monotonic()
        redis_dir.process = None
        time.sleep(0.5)
        restart_at = time.monotonic()
        redis_dir.start()
        back_at = time.monotonic()
        time.sleep(0.3)
    finally:
        stop.set()
        producer.join(30)
    while_dead = [kind for started, kind in outcomes if dead_at < started < restart_at - 0.05]
    assert while_dead and set(while_dead) == {"unavailable"}, while_dead[:10]
    assert any(kind == "ok" for started, kind in outcomes if started > back_at)
    unknown = sum(1 for _, kind in outcomes if kind == "unknown")
    stored = queue.attributes().visible
    # appendfsync always: every acknowledged send survived; only an unknown outcome may add one.
    assert len(acknowledged) <= stored <= len(acknowledged) + unknown
    client.close()


@pytest.mark.parametrize("make", [json_client, query_client], ids=["json", "query"])
def test_the_http_api_answers_503_while_redis_is_down(redis_dir: EmbeddedRedis, make: Any) -> None:
    server = Server(redis_dir.url, "--no-auth")
    try:
        api = make(server.url)
        url = api.create_queue(QueueName="jobs")["QueueUrl"]
        api.send_message(QueueUrl=url, MessageBody="x")
        receipt = api.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
        redis_dir.stop()
        calls: dict[str, Callable[[], Any]] = {
            "SendMessage": lambda: api.send_message(QueueUrl=url, MessageBody="y"),
            "SendMessageBatch": lambda: api.send_message_batch(
                QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "y"}]
            ),
            "ReceiveMessage": lambda: api.receive_message(QueueUrl=url),
            "GetQueueAttributes": lambda: api.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]),
            "DeleteMessage": lambda: api.delete_message(QueueUrl=url, ReceiptHandle=receipt),
            "ChangeMessageVisibility": lambda: api.change_message_visibility(
                QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=5
            ),
            "ListQueues": lambda: api.list_queues(),
            "PurgeQueue": lambda: api.purge_queue(QueueUrl=url),
        }
        answers = {}
        socket_path = str(redis_dir.socket_path)
        for action, call in calls.items():
            with pytest.raises(ClientError) as caught:
                call()
            response = caught.value.response
            answers[action] = (response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"])
            # Where Redis is, and how it failed, is the operator's to know, not the client's.
            assert socket_path not in str(response) and "Error " not in response["Error"]["Message"]
            assert response["Error"]["Message"] == UNAVAILABLE
        assert answers == {action: (503, "ServiceUnavailable") for action in calls}
        status, body = http_get(f"{server.url}/ready")
        assert (
            status == 503
            and socket_path not in body
            and body == '{"status": "not ready", "reason": "Redis does not answer"}'
        )
        logs = server.logs()
        assert "Traceback" not in logs
        assert socket_path in logs  # the operator's log keeps the detail
        redis_dir.start()
        deadline = time.monotonic() + 10
        while True:
            try:
                api.delete_message(QueueUrl=url, ReceiptHandle=receipt)
                break
            except ClientError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert "Messages" not in api.receive_message(QueueUrl=url)
    finally:
        server.stop()


class _LoadingRedis:
    """A socket that answers every command as a Redis still loading its data does
    (or with another error ``reply``).

    Redis answers LOADING only for the moment it reads a large dataset; this
    stands in for that moment, to check what the client makes of the reply.
    """

    def __init__(self, reply: bytes = b"-LOADING Redis is loading the dataset in memory\r\n") -> None:
        self.reply = reply
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            while connection.recv(65536):
                connection.sendall(self.reply)

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize(
    "reply",
    [
        b"-LOADING Redis is loading the dataset in memory\r\n",
        # A Cluster node while a failover it waits for is under way: the command did not run.
        b"-CLUSTERDOWN The cluster is down\r\n",
        b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
    ],
    ids=["loading", "clusterdown", "tryagain"],
)
def test_a_redis_still_loading_or_a_cluster_failing_over_is_unavailable(reply: bytes) -> None:
    loading = _LoadingRedis(reply)
    try:
        client = smq.Client(smq.Settings(url=f"redis://127.0.0.1:{loading.port}/0", allow_eviction=True))
        queue = client.queue("jobs")
        for call in (lambda: queue.send("x"), lambda: queue.receive(1), client.list_queues):
            with pytest.raises(smq.Unavailable):
                call()
    finally:
        loading.close()


@pytest.mark.parametrize(
    "reply",
    [
        b"-LOADING Redis is loading the dataset in memory\r\n",
        b"-CLUSTERDOWN The cluster is down\r\n",
        b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
        b"-NOAUTH Authentication required.\r\n",
    ],
    ids=["loading", "clusterdown", "tryagain", "noauth"],
)
def test_smq_serves_event_loop_path_says_the_same(reply: bytes) -> None:
    """The scripts ``smq serve`` runs from its event loop meet these answers as the blocking path does."""
    from smq.client._loop_scripts import LoopScripts
    from smq.core._keys import QueueKeys
    from smq.core._steps import ScriptCall

    loading = _LoadingRedis(reply)
    client = smq.Client(smq.Settings(url=f"redis://127.0.0.1:{loading.port}/0", allow_eviction=True))
    client._checked = True  # as after a first call that found Redis well (this stand-in answers none)
    call = ScriptCall("get_attributes", QueueKeys.of("jobs"), [""], "jobs")
    with pytest.raises(smq.SmqError) as blocking_path:
        client.run(call.script, call.keys, call.args, queue=call.queue)

    async def blocking(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"went to a thread: {function}")

    async def main() -> None:
        scripts = LoopScripts(client, blocking)
        try:
            for _ in range(2):  # the connection stays usable after such a reply
                with pytest.raises(smq.SmqError) as loop_path:
                    await scripts.run(call)
                assert type(loop_path.value) is type(blocking_path.value)
                assert str(loop_path.value).startswith("get_attributes on queue 'jobs' did not run: ")
        finally:
            scripts.close()

    try:
        asyncio.run(main())
    finally:
        loading.close()
        client.close()
    assert isinstance(blocking_path.value, smq.Unavailable)  # did not run


@pytest.mark.parametrize(
    "reply, kind",
    [
        ("MOVED 3999 127.0.0.1:6381", MovedError),
        ("ASK 3999 127.0.0.1:6381", AskError),
        ("CLUSTERDOWN The cluster is down", ClusterDownError),
        ("TRYAGAIN Multiple keys request during rehashing of slot", TryAgainError),
        ("NOSCRIPT No matching script. Please use EVAL.", NoScriptError),
        ("ERR unknown command 'X'", ResponseError),
    ],
)
def test_error_replies_are_read_as_redis_py_6_reads_them_whatever_redis_py_is_installed(
    reply: str, kind: type[ResponseError]
) -> None:
    """redis-py 5 reads a cluster's redirects and refusals as plain ``ResponseError`` outside a
    cluster client's connections: ``smq serve``'s event loop would answer a moved slot 500."""
    error = reply_error(reply)
    assert type(error) is kind
    if isinstance(error, MovedError):
        assert (error.slot_id, error.host, error.port) == (3999, "127.0.0.1", 6381)
    did_not_run = kind in (ClusterDownError, TryAgainError)
    assert refused(error) is did_not_run
    assert refused(ResponseError(reply)) is did_not_run  # as redis-py 5 raises it from a single node
