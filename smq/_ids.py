"""Message ids: 20 characters in Redis, a UUID to users.

A message's id is stored in Redis two to four times (the visible list, the
messages hash, the state hash and the in-flight set), so its length is memory:
a 36-character UUID takes a 40-byte string where 20 characters fit in 24. smq
therefore stores 120 random bits as 20 characters of URL-safe base64 (the
*stored id*, also the middle of a receipt handle) and shows users the version 4
UUID that holds those same bits (the *message id*, the form SQS gives):

    UUID hex = 12 random | "4" | 3 random | "8" | 15 random

Messages stored by smq 0.2 kept their UUID as the stored id; any stored id that
is not 20 characters is shown as it is, so those messages keep their ids.
"""

from __future__ import annotations

import base64
import os
import re

_RANDOM_BYTES = 15
_STORED = re.compile(r"[A-Za-z0-9_-]{20}")


def new_stored_ids(count: int) -> list[str]:
    """``count`` new stored ids, from one read of the OS's random source."""
    random = os.urandom(_RANDOM_BYTES * count)
    encode = base64.urlsafe_b64encode
    return [
        encode(random[start : start + _RANDOM_BYTES]).decode()
        for start in range(0, _RANDOM_BYTES * count, _RANDOM_BYTES)
    ]


def message_id(stored: str) -> str:
    """The message id users see for a message stored under ``stored``."""
    if _STORED.fullmatch(stored) is None:
        return stored  # stored by smq 0.2: a UUID, or an id given to the scripts by hand
    h = base64.urlsafe_b64decode(stored).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[12:15]}-8{h[15:18]}-{h[18:]}"
