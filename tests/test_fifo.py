"""FIFO queues: groups in order, one consumer per group at a time, deduplication.

Every test runs on fakeredis, a real Redis and a real Redis Cluster (the
``client`` fixture); time is driven by hand through ``clock``.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any

import pytest

import smq
from conftest import Clock, raw
from smq.core._keys import KINDS, QueueKeys

#: Why these tests run on all 14 combinations of ``client`` (conftest.MATRICES).
EVERY_BACKEND = "the FIFO scripts' group order and deduplication"


def _fifo(client: smq.Client, name: str = "jobs.fifo", **settings: object) -> smq.Queue:
    return client.create_queue(name, content_based_deduplication=True, **settings)


def _send_all(queue: smq.Queue, *pairs: str) -> None:
    """Send "a1", "b1"...: the letter is the group."""
    for body in pairs:
        queue.send(body, message_group_id=body[0])


def _bodies(messages: list[smq.Message]) -> list[str]:
    return [m.body for m in messages]


# -- creation and settings ------------------------------------------------------------


def test_a_name_ending_in_fifo_makes_a_fifo_queue_with_its_settings(client: smq.Client) -> None:
    queue = client.create_queue(
        "orders.fifo",
        content_based_deduplication=True,
        deduplication_scope="messageGroup",
        fifo_throughput_limit="perMessageGroupId",
    )
    config = queue.attributes().config
    assert queue.fifo and config.fifo_queue
    assert (config.content_based_deduplication, config.deduplication_scope, config.fifo_throughput_limit) == (
        True,
        "messageGroup",
        "perMessageGroupId",
    )
    assert config.inflight_limit == 20_000  # the SQS FIFO default
    assert not client.create_queue("orders").attributes().config.fifo_queue


def test_fifo_settings_are_refused_on_standard_queues_and_mismatched_names(client: smq.Client) -> None:
    with pytest.raises(smq.InvalidAttributeName, match="content_based_deduplication"):
        client.create_queue("plain", content_based_deduplication=True)
    with pytest.raises(smq.InvalidAttributeValue, match=".fifo"):
        client.create_queue("plain", fifo_queue=True)
    with pytest.raises(smq.InvalidAttributeValue, match=".fifo"):
        client.create_queue("odd.fifo", fifo_queue=False)
    with pytest.raises(smq.InvalidAttributeValue, match="deduplication_scope"):
        client.create_queue("odd.fifo", deduplication_scope="group")
    assert client.list_queues() == []


def test_fifo_settings_change_but_the_queue_type_does_not(client: smq.Client) -> None:
    queue = _fifo(client)
    queue.set_attributes(content_based_deduplication=False, deduplication_scope="messageGroup")
    config = queue.attributes().config
    assert (config.content_based_deduplication, config.deduplication_scope) == (False, "messageGroup")
    with pytest.raises(smq.InvalidAttributeValue, match="fifo_queue"):
        queue.set_attributes(fifo_queue=False)
    with pytest.raises(smq.QueueNameExists):
        client.create_queue("jobs.fifo", content_based_deduplication=True)


# -- sending --------------------------------------------------------------------------


def test_a_send_needs_a_group_takes_no_delay_and_needs_a_deduplication_id(client: smq.Client) -> None:
    queue = client.create_queue("jobs.fifo")  # no content-based deduplication
    with pytest.raises(smq.MissingParameter, match="MessageGroupId"):
        queue.send("x")
    with pytest.raises(smq.InvalidParameter, match="DelaySeconds"):
        queue.send("x", message_group_id="g", deduplication_id="d", delay_seconds=5)
    queue.send("x", message_group_id="g", deduplication_id="d0", delay_seconds=0)  # 0: the queue's delay
    with pytest.raises(smq.InvalidParameter, match="MessageDeduplicationId provided"):
        queue.send("x", message_group_id="g")
    with pytest.raises(smq.InvalidParameter, match="MessageGroupId"):
        queue.send("x", message_group_id="has space", deduplication_id="d")
    with pytest.raises(smq.InvalidParameter, match="MessageGroupId"):
        queue.send("x", message_group_id="g" * 129, deduplication_id="d")
    batch = queue.send_batch(
        [
            smq.SendEntry("ok", "x", message_group_id="g", deduplication_id="1"),
            smq.SendEntry("nogroup", "x", deduplication_id="2"),
        ]
    )
    assert [r.id for r in batch.successful] == ["ok"]
    assert [(f.id, f.code) for f in batch.failed] == [("nogroup", "MissingParameter")]
    # As SQS: an entry without a deduplication id fails the whole batch, and nothing is sent.
    with pytest.raises(smq.InvalidParameter, match="MessageDeduplicationId provided"):
        queue.send_batch(
            [
                smq.SendEntry("ok", "y", message_group_id="g", deduplication_id="3"),
                smq.SendEntry("nodedup", "y", message_group_id="g"),
            ]
        )
    assert queue.attributes().visible == 2


def test_sequence_numbers_increase_in_send_order(client: smq.Client) -> None:
    queue = _fifo(client)
    results = [queue.send(f"m{i}", message_group_id="abc"[i % 3]) for i in range(6)]
    numbers = [r.sequence_number for r in results]
    assert all(n is not None and len(n) == 20 and n.isdigit() for n in numbers)
    assert numbers == sorted(numbers) and len(set(numbers)) == 6
    received = queue.receive(10)
    assert {m.message_id: m.sequence_number for m in received} == {
        r.message_id: r.sequence_number for r in results
    }


def test_a_duplicate_within_five_minutes_is_accepted_and_not_delivered(
    client: smq.Client, clock: Clock
) -> None:
    queue = client.create_queue("jobs.fifo")
    first = queue.send("pay 10", message_group_id="acct", deduplication_id="tx-1")
    again = queue.send("pay 10 (retry)", message_group_id="acct", deduplication_id="tx-1")
    assert again.duplicate and not first.duplicate
    assert (again.message_id, again.sequence_number) == (first.message_id, first.sequence_number)
    (message,) = queue.receive(10)
    assert (message.body, message.deduplication_id) == ("pay 10", "tx-1")
    queue.delete(message)
    clock.advance(299)
    assert queue.send(
        "pay 10", message_group_id="acct", deduplication_id="tx-1"
    ).duplicate  # deleted, still known
    clock.advance(1.001)
    later = queue.send("pay 10", message_group_id="acct", deduplication_id="tx-1")
    assert not later.duplicate and later.sequence_number > first.sequence_number
    assert queue.attributes().counters["deduplicated"] == 2


def test_content_based_deduplication_uses_the_sha256_of_the_body(client: smq.Client) -> None:
    queue = _fifo(client)
    queue.send("same", message_group_id="a")
    assert queue.send("same", message_group_id="b").duplicate  # scope queue: across groups
    assert not queue.send("same", message_group_id="a", deduplication_id="explicit").duplicate
    messages = queue.receive(10)
    assert [(m.body, m.deduplication_id) for m in messages] == [
        ("same", hashlib.sha256(b"same").hexdigest()),
        ("same", "explicit"),
    ]


def test_deduplication_scope_message_group_counts_ids_within_their_group(client: smq.Client) -> None:
    queue = _fifo(client, deduplication_scope="messageGroup")
    assert not queue.send("x", message_group_id="a", deduplication_id="d").duplicate
    assert not queue.send("x", message_group_id="b", deduplication_id="d").duplicate
    assert queue.send("x", message_group_id="a", deduplication_id="d").duplicate
    assert queue.attributes().visible == 2


def test_a_duplicate_within_one_batch_is_dropped_and_reported(client: smq.Client) -> None:
    queue = _fifo(client)
    result = queue.send_batch([smq.SendEntry(str(i), "same", message_group_id="g") for i in range(3)])
    assert [r.duplicate for r in result.successful] == [False, True, True]
    assert len({r.message_id for r in result.successful}) == 1
    assert len(queue.receive(10)) == 1


# -- order and groups -----------------------------------------------------------------


def test_one_receive_returns_a_group_in_order_then_other_groups(client: smq.Client) -> None:
    queue = _fifo(client)
    _send_all(queue, "a1", "b1", "a2", "c1", "a3", "b2")
    first = queue.receive(4)
    assert _bodies(first) == ["a1", "a2", "a3", "b1"]
    assert _bodies(queue.receive(10)) == ["c1"]  # a and b are locked
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.groups, info.groups_in_flight) == (1, 5, 3, 3)


def test_a_send_into_a_group_in_flight_does_not_unlock_it(client: smq.Client) -> None:
    queue = _fifo(client)
    _send_all(queue, "a1")
    (a1,) = queue.receive()
    _send_all(queue, "a2", "b1")
    assert _bodies(queue.receive(10)) == ["b1"]
    assert queue.receive(10) == []
    queue.delete(a1)
    assert _bodies(queue.receive(10)) == ["a2"]


def test_a_group_stays_locked_until_every_message_of_the_receive_is_done(client: smq.Client) -> None:
    queue = _fifo(client)
    _send_all(queue, "a1", "a2", "a3")
    a1, a2, a3 = queue.receive(3)
    queue.delete(a1)
    queue.delete(a2)
    _send_all(queue, "a4")
    assert queue.receive(10) == []  # a3 still in flight
    queue.delete(a3)
    assert _bodies(queue.receive(10)) == ["a4"]


def test_extending_a_non_last_message_of_a_batch_keeps_the_later_ones_hidden(
    client: smq.Client, clock: Clock
) -> None:
    queue = _fifo(client, visibility_timeout=10)
    _send_all(queue, "a1", "a2", "a3")
    a1, _, _ = queue.receive(3)
    clock.advance(5)
    queue.change_visibility(a1, 60)  # heartbeat on the first message only
    clock.advance(10)  # a2 and a3 ran out; a1 is held for 55 s more
    assert queue.receive(10) == []
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.groups_in_flight) == (2, 1, 1)
    queue.delete(a1)
    again = queue.receive(10)
    assert [(m.body, m.receive_count) for m in again] == [("a2", 2), ("a3", 2)]


def test_a_timed_out_message_goes_back_to_the_head_of_its_group(client: smq.Client, clock: Clock) -> None:
    queue = _fifo(client, visibility_timeout=10)
    _send_all(queue, "a1", "a2")
    (a1,) = queue.receive(1)
    clock.advance(10)
    assert _bodies(queue.receive(1)) == ["a1"]  # not a2
    clock.advance(10)
    (a1_again,) = queue.receive(1)
    assert (a1_again.body, a1_again.receive_count) == ("a1", 3)
    queue.delete(a1_again)
    assert _bodies(queue.receive(1)) == ["a2"]


def test_order_holds_across_retries_and_visibility_zero(client: smq.Client, clock: Clock) -> None:
    queue = _fifo(client, visibility_timeout=10)
    _send_all(queue, *[f"a{i}" for i in range(1, 7)])
    seen: list[str] = []
    for _ in range(20):
        messages = queue.receive(3)
        if not messages:
            clock.advance(10)
            continue
        # Process the first, give the second back at once, drop the rest to time out.
        seen.append(messages[0].body)
        queue.delete(messages[0])
        if len(messages) > 1:
            queue.change_visibility(messages[1], 0)
        if len(seen) == 6:
            break
    assert seen == [f"a{i}" for i in range(1, 7)]


def test_visibility_zero_unlocks_the_group_only_with_its_last_message(client: smq.Client) -> None:
    queue = _fifo(client)
    _send_all(queue, "a1", "a2")
    a1, a2 = queue.receive(2)
    queue.change_visibility(a2, 0)
    assert queue.receive(10) == []  # a1 still holds the group
    queue.change_visibility(a1, 0)
    assert _bodies(queue.receive(10)) == ["a1", "a2"]


def test_a_delayed_message_does_not_block_its_group_or_others(client: smq.Client, clock: Clock) -> None:
    queue = _fifo(client)
    _send_all(queue, "a1")
    clock.advance(60)  # past any delay the queue will have
    queue.set_attributes(delay_seconds=30)
    _send_all(queue, "a2", "b1")
    info = queue.attributes()
    assert (info.visible, info.delayed) == (1, 2)
    (a1,) = queue.receive(10)  # the delayed a2 neither blocks a1 nor comes with it
    assert a1.body == "a1"
    queue.delete(a1)
    assert queue.receive(10) == []
    assert queue.attributes().groups_in_flight == 0  # nothing locked by a delay
    clock.advance(30)
    assert _bodies(queue.receive(10)) == ["a2", "b1"]


def test_the_queue_delay_is_retroactive_on_fifo_queues(client: smq.Client, clock: Clock) -> None:
    queue = _fifo(client, delay_seconds=60)
    _send_all(queue, "a1")
    assert queue.receive(10) == []
    queue.set_attributes(delay_seconds=5)  # as in SQS: applies to messages already sent
    clock.advance(5)
    assert _bodies(queue.receive(10)) == ["a1"]


def test_a_long_poll_wakes_when_the_group_unlocks(client: smq.Client) -> None:
    queue = _fifo(client)
    _send_all(queue, "a1", "a2")
    (a1,) = queue.receive(1)
    got: list[list[smq.Message]] = []
    poller = threading.Thread(target=lambda: got.append(queue.receive(1, wait_time_seconds=10)))
    poller.start()
    queue.delete(a1)
    poller.join(12)
    assert _bodies(got[0]) == ["a2"]


# -- receive request attempt ids ----------------------------------------------------------


def test_a_repeated_attempt_id_returns_the_same_messages_and_receipts(
    client: smq.Client, clock: Clock
) -> None:
    queue = _fifo(client, visibility_timeout=30)
    _send_all(queue, "a1", "a2", "b1")
    first = queue.receive(2, attempt_id="try-1")
    clock.advance(20)
    again = queue.receive(2, attempt_id="try-1")
    assert [(m.body, m.receipt_handle, m.receive_count) for m in again] == [
        (m.body, m.receipt_handle, m.receive_count) for m in first
    ]
    clock.advance(20)  # 40 s after the first receive: the retry reset the timeout
    assert [m.body for m in queue.receive(10)] == ["b1"]
    for message in again:
        queue.delete(message)  # the receipts work
    assert queue.attributes().in_flight == 1


def test_a_repeated_attempt_records_the_restarted_timeout_as_a_visibility_change(
    client: smq.Client, clock: Clock
) -> None:
    queue = _fifo(client, visibility_timeout=30, event_stream_max_len=100)
    _send_all(queue, "a1")
    (first,) = queue.receive(1, attempt_id="try-1")
    clock.advance(20)
    queue.receive(1, attempt_id="try-1")
    changes = [e for e in queue.events() if e.kind == "visibility_changed"]
    assert [(e.message_id, e.receive_count, e.extra, e.at_ms) for e in changes] == [
        (first.message_id, 1, "30000", clock.now_ms)
    ]


def test_an_attempt_id_gets_new_messages_once_its_own_are_done_or_lapsed(
    client: smq.Client, clock: Clock
) -> None:
    queue = _fifo(client, visibility_timeout=600)
    _send_all(queue, "a1", "b1")
    (a1,) = queue.receive(1, attempt_id="t")
    queue.delete(a1)
    assert _bodies(queue.receive(1, attempt_id="t")) == ["b1"]
    with pytest.raises(smq.InvalidParameter, match="ReceiveRequestAttemptId"):
        queue.receive(1, attempt_id="has space")
    with pytest.raises(smq.InvalidParameter, match="FIFO"):
        client.create_queue("plain").receive(1, attempt_id="t")


# -- dead letters and redrive ---------------------------------------------------------------


def test_a_fifo_queue_needs_a_fifo_dead_letter_queue(client: smq.Client) -> None:
    client.create_queue("plain-dlq")
    with pytest.raises(smq.InvalidAttributeValue, match="FIFO"):
        _fifo(client, redrive_policy=smq.RedrivePolicy("plain-dlq", 2))
    _fifo(client, "dlq.fifo")
    with pytest.raises(smq.InvalidAttributeValue, match="standard"):
        client.create_queue("plain", redrive_policy=smq.RedrivePolicy("dlq.fifo", 2))


def test_a_dead_letter_move_releases_the_group_and_keeps_order(client: smq.Client, clock: Clock) -> None:
    dlq = _fifo(client, "jobs-dlq.fifo")
    queue = _fifo(client, visibility_timeout=10, redrive_policy=smq.RedrivePolicy("jobs-dlq.fifo", 1))
    _send_all(queue, "a1", "a2", "a3", "b1")
    (a1,) = queue.receive(1)
    clock.advance(10)  # a1 failed once: the next receive moves it and goes on with a2
    messages = queue.receive(10)
    assert [m.body for m in messages if m.message_group_id == "a"] == ["a2", "a3"]
    assert queue.attributes().counters["dead_lettered"] == 1
    (dead,) = dlq.receive(10)
    assert (dead.body, dead.message_group_id, dead.message_id) == ("a1", "a", a1.message_id)
    assert dead.sequence_number is not None


def test_redrive_from_a_fifo_dead_letter_queue_keeps_each_group_in_order(
    client: smq.Client, clock: Clock
) -> None:
    dlq = _fifo(client, "jobs-dlq.fifo")
    queue = _fifo(client, visibility_timeout=10, redrive_policy=smq.RedrivePolicy("jobs-dlq.fifo", 1))
    _send_all(queue, "a1", "a2", "b1")
    queue.receive(10)
    clock.advance(10)
    assert queue.receive(10) == []  # all three move to the dead-letter queue
    assert dlq.attributes().visible == 3
    assert client.redrive("jobs-dlq.fifo") == 3
    messages = queue.receive(10)
    assert sorted(_bodies(messages)) == ["a1", "a2", "b1"]
    assert [m.body for m in messages if m.message_group_id == "a"] == ["a1", "a2"]  # order is per group
    assert [m.receive_count for m in messages] == [1, 1, 1]


# -- housekeeping -------------------------------------------------------------------------


def test_purge_and_delete_queue_leave_no_fifo_keys(client: smq.Client) -> None:
    queue = _fifo(client)
    _send_all(queue, "a1", "a2", "b1")
    queue.receive(1, attempt_id="x")
    assert queue.purge() == 3
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.groups) == (0, 0, 0)
    _send_all(queue, "a9")
    assert _bodies(queue.receive(10)) == ["a9"]
    client.delete_queue("jobs.fifo")
    # Only the mark of the deletion stays, for 60 s (SQS's QueueDeletedRecently). Each key by
    # name: a pattern search on a cluster asks one node only.
    keys = QueueKeys.of("jobs.fifo")
    assert [kind for kind in KINDS if raw(client).exists(keys.by_kind(kind))] == ["deleted"]
    assert 0 < raw(client).pttl(keys.deleted) <= 60_000


def test_messages_past_retention_leave_their_group(client: smq.Client, clock: Clock) -> None:
    queue = _fifo(client, message_retention_period=60)
    _send_all(queue, "a1")
    clock.advance(30)
    _send_all(queue, "a2")
    clock.advance(30)
    assert _bodies(queue.receive(10)) == ["a2"]
    assert queue.attributes().counters["retention_expired"] == 1


# -- concurrency on a real server -----------------------------------------------------------


def test_concurrent_receivers_never_hold_one_group_at_once(redis_client: smq.Client) -> None:
    queue = _fifo(redis_client, visibility_timeout=30)
    groups = [f"g{i}" for i in range(8)]
    per_group = 25
    for n in range(per_group):
        queue.send_batch([smq.SendEntry(g, f"{g}:{n}", message_group_id=g) for g in groups])
    holders: dict[str, int] = {}
    order: dict[str, list[int]] = {g: [] for g in groups}
    lock = threading.Lock()
    errors: list[str] = []

    def consume(me: int) -> None:
        idle = 0
        while idle < 5:
            messages = queue.receive(10, wait_time_seconds=1)
            if not messages:
                idle += 1
                continue
            idle = 0
            mine = {m.message_group_id for m in messages}
            with lock:
                for group in mine:
                    assert group is not None
                    if group in holders:
                        errors.append(f"{group} held by {holders[group]} and {me}")
                    holders[group] = me
                for m in messages:
                    group, n = m.body.split(":")
                    order[group].append(int(n))
            with lock:  # released before the deletes unlock the groups in Redis
                for group in mine:
                    holders.pop(group, None)
            queue.delete_batch([smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(messages)])

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert order == {g: list(range(per_group)) for g in groups}
    assert queue.attributes().groups == 0


def _commands_run(server: Any, action: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, Any]:
    """(Redis commands run by the call, scripts' calls included, by INFO commandstats; its result)."""
    server.config_resetstat()
    result = action(*args, **kwargs)
    stats = server.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_config")), result


def test_receive_and_delete_cost_the_same_with_ten_or_ten_thousand_groups(redis_client: smq.Client) -> None:
    server = raw(redis_client)
    costs = {}
    for name, groups in (("warm-up", 10), ("few", 10), ("many", 10_000)):  # warm-up: scripts loaded
        queue = _fifo(redis_client, f"{name}.fifo")
        for start in range(0, groups, 10):
            queue.send_batch(
                [smq.SendEntry(str(g), f"m{g}", message_group_id=f"g{g}") for g in range(start, start + 10)]
            )
        receive, received = _commands_run(server, queue.receive, 10)
        entries = [smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(received)]
        delete, _ = _commands_run(server, queue.delete_batch, entries)
        send, _ = _commands_run(server, queue.send, "more", message_group_id="g1")
        costs[name] = (receive, delete, send)
        assert len(received) == 10
    assert costs["few"] == costs["many"]


def test_peek_shows_a_fifo_queue_group_by_group_without_the_messages_in_flight(client: smq.Client) -> None:
    queue = _fifo(client)
    _send_all(queue, "b1", "a1", "a2", "b2")
    (b1,) = queue.receive(1)
    visible = queue.peek("visible")
    assert [(p.body, p.message_group_id) for p in visible] == [("a1", "a"), ("a2", "a"), ("b2", "b")]
    (held,) = queue.peek("in_flight")
    assert (held.body, held.receipt_handle) == ("b1", b1.receipt_handle)
    assert queue.attributes().counters["received"] == 1  # peeking changed nothing


@pytest.mark.parametrize("created", ["queue", "messageGroup"])
def test_deduplication_keeps_the_scope_the_queue_was_created_with(client: smq.Client, created: str) -> None:
    queue = client.create_queue("jobs.fifo", deduplication_scope=created)
    other = "messageGroup" if created == "queue" else "queue"
    assert not queue.send("a", message_group_id="g1", deduplication_id="seen").duplicate
    queue.set_attributes(deduplication_scope=other)
    assert queue.attributes().config.deduplication_scope == other  # reported as set
    queue.set_attributes(deduplication_scope=created)
    queue.set_attributes(deduplication_scope=other)  # the first change kept the original
    across = created == "queue"
    # A switch by a client of an earlier version (which changed only the reported scope's
    # field) does not change it either: the scope is kept from creation.
    raw(client).hset(QueueKeys.of("jobs.fifo").meta, "dedup_scope", other)
    # Ids seen before the switch, and ids first sent after it, deduplicate as at creation.
    assert queue.send("b", message_group_id="g2", deduplication_id="seen").duplicate is across
    assert not queue.send("c", message_group_id="g4", deduplication_id="new").duplicate
    assert queue.send("d", message_group_id="g5", deduplication_id="new").duplicate is across
    assert queue.send("e", message_group_id="g4", deduplication_id="new").duplicate
    assert queue.attributes().visible == (2 if across else 4)


def test_a_receive_with_timeout_0_puts_its_groups_behind_the_others_in_the_order_received(
    client: smq.Client,
) -> None:
    queue = _fifo(client)
    for body, group in (("g1-m1", "g1"), ("g2-m1", "g2"), ("g2-m2", "g2"), ("g3-m1", "g3"), ("g1-m2", "g1")):
        queue.send(body, message_group_id=group, deduplication_id=body)
    for _ in range(5):  # the same every time, whatever the message ids are
        assert _bodies(queue.receive(3, visibility_timeout=0)) == ["g1-m1", "g1-m2", "g2-m1"]
        taken = queue.receive(10, visibility_timeout=0)
        assert _bodies(taken) == ["g3-m1", "g1-m1", "g1-m2", "g2-m1", "g2-m2"]
        # Back in the order just received: g3 first again.
        assert _bodies(queue.receive(1, visibility_timeout=0)) == ["g3-m1"]
        assert _bodies(queue.receive(3, visibility_timeout=0)) == ["g1-m1", "g1-m2", "g2-m1"]
        assert _bodies(queue.receive(10, visibility_timeout=0))[:2] == ["g3-m1", "g1-m1"]
        for message in queue.receive(10):
            queue.delete(message)
        for body, group in (
            ("g1-m1", "g1"),
            ("g2-m1", "g2"),
            ("g2-m2", "g2"),
            ("g3-m1", "g3"),
            ("g1-m2", "g1"),
        ):
            queue.send(body, message_group_id=group, deduplication_id=f"{body}-{_}")
    stats = queue.attributes()
    assert stats.in_flight == 0 and stats.counters["visibility_expired"] > 0
