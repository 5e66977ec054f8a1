"""Queue names and their namespaces (region and account).

A queue's name is an SQS name (1-80 of ``[A-Za-z0-9_-]``, a FIFO queue's
ending in ``.fifo``), optionally qualified by a namespace:
``<region>:<account>:<name>`` (``eu-west-1:000000000000:orders``). SQS names
never contain ``:``, so the two forms cannot be confused. The HTTP API keeps
the queues of its own region and account under bare names, and those of any
other region under qualified names; the Python API and the CLI address both
kinds the same way, by the full name.
"""

from __future__ import annotations

import re

from .._errors import InvalidQueueName

SEPARATOR = ":"
"""Between region, account and name in a qualified queue name."""
FIFO_SUFFIX = ".fifo"
MAX_NAME = 80
"""Characters of an SQS name (the bare part of a queue name), ``.fifo`` included."""
MAX_QUALIFIED = 32 + 1 + 12 + 1 + MAX_NAME
"""Characters of a qualified queue name: region, account and SQS name."""
NAME_CHARACTERS = "A-Za-z0-9_.:-"
"""Characters a queue name, qualified or not, may hold (for regular expressions)."""

_STEM = re.compile(r"[A-Za-z0-9_-]{1,80}")
REGION = re.compile(r"[a-z0-9-]{1,32}")
"""A region as it appears in a qualified name (``us-east-1``)."""
ACCOUNT = re.compile(r"[0-9]{12}")
"""A 12-digit account id."""


def namespace(region: str, account: str) -> str:
    """The prefix of the qualified names of a region and account: ``<region>:<account>:``."""
    if not REGION.fullmatch(region):
        raise InvalidQueueName(f"region {region!r} is invalid: use 1 to 32 of a-z, 0-9 and '-'")
    if not ACCOUNT.fullmatch(account):
        raise InvalidQueueName(f"account id {account!r} is invalid: use 12 digits")
    return f"{region}{SEPARATOR}{account}{SEPARATOR}"


def qualify(region: str, account: str, name: str) -> str:
    """The queue name of SQS name ``name`` in ``region`` and ``account``."""
    return namespace(region, account) + check_sqs_name(name)


def split_name(name: str) -> tuple[str | None, str | None, str]:
    """(region, account, SQS name) of a queue name; region and account are None for a bare name."""
    parts = name.split(SEPARATOR)
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return None, None, name


def check_sqs_name(name: object) -> str:
    """Return ``name`` if it is a valid SQS queue name (no namespace), else raise InvalidQueueName."""
    if not isinstance(name, str):
        raise InvalidQueueName(f"queue name must be a string, not {type(name).__name__}")
    stem = name[: -len(FIFO_SUFFIX)] if name.endswith(FIFO_SUFFIX) else name
    if not _STEM.fullmatch(stem) or len(name) > MAX_NAME:
        raise InvalidQueueName(
            f"queue name {name!r} is invalid: use 1 to 80 letters, digits, '-' or '_' "
            f"(a FIFO queue's name ends in {FIFO_SUFFIX}, within the 80), optionally "
            "qualified as <region>:<account>:<name>"
        )
    return name


def check_queue_name(name: object) -> str:
    """Return ``name`` if it is a valid queue name, else raise InvalidQueueName.

    A standard queue's name is 1-80 letters, digits, ``-`` or ``_``; a FIFO
    queue's is the same followed by ``.fifo``, 80 characters in all. Either
    may be qualified by a namespace: ``<region>:<account>:<name>``, the
    region 1-32 of ``a-z``, ``0-9`` and ``-``, the account 12 digits.
    """
    if not isinstance(name, str):
        raise InvalidQueueName(f"queue name must be a string, not {type(name).__name__}")
    region, account, bare = split_name(name)
    if region is not None and account is not None:
        qualify(region, account, bare)
    else:
        check_sqs_name(name)
    return name
