"""``--log-level`` for the long-running commands, and their log format."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

log_level_option: Callable[[F], F] = click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
)
"""Adds ``--log-level`` (keyword ``log_level``); pass its value to ``setup_logging``."""


def setup_logging(level: str) -> None:
    """Log lines with time, level and logger to stderr."""
    logging.basicConfig(
        stream=sys.stderr,
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
