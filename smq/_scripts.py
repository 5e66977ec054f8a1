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
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """Runs scripts by name against one Redis (or Redis Cluster) client."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        # A single-node client gets a lean path that skips redis-py's command
        # machinery (about 18 us a call, more than the scripts cost Redis).
        pool = getattr(redis, "connection_pool", None)
        self._pool = pool if isinstance(redis, Redis) and pool is not None else None

    def run(self, name: str, keys: QueueKeys, args: Sequence[Any]) -> Any:
        source = sources()[name]
        key_names = [keys.by_kind(kind) for kind in source.key_kinds]
        try:
            return self._evalsha(source.sha, key_names, args)
        except NoScriptError:
            self._redis.script_load(source.text)
            return self._evalsha(source.sha, key_names, args)

    def _evalsha(self, sha: str, key_names: list[str], args: Sequence[Any]) -> Any:
        pool = self._pool
        if pool is None:
            return self._redis.evalsha(sha, len(key_names), *key_names, *args)
        connection = pool.get_connection()
        try:
            connection.send_command("EVALSHA", sha, len(key_names), *key_names, *args)
            return connection.read_response()
        except (ConnectionError, TimeoutError, OSError):
            connection.disconnect()
            raise
        finally:
            pool.release(connection)
