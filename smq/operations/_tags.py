"""Queue tags (SQS TagQueue, UntagQueue, ListQueueTags): validation.

A queue holds at most 50 tags; keys are 1-128 characters, case-sensitive,
and may not start with the reserved ``aws:`` prefix; values are 0-256
characters. Both hold Unicode letters, digits and spaces and the characters
``_ . : / = + - @`` only (no control characters). The 50-tag limit counts the tags already stored, so the
``tag_queue`` script checks it atomically; everything else is checked here,
before anything is written.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence

from .._errors import InvalidParameter, TooManyTags

MAX_TAGS = 50
MAX_KEY = 128
MAX_VALUE = 256
MAX_UNTAG_KEYS = 1000
_RESERVED_PREFIX = "aws:"
_PUNCTUATION = frozenset("_.:/=+-@")
# Unicode letters, numbers and separators (spaces): AWS's tag pattern
# [\p{L}\p{Z}\p{N}_.:/=+\-@]*.
_CATEGORIES = frozenset("LZN")
_ALLOWED = "Unicode letters, digits, spaces and _ . : / = + - @"


def _allowed(text: str) -> bool:
    return all(char in _PUNCTUATION or unicodedata.category(char)[0] in _CATEGORIES for char in text)


def check_tag_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidParameter(f"a tag key must be a string, not {type(key).__name__}")
    if not 1 <= len(key) <= MAX_KEY:
        raise InvalidParameter(f"tag key {key[:MAX_KEY]!r}: a tag key is 1 to {MAX_KEY} characters")
    if not _allowed(key):
        raise InvalidParameter(f"tag key {key!r}: a tag key may contain only {_ALLOWED}")
    return key


def check_tags(tags: object) -> dict[str, str]:
    """``tags`` as a dict, if it is a valid mapping of 1-50 tags, else raise InvalidParameter."""
    if not isinstance(tags, Mapping):
        raise InvalidParameter(f"tags must be a mapping of keys to values, not {type(tags).__name__}")
    if len(tags) > MAX_TAGS:
        raise TooManyTags(f"{len(tags)} tags given; a queue has at most {MAX_TAGS}")
    checked: dict[str, str] = {}
    for key, value in tags.items():
        check_tag_key(key)
        if key.lower().startswith(_RESERVED_PREFIX):
            raise InvalidParameter(f"tag key {key!r}: the prefix 'aws:' is reserved")
        if not isinstance(value, str):
            raise InvalidParameter(f"the value of tag {key!r} must be a string, not {type(value).__name__}")
        if len(value) > MAX_VALUE:
            raise InvalidParameter(
                f"the value of tag {key!r} is {len(value)} characters; at most {MAX_VALUE}"
            )
        if not _allowed(value):
            raise InvalidParameter(f"the value of tag {key!r} may contain only {_ALLOWED}")
        checked[key] = value
    return checked


def check_tag_keys(keys: object) -> list[str]:
    """``keys`` as a list of distinct tag keys (1-1000), else raise InvalidParameter."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise InvalidParameter(f"tag keys must be a sequence of strings, not {type(keys).__name__}")
    if not 1 <= len(keys) <= MAX_UNTAG_KEYS:
        raise InvalidParameter(f"untag takes 1 to {MAX_UNTAG_KEYS} tag keys, not {len(keys)}")
    return list(dict.fromkeys(check_tag_key(key) for key in keys))
