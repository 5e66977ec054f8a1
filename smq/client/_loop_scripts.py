"""Script calls from the event loop: one pipelined asyncio connection per Redis node.

A core call handed to a thread costs ``smq serve`` a hop there and back (two
wake-ups, the GIL changing hands) for each Redis round trip: under load that
was about 40 % of the server's CPU per request. Here the event loop writes
the EVALSHA itself on a connection of its own and awaits the reply; requests
in flight at once share the connection, so their calls reach Redis together.

It serves a single Redis or the primaries of a Redis Cluster (TCP, TLS or a
Unix socket, with or without AUTH) once the client has checked them. The
rest goes to the client's thread pool as before, with the same outcome:
Sentinel, replica waits (``Settings.replicas``), TLS with OCSP checks, a
script Redis does not know yet (NOSCRIPT) and a slot that moved (MOVED, ASK):
the script did not run, so the blocking path loads it or follows the slot,
and runs it.

Outcomes are the blocking path's: no connection is ``Unavailable`` (nothing
was sent); a connection lost or a reply later than ``socket_timeout`` after
the write is ``OutcomeUnknown``, for every call then waiting on it. One
connect per node runs at a time, shared by the calls that wait for it; after
a failed one, calls fail at once for ``_RETRY_AFTER`` seconds.

``smq serve`` and the asyncio client (``smq.aio``) both run their calls here.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    AuthenticationError,
    InvalidResponse,
    MovedError,
    NoScriptError,
    ReadOnlyError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..connection._redis_errors import reply_error
from ..core._scripts import _REPLICA, NotSent, PartlyRun, _any_ran
from ..core._steps import ScriptCall, ScriptCalls, Steps
from ._client import Client, _Named

try:
    import hiredis

    _HIREDIS = True
except ImportError:  # smq shipped without it (a zip for Spark executors): every call takes a thread
    _HIREDIS = False

log = logging.getLogger("smq.loop")

Hop = Callable[..., Awaitable[Any]]

# After a failed connect, calls to that node fail at once (not run) for this long, rather than
# each trying again: a Redis that is down costs one attempt per node per interval.
_RETRY_AFTER = 0.25

CONNECTION_NAME = "smq-serve-loop"
"""The name of ``smq serve``'s connections in ``CLIENT LIST``."""


class _Protocol(asyncio.Protocol):
    """Replies in order to the calls written: one future per call.

    A call without its reply ``timeout`` seconds after it was written closes
    the connection: every call then waiting fails, its outcome unknown.
    """

    def __init__(self, timeout: float | None) -> None:
        # MOVED, ASK, ...: as redis-py 6+ parses them on every connection (redis-py 5 does not).
        self._reader = hiredis.Reader(protocolError=InvalidResponse, replyError=reply_error)
        self._waiting: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        self._timeout = timeout
        self._watch: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        waiting = self._waiting
        while True:
            reply = reader.gets()
            if reply is False:
                return
            if not waiting:
                self.abort(InvalidResponse("a reply from Redis that no call waits for"))
                return
            future, _ = waiting.popleft()
            if not future.done():  # not given up (its request was cancelled)
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"the connection to Redis was lost ({exc})" if exc else "the connection to Redis closed"
        self.abort(RedisConnectionError(reason))

    def abort(self, error: Exception) -> None:
        """Close; every call still waiting fails with ``error`` (their outcome is unknown)."""
        self.closed = True
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self.transport is not None:
            self.transport.abort()
        while self._waiting:
            future, _ = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)

    def call(self, packed: bytes) -> asyncio.Future[Any]:
        """Write one packed command; its reply (or error reply, as an exception object)."""
        return self.call_many([packed])[0]

    def call_many(self, packed: list[bytes]) -> list[asyncio.Future[Any]]:
        """Write packed commands in one write; their replies, in order."""
        if self.closed or self.transport is None or self.transport.is_closing():
            # Redis closed it (idle timeout, restart) and the loop has not heard yet: not sent.
            raise NotSent("the connection to Redis is closed")
        loop = asyncio.get_running_loop()
        now = loop.time()
        futures = [loop.create_future() for _ in packed]
        self.transport.write(packed[0] if len(packed) == 1 else b"".join(packed))
        self._waiting.extend((future, now) for future in futures)
        if self._watch is None and self._timeout is not None:
            self._watch = loop.call_later(self._timeout, self._check)
        return futures

    def _check(self) -> None:
        """Close the connection if its oldest call has waited ``timeout``; else look again later."""
        self._watch = None
        if not self._waiting or self._timeout is None:
            return
        loop = asyncio.get_running_loop()
        due = self._waiting[0][1] + self._timeout
        if loop.time() >= due:
            self.abort(RedisTimeoutError(f"no reply from Redis within {self._timeout:g} s"))
        else:
            self._watch = loop.call_at(due, self._check)


