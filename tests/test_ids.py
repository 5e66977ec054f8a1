"""Message ids: Redis keeps 20 characters, users see a UUID, and messages stored
by earlier versions (under their UUID) keep theirs."""

from __future__ import annotations

import base64
import re
import string
import uuid

import smq
from conftest import Clock, raw, stored_id
from smq.core._ids import message_id, message_ids, new_ids
from smq.core._message import encode_payload

UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def test_a_stored_id_is_20_url_safe_characters_and_its_message_id_a_uuid_of_the_same_bits() -> None:
    pairs = new_ids(1000)
    assert len({stored for stored, _ in pairs}) == len({shown for _, shown in pairs}) == 1000
    for stored, shown in pairs:
        # Letters, digits and "-" only: earlier versions' receipt check takes no more, and
        # their clients must still delete these messages during a rolling upgrade.
        assert re.fullmatch(r"[A-Za-z0-9-]{20}", stored)
        assert UUID4.fullmatch(shown) and uuid.UUID(shown).version == 4
        h = shown.replace("-", "")
        assert bytes.fromhex(h[:12] + h[13:16] + h[17:]) == base64.urlsafe_b64decode(stored)
        assert message_id(stored) == message_id(stored.encode()) == shown
    # With "_" gone, the ids still carry about 119.7 random bits: every other character shows up.
    assert set("".join(stored for stored, _ in pairs)) == set(string.ascii_letters + string.digits + "-")


def test_ids_that_are_not_stored_ids_are_shown_as_they_are() -> None:
    legacy = "0c2d5b7e-6a55-4f0b-9d1e-123456789abc"
    for other in (
        legacy,
        "m1",
        "",
        "a" * 19,
        "a" * 21,
        "abcdefghij.klmnopqrs",
        "abcdefghij=klmnopqrs",
        "abcdefghij+klmnopqrs",
        "abcdefghij_klmnopqrs",
    ):
        assert message_id(other) == message_id(other.encode()) == other


def test_the_ids_of_a_receive_are_decoded_together_as_each_alone() -> None:
    stored = [one.encode() for one, _ in new_ids(10)]
    legacy = b"0c2d5b7e-6a55-4f0b-9d1e-123456789abc"
    # All of this version; one older among them; lengths that add up right but are not 20 each.
    for batch in (
        stored,
        stored[:1],
        [],
        [*stored[:4], legacy, *stored[4:]],
        [stored[0][:19], stored[1] + b"x"],
    ):
        assert message_ids(batch) == [message_id(one) for one in batch]


def test_redis_keeps_the_stored_id_and_every_view_shows_the_uuid(client: smq.Client) -> None:
    queue = client.create_queue("ids", event_stream_max_len=100)
    sent = queue.send("a")
    assert UUID4.fullmatch(sent.message_id)
    (entry,) = raw(client).lrange(queue.keys.visible, 0, -1)
    kept = entry.partition(b"|")[0]  # a message never received keeps its record inline
    assert len(kept) == 20 and message_id(kept.decode()) == sent.message_id
    assert [p.message_id for p in queue.peek()] == [sent.message_id]

    (got,) = queue.receive(1)
    assert got.message_id == sent.message_id
    assert stored_id(got) == kept.decode()
    (held,) = queue.peek("in_flight")
    assert (held.message_id, held.receipt_handle) == (sent.message_id, got.receipt_handle)
    queue.change_visibility(got, 0)
    again = queue.receive(1)[0]
    assert (again.message_id, again.receive_count) == (sent.message_id, 2)
    queue.delete(again)
    assert {e.message_id for e in queue.events()} == {sent.message_id}
    assert queue.attributes().visible == 0 and queue.attributes().in_flight == 0


def test_a_duplicate_send_answers_the_first_message_id(client: smq.Client) -> None:
    queue = client.create_queue("dedup-ids")
    first = queue.send("a", deduplication_id="k")
    second = queue.send("b", deduplication_id="k")
    assert second.duplicate and second.message_id == first.message_id


