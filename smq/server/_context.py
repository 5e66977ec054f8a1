"""What an action sees: the server's settings, the core client, and the request's origin."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._errors import InvalidQueueName
from ..client._client import Client
from ..client._loop_polls import LongPolls
from ..client._queue import Queue
from ..core._names import ACCOUNT, REGION, check_sqs_name, namespace, qualify, split_name
from ..core._steps import Steps
from ._consumers import SqsConsumers
from ._errors import NO_QUEUE, SqsError

if TYPE_CHECKING:
    from aiohttp import web

# Queue URLs resolved and queue handles a server keeps, at most (then it starts afresh).
_MAX_KEPT = 10_000


async def _no_move_tasks(wait: float) -> None:
    """Where nothing runs message move tasks (a context made outside ``smq serve``)."""


@dataclass(frozen=True)
class ServerConfig:
    """Settings of ``smq serve``.

    Attributes:
        region: The server's own region: of requests whose signature names
            none, and of the queues kept under bare core names.
        account_id: 12-digit account id in queue URLs and ARNs.
        public_url: Base of queue URLs (``https://sqs.example.com``); by
            default the scheme and Host of each request.
        access_keys: Access key id -> secret; requests must carry a valid
            Signature Version 4 signature of one of them. Empty: no checks.
        key_accounts: Access key id -> the 12-digit account its requests act
            in (tenants); a key not named here acts in ``account_id``.
        max_clock_skew: Seconds a signature's time may differ from the server's.
        threads: Threads that run the blocking core calls (each holds a
            Redis connection per node; long polls that wait hold none). On a
            plain Redis the scripts of sends, receives, deletes, visibility
            changes and attribute reads run from the event loop instead, on
            one connection of its own (see ``smq.client._loop_scripts``).
        shutdown_timeout: Seconds a graceful stop waits for requests in flight.
        access_log: Log one JSON line per request.
        move_task_interval: Seconds between looks for message move tasks to run.
        consumer_beat_interval: Seconds between the heartbeats that note the
            SQS clients that received through the server among their queues'
            consumers (``Queue.consumers``).
        header_timeout: Seconds a client has to send a request's line and
            headers: from the connection's start for its first request, from
            the first byte of each later one. Slower connections are closed
            without a reply.
        body_timeout: Seconds a client has to send a request's whole body
            once its headers are in. A slower request is answered 408
            (``RequestTimeout``) and its connection closed. It bounds the
            upload only: a long poll's wait comes after the body.
        idle_timeout: Seconds a keep-alive connection may wait, idle, for its
            next request before the server closes it.
        max_connections: Open connections at most. At the limit, a new
            connection takes the place of the one that has waited longest
            (1 s or more) for its request headers, else of the one idle
            longest between requests; when every connection is busy with a
            request, it is answered ``503 Service Unavailable`` and closed.
        max_connections_per_address: Open connections from one client
            address at most (0: no cap; None, the default: half of
            ``max_connections``), refused as beyond ``max_connections``:
            one address holding idle sockets cannot lock the others out. Behind
            a proxy or load balancer every client has its address: raise it
            to ``max_connections`` there.
        tls_cert: Certificate (PEM, the chain after it) to serve HTTPS with;
            with ``tls_key``, its private key. Neither: plain HTTP. SIGHUP
            loads both files again.
        tls_key: Private key (PEM) of ``tls_cert``.
        metrics_token: When set, ``/metrics`` answers only a request with
            ``Authorization: Bearer <token>`` (Prometheus's ``authorization``
            scrape setting); else 401.
        metrics_host: With ``metrics_port``, ``/metrics`` is served there
            (plain HTTP), on a listener of its own, and not on the API's.
        metrics_port: Port of that listener (0: any free port); None: the
            API's listener serves ``/metrics``.
    """

    region: str = "us-east-1"
    account_id: str = "000000000000"
    public_url: str | None = None
    access_keys: Mapping[str, str] = field(default_factory=dict)
    key_accounts: Mapping[str, str] = field(default_factory=dict)
    max_clock_skew: float = 300.0
    threads: int = 16
    shutdown_timeout: float = 30.0
    access_log: bool = True
    move_task_interval: float = 1.0
    consumer_beat_interval: float = 15.0
    header_timeout: float = 20.0
    body_timeout: float = 60.0
    idle_timeout: float = 75.0
    max_connections: int = 10000
    max_connections_per_address: int | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    metrics_token: str | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[0-9]{12}", self.account_id):
            raise ValueError(f"account id must be 12 digits, not {self.account_id!r}")
        for key_id, account in self.key_accounts.items():
            if key_id not in self.access_keys or not re.fullmatch(r"[0-9]{12}", account):
                raise ValueError(f"access key {key_id!r}: its account must be 12 digits, and the key known")
        if not re.fullmatch(r"[a-z0-9-]{1,32}", self.region):
            raise ValueError(f"region {self.region!r} is invalid")
        if self.threads < 1:
            raise ValueError("threads must be at least 1")
        for name in ("header_timeout", "body_timeout", "idle_timeout", "consumer_beat_interval"):
            if not getattr(self, name) > 0:  # also refuses NaN
                raise ValueError(f"{name.replace('_', ' ')} must be more than 0 seconds")
        if self.max_connections < 1:
            raise ValueError("max connections must be at least 1")
        if self.max_connections_per_address is None:
            object.__setattr__(self, "max_connections_per_address", max(1, self.max_connections // 2))
        elif self.max_connections_per_address < 0:
            raise ValueError("max connections per address must be 0 (no cap) or more")
        if self.metrics_token is not None and (
            len(self.metrics_token) < 16
            or not self.metrics_token.isascii()
            or not self.metrics_token.isprintable()
        ):
            raise ValueError("the metrics token must be at least 16 printable ASCII characters")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("HTTPS needs both a certificate and its key (--tls-cert and --tls-key)")


@dataclass
class Context:
    """One request: the shared service parts plus where the request came from.

    ``region`` is the request's: of its signature's credential scope, else
    the server's. Queues belong to a region and an account; those of the
    server's own region and account keep bare core names (``orders``), the
    others have qualified ones (``eu-west-1:000000000000:orders``, see
    ``smq.core._names``). Names passed between actions are core names.
    """

    client: Client
    config: ServerConfig
    call: Callable[..., Awaitable[Any]]
    drive: Callable[[Steps[Any]], Awaitable[Any]]  # a core call's steps, from the event loop
    polls: LongPolls
    base_url: str
    path: str = "/"
    sender: str = ""
    kick_move_tasks: Callable[[float], Awaitable[None]] = _no_move_tasks
    trace_header: str | None = None  # the request's X-Amzn-Trace-Id header
    region: str = ""
    secure: bool = False  # the request came over HTTPS
    # Shared by a server's requests: what ``_resolve`` found for (queue URL, region, account),
    # and the queue handles by core name; both depend on nothing else (the settings are fixed).
    resolved: dict[tuple[str, str, str], str] = field(default_factory=dict)
    handles: dict[str, Queue] = field(default_factory=dict)
    # An API request's own (None for the console's actions): ReceiveMessage notes its client here.
    origin: web.Request | None = None
    consumers: SqsConsumers | None = None

    def note_receive(self, queue: str) -> None:
        """Count a receive of ``queue`` by the client of the request (a dict update)."""
        if self.origin is not None and self.consumers is not None:
            origin = self.origin
            self.consumers.note(queue, self.sender, origin.headers.get("User-Agent", ""), origin.remote or "")

    def __post_init__(self) -> None:
        if not self.region:
            self.region = self.config.region
        elif not REGION.fullmatch(self.region):
            raise SqsError("SignatureDoesNotMatch", "Credential should be scoped to a valid region.")

    @property
    def account(self) -> str:
        """The account the request acts in: its access key's (the server's by default)."""
        return self.config.key_accounts.get(self.sender, self.config.account_id)

    def core_name(self, name: str, region: str | None = None, account: str | None = None) -> str:
        """The core queue name of SQS name ``name`` in a region and account (default: the request's)."""
        region, account = region or self.region, account or self.account
        if region == self.config.region and account == self.config.account_id:
            return name
        return qualify(region, account, name)

    def _parts(self, core_name: str) -> tuple[str, str, str]:
        region, account, name = split_name(core_name)
        return region or self.config.region, account or self.config.account_id, name

    def url_of(self, core_name: str) -> str:
        """The queue's URL: ``{base}/{account}/{name}`` in the server's region, else
        ``{base}/{region}/{account}/{name}``."""
        region, account, name = self._parts(core_name)
        if region == self.config.region:
            return f"{self.base_url}/{account}/{name}"
        return f"{self.base_url}/{region}/{account}/{name}"

    def arn_of(self, core_name: str) -> str:
        region, account, name = self._parts(core_name)
        return f"arn:aws:sqs:{region}:{account}:{name}"

    def region_of(self, core_name: str) -> str:
        """The region a queue belongs to."""
        return self._parts(core_name)[0]

    def account_of(self, core_name: str) -> str:
        """The account that owns a queue."""
        return self._parts(core_name)[1]

    def name_of_arn(
        self, arn: str, error: str = "InvalidParameterValue", *, any_account: bool = False
    ) -> str:
        """The core name of the queue an ARN names, of any region in this account (in any
        account with ``any_account``: whether the request may use it is the caller's to say)."""
        parts = arn.split(":") if isinstance(arn, str) else []
        if (
            len(parts) != 6
            or parts[:3] != ["arn", "aws", "sqs"]
            or not REGION.fullmatch(parts[3])
            or not (parts[4] == self.account or (any_account and ACCOUNT.fullmatch(parts[4])))
            or not _is_sqs_name(parts[5])
        ):
            raise SqsError(error, f"{arn!r} is not the ARN of a queue of this service")
        return self.core_name(parts[5], parts[3], parts[4])

    def queue_name(self, params: Mapping[str, Any]) -> str:
        """The core name of the queue a request names by QueueUrl (or, Query protocol, by its path).

        A QueueUrl may be ``{base}/{account}/{name}`` (the request's region),
        ``{base}/{region}/{account}/{name}`` (also after ``/queue``, as
        LocalStack writes them), or a bare queue name (the request's region and
        account). The account may be another than the request's: whether the
        request may use that queue is for ``_authorize`` to say.
        """
        url = params.get("QueueUrl")
        at = self.path if self.path.strip("/") else None
        if url is None:
            url = at
        if url is None:
            raise SqsError("MissingParameter", "The request must contain the parameter QueueUrl.")
        if not isinstance(url, str):
            raise SqsError("InvalidParameterValue", "Value for parameter QueueUrl must be a string.")
        name = self._resolve(url)
        if at is not None and url is not at:
            try:
                sent_to = self._resolve(at)
            except SqsError:
                sent_to = name  # not a queue's path: the parameter alone names the queue
            if sent_to != name:
                # Acting on the parameter's queue would let a policy or a proxy that judged the
                # request by its path be bypassed.
                raise SqsError(
                    "InvalidParameterValue",
                    f"Value {url} for parameter QueueUrl is invalid. "
                    "Reason: it names another queue than the queue URL the request was sent to.",
                )
        return name

    def _resolve(self, url: str) -> str:
        """The core name of the queue a QueueUrl (or a Query request's path) names."""
        key = (url, self.region, self.account)
        name = self.resolved.get(key)
        if name is None:
            name = self._resolve_anew(url)
            if len(self.resolved) >= _MAX_KEPT:
                self.resolved.clear()
            self.resolved[key] = name
        return name

    def _resolve_anew(self, url: str) -> str:
        if "/" not in url and _is_sqs_name(url):
            return self.core_name(url)
        parts = _path_parts(urlsplit(url).path)
        if len(parts) not in (2, 3) or not _is_sqs_name(parts[-1]):
            raise SqsError("QueueDoesNotExist", NO_QUEUE)
        region = parts[0] if len(parts) == 3 else self.region
        if not ACCOUNT.fullmatch(parts[-2]) or not REGION.fullmatch(region):
            raise SqsError("QueueDoesNotExist", NO_QUEUE)
        return self.core_name(parts[-1], region, parts[-2])

    def named_queue(self, name: object, owner: object = None) -> str | None:
        """The core name of SQS name ``name`` in account ``owner`` (the request's when empty),
        as GetQueueUrl names a queue; None when either is not valid."""
        owner = owner or self.account
        if not isinstance(owner, str) or not ACCOUNT.fullmatch(owner):
            return None
        if not isinstance(name, str) or not _is_sqs_name(name):
            return None
        return self.core_name(name, account=owner)

    def queue(self, params: Mapping[str, Any]) -> Queue:
        name = self.queue_name(params)
        queue = self.handles.get(name)
        if queue is None:
            queue = self.client.queue(name)
            if len(self.handles) >= _MAX_KEPT:
                self.handles.clear()
            self.handles[name] = queue
        return queue

    def queue_lister(self, prefix: str) -> Callable[..., list[str]]:
        """``Client.list_queues`` for the queues of the request's region and account whose
        SQS names start with ``prefix``: core names, paged by ``limit`` and ``after``."""
        own = (self.region, self.account) == (self.config.region, self.config.account_id)
        start = "" if own else namespace(self.region, self.account)
        return functools.partial(self.client.list_queues, start + prefix, qualified=not own)


def _path_parts(path: str) -> list[str]:
    """The parts of a queue URL's path: account and name, after a region if it has one
    (and after ``/queue``, as LocalStack writes them)."""
    parts = [part for part in path.split("/") if part]
    return parts[1:] if len(parts) == 4 and parts[0] == "queue" else parts


def path_region(path: str) -> str:
    """The region a regional queue URL's path names (``/{region}/{account}/{name}``), else ''.
    Unsigned, a request sent there acts in that region, as one sent to SQS's regional
    endpoint does."""
    parts = _path_parts(path)
    return parts[0] if len(parts) == 3 and REGION.fullmatch(parts[0]) else ""


def _is_sqs_name(name: str) -> bool:
    try:
        check_sqs_name(name)
    except InvalidQueueName:
        return False
    return True
