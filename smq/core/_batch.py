"""Batch requests: the checks every batch call makes before it runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .._errors import (
    BatchEntryIdsNotDistinct,
    EmptyBatchRequest,
    InvalidBatchEntryId,
    InvalidParameter,
    SmqError,
    TooManyEntriesInBatchRequest,
)
from ._message import BatchFailure

_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")
_ENTRY_IDS = re.compile(r"(?:[A-Za-z0-9_-]{1,80},)*[A-Za-z0-9_-]{1,80}")
MAX_BATCH = 10
MAX_BATCH_BYTES = 1048576


def check_entries(entries: object, kind: type[Any]) -> None:
    """Raise unless ``entries`` is a well-formed batch of ``kind`` objects."""
    if type(entries) is not list and (isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence)):
        raise InvalidParameter(f"a batch is a sequence of {kind.__name__}, not {type(entries).__name__}")
    ids = []
    for entry in entries:
        if not isinstance(entry, kind):
            raise InvalidParameter(f"batch entries must be {kind.__name__}, not {type(entry).__name__}")
        ids.append(entry.id)
    check_batch(ids)


def check_batch(ids: Sequence[str]) -> None:
    """Raise a BatchError unless ``ids`` are 1-10 distinct, valid entry ids."""
    if not ids:
        raise EmptyBatchRequest("a batch needs at least one entry")
    if len(ids) > MAX_BATCH:
        raise TooManyEntriesInBatchRequest(
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(ids)}."
        )
    if not _all_valid(ids):
        for entry_id in ids:
            if not isinstance(entry_id, str) or not _ENTRY_ID.fullmatch(entry_id):
                raise InvalidBatchEntryId(
                    "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
                    "It can be at most 80 letters long."
                )
    if len(set(ids)) == len(ids):
        return
    seen: set[str] = set()
    for entry_id in ids:
        if entry_id in seen:
            raise BatchEntryIdsNotDistinct(f"Id {entry_id} repeated.")  # SQS's words
        seen.add(entry_id)


def _all_valid(ids: Sequence[object]) -> bool:
    """Whether every one of ``ids`` is a valid entry id: one match of them all, joined."""
    try:
        joined = ",".join(ids)  # type: ignore[arg-type]
    except TypeError:
        return False  # one is not a str
    # A "," is in no valid id: the ids are valid if and only if the joined text is ids and commas.
    return joined.count(",") == len(ids) - 1 and _ENTRY_IDS.fullmatch(joined) is not None


def failure(entry_id: str, error: SmqError) -> BatchFailure:
    """The batch failure of one entry, named by the exception's class."""
    return BatchFailure(entry_id, type(error).__name__, str(error))
