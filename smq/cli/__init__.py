"""The ``smq`` command line. Every option also reads an ``SMQ_`` variable."""

from __future__ import annotations

from . import (  # noqa: F401
    _acl,
    _analyze,
    _apply,
    _demo,
    _dlq,
    _events,
    _exporter,
    _messages,
    _peek,
    _queues,
    _send,
    _serve,
    _spark,
    _top,
    _upgrade,
    _worker,
)
from ._base import main

__all__ = ["main"]

if __name__ == "__main__":  # pragma: no cover
    main()
