"""Messages as Spark rows, in the order of ``smq.spark._source.MESSAGE_SCHEMA``."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..core._message import MessageAttribute
from ..operations._peek import PeekedMessage


def _time(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=timezone.utc)


def attribute_strings(attributes: Mapping[str, MessageAttribute]) -> dict[str, str]:
    """Attribute values as strings: Binary values base64-encoded."""
    return {
        name: base64.b64encode(a.value).decode() if isinstance(a.value, bytes) else a.value
        for name, a in attributes.items()
    }


def peeked_row(message: PeekedMessage) -> tuple[Any, ...]:
    """A peeked message's row (no sequence number or deduplication id: a peek has none)."""
    return (
        message.message_id,
        message.body,
        attribute_strings(message.attributes),
        _time(message.sent_at),
        message.receive_count,
        _time(message.first_received_at),
        message.message_group_id,
        None,
        None,
        message.state,
        _time(message.visible_at),
        message.origin,
    )
