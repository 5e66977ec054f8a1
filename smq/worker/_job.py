"""What a handler receives: the message, and a flag that says its lease is lost."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from .._errors import LeaseLost
from ..core._message import Message, MessageAttribute

_EVENTS = threading.Lock()  # makes a job's Event and sets its flag, so no wait misses a loss


def _fresh_lock() -> None:
    global _EVENTS
    _EVENTS = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_fresh_lock)


class Job:
    """One received message handed to a handler.

    The worker keeps the message hidden while the handler runs (heartbeat)
    and deletes it when the handler returns. If the worker learns that it no
    longer holds the message (another consumer received it after the
    timeout ran out, or a graceful stop released it), ``lease_lost``
    turns true: the work may now be done twice, and the worker will not
    delete the message. Long handlers should check it, or call
    ``raise_if_lost``, between steps.
    """

    __slots__ = ("message", "_lost", "_reason", "_event")

    def __init__(self, message: Message) -> None:
        self.message = message
        self._lost = False
        self._reason = ""
        # Made by the first wait_lost only: most handlers never wait, and an Event a
        # message was a good part of the worker's own cost per message.
        self._event: threading.Event | None = None

    def __repr__(self) -> str:
        state = f" lost: {self._reason}" if self.lease_lost else ""
        return f"<smq.Job {self.message.message_id} of {self.message.queue!r}{state}>"

    @property
    def body(self) -> str:
        """The message body."""
        return self.message.body

    @property
    def attributes(self) -> Mapping[str, MessageAttribute]:
        """The message attributes, by name."""
        return self.message.attributes

    @property
    def message_id(self) -> str:
        return self.message.message_id

    @property
    def message_group_id(self) -> str | None:
        """FIFO: the message's group (its group's messages run one at a time, in order); None otherwise."""
        return self.message.message_group_id

    @property
    def receive_count(self) -> int:
        """Receives of this message so far, this one included."""
        return self.message.receive_count

    @property
    def lease_lost(self) -> bool:
        """True once the worker no longer holds the message (the cancellation flag)."""
        return self._lost

    @property
    def lost_reason(self) -> str:
        """Why the lease was lost ('' while it is held)."""
        return self._reason

    def raise_if_lost(self) -> None:
        """Raise ``smq.LeaseLost`` if the lease is lost; a handler's checkpoint."""
        if self._lost:
            raise LeaseLost(f"message {self.message.message_id}: {self._reason}")

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Sleep until the lease is lost or ``timeout`` s pass; True if it is lost."""
        with _EVENTS:
            if self._event is None:
                self._event = threading.Event()
                if self._lost:
                    self._event.set()
            event = self._event
        return event.wait(timeout)

    def _lose(self, reason: str) -> None:
        with _EVENTS:
            if self._lost:
                return
            self._reason = reason
            self._lost = True
            event = self._event
        if event is not None:
            event.set()
