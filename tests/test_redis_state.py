"""Redis's own state changing under smq: eviction switched on, a full memory, a failing disk.

Each on real servers it starts itself: what a call confirmed stays, and what Redis refuses is a
typed error that says nothing ran (``Unavailable``), never a missing permission.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import smq
from conftest import server_binary
from smq import ChangeEntry, DeleteEntry, RedrivePolicy, SendEntry
from smq.connection._eviction import CHECK_SECONDS, SAFE_POLICIES
from smq.embedded import EmbeddedRedis

# Servers whose script errors are worded differently: Valkey (the embedded default), Redis 7
# (``OOM ... script: <sha>, on @user_script:N.``) and Redis 6.2 (``Error running script ...: -OOM ...``).
KINDS = ("valkey", "redis-7", "redis-6.2")


def _binary(kind: str) -> str | None:
    return None if kind == "valkey" else server_binary(kind)


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., EmbeddedRedis]]:
    started: list[EmbeddedRedis] = []

    def make(
        kind: str = "valkey", config: list[str] | None = None, folder: Path | None = None
    ) -> EmbeddedRedis:
        server = EmbeddedRedis(
            folder or tmp_path / f"redis-{len(started)}", server=_binary(kind), config=config or ()
        )
        started.append(server.start())
        return server

    yield make
    for server in started:
        server.stop()


def _snapshot(admin: redis.Redis) -> dict[bytes, bytes | None]:
    """Every smq key with its serialized value: equal snapshots, equal data."""
    return {key: admin.dump(key) for key in sorted(admin.scan_iter(match="smq:*", count=1000))}


def _fill(admin: redis.Redis, limit_mb: int) -> int:
    """Fill Redis with keys of no queue's until it is well over ``limit_mb`` (noeviction): out of
    memory by a margin of about a megabyte, which Redis's own housekeeping does not free."""
    admin.config_set("maxmemory", f"{limit_mb + 1}mb")
    written = 0
    for size in (100_000, 10_000, 1000, 100):
        while True:
            try:
                admin.set(f"filler:{size}:{written}", b"x" * size)
            except redis.exceptions.OutOfMemoryError:
                break
            written += 1
    admin.config_set("maxmemory", f"{limit_mb}mb")
    return written


# -- which keys may carry a TTL ------------------------------------------------------------------


def test_no_key_of_a_queues_messages_or_state_carries_a_ttl(redis_client: smq.Client) -> None:
    """What makes the volatile-* policies safe: they evict only keys with a TTL."""
    client = redis_client
    client.create_queue("dead")
    policy = RedrivePolicy(dead_letter_queue="dead", max_receive_count=1)
    jobs = client.create_queue("jobs", redrive_policy=policy, event_stream_max_len=100, visibility_timeout=0)
    jobs.tag({"team": "a"})
    jobs.send("later", delay_seconds=60)
    jobs.send_batch([SendEntry(str(n), f"m{n}", message_group_id=f"tenant-{n % 2}") for n in range(4)])
    held = jobs.receive(2, visibility_timeout=30)
    jobs.change_visibility_batch([ChangeEntry("c", held[0].receipt_handle, 60)])
    jobs.delete_batch([DeleteEntry("d", held[1].receipt_handle)])
    jobs.receive(10)  # visibility 0: back at once
    jobs.receive(10)  # the second receive moves them to the dead-letter queue
    jobs._sample()
    jobs._beat("worker-1", "worker", {"host": "h"})
    jobs.peek()
    fifo = client.create_queue("jobs.fifo", fifo_queue=True)
    fifo.send("f1", message_group_id="g", deduplication_id="d1")
    fifo.receive(1, attempt_id="attempt-1")
    sharded = client.create_queue("wide", shards=2)
    sharded.send_batch([SendEntry(str(n), f"s{n}") for n in range(4)])
    sharded.receive(2)
    task = client.start_move_task("dead", destination="jobs")
    client.run_move_tasks(owner="test", deadline=time.monotonic() + 5)
    assert client.list_move_tasks("dead")[0].handle == task.handle
    client.create_queue("gone").send("x")
    client.delete_queue("gone")

    admin = redis.Redis(unix_socket_path=str(client.settings.url).removeprefix("unix://"))
    with_ttl = {key.decode() for key in admin.scan_iter(match="smq:*", count=1000) if admin.pttl(key) != -1}
    # The one key of a queue with a TTL: the mark that a name was deleted recently (60 s).
    assert with_ttl == {"smq:{gone}:deleted"}
    kinds = {key.decode().rsplit(":", 1)[-1] for key in admin.scan_iter(match="smq:{*", count=1000)}
    assert {
        "meta",
        "messages",
        "inflight",
        "stats",
        "events",
        "fifo",
        "dedup",
        "attempts",
        "history",
    } <= kinds
    admin.close()


