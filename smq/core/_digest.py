"""MD5 digests of message bodies and attributes, computed as SQS computes them.

SDKs check these against what they sent, so they must match byte for byte.
For attributes, SQS hashes each attribute in order of name: the name, the
data type and the value, each as a 4-byte big-endian length followed by its
UTF-8 bytes (binary values as they are), with a one-byte transport type
(1: String and Number, 2: Binary) between the data type and the value.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._message import MessageAttribute

_STRING = b"\x01"
_BINARY = b"\x02"


def md5_of_body(body: str) -> str:
    """Hex MD5 of a message body's UTF-8 bytes (SQS MD5OfMessageBody)."""
    return hashlib.md5(body.encode("utf-8")).hexdigest()


def _with_length(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def md5_of_attributes(attributes: Mapping[str, MessageAttribute]) -> str | None:
    """Hex MD5 of message attributes (SQS MD5OfMessageAttributes), None if none."""
    if not attributes:
        return None
    digest = hashlib.md5()
    for name in sorted(attributes):
        attribute = attributes[name]
        digest.update(_with_length(name.encode("utf-8")))
        digest.update(_with_length(attribute.data_type.encode("utf-8")))
        if isinstance(attribute.value, bytes):
            digest.update(_BINARY + _with_length(attribute.value))
        else:
            digest.update(_STRING + _with_length(attribute.value.encode("utf-8")))
    return digest.hexdigest()
