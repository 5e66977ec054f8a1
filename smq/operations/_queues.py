"""What the operations that go over many queues need of a client, as Protocols (see
``smq.core._backend``): list them, and a handle on each one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..core._backend import Backend
from ..core._config import QueueInfo
from ._events import Event


class QueueHandle(Protocol):
    """A queue handle as declared queues, history samples, moves and event pages use it."""

    @property
    def name(self) -> str: ...

    def attributes(self) -> QueueInfo: ...

    def _attributes_here(self) -> QueueInfo: ...

    def set_attributes(self, **settings: Any) -> None: ...

    def tags(self) -> dict[str, str]: ...

    def tag(self, tags: Mapping[str, str]) -> None: ...

    def _sample(self) -> bool: ...

    def events(self, *, after: str = "-", limit: int = 1000) -> list[Event]: ...


class Layouts(Protocol):
    """Where a client keeps which queues are sharded."""

    def read(self, name: str) -> list[str]: ...


class Queues(Backend, Protocol):
    """A client that can list its queues and hand out a handle on each."""

    @property
    def _layouts(self) -> Layouts: ...

    def list_queues(
        self, prefix: str = "", *, limit: int | None = None, after: str = "", qualified: bool = True
    ) -> list[str]: ...

    def queue(self, name: str) -> QueueHandle: ...

    def _queue_of(self, name: str) -> QueueHandle: ...

    def create_queue(
        self,
        name: str,
        *,
        tags: Mapping[str, str] | None = None,
        refuse_recently_deleted: bool = False,
        **settings: Any,
    ) -> QueueHandle: ...


__all__ = ["Layouts", "QueueHandle", "Queues"]
