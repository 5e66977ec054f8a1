"""A core call as steps: the logic once, run either blocking or from an asyncio event loop.

A hot call of ``Queue`` (send, receive, delete, change visibility) is written
as a generator that yields what it needs from Redis and gets the answer back:

- ``ScriptCall``: one script, answered like ``Client.run`` (the reply, or the
  exception its status or the connection raised, thrown into the generator);
- ``ScriptCalls``: scripts of one queue written to Redis together, answered
  like ``Client.run_many`` (the replies in order);
- ``Blocking``: any other work that may block (a layout read, finishing moves,
  a sharded queue's calls), answered with its return value.

``drive`` runs the steps in the caller's thread, which is what ``Queue``'s
methods do. ``smq serve`` and the asyncio client (``smq.aio``) run the same
steps on an event loop (``smq.client._loop_scripts``): script calls go over an
asyncio connection, and only ``Blocking`` steps go to a thread.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ._keys import QueueKeys

if TYPE_CHECKING:
    from ._backend import Backend

T = TypeVar("T")


class ScriptCall:
    """Run script ``script`` on ``keys`` with ``args``; errors name ``queue``; ``tolerate``: a status kept."""

    __slots__ = ("script", "keys", "args", "queue", "tolerate")

    def __init__(
        self, script: str, keys: QueueKeys, args: Sequence[Any], queue: str, tolerate: int = 0
    ) -> None:
        self.script = script
        self.keys = keys
        self.args = args
        self.queue = queue
        self.tolerate = tolerate

    def run(self, client: Backend) -> Any:
        """The blocking way: ``Client.run``."""
        return client.run(self.script, self.keys, self.args, queue=self.queue, tolerate=self.tolerate)


class ScriptCalls:
    """Run ``calls`` (script, keys, args) of queue ``queue`` in one write; ``tolerate``: a status kept."""

    __slots__ = ("calls", "queue", "tolerate")

    def __init__(
        self, calls: Sequence[tuple[str, QueueKeys, Sequence[Any]]], queue: str, tolerate: int = 0
    ) -> None:
        self.calls = calls
        self.queue = queue
        self.tolerate = tolerate

    def run(self, client: Backend) -> list[Any]:
        """The blocking way: ``Client.run_many``."""
        return client.run_many(self.calls, queue=self.queue, tolerate=self.tolerate)


class Blocking:
    """Call ``function(*args)``, which may block on Redis."""

    __slots__ = ("function", "args")

    def __init__(self, function: Callable[..., Any], *args: Any) -> None:
        self.function = function
        self.args = args

    def run(self) -> Any:
        return self.function(*self.args)


Step = ScriptCall | ScriptCalls | Blocking
Steps = Generator[Step, Any, T]


def drive(client: Backend, steps: Steps[T]) -> T:
    """Run ``steps`` in this thread; their result."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(answer) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        error = None
        try:
            answer = step.run() if isinstance(step, Blocking) else step.run(client)
        except Exception as caught:
            answer, error = None, caught
