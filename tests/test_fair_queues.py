"""Fair queues: on a standard queue, a message group (tenant) that holds at least 30 messages in
flight and more than 10 % of the queue's is noisy, and its visible messages wait while other
groups' messages are visible (lua/includes/common.lua, lua/receive.lua)."""

from __future__ import annotations

import pytest

import smq
from conftest import Clock, raw


def _send(queue: smq.Queue, group: str | None, count: int, prefix: str) -> None:
    for start in range(0, count, 10):
        queue.send_batch(
            [
                smq.SendEntry(str(i), f"{prefix}{start + i}", message_group_id=group)
                for i in range(min(10, count - start))
            ]
        )


def _hold(queue: smq.Queue, count: int) -> list[smq.Message]:
    held: list[smq.Message] = []
    while len(held) < count:
        got = queue.receive(min(10, count - len(held)))
        assert got, "the queue ran dry"
        held += got
    return held


def _set_aside(queue: smq.Queue, quiet: int) -> None:
    """60 messages of group "noisy", 40 of them in flight (so it is noisy), then ``quiet`` of
    group "quiet" (q0, q1...), of which a receive of one takes q0 and sets 20 of noisy's aside."""
    _send(queue, "noisy", 60, "n")
    _hold(queue, 40)
    _send(queue, "quiet", quiet, "q")
    assert [m.body for m in queue.receive(1)] == ["q0"]


def test_quiet_groups_are_received_before_a_noisy_groups_backlog(client: smq.Client) -> None:
    queue = client.create_queue("shared", visibility_timeout=300)
    _send(queue, "noisy", 100, "n")
    held = _hold(queue, 40)  # 40 of the 40 in flight: the group is noisy
    assert {m.message_group_id for m in held} == {"noisy"}
    _send(queue, "quiet-a", 3, "a")
    _send(queue, "quiet-b", 2, "b")
    got = queue.receive(10)
    bodies = [m.body for m in got]
    # The five quiet messages come first though 60 of the noisy group's were ahead of them; the
    # rest of the batch is the noisy group's, as nothing else is visible.
    assert sorted(bodies[:5]) == ["a0", "a1", "a2", "b0", "b1"]
    assert [m.message_group_id for m in got[5:]] == ["noisy"] * 5
    assert [m.body for m in got[5:]] == ["n40", "n41", "n42", "n43", "n44"]  # in their order
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (55, 50)
    # Every message is still there, once: drain it all.
    seen = {m.body for m in held + got}
    for message in held + got:
        queue.delete(message.receipt_handle)
    while batch := queue.receive(10):
        seen |= {m.body for m in batch}
        queue.delete_batch([smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(batch)])
    assert len(seen) == 105
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (0, 0)
    r = raw(client)
    assert r.hlen(queue.keys.tenants) == 0 and r.hlen(queue.keys.group_of) == 0
    assert r.zcard(queue.keys.deferred) == 0


def test_without_group_ids_a_backlog_keeps_its_place(client: smq.Client) -> None:
    queue = client.create_queue("plain", visibility_timeout=300)
    _send(queue, None, 100, "n")
    _hold(queue, 40)
    _send(queue, None, 5, "q")
    assert [m.body for m in queue.receive(10)] == [f"n{i}" for i in range(40, 50)]
    assert raw(client).hget(queue.keys.meta, "fair") is None  # no group: none of the bookkeeping


def test_deduplication_ids_without_a_group_make_no_tenant(client: smq.Client) -> None:
    """A payload with a deduplication id alone starts "f0:" (a group of length 0): no group. Such
    messages (the Spark sink's, say) once made the queue fair with a tenant "" that held every
    message, so receives stopped handing any out after 30 were in flight."""
    queue = client.create_queue("deduplicated", visibility_timeout=300)
    for start in range(0, 100, 10):
        entries = [smq.SendEntry(str(n), f"m{n}", deduplication_id=f"d{n}") for n in range(start, start + 10)]
        queue.send_batch(entries)
    received = [m.body for _ in range(10) for m in queue.receive(10)]
    assert sorted(received) == sorted(f"m{n}" for n in range(100))
    r = raw(client)
    assert r.hget(queue.keys.meta, "fair") is None and r.hlen(queue.keys.tenants) == 0
    assert queue.attributes().noisy_groups == 0


def test_a_group_is_noisy_only_from_30_messages_in_flight(client: smq.Client) -> None:
    queue = client.create_queue("small", visibility_timeout=300)
    _send(queue, "big", 60, "n")
    _hold(queue, 29)  # all of the queue's in flight, but fewer than 30
    _send(queue, "other", 1, "q")
    assert [m.body for m in queue.receive(1)] == ["n29"]


def test_a_group_is_noisy_only_with_more_than_a_tenth_of_the_queues_messages_in_flight(
    client: smq.Client,
) -> None:
    queue = client.create_queue("many", visibility_timeout=300)
    for n in range(10):
        _send(queue, f"g{n}", 30, f"g{n}-")
    held = _hold(queue, 300)  # every group holds 30 of 300: a tenth, not more
    assert len({m.message_group_id for m in held}) == 10
    _send(queue, "g0", 1, "late-")
    _send(queue, "other", 1, "q")
    assert [m.body for m in queue.receive(1)] == ["late-0"]


