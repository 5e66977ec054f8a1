"""Send and receive: bodies, attributes, digests, sizes, delays, batches."""

from __future__ import annotations

import sys

import pytest

import smq
from conftest import Clock
from smq import MessageAttribute as Attr
from smq import SendEntry
from smq.core import _message

#: Why these tests run on all 14 combinations of ``client`` (conftest.MATRICES).
EVERY_BACKEND = "send and receive are script contracts"


def test_digests_match_sqs_reference_values() -> None:
    assert smq.md5_of_body("hello") == "5d41402abc4b2a76b9719d911017c592"
    # The SQS Developer Guide's example attribute.
    assert smq.md5_of_attributes({"SellerName": Attr("String", "Example Store")}) == (
        "cd28f3b68aeee4b2eac9c66f2f694b58"
    )
    # Binary, custom Number type and non-ASCII value, cross-checked against an
    # independent implementation of the SQS algorithm.
    mixed = {
        "b": Attr("Binary", bytes([0, 1, 2, 255])),
        "n": Attr("Number.int", "42"),
        "u": Attr("String", "naïve"),
    }
    assert smq.md5_of_attributes(mixed) == "44bfc1cacf7f833bfa579bfe82e26845"
    assert smq.md5_of_attributes({}) is None


def test_body_and_attributes_round_trip_with_digests(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    body = "héllo ✓ \U0001f600 | : 0:"
    sent = queue.send(
        body, attributes={"s": "text", "n": 3.5, "i": 7, "b": b"\x00\xff", "c": Attr("String.x", "y")}
    )
    (message,) = queue.receive()
    assert message.body == body
    assert message.message_id == sent.message_id
    assert dict(message.attributes) == {
        "s": Attr("String", "text"),
        "n": Attr("Number", "3.5"),
        "i": Attr("Number", "7"),
        "b": Attr("Binary", b"\x00\xff"),
        "c": Attr("String.x", "y"),
    }
    assert message.md5_of_body == sent.md5_of_body == smq.md5_of_body(body)
    assert message.md5_of_message_attributes == sent.md5_of_message_attributes is not None


def test_system_attributes_come_from_the_server_clock(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10)
    queue.send("x")
    sent_ms = clock.now_ms
    clock.advance(3)
    (first,) = queue.receive()
    assert first.sent_at == sent_ms / 1000
    assert first.receive_count == 1
    assert first.first_received_at == sent_ms / 1000 + 3
    clock.advance(10)
    (second,) = queue.receive()
    assert second.receive_count == 2
    assert second.first_received_at == first.first_received_at
    assert second.receipt_handle != first.receipt_handle


@pytest.mark.parametrize("body", ["", "bad \x00 char", "bad \x1f", "\ufffe", "\ud800", "ok\tbut \x0b"])
def test_bodies_with_characters_sqs_refuses_raise(client: smq.Client, body: str) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidMessageContents):
        queue.send(body)
    assert queue.attributes().visible == 0


def test_no_character_sqs_refuses_is_printable() -> None:
    # check_body searches only a body that is not all printable (this Python's Unicode data).
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    refused = _message._FORBIDDEN_CHARS.findall(every)
    assert len(refused) == 29 + 2048 + 2 and not any(c.isprintable() for c in refused)


def test_size_limit_counts_body_and_attributes(client: smq.Client) -> None:
    queue = client.create_queue("jobs", maximum_message_size=1024)
    # name "k" (1) + type "String" (6) + value (17) = 24 bytes of attributes
    queue.send("x" * 1000, attributes={"k": "v" * 17})
    with pytest.raises(smq.MessageTooLong):
        queue.send("x" * 1001, attributes={"k": "v" * 17})
    with pytest.raises(smq.MessageTooLong):
        queue.send("é" * 513)  # 1026 bytes in UTF-8
    assert queue.attributes().visible == 1


@pytest.mark.parametrize(
    "attributes,error",
    [
        ({"AWS.x": "v"}, smq.InvalidAttributeName),
        ({"amazon.x": "v"}, smq.InvalidAttributeName),
        ({".x": "v"}, smq.InvalidAttributeName),
        ({"a..b": "v"}, smq.InvalidAttributeName),
        ({"sp ace": "v"}, smq.InvalidAttributeName),
        ({"e": ""}, smq.InvalidAttributeValue),
        ({"n": Attr("Number", "12abc")}, smq.InvalidAttributeValue),
        ({"n": Attr("Number", "1e200")}, smq.InvalidAttributeValue),
        ({"n": Attr("Number", " 45 ")}, smq.InvalidAttributeValue),
        ({"n": Attr("Number", "\u0663\u0660")}, smq.InvalidAttributeValue),  # Arabic-Indic 30
        ({"n": Attr("Number", "1_000")}, smq.InvalidAttributeValue),
        ({"n": Attr("Number", "1e" + "9" * 5000)}, smq.InvalidAttributeValue),
        ({"t": Attr("Text", "x")}, smq.InvalidAttributeValue),
        ({"b": Attr("Binary", "not bytes")}, smq.InvalidAttributeValue),
        ({"o": object()}, smq.InvalidAttributeValue),
        ({f"k{n}": "v" for n in range(11)}, smq.InvalidAttributeValue),
    ],
)
def test_bad_message_attributes_raise_before_sending(
    client: smq.Client, attributes: dict, error: type
) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(error):
        queue.send("x", attributes=attributes)
    assert queue.attributes().visible == 0


