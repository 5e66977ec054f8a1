"""Durability you choose: ``Settings(wait_replicas=N, wait_aof=...)`` on a real primary with two
replicas (started here, once for the module). Replicas are held still with SIGSTOP, so "they did
not confirm" is a fact, not a race; how many WAITs ran is read from the primary's INFO."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import smq
from conftest import acl_refusals, acl_url, server_binary, stored_id
from smq.connection._replicas import OBSERVATIONS, READ_ONLY
from smq.core._ids import message_id
from smq.core._keys import QueueKeys
from smq.core._scripts import lua_dir, sources
from smq.embedded import EmbeddedRedis, free_port


class Replicated:
    def __init__(self, directory: Path) -> None:
        self.primary = EmbeddedRedis(
            directory / "primary",
            port=free_port(),
            appendfsync="always",
            config=["repl-diskless-sync-delay 0"],
        ).start()
        self.replicas = [
            EmbeddedRedis(
                directory / f"replica{n}",
                port=free_port(),
                appendfsync="always",
                config=[f"replicaof 127.0.0.1 {self.primary.port}"],
            ).start()
            for n in range(2)
        ]
        deadline = time.monotonic() + 30
        while self.online() < 2:
            assert time.monotonic() < deadline, "the replicas did not come online"
            time.sleep(0.05)

    def online(self) -> int:
        with self.primary.client() as primary:
            info = primary.info("replication")
        return sum(1 for k, v in info.items() if k.startswith("slave") and v.get("state") == "online")

    def client(self, **settings: object) -> smq.Client:
        return smq.Client(smq.Settings(url=self.primary.url, **settings))  # type: ignore[arg-type]

    def waits(self) -> int:
        """How many WAIT and WAITAOF commands the primary has run (one that blocked counts twice)."""
        with self.primary.client() as primary:
            stats = primary.info("commandstats")
        return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("wait", "waitaof"))

    @contextmanager
    def stopped(self) -> Iterator[None]:
        """Hold both replicas still (SIGSTOP): they confirm nothing until the block ends."""
        pids = [r.process.pid for r in self.replicas if r.process is not None]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        with self.primary.client() as primary:  # caught up again before the next test
            assert primary.execute_command("WAIT", 2, 10_000) == 2

    def stop(self) -> None:
        for node in [*self.replicas, self.primary]:
            node.stop()


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    deployment = Replicated(tmp_path_factory.mktemp("replicated"))
    yield deployment
    deployment.stop()


def test_an_acknowledged_send_is_on_every_replica_when_the_call_returns(replicated: Replicated) -> None:
    with replicated.client(wait_replicas=2, wait_timeout=5) as client:
        queue = client.create_queue("acked")
        visible = QueueKeys.of("acked").visible
        for n in range(20):
            sent = queue.send(f"m{n}")
            for replica in replicated.replicas:
                with replica.client() as direct:
                    # Redis keeps the stored id, of which the message id is the UUID form; a message
                    # never received is its entry in the visible list, "<stored id>|<record>".
                    entries = direct.lrange(visible, 0, -1)
                    stored = {message_id(entry.partition(b"|")[0].decode()) for entry in entries}
                    assert sent.message_id in stored, f"m{n} missing on a replica"


def test_a_change_the_replicas_do_not_confirm_in_time_is_outcome_unknown(
    replicated: Replicated, caplog: pytest.LogCaptureFixture
) -> None:
    with replicated.client(wait_replicas=1, wait_timeout=5) as patient:
        patient.create_queue("unconfirmed")  # confirmed in time however busy the machine is
    with replicated.client(wait_replicas=1, wait_timeout=0.3) as client:
        queue = client.queue("unconfirmed")
        with replicated.stopped(), caplog.at_level(logging.WARNING, "smq.replicas"):
            started = time.monotonic()
            with pytest.raises(
                smq.OutcomeUnknown, match=r"send on queue 'unconfirmed': .*only 0 of 1 replicas"
            ):
                queue.send("maybe")
            took = time.monotonic() - started
        assert 0.3 <= took < 5
        assert "not replicated in time: send on queue 'unconfirmed'" in caplog.text
        assert queue.attributes().visible == 1  # it ran on the primary


def test_a_delete_riding_on_a_receive_is_on_every_replica_when_the_call_returns(
    replicated: Replicated,
) -> None:
    with replicated.client(wait_replicas=2, wait_timeout=5) as client:
        queue = client.create_queue("riding")
        queue.send_batch([smq.SendEntry(str(i), f"m{i}") for i in range(4)])
        first, *taken = queue.receive(3)
        queue.delete(first)  # each script has run once: the next call is one write
        before = replicated.waits()
        done = [smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(taken)]
        deleted, got = queue.delete_and_receive(done, 10)
        assert (len(deleted.successful), len(got)) == (2, 1)
        assert replicated.waits() > before
        keys = QueueKeys.of("riding")
        for replica in replicated.replicas:
            with replica.client() as direct:
                assert not any(
                    direct.hexists(keys.messages, stored_id(m)) for m in taken
                )  # deleted there too
                # and the receive's in-flight entry is there, its state in the member (a first receive)
                members = [member.decode() for member in direct.zrange(keys.inflight, 0, -1)]
                assert [member.split(":")[0] for member in members] == [stored_id(got[0])]
        queue.delete_batch([smq.DeleteEntry("0", got[0].receipt_handle)])
        queue.send("m")
        (message,) = queue.receive(1)
    with replicated.client(wait_replicas=1, wait_timeout=0.3) as short:
        queue = short.queue("riding")
        with (
            replicated.stopped(),
            pytest.raises(smq.OutcomeUnknown, match="delete and receive on queue 'riding'"),
        ):
            queue.delete_and_receive([smq.DeleteEntry("0", message.receipt_handle)], 1)
        assert queue.attributes().counters["deleted"] == 5  # it ran on the primary


def test_one_replica_down_fails_a_wait_for_two_but_not_for_one(replicated: Replicated) -> None:
    first = replicated.replicas[0]
    assert first.process is not None
    with (
        replicated.client(wait_replicas=1, wait_timeout=5) as one,
        replicated.client(wait_replicas=2, wait_timeout=0.3) as two,
    ):
        queue = one.create_queue("one-down")
        os.kill(first.process.pid, signal.SIGSTOP)
        try:
            queue.send("fine")
            with pytest.raises(smq.OutcomeUnknown, match="only 1 of 2 replicas"):
                two.queue("one-down").send("unsure")
        finally:
            os.kill(first.process.pid, signal.SIGCONT)


def test_read_only_calls_do_not_wait_and_writes_do(replicated: Replicated) -> None:
    with replicated.client(wait_replicas=2, wait_timeout=5) as client:
        queue = client.create_queue("reads", tags={"team": "a"})
        queue.send("one")
        before = replicated.waits()
        queue.attributes()
        queue.tags()
        queue.peek()
        client.list_move_tasks("reads")
        assert replicated.waits() == before
        (message,) = queue.receive(1)
        assert replicated.waits() > before
        before = replicated.waits()
        queue.delete(message)
        assert replicated.waits() > before


def test_by_default_a_primary_with_replicas_has_each_change_on_every_replica(replicated: Replicated) -> None:
    # A Sentinel promotes by offsets it read up to seconds before: only a change on every
    # replica is sure to be on the one it picks.
    with replicated.client(wait_timeout=5) as client:
        queue = client.create_queue("default")
        before = replicated.waits()
        for n in range(10):
            sent = queue.send(f"m{n}")
            for replica in replicated.replicas:
                with replica.client() as direct:
                    entries = direct.lrange(QueueKeys.of("default").visible, 0, -1)
                    stored = {message_id(entry.partition(b"|")[0].decode()) for entry in entries}
                    assert sent.message_id in stored, f"m{n} missing on a replica"
        assert replicated.waits() > before
        wait = client._scripts.wait
        assert wait is not None and wait.every
        assert wait.known[f"127.0.0.1:{replicated.primary.port}"].needed == 2


def test_by_default_a_stalled_replica_stops_being_waited_for_once_it_lags(replicated: Replicated) -> None:
    first = replicated.replicas[0]
    assert first.process is not None
    with replicated.client(wait_timeout=0.5) as client:
        queue = client.create_queue("stalled")
        queue.send("both")
        os.kill(first.process.pid, signal.SIGSTOP)
        try:
            unknown, deadline = 0, time.monotonic() + 20
            while True:
                try:
                    queue.send("one")
                    break
                except smq.OutcomeUnknown as error:  # until it counts as departed (some seconds)
                    assert "of 2 replicas" in str(error)
                    unknown += 1
                assert time.monotonic() < deadline, "the stalled replica was waited for on and on"
            wait = client._scripts.wait
            assert wait is not None and wait.known[f"127.0.0.1:{replicated.primary.port}"].needed == 1
        finally:
            os.kill(first.process.pid, signal.SIGCONT)


def test_wait_replicas_0_opts_out_of_waiting(replicated: Replicated) -> None:
    with replicated.client(wait_replicas=0) as client:
        queue = client.create_queue("plain")
        before = replicated.waits()
        queue.send("x")
        assert replicated.waits() == before


def test_by_default_a_single_redis_waits_for_nothing(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "single") as node, smq.Client(node.url) as client:
        client.create_queue("alone").send("x")
        with node.client() as direct:
            assert "cmdstat_wait" not in direct.info("commandstats")
        assert client._scripts.wait is None


def test_a_primary_that_refuses_writes_without_replicas_is_unavailable_and_nothing_ran(
    replicated: Replicated,
) -> None:
    # min-replicas-to-write: the primary refuses (NOREPLICAS) before the script changes
    # anything, so the call did not run (Unavailable), unlike a wait that timed out.
    with replicated.primary.client() as primary, replicated.client() as client:
        queue = client.create_queue("guarded")
        queue.send("before")
        primary.config_set("min-replicas-max-lag", 1)
        primary.config_set("min-replicas-to-write", 1)
        try:
            with replicated.stopped():
                deadline = time.monotonic() + 10
                while int(primary.info("replication").get("min_slaves_good_slaves", 1)) > 0:
                    assert time.monotonic() < deadline, "the replicas' lag did not pass 1 s"
                    time.sleep(0.1)
                with pytest.raises(
                    smq.Unavailable, match=r"send on queue 'guarded' did not run: .*NOREPLICAS"
                ):
                    queue.send("refused")
                assert queue.attributes().visible == 1
        finally:
            primary.config_set("min-replicas-to-write", 0)


def test_waitaof_waits_for_the_disks_of_primary_and_replicas(replicated: Replicated) -> None:
    with replicated.client(wait_replicas=2, wait_timeout=5, wait_aof=True) as client:
        queue = client.create_queue("disks")
        queue.send("kept")
        with replicated.primary.client() as primary:
            assert int(primary.info("commandstats")["cmdstat_waitaof"]["calls"]) >= 2
    with replicated.client(wait_replicas=1, wait_timeout=0.3, wait_aof=True) as client:
        with replicated.stopped(), pytest.raises(smq.OutcomeUnknown, match=r"only 0 of 1 replicas' AOF"):
            client.queue("disks").send("maybe")


def test_waitaof_alone_waits_for_the_primarys_disk(replicated: Replicated) -> None:
    with replicated.client(wait_aof=True, wait_replicas=0, wait_timeout=0.3) as client, replicated.stopped():
        client.create_queue("local-disk").send("on disk")  # no replica asked: they may sleep


def test_waitaof_is_refused_at_start_on_a_server_without_it(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "r62", server=server_binary("redis-6.2")) as old:
        with smq.Client(smq.Settings(url=old.url, wait_aof=True)) as client:
            with pytest.raises(smq.UnsafeRedisConfig, match=r"wait_aof needs WAITAOF .*Redis 6\.2"):
                client.create_queue("never")
        with smq.Client(smq.Settings(url=old.url, wait_replicas=0)) as client:
            client.create_queue("fine")  # plain WAIT (and no wait) work on Redis 6.2


def test_waitaof_is_refused_at_start_when_the_primary_keeps_no_aof(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "noaof", config=["appendonly no"]) as server:
        with smq.Client(smq.Settings(url=server.url, wait_aof=True)) as client:
            with pytest.raises(smq.UnsafeRedisConfig, match="append-only file, which is off"):
                client.create_queue("never")


def test_a_user_without_waitaof_is_told_at_start(acl_server: EmbeddedRedis) -> None:
    with smq.Client(smq.Settings(url=acl_url(acl_server), wait_aof=True)) as client:
        with pytest.raises(smq.BackendError, match=r"may not run WAITAOF .*\+waitaof"):
            client.create_queue("never")
    # The refusal was logged by design: clear it, as later tests check the log stays empty.
    assert acl_refusals([acl_server]) == [f"{acl_server.socket_path}: command waitaof"]
    with smq.Client(smq.Settings(url=acl_url(acl_server), wait_replicas=1, wait_timeout=0.05)) as client:
        with pytest.raises(smq.OutcomeUnknown, match="only 0 of 1 replicas"):
            client.create_queue("no-replicas")  # the ACL allows WAIT; this server has no replica
    assert acl_refusals([acl_server]) == []


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"wait_replicas": -1}, "wait_replicas must be 0 to 1000"),
        ({"wait_replicas": True}, "wait_replicas must be 0 to 1000"),
        ({"wait_timeout": 0}, "wait_timeout must be at least 0.001"),
        ({"wait_timeout": 10}, r"wait_timeout \(10 s\) must be less than socket_timeout \(10 s\)"),
    ],
)
def test_wait_settings_out_of_range_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        smq.Settings(**settings)  # type: ignore[arg-type]


# -- the table of scripts that need no wait, against the Lua sources ------------------------

_WRITES = {
    "del", "hdel", "hincrby", "hset", "lpop", "lpush", "publish", "rpush", "unlink", "xadd", "zadd", "zrem",
}  # fmt: skip
_CALL = re.compile(r"redis\.p?call\(\s*'(\w+)'", re.IGNORECASE)
_FUNCTION = re.compile(r"^local function (\w+)\((.*?)^end$", re.MULTILINE | re.DOTALL)


def _writing_helpers() -> set[str]:
    """Include functions that write, directly or through another include function."""
    bodies = {}
    for path in (lua_dir() / "includes").glob("*.lua"):
        bodies.update({name: body for name, body in _FUNCTION.findall(path.read_text())})
    writing = {n for n, b in bodies.items() if {c.lower() for c in _CALL.findall(b)} & _WRITES}
    while True:
        more = {n for n, b in bodies.items() if any(re.search(rf"\b{w}\(", b) for w in writing)} - writing
        if not more:
            return writing
        writing |= more


def _writes(name: str) -> bool:
    body = (lua_dir() / f"{name}.lua").read_text()
    direct = {c.lower() for c in _CALL.findall(body)} & _WRITES
    return bool(direct) or any(re.search(rf"\b{helper}\(", body) for helper in _writing_helpers())


def test_the_scripts_that_skip_the_wait_are_exactly_those_that_write_nothing() -> None:
    writing = {name for name in sources() if _writes(name)}
    # check_access writes probe keys it removes again (its commands are in a table the
    # pattern does not see): it is the one script that writes and still need not wait.
    assert READ_ONLY == (set(sources()) - writing) | {"check_access"}
    # Observations write, but only samples and heartbeats: never a message or a setting.
    assert OBSERVATIONS <= writing
    assert not OBSERVATIONS & {"send", "receive", "delete", "change_visibility", "purge"}
    assert "check_access" not in writing
    assert {"send", "receive", "delete", "change_visibility", "purge", "create_queue"} <= writing


# -- the command line and the Spark data source pass the settings on --------------------------


def _smq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "smq", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def test_the_command_line_waits_when_told_to(replicated: Replicated) -> None:
    url = replicated.primary.url
    assert _smq("queue", "create", "cli-wait", "--redis-url", url, "--wait-replicas", "2").returncode == 0
    with replicated.stopped():
        done = _smq(
            "send",
            "cli-wait",
            "x",
            "--redis-url",
            url,
            env={"SMQ_WAIT_REPLICAS": "2", "SMQ_WAIT_TIMEOUT": "0.2"},
        )
    assert done.returncode != 0
    assert "only 0 of 2 replicas confirmed it within 0.2 s" in done.stderr
    done = _smq("send", "cli-wait", "x", "--redis-url", url, "--wait-replicas", "1", "--wait-timeout", "10")
    assert done.returncode != 0 and "--wait-timeout: wait_timeout (10 s) must be less than" in done.stderr


def test_the_spark_options_carry_the_wait() -> None:
    from smq.spark._options import SourceOptions

    options = SourceOptions.parse(
        {"queue": "q", "url": "redis://x", "waitReplicas": "2", "waitTimeout": "0.5", "waitAof": "true"}
    )
    assert (options.settings.wait_replicas, options.settings.wait_timeout, options.settings.wait_aof) == (
        2,
        0.5,
        True,
    )
    with pytest.raises(smq.InvalidParameter, match="waitTimeout must be a number of seconds"):
        SourceOptions.parse({"queue": "q", "waitTimeout": "soon"})


def test_smq_serve_waits_for_a_replica_by_default(replicated: Replicated) -> None:
    from http_support import Server, json_client

    server = Server(replicated.primary.url, "--no-auth")
    try:
        sqs = json_client(server.url)
        url = sqs.create_queue(QueueName="served")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="warm")  # the first call checks Redis
        before = replicated.waits()
        for n in range(5):
            sqs.send_message(QueueUrl=url, MessageBody=f"m{n}")
        assert replicated.waits() >= before + 5
    finally:
        server.stop()


def test_the_command_line_waits_by_default_and_zero_opts_out(replicated: Replicated) -> None:
    url = replicated.primary.url
    assert _smq("queue", "create", "cli-default", "--redis-url", url).returncode == 0
    with replicated.stopped():
        waited = _smq("send", "cli-default", "x", "--redis-url", url, env={"SMQ_WAIT_TIMEOUT": "0.3"})
        opted_out = _smq("send", "cli-default", "y", "--redis-url", url, "--wait-replicas", "0")
    assert waited.returncode != 0 and "replicas confirmed it within 0.3 s" in waited.stderr
    assert opted_out.returncode == 0, opted_out.stderr
