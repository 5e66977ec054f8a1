"""A safe client: no silent retries, explicit errors, no evicting Redis."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import smq
from smq.core._scripts import _IDLE_CHECK_SECONDS
from smq.embedded import EmbeddedRedis

#: Why these tests run on all 14 combinations of ``client`` (conftest.MATRICES).
EVERY_BACKEND = "what a script may never do (erase, overlap leases)"


def test_redis_that_may_evict_is_refused_unless_overridden(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path, config=["maxmemory-policy allkeys-lru"]) as server:
        with pytest.raises(smq.UnsafeRedisConfig, match="allkeys-lru"):
            smq.Client(server.url).create_queue("jobs")
        with server.client() as admin:
            assert admin.keys("*") == []  # refused before anything was written
        risky = smq.Client(settings=smq.Settings(url=server.url, allow_eviction=True))
        risky.create_queue("jobs").send("x")


class _DroppingServer:
    """Accepts connections, answers the handshake and the access check, hangs
    up once the next script arrives (it may have run, for all the client
    knows): counts the tries."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            scripts = 0
            while True:
                data = conn.recv(65536)
                if data and b"EVALSHA" in data.upper():
                    scripts += 1
                    if scripts == 1:  # the client's access check at start: passes
                        conn.sendall(b"*1\r\n:0\r\n")
                        continue
                if not data or b"EVALSHA" in data.upper():
                    break
                if b"HGET" in data.upper():  # which shards the queue has: none
                    conn.sendall(b"$-1\r\n")
                    continue
                # The connection's handshake: HELLO (a map, as Redis 6+ answers it), CLIENT SETINFO.
                hello = b"%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n"
                conn.sendall(hello if b"HELLO" in data.upper() else b"+OK\r\n")
            conn.close()


def test_a_lost_call_is_not_retried_and_raises_outcome_unknown() -> None:
    server = _DroppingServer()
    # A stand-in that speaks just enough Redis for a script (no INFO: nothing to decide a wait by).
    settings = smq.Settings(url=f"redis://127.0.0.1:{server.port}", allow_eviction=True, wait_replicas=0)
    client = smq.Client(settings=settings)
    with pytest.raises(smq.OutcomeUnknown):
        client.queue("jobs").send("x")
    assert server.connections == 1
    server.listener.close()


def test_unreachable_redis_raises_a_backend_error_quickly(tmp_path: Path) -> None:
    settings = smq.Settings(url=f"unix://{tmp_path}/missing.sock", connect_timeout=1)
    with pytest.raises(smq.BackendError):
        smq.Client(settings=settings).create_queue("jobs")


def test_constructing_a_client_opens_no_connection() -> None:
    smq.Client("redis://127.0.0.1:1/0")  # nothing listens there; no error until used


def test_redis_errors_are_wrapped_at_the_boundary(redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs")
    redis_client._redis.set(queue.keys.visible, "not a list")
    with pytest.raises(smq.BackendError, match="WRONGTYPE") as caught:
        queue.send("x")
    assert caught.value.__cause__ is not None


def test_threads_can_share_one_client(redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs")
    received: list[str] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        for i in range(50):
            queue.send(f"{n}-{i}")
        while True:
            messages = queue.receive(10)
            if not messages:
                return
            for message in messages:
                assert queue.delete(message.receipt_handle)
            with lock:
                received.extend(m.body for m in messages)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(received) == sorted(f"{n}-{i}" for n in range(8) for i in range(50))


def test_a_forked_child_does_not_share_its_parents_connection(redis_client: smq.Client) -> None:
    import multiprocessing

    queue = redis_client.create_queue("jobs")
    queue.send("from parent")

    def child() -> None:
        queue.send("from child")
        assert len(queue.receive(10)) == 2

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(30)
    assert process.exitcode == 0
    assert queue.attributes().in_flight == 2  # the parent's connection still answers in order


def test_close_releases_the_connections(redis_server: EmbeddedRedis) -> None:
    client = smq.Client(redis_server.url)
    client.create_queue("jobs").send("x")
    with redis_server.client() as admin:
        before = admin.info("clients")["connected_clients"]
        client.close()
        # Redis counts a closed connection gone when its loop next reads it: poll, with a deadline.
        deadline = time.monotonic() + 10
        while admin.info("clients")["connected_clients"] >= before:
            assert time.monotonic() < deadline, "the client's connections stayed open after close()"
            time.sleep(0.02)


def test_connections_of_finished_threads_are_released(redis_server: EmbeddedRedis) -> None:
    import gc

    client = smq.Client(redis_server.url)
    queue = client.create_queue("jobs")
    threads = [threading.Thread(target=queue.send, args=("x",)) for _ in range(50)]
    for thread in threads:
        thread.start()
        thread.join()
    gc.collect()
    with redis_server.client() as admin:
        assert admin.info("clients")["connected_clients"] < 10
    client.close()


def test_long_polls_work_in_a_child_forked_during_a_long_poll(redis_client: smq.Client) -> None:
    import multiprocessing
    import time

    waker = redis_client._waker
    channel = redis_client.queue("jobs").keys.wake_channel
    watching, leave = threading.Event(), threading.Event()

    def parent_poll() -> None:  # what a long poll holds while it waits
        with waker.watch(channel, time.monotonic() + 30):
            watching.set()
            leave.wait(30)

    poll = threading.Thread(target=parent_poll)
    poll.start()
    assert watching.wait(10)

    def child() -> None:
        with waker.watch(channel, time.monotonic() + 10):  # must subscribe anew: no listener here
            seen = waker.count(channel)
            threading.Timer(0.3, redis_client._redis.publish, args=[channel, "1"]).start()
            assert waker.wait(channel, seen, 5)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(30)
    leave.set()
    poll.join()
    assert process.exitcode == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.list_queues(after=5),
        lambda c: c.list_queues(limit=0),
        lambda c: c.list_queues(limit="2"),
        lambda c: c.recover("jobs", min_age="x"),
        lambda c: c.recover("jobs", min_age=-1),
        lambda c: c.redrive("jobs", max_messages="3"),
        lambda c: c.queue("jobs").send_batch(["a"]),
        lambda c: c.queue("jobs").send_batch("abc"),
        lambda c: c.queue("jobs").delete_batch([None]),
        lambda c: c.queue("jobs").change_visibility_batch([("a", "r", 1)]),
    ],
)
def test_bad_arguments_raise_invalid_parameter(redis_client: smq.Client, call: object) -> None:
    redis_client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter):
        call(redis_client)  # type: ignore[operator]


