"""Messages: what is sent and received, how it is checked and stored.

A stored record is ``<sent_ms>|<payload>``; the Lua scripts read the sent
time and, on FIFO queues, the group. The payload is ``<n>:<attributes><body>``
where the attributes are ``n`` bytes of JSON (absent when ``n`` is 0) and the
body is the rest, in UTF-8. A message with a group id starts its payload with
a header ``f<g>:<group><d>:<deduplication id>`` (``g`` and ``d`` their
lengths; ``d`` is 0 without an id), so that the ids travel with the message
when it moves to another queue.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from decimal import Decimal, InvalidOperation
from typing import Any, Generic, TypeVar, Union

from .._errors import (
    InvalidAttributeName,
    InvalidAttributeValue,
    InvalidMessageContents,
    InvalidParameter,
    ReceiptHandleIsInvalid,
)
from ._digest import md5_of_attributes, md5_of_body
from ._ids import message_ids, shown_ids
from ._names import MAX_QUALIFIED, NAME_CHARACTERS

_FORBIDDEN_CHARS = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# Letters of any script (SQS takes non-ASCII letters), digits, "_", "-" and ".".
_ATTRIBUTE_NAME = re.compile(r"[\w.-]{1,256}")
_DATA_TYPE = re.compile(r"(String|Number|Binary)(\.[A-Za-z0-9_.-]+)?")
# A receipt names the queue (or, of a sharded queue, the shard: its name has
# at most 10 characters more) that issued it.
_ISSUER = rf"[{NAME_CHARACTERS}]{{1,{MAX_QUALIFIED + 10}}}"
# A token is a receive's secret, and on a first receive in data layout 2 "." and the receive time
# in base 36 (the in-flight entry holds both: see docs/concepts/redis-layout.md).
_TOKEN_TEXT = r"[A-Za-z0-9_-]{16,64}(?:\.[0-9a-z]{1,12})?"
_RECEIPT = re.compile(rf"({_ISSUER}):([A-Za-z0-9-]{{1,64}}):({_TOKEN_TEXT})")
# What follows "<queue>:" in a receipt. Neither part holds a ":", so a receipt that starts with
# "<queue>:" and goes on so is one _RECEIPT matches naming that queue (if the name is an issuer's).
_RECEIPT_TAIL = re.compile(rf"([A-Za-z0-9-]{{1,64}}):({_TOKEN_TEXT})")
_ISSUER_NAME = re.compile(_ISSUER)
_FIFO_ID = re.compile(r"[!-~]{1,128}")
# A Number attribute's text: ASCII digits, sign, point and exponent, nothing
# around them (Decimal alone would also take spaces, underscores and other
# scripts' digits).
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,9})?")
MAX_ATTRIBUTES = 10


@dataclass(frozen=True, slots=True)
class MessageAttribute:
    """A typed message attribute, as in SQS.

    Attributes:
        data_type: ``String``, ``Number`` or ``Binary``, optionally with a
            custom suffix (``Number.int``).
        value: ``str`` for String and Number types, ``bytes`` for Binary.
    """

    data_type: str
    value: str | bytes


AttributeValue = Union[str, int, float, Decimal, bytes, MessageAttribute]  # noqa: UP007
"""What a caller may pass as a message attribute: plain values get the type
String (``str``), Number (``int``, ``float``, ``Decimal``) or Binary (``bytes``)."""


def _check_number(name: str, text: str) -> None:
    try:
        if not _NUMBER.fullmatch(text):
            raise InvalidOperation
        number = Decimal(text)
    except InvalidOperation:
        shown = repr(text) if len(text) <= 40 else repr(text[:37]) + "..."
        raise InvalidAttributeValue(f"message attribute {name!r}: {shown} is not a number") from None
    if not number.is_finite() or len(number.as_tuple().digits) > 38:
        raise InvalidAttributeValue(
            f"message attribute {name!r}: {text!r} is not a number of at most 38 digits"
        )
    if number != 0 and not Decimal("-1e128") <= number <= Decimal("1e126"):
        raise InvalidAttributeValue(f"message attribute {name!r}: {text!r} is outside -10^128 to 10^126")


def check_attribute_name(name: object) -> str:
    if not isinstance(name, str) or not _ATTRIBUTE_NAME.fullmatch(name):
        raise InvalidAttributeName(
            f"The message attribute name '{name}' is invalid. Attribute name can contain A-Z, a-z, 0-9, "
            "underscore (_), hyphen (-), and period (.) characters."
        )
    lowered = name.lower()
    if lowered.startswith(("aws.", "amazon.")) or name.startswith(".") or name.endswith(".") or ".." in name:
        raise InvalidAttributeName(
            f"message attribute name {name!r}: no 'AWS.'/'Amazon.' prefix, no leading, "
            "trailing or doubled '.'"
        )
    return name


def to_attribute(name: str, value: AttributeValue) -> MessageAttribute:
    """Check one message attribute and give it its SQS type."""
    check_attribute_name(name)
    if isinstance(value, MessageAttribute):
        attribute = value
    elif isinstance(value, bool):
        raise InvalidAttributeValue(f"message attribute {name!r}: use a str for a boolean")
    elif isinstance(value, str):
        attribute = MessageAttribute("String", value)
    elif isinstance(value, (int, float, Decimal)):
        attribute = MessageAttribute("Number", str(value))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        attribute = MessageAttribute("Binary", bytes(value))
    else:
        raise InvalidAttributeValue(
            f"message attribute {name!r}: {type(value).__name__} is not str, number or bytes"
        )
    data_type = attribute.data_type
    if not isinstance(data_type, str) or len(data_type) > 256 or not _DATA_TYPE.fullmatch(data_type):
        raise InvalidAttributeValue(
            f"The message attribute '{name}' has an invalid message attribute type, the set of supported "
            "type prefixes is Binary, Number, and String."
        )
    binary = data_type.startswith("Binary")
    if binary != isinstance(attribute.value, bytes):
        raise InvalidAttributeValue(
            f"message attribute {name!r}: a {data_type} value must be {'bytes' if binary else 'str'}"
        )
    if len(attribute.value) == 0:
        raise InvalidAttributeValue(
            f"Message (user) attribute '{name}' must contain a non-empty value of type '{data_type}'."
        )
    if isinstance(attribute.value, str):
        if _FORBIDDEN_CHARS.search(attribute.value):
            raise InvalidAttributeValue(f"message attribute {name!r} has characters SQS does not allow")
        if data_type.startswith("Number"):
            _check_number(name, attribute.value)
    return attribute


def to_attributes(values: Mapping[str, AttributeValue] | None) -> dict[str, MessageAttribute]:
    if not values:
        return {}
    if len(values) > MAX_ATTRIBUTES:
        raise InvalidAttributeValue(f"a message has at most {MAX_ATTRIBUTES} attributes, not {len(values)}")
    return {name: to_attribute(name, value) for name, value in values.items()}


def check_body(body: object) -> bytes:
    """The UTF-8 bytes of a valid body; raise InvalidMessageContents otherwise."""
    if not isinstance(body, str):
        raise InvalidMessageContents(f"message body must be a str, not {type(body).__name__}")
    if not body:
        raise InvalidMessageContents("message body must not be empty")
    # Every character SQS refuses is a control character, a surrogate or a noncharacter, none
    # of them printable: printable text (no tab or newline either) needs no search.
    bad = None if body.isprintable() else _FORBIDDEN_CHARS.search(body)
    if bad:
        raise InvalidMessageContents(
            f"message body has a character SQS does not allow: {bad.group()!r} at {bad.start()}"
        )
    return body.encode("utf-8")


def attributes_size(attributes: Mapping[str, MessageAttribute]) -> int:
    """Bytes the attributes count toward the message size, as SQS counts them."""
    size = 0
    for name, attribute in attributes.items():
        value = attribute.value
        size += len(name.encode()) + len(attribute.data_type.encode())
        size += len(value) if isinstance(value, bytes) else len(value.encode())
    return size


def check_fifo_id(name: str, value: object) -> str:
    """A MessageGroupId or MessageDeduplicationId: 1-128 ASCII letters, digits or punctuation."""
    if not isinstance(value, str) or not _FIFO_ID.fullmatch(value):
        raise InvalidParameter(
            f"Value {value} for parameter {name} is invalid. Reason: {name} can only include "
            "alphanumeric and punctuation characters. 1 to 128 in length."
        )
    return value


def fifo_header(group: str, deduplication_id: str) -> bytes:
    """The payload header of a message with a group (see the module docstring)."""
    return b"f%d:%s%d:%s" % (len(group), group.encode(), len(deduplication_id), deduplication_id.encode())


# The trace header and the sender ride with the message attributes under names no
# sender may use (SQS reserves the "AWS." prefix), and are taken out again on reading.
TRACE_ATTRIBUTE = "AWS.TraceHeader"
SENDER_ATTRIBUTE = "AWS.SenderId"


def check_trace_header(value: object) -> str:
    """An AWSTraceHeader value: a non-empty string of characters SQS allows."""
    if not isinstance(value, str) or not value or _FORBIDDEN_CHARS.search(value):
        raise InvalidParameter(f"Value {value} for parameter AWSTraceHeader is invalid.")
    return value


def check_sender_id(value: object) -> str:
    """A SenderId: 1-256 characters SQS allows in a message."""
    if not isinstance(value, str) or not 0 < len(value) <= 256 or _FORBIDDEN_CHARS.search(value):
        raise InvalidParameter(f"sender id {value!r} is invalid: use 1 to 256 printable characters")
    return value


def encode_payload(body: bytes, attributes: Mapping[str, MessageAttribute], header: bytes = b"") -> bytes:
    if not attributes:
        return header + b"0:" + body
    packed = json.dumps(
        [
            [name, a.data_type, base64.b64encode(a.value).decode() if isinstance(a.value, bytes) else a.value]
            for name, a in attributes.items()
        ],
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    return header + b"%d:%s%s" % (len(packed), packed, body)


def decode_record(
    record: bytes,
) -> tuple[int, dict[str, MessageAttribute], str, str | None, str | None, str | None, str | None]:
    """(sent_ms, attributes, body, group id, deduplication id, trace header, sender id) of a
    stored record."""
    sent, _, payload = record.partition(b"|")
    group = deduplication_id = None
    if payload[:1] == b"f":
        colon = payload.index(b":")
        end = colon + 1 + int(payload[1:colon])
        group = payload[colon + 1 : end].decode() or None  # '' on a standard queue's deduplicated send
        colon = payload.index(b":", end)
        start = colon + 1
        payload_end = start + int(payload[end:colon])
        deduplication_id = payload[start:payload_end].decode() or None
        payload = payload[payload_end:]
    colon = payload.index(b":")
    size = int(payload[:colon])
    start = colon + 1
    attributes: dict[str, MessageAttribute] = {}
    if size:
        for name, data_type, value in json.loads(payload[start : start + size]):
            if data_type.startswith("Binary"):
                value = base64.b64decode(value)
            attributes[name] = MessageAttribute(data_type, value)
    trace = attributes.pop(TRACE_ATTRIBUTE, None)
    trace_header = trace.value if trace is not None and isinstance(trace.value, str) else None
    sender = attributes.pop(SENDER_ATTRIBUTE, None)
    sender_id = sender.value if sender is not None and isinstance(sender.value, str) else None
    return (
        int(sent),
        attributes,
        payload[start + size :].decode("utf-8"),
        group,
        deduplication_id,
        trace_header,
        sender_id,
    )


# Receipt handles this process made, each with what parse_receipt finds in it: (queue, stored
# id, token). Only those that parse so go in; a consumer's deletes find theirs here, no parsing.
_ISSUED: dict[str, tuple[str, str, str]] = {}
_MAX_ISSUED = 4096
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")


def parse_receipt(queue: str, receipt: object) -> tuple[str, str]:
    """(stored id, token) of a receipt handle ``<queue>:<stored id>:<token>`` (see ``smq.core._ids``)."""
    issued = _ISSUED.get(receipt) if type(receipt) is str else None
    if issued is not None and issued[0] == queue:
        return issued[1], issued[2]
    # The same test as _RECEIPT.fullmatch(receipt) naming ``queue``, without the backtracking of
    # a name that may hold ":" (half the time).
    start = len(queue) + 1
    if isinstance(receipt, str) and receipt.startswith(queue) and receipt[start - 1 : start] == ":":
        match = _RECEIPT_TAIL.fullmatch(receipt, start)
        if match is not None and _issues_receipts(queue):
            return match.group(1), match.group(2)
    # One text for garbage and for another queue's receipt, as SQS.
    raise ReceiptHandleIsInvalid(f'The input receipt handle "{receipt}" is not a valid receipt handle.')


@functools.lru_cache(maxsize=1024)
def _issues_receipts(queue: str) -> bool:
    """Whether ``queue`` is a name a receipt handle may hold."""
    return _ISSUER_NAME.fullmatch(queue) is not None


def receipt_queue(receipt: object) -> str:
    """The name of the queue (or shard) a receipt handle names; '' if it is not a receipt handle."""
    match = _RECEIPT.fullmatch(receipt) if isinstance(receipt, str) else None
    return match.group(1) if match else ""


@dataclass(frozen=True, slots=True)
class Message:
    """A received message.

    Attributes:
        queue: Name of the queue it was received from.
        message_id: Its id, the same on every receive.
        receipt_handle: Proof of this receive; needed to delete the message or
            change its visibility. Each receive issues a new one.
        body: The message body.
        attributes: Its message attributes, by name.
        sent_at: SentTimestamp, in seconds since the epoch (Redis clock).
        receive_count: ApproximateReceiveCount: receives so far, this one included.
        first_received_at: ApproximateFirstReceiveTimestamp, seconds since the epoch.
        message_group_id: MessageGroupId, or None (standard queue, none sent).
        deduplication_id: FIFO: MessageDeduplicationId (given, or the SHA-256
            of the body on a content-based queue).
        sequence_number: FIFO: SequenceNumber, 20 digits, increasing in
            send order within the queue.
        trace_header: The AWSTraceHeader system attribute sent with it, or None.
        sender_id: Who sent it (SenderId), as the sender said, or None.
    """

    queue: str
    message_id: str
    receipt_handle: str
    body: str
    attributes: Mapping[str, MessageAttribute]
    sent_at: float
    receive_count: int
    first_received_at: float
    message_group_id: str | None = None
    deduplication_id: str | None = None
    sequence_number: str | None = None
    trace_header: str | None = None
    sender_id: str | None = None

    @property
    def md5_of_body(self) -> str:
        """MD5OfBody, as SQS computes it."""
        return md5_of_body(self.body)

    @property
    def md5_of_message_attributes(self) -> str | None:
        """MD5OfMessageAttributes, as SQS computes it (None without attributes)."""
        return md5_of_attributes(self.attributes)


@dataclass(frozen=True, slots=True)
class SendEntry:
    """One message of a batch send.

    Attributes:
        id: Batch entry id, 1-80 of ``[A-Za-z0-9_-]``, distinct within the batch.
        body: Message body.
        delay_seconds: Per-message delay (0-900), None for the queue's
            (FIFO queues take none: the queue's delay applies).
        attributes: Message attributes.
        message_group_id: MessageGroupId: required on a FIFO queue; kept
            and returned on a standard queue, where it orders nothing.
        deduplication_id: MessageDeduplicationId: on a FIFO queue required
            unless the queue has content-based deduplication; on a standard
            queue optional (an smq extension). Within 5 minutes a second send
            with the same id is accepted and not stored again.
        trace_header: The AWSTraceHeader system attribute (an X-Ray trace
            header), kept with the message and returned on receive.
        sender_id: Who sends it (SenderId on receive; the HTTP API gives the
            signing access key), kept with the message; not counted in its size.
    """

    id: str
    body: str
    delay_seconds: int | None = None
    attributes: Mapping[str, AttributeValue] | None = None
    message_group_id: str | None = None
    deduplication_id: str | None = None
    trace_header: str | None = None
    sender_id: str | None = None


@dataclass(frozen=True, slots=True)
class SendResult:
    """A message stored by a send.

    Attributes:
        message_id: The id that receives will report.
        body: The body sent (for the digest).
        attributes: The attributes sent, typed.
        id: The batch entry id ('' for a single send).
        sequence_number: FIFO: the message's SequenceNumber (20 digits).
        duplicate: True when a message with the same deduplication id
            was sent within 5 minutes: this one was accepted and dropped, and
            ``message_id`` and ``sequence_number`` are the first one's.
        trace_header: The AWSTraceHeader sent, or None.
    """

    message_id: str
    body: str
    attributes: Mapping[str, MessageAttribute] = field(default_factory=dict)
    id: str = ""
    sequence_number: str | None = None
    duplicate: bool = False
    trace_header: str | None = None

    @property
    def md5_of_body(self) -> str:
        """MD5OfMessageBody, as SQS computes it."""
        return md5_of_body(self.body)

    @property
    def md5_of_message_attributes(self) -> str | None:
        """MD5OfMessageAttributes, as SQS computes it (None without attributes)."""
        return md5_of_attributes(self.attributes)

    @property
    def md5_of_message_system_attributes(self) -> str | None:
        """MD5OfMessageSystemAttributes, as SQS computes it (None without a trace header)."""
        return md5_of_system_attributes(self.trace_header)


def md5_of_system_attributes(trace_header: str | None) -> str | None:
    """The digest SQS computes over the system attributes, as over message attributes."""
    if trace_header is None:
        return None
    return md5_of_attributes({"AWSTraceHeader": MessageAttribute("String", trace_header)})


@dataclass(frozen=True, slots=True)
class ChangeEntry:
    """One visibility change of a batch: entry id, receipt, new timeout (s)."""

    id: str
    receipt_handle: str
    visibility_timeout: int


@dataclass(frozen=True, slots=True)
class DeleteEntry:
    """One delete of a batch: entry id and receipt."""

    id: str
    receipt_handle: str


@dataclass(frozen=True, slots=True)
class BatchFailure:
    """An entry of a batch that failed.

    Attributes:
        id: Its batch entry id.
        code: Name of the smq exception (``MessageTooLong``, ``StaleReceipt``...);
            the HTTP API maps it to the SQS error code.
        message: What went wrong, for people.
        sender_fault: True when the request was at fault (always, so far).
    """

    id: str
    code: str
    message: str
    sender_fault: bool = True


T = TypeVar("T")
_Made = TypeVar("_Made")


@dataclass(frozen=True)
class BatchResult(Generic[T]):
    """Per-entry outcome of a batch call: what succeeded, what failed."""

    successful: list[T]
    failed: list[BatchFailure]


def _maker(cls: type[_Made]) -> Callable[..., _Made]:
    """A constructor of the frozen, slotted dataclass ``cls`` that takes every field, in order,
    positionally: a fifth of the time of the ``__init__`` ``dataclass`` writes, which sets each
    field through ``object.__setattr__`` by name. It fills an object of a plain class with the
    same slots, then makes it a ``cls`` (the same layout: Python checks); the object is the one
    ``cls(...)`` makes. For values smq made itself, on the paths that make one per message."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    if tuple(names) != vars(cls).get("__slots__") or "__post_init__" in vars(cls):
        raise TypeError(f"{cls.__name__}: not a plain slotted dataclass")
    lines = [f"class Make{cls.__name__}:", f"    __slots__ = {tuple(names)!r}"]
    lines.append(f"    def __init__(self, {', '.join(names)}):")
    lines += [f"        self.{name} = {name}" for name in names]
    lines.append("        self.__class__ = cls")
    namespace: dict[str, Any] = {"cls": cls}
    exec("\n".join(lines), namespace)  # as dataclasses writes __init__
    make: Callable[..., _Made] = namespace[f"Make{cls.__name__}"]
    if type(make(*names)) is not cls:  # a Python that would not: fail here, not in a receive
        raise TypeError(f"{cls.__name__}: cannot be made from its slots")
    return make


new_message = _maker(Message)
"""``Message(...)`` with every field given, positionally."""
new_send_result = _maker(SendResult)
"""``SendResult(...)`` with every field given, positionally."""


def received(
    home: str, issuer: str, token: str, reply: Sequence[Any], start: int, stride: int, first_suffix: str = ""
) -> list[Message]:
    """The messages of a receive script's reply, from ``start`` on.

    Each takes ``stride`` values: stored id, record, receive count, first receive (ms), and on a
    FIFO queue (stride 5) the sequence number. ``issuer`` is the queue (or shard) whose receipts
    end in ``token``, and those of first receives (count 1) in ``token + first_suffix``;
    ``home`` the queue the messages show.
    """
    first_token = token + first_suffix
    stored_ids = reply[start::stride]
    shown = shown_ids(stored_ids)
    # Receipts that parse_receipt would take go to _ISSUED: of this version's stored ids, a
    # valid token and queue name.
    issued = _ISSUED if shown and _TOKEN.fullmatch(token) and _issues_receipts(issuer) else None
    if issued is not None and len(issued) > _MAX_ISSUED - len(stored_ids):
        issued.clear()
    make = new_message
    messages = []
    attributes: dict[str, MessageAttribute]
    # FIFO: the sequence numbers.
    sequences = [one.decode() for one in reply[start + 4 :: 5]] if stride == 5 else [None] * len(stored_ids)
    for stored, message_id, record, count, first_ms, sequence in zip(
        stored_ids,
        shown or message_ids(stored_ids),
        reply[start + 1 :: stride],
        reply[start + 2 :: stride],
        reply[start + 3 :: stride],
        sequences,
        strict=True,
    ):
        stored_id = stored.decode()
        secret = first_token if count == 1 else token
        receipt = f"{issuer}:{stored_id}:{secret}"
        if issued is not None:
            issued[receipt] = (issuer, stored_id, secret)
        sent, _, payload = record.partition(b"|")
        if payload[:2] == b"0:":  # no header, no attributes (decode_record would find the same)
            message = make(
                home,
                message_id,
                receipt,
                payload[2:].decode(),
                {},
                int(sent) / 1000,
                count,
                first_ms / 1000,
                None,
                None,
                sequence,
                None,
                None,
            )
        else:
            sent_ms, attributes, body, group, deduplication_id, trace, sender = decode_record(record)
            message = make(
                home,
                message_id,
                receipt,
                body,
                attributes,
                sent_ms / 1000,
                count,
                first_ms / 1000,
                group,
                deduplication_id,
                sequence,
                trace,
                sender,
            )
        messages.append(message)
    return messages
