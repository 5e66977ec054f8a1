"""The optional lifecycle event stream and the fleet-wide counters."""

from __future__ import annotations

import smq
from conftest import Clock, raw
from smq.core._ids import message_id


def _events(client: smq.Client, queue: smq.Queue) -> list[dict[str, str]]:
    return [
        {k.decode(): v.decode() for k, v in fields.items()}
        for _, fields in raw(client).xrange(queue.keys.events)
    ]


def test_event_stream_records_a_message_lifecycle(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10, event_stream_max_len=1000)
    sent = queue.send("x")
    (first,) = queue.receive()
    queue.change_visibility(first.receipt_handle, 20)
    clock.advance(20)
    (second,) = queue.receive()
    queue.delete(first.receipt_handle)
    queue.delete(second.receipt_handle)
    events = _events(client, queue)
    assert [(e["e"], e["n"]) for e in events] == [
        ("sent", "0"),
        ("received", "1"),
        ("visibility_changed", "1"),
        ("visibility_expired", "1"),
        ("received", "2"),
        ("stale_receipt", "2"),  # the message's receive count, the stale one's is unknown
        ("deleted", "2"),
    ]
    # The stream keeps the stored id; the message id is its UUID form.
    assert {message_id(e["m"]) for e in events} == {sent.message_id}
    assert int(events[-1]["t"]) == clock.now_ms
    assert all(second.receipt_handle.split(":")[-1] not in str(e) for e in events)  # no secrets


def test_event_stream_is_off_by_default_and_capped(client: smq.Client) -> None:
    quiet = client.create_queue("quiet")
    quiet.send("x")
    assert raw(client).exists(quiet.keys.events) == 0
    capped = client.create_queue("capped", event_stream_max_len=10)
    for _ in range(100):
        capped.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(10)])
    assert raw(client).xlen(capped.keys.events) < 500


def test_counters_add_up_across_clients(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    other = smq.Client(settings=client.settings, redis_client=client._redis).queue("jobs")
    queue.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(4)])
    other.send("y")
    for message in other.receive(3):
        queue.delete(message.receipt_handle)
    queue.receive(10)
    queue.receive(10)
    counters = queue.attributes().counters
    assert {k: counters.get(k, 0) for k in ("sent", "received", "deleted", "empty_receives")} == {
        "sent": 5,
        "received": 5,
        "deleted": 3,
        "empty_receives": 1,
    }
    assert set(counters) <= set(smq.COUNTERS)


def test_redelivered_counts_receives_of_messages_received_before(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10)
    queue.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(3)])
    first = queue.receive(3)
    queue.change_visibility(first[0].receipt_handle, 0)
    (again,) = queue.receive(10)
    assert again.receive_count == 2
    clock.advance(11)
    assert len(queue.receive(10)) == 3  # two expired for the first time, one for the second
    counters = queue.attributes().counters
    assert (counters["received"], counters["redelivered"]) == (7, 4)