def test_a_single_send_over_one_mebibyte_raises_message_too_long(redis_client: smq.Client) -> None:
    with pytest.raises(smq.MessageTooLong):
        redis_client.create_queue("jobs").send("x" * (1048576 + 1))


class _ConnectionOfRedisPy5(redis.UnixDomainSocketConnection):
    """A connection as redis-py 5 has it: without ``is_connected`` (redis-py 6 added it)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "is_connected":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute 'is_connected'")
        return super().__getattribute__(name)


_Kind = type[redis.UnixDomainSocketConnection]

# The connections of the installed redis-py, and of redis-py 5 (whatever is installed).
_CONNECTIONS = pytest.mark.parametrize(
    "connection_class",
    [redis.UnixDomainSocketConnection, _ConnectionOfRedisPy5],
    ids=["installed", "redis-py-5"],
)


def _fresh_client_with(server: EmbeddedRedis, connection_class: _Kind) -> smq.Client:
    with server.client() as admin:
        admin.flushall()
    client = smq.Client(server.url)
    client._redis.connection_pool.connection_class = connection_class  # before its first connection
    return client


@_CONNECTIONS
def test_a_script_call_after_its_connection_sat_idle_runs_on_that_connection(
    redis_server: EmbeddedRedis, connection_class: _Kind
) -> None:
    client = _fresh_client_with(redis_server, connection_class)
    queue = client.create_queue("jobs")
    queue.send("before")
    (held,) = client._scripts._local.connections.values()
    time.sleep(_IDLE_CHECK_SECONDS + 0.3)  # the next call first looks whether Redis closed it
    queue.send("after")
    assert list(client._scripts._local.connections.values()) == [held]  # still open: kept
    assert [m.body for m in queue.receive(10)] == ["before", "after"]
    client.close()


@_CONNECTIONS
def test_connections_redis_closed_while_idle_are_replaced(
    redis_server: EmbeddedRedis, connection_class: _Kind
) -> None:
    client = _fresh_client_with(redis_server, connection_class)
    queue = client.create_queue("jobs")
    queue.send("before")
    with redis_server.client() as admin:
        admin.config_set("timeout", 1)
        try:
            time.sleep(2.5)  # Redis closes the idle script connection
            queue.send("after")  # a fresh connection, not OutcomeUnknown
        finally:
            admin.config_set("timeout", 0)
    assert [m.body for m in queue.receive(10)] == ["before", "after"]
    client.close()


def test_a_child_forked_while_a_thread_holds_the_connection_lock_can_work(redis_client: smq.Client) -> None:
    import multiprocessing

    queue = redis_client.create_queue("jobs")
    queue.send("warm")
    with redis_client._scripts._lock:  # as if another thread were opening a connection

        def child() -> None:
            queue.send("from child")

        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
        process.join(20)
    assert process.exitcode == 0
    assert queue.attributes().visible == 2


def test_a_decoding_redis_client_is_refused_with_a_clear_error(redis_server: EmbeddedRedis) -> None:
    import redis

    with pytest.raises(TypeError, match="decode_responses"):
        smq.Client(redis_client=redis.Redis.from_url(redis_server.url, decode_responses=True))
