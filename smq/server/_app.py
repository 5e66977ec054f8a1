"""The HTTP server: protocol detection, authentication, dispatch, logs, health, shutdown."""

from __future__ import annotations

import asyncio
import functools
import gc
import hmac
import itertools
import logging
import signal
import ssl
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .._errors import (
    EvictionPolicyUnsafe,
    RedisCannotPersist,
    RedisOutOfMemory,
    RedisReadOnly,
    SmqError,
    TooFewReplicas,
    Unavailable,
)
from ..client._client import Client
from ..client._loop_polls import LongPolls
from ..client._loop_scripts import LoopScripts
from ..client._queue import Queue
from ..connection._outage import Outage
from ..operations._history import HISTORY_QUEUES, HISTORY_STEP, sample_queues
from . import _wire
from ._access_log import AccessLog, file_handler
from ._actions import ACTIONS
from ._authorize import Policies, after, authorize
from ._consumers import SqsConsumers
from ._context import Context, ServerConfig, path_region
from ._errors import SqsError, from_core, public_text
from ._guard import ConnectionGuard, raise_file_limit
from ._metrics import ApiMetrics
from ._sigv4 import check_payload, scope_region, verify
from ._tls import reload_certificate, server_context
from .console._routes import Console

log = logging.getLogger("smq.serve")

# The largest legal request: a batch of 1 MiB of messages, with attribute
# values base64'd and every character escaped by the encoding.
_MAX_REQUEST_BYTES = 8 * 1024 * 1024
_JSON_TARGET_PREFIX = "AmazonSQS."


