"""The classic split brain: the primary cut off from its replicas and Sentinels, but not from a
client beside it. At smq's defaults nothing either side acknowledged is erased when the
partition heals and the old primary is turned into a replica; without waiting, what that
client was told was sent is erased (the control, which shows the check can fail).

The primary runs in a network namespace of its own (``ip netns``, root only: CI runs as root),
joined to the test's by a veth pair on a private /24 that no address of the machine is in; one producer
runs inside that namespace, one outside. The partition deletes the primary's route to the
other side: nothing it sends leaves, while the producer beside it still reaches it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import smq
from conftest import machine_lock
from smq.embedded import EmbeddedRedis, find_redis_server, free_port


def _unused_subnet() -> str:
    """A 10.213.X /24 that no address of the machine is in, so that a run of this test from another
    checkout (which may not take ``machine_lock``; 10.213.77 was once fixed) keeps its own."""
    found = shutil.which("ip")
    used = subprocess.run([found, "-4", "-o", "addr"], capture_output=True, text=True).stdout if found else ""
    free = [n for n in range(1, 255) if n != 77 and f" 10.213.{n}." not in used]
    return f"10.213.{random.choice(free)}"


SUBNET = _unused_subnet()
OUTSIDE, INSIDE = f"{SUBNET}.1", f"{SUBNET}.2"
QUEUE = "split"
SERVICE = "smq"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _can_make_namespaces() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = f"smq-probe-{os.getpid()}"
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, OSError):
        return False
    _ip("netns", "del", name)
    return True


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.environ.get("CI") and not _can_make_namespaces(),
        reason="needs root and ip netns (CI runs as root and must run it)",
    ),
]


class Namespace:
    """A network namespace holding ``INSIDE``, joined by veth to ``OUTSIDE`` in the test's own."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.name, self.outer, self.inner = f"smq-{tag}", f"smqo{tag}", f"smqi{tag}"
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
            _ip("link", "set", self.inner, "netns", self.name)
            _ip("addr", "add", f"{OUTSIDE}/24", "dev", self.outer)
            _ip("link", "set", self.outer, "up")
            self.inside("addr", "add", f"{INSIDE}/24", "dev", self.inner)
            self.inside("link", "set", self.inner, "up")
            self.inside("link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise

    def inside(self, *args: str) -> None:
        _ip("netns", "exec", self.name, "ip", *args)

    def cut(self) -> None:
        """Nothing from inside reaches outside any more (replies included: a partition)."""
        self.inside("route", "del", f"{SUBNET}.0/24", "dev", self.inner)

    def heal(self) -> None:
        self.inside("route", "add", f"{SUBNET}.0/24", "dev", self.inner)

    def wrap(self, folder: Path, program: str) -> str:
        """A script that runs ``program`` inside the namespace (its pid is the program's)."""
        script = folder / f"in-{self.name}"
        script.write_text(f'#!/bin/sh\nexec ip netns exec {self.name} {program} "$@"\n')
        script.chmod(0o755)
        return str(script)

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)


