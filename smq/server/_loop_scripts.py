"""Script calls from the event loop: one pipelined asyncio connection to a single Redis.

A core call handed to a thread costs ``smq serve`` a hop there and back (two
wake-ups, the GIL changing hands) for each Redis round trip: under load that
was about half of the server's CPU per request. Here the event loop writes
the EVALSHA itself on a connection of its own and awaits the reply; requests
in flight at once share the connection, so their calls reach Redis together.

It serves a single Redis (TCP, TLS or a Unix socket, with or without AUTH)
once the client has checked it. Anything else goes to the client's thread
pool as before, with the same outcome: a Redis Cluster, Sentinel, replica
waits (``Settings.replicas``), TLS with OCSP checks, a script Redis does not
know yet (NOSCRIPT: the blocking path loads it; the script did not run, so
running it there is safe).

Outcomes are the blocking path's: no connection is ``Unavailable`` (nothing
was sent); a connection lost or a reply later than ``socket_timeout`` after
the write is ``OutcomeUnknown``, for every call then waiting on it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import hiredis
import redis
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, NoScriptError, ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._client import Client
from .._scripts import _REPLICA, NotSent
from .._steps import Blocking, ScriptCall, Steps

log = logging.getLogger("smq.serve")

Hop = Callable[..., Awaitable[Any]]

CONNECTION_NAME = "smq-serve-loop"
_SET_NAME: tuple[Any, ...] = ("CLIENT", "SETNAME", CONNECTION_NAME)


class _Protocol(asyncio.Protocol):
    """Replies in order to the calls written: one future per call.

    A call without its reply ``timeout`` seconds after it was written closes
    the connection: every call then waiting fails, its outcome unknown.
    """

    def __init__(self, timeout: float | None) -> None:
        self._reader = hiredis.Reader(protocolError=InvalidResponse, replyError=BaseParser.parse_error)
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
        if self.closed or self.transport is None:
            raise NotSent("the connection to Redis is closed")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiting.append((future, loop.time()))
        self.transport.write(packed)
        if self._watch is None and self._timeout is not None:
            self._watch = loop.call_later(self._timeout, self._check)
        return future

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

    def __init__(self, client: Client, hop: Hop) -> None:
        self._client = client
        self._hop = hop
        self._options = _plain_redis_options(client)
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    async def drive(self, steps: Steps[Any]) -> Any:
        """Run ``steps`` (see ``smq._steps``); their result."""
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = steps.send(answer) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value
            error = None
            try:
                if isinstance(step, Blocking):
                    answer = await self._hop(step.function, *step.args)
                else:
                    answer = await self.run(step)
            except Exception as caught:
                answer, error = None, caught

    async def run(self, call: ScriptCall) -> Any:
        """``Client.run`` for one script call."""
        client = self._client
        if self._options is None or not client._checked:
            # The first call checks Redis (eviction policy, ACL) in the blocking path.
            return await self._hop(
                client.run, call.script, call.keys, call.args, queue=call.queue, tolerate=call.tolerate
            )
        try:
            reply = await self._run(call)
        except NoScriptError:
            # Not run: the blocking path loads the script on the node, then runs it.
            return await self._hop(
                client.run, call.script, call.keys, call.args, queue=call.queue, tolerate=call.tolerate
            )
        except Exception as error:
            client._at_boundary(call.script, call.queue, _raise, error)
            raise
        return client._status_checked(reply, call.queue, call.tolerate)

    async def _run(self, call: ScriptCall) -> Any:
        command, _ = self._client._scripts._command(call.script, call.keys, call.args)
        packed = hiredis.pack_command(command)
        protocol = await self._connection()
        reply = await protocol.call(packed)
        if isinstance(reply, ReadOnlyError):
            raise NotSent(_REPLICA.format(error=reply)) from reply  # a replica: nothing ran
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def _connection(self) -> _Protocol:
        protocol = self._protocol
        if protocol is not None and not protocol.closed:
            return protocol
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            protocol = self._protocol
            if protocol is None or protocol.closed:
                protocol = self._protocol = await self._connect()
        return protocol

    async def _connect(self) -> _Protocol:
        options = self._options
        assert options is not None
        loop = asyncio.get_running_loop()

        def made() -> _Protocol:
            return _Protocol(options["socket_timeout"])

        try:
            if options.get("path"):
                opening = loop.create_unix_connection(made, options["path"])
            else:
                tls = options.get("tls")
                opening = loop.create_connection(made, options["host"], options["port"], ssl=tls)
            _, protocol = await asyncio.wait_for(opening, options["socket_connect_timeout"])
        except (OSError, asyncio.TimeoutError) as error:
            raise NotSent(f"cannot connect to Redis: {error or 'timed out'}") from error
        try:
            for command in _hello(options):
                reply = await protocol.call(hiredis.pack_command(command))
                if isinstance(reply, Exception):
                    protocol.abort(reply)
                    raise NotSent(f"Redis refused the connection: {reply}") from reply
            # Its name in CLIENT LIST; an ACL without +client|setname refuses it, which changes nothing.
            await protocol.call(hiredis.pack_command(_SET_NAME))
        except (RedisConnectionError, RedisTimeoutError) as error:
            raise NotSent(f"cannot connect to Redis: {error}") from error  # no call was written yet
        return protocol

    def close(self) -> None:
        if self._protocol is not None:
            self._protocol.abort(RedisConnectionError("smq serve is stopping"))
            self._protocol = None


def _raise(error: BaseException) -> None:
    raise error


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


def _plain_redis_options(client: Client) -> dict[str, Any] | None:
    """The connection options of a plain Redis this module can talk to, else None."""
    redis_client = client._redis
    if type(redis_client) is not redis.Redis or client._scripts.wait is not None:
        return None
    pool = redis_client.connection_pool
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
        tls = _tls_context(pool.connection_class(**pool.connection_kwargs))
        if tls is None:
            return None
        options["tls"] = tls
    options.setdefault("socket_timeout", None)
    options.setdefault("socket_connect_timeout", None)
    return options


def _tls_context(connection: redis.SSLConnection) -> ssl.SSLContext | None:
    """The TLS settings of redis-py's ``connection`` as a context for asyncio, made as redis-py
    makes its own; None for what it checks beyond the handshake (OCSP)."""
    if connection.ssl_validate_ocsp or connection.ssl_validate_ocsp_stapled:
        return None
    context = ssl.create_default_context()
    context.check_hostname = connection.check_hostname
    context.verify_mode = connection.cert_reqs
    for flag in connection.ssl_include_verify_flags or ():
        context.verify_flags |= flag
    for flag in connection.ssl_exclude_verify_flags or ():
        context.verify_flags &= ~flag
    if connection.certfile or connection.keyfile:
        context.load_cert_chain(
            certfile=connection.certfile, keyfile=connection.keyfile, password=connection.certificate_password
        )
    if connection.ca_certs is not None or connection.ca_path is not None or connection.ca_data is not None:
        context.load_verify_locations(
            cafile=connection.ca_certs, capath=connection.ca_path, cadata=connection.ca_data
        )
    if connection.ssl_min_version is not None:
        context.minimum_version = connection.ssl_min_version
    if connection.ssl_ciphers:
        context.set_ciphers(connection.ssl_ciphers)
    return context