@pytest.mark.parametrize("text", ["-7", "+1.5e3", ".5", "5.", "0", "1E-9"])
def test_number_attributes_in_every_ascii_form_are_accepted(client: smq.Client, text: str) -> None:
    queue = client.create_queue("jobs")
    queue.send("x", attributes={"n": Attr("Number", text)})
    assert queue.attributes().visible == 1


def test_per_message_delay_overrides_queue_delay(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", delay_seconds=10)
    queue.send("queue-delay")
    queue.send("own-delay", delay_seconds=2)
    queue.send("no-delay", delay_seconds=0)
    assert [m.body for m in queue.receive(10)] == ["no-delay"]
    assert queue.attributes().delayed == 2
    clock.advance(1.999)
    assert queue.receive(10) == []
    clock.advance(0.001)
    assert [m.body for m in queue.receive(10)] == ["own-delay"]
    clock.advance(8)
    assert [m.body for m in queue.receive(10)] == ["queue-delay"]


@pytest.mark.parametrize("delay", [-1, 901, 1.5])
def test_delay_out_of_range_raises(client: smq.Client, delay: object) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter):
        queue.send("x", delay_seconds=delay)  # type: ignore[arg-type]


def test_receive_returns_at_most_max_messages_oldest_first(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    for n in range(15):
        queue.send(f"m{n}")
    assert [m.body for m in queue.receive(10)] == [f"m{n}" for n in range(10)]
    assert [m.body for m in queue.receive(10)] == [f"m{n}" for n in range(10, 15)]
    assert queue.receive(10) == []


@pytest.mark.parametrize("count", [0, 11])
def test_receive_count_out_of_range_raises(client: smq.Client, count: int) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter):
        queue.receive(count)


def test_batch_send_reports_each_entry(client: smq.Client) -> None:
    queue = client.create_queue("jobs", maximum_message_size=1024)
    result = queue.send_batch(
        [
            SendEntry("a", "first"),
            SendEntry("b", "x" * 2000),
            SendEntry("c", "bad \x00"),
            SendEntry("d", "delayed", delay_seconds=30),
            SendEntry("e", "last", attributes={"k": 1}),
        ]
    )
    assert [r.id for r in result.successful] == ["a", "d", "e"]
    assert {(f.id, f.code) for f in result.failed} == {
        ("b", "MessageTooLong"),
        ("c", "InvalidMessageContents"),
    }
    assert all(f.sender_fault for f in result.failed)
    assert [m.body for m in queue.receive(10)] == ["first", "last"]
    assert queue.attributes().delayed == 1


@pytest.mark.parametrize(
    "entries,error",
    [
        ([], smq.EmptyBatchRequest),
        ([SendEntry(f"e{n}", "x") for n in range(11)], smq.TooManyEntriesInBatchRequest),
        ([SendEntry("same", "x"), SendEntry("same", "y")], smq.BatchEntryIdsNotDistinct),
        ([SendEntry("bad id", "x")], smq.InvalidBatchEntryId),
        ([SendEntry("i" * 81, "x")], smq.InvalidBatchEntryId),
        # The ids are matched joined by ",": one holding it, or empty, is still refused.
        ([SendEntry("a,b", "x"), SendEntry("c", "y")], smq.InvalidBatchEntryId),
        ([SendEntry("a", "x"), SendEntry("", "y")], smq.InvalidBatchEntryId),
        ([SendEntry("a", "x"), SendEntry(1, "y")], smq.InvalidBatchEntryId),  # type: ignore[arg-type]
        ([SendEntry("a", "x"), SendEntry("a", "y"), SendEntry("bad id", "z")], smq.InvalidBatchEntryId),
        ([SendEntry(f"e{n}", "x" * 200_000) for n in range(6)], smq.BatchRequestTooLong),
    ],
)
def test_malformed_batches_raise_and_send_nothing(client: smq.Client, entries: list, error: type) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(error):
        queue.send_batch(entries)
    assert queue.attributes().visible == 0


def test_message_ids_are_distinct_version_4_uuids(client: smq.Client) -> None:
    import uuid

    queue = client.create_queue("jobs")
    ids = [
        r.message_id
        for _ in range(20)
        for r in queue.send_batch([SendEntry(f"e{n}", "x") for n in range(10)]).successful
    ]
    assert len(set(ids)) == 200
    for message_id in ids:
        parsed = uuid.UUID(message_id)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, message_id)