class Deployment:
    """The primary inside the namespace; 2 replicas and 3 Sentinels outside, all on ``SUBNET``."""

    def __init__(self, folder: Path, namespace: Namespace, guarded: bool) -> None:
        server = find_redis_server()
        guard = ["min-replicas-to-write 1", "min-replicas-max-lag 2"] if guarded else []
        # Protected mode refuses clients from another address than loopback without a password.
        common = ["protected-mode no", "repl-timeout 5", "repl-diskless-sync-delay 0", *guard]
        self.primary = EmbeddedRedis(
            folder / "primary",
            port=free_port(),
            server=namespace.wrap(folder, server),
            config=[*common, f"bind {INSIDE} 127.0.0.1"],
        )
        self.nodes: list[EmbeddedRedis] = []
        self.sentinels: list[tuple[int, subprocess.Popen[bytes]]] = []
        try:
            self.primary.start()
            self.nodes.append(self.primary)
            for n in range(2):
                replica = EmbeddedRedis(
                    folder / f"replica{n}",
                    port=free_port(),
                    server=server,
                    config=[*common, f"bind {OUTSIDE} 127.0.0.1", f"replicaof {INSIDE} {self.primary.port}"],
                )
                self.nodes.append(replica.start())
            for n in range(3):
                self._sentinel(folder / f"sentinel{n}", server)
            self.until(lambda: self.primary_address() == (INSIDE, self.primary.port), "the Sentinels")
            self.until(lambda: self._linked(2), "the replicas")
        except BaseException:
            self.stop()
            raise

    def _sentinel(self, folder: Path, server: str) -> None:
        folder.mkdir(parents=True)
        port = free_port()
        (folder / "sentinel.conf").write_text(
            textwrap.dedent(
                f"""\
                port {port}
                bind {OUTSIDE} 127.0.0.1
                protected-mode no
                dir {folder}
                logfile sentinel.log
                sentinel monitor {SERVICE} {INSIDE} {self.primary.port} 2
                sentinel down-after-milliseconds {SERVICE} 1000
                sentinel failover-timeout {SERVICE} 3000
                """
            )
        )
        process = subprocess.Popen(
            [server, str(folder / "sentinel.conf"), "--sentinel"],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.sentinels.append((port, process))

    def url(self, host: str) -> str:
        return "redis+sentinel://" + ",".join(f"{host}:{port}" for port, _ in self.sentinels) + f"/{SERVICE}"

    def primary_address(self) -> tuple[str, int] | None:
        import redis

        for port, _ in self.sentinels:
            try:
                with redis.Redis(port=port, socket_timeout=1) as sentinel:
                    reply = sentinel.execute_command("SENTINEL", "get-master-addr-by-name", SERVICE)
            except redis.RedisError:
                continue
            if reply:
                return reply[0].decode(), int(reply[1])
        return None

    def _linked(self, replicas: int) -> bool:
        address = self.primary_address()
        if address is None:
            return False
        (node,) = [n for n in self.nodes if n.port == address[1]]
        with node.client() as connection:
            info = connection.info("replication")
        online = [k for k, v in info.items() if k.startswith("slave") and v.get("state") == "online"]
        return len(online) >= replicas

    def until(self, condition: Any, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():
                    return
            except Exception:  # noqa: BLE001 - a node in between states: ask again
                pass
            assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
            time.sleep(0.1)

    def stop(self) -> None:
        for _, process in self.sentinels:
            process.terminate()
        for _, process in self.sentinels:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        for node in self.nodes:
            node.stop()


# A producer: sends numbered tokens until its time is up, and writes each outcome to a ledger.
PRODUCER = """
import json, sys, time
import smq
url, ledger_path, side, seconds, wait = sys.argv[1:6]
settings = smq.Settings(url=url, socket_timeout=3, connect_timeout=1,
                        **({} if wait == "default" else {"wait_replicas": int(wait)}))
queue = smq.Client(settings=settings).queue("split")
n, deadline = 0, time.monotonic() + float(seconds)
with open(ledger_path, "a") as ledger:
    while time.monotonic() < deadline:
        token = f"{side}-{n}"
        n += 1
        try:
            queue.send(token)
            kind = "sent"
        except smq.Unavailable:
            kind = "refused"
        except smq.SmqError:
            kind = "unknown"
        ledger.write(json.dumps({"k": kind, "t": token}) + "\\n")
        ledger.flush()
        time.sleep(0.02)
"""
PRODUCE_SECONDS = "14"  # past the cut, the failover, 4 s of partition and the heal


def _producer(command: list[str], url: str, ledger: Path, side: str, wait: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*command, "-c", PRODUCER, url, str(ledger), side, PRODUCE_SECONDS, wait],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.fixture(scope="module", autouse=True)
def _alone_on_the_machine() -> Iterator[None]:
    """One network namespace or Docker engine test at a time (tests/test_docker_image.py holds the
    same lock): a Docker engine must not meet the veth, and the SUBNET of another run may be ours."""
    with machine_lock("network"):
        yield


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    made = Namespace()
    yield made
    made.remove()


@pytest.mark.parametrize("mode", ["default", "async-bare"])
def test_a_partitioned_primary_erases_nothing_acknowledged_at_the_defaults(
    tmp_path: Path, namespace: Namespace, mode: str
) -> None:
    deployment = Deployment(tmp_path, namespace, guarded=mode == "default")
    wait_for = "default" if mode == "default" else "0"
    try:
        with smq.Client(settings=smq.Settings(url=deployment.url("127.0.0.1"))) as admin:
            admin.create_queue(QUEUE)
        producers = [
            _producer(
                [sys.executable], deployment.url("127.0.0.1"), tmp_path / "outside.jsonl", "outside", wait_for
            ),
            _producer(
                namespace.wrap(tmp_path, sys.executable).split(),
                deployment.url(OUTSIDE),
                tmp_path / "inside.jsonl",
                "inside",
                wait_for,
            ),
        ]
        time.sleep(3)  # both producers under way through the primary
        namespace.cut()
        deployment.until(
            lambda: deployment.primary_address() not in (None, (INSIDE, deployment.primary.port)),
            "the Sentinels to promote a replica outside",
        )
        time.sleep(4)  # the producer inside goes on against the cut-off primary
        namespace.heal()
        for producer in producers:
            output, _ = producer.communicate(timeout=60)
            assert producer.returncode == 0, output.decode()[-3000:]
        # The Sentinels turn the old primary into a replica of the new one: its data is replaced.
        deployment.until(
            lambda: (
                deployment.primary.client().info("replication")["role"] == "slave"
                and deployment.primary.client().info("replication")["master_link_status"] == "up"
            ),
            "the old primary to follow the new one",
        )
        stored: set[str] = set()
        with smq.Client(settings=smq.Settings(url=deployment.url("127.0.0.1"), wait_replicas=0)) as reader:
            queue = reader.queue(QUEUE)
            while batch := queue.receive(10, visibility_timeout=600):
                stored.update(m.body for m in batch)
    finally:
        deployment.stop()
    lines = [
        json.loads(line)
        for name in ("inside", "outside")
        for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()
    ]
    acknowledged = {line["t"] for line in lines if line["k"] == "sent"}
    erased = sorted(acknowledged - stored, key=lambda t: (t.split("-")[0], int(t.split("-")[1])))
    inside_acked = {t for t in acknowledged if t.startswith("inside-")}
    kinds = {k: sum(1 for line in lines if line["k"] == k) for k in ("sent", "unknown", "refused")}
    print(f"{mode}: {kinds}, {len(inside_acked)} acknowledged inside, {len(erased)} erased")
    assert inside_acked, "the producer beside the primary had no send acknowledged before the cut"
    if mode == "default":
        assert erased == [], f"{len(erased)} acknowledged sends erased: {erased[:20]}"
    else:
        # The control: without waiting, the cut-off primary acknowledged sends that healing erased.
        assert erased and all(t.startswith("inside-") for t in erased), erased[:20]