def _send_as_before(client: smq.Client, queue: smq.Queue, uuid_id: str, body: str) -> None:
    """Store a message the way earlier versions did: under its UUID."""
    payload = encode_payload(body.encode(), {})
    client.run(
        "send",
        queue.keys,
        [client._now_arg(), queue.keys.wake_channel, 1, uuid_id, -1, 1, payload, ""],
        queue=queue.name,
    )


def test_messages_stored_under_a_uuid_keep_it_through_every_call(client: smq.Client) -> None:
    queue = client.create_queue("old-ids", event_stream_max_len=100)
    old = str(uuid.uuid4())
    _send_as_before(client, queue, old, "old")
    new = queue.send("new")
    assert [p.message_id for p in queue.peek()] == [old, new.message_id]

    got = queue.receive(10, visibility_timeout=60)
    assert [(m.body, m.message_id) for m in got] == [("old", old), ("new", new.message_id)]
    assert got[0].receipt_handle.split(":")[1] == old  # a receipt as earlier versions issued them
    queue.change_visibility(got[0], 0)
    (back,) = queue.receive(1)
    assert (back.message_id, back.receive_count) == (old, 2)
    result = queue.delete_batch(
        [smq.DeleteEntry("0", back.receipt_handle), smq.DeleteEntry("1", got[1].receipt_handle)]
    )
    assert len(result.successful) == 2 and not result.failed
    assert {e.message_id for e in queue.events()} == {old, new.message_id}
    assert queue.attributes().visible == 0 and queue.attributes().in_flight == 0


def test_a_dead_letter_keeps_its_id_and_a_redriven_message_is_a_new_one(
    client: smq.Client, clock: Clock
) -> None:
    client.create_queue("ids-dlq")
    queue = client.create_queue(
        "ids-src", visibility_timeout=10, redrive_policy=smq.RedrivePolicy("ids-dlq", 1)
    )
    sent = queue.send("poison")
    assert queue.receive(1)[0].message_id == sent.message_id
    clock.advance(10)
    assert queue.receive(1) == []  # the second receive moves it
    (dead,) = client.queue("ids-dlq").peek()
    assert (dead.message_id, dead.origin) == (sent.message_id, "ids-src")
    clock.advance(5)
    assert client.redrive("ids-dlq") == 1
    (back,) = queue.receive(1)
    # As SQS: a redriven message arrives as a new message, with a new id and sent time.
    assert back.body == "poison" and back.message_id != sent.message_id
    assert uuid.UUID(back.message_id).version == 4 and back.receive_count == 1
    assert back.sent_at >= dead.sent_at + 5
    assert queue.delete(back)


def test_fifo_ids_through_duplicates_and_repeated_attempts(client: smq.Client) -> None:
    queue = client.create_queue("ids.fifo", content_based_deduplication=True)
    first = queue.send("a", message_group_id="g")
    again = queue.send("a", message_group_id="g")
    assert again.duplicate and again.message_id == first.message_id and UUID4.fullmatch(first.message_id)
    (got,) = queue.receive(1, attempt_id="try")
    (replayed,) = queue.receive(1, attempt_id="try")
    assert got.message_id == replayed.message_id == first.message_id
    assert replayed.receipt_handle == got.receipt_handle and queue.delete(replayed)


def test_a_sharded_queue_shows_uuids_and_its_receipts_name_shard_and_stored_id(client: smq.Client) -> None:
    queue = client.create_queue("ids-hot", shards=3)
    sent = {queue.send(f"m{i}").message_id for i in range(9)}
    got = []
    while len(got) < 9:
        got += queue.receive(10)
    assert {m.message_id for m in got} == sent
    for message in got:
        shard, stored, _ = message.receipt_handle.split(":")
        assert shard in queue.shard_names() and message_id(stored) == message.message_id
    assert all(queue.delete(m) for m in got)