def test_the_safe_policies_are_noeviction_and_the_volatile_ones() -> None:
    assert set(SAFE_POLICIES) == {
        "noeviction",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    }


# -- the eviction policy ---------------------------------------------------------------------------


def test_an_evicting_policy_at_start_refuses_writes_but_not_reads(make_server: Any) -> None:
    server = make_server(config=["maxmemory 64mb"])
    smq.Client(server.url).create_queue("jobs").send("kept")
    with server.client() as admin:
        admin.config_set("maxmemory-policy", "allkeys-lru")
        before = _snapshot(admin)
        client = smq.Client(server.url)
        queue = client.queue("jobs")
        with pytest.raises(
            smq.EvictionPolicyUnsafe, match=r"'allkeys-lru', maxmemory 64mb: it may evict"
        ) as caught:
            queue.send("refused")
        assert isinstance(caught.value, smq.Unavailable) and isinstance(caught.value, smq.UnsafeRedisConfig)
        for write in (lambda: queue.receive(1), lambda: client.create_queue("other"), queue.purge):
            with pytest.raises(smq.EvictionPolicyUnsafe):
                write()
        # Reads go on: an operator can look at the queues during the incident.
        assert client.list_queues() == ["jobs"]
        assert queue.attributes().visible == 1
        assert [m.body for m in queue.peek()] == ["kept"]
        assert _snapshot(admin) == before  # nothing written, the access check's probe neither
        admin.config_set("maxmemory-policy", "noeviction")
        deadline = time.monotonic() + 2 * CHECK_SECONDS + 1
        while True:
            try:
                queue.send("after")
                break
            except smq.EvictionPolicyUnsafe:
                assert time.monotonic() < deadline, "writes did not resume after the policy was fixed"
                time.sleep(0.05)
        assert queue.attributes().visible == 2
        client.close()


@pytest.mark.parametrize("policy", ["volatile-lru", "volatile-ttl"])
def test_a_volatile_policy_is_accepted(make_server: Any, policy: str) -> None:
    server = make_server(config=["maxmemory 64mb", f"maxmemory-policy {policy}"])
    with smq.Client(server.url) as client:
        queue = client.create_queue("jobs")
        queue.send("x")
        assert [m.body for m in queue.receive(1)] == ["x"]
        # The Spark stream asks for noeviction: its records of micro-batches carry a TTL.
        client._require_noeviction()
        with pytest.raises(smq.EvictionPolicyUnsafe, match=f"'{policy}'.*until it is 'noeviction'"):
            queue.send("y")


def test_the_spark_streams_executor_clients_ask_for_noeviction(make_server: Any) -> None:
    pytest.importorskip("pyspark")
    from smq.spark import _stream_read

    server = make_server(config=["maxmemory 64mb", "maxmemory-policy volatile-lru"])
    with smq.Client(server.url) as client:
        client.create_queue("events")
    executor = _stream_read.client_for(smq.Settings(url=server.url))
    try:
        with pytest.raises(smq.EvictionPolicyUnsafe, match="until it is 'noeviction'"):
            executor.get_queue("events").send("x")
    finally:
        _stream_read._CLIENTS.pop(smq.Settings(url=server.url), None)
        executor.close()


