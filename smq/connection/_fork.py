"""Objects that must start afresh in a forked child.

A child has none of its parent's threads, so locks another thread held at
the fork stay locked, and sockets would be shared with the parent. Objects
registered here have their ``_after_fork`` called in the child.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Protocol


class _Resettable(Protocol):
    def _after_fork(self) -> None: ...


_objects: weakref.WeakSet[_Resettable] = weakref.WeakSet()
_lock = threading.Lock()
_hooked = False


def reset_after_fork(obj: _Resettable) -> None:
    """Call ``obj._after_fork()`` in every child forked from now on (held weakly)."""
    global _hooked
    with _lock:
        _objects.add(obj)
        if not _hooked:
            os.register_at_fork(after_in_child=_reset_all)
            _hooked = True


def _reset_all() -> None:
    for obj in list(_objects):
        obj._after_fork()
