"""What an action sees: the server's settings, the core client, and the request's origin."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .._client import Client
from .._queue import Queue
from ._errors import SqsError
from ._longpoll import LongPolls

_NAME = re.compile(r"(?=.{1,80}$)[A-Za-z0-9_-]+(\.fifo)?")


@dataclass(frozen=True)
class ServerConfig:
    """Settings of ``smq serve``.

    Attributes:
        region: Region in queue ARNs (and accepted in signatures).
        account_id: 12-digit account id in queue URLs and ARNs.
        public_url: Base of queue URLs (``https://sqs.example.com``); by
            default the scheme and Host of each request.
        access_keys: Access key id -> secret; requests must carry a valid
            Signature Version 4 signature of one of them. Empty: no checks.
        max_clock_skew: Seconds a signature's time may differ from the server's.
        threads: Threads that run the blocking core calls (each holds a
            Redis connection per node; long polls that wait hold none).
        shutdown_timeout: Seconds a graceful stop waits for requests in flight.
        access_log: Log one JSON line per request.
        move_task_interval: Seconds between looks for message move tasks to run.
    """

    region: str = "us-east-1"
    account_id: str = "000000000000"
    public_url: str | None = None
    access_keys: Mapping[str, str] = field(default_factory=dict)
    max_clock_skew: float = 300.0
    threads: int = 16
    shutdown_timeout: float = 30.0
    access_log: bool = True
    move_task_interval: float = 1.0

    def __post_init__(self) -> None:
        if not re.fullmatch(r"\d{12}", self.account_id):
            raise ValueError(f"account id must be 12 digits, not {self.account_id!r}")
        if not re.fullmatch(r"[a-z0-9-]{1,32}", self.region):
            raise ValueError(f"region {self.region!r} is invalid")
        if self.threads < 1:
            raise ValueError("threads must be at least 1")


@dataclass
class Context:
    """One request: the shared service parts plus where the request came from."""

    client: Client
    config: ServerConfig
    call: Callable[..., Awaitable[Any]]
    polls: LongPolls
    base_url: str
    path: str = "/"
    sender: str = ""
    kick_move_tasks: Callable[[], None] = lambda: None
    trace_header: str | None = None  # the request's X-Amzn-Trace-Id header

    def url_of(self, name: str) -> str:
        return f"{self.base_url}/{self.config.account_id}/{name}"

    def arn_of(self, name: str) -> str:
        return f"arn:aws:sqs:{self.config.region}:{self.config.account_id}:{name}"

    def name_of_arn(self, arn: str, error: str = "InvalidParameterValue") -> str:
        """The queue named by an ARN of this region and account."""
        parts = arn.split(":") if isinstance(arn, str) else []
        if (
            len(parts) != 6
            or parts[:3] != ["arn", "aws", "sqs"]
            or parts[3] != self.config.region
            or parts[4] != self.config.account_id
            or not _NAME.fullmatch(parts[5])
        ):
            raise SqsError(error, f"{arn!r} is not the ARN of a queue of this service")
        return parts[5]

    def queue_name(self, params: Mapping[str, Any]) -> str:
        """The queue a request names by QueueUrl (or, Query protocol, by its path)."""
        url = params.get("QueueUrl")
        if url is None and self.path.strip("/"):
            url = self.path
        if url is None:
            raise SqsError("MissingParameter", "The request must contain the parameter QueueUrl.")
        if not isinstance(url, str):
            raise SqsError("InvalidParameterValue", "Value for parameter QueueUrl must be a string.")
        parts = [part for part in urlsplit(url).path.split("/") if part]
        if len(parts) != 2 or not _NAME.fullmatch(parts[1]):
            raise SqsError(
                "QueueDoesNotExist", f"The specified queue does not exist: {url!r} is not a queue URL."
            )
        if parts[0] != self.config.account_id:
            raise SqsError("QueueDoesNotExist", f"The specified queue does not exist: {url!r}.")
        return parts[1]

    def queue(self, params: Mapping[str, Any]) -> Queue:
        return self.client.queue(self.queue_name(params))
