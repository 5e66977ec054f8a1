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
- at ``max_connections`` open connections, a new one takes the place of the
  connection that has waited longest for its request headers (a client that
  sends them slowly, or nothing), else of the one idle longest between
  requests: clients that hold any number of slow sockets, from any number of
  addresses, cannot lock out clients that send their requests at once. Only
  when every connection is busy with a request (a long poll, say) is the new
  one answered ``503 Service Unavailable`` (``Connection: close``) and closed;
- beyond ``max_per_address`` from the new connection's address (TCP; 0: no
  cap) it is refused so too.

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
# Seconds a connection has waited for its headers, or been idle, before it may make room for a
# new one: an ordinary client sends its headers within milliseconds of connecting, so only
# clients opening more than --max-connections sockets a second can keep it out.
_WAIT_BEFORE_SHED = 1.0
# Descriptors beyond the connections: Redis connections of the threads, Pub/Sub, logs.
_OTHER_FILES = 96


def raise_file_limit(max_connections: int) -> int:
    """Raise the soft limit on open files to hold ``max_connections``, up to the hard limit;
    how many connections the limit holds (``max_connections``, or fewer: said once).

    Past the file limit, accepting would fail with EMFILE, and no stalled connection
    could be shed to make room: the guard's limit must stay under it.
    """
    needed = max_connections + _OTHER_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return max_connections
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft >= needed:
        return max_connections
    allowed = max(1, soft - _OTHER_FILES)
    log.warning(
        "open file limit %d is below --max-connections %d + %d: serving at most %d connections; "
        "raise the limit (ulimit -n, LimitNOFILE) to hold more",
        soft,
        max_connections,
        _OTHER_FILES,
        allowed,
    )
    return allowed


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
        self.refused = 0  # answered 503: over the limit with every connection busy, or per address
        self.shed = 0  # closed to make room for a new one
        self.timed_out = 0  # closed for headers that did not come in time
        self._by_transport: dict[asyncio.BaseTransport, _Guarded] = {}
        # Connections that wait for a request's headers, and those idle between requests, each in
        # the order they began to wait: the first of each is the one to give up for a new one.
        # Each -> when it began to wait (the loop's time).
        self.awaiting: dict[_Guarded, float] = {}
        self.idle: dict[_Guarded, float] = {}
        self._warned_at = 0.0
        self._refused_since_warning = 0
        self._shed_warned_at = 0.0
        self._shed_since_warning = 0

    def __call__(self) -> asyncio.Protocol:
        if self.open >= self.max_connections and not self._shed_one():
            self.note_refused(
                f"{self.open} open, the most --max-connections allows, each busy with a request"
            )
            return _Refused()
        assert self.factory is not None, "set the guard's factory before serving"
        self.open += 1
        guarded = _Guarded(self, self.factory())
        # Waiting for its headers from now: a burst accepted before any connection_made runs
        # still finds the stalled connections to give up.
        self.awaiting[guarded] = asyncio.get_running_loop().time()
        return guarded

    def _shed_one(self) -> bool:
        """Close the connection that has waited longest for its request headers, else the one idle
        longest between requests, to make room for a new one; False when there is none."""
        now = asyncio.get_running_loop().time()
        oldest, what = (
            _first_before(self.awaiting, now - _WAIT_BEFORE_SHED),
            "waiting for its request headers",
        )
        if oldest is None:
            # Idle a moment at least: aiohttp may still be writing the reply of its last request.
            oldest, what = _first_before(self.idle, now - _WAIT_BEFORE_SHED), "idle between requests"
        if oldest is None:
            return False
        oldest.shed()
        self.shed += 1
        self._shed_since_warning += 1
        now = time.monotonic()
        if now - self._shed_warned_at >= _WARN_EVERY:
            log.warning(
                "closed %d connection(s) to admit new ones (--max-connections %d reached; the last "
                "closed had waited longest, %s)",
                self._shed_since_warning,
                self.max_connections,
                what,
            )
            self._shed_warned_at, self._shed_since_warning = now, 0
        return True

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
    """aiohttp's protocol for one connection, with a timer on the headers of each request.

    Counted in the guard from the factory's call until ``_forget`` (closed, refused, or shed).
    """

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
        self._address = ""  # set once admitted under the per-address cap
        self._counted = True
        self._inner_made = False  # aiohttp's protocol saw the connection: tell it when it ends

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        if not self._counted:  # shed before it was made
            transport.abort()
            return
        address = _address(transport)
        if not self._guard.admit(address):
            self._forget()
            transport.write(REFUSAL)
            transport.close()
            return
        self._address = address
        self._transport = transport
        self._guard._by_transport[transport] = self
        # A connection that sends nothing at all is timed like one that stalls mid-headers.
        self._start_timer()
        self._inner_made = True
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self._forget()
        if self._inner_made:
            self._inner.connection_lost(exc)

    def _forget(self) -> None:
        """Count this connection as gone (it is closed, or closing); once."""
        if not self._counted:
            return
        self._counted = False
        guard = self._guard
        if self._transport is not None:
            guard._by_transport.pop(self._transport, None)
        guard.awaiting.pop(self, None)
        guard.idle.pop(self, None)
        guard.open -= 1
        guard.release(self._address)

    def shed(self) -> None:
        """Close this connection at once to make room for a new one (see ``ConnectionGuard``)."""
        if not self._counted:
            return
        self._cancel_timer()
        self._forget()  # counted out now: the new connection takes its place at once
        transport = self._transport
        if transport is not None:  # else connection_made aborts it
            assert isinstance(transport, asyncio.WriteTransport)
            transport.abort()

    def data_received(self, data: bytes) -> None:
        if not self._counted:
            return  # refused, or shed: nothing to serve
        if self._awaiting_headers and self._since is None:
            began = self._start_timer()  # the first byte of the next request
            self._guard.idle.pop(self, None)
            self._guard.awaiting[self] = began
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if not self._counted:
            return None
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def headers_complete(self) -> None:
        self._awaiting_headers = False
        self._since = None  # the timer, if armed, finds nothing to time when it fires
        self._guard.awaiting.pop(self, None)

    def request_done(self) -> None:
        self._awaiting_headers = True
        if self._counted:  # kept alive, until the next request's first byte
            self._guard.idle[self] = asyncio.get_running_loop().time()

    def _start_timer(self) -> float:
        """Time the headers begun now; when they began (the loop's time)."""
        loop = asyncio.get_running_loop()
        self._since = since = loop.time()
        if self._timer is None:
            self._timer = loop.call_at(since + self._guard.header_timeout, self._headers_too_slow)
        return since

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _headers_too_slow(self) -> None:
        self._timer = None
        since = self._since
        if not self._counted or not self._awaiting_headers or since is None:
            return  # no request's headers are awaited now: the next request's first byte arms it again
        loop = asyncio.get_running_loop()
        due = since + self._guard.header_timeout
        if loop.time() < due:  # headers of a later request than the one it was set for
            self._timer = loop.call_at(due, self._headers_too_slow)
            return
        assert self._transport is not None
        log.info(
            "closed a connection from %s: no complete request headers within %g s",
            _peer(self._transport),
            self._guard.header_timeout,
        )
        self._guard.timed_out += 1
        self._transport.close()


def _first_before(waiting: dict[_Guarded, float], since: float) -> _Guarded | None:
    """The connection that began to wait first, if it began before ``since``."""
    for connection, began in waiting.items():
        return connection if began <= since else None
    return None


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
