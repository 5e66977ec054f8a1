"""Message ids: 20 characters in Redis, a UUID to users.

A message's id is stored in Redis two to four times (the visible list, the
messages hash, the state hash and the in-flight set), so its length is memory:
a 36-character UUID takes a 40-byte string where 20 characters fit in 24. smq
therefore stores about 120 random bits as 20 characters of URL-safe base64
(the *stored id*, also the middle of a receipt handle) and shows users the
version 4 UUID that holds those same bits (the *message id*, the form SQS gives):

    UUID hex = 12 from the stored id | "4" | 3 | "8" | 15

A stored id never holds ``_``: it becomes ``-`` (119.7 random bits remain).
Earlier versions take only letters, digits and ``-`` in a receipt's id, so their
clients can still delete messages stored by this version during a rolling upgrade
(they show the stored id as the message id, though: upgrade consumers first).

Messages stored by earlier versions kept their UUID as the stored id; a stored id
that is not 20 such characters is shown as it is, so those messages keep their ids.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Sequence

_RANDOM_BYTES = 15
_STORED_LENGTH = 20
_FROM_URL_SAFE = bytes.maketrans(b"-_", b"+/")
_TO_STORED = bytes.maketrans(b"+/", b"--")  # base64's two signs: both "-" in a stored id
_STORED = re.compile(rb"[A-Za-z0-9-]{%d}" % _STORED_LENGTH)
_STORED_RUN = re.compile(rb"(?:[A-Za-z0-9-]{%d}\|)*[A-Za-z0-9-]{%d}" % (_STORED_LENGTH, _STORED_LENGTH))


def _shown(raw: bytes) -> str:
    """The UUID form of a stored id's 15 random bytes."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-4{h[12:15]}-8{h[15:18]}-{h[18:]}"


def _all_shown(raw: bytes, count: int) -> list[str]:
    """The UUID forms of ``count`` stored ids' random bytes, end to end in ``raw``: one hex of the lot."""
    h = raw.hex()
    return [
        f"{h[o : o + 8]}-{h[o + 8 : o + 12]}-4{h[o + 12 : o + 15]}-8{h[o + 15 : o + 18]}-{h[o + 18 : o + 30]}"
        for o in range(0, 2 * _RANDOM_BYTES * count, 2 * _RANDOM_BYTES)
    ]


def new_ids(count: int) -> list[tuple[str, str]]:
    """``count`` new (stored id, message id) pairs, from one read of the OS's random source."""
    # 15 bytes are whole base64 groups: the encoding of the lot is the ids end to end.
    stored = binascii.b2a_base64(os.urandom(_RANDOM_BYTES * count), newline=False).translate(_TO_STORED)
    raw = binascii.a2b_base64(stored.translate(_FROM_URL_SAFE))  # the bits the ids now hold
    text = stored.decode()
    return list(
        zip(
            [text[at : at + _STORED_LENGTH] for at in range(0, _STORED_LENGTH * count, _STORED_LENGTH)],
            _all_shown(raw, count),
            strict=True,
        )
    )


def message_id(stored: str | bytes) -> str:
    """The message id users see for a message stored under ``stored``."""
    data = stored.encode() if isinstance(stored, str) else stored
    if _STORED.fullmatch(data):
        return _shown(binascii.a2b_base64(data.translate(_FROM_URL_SAFE)))
    # Stored by an earlier version (a UUID), or an id given to the scripts by hand: as it is.
    return stored if isinstance(stored, str) else stored.decode()


def message_ids(stored: Sequence[bytes]) -> list[str]:
    """``message_id`` of each of ``stored`` (as Redis gives them)."""
    return shown_ids(stored) or [message_id(one) for one in stored]


def shown_ids(stored: Sequence[bytes]) -> list[str] | None:
    """``message_id`` of each of ``stored`` when all are stored ids of this version (what a
    receive finds, but for old messages), decoded together; else None."""
    joined = b"|".join(stored)
    if _STORED_RUN.fullmatch(joined) is None:
        return None
    return _all_shown(binascii.a2b_base64(joined.translate(_FROM_URL_SAFE, b"|")), len(stored))


def derived_id(*parts: bytes) -> str:
    """A stored id made from ``parts`` alone: the same parts, the same id. A redriven
    message gets a new id this way, so a repeated step of its move stores it once."""
    digest = hashlib.sha256(b"\0".join(parts)).digest()[:_RANDOM_BYTES]
    return base64.urlsafe_b64encode(digest).replace(b"_", b"-").decode()


_SHOWN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-8[0-9a-f]{3}-[0-9a-f]{12}")
_ANY_STORED = re.compile(r"[A-Za-z0-9-]{1,64}")  # what a receipt handle takes as a stored id


def stored_ids(shown: str) -> list[str]:
    """The stored ids a message shown as ``shown`` may have (``message_id``'s reverse): the
    stored id whose UUID form it is, and itself when a stored id shows as itself (one of an
    earlier version). Empty when no stored id shows so."""
    found = []
    if _SHOWN.fullmatch(shown):
        h = shown.replace("-", "")
        raw = bytes.fromhex(h[:12] + h[13:16] + h[17:])
        candidate = binascii.b2a_base64(raw, newline=False).replace(b"+", b"-").decode()
        if message_id(candidate) == shown:  # not so when its bits hold a '/' sextet: no stored id has one
            found.append(candidate)
    if _ANY_STORED.fullmatch(shown) and not _STORED.fullmatch(shown.encode()):
        found.append(shown)
    return found
