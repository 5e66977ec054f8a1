"""Settings of a worker: one frozen object instead of many keywords."""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import InvalidParameter
from ..client._queue import MAX_WAIT_SECONDS
from ..core._config import MAX_VISIBILITY_TIMEOUT, check_int


@dataclass(frozen=True)
class WorkerConfig:
    """How a ``Worker`` receives, runs and releases messages.

    Attributes:
        concurrency: Handlers that run at once, at most (threads for a sync
            handler, tasks for an async one). Sync handlers that return
            within 0.2 ms run on the receiving thread instead, one after
            another: no hand-offs between threads.
        prefetch: Messages received beyond ``concurrency`` and held, hidden
            and heartbeated, until a handler is free (None: as many as
            ``concurrency``). Receives ask for up to 10 at a time.
        visibility_timeout: Seconds each receive and each extension hides a
            message (None: the queue's VisibilityTimeout, read at start).
            The heartbeat extends a message when half of it is left.
        wait_time_seconds: Long-poll wait of each receive (0-20).
        backoff: Seconds a failed message stays hidden before its retry,
            doubled at each further receive (``backoff * 2**(n-1)``).
        max_backoff: Upper bound of that delay, in seconds.
        grace_period: Seconds a graceful stop lets running handlers finish
            before their messages are released.
        metrics_port: Serve Prometheus metrics on this port (None: off;
            0: any free port, see ``Worker.metrics_url``).
        metrics_host: Address the metrics server listens on.
    """

    concurrency: int = 1
    prefetch: int | None = None
    visibility_timeout: int | None = None
    wait_time_seconds: int = MAX_WAIT_SECONDS
    backoff: int = 1
    max_backoff: int = 900
    grace_period: float = 30.0
    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"

    def __post_init__(self) -> None:
        check_int("concurrency", self.concurrency, 1, 10_000)
        if self.prefetch is not None:
            check_int("prefetch", self.prefetch, 0, 10_000)
        if self.visibility_timeout is not None:
            check_int("visibility_timeout", self.visibility_timeout, 1, MAX_VISIBILITY_TIMEOUT)
        check_int("wait_time_seconds", self.wait_time_seconds, 0, MAX_WAIT_SECONDS)
        check_int("backoff", self.backoff, 0, MAX_VISIBILITY_TIMEOUT)
        check_int("max_backoff", self.max_backoff, 0, MAX_VISIBILITY_TIMEOUT)
        if not isinstance(self.grace_period, (int, float)) or not 0 <= self.grace_period <= 86400:
            raise InvalidParameter(f"grace_period must be 0 to 86400 seconds, not {self.grace_period!r}")
        if self.metrics_port is not None:
            check_int("metrics_port", self.metrics_port, 0, 65535)

    @property
    def max_held(self) -> int:
        """Messages a worker holds at most: running plus waiting for a handler."""
        prefetch = self.concurrency if self.prefetch is None else self.prefetch
        return self.concurrency + prefetch

    def retry_delay(self, receive_count: int) -> int:
        """Seconds a message that failed on receive number ``receive_count`` stays hidden."""
        if self.backoff == 0:
            return 0
        exponent = min(max(receive_count - 1, 0), 32)
        return min(self.max_backoff, self.backoff << exponent)
