"""Loads the Lua scripts of ``lua/`` and runs them by name.

Each script starts with a header naming its keys (``-- KEYS[n] <kind> (...)``);
the loader reads those kinds and fills them from :class:`QueueKeys`, so the
header is the one statement of which keys a script touches. The helpers of
``lua/includes/`` are spliced in front of every script. Scripts run by
EVALSHA and are loaded (on every primary of a cluster) when Redis answers
NOSCRIPT, which means the script did not run and so is safe to repeat.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hiredis
from redis import Redis
from redis.exceptions import ConnectionError, NoScriptError, TimeoutError

from ._keys import KINDS, QueueKeys

_KEY_LINE = re.compile(r"^-- KEYS\[(\d+)\] (\w+) \(", re.MULTILINE)


def lua_dir() -> Path:
    """The folder holding the scripts: in a checkout, ``lua/`` beside ``smq/``."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "lua", here / "lua"):
        if (candidate / "includes").is_dir():
            return candidate
    raise FileNotFoundError("smq's Lua scripts are missing from the installation")


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


@functools.cache
def sources() -> dict[str, ScriptSource]:
    """Every script of the lua folder, read once per process on first use."""
    folder = lua_dir()
    prelude = "".join(p.read_text() + "\n" for p in sorted((folder / "includes").glob("*.lua")))
    loaded = {}
    for path in sorted(folder.glob("*.lua")):
        body = path.read_text()
        text = prelude + body
        loaded[path.stem] = ScriptSource(
            name=path.stem,
            text=text,
            sha=hashlib.sha1(text.encode()).hexdigest(),
            key_kinds=parse_key_kinds(path.stem, body),
        )
    return loaded


class ScriptRunner:
    """Runs scripts by name against one Redis (or Redis Cluster) client.

    On a single-node client each thread that runs scripts holds a connection
    of its own, packed and read without redis-py's command machinery: about
    15 us less client CPU a call, more than most scripts cost Redis.
    """

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        pool = getattr(redis, "connection_pool", None)
        self._pool = pool if isinstance(redis, Redis) and pool is not None else None
        self._local = threading.local()
        self._lock = threading.Lock()
        # Weak: a connection closes when the thread holding it ends.
        self._held: weakref.WeakSet[Any] = weakref.WeakSet()
        self._key_lists: dict[tuple[str, str], list[str]] = {}

    def run(self, name: str, keys: QueueKeys, args: Sequence[Any]) -> Any:
        source = sources()[name]
        key_names = self._key_lists.get((name, keys.name))
        if key_names is None:
            key_names = [keys.by_kind(kind) for kind in source.key_kinds]
            if len(self._key_lists) < 10_000:
                self._key_lists[(name, keys.name)] = key_names
        try:
            return self._evalsha(source.sha, key_names, args)
        except NoScriptError:
            self._redis.script_load(source.text)
            return self._evalsha(source.sha, key_names, args)

    def _evalsha(self, sha: str, key_names: list[str], args: Sequence[Any]) -> Any:
        if self._pool is None:
            return self._redis.evalsha(sha, len(key_names), *key_names, *args)
        connection = self._connection()
        try:
            connection.send_packed_command(_pack(("EVALSHA", sha, len(key_names), *key_names, *args)))
            return connection.read_response()
        except (ConnectionError, TimeoutError, OSError):
            self._drop(connection)
            raise

    def _connection(self) -> Any:
        local = self._local
        connection = getattr(local, "connection", None)
        if connection is None or local.pid != os.getpid():
            # A forked child must not share its parent's socket.
            assert self._pool is not None
            connection = self._pool.connection_class(**self._pool.connection_kwargs)
            local.connection, local.pid = connection, os.getpid()
            with self._lock:
                self._held.add(connection)
        return connection

    def _drop(self, connection: Any) -> None:
        connection.disconnect()
        self._local.connection = None
        with self._lock:
            self._held.discard(connection)

    def close(self) -> None:
        """Close the connections the threads hold."""
        with self._lock:
            held = list(self._held)
            self._held = weakref.WeakSet()
        for connection in held:
            connection.disconnect()


def _pack(command: tuple[Any, ...]) -> list[bytes]:
    return [hiredis.pack_command(command)]