class Service:
    """One ``smq serve`` process: shared by all requests, stateless beyond them."""

    def __init__(self, client: Client, config: ServerConfig) -> None:
        self.client = client
        self.config = config
        self._pool = ThreadPoolExecutor(config.threads, thread_name_prefix="smq-serve")
        self.polls: LongPolls | None = None
        self.closing = False
        self.in_flight = 0
        self._owner = uuid.uuid4().hex
        self._request_ids = request_ids()
        self._move_tasks: asyncio.Task[None] | None = None
        self._history: asyncio.Task[None] | None = None
        self._move_kick = asyncio.Event()
        # Done when the pass of the move task runner that began after a kick ends.
        self._move_pass: asyncio.Future[None] | None = None
        self.consumers = SqsConsumers(client)
        self._consumer_beats: asyncio.Task[None] | None = None
        self.metrics = ApiMetrics(lambda: self.in_flight)
        self.policies = Policies(client)
        self.scripts = LoopScripts(client, self.call)
        self.access_log = AccessLog()
        self.drive = self.scripts.drive
        self._resolved: dict[tuple[str, str, str], str] = {}  # shared by the requests' contexts
        self._handles: dict[str, Queue] = {}

    async def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(function, *args, **kwargs))

    async def start(self) -> None:
        self.polls = LongPolls(self.client, self.call, self.drive)
        self._move_tasks = asyncio.create_task(self._run_move_tasks())
        self._history = asyncio.create_task(self._keep_history())
        self._consumer_beats = asyncio.create_task(self._beat_consumers())

    async def check_writable_at_start(self) -> None:
        """Say at once, in the log, when Redis refuses smq's writes: it serves all the same (reads,
        and writes once Redis takes them), with ``/ready`` 503 meanwhile. A Redis that does not
        answer is said by the tasks that keep trying it (once, then once a minute)."""
        try:
            await asyncio.wait_for(self.call(self.client.check_writable), READY_TIMEOUT)
        except (SmqError, asyncio.TimeoutError) as error:
            if _not_ready_reason(error) == "Redis does not answer":
                return
            log.error(
                "smq serve cannot write to Redis now, so /ready answers 503 until it can: %s",
                str(error) or f"no answer from Redis within {READY_TIMEOUT:g} s",
            )

    async def stop(self) -> None:
        self.closing = True
        if self.polls is not None:
            self.polls.close()

    async def close(self) -> None:
        self.access_log.flush()
        for task in (self._move_tasks, self._history, self._consumer_beats):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._last_consumer_beat()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.scripts.close()

    async def kick_move_tasks(self, wait: float = 0.0) -> None:
        """Wake the move task runner now; wait up to ``wait`` seconds for its pass to end,
        so that a small task is done when StartMessageMoveTask answers."""
        if self._move_pass is None:
            self._move_pass = asyncio.get_running_loop().create_future()
        done = self._move_pass
        self._move_kick.set()
        if wait > 0:
            try:
                await asyncio.wait_for(asyncio.shield(done), wait)
            except asyncio.TimeoutError:
                pass  # a big or rate-limited task goes on in the background

    async def _keep_history(self) -> None:
        """Sample the counts of the first ``HISTORY_QUEUES`` queues once per step, for the
        console's charts (every process does; each step keeps one sample whoever took it)."""
        while not self.closing:
            try:
                await self.call(sample_queues, self.client, HISTORY_QUEUES, lambda: self.closing)
            except SmqError as error:
                # Redis being away is said by the move task runner already; a gap in a chart
                # needs no second line.
                log.debug("queue history: %s", error)
            except Exception:
                log.exception("queue history failed")
            await asyncio.sleep(HISTORY_STEP - time.time() % HISTORY_STEP + 0.1)

    async def _run_move_tasks(self) -> None:
        """Work on message move tasks of any process; each runs under a lease in Redis."""
        runner = self.client.run_move_tasks
        outage = Outage(log, "message move tasks")
        while not self.closing:
            try:
                await asyncio.wait_for(self._move_kick.wait(), self.config.move_task_interval)
            except asyncio.TimeoutError:
                pass
            self._move_kick.clear()
            this_pass, self._move_pass = self._move_pass, None
            if self.closing:
                return
            try:
                await self.call(runner, owner=self._owner, deadline=time.monotonic() + 5)
            except SmqError as error:
                outage.failed(error)
            except Exception:
                log.exception("message move tasks failed")
            else:
                outage.succeeded()
            finally:
                if this_pass is not None and not this_pass.done():
                    this_pass.set_result(None)

    async def _last_consumer_beat(self) -> None:
        """Note the SQS clients served since the last beat before the process ends (2 s at most:
        a stop must not hang on a Redis that is away)."""
        counts = self.consumers.take()
        if not counts:
            return
        try:
            await asyncio.wait_for(self.call(self.consumers.flush, counts), 2.0)
        except (asyncio.TimeoutError, SmqError) as error:
            log.debug("the last note of SQS clients failed: %s", error)

    async def _beat_consumers(self) -> None:
        """Note the SQS clients that received since the last time among their queues' consumers."""
        outage = Outage(log, "noting the SQS clients among their queues' consumers")
        while not self.closing:
            await asyncio.sleep(self.config.consumer_beat_interval)
            counts = self.consumers.take()
            if not counts:
                continue
            try:
                await self.call(self.consumers.flush, counts)
            except SmqError as error:
                outage.failed(error)
            except Exception:
                log.exception("noting the SQS clients among their queues' consumers failed")
            else:
                outage.succeeded()

    # -- requests ---------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        request_id = next(self._request_ids)
        target = request.headers.get("X-Amz-Target")
        protocol = "json" if target is not None else "query"
        action = ""
        error: SqsError | None = None
        self.in_flight += 1
        body_read = False
        try:
            # A payload hash in a header is signed with the headers: check the signature
            # before waiting for (and buffering) the body of a client that may have no key.
            early = bool(self.config.access_keys) and _hashes_payload(request)
            early_sender = self._authenticate(request, None) if early else None
            body = await self._read_body(request)
            body_read = True
            if protocol == "json":
                assert target is not None
                action = (
                    target[len(_JSON_TARGET_PREFIX) :] if target.startswith(_JSON_TARGET_PREFIX) else target
                )
            else:
                form = _form(request, body)
                action = form.pop("Action", "")
                if not action and request.method == "GET":
                    # What SQS's front answers a GET that names no operation (a browser, a
                    # probe), before it looks at any signature.
                    raise SqsError("NoAction", "The request names no operation.")
            if early_sender is None:
                sender = self._authenticate(request, body)
            else:
                check_payload(request.headers, body)
                sender = early_sender
            if protocol == "json":
                if not target.startswith(_JSON_TARGET_PREFIX) or action not in ACTIONS:  # type: ignore[union-attr]
                    raise SqsError("UnknownOperationException", f"Unknown operation {target!r}.")
                params = _wire.json_params(body)
            else:
                if not action:
                    raise SqsError("MissingAction", "The request must contain the parameter Action.")
                if action not in ACTIONS:
                    raise SqsError("InvalidAction", f"The action {action} is not valid for this endpoint.")
                params = _wire.query_params(action, form)
            context = self.context(
                request,
                sender,
                path=request.path if protocol == "query" else "/",
                trace_header=request.headers.get("X-Amzn-Trace-Id") or None,
                region=scope_region(request.headers, request.rel_url.raw_query_string)
                or (path_region(request.path) if protocol == "query" else ""),
                origin=request,
            )
            await authorize(context, self.policies, action, params)
            try:
                result = await ACTIONS[action](context, params)
            finally:
                after(self.policies, action)
            response = _reply(
                protocol, action, result, request_id, protocol == "query" and _wants_json(request)
            )
        except SqsError as caught:
            error = caught
        except SmqError as caught:
            # Actions let the core's errors through: they become SQS errors here, once.
            error = from_core(caught)
        except (asyncio.CancelledError, ConnectionResetError) as gone:
            # The client went away (a hang-up mid-body shows as a reset): nobody to answer,
            # and not the server's fault, so not a 5xx.
            self._log(
                request, request_id, protocol, action, 499, "ClientClosedRequest", started, counted=True
            )
            self.metrics.observe(action, 499, "ClientClosedRequest", time.perf_counter() - started)
            if isinstance(gone, asyncio.CancelledError):
                raise
            log.info("client %s hung up during its request (%s)", request.remote, action or protocol)
            closed = web.Response(status=499)
            closed.force_close()
            return closed
        except web.HTTPRequestEntityTooLarge:
            error = SqsError(
                "InvalidParameterValue", f"The request is larger than {_MAX_REQUEST_BYTES} bytes."
            )
        except web.RequestPayloadError:
            # A body its Content-Encoding (or chunked framing) does not decode.
            error = SqsError(
                "SerializationException" if protocol == "json" else "MalformedQueryString",
                "The request body cannot be decoded as its headers describe it.",
            )
        except Exception:
            log.exception("%s %s failed", protocol, action or "request")
            error = SqsError(
                "InternalFailure", "The request processing has failed because of an internal error."
            )
        finally:
            self.in_flight -= 1
        if error is not None:
            response = _error_reply(protocol, error, request_id, protocol == "query" and _wants_json(request))
        code = error.code if error else None
        self._log(request, request_id, protocol, action, response.status, code, started)
        self.metrics.observe(action, response.status, code, time.perf_counter() - started)
        if not body_read and request.body_exists:
            # The body was not read (refused first, or too slow): the connection cannot carry
            # another request.
            response.force_close()
            if code == "RequestTimeout":
                # Reply, then close at once: no lingering read of a body that does not come.
                await response.prepare(request)
                await response.write_eof()
                if request.transport is not None:
                    request.transport.close()
        return response

    def context(
        self,
        request: web.Request,
        sender: str,
        *,
        path: str = "/",
        trace_header: str | None = None,
        region: str = "",
        origin: web.Request | None = None,
    ) -> Context:
        """The context of one request acting as ``sender`` (an access key id, '' without keys);
        ``origin``: the API request itself (its client is noted if it receives)."""
        return Context(
            client=self.client,
            config=self.config,
            call=self.call,
            drive=self.drive,
            polls=self.polls,  # type: ignore[arg-type]
            base_url=self._base_url(request),
            path=path,
            sender=sender,
            kick_move_tasks=self.kick_move_tasks,
            trace_header=trace_header,
            region=region,
            secure=request.scheme == "https",
            resolved=self._resolved,
            handles=self._handles,
            origin=origin,
            consumers=self.consumers,
        )

    async def _read_body(self, request: web.Request) -> bytes:
        """The request's body, whole within ``body_timeout`` (else ``RequestTimeout``)."""
        if request.content.is_eof():
            # All of it came with the headers (the common case): nothing to wait for, so no
            # timeout and no task of its own to run the read in.
            return await request.read()
        try:
            return await asyncio.wait_for(request.read(), self.config.body_timeout)
        except asyncio.TimeoutError:
            raise SqsError(
                "RequestTimeout",
                f"The request body did not arrive within {self.config.body_timeout:g} seconds.",
            ) from None

    def _log(
        self,
        request: web.Request,
        request_id: str,
        protocol: str,
        action: str,
        status: int,
        error: str | None,
        started: float,
        *,
        counted: bool = False,
    ) -> None:
        """Log the request (``counted``: it is still in ``in_flight``)."""
        if not self.config.access_log:
            return
        self.access_log.add(
            round(time.time(), 3),
            request_id,
            request.remote,
            protocol,
            action,
            status,
            error,
            round((time.perf_counter() - started) * 1000, 2),
            alone=self.in_flight == (1 if counted else 0),
        )

    def _authenticate(self, request: web.Request, body: bytes | None) -> str:
        if not self.config.access_keys:
            return ""
        return verify(
            request.method,
            request.rel_url.raw_path,
            request.rel_url.raw_query_string,
            request.headers,
            body,
            self.config.access_keys,
            now=time.time(),
            max_skew=self.config.max_clock_skew,
        )

    def _base_url(self, request: web.Request) -> str:
        if self.config.public_url:
            return self.config.public_url.rstrip("/")
        return f"{request.scheme}://{request.host}"

    async def health(self, request: web.Request) -> web.Response:
        """Liveness: the process serves HTTP."""
        return web.json_response({"status": "ok"})

    async def metrics_page(self, request: web.Request) -> web.Response:
        """Prometheus metrics of this process: requests, errors, latency by action."""
        token = self.config.metrics_token
        if token is not None:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return web.Response(
                    status=401,
                    text="/metrics needs Authorization: Bearer <token> (smq serve --metrics-token)\n",
                    headers={"WWW-Authenticate": 'Bearer realm="smq metrics"'},
                )
        body, content_type = self.metrics.render(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def ready(self, request: web.Request) -> web.Response:
        """Readiness: not stopping, and smq can write to Redis now (``Client.check_writable``:
        the eviction policy read afresh, and a write of probe keys on every primary)."""
        if self.closing:
            return web.json_response({"status": "stopping"}, status=503)
        try:
            await asyncio.wait_for(self.call(self.client.check_writable), READY_TIMEOUT)
        except (SmqError, asyncio.TimeoutError) as error:
            # The detail (the Redis address, which setting, a TLS error) is the operator's: the
            # log has it; the answer says only which kind of trouble.
            detail = str(error) or f"no answer from Redis within {READY_TIMEOUT:g} s"
            public_text("ServiceUnavailable", f"/ready: {detail}")
            return web.json_response({"status": "not ready", "reason": _not_ready_reason(error)}, status=503)
        return web.json_response({"status": "ready", "in_flight": self.in_flight})


READY_TIMEOUT = 2.0
"""Seconds ``/ready`` waits for Redis before it says not ready."""

# What ``/ready`` says of each kind of trouble (the log says the rest).
_REFUSING = (EvictionPolicyUnsafe, RedisOutOfMemory, RedisCannotPersist, RedisReadOnly, TooFewReplicas)


def _not_ready_reason(error: BaseException) -> str:
    if isinstance(error, _REFUSING):
        return "Redis refuses writes"
    if isinstance(error, (Unavailable, asyncio.TimeoutError)):
        return "Redis does not answer"
    return "Redis fails"


def request_ids() -> Iterator[str]:
    """Request ids in the form of random UUIDs: random per process, then counted.

    A random prefix of the process and a counter from a random start: unique,
    without the cost of a fresh UUID per request.
    """
    prefix = uuid.uuid4().hex
    start = int(prefix[20:], 16)
    head = f"{prefix[:8]}-{prefix[8:12]}-4{prefix[13:16]}-{'89ab'[int(prefix[16], 16) % 4]}{prefix[17:20]}-"
    return (f"{head}{n & 0xFFFFFFFFFFFF:012x}" for n in itertools.count(start))


def _hashes_payload(request: web.Request) -> bool:
    """Whether the request's signature covers a payload hash given in a header."""
    return "x-amz-content-sha256" in request.headers


def _form(request: web.Request, body: bytes) -> dict[str, str]:
    form = dict(parse_qsl(request.rel_url.raw_query_string, keep_blank_values=True))
    content_type = request.headers.get("Content-Type", "")
    if request.method == "POST" and (not content_type or "x-www-form-urlencoded" in content_type):
        try:
            form.update(parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False))
        except UnicodeDecodeError:
            raise SqsError("MalformedQueryString", "The form body is not UTF-8.") from None
    return form