class LoopScripts:
    """Runs a core call's steps on the event loop (see the module's docstring)."""

    def __init__(self, client: Client, hop: Hop, name: str = CONNECTION_NAME) -> None:
        self._client = client
        self._hop = hop
        self._name = name
        self._cluster = type(client._redis) is RedisCluster
        single = None if self._cluster else _node_options(client)
        # Each node's connection options (None: a node this module does not talk to).
        self._options: dict[str, dict[str, Any] | None] = {"": single}
        self._protocols: dict[str, _Protocol] = {}
        self._opening: dict[str, asyncio.Future[_Protocol]] = {}
        self._failed: dict[str, tuple[float, str]] = {}  # node -> (when, why) of its last failed connect
        self._refreshing: asyncio.Future[Any] | None = None

    async def drive(self, steps: Steps[Any]) -> Any:
        """Run ``steps`` (see ``smq.core._steps``); their result."""
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = steps.send(answer) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value
            error = None
            try:
                if isinstance(step, ScriptCall):
                    answer = await self.run(step)
                elif isinstance(step, ScriptCalls):
                    answer = await self.run_many(step)
                else:
                    answer = await self._hop(step.run)
            except Exception as caught:
                answer, error = None, caught

    async def run(self, call: ScriptCall) -> Any:
        """``Client.run`` for one script call."""
        client = self._client
        if client._reread_due():
            await self._hop(client._reread_if_due)  # INFO is blocking in redis-py: a thread
        command, slot = client._scripts._command(call.script, call.keys, call.args)
        node = self._loop_node(slot)
        if node is None:
            return await self._hop(call.run, client)
        try:
            reply = await self._run(node, command)
        except (NoScriptError, MovedError, AskError):
            # Not run: the blocking path loads the script on the node, or follows the slot
            # to its new node (and notes it in the slot map), then runs it.
            return await self._hop(call.run, client)
        except Exception as error:
            if self._cluster and isinstance(error, (RedisConnectionError, RedisTimeoutError)):
                self._refresh_map()  # a failover may have moved the slot
            client._at_boundary(call.script, call.queue, _raise, error)
            raise
        return client._status_checked(reply, call.queue, call.tolerate)

    async def run_many(self, calls: ScriptCalls) -> list[Any]:
        """``Client.run_many``: scripts of one queue written together, their replies in order."""
        client = self._client
        if client._reread_due():
            await self._hop(client._reread_if_due)
        commands = [client._scripts._command(script, keys, args) for script, keys, args in calls.calls]
        node = self._loop_node(commands[0][1])
        named = _Named(calls.calls)
        if node is None:
            return await self._hop(calls.run, client)  # type: ignore[no-any-return]
        try:
            protocol = await self._connection(node)
            waiting = protocol.call_many([hiredis.pack_command(command) for command, _ in commands])
            replies = [await future for future in waiting]
        except Exception as error:
            if self._cluster and isinstance(error, (RedisConnectionError, RedisTimeoutError)):
                self._refresh_map()
            client._at_boundary(named, calls.queue, _raise, error)
            raise
        ran = _any_ran(replies)
        for index, reply in enumerate(replies):
            if isinstance(reply, (NoScriptError, MovedError, AskError)):
                # That one did not run (the others did): the blocking path runs it alone.
                script, keys, args = calls.calls[index]
                one = ScriptCall(script, keys, args, calls.queue, calls.tolerate)
                replies[index] = await self._hop(one.run, client)
            elif isinstance(reply, Exception) and ran:
                # Refused (out of memory, say) after another of the same write ran: what ran
                # is not known to the caller, as on the blocking path.
                partly = PartlyRun(f"{reply} (another script of the same write ran)")
                client._at_boundary(named, calls.queue, _raise, partly)
            elif isinstance(reply, ReadOnlyError):
                not_run = NotSent(_REPLICA.format(error=reply))
                client._at_boundary(named, calls.queue, _raise, not_run)
            elif isinstance(reply, Exception):
                client._at_boundary(named, calls.queue, _raise, reply)
        for reply in replies:
            client._status_checked(reply, calls.queue, calls.tolerate)
        return replies

    def _loop_node(self, slot: int) -> str | None:
        """The node to run a call of ``slot`` on from the loop; None for the blocking path: before
        the client's first call has checked Redis (eviction policy, ACL, whether to wait for
        replicas), while the eviction policy is unsafe (the blocking path refuses writes), with
        replica waits (sent on the script's own connection), and for nodes this module does not
        talk to."""
        client = self._client
        return self._node(slot) if client._loop_may_write() and client._scripts.wait is None else None

    def _node(self, slot: int) -> str | None:
        """The name of the node that serves ``slot`` ("" for a single Redis), if this module talks to it."""
        if not _HIREDIS:
            return None
        if not self._cluster:
            return "" if self._options[""] is not None else None
        try:
            node = self._client._redis.nodes_manager.get_node_from_slot(slot)
        except Exception:  # noqa: BLE001 - a slot not covered: the blocking path says what is wrong
            return None
        if node.name not in self._options:
            pool = self._client._redis.get_redis_connection(node).connection_pool
            self._options[node.name] = _pool_options(pool)
        return node.name if self._options[node.name] is not None else None

    def _refresh_map(self) -> None:
        """Read the slot map afresh, in a thread (redis-py's read blocks); one at a time."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._hop(self._client._scripts._refresh_map))

    async def _run(self, node: str, command: tuple[Any, ...]) -> Any:
        packed = hiredis.pack_command(command)
        protocol = await self._connection(node)
        reply = await protocol.call(packed)
        if isinstance(reply, ReadOnlyError):
            raise NotSent(_REPLICA.format(error=reply)) from reply  # a replica: nothing ran
        if isinstance(reply, Exception):
            raise reply  # LOADING, NOAUTH, ...: as the blocking path gets them, from redis-py
        return reply

    async def _connection(self, node: str) -> _Protocol:
        """The open connection to ``node``; one connect at a time per node, shared by its waiters."""
        protocol = self._protocols.get(node)
        if protocol is not None and not protocol.closed:
            return protocol
        opening = self._opening.get(node)
        if opening is None or opening.done():
            failed = self._failed.get(node)
            if failed is not None and asyncio.get_running_loop().time() < failed[0] + _RETRY_AFTER:
                raise NotSent(failed[1])  # it failed a moment ago: no new attempt yet
            opening = self._opening[node] = asyncio.ensure_future(self._open(node))
            opening.add_done_callback(_retrieved)
        # Shielded: a request given up while it waits leaves the connect to finish for the others.
        return await asyncio.shield(opening)

    async def _open(self, node: str) -> _Protocol:
        options = self._options[node]
        assert options is not None
        try:
            protocol = await _connect(options, self._name)
        except NotSent as error:
            self._failed[node] = (asyncio.get_running_loop().time(), str(error))
            log.warning("no connection to Redis for the event loop's scripts: %s", error)
            if self._cluster:
                self._refresh_map()  # the node is gone: its replica may serve the slot now
            raise
        self._failed.pop(node, None)
        self._protocols[node] = protocol
        return protocol

    def close(self) -> None:
        for protocol in self._protocols.values():
            protocol.abort(RedisConnectionError("smq serve is stopping"))
        self._protocols.clear()


async def _connect(options: dict[str, Any], name: str) -> _Protocol:
    """A connection to the node of ``options``, signed in as redis-py's would be."""
    loop = asyncio.get_running_loop()

    def made() -> _Protocol:
        return _Protocol(options["socket_timeout"])

    try:
        if options.get("path"):
            opening = loop.create_unix_connection(made, options["path"])
        else:
            # Made at each connect, as redis-py does: certificate files renewed on disk are read.
            tls = _tls_context(redis.SSLConnection(**options["tls"])) if "tls" in options else None
            opening = loop.create_connection(made, options["host"], options["port"], ssl=tls)
        _, protocol = await asyncio.wait_for(opening, options["socket_connect_timeout"])
    except (OSError, ValueError, asyncio.TimeoutError) as error:
        raise NotSent(f"cannot connect to Redis: {error or 'timed out'}") from error
    try:
        for command in _hello(options):
            reply = await protocol.call(hiredis.pack_command(command))
            if isinstance(reply, Exception):
                protocol.abort(reply)
                raise NotSent(f"Redis refused the connection: {reply}") from reply
        if not options.get("client_name"):
            # Its name in CLIENT LIST; an ACL without +client|setname refuses it, which changes nothing.
            setname: tuple[Any, ...] = ("CLIENT", "SETNAME", name)
            named = await protocol.call(hiredis.pack_command(setname))
            if isinstance(named, AuthenticationError):  # NOAUTH: Redis wants a password it was not given
                protocol.abort(named)
                raise NotSent(f"Redis refused the connection: {named}") from named
    except (RedisConnectionError, RedisTimeoutError) as error:
        raise NotSent(f"cannot connect to Redis: {error}") from error  # no call was written yet
    except BaseException:
        protocol.abort(RedisConnectionError("the connection was not set up"))
        raise
    return protocol