def test_in_flight_counts_follow_deletes_timeouts_and_visibility_changes(
    client: smq.Client, clock: Clock
) -> None:
    queue = client.create_queue("counts", visibility_timeout=30)
    _send(queue, "g", 40, "m")
    held = _hold(queue, 40)
    r = raw(client)
    assert r.hget(queue.keys.tenants, "g") == b"40"
    queue.delete(held[0].receipt_handle)
    queue.change_visibility(held[1].receipt_handle, 0)
    assert r.hget(queue.keys.tenants, "g") == b"38"
    clock.advance(31)  # the other 38 time out
    again = queue.receive(10)
    assert len(again) == 10
    assert r.hget(queue.keys.tenants, "g") == b"10"
    assert r.hlen(queue.keys.group_of) == 10


def test_set_aside_messages_are_counted_purged_and_deleted_with_the_queue(client: smq.Client) -> None:
    queue = client.create_queue("aside", visibility_timeout=300)
    _set_aside(queue, 1)
    r = raw(client)
    assert r.zcard(queue.keys.deferred) == 20
    assert queue.attributes().visible == 20
    assert queue.purge() == 61
    assert queue.attributes().visible == 0
    assert r.zcard(queue.keys.deferred) == 0 and r.hlen(queue.keys.tenants) == 0
    _set_aside(queue, 1)
    client.delete_queue("aside")
    assert not any(
        r.exists(getattr(queue.keys, kind)) for kind in ("tenants", "group_of", "deferred", "noisy")
    )


def test_a_noisy_group_that_sent_nothing_for_5_minutes_is_set_apart_no_more(
    client: smq.Client, clock: Clock
) -> None:
    queue = client.create_queue("silent", visibility_timeout=3600)
    _set_aside(queue, 2)
    clock.advance(299)
    _send(queue, "quiet", 2, "r")
    assert [m.body for m in queue.receive(1)] == ["q1"]  # still noisy: it sent 299 s ago
    clock.advance(2)
    # Five minutes without a send from it: its messages set aside go out first, oldest first.
    assert [m.body for m in queue.receive(2)] == ["n40", "n41"]


def test_attributes_tell_noisy_groups_and_the_quiet_part_of_the_queue(
    client: smq.Client, clock: Clock
) -> None:
    queue = client.create_queue("told", visibility_timeout=300)
    _send(queue, "noisy", 60, "n")
    clock.advance(5)
    _hold(queue, 40)
    _send(queue, "quiet", 3, "q")
    assert [m.body for m in queue.receive(1)] == ["q0"]  # 20 of the noisy group's set aside
    clock.advance(2)
    info = queue.attributes()
    assert (info.noisy_groups, info.visible, info.in_flight) == (1, 22, 41)
    assert (info.visible_in_quiet_groups, info.in_flight_in_quiet_groups) == (2, 1)
    assert info.oldest_age == pytest.approx(7, abs=0.01)  # the noisy group's, set aside
    assert info.oldest_age_in_quiet_groups == pytest.approx(2, abs=0.01)
    plain = client.create_queue("plain-told").attributes()
    assert (plain.noisy_groups, plain.oldest_age_in_quiet_groups) == (0, None)


def test_peek_lists_and_a_redrive_moves_messages_set_aside(client: smq.Client) -> None:
    client.create_queue("home")
    dlq = client.create_queue("dead", visibility_timeout=300)
    _send(dlq, "noisy", 45, "n")
    held = _hold(dlq, 40)
    _send(dlq, "quiet", 1, "q")
    assert [m.body for m in dlq.receive(1)] == ["q0"]  # the noisy group's other 5 set aside
    assert raw(client).zcard(dlq.keys.deferred) == 5
    peeked = [p.body for p in dlq.peek(limit=10)]
    assert peeked == [f"n{i}" for i in range(40, 45)]
    assert [p.body for p in dlq.peek(limit=2, offset=3)] == ["n43", "n44"]
    for message in held:
        dlq.delete(message.receipt_handle)
    client.redrive("dead", destination="home")
    home = client.get_queue("home")
    assert sorted(m.body for m in _hold(home, 5)) == [f"n{i}" for i in range(40, 45)]
    assert raw(client).zcard(dlq.keys.deferred) == 0


def test_grouped_messages_moved_in_make_the_queue_fair(client: smq.Client, clock: Clock) -> None:
    dlq = client.create_queue("moved-dlq")
    source = client.create_queue(
        "moved", visibility_timeout=10, redrive_policy=smq.RedrivePolicy("moved-dlq", 1)
    )
    source.send("x", message_group_id="g")
    assert len(source.receive()) == 1
    clock.advance(11)
    assert source.receive() == []  # dead-lettered
    assert raw(client).hget(dlq.keys.meta, "fair") == b"1"
    (got,) = dlq.receive()
    assert got.message_group_id == "g"
    assert raw(client).hget(dlq.keys.tenants, "g") == b"1"
