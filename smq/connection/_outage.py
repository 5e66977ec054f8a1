"""Say that a dependency is down once, then at a slow interval, and once when it is back.

A loop that retries every second against a Redis that is down would write a
line a second; operators need the first line, a reminder now and then, and
the moment it recovered.
"""

from __future__ import annotations

import logging
import time

REMIND_SECONDS = 60.0
"""How often a failure that lasts is logged again."""


class Outage:
    """The log lines of one retrying loop's failures (not thread-safe: one per loop)."""

    def __init__(self, log: logging.Logger, what: str, remind_seconds: float = REMIND_SECONDS) -> None:
        self._log = log
        self._what = what
        self._remind = remind_seconds
        self._since: float | None = None
        self._said = 0.0
        self._failures = 0

    def failed(self, error: BaseException) -> None:
        """A try failed: log it if it is the first, or the last line is ``remind_seconds`` old."""
        now = time.monotonic()
        self._failures += 1
        if self._since is None:
            self._since, self._said = now, now
            self._log.warning(
                "%s: %s (retrying; said again every %g s while it lasts)", self._what, error, self._remind
            )
        elif now - self._said >= self._remind:
            self._said = now
            self._log.warning(
                "%s: still failing after %.0f s (%d tries): %s",
                self._what,
                now - self._since,
                self._failures,
                error,
            )

    def succeeded(self) -> None:
        """A try succeeded: log the recovery if there was an outage."""
        if self._since is not None:
            self._log.warning(
                "%s: recovered after %.0f s (%d failed tries)",
                self._what,
                time.monotonic() - self._since,
                self._failures,
            )
        self._since, self._failures = None, 0