def _raise(error: BaseException) -> None:
    raise error


def _retrieved(opening: asyncio.Future[Any]) -> None:
    """Mark a connect's failure seen, even if every request that waited for it was given up."""
    if not opening.cancelled():
        opening.exception()


def _hello(options: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The commands that open a connection as redis-py's would: AUTH, SELECT."""
    commands: list[tuple[Any, ...]] = []
    password, username = options.get("password"), options.get("username")
    if password is not None:
        commands.append(("AUTH", username, password) if username else ("AUTH", password))
    if options.get("db"):
        commands.append(("SELECT", options["db"]))
    if options.get("client_name"):
        commands.append(("CLIENT", "SETNAME", options["client_name"]))
    return commands


def _node_options(client: Client) -> dict[str, Any] | None:
    """The connection options of a single Redis this module can talk to, else None."""
    redis_client = client._redis
    if type(redis_client) is not redis.Redis:
        return None
    return _pool_options(redis_client.connection_pool)


def _pool_options(pool: Any) -> dict[str, Any] | None:
    """The options of a redis-py connection pool's connections, if this module can make the same."""
    if type(pool) is not redis.ConnectionPool or pool.connection_class not in (
        redis.Connection,
        redis.UnixDomainSocketConnection,
        redis.SSLConnection,
    ):
        return None  # Sentinel, or a connection class of the caller's
    options = dict(pool.connection_kwargs)
    if options.get("credential_provider") is not None or options.get("protocol") not in (None, 2, "2"):
        return None
    if pool.connection_class is redis.SSLConnection:
        if _tls_context(pool.connection_class(**pool.connection_kwargs)) is None:
            return None
        options["tls"] = dict(pool.connection_kwargs)  # the context is made at each connect
    options.setdefault("socket_timeout", None)
    options.setdefault("socket_connect_timeout", None)
    return options


def _tls_context(connection: redis.SSLConnection) -> ssl.SSLContext | None:
    """The TLS settings of redis-py's ``connection`` as a context for asyncio, made as redis-py
    makes its own; None for what it checks beyond the handshake (OCSP).

    Options that redis-py 5.0 lacks (verify flags, minimum version, ciphers) are read where
    present, as that redis-py applies them where present."""
    if connection.ssl_validate_ocsp or connection.ssl_validate_ocsp_stapled:
        return None
    context = ssl.create_default_context()
    context.check_hostname = connection.check_hostname
    context.verify_mode = connection.cert_reqs
    for flag in getattr(connection, "ssl_include_verify_flags", None) or ():
        context.verify_flags |= flag
    for flag in getattr(connection, "ssl_exclude_verify_flags", None) or ():
        context.verify_flags &= ~flag
    if connection.certfile or connection.keyfile:
        context.load_cert_chain(
            certfile=connection.certfile, keyfile=connection.keyfile, password=connection.certificate_password
        )
    if connection.ca_certs is not None or connection.ca_path is not None or connection.ca_data is not None:
        context.load_verify_locations(
            cafile=connection.ca_certs, capath=connection.ca_path, cadata=connection.ca_data
        )
    if getattr(connection, "ssl_min_version", None) is not None:
        context.minimum_version = connection.ssl_min_version
    if getattr(connection, "ssl_ciphers", None):
        context.set_ciphers(connection.ssl_ciphers)
    return context
