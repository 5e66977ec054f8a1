"""Visibility timeouts and receipts, as the SQS Developer Guide describes them."""

from __future__ import annotations

import pytest

import smq
from conftest import Clock, raw
from smq import ChangeEntry, DeleteEntry
from smq.core import _message

#: Why these tests run on all 14 combinations of ``client`` (conftest.MATRICES).
EVERY_BACKEND = "the receipt and visibility rules"

HOURS = 3600


def test_receive_hides_message_until_visibility_expires(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    queue.send("x")
    assert len(queue.receive()) == 1
    clock.advance(29.999)
    assert queue.receive() == []
    clock.advance(0.001)
    (again,) = queue.receive()
    assert again.receive_count == 2
    assert queue.attributes().counters["visibility_expired"] == 1


def test_per_receive_timeout_overrides_the_queue_default_once(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    queue.send("x")
    queue.receive(visibility_timeout=5)
    clock.advance(5)
    assert len(queue.receive()) == 1  # uses the queue's 30 s again
    clock.advance(29.9)
    assert queue.receive() == []
    clock.advance(0.1)
    assert len(queue.receive()) == 1


def test_change_counts_from_the_call(client: smq.Client, clock: Clock) -> None:
    # The Developer Guide's example: timeout 60 s, 15 s in, change to 10 s:
    # visible again 25 s after the receive, not 70 s.
    queue = client.create_queue("jobs", visibility_timeout=60)
    queue.send("x")
    (message,) = queue.receive()
    clock.advance(15)
    queue.change_visibility(message.receipt_handle, 10)
    clock.advance(9.999)
    assert queue.receive() == []
    clock.advance(0.001)
    assert len(queue.receive()) == 1


def test_change_applies_to_that_receipt_only(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    queue.send("x")
    (message,) = queue.receive()
    queue.change_visibility(message.receipt_handle, 300)
    clock.advance(300)
    (again,) = queue.receive()  # the next receive: queue default, not 300 s
    clock.advance(30)
    assert len(queue.receive()) == 1
    assert again.receive_count == 2


def test_timeout_zero_makes_message_visible_at_once(client: smq.Client) -> None:
    queue = client.create_queue("jobs", visibility_timeout=300)
    queue.send("x")
    (message,) = queue.receive()
    queue.change_visibility(message.receipt_handle, 0)
    # Nobody received it since: as SQS, the same receipt hides it again.
    queue.change_visibility(message.receipt_handle, 10)
    assert queue.receive() == []
    queue.change_visibility(message.receipt_handle, 0)
    (again,) = queue.receive()
    assert again.message_id == message.message_id
    with pytest.raises(smq.StaleReceipt):
        queue.change_visibility(message.receipt_handle, 10)


def test_timeout_zero_never_dead_letters_by_itself(client: smq.Client) -> None:
    client.create_queue("dlq")
    queue = client.create_queue("jobs", redrive_policy=smq.RedrivePolicy("dlq", 1))
    queue.send("x")
    (message,) = queue.receive()
    queue.change_visibility(message.receipt_handle, 0)
    info = queue.attributes()
    assert (info.visible, info.counters.get("dead_lettered", 0)) == (1, 0)
    assert client.get_queue("dlq").attributes().visible == 0


def test_change_past_twelve_hours_after_receive_is_an_error(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    queue.send("x")
    (message,) = queue.receive(visibility_timeout=2 * HOURS)
    clock.advance(1 * HOURS)
    with pytest.raises(smq.VisibilityCeilingExceeded):
        queue.change_visibility(message.receipt_handle, 11 * HOURS + 1)
    queue.change_visibility(message.receipt_handle, 11 * HOURS)  # exactly the ceiling
    clock.advance(11 * HOURS - 1)
    with pytest.raises(smq.VisibilityCeilingExceeded):
        queue.change_visibility(message.receipt_handle, 2)
    clock.advance(1)
    assert len(queue.receive()) == 1  # never clamped, never extended past it


def test_ceiling_counts_from_the_receive_that_issued_the_receipt(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    queue.send("x")
    queue.receive()
    clock.advance(11 * HOURS)  # long after a first receive
    clock.advance(30)
    (again,) = queue.receive()
    queue.change_visibility(again.receipt_handle, 12 * HOURS)  # a new receipt, a new 12 h


def test_visibility_timeout_out_of_range_raises(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("x")
    (message,) = queue.receive()
    for bad in (-1, 43201):
        with pytest.raises(smq.InvalidParameter):
            queue.change_visibility(message.receipt_handle, bad)
        with pytest.raises(smq.InvalidParameter):
            queue.receive(visibility_timeout=bad)


def test_the_newest_receipt_hides_a_message_whose_timeout_ran_out(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10)
    queue.send("x")
    (message,) = queue.receive()
    clock.advance(10)  # expired, not yet reclaimed by any receive
    queue.change_visibility(message.receipt_handle, 30)
    assert queue.receive() == []
    clock.advance(30)
    assert [m.message_id for m in queue.receive()] == [message.message_id]


def test_a_message_hidden_again_from_the_visible_list_is_received_once(
    client: smq.Client, clock: Clock
) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10)
    queue.send("a")
    queue.send("b")
    first, second = queue.receive(2)
    clock.advance(10)
    (taken,) = queue.receive(1)  # reclaims both, hands out one: the other waits in the list
    waiting = first if taken.message_id == second.message_id else second
    queue.change_visibility(waiting.receipt_handle, 20)  # back in flight, its list entry left behind
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (0, 2)
    assert queue.peek("visible") == []
    assert queue.receive(10) == []  # the entry left behind is skipped, not handed out
    clock.advance(20)  # both timeouts ran out: each message comes back once
    again = [m.message_id for m in queue.receive(10)]
    assert sorted(again) == sorted([waiting.message_id, taken.message_id])
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (0, 2)
    assert queue.receive(10) == []


def test_a_fifo_receipt_whose_timeout_ran_out_is_expired(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs.fifo", visibility_timeout=10, content_based_deduplication=True)
    queue.send("x", message_group_id="g")
    (message,) = queue.receive()
    clock.advance(10)
    with pytest.raises(smq.ReceiptExpired):
        queue.change_visibility(message.receipt_handle, 30)
    with pytest.raises(smq.ReceiptExpired):
        queue.delete(message.receipt_handle)
    assert [m.message_id for m in queue.receive()] == [message.message_id]


def test_change_on_a_deleted_message_raises_not_inflight(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("x")
    (message,) = queue.receive()
    assert queue.delete(message.receipt_handle) is True
    with pytest.raises(smq.MessageNotInflight):
        queue.change_visibility(message.receipt_handle, 30)


def test_stale_receipt_cannot_extend_or_end_a_newer_flight(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10)
    queue.send("x")
    (old,) = queue.receive()
    clock.advance(10)
    (new,) = queue.receive()
    for timeout in (0, 600):
        with pytest.raises(smq.StaleReceipt):
            queue.change_visibility(old.receipt_handle, timeout)
    clock.advance(9.999)
    assert queue.receive() == []  # the newer flight kept its own 10 s
    assert queue.attributes().counters["stale_receipts"] == 2
    queue.change_visibility(new.receipt_handle, 60)


def test_stale_delete_deletes_nothing_and_is_counted(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10)
    queue.send("x")
    (old,) = queue.receive()
    clock.advance(10)
    (new,) = queue.receive()
    assert queue.delete(old.receipt_handle) is False
    info = queue.attributes()
    assert (info.in_flight, info.counters["stale_receipts"], info.counters.get("deleted", 0)) == (1, 1, 0)
    assert queue.delete(new.receipt_handle) is True
    assert queue.attributes().in_flight == 0


def test_newest_receipt_deletes_a_message_visible_again(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10)
    queue.send("x")
    queue.send("y")
    (message,) = queue.receive()
    clock.advance(10)  # x is visible again; its newest receipt is still ours
    assert queue.delete(message.receipt_handle) is True
    assert queue.attributes().visible == 1
    assert [m.body for m in queue.receive(10)] == ["y"]
    assert queue.attributes().visible == 0


def test_deleted_visible_messages_leave_exact_counts(client: smq.Client) -> None:
    queue = client.create_queue("jobs", visibility_timeout=100)
    for n in range(5):
        queue.send(f"m{n}")
    received = queue.receive(5)
    for message in received[:3]:
        queue.change_visibility(message.receipt_handle, 0)
        queue.delete(message.receipt_handle)
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (0, 2)
    assert queue.receive(10) == []
    assert queue.attributes().visible == 0


def test_delete_of_a_deleted_message_succeeds_and_deletes_nothing(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("x")
    (message,) = queue.receive()
    assert queue.delete(message.receipt_handle) is True
    assert queue.delete(message.receipt_handle) is False
    assert queue.attributes().counters["deleted"] == 1


@pytest.mark.parametrize("receipt", ["", "garbage", "jobs:id", "other:abc:QI4ExglSQ8Pg599O", 42])
def test_malformed_or_foreign_receipts_raise_receipt_handle_is_invalid(
    client: smq.Client, receipt: object
) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.ReceiptHandleIsInvalid):
        queue.delete(receipt)  # type: ignore[arg-type]
    with pytest.raises(smq.ReceiptHandleIsInvalid):
        queue.change_visibility(receipt, 5)  # type: ignore[arg-type]


def test_a_receipt_parses_the_same_whether_this_process_issued_it_or_not(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send_batch([smq.SendEntry(str(i), "x") for i in range(3)])
    receipts = [message.receipt_handle for message in queue.receive(3)]
    for issued in (True, False):
        if not issued:
            _message._ISSUED.clear()  # as if another process had received them
        for receipt in receipts:
            assert _message.parse_receipt("jobs", receipt) == tuple(receipt.split(":")[1:])
            for other in ("other", "jobs.fifo", "job"):
                with pytest.raises(smq.ReceiptHandleIsInvalid):
                    _message.parse_receipt(other, receipt)
    assert queue.delete_batch([DeleteEntry(str(i), r) for i, r in enumerate(receipts)]).successful
    assert queue.attributes().visible == queue.attributes().in_flight == 0


def test_guessed_token_cannot_touch_a_message(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("x")
    (message,) = queue.receive()
    forged = message.receipt_handle[:-16] + "A" * 16
    with pytest.raises(smq.StaleReceipt):
        queue.change_visibility(forged, 0)
    assert queue.delete(forged) is False
    assert queue.attributes().in_flight == 1


def test_batch_change_and_delete_report_each_entry(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=10)
    for n in range(3):
        queue.send(f"m{n}")
    a, b, c = queue.receive(3)
    queue.delete(c.receipt_handle)
    result = queue.change_visibility_batch(
        [
            ChangeEntry("a", a.receipt_handle, 100),
            ChangeEntry("b", b.receipt_handle, 0),
            ChangeEntry("c", c.receipt_handle, 100),
            ChangeEntry("bad", "nonsense", 100),
            ChangeEntry("far", a.receipt_handle, 43201),
        ]
    )
    assert result.successful == ["a", "b"]
    assert {(f.id, f.code) for f in result.failed} == {
        ("c", "MessageNotInflight"),
        ("bad", "ReceiptHandleIsInvalid"),
        ("far", "InvalidParameter"),
    }
    (b_again,) = queue.receive()
    assert b_again.message_id == b.message_id
    deleted = queue.delete_batch(
        [DeleteEntry("a", a.receipt_handle), DeleteEntry("b", b_again.receipt_handle)]
    )
    assert deleted.successful == ["a", "b"] and deleted.failed == []
    assert queue.attributes().in_flight == 0
    with pytest.raises(smq.BatchEntryIdsNotDistinct):
        queue.delete_batch([DeleteEntry("x", a.receipt_handle), DeleteEntry("x", a.receipt_handle)])


def test_expired_messages_are_reclaimed_a_bounded_number_per_receive(
    client: smq.Client, clock: Clock
) -> None:
    queue = client.create_queue("jobs", visibility_timeout=5)
    for _ in range(25):
        queue.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(10)])
    while queue.receive(10):
        pass
    clock.advance(5)
    assert queue.attributes().visible == 250  # counted where they belong
    queue.receive(1)
    assert queue.attributes().counters["visibility_expired"] == 100
    assert raw(client).zcard(queue.keys.inflight) == 150 + 1


def test_receive_finds_messages_behind_many_deleted_ids(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    for _ in range(25):
        queue.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(10)])
    receipts = [m.receipt_handle for _ in range(25) for m in queue.receive(10)]
    for start in range(0, 250, 10):
        # Released at once, then deleted late: 250 deleted ids at the list's head.
        chunk = receipts[start : start + 10]
        queue.change_visibility_batch([ChangeEntry(f"c{n}", r, 0) for n, r in enumerate(chunk)])
        queue.delete_batch([DeleteEntry(f"d{n}", r) for n, r in enumerate(chunk)])
    queue.send("real")
    assert queue.attributes().visible == 1
    assert [m.body for m in queue.receive(10, wait_time_seconds=5)] == ["real"]


def test_a_message_itself_stands_for_its_receipt(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("x")
    (message,) = queue.receive()
    queue.change_visibility(message, 0)
    (again,) = queue.receive()
    assert queue.delete(again) is True


def test_a_hidden_again_message_dead_lettered_with_its_list_entry_counts_once(
    client: smq.Client, clock: Clock
) -> None:
    client.create_queue("dlq")
    queue = client.create_queue("jobs", redrive_policy=smq.RedrivePolicy("dlq", 1))
    queue.send("x")
    (message,) = queue.receive(visibility_timeout=10)
    queue.change_visibility(message.receipt_handle, 0)
    queue.change_visibility(message.receipt_handle, 5)  # hidden again: its list entry stays
    clock.advance(6)
    assert queue.receive(10) == []  # both entries popped together; over max receives: moved once
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (0, 0)
    assert info.counters["dead_lettered"] == 1
    queue.send("y")
    assert queue.attributes().visible == 1
