"""Loads the Lua scripts of ``lua/`` and runs them by name.

Each script starts with a header naming its keys (``-- KEYS[n] <kind> (...)``);
the loader reads those kinds and fills them from ``QueueKeys``, so the
header is the one statement of which keys a script touches. The helpers of
``lua/includes/`` are spliced in front of every script. Scripts run by
EVALSHA and are loaded (on every primary of a cluster) when Redis answers
NOSCRIPT, which means the script did not run and so is safe to repeat.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.resources
import logging
import os
import re
import select
import socket
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis import Redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ConnectionError,
    MovedError,
    NoScriptError,
    ReadOnlyError,
    ResponseError,
    TimeoutError,
)

from ..connection._fork import reset_after_fork
from ..connection._replicas import NO_WAIT, NotReplicated, SentinelCount, Wait
from ..connection._sentinel import sentinel_replicas
from ._keys import KINDS, QueueKeys

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # a C extension: not in a zip shipped with --py-files, say
    _hiredis_pack = None
    logging.getLogger("smq").warning(
        "hiredis could not be loaded: smq packs Redis commands in Python, which is slower"
    )

_KEY_LINE = re.compile(r"^-- KEYS\[(\d+)\] (\w+) \(", re.MULTILINE)


def lua_files() -> Traversable:
    """The scripts, as package resources of ``smq.lua``: ``lua/`` in a checkout, ``smq/lua``
    when installed, or inside a zip that holds smq (``smq spark-zip``)."""
    try:
        folder = importlib.resources.files("smq.lua")
    except ModuleNotFoundError:
        folder = None
    if folder is None or not folder.joinpath("includes").is_dir():
        raise FileNotFoundError(
            "smq's Lua scripts are missing: the package smq.lua (with its includes) is not where smq is"
        )
    return folder


def lua_dir() -> Path:
    """The folder holding the scripts, where they are files (a checkout, an installation)."""
    folder = lua_files()
    if not isinstance(folder, Path):
        raise FileNotFoundError(f"smq's Lua scripts are not files of their own here: {folder}")
    return folder


@dataclass(frozen=True)
class ScriptSource:
    """One script, ready to run: its text with includes, digest and key kinds."""

    name: str
    text: str
    sha: str
    key_kinds: tuple[str, ...]


def parse_key_kinds(name: str, body: str) -> tuple[str, ...]:
    found = [(int(n), kind) for n, kind in _KEY_LINE.findall(body)]
    if [n for n, _ in found] != list(range(1, len(found) + 1)):
        raise ValueError(f"{name}.lua: KEYS in the header must be numbered 1..n")
    for _, kind in found:
        if kind not in KINDS:
            raise ValueError(f"{name}.lua: unknown key kind {kind!r}")
    return tuple(kind for _, kind in found)


def sources(sharded: bool = False) -> dict[str, ScriptSource]:
    """Every script of the lua folder, read once per process on first use.

    ``sharded``: the texts that publish long-poll wake-ups with ``SPUBLISH``
    (sharded Pub/Sub, Redis 7+: delivered on the queue's own node only)
    instead of ``PUBLISH`` (which a Redis Cluster sends to every node).
    """
    return _sharded_sources() if sharded else _sources()


@functools.cache
def _sharded_sources() -> dict[str, ScriptSource]:
    return {name: _with_text(s, s.text.replace(_PUBLISH, _SPUBLISH)) for name, s in _sources().items()}


def _with_text(source: ScriptSource, text: str) -> ScriptSource:
    return ScriptSource(source.name, text, hashlib.sha1(text.encode()).hexdigest(), source.key_kinds)


_PUBLISH = "'PUBLISH'"
_SPUBLISH = "'SPUBLISH'"


@functools.cache
def _sources() -> dict[str, ScriptSource]:
    folder = lua_files()
    prelude = "".join(text + "\n" for _, text in _lua_texts(folder.joinpath("includes")))
    definitions = _definitions(prelude)
    loaded = {}
    for name, body in _lua_texts(folder):
        text = _prelude_for(body, definitions) + body
        loaded[name] = ScriptSource(
            name=name,
            text=text,
            sha=hashlib.sha1(text.encode()).hexdigest(),
            key_kinds=parse_key_kinds(name, body),
        )
    return loaded


def _lua_texts(folder: Traversable) -> list[tuple[str, str]]:
    """The ``*.lua`` files of ``folder``, by name: (name without ``.lua``, text)."""
    found = [entry for entry in folder.iterdir() if entry.name.endswith(".lua") and entry.is_file()]
    return [
        (entry.name[: -len(".lua")], entry.read_text(encoding="utf-8")) for entry in sorted(found, key=_name)
    ]


def _name(entry: Traversable) -> str:
    return entry.name


_DEFINITION = re.compile(r"^local (?:function )?([A-Za-z_]\w*)")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _definitions(prelude: str) -> list[tuple[str, str]]:
    """The prelude's top-level ``local`` definitions, in order: (name, its text)."""
    found: list[tuple[str, list[str]]] = []
    for line in prelude.splitlines(keepends=True):
        match = _DEFINITION.match(line)
        if match:
            found.append((match.group(1), [line]))
        elif found:
            found[-1][1].append(line)
    return [(name, "".join(lines)) for name, lines in found]


def _prelude_for(body: str, definitions: list[tuple[str, str]]) -> str:
    """The definitions ``body`` uses, directly or through another, in prelude order.

    Every script runs its prelude on every call: defining helpers it never
    calls costs Redis a few microseconds a call.
    """
    wanted = set(_NAME.findall(body))
    for name, definition in reversed(definitions):  # a definition uses only earlier ones
        if name in wanted:
            wanted.update(_NAME.findall(definition))
    return "".join(definition for name, definition in definitions if name in wanted)


_IDLE_CHECK_SECONDS = 1.0
_REDIRECTS = 5


# A write refused by a replica ran nothing: the node was demoted (a failover), or the
# URL names a replica.
_REPLICA = (
    "the Redis node is a read-only replica, so the script did not run ({error}): after a failover, retry"
)


class NotSent(ConnectionError):
    """The script was not (wholly) sent, so it did not run: no connection, or the write failed."""

    connected = False  # whether the failure came after the connection stood (while writing)


class PartlyRun(ConnectionError):
    """Of scripts written together, some ran and another was refused, or the write broke
    after the first: what ran is not known to the caller (an outcome unknown)."""


class ScriptRunner:
    """Runs scripts by name against one Redis (or Redis Cluster) client.

    Each thread that runs scripts holds a connection of its own to each node
    it talks to, and packs and reads EVALSHA without redis-py's command
    machinery: 15 to 35 us less client CPU a call, more than most scripts cost
    Redis. A slot that moved (MOVED, ASK: the script did not run) is sent
    again to its new node, on that node's connection of this thread.

    With a ``wait`` (see ``smq.connection._replicas``), a script that writes is followed,
    on its connection, by the wait command: it covers the writes of that
    connection only, so no write may take another way to Redis.
    """

    def __init__(self, redis: Any, wait: Wait | None = None) -> None:
        self._redis = redis
        self._cluster = isinstance(redis, RedisCluster)
        pool = getattr(redis, "connection_pool", None)
        self._pool = pool if isinstance(redis, Redis) and pool is not None else None
        self.wait: Wait | None = None
        self.set_wait(wait)
        # How a wait asks the Sentinels which replicas count, on a Sentinel deployment.
        sentinels = self._pool is not None and hasattr(self._pool, "sentinel_manager")
        self._sentinel_count: SentinelCount | None = (
            functools.partial(sentinel_replicas, self._pool) if sentinels else None
        )
        # Long-poll wake-ups by sharded Pub/Sub (SPUBLISH): set once the servers are known.
        self.sharded = False
        self._local = threading.local()
        self._lock = threading.Lock()
        # Weak: a connection closes when the thread holding it ends.
        self._held: weakref.WeakSet[Any] = weakref.WeakSet()
        # (script, queue, sharded) -> (the command up to the script's arguments, the keys' slot)
        self._routes: dict[tuple[str, str, bool], tuple[tuple[Any, ...], int]] = {}
        # Scripts that ran (so were loaded on a node); see run_many.
        self._ran: set[str] = set()
        reset_after_fork(self)

    def set_wait(self, wait: Wait | None) -> None:
        """Follow each script that writes with ``wait`` from now on (None: answer at once)."""
        if wait is not None and self._pool is None and not self._cluster:
            raise TypeError("waiting for replicas needs a redis.Redis or redis.cluster.RedisCluster client")
        self.wait = wait

    def _after_fork(self) -> None:
        # Another thread of the parent may have held the lock at the fork.
        self._lock = threading.Lock()
        self._held = weakref.WeakSet()

    def _command(self, name: str, keys: QueueKeys, args: Sequence[Any]) -> tuple[tuple[Any, ...], int]:
        """(the EVALSHA command of script ``name`` on a queue, the hash slot of its keys)."""
        route = self._routes.get((name, keys.name, self.sharded))
        if route is None:
            source = sources(self.sharded)[name]
            key_names = [keys.by_kind(kind) for kind in source.key_kinds]
            route = (("EVALSHA", source.sha, len(key_names), *key_names), key_slot(key_names[0].encode()))
            if len(self._routes) < 10_000:
                self._routes[(name, keys.name, self.sharded)] = route
        head, slot = route
        return (*head, *args), slot

    def run(self, name: str, keys: QueueKeys, args: Sequence[Any]) -> Any:
        command, slot = self._command(name, keys, args)
        wait = None if name in NO_WAIT else self.wait
        try:
            reply = self._send(command, slot, wait)
        except NoScriptError:
            # Load it on that node only: a cluster client's SCRIPT LOAD goes to every
            # primary and fails while any of them is down, when the others could serve.
            self._send(("SCRIPT", "LOAD", sources(self.sharded)[name].text), slot, None)
            reply = self._send(command, slot, wait)
        self._ran.add(name)
        return reply

    def run_many(self, calls: Sequence[tuple[str, QueueKeys, Sequence[Any]]]) -> list[Any]:
        """Run scripts of one queue in order, written to Redis together; their replies, in order.

        One write and one wake-up of Redis for all of them (a delete riding on
        the next receive). A call that Redis refused without running it
        (NOSCRIPT, a slot that moved) runs again on its own, after the others.
        A lost connection after the write leaves every call's outcome unknown.
        Until each script has run once through this runner, the calls go one by
        one, so that the first use (which loads the scripts) keeps their order.
        """
        commands = []
        slots = set()
        writes = False  # whether any of them changes data (a wait follows)
        together = True  # whether each has run here before (see above)
        for name, keys, args in calls:
            command, slot = self._command(name, keys, args)
            commands.append(command)
            slots.add(slot)
            writes = writes or name not in NO_WAIT
            together = together and name in self._ran
        target = self._target(slot, None)
        if target is None or len(slots) > 1 or not together:
            return [self.run(*call) for call in calls]
        replies = self._send_many_to(*target, commands, self.wait if writes else None)
        for reply in replies:
            if isinstance(reply, ResponseError):
                break
        else:
            return replies  # each ran
        ran = _any_ran(replies)
        for i, reply in enumerate(replies):
            if isinstance(reply, (NoScriptError, MovedError, AskError)):
                if isinstance(reply, MovedError):
                    _note_moved(self._redis.nodes_manager, reply)
                # Not run, while the calls after it may have (a node that lost its scripts, a
                # slot that moved between the two): it runs after them, out of order, this once.
                try:
                    replies[i] = self.run(*calls[i])
                except (ResponseError, ConnectionError) as error:
                    if ran:
                        raise PartlyRun(f"{error} (another script of the same write ran)") from error
                    raise
                ran = True
            elif isinstance(reply, ReadOnlyError) and not ran:
                raise NotSent(_REPLICA.format(error=reply)) from reply  # a replica ran none of them
            elif isinstance(reply, ResponseError) and ran:
                raise PartlyRun(f"{reply} (another script of the same write ran)") from reply
            elif isinstance(reply, ResponseError):
                raise reply  # none ran: as for one script (LOADING, CLUSTERDOWN, TRYAGAIN, ...)
        return replies

    def _send_many_to(
        self, node: str, pool: Any, commands: list[tuple[Any, ...]], wait: Wait | None
    ) -> list[Any]:
        """Write ``commands`` at once on this thread's connection to ``node``; each reply or error."""
        try:
            connection, asked = self._write(node, pool, commands, wait)
        except NotSent as error:
            if error.connected and len(commands) > 1:
                # The write broke after it began: the first script may have gone out whole, and run.
                raise PartlyRun(str(error)) from error
            raise
        replies: list[Any] = []
        try:
            for _ in commands:
                try:
                    replies.append(connection.read_response())
                except ResponseError as error:
                    replies.append(error)  # this one did not run; the others' replies follow
            if wait is not None:
                self._settle(node, connection, wait, asked)
        except (ConnectionError, TimeoutError, OSError) as error:
            self._drop(node, connection)
            ran = _any_ran(replies)
            if isinstance(error.__context__, ReadOnlyError) and not ran:
                raise NotSent(_REPLICA.format(error=error.__context__)) from error
            self._refresh_map()
            raise
        except ResponseError:
            self._drop(node, connection)  # the wait's reply was an error: start afresh
            raise
        return replies

    def _settle(self, node: str, connection: Any, wait: Wait, asked: int) -> None:
        """The wait after a change on ``connection`` (written now unless it went with the change)."""
        if not wait.pipelined:
            connection.send_packed_command(_packed(connection, wait.commands_for(asked)))
        try:
            wait.settle(node, connection, asked, self._sentinel_count)
        except NotReplicated as error:
            if error.deposed:
                self._drop(node, connection)  # the next call asks the Sentinels afresh
            raise

    def read(self, key: str, *command: Any) -> Any:
        """Send one command that only reads ``key``, to its node, on the scripts' connection."""
        return self._send(command, key_slot(key.encode()), None)

    def write(self, key: str, *command: Any) -> Any:
        """Send one command that changes ``key`` to its node, and wait as scripts do."""
        return self._send(command, key_slot(key.encode()), self.wait)

    def _send(self, command: tuple[Any, ...], slot: int, wait: Wait | None) -> Any:
        asking: Any = None
        for _ in range(_REDIRECTS):
            target = self._target(slot, asking)
            if target is None:
                return self._redis.execute_command(*command)  # not a redis-py client smq knows
            try:
                return self._send_to(*target, command, wait, asking is not None)
            except MovedError as moved:
                # The slot has a new owner (resharding, failover): note it, send again.
                _note_moved(self._redis.nodes_manager, moved)
                asking = None
            except AskError as ask:
                asking = ask  # the slot is moving: this key is at the node named, for now
        raise NotSent(f"the slot of the call kept moving ({_REDIRECTS} redirects): retry")

    def _write(
        self, node: str, pool: Any, commands: list[tuple[Any, ...]], wait: Wait | None
    ) -> tuple[Any, int]:
        """This thread's connection to ``node``, with ``commands`` (and a pipelined wait) written
        on it; and how many replicas the wait asks for (0 without one)."""
        connection = self._connection(node, pool)
        packed = list(commands)
        asked = 0
        connected = False
        try:
            # Connecting, or writing: a failure here leaves a command unsent or
            # cut short (a peer gone before the last byte ran nothing).
            if connection._sock is None:  # as connect() itself asks (see _closed_by_peer)
                connection.connect()
            connected = True
            if wait is not None:
                asked = wait.asked(node, connection)  # of the node connected to (Sentinel: found now)
                if wait.pipelined:
                    packed.extend(wait.commands_for(asked))
            connection.send_packed_command(_packed(connection, packed))
        except (ConnectionError, TimeoutError, OSError) as error:
            self._drop(node, connection)
            # The node is gone: without a fresh map every later call would ask it again,
            # after its replica had long taken its slots over.
            self._refresh_map()
            unsent = NotSent(str(error))
            unsent.connected = connected
            raise unsent from error
        return connection, asked

    def _send_to(
        self, node: str, pool: Any, command: tuple[Any, ...], wait: Wait | None, asking: bool
    ) -> Any:
        connection, asked = self._write(node, pool, [("ASKING",), command] if asking else [command], wait)
        try:
            if asking:
                connection.read_response()
            reply = connection.read_response()
        except BusyLoadingError:
            if wait is not None and wait.pipelined:
                self._drop(node, connection)  # the wait's reply is still to come
            raise  # answered LOADING: the script did not run
        except ResponseError as error:
            if wait is not None and wait.pipelined:
                # The wait's reply is still to come; rather than wait for it, start afresh.
                self._drop(node, connection)
            if isinstance(error, ReadOnlyError):
                raise NotSent(_REPLICA.format(error=error)) from error
            raise  # LOADING, NOSCRIPT, MOVED, ASK: the script did not run
        except (ConnectionError, TimeoutError, OSError) as error:
            self._drop(node, connection)
            if isinstance(error.__context__, ReadOnlyError):
                # Sentinel's connection saw READONLY and closed: the old primary is a replica now.
                raise NotSent(_REPLICA.format(error=error.__context__)) from error
            self._refresh_map()  # a failover may have moved the slot
            raise
        if wait is not None:
            try:
                self._settle(node, connection, wait, asked)
            except (ConnectionError, TimeoutError, OSError):
                self._drop(node, connection)
                raise
        return reply

    def _refresh_map(self) -> None:
        """On a Redis Cluster, read the slot map afresh (best effort: a later call tries again)."""
        if self._cluster:
            with contextlib.suppress(Exception):
                self._redis.nodes_manager.initialize()

    def _target(self, slot: int, asking: Any) -> tuple[str, Any] | None:
        if self._pool is not None:
            return "", self._pool
        if not self._cluster:
            return None
        nodes = self._redis.nodes_manager
        if asking is not None:
            node = nodes.get_node(host=asking.host, port=asking.port)
            if node is None:
                raise NotSent(f"the slot of the call is moving to a node not yet known ({asking}): retry")
        else:
            node = nodes.get_node_from_slot(slot)
        return node.name, self._redis.get_redis_connection(node).connection_pool

    def _connection(self, node: str, pool: Any) -> Any:
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            # New thread, or a forked child, which must not share its parent's sockets.
            local.connections, local.used, local.pid = {}, {}, os.getpid()
        connection = local.connections.get(node)
        now = time.monotonic()
        if connection is not None and now - local.used.get(node, now) > _IDLE_CHECK_SECONDS:
            if _closed_by_peer(connection):
                # Redis closed it (restart, failover, idle timeout) while it sat
                # unused: nothing was sent, so a fresh connection is safe.
                self._drop(node, connection)
                connection = None
        local.used[node] = now
        if connection is None:
            connection = pool.connection_class(**pool.connection_kwargs)
            local.connections[node] = connection
            with self._lock:
                self._held.add(connection)
        return connection

    def _drop(self, node: str, connection: Any) -> None:
        connection.disconnect()
        self._local.connections.pop(node, None)
        with self._lock:
            self._held.discard(connection)

    def close(self) -> None:
        """Close the connections the threads hold."""
        with self._lock:
            held = list(self._held)
            self._held = weakref.WeakSet()
        for connection in held:
            connection.disconnect()


def _packed(connection: Any, commands: list[tuple[Any, ...]]) -> list[bytes]:
    """``commands`` in Redis's protocol: by hiredis (C), else by redis-py's packer (Python).

    Several commands by hiredis come as one piece: redis-py writes each piece with a system call
    of its own, and Redis may read each on its own too.
    """
    if _hiredis_pack is not None:
        if len(commands) == 1:
            return [_hiredis_pack(commands[0])]
        return [b"".join([_hiredis_pack(command) for command in commands])]
    return [chunk for command in commands for chunk in connection.pack_command(*command)]


def _any_ran(replies: list[Any]) -> bool:
    """Whether any of the replies of scripts written together is a script's own (it ran)."""
    return any(not isinstance(reply, ResponseError) for reply in replies)


def _note_moved(nodes: Any, moved: MovedError) -> None:
    """Point the slot of a MOVED reply at its new node in redis-py's map."""
    if hasattr(nodes, "move_slot"):  # newer redis-py
        nodes.move_slot(moved)
    else:
        nodes.update_moved_exception(moved)  # applied at the next lookup


def text(value: Any) -> str:
    """A script reply value as text (replies come as bytes or integers)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def reply_pairs(reply: Any) -> list[tuple[Any, Any]]:
    """The (field, value) pairs of a map reply: a dict under RESP3, a flat list under RESP2."""
    if isinstance(reply, dict):
        return list(reply.items())
    return list(zip(reply[::2], reply[1::2], strict=True))


def text_pairs(flat: Sequence[Any]) -> dict[str, str]:
    """A flat ``[field, value, ...]`` reply (HGETALL) as a dict of text."""
    values = [text(v) for v in flat]
    return dict(zip(values[::2], values[1::2], strict=True))


def _closed_by_peer(connection: Any) -> bool:
    """Whether an idle connection has something to read: from Redis, only its end.

    An unconnected one has nothing to read. ``_sock`` is what redis-py 5 to 8 hold
    while connected (``is_connected`` is newer than redis-py 5).
    """
    sock = connection._sock
    if sock is None:
        return False
    if not isinstance(sock, socket.socket) or not hasattr(select, "poll"):
        try:
            return bool(connection.can_read(timeout=0))
        except (ConnectionError, TimeoutError, OSError):
            return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))  # its end, or stray bytes: either way, not to be reused