def _wants_json(request: web.Request) -> bool:
    """A Query-protocol client that asks for JSON replies (``Accept: application/json``)."""
    return "application/json" in request.headers.get("Accept", "")


def _reply(
    protocol: str, action: str, result: dict[str, Any], request_id: str, as_json: bool = False
) -> web.Response:
    if protocol == "query" and as_json:
        return web.json_response(
            body=_wire.query_json_body(action, result, request_id), headers={"x-amzn-RequestId": request_id}
        )
    if protocol == "json":
        return web.Response(
            body=_wire.json_body(result),
            content_type=_wire.JSON_CONTENT_TYPE,
            headers={"x-amzn-RequestId": request_id},
        )
    return web.Response(
        body=_wire.query_body(action, result, request_id),
        content_type="text/xml",
        headers={"x-amzn-RequestId": request_id},
    )


def _error_reply(protocol: str, error: SqsError, request_id: str, as_json: bool = False) -> web.Response:
    if error.code == "NoAction":
        # The service's front answers it, in XML whatever the client asked for.
        return web.Response(
            status=error.status,
            body=b'<?xml version="1.0"?><UnknownOperationException/>',
            content_type="text/xml",
            headers={"x-amzn-RequestId": request_id},
        )
    if protocol == "query" and as_json:
        return web.json_response(
            status=error.status,
            body=_wire.query_json_error(error, request_id),
            headers={"x-amzn-RequestId": request_id},
        )
    if protocol == "json":
        body, headers = _wire.json_error(error)
        return web.Response(
            status=error.status,
            body=body,
            content_type=_wire.JSON_CONTENT_TYPE,
            headers={**headers, "x-amzn-RequestId": request_id},
        )
    return web.Response(
        status=error.status,
        body=_wire.query_error(error, request_id),
        content_type="text/xml",
        headers={"x-amzn-RequestId": request_id},
    )


