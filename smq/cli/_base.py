"""The ``smq`` command group and what its commands share.

Errors: a command lets the core's exceptions (``smq.SmqError``), Redis errors
and ``OSError`` through; the group prints them as one line, ``smq: <message>``,
and exits 1. ``-v`` (or ``SMQ_VERBOSE=1``) prints the traceback instead.
click's own usage errors keep their message and exit 2.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any, NoReturn

import click
from redis.exceptions import RedisError

from .._errors import SmqError
from .._version import DISTRIBUTION, __version__

_REPORTED = (SmqError, RedisError, OSError)


def fail(message: str) -> NoReturn:
    """Print ``smq: message`` on stderr and exit 1: how every command reports bad input."""
    click.echo(f"smq: {message}", err=True)
    sys.exit(1)


def _one_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    if isinstance(error, OSError) and error.strerror:
        # "[Errno 2] No such file or directory: 'x'" reads better without the number.
        text = error.strerror + (f": {error.filename}" if error.filename else "")
    return " ".join(text.split())  # one line, whatever the message held


class SmqGroup(click.Group):
    """The top-level group: turns expected errors into one line and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _REPORTED as error:
            if ctx.params.get("verbose"):
                traceback.print_exc(file=sys.stderr)
                sys.exit(1)
            fail(_one_line(error))


@click.group(
    cls=SmqGroup,
    context_settings={"auto_envvar_prefix": "SMQ", "help_option_names": ["-h", "--help"]},
)
@click.version_option(
    __version__, "-V", "--version", prog_name="smq", message=f"%(prog)s %(version)s ({DISTRIBUTION})"
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    envvar="SMQ_VERBOSE",
    help="On an error, print the traceback instead of one line (env SMQ_VERBOSE).",
)
def main(verbose: bool) -> None:
    """smq: Amazon SQS semantics on your own Redis.

    Every option also reads an environment variable: SMQ_ and the command
    path and option name in capitals (SMQ_SEND_DELAY for smq send --delay);
    the options every command shares read SMQ_REDIS_URL, SMQ_CLUSTER,
    SMQ_DATA_DIR, SMQ_JSON and SMQ_VERBOSE.
    """
