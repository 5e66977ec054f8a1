"""The ``smq`` command group and what its commands share."""

from __future__ import annotations

import sys
from typing import NoReturn

import click


def fail(message: str) -> NoReturn:
    """Print ``smq: message`` on stderr and exit 1: how every command reports bad input."""
    click.echo(f"smq: {message}", err=True)
    sys.exit(1)


@click.group(context_settings={"auto_envvar_prefix": "SMQ", "help_option_names": ["-h", "--help"]})
def main() -> None:
    """smq: Amazon SQS semantics on your own Redis."""
