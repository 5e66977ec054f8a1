"""Queue attributes in SQS's words: which ``QueueConfig`` field each SQS attribute name sets.

The HTTP API and declared-queue files both name queue settings as SQS does
(``VisibilityTimeout``, ``RedrivePolicy``, ...); the core names them by
``QueueConfig`` field. The tables here are the one translation between the
two, and ``in_attribute_words`` rewrites a core error message in SQS's words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ._config import EXTRA_ATTRIBUTE_NAMES

# SQS attribute -> QueueConfig field
SETTINGS = {
    "VisibilityTimeout": "visibility_timeout",
    "DelaySeconds": "delay_seconds",
    "MessageRetentionPeriod": "message_retention_period",
    "MaximumMessageSize": "maximum_message_size",
    "ReceiveMessageWaitTimeSeconds": "receive_message_wait_time_seconds",
}
STORED = EXTRA_ATTRIBUTE_NAMES
"""Kept and returned as given; smq does not act on them."""
# SQS attribute -> QueueConfig field, FIFO queues only
FIFO_ONLY = {
    "ContentBasedDeduplication": "content_based_deduplication",
    "DeduplicationScope": "deduplication_scope",
    "FifoThroughputLimit": "fifo_throughput_limit",
}
SHARDS = "SmqShards"
"""smq's own attribute: the shards of a queue (1-32), set at creation only."""
# QueueConfig field -> SQS attribute (extra attributes are named as in SQS already)
ATTRIBUTE_OF = {
    **{field: name for name, field in SETTINGS.items()},
    **{field: name for name, field in FIFO_ONLY.items()},
    "redrive_policy": "RedrivePolicy",
    "fifo_queue": "FifoQueue",
    "shards": SHARDS,
}


def in_attribute_words(text: str, names: Mapping[str, str] = ATTRIBUTE_OF) -> str:
    """``text`` (a core error message) with each QueueConfig field named as ``names`` names it.

    Quoted text (a queue's name) stays as it is; field names outside quotes
    become attribute names (``visibility_timeout`` -> ``VisibilityTimeout``).
    """
    fields = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
    pattern = re.compile(f"'[^']*'|\\b(?:{fields})\\b")  # compiled once: re caches it
    return pattern.sub(lambda m: names.get(m.group(0), m.group(0)), text)


# An integer as smq reads one from text: ASCII digits, an optional leading
# '-', nothing around them, and no leading zero ("045" is not 45: a value
# written so is more likely a mistake, or an octal, than a decimal). 18
# digits are past every range SQS has, and keep int() far from Python's
# limit on the digits it converts.
_INTEGER = re.compile(r"0|-?[1-9][0-9]{0,17}")


def integer_text(text: str) -> int | None:
    """The value of ``text`` if it is such an integer, else None."""
    return int(text) if _INTEGER.fullmatch(text) else None
