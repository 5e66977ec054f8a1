"""What the core and the operations need of a client, said as Protocols: ``smq.Client`` is one.

The modules under ``smq.core`` and ``smq.operations`` take a ``Backend`` (and a queue handle as a
``QueueRef``) rather than ``smq.Client`` and ``smq.Queue``, so that none of them imports the
client layer, not even for its types: imports flow one way, from the client down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..connection._eviction import EvictionWatch
from ..connection._health import RedisHealth
from ._keys import QueueKeys
from ._scripts import ScriptRunner


class Backend(Protocol):
    """A client's Redis as the layers below the client use it: script calls that raise what their
    status names, single commands at the client's error boundary, and the server clock's argument."""

    @property
    def _redis(self) -> Any: ...

    @property
    def _scripts(self) -> ScriptRunner: ...

    @property
    def _eviction(self) -> EvictionWatch | None: ...

    def run(self, script: str, keys: QueueKeys, args: Sequence[Any], *, queue: str, tolerate: int = 0) -> Any:
        """Run ``script`` on the keys of one queue; raise the error its status names (but ``tolerate``)."""

    def run_many(
        self, calls: Sequence[tuple[str, QueueKeys, Sequence[Any]]], *, queue: str, tolerate: int = 0
    ) -> list[Any]:
        """Run scripts of one queue in one write to Redis; raise the first error a status names."""

    def _write(self, what: str, queue: str, key: str, *command: Any) -> Any: ...

    def _read(self, what: str, queue: str, key: str, *command: Any) -> Any: ...

    def _call(self, function: Any, *args: Any, **kwargs: Any) -> Any: ...

    def _now_arg(self) -> str: ...

    def queue_exists(self, name: str) -> bool:
        """Does queue ``name`` exist?"""

    def redis_health(self) -> list[RedisHealth]:
        """The health of each Redis node the client writes to."""


class QueueRef(Protocol):
    """A queue handle as sending and the single-message actions use it."""

    @property
    def name(self) -> str: ...

    @property
    def keys(self) -> QueueKeys: ...

    @property
    def fifo(self) -> bool: ...

    @property
    def _client(self) -> Backend: ...

    def _shards(self) -> Sequence[object]: ...


__all__ = ["Backend", "QueueRef"]