def make_app(service: Service, guard: ConnectionGuard | None = None) -> web.Application:
    middlewares = [guard.middleware] if guard is not None else []
    app = web.Application(client_max_size=_MAX_REQUEST_BYTES, middlewares=middlewares)
    app.router.add_get("/health", service.health)
    app.router.add_get("/ready", service.ready)
    if service.config.metrics_port is None:
        app.router.add_get("/metrics", service.metrics_page)
    Console(service).install(app)
    app.router.add_route("POST", "/{tail:.*}", service.handle)
    app.router.add_route("GET", "/{tail:.*}", service.handle)
    return app


async def run(
    client: Client,
    config: ServerConfig,
    host: str,
    port: int,
    *,
    on_ready: Callable[[str], None] = lambda url: None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (or ``stop`` is set), then stop gracefully.

    A graceful stop refuses new connections, ends waiting long polls with an
    empty reply, and lets requests in flight finish (``shutdown_timeout``).
    Connections are bounded: ``max_connections`` open, ``header_timeout`` to
    send a request's headers, ``body_timeout`` its body, ``idle_timeout``
    between requests. With ``tls_cert`` and ``tls_key``, it serves HTTPS and
    SIGHUP loads both files again.
    """
    tls = None
    cert, key = config.tls_cert, config.tls_key
    if cert is not None and key is not None:
        tls = server_context(cert, key)
    service = Service(client, config)
    await service.start()
    await service.check_writable_at_start()
    guard = ConnectionGuard(
        max_connections=raise_file_limit(config.max_connections),
        header_timeout=config.header_timeout,
        max_per_address=config.max_connections_per_address or 0,
    )
    service.metrics.watch_connections(guard)
    # handler_cancellation: a client that hangs up ends its request, so a long
    # poll whose client is gone stops waiting and takes no message it cannot deliver.
    runner = web.AppRunner(
        make_app(service, guard),
        access_log=None,
        shutdown_timeout=config.shutdown_timeout,
        handler_cancellation=True,
        keepalive_timeout=config.idle_timeout,
    )
    await runner.setup()
    site = _GuardedSite(runner, guard, host, port, tls, handshake_timeout=config.header_timeout)
    await site.start()
    metrics_runner = await _serve_metrics(service) if config.metrics_port is not None else None
    if config.access_keys and config.metrics_token is None and metrics_runner is None:
        log.warning(
            "/metrics answers anyone who reaches the API: give --metrics-token, or serve it "
            "elsewhere with --metrics-port"
        )
    # What is made until now (modules, the app, the client) lives as long as the process: out of
    # the cyclic collector's sight, so that its collections, several a second under load, do not
    # walk it each time (about a third of the collector's time, 2 % of the server's CPU).
    gc.collect()
    gc.freeze()
    bound = runner.addresses[0]
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    on_ready(f"{'https' if tls else 'http'}://{shown}:{bound[1]}")
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if tls is not None and cert is not None and key is not None:
        # SIGHUP: new connections get the certificate and key the files hold now.
        loop.add_signal_handler(signal.SIGHUP, reload_certificate, tls, cert, key)
    try:
        await stop.wait()
    finally:
        log.info("stopping: ending long polls, finishing %d request(s)", service.in_flight)
        try:
            await service.stop()
            await runner.cleanup()
            if metrics_runner is not None:
                await metrics_runner.cleanup()
        finally:
            await service.close()  # writes the access lines kept, even if the cleanup failed
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)


async def _serve_metrics(service: Service) -> web.AppRunner:
    """``/metrics`` (and ``/health``) on a listener of their own (``metrics_host``, ``metrics_port``)."""
    config = service.config
    app = web.Application()
    app.router.add_get("/metrics", service.metrics_page)
    app.router.add_get("/health", service.health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, config.metrics_host, config.metrics_port).start()
    bound = runner.addresses[0]
    log.info("metrics on http://%s:%s/metrics", bound[0], bound[1])
    return runner


class _GuardedSite(web.BaseSite):
    """aiohttp's TCP site, with each connection's protocol made through a ``ConnectionGuard``.

    With ``ssl_context``, connections speak TLS; a handshake must end within
    ``handshake_timeout`` seconds.
    """

    def __init__(
        self,
        runner: web.AppRunner,
        guard: ConnectionGuard,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        *,
        handshake_timeout: float = 60.0,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._guard = guard
        self._host, self._port = host, port
        self._handshake_timeout = handshake_timeout
        assert runner.server is not None
        guard.factory = runner.server

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        tls = self._ssl_context
        self._server = await loop.create_server(
            self._guard,
            self._host,
            self._port,
            reuse_address=True,
            ssl=tls,
            ssl_handshake_timeout=self._handshake_timeout if tls else None,
        )


class _OneLineClientErrors(logging.Filter):
    """aiohttp's own logs of requests it rejects, as one line each, without a traceback.

    aiohttp answers a malformed request (request line, headers, framing) 400
    itself and logs it with its traceback; that is the client's error, so it
    becomes one line. A body that failed to decode was answered and logged by
    the handler already: aiohttp's second report of it, as it drains the
    body, is dropped. Everything else passes unchanged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, web.RequestPayloadError):
            return False
        if isinstance(error, HttpProcessingError) and 400 <= error.code < 500:
            remote = record.args[0] if isinstance(record.args, tuple) and record.args else None
            reason = " ".join(word for word in str(error.message).split() if word != "^")
            record.msg = "bad HTTP request from %s: %d %s"
            record.args = (remote, error.code, reason[:300])
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
            return True
        # aiohttp logs its rejection of a first request that is not HTTP at
        # all at debug level; the logger lets debug through for that alone.
        return record.levelno >= logging.INFO


def log_to_stderr(level: int = logging.INFO, *, access_file: str | None = None) -> None:
    """The server's log on stderr; the access lines there too, or appended to ``access_file``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access = handler if access_file is None else file_handler(access_file)
    for name, to in (("smq.access", access), ("smq.serve", handler)):
        logger = logging.getLogger(name)
        logger.addHandler(to)
        logger.setLevel(level)
        logger.propagate = False
    server = logging.getLogger("aiohttp.server")
    server.addHandler(handler)
    server.addFilter(_OneLineClientErrors())
    server.setLevel(logging.DEBUG if level <= logging.INFO else level)
    server.propagate = False
