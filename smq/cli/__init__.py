"""The ``smq`` command line. Every option also reads an ``SMQ_`` variable."""

from __future__ import annotations

from . import _demo, _dlq, _messages, _peek, _queues, _serve, _top  # noqa: F401  (each module adds its commands to main)
from ._base import main

__all__ = ["main"]

if __name__ == "__main__":  # pragma: no cover
    main()