@pytest.mark.parametrize("kind", ["valkey", "redis-7"])
def test_eviction_switched_on_while_sending_stops_writes_within_two_seconds_and_loses_nothing(
    make_server: Any, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's run: 64 MB, noeviction, messages sent, then CONFIG SET allkeys-lru. Memory is
    below the limit at the switch, so Redis evicts nothing while smq stops its writes."""
    server = make_server(kind, config=["maxmemory 64mb"])
    client = smq.Client(server.url)
    queue = client.create_queue("jobs")
    acknowledged: list[str] = []
    refused: list[tuple[float, BaseException]] = []
    stop = threading.Event()

    def produce(worker: int) -> None:
        n = 0
        while not stop.is_set():
            body = f"{worker}-{n}-" + "x" * 500
            try:
                queue.send(body)
            except smq.Unavailable as error:
                refused.append((time.monotonic(), error))
                time.sleep(0.01)
                continue
            acknowledged.append(body)
            n += 1

    producers = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
    for thread in producers:
        thread.start()
    with server.client() as admin:
        while len(acknowledged) < 3000:
            time.sleep(0.01)
        with caplog.at_level(logging.ERROR, logger="smq.redis"):
            admin.config_set("maxmemory-policy", "allkeys-lru")
            switched = time.monotonic()
            while not refused and time.monotonic() < switched + 5:
                time.sleep(0.01)
            time.sleep(0.5)  # every producer refused again and again
        stop.set()
        for thread in producers:
            thread.join()
        assert refused, "no write was refused after the switch"
        first = refused[0][0] - switched
        assert first < 2.0, f"writes went on {first:.2f} s after the switch"
        assert all(isinstance(error, smq.EvictionPolicyUnsafe) for _, error in refused)
        after_refusal = [at for at, _ in refused if at > refused[0][0]]
        assert after_refusal, "only one refusal: the producers were not refused until the policy was fixed"
        assert int(admin.info("stats")["evicted_keys"]) == 0
        assert any("refuses to write" in record.getMessage() for record in caplog.records)
        admin.config_set("maxmemory-policy", "noeviction")
    # Every acknowledged send is there, once (receives resume within a second of the fix).
    got: list[str] = []
    deadline = time.monotonic() + 2 * CHECK_SECONDS + 1
    while True:
        try:
            messages = queue.receive(10, visibility_timeout=600)
        except smq.EvictionPolicyUnsafe:
            assert time.monotonic() < deadline
            time.sleep(0.05)
            continue
        if not messages:
            break
        got += [m.body for m in messages]
    assert sorted(got) == sorted(acknowledged)
    client.close()


def test_the_asyncio_client_and_smq_serve_stop_writing_within_two_seconds_of_a_switch(
    make_server: Any,
) -> None:
    """The event loop's calls (``smq.aio``, ``smq serve``) go to Redis without a thread: they read
    the policy again as the blocking path does, and refuse the same way (HTTP: a 503)."""
    from botocore.exceptions import ClientError

    from http_support import Server, http_get, json_client
    from smq.aio import AsyncClient

    server = make_server(config=["maxmemory 64mb"])
    serve = Server(server.url, "--no-auth")
    try:
        api = json_client(serve.url)
        url = api.create_queue(QueueName="jobs")["QueueUrl"]

        async def send_until_refused() -> tuple[float, int]:
            async with AsyncClient(server.url) as client:
                queue = client.queue("jobs")
                await queue.send("warm")
                with server.client() as admin:
                    admin.config_set("maxmemory-policy", "allkeys-lfu")
                switched, sent = time.monotonic(), 0
                while time.monotonic() < switched + 5:
                    try:
                        await queue.send("x")
                    except smq.EvictionPolicyUnsafe:
                        return time.monotonic() - switched, sent
                    sent += 1
                raise AssertionError("the asyncio client went on writing")

        seconds, _ = asyncio.run(send_until_refused())
        assert seconds < 2.0
        deadline = time.monotonic() + 2.0
        while True:
            try:
                api.send_message(QueueUrl=url, MessageBody="x")
            except ClientError as error:
                reply = error.response
                assert (reply["ResponseMetadata"]["HTTPStatusCode"], reply["Error"]["Code"]) == (
                    503,
                    "ServiceUnavailable",
                )
                break
            assert time.monotonic() < deadline, "smq serve went on writing"
        status, body = http_get(f"{serve.url}/ready")
        assert (status, body) == (503, '{"status": "not ready", "reason": "Redis refuses writes"}')
        assert http_get(f"{serve.url}/health")[0] == 200
        assert api.list_queues()["QueueUrls"] == [url]  # reads go on
        with server.client() as admin:
            admin.config_set("maxmemory-policy", "noeviction")
        assert http_get(f"{serve.url}/ready")[0] == 200
        assert "allkeys-lfu" in serve.logs()
    finally:
        serve.stop()


def test_smq_serve_on_an_evicting_redis_starts_not_ready_and_says_why(make_server: Any) -> None:
    from http_support import Server, http_get, json_client

    server = make_server(config=["maxmemory 64mb", "maxmemory-policy allkeys-lru"])
    serve = Server(server.url, "--no-auth")
    try:
        status, body = http_get(f"{serve.url}/ready")
        assert (status, body) == (503, '{"status": "not ready", "reason": "Redis refuses writes"}')
        assert http_get(f"{serve.url}/health")[0] == 200
        assert "cannot write to Redis now, so /ready answers 503" in serve.logs()
        assert "'allkeys-lru'" in serve.logs()
        api = json_client(serve.url)
        assert api.list_queues().get("QueueUrls", []) == []
        with server.client() as admin:
            admin.config_set("maxmemory-policy", "noeviction")
        assert http_get(f"{serve.url}/ready")[0] == 200
        api.create_queue(QueueName="jobs")
    finally:
        serve.stop()


def test_a_switch_made_while_redis_is_full_evicts_at_once_and_smq_says_so(
    make_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """What smq cannot prevent: Redis evicts at the command after the switch, before any client
    looks. smq refuses its writes from then on and logs the keys evicted, loudly."""
    server = make_server(config=["maxmemory 4mb"])
    with smq.Client(server.url) as client:
        queue = client.create_queue("jobs")
        queue.send("first")
        with server.client() as admin:
            _fill(admin, 4)
            with caplog.at_level(logging.WARNING, logger="smq.redis"):
                admin.config_set("maxmemory-policy", "allkeys-random")
                deadline = time.monotonic() + 3
                while True:
                    try:
                        queue.send("more")
                    except smq.EvictionPolicyUnsafe as error:
                        assert "evicted" in str(error)
                        break
                    except (smq.RedisOutOfMemory, smq.QueueDoesNotExist):
                        pass  # before smq's next look: the queue's meta may be evicted already
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
                evicted = int(admin.info("stats")["evicted_keys"])
            assert evicted > 0
            admin.config_set("maxmemory-policy", "noeviction")
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("refuses to write" in line and "evicted" in line for line in lines), lines


# -- a full memory ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_full_redis_refuses_each_write_unrun_as_out_of_memory(make_server: Any, kind: str) -> None:
    """Filled between two calls: each call then either runs (one that frees or takes no new
    memory first: Redis lets a script go on once it has written) or is refused, typed, having
    written nothing at all."""
    server = make_server(kind, config=["maxmemory 8mb"])
    client = smq.Client(server.url)
    client.create_queue("dead")
    queue = client.create_queue(
        "jobs", redrive_policy=RedrivePolicy(dead_letter_queue="dead", max_receive_count=5)
    )
    fifo = client.create_queue("jobs.fifo", fifo_queue=True)
    queue.send_batch([SendEntry(str(n), f"m{n}") for n in range(6)])
    fifo.send("f", message_group_id="g", deduplication_id="f")
    held = queue.receive(3, visibility_timeout=600)
    calls: dict[str, Callable[[], Any]] = {
        "send": lambda: queue.send("refused"),
        "send_batch": lambda: queue.send_batch([SendEntry("a", "refused")]),
        "fifo send": lambda: fifo.send("g2", message_group_id="g", deduplication_id="g2"),
        "create_queue": lambda: client.create_queue("new"),
        "set_attributes": lambda: queue.set_attributes(visibility_timeout=45),
        "tag": lambda: queue.tag({"k": "v"}),
        "receive": lambda: queue.receive(1),
        "change_visibility": lambda: queue.change_visibility(held[0].receipt_handle, 900),
        "delete": lambda: queue.delete(held[1].receipt_handle),
        "purge": lambda: fifo.purge(),
    }
    assert all(len(m.receipt_handle) > 0 for m in held)
    outcomes: dict[str, str] = {}
    with server.client() as admin:
        _fill(admin, 8)
        for name, call in calls.items():
            before = _snapshot(admin)
            try:
                call()
            except smq.RedisOutOfMemory as error:
                assert str(error).startswith("Redis is out of memory (maxmemory 8mb): "), error
                assert "did not run and wrote nothing" in str(error)
                assert _snapshot(admin) == before, f"{name} was refused but changed the queue's data"
                outcomes[name] = "refused"
            else:
                outcomes[name] = "ran"
            _fill(admin, 8)  # whatever the call freed or took, full again for the next
        # Those that add data are refused; a delete (which frees memory) runs.
        assert {n for n, o in outcomes.items() if o == "refused"} >= {
            "send",
            "send_batch",
            "fifo send",
            "create_queue",
        }
        assert outcomes["delete"] == "ran", outcomes
        admin.flushdb()
    client.close()


def test_out_of_memory_reaches_http_clients_as_a_retryable_503(make_server: Any) -> None:
    from botocore.exceptions import ClientError

    from http_support import Server, http_get, json_client
    from smq.server._errors import UNAVAILABLE

    server = make_server(config=["maxmemory 8mb"])
    serve = Server(server.url, "--no-auth")
    try:
        api = json_client(serve.url)
        url = api.create_queue(QueueName="jobs")["QueueUrl"]
        api.send_message(QueueUrl=url, MessageBody="before")
        with server.client() as admin:
            _fill(admin, 8)
            with pytest.raises(ClientError) as caught:
                api.send_message(QueueUrl=url, MessageBody="refused")
            error = caught.value.response
            assert (error["ResponseMetadata"]["HTTPStatusCode"], error["Error"]["Code"]) == (
                503,
                "ServiceUnavailable",
            )
            assert error["Error"]["Message"] == UNAVAILABLE
            status, body = http_get(f"{serve.url}/ready")
            assert (status, body) == (503, '{"status": "not ready", "reason": "Redis refuses writes"}')
            assert http_get(f"{serve.url}/health")[0] == 200
            admin.delete(*admin.keys("filler:*"))
            assert http_get(f"{serve.url}/ready")[0] == 200
        assert "Redis is out of memory (maxmemory 8mb)" in serve.logs()
        assert "may not run" not in serve.logs()
    finally:
        serve.stop()


def test_the_cli_says_out_of_memory_in_one_line(make_server: Any, tmp_path: Path) -> None:
    server = make_server(config=["maxmemory 8mb"])
    smq.Client(server.url).create_queue("jobs")
    with server.client() as admin:
        _fill(admin, 8)
        done = subprocess.run(
            [str(Path(os.sys.executable).parent / "smq"), "send", "jobs", "hello"],
            env={**os.environ, "SMQ_REDIS_URL": server.url},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Redis is out of memory (maxmemory 8mb)" in lines[0], done.stderr


# -- a failing disk --------------------------------------------------------------------------------


def test_a_failed_snapshot_refuses_writes_as_cannot_persist_not_as_a_missing_permission(
    make_server: Any, tmp_path: Path
) -> None:
    """``stop-writes-on-bgsave-error``: the last RDB snapshot failed (its folder is gone), so Redis
    refuses writes with MISCONF, to an old client and to a new one (whose first call is the access
    check) alike; they come back once a snapshot succeeds."""
    from http_support import Server, http_get

    server = make_server(config=["appendonly no", "save 3600 1", "enable-protected-configs yes"])
    old = smq.Client(server.url)
    queue = old.create_queue("jobs")
    queue.send("kept")
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    serve = Server(server.url, "--no-auth")
    try:
        with server.client() as admin:
            admin.config_set("dir", str(snapshots))
            snapshots.rmdir()
            admin.bgsave()
            deadline = time.monotonic() + 10
            while admin.info("persistence")["rdb_last_bgsave_status"] != "err":
                assert time.monotonic() < deadline, "the snapshot did not fail"
                time.sleep(0.05)
            before = _snapshot(admin)
            for client in (old, smq.Client(server.url)):
                with pytest.raises(smq.RedisCannotPersist) as caught:
                    client.queue("jobs").send("refused")
                text = str(caught.value)
                assert "Redis cannot write its data to disk" in text and "MISCONF" in text, text
                assert "may not run" not in text and "ACL" not in text
            assert _snapshot(admin) == before
            status, body = http_get(f"{serve.url}/ready")
            assert (status, body) == (503, '{"status": "not ready", "reason": "Redis refuses writes"}')
            snapshots.mkdir()
            admin.config_set("dir", str(server.directory))
            admin.bgsave()
            deadline = time.monotonic() + 10
            while admin.info("persistence")["rdb_last_bgsave_status"] != "ok":
                assert time.monotonic() < deadline, "the snapshot did not succeed again"
                time.sleep(0.05)
        queue.send("after")
        assert http_get(f"{serve.url}/ready")[0] == 200
        assert sorted(m.body for m in queue.receive(10)) == ["after", "kept"]
    finally:
        serve.stop()
        old.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 32 MiB of the test's own (mounting needs root: CI runs as root)."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root, which the full-disk test needs to mount a small tmpfs")
        pytest.skip("mounting a small tmpfs for the full-disk test needs root (CI runs it)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_under_the_aof_refuses_writes_keeps_every_acknowledged_message_and_recovers(
    make_server: Any, small_disk: Path
) -> None:
    server = make_server(folder=small_disk / "redis")
    client = smq.Client(server.url)
    queue = client.create_queue("jobs")
    filler = small_disk / "filler"
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    filler.write_bytes(b"\0" * (free - 2 * 1024 * 1024))  # 2 MiB left for the AOF
    acknowledged: list[str] = []
    refusals: list[smq.SmqError] = []
    deadline = time.monotonic() + 30
    n = 0
    while len(refusals) < 20:
        assert time.monotonic() < deadline, f"the disk never filled ({len(acknowledged)} sent)"
        body = f"{n}-" + "x" * 10_000
        n += 1
        try:
            queue.send(body)
        except smq.RedisCannotPersist as error:
            refusals.append(error)
            time.sleep(0.05)
            continue
        acknowledged.append(body)
    text = str(refusals[0])
    assert "No space left on device" in text and "may not run" not in text, text
    with pytest.raises(smq.RedisCannotPersist):
        smq.Client(server.url).queue("jobs").send("a new client: its access check")
    filler.unlink()
    deadline = time.monotonic() + 10
    while True:  # Redis writes its AOF buffer again once it can, then takes writes
        try:
            queue.send("after")
            break
        except smq.RedisCannotPersist:
            assert time.monotonic() < deadline, "writes did not come back after the disk had room"
            time.sleep(0.1)
    client.close()
    # Every acknowledged message is on disk: a restart from the AOF has them all.
    server.stop()
    server.start()
    with smq.Client(server.url) as again:
        got: list[str] = []
        while messages := again.queue("jobs").receive(10, visibility_timeout=600):
            got += [m.body for m in messages]
    assert sorted(got) == sorted([*acknowledged, "after"])
    assert len(acknowledged) > 10
