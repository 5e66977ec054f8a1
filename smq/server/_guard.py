"""Connection limits of ``smq serve``: how many connections, and how long a request's headers may take.

aiohttp bounds the time a connection may sit idle between requests
(``keepalive_timeout``), but nothing bounds the time a client takes to send
the request line and headers once it has started: a client that sends half a
request line and stops keeps its connection (and a file descriptor) until the
idle timer, if any, fires. Nor does it limit how many connections are open.

``ConnectionGuard`` wraps the protocol aiohttp makes for each connection:

- a connection's first request must have its headers complete within
  ``header_timeout`` of the connection being accepted, and each later request
  within ``header_timeout`` of its first byte (the wait for that first byte is
  the keep-alive idle time, aiohttp's);
- beyond ``max_connections`` open connections, or ``max_per_address`` from
  the new connection's address (TCP; 0: no cap), a new connection is
  answered ``503 Service Unavailable`` (``Connection: close``) and closed at
  once.

Its ``middleware`` tells it when a request's headers are complete (aiohttp
calls the handler then) and when the handler is done.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger("smq.serve")

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_REFUSAL_BODY = b"too many connections; retry later\n"
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: " + str(len(_REFUSAL_BODY)).encode() + b"\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"\r\n" + _REFUSAL_BODY
)
_WARN_EVERY = 10.0  # seconds between two warnings about refused connections
# Descriptors beyond the connections: Redis connections of the threads, Pub/Sub, logs.
_OTHER_FILES = 96


def raise_file_limit(max_connections: int) -> None:
    """Raise the soft limit on open files to hold ``max_connections``, up to the hard limit.

    Below it, accepting would fail on the file limit before the connection
    limit refuses politely: say so once.
    """
    needed = max_connections + _OTHER_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft < needed:
        log.warning(
            "open file limit %d is below --max-connections %d + %d: lower --max-connections "
            "or raise the limit (ulimit -n)",
            soft,
            max_connections,
            _OTHER_FILES,
        )


class ConnectionGuard:
    """Counts connections and times the headers of their requests.

    ``factory`` makes aiohttp's protocol for one connection (``runner.server``);
    set it before the listening socket accepts. Call the guard itself as the
    protocol factory of ``loop.create_server``.
    """

    def __init__(self, *, max_connections: int, header_timeout: float, max_per_address: int = 0) -> None:
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.max_per_address = max_per_address
        self.by_address: dict[str, int] = {}
        self.factory: Callable[[], asyncio.Protocol] | None = None
        self.open = 0
        self.refused = 0
        self._by_transport: dict[asyncio.BaseTransport, _Guarded] = {}
        self._warned_at = 0.0
        self._refused_since_warning = 0

    def __call__(self) -> asyncio.Protocol:
        if self.open >= self.max_connections:
            self.note_refused(f"{self.open} open, the most --max-connections allows")
            return _Refused()
        assert self.factory is not None, "set the guard's factory before serving"
        self.open += 1
        return _Guarded(self, self.factory())

    def note_refused(self, why: str) -> None:
        """Count a refused connection; warn at most every ``_WARN_EVERY`` seconds."""
        self.refused += 1
        self._refused_since_warning += 1
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY:
            log.warning("refused %d connection(s): %s", self._refused_since_warning, why)
            self._warned_at, self._refused_since_warning = now, 0

    def admit(self, address: str) -> bool:
        """Whether a new connection from ``address`` stays under the per-address cap (and count it)."""
        if not address or not self.max_per_address:
            return True
        held = self.by_address.get(address, 0)
        if held >= self.max_per_address:
            self.note_refused(f"{held} open from {address}, the most --max-connections-per-address allows")
            return False
        self.by_address[address] = held + 1
        return True

    def release(self, address: str) -> None:
        """A connection ``admit`` counted has closed."""
        if address and self.max_per_address:
            held = self.by_address.get(address, 0) - 1
            if held > 0:
                self.by_address[address] = held
            else:
                self.by_address.pop(address, None)

    @web.middleware
    async def middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        """Stop the header clock while the request is handled; restart it for the next one."""
        transport = request.transport
        guarded = self._by_transport.get(transport) if transport is not None else None
        if guarded is not None:
            guarded.headers_complete()
        try:
            return await handler(request)
        finally:
            if guarded is not None:
                guarded.request_done()


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, with a timer on the headers of each request."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.BaseTransport | None = None
        # One timer per connection, not one per request: it stays armed across requests and,
        # when it fires, closes the connection only if the headers begun at ``_since`` are
        # still incomplete; else it is set again for them, or dropped until the next request.
        self._timer: asyncio.TimerHandle | None = None
        self._since: float | None = None  # when the headers now awaited began (None: none yet)
        self._awaiting_headers = True
        self._address = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        address = _address(transport)
        if not self._guard.admit(address):
            self._guard.open -= 1  # counted by the factory; this one is refused instead
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(REFUSAL)
            transport.close()
            return
        self._address = address
        self._transport = transport
        self._guard._by_transport[transport] = self
        # A connection that sends nothing at all is timed like one that stalls mid-headers.
        self._start_timer()
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._transport is None:
            return  # refused in connection_made: aiohttp's protocol never saw it
        self._guard._by_transport.pop(self._transport, None)
        self._transport = None
        self._guard.open -= 1
        self._guard.release(self._address)
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return  # refused, or closed: nothing to serve
        if self._awaiting_headers and self._since is None:
            self._start_timer()  # the first byte of the next request
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._transport is None:
            return None
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def headers_complete(self) -> None:
        self._awaiting_headers = False
        self._since = None  # the timer, if armed, finds nothing to time when it fires

    def request_done(self) -> None:
        self._awaiting_headers = True

    def _start_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._since = loop.time()
        if self._timer is None:
            self._timer = loop.call_at(self._since + self._guard.header_timeout, self._headers_too_slow)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _headers_too_slow(self) -> None:
        self._timer = None
        since = self._since
        if self._transport is None or not self._awaiting_headers or since is None:
            return  # no request's headers are awaited now: the next request's first byte arms it again
        loop = asyncio.get_running_loop()
        due = since + self._guard.header_timeout
        if loop.time() < due:  # headers of a later request than the one it was set for
            self._timer = loop.call_at(due, self._headers_too_slow)
            return
        log.info(
            "closed a connection from %s: no complete request headers within %g s",
            _peer(self._transport),
            self._guard.header_timeout,
        )
        self._transport.close()


class _Refused(asyncio.Protocol):
    """A connection over the limit: a 503 reply, then closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(REFUSAL)
        transport.close()


def _address(transport: asyncio.BaseTransport) -> str:
    """The client's IP address of a TCP connection; '' for others (a Unix socket)."""
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)
