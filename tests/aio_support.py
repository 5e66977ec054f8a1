"""The asyncio client seen through the sync client's interface, so the contract tests run on both.

``Blocked(AsyncClient)`` has the methods of ``smq.Client``: each public call
awaits the async client's method of the same name on an event loop of its own
(a thread), so a test written for the sync client checks the async one. A
method the async client lacks is an AttributeError: the test fails. Private
attributes (the tests' hooks: ``_redis``, ``_now_ms_override``, ...) are the
underlying sync client's, as are ``settings``.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from smq.aio import AsyncClient, AsyncQueue

_TIMEOUT = 120  # seconds a call may take before the test fails
# The script boundary (what tests patch or call to reach Redis directly) and the settings.
_SYNC_ONLY = frozenset({"settings", "run", "run_many"})


class _Loop:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.stopped = False
        self.thread = threading.Thread(target=self._forever, name="aio-test-loop", daemon=True)
        self.thread.start()

    def _forever(self) -> None:
        while not self.stopped:
            try:
                self.loop.run_forever()
            except BaseException:  # noqa: BLE001, S112
                # A test's simulated crash (KeyboardInterrupt in a call) ends run_forever; the
                # test sees it from the call's result: the loop goes on for the next call.
                continue

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(_TIMEOUT)

    def stop(self) -> None:
        self.stopped = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def _seen_blocking(value: Any, loop: _Loop) -> Any:
    if isinstance(value, AsyncQueue):
        return BlockedQueue(value, loop)
    if inspect.iscoroutinefunction(value):

        def call(*args: Any, **kwargs: Any) -> Any:
            return _seen_blocking(loop.run(value(*args, **kwargs)), loop)

        return call
    if callable(value) and not isinstance(value, type):

        def plain(*args: Any, **kwargs: Any) -> Any:
            return _seen_blocking(value(*args, **kwargs), loop)

        return plain
    return value


class Blocked:
    """An ``AsyncClient`` with ``smq.Client``'s blocking interface (for tests only)."""

    def __init__(self, client: AsyncClient) -> None:
        object.__setattr__(self, "_aio", client)
        object.__setattr__(self, "_loop", _Loop())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in _SYNC_ONLY:
            return getattr(self._aio.sync, name)
        return _seen_blocking(getattr(self._aio, name), self._loop)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._aio.sync, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._aio.sync, name)

    def close(self) -> None:
        if self._loop.stopped:
            return
        try:
            self._loop.run(self._aio.aclose())
        finally:
            self._loop.stop()

    def __enter__(self) -> Blocked:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Blocked {self._aio!r}>"


class BlockedQueue:
    """An ``AsyncQueue`` with ``smq.Queue``'s blocking interface (for tests only)."""

    def __init__(self, queue: AsyncQueue, loop: _Loop) -> None:
        self._aio = queue
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            return getattr(self._aio.sync, name)
        found: Callable[..., Any] | Any = getattr(self._aio, name)
        return _seen_blocking(found, self._loop)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BlockedQueue) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<Blocked {self._aio!r}>"
