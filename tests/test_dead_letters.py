"""Dead-letter queues and redrive: two-step moves that survive a crash."""

from __future__ import annotations

import pytest

import smq
from conftest import Clock, raw
from smq.core._keys import QueueKeys
from smq.operations import _moves

#: Why these tests run on all 14 combinations of ``client`` (conftest.MATRICES).
EVERY_BACKEND = "the move scripts (dead-lettering, redrive), across hash slots"


def _dead_letter_setup(client: smq.Client, max_receives: int = 2) -> tuple[smq.Queue, smq.Queue]:
    dlq = client.create_queue("jobs-dlq")
    queue = client.create_queue(
        "jobs", visibility_timeout=10, redrive_policy=smq.RedrivePolicy("jobs-dlq", max_receives)
    )
    return queue, dlq


def _exhaust(queue: smq.Queue, clock: Clock, receives: int) -> str:
    queue.send("poison", attributes={"k": "v"})
    message_id = ""
    for n in range(receives):
        (message,) = queue.receive()
        assert message.receive_count == n + 1
        message_id = message.message_id
        clock.advance(10)
    return message_id


def test_message_moves_to_dead_letter_queue_after_max_receives(client: smq.Client, clock: Clock) -> None:
    queue, dlq = _dead_letter_setup(client)
    message_id = _exhaust(queue, clock, 2)
    assert queue.receive() == []  # the third receive moves it instead
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.moving, info.counters["dead_lettered"]) == (0, 0, 0, 1)
    (dead,) = dlq.receive()
    assert (dead.message_id, dead.body, dict(dead.attributes)) == (
        message_id,
        "poison",
        {"k": smq.MessageAttribute("String", "v")},
    )
    assert dead.receive_count == 3  # its receives so far, this one included
    assert dlq.attributes().counters["moved_in"] == 1


def test_other_messages_are_still_received_in_the_same_call(client: smq.Client, clock: Clock) -> None:
    queue, dlq = _dead_letter_setup(client, max_receives=1)
    _exhaust(queue, clock, 1)
    queue.send("fine")
    assert [m.body for m in queue.receive(10)] == ["fine"]
    assert dlq.attributes().visible == 1


def test_crash_after_first_step_loses_nothing(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, dlq = _dead_letter_setup(client, max_receives=1)
    _exhaust(queue, clock, 1)

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("process died between step 1 and step 2")

    monkeypatch.setattr(_moves, "_move_in", crash)
    with pytest.raises(KeyboardInterrupt):
        queue.receive()
    monkeypatch.undo()
    assert queue.attributes().moving == 1
    assert dlq.attributes().visible == 0
    clock.advance(10)
    assert queue.receive() == []  # too young to recover (30 s)
    clock.advance(21)
    assert queue.receive() == []  # this receive recovers the move
    assert queue.attributes().moving == 0
    assert len(dlq.receive(10)) == 1


def _die_before_step_3(client: smq.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the client's process "die" when it would run a move's step 3 (move_done)."""
    real_run = client.run

    def crash_on_done(script: str, *args: object, **kwargs: object) -> object:
        if script == "move_done":
            raise KeyboardInterrupt("process died between step 2 and step 3")
        return real_run(script, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "run", crash_on_done)


def test_crash_after_second_step_does_not_double(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, dlq = _dead_letter_setup(client, max_receives=1)
    _exhaust(queue, clock, 1)
    _die_before_step_3(client, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        queue.receive()
    monkeypatch.undo()
    assert (queue.attributes().moving, dlq.attributes().visible) == (1, 1)
    assert client.recover("jobs") == 1
    assert client.recover("jobs") == 0
    assert queue.attributes().moving == 0
    assert len(dlq.receive(10)) == 1  # stored once, though step 2 ran twice
    assert dlq.receive(10) == []


def test_a_redrive_cut_after_its_second_step_stores_each_message_once(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A redriven message arrives under a new id; the move's marker names the old one, as
    # earlier versions wrote it, so a repeat of step 2 by any version stores nothing more.
    queue, dlq = _dead_letter_setup(client, max_receives=1)
    dead_id = _exhaust(queue, clock, 1)
    assert queue.receive() == [] and dlq.attributes().visible == 1
    _die_before_step_3(client, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        client.redrive("jobs-dlq")
    monkeypatch.undo()
    assert (dlq.attributes().moving, queue.attributes().visible) == (1, 1)
    (outbox_id,) = raw(client).hkeys(QueueKeys.of("jobs-dlq").outbox)  # the id in the DLQ
    markers = raw(client).zrange(QueueKeys.of("jobs").arrivals, 0, -1)
    assert [m.split(b":")[0] for m in markers] == [outbox_id]
    assert client.recover("jobs-dlq") == 1
    (back,) = queue.receive(10)
    assert back.message_id != dead_id and queue.receive(10) == []  # stored once, a new message
    info = dlq.attributes()
    assert (info.visible, info.moving) == (0, 0)


def test_dead_letter_queue_must_exist(client: smq.Client) -> None:
    with pytest.raises(smq.QueueDoesNotExist, match="create it first"):
        client.create_queue("jobs", redrive_policy=smq.RedrivePolicy("missing", 3))
    queue = client.create_queue("jobs")
    with pytest.raises(smq.QueueDoesNotExist):
        queue.set_attributes(redrive_policy=smq.RedrivePolicy("missing", 3))


@pytest.mark.parametrize("name", ["jobs", "jobs.fifo"])
def test_a_queue_may_be_its_own_dead_letter_queue_and_keeps_its_messages(
    client: smq.Client, clock: Clock, name: str
) -> None:
    # Accepted, as SQS accepts it; a message that runs out of receives has nowhere else to go.
    queue = client.create_queue(name, redrive_policy=smq.RedrivePolicy(name, 1))
    assert queue.attributes().config.redrive_policy == smq.RedrivePolicy(name, 1)
    assert client.dead_letter_sources(name) == [name]
    queue.send("x", message_group_id="g", deduplication_id="x") if queue.fifo else queue.send("x")
    for count in (1, 2, 3):
        (message,) = queue.receive(1, visibility_timeout=5)
        assert (message.body, message.receive_count) == ("x", count)
        clock.advance(6)
    assert queue.attributes().moving == 0 and queue.attributes().counters.get("dead_lettered", 0) == 0
    with pytest.raises(smq.InvalidAttributeValue, match="sharded"):
        client.create_queue("wide", shards=2, redrive_policy=smq.RedrivePolicy("wide", 1))


def test_redrive_policy_can_be_set_and_removed(client: smq.Client) -> None:
    client.create_queue("dlq")
    queue = client.create_queue("jobs")
    queue.set_attributes(redrive_policy=smq.RedrivePolicy("dlq", 5))
    assert queue.attributes().config.redrive_policy == smq.RedrivePolicy("dlq", 5)
    queue.set_attributes(redrive_policy=None)
    assert queue.attributes().config.redrive_policy is None


def test_redrive_returns_messages_to_their_source_queues(client: smq.Client, clock: Clock) -> None:
    dlq = client.create_queue("dlq")
    a = client.create_queue("a", visibility_timeout=10, redrive_policy=smq.RedrivePolicy("dlq", 1))
    b = client.create_queue("b", visibility_timeout=10, redrive_policy=smq.RedrivePolicy("dlq", 1))
    for queue in (a, b):
        for n in range(3):
            queue.send(f"{queue.name}{n}")
        queue.receive(10)
    clock.advance(10)
    assert a.receive(10) == [] and b.receive(10) == []
    assert dlq.attributes().visible == 6
    assert client.redrive("dlq") == 6
    assert dlq.attributes().visible == 0
    for queue in (a, b):
        messages = queue.receive(10)
        assert sorted(m.body for m in messages) == [f"{queue.name}{n}" for n in range(3)]
        assert {m.receive_count for m in messages} == {1}  # a redriven message starts over


@pytest.mark.parametrize("kind", ["standard", "fifo"])
def test_redrive_moves_messages_whose_timeout_ran_out_and_whose_delay_is_over(
    client: smq.Client, clock: Clock, kind: str
) -> None:
    # Looking at a dead-letter queue's messages before a redrive is the usual way: the
    # messages received then, their timeout over, are visible and must move too.
    suffix = ".fifo" if kind == "fifo" else ""
    dlq = client.create_queue(f"dlq{suffix}", delay_seconds=0)
    source = client.create_queue(f"jobs{suffix}", redrive_policy=smq.RedrivePolicy(f"dlq{suffix}", 1))
    for n in range(4):
        fields = {"message_group_id": f"g{n % 2}", "deduplication_id": str(n)} if suffix else {}
        source.send(f"m{n}", **fields)
    while source.receive(10, visibility_timeout=0):
        pass  # the second receive dead-letters each
    assert dlq.attributes().visible == 4
    assert len(dlq.receive(10, visibility_timeout=5)) == 4  # looked at
    clock.advance(6)  # their timeouts ran out: visible again, still in the in-flight set
    if not suffix:
        dlq.set_attributes(delay_seconds=0)
        dlq.send("late", delay_seconds=5)
        clock.advance(6)  # its delay is over, nobody received since
    assert client.redrive(f"dlq{suffix}", destination=f"jobs{suffix}") == (4 if suffix else 5)
    assert (dlq.attributes().visible, dlq.attributes().in_flight) == (0, 0)
    assert sorted(m.body for m in source.receive(10)) == sorted(
        ["m0", "m1", "m2", "m3"] + ([] if suffix else ["late"])
    )


def test_redrive_to_a_named_queue_with_a_limit(client: smq.Client, clock: Clock) -> None:
    queue, dlq = _dead_letter_setup(client, max_receives=1)
    other = client.create_queue("other")
    for n in range(5):
        queue.send(f"m{n}")
    queue.receive(10)
    clock.advance(10)
    queue.receive(10)
    assert client.redrive("jobs-dlq", destination="other", max_messages=3) == 3
    assert (dlq.attributes().visible, other.attributes().visible) == (2, 3)
    with pytest.raises(smq.QueueDoesNotExist):
        client.redrive("jobs-dlq", destination="missing")


def test_redrive_leaves_messages_with_no_origin(client: smq.Client) -> None:
    dlq = client.create_queue("dlq")
    dlq.send("sent here directly")
    assert client.redrive("dlq") == 0
    assert dlq.attributes().visible == 1


def test_dead_letters_wait_in_the_outbox_while_their_queue_is_missing(
    client: smq.Client, clock: Clock
) -> None:
    queue, dlq = _dead_letter_setup(client, max_receives=1)
    _exhaust(queue, clock, 1)
    client.delete_queue("jobs-dlq")
    for _ in range(3):
        assert queue.receive() == []  # parked, not bounced back and forth
    info = queue.attributes()
    assert (info.visible, info.moving, info.counters["dead_lettered"]) == (0, 1, 1)
    dlq = client.create_queue("jobs-dlq")
    clock.advance(31)
    queue.receive()  # recovery finds its queue now
    assert queue.attributes().moving == 0
    assert len(dlq.receive(10)) == 1


def test_receive_returns_its_messages_when_a_move_cannot_finish(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, dlq = _dead_letter_setup(client, max_receives=1)
    _exhaust(queue, clock, 1)
    queue.send("good")

    def unreachable(*args: object, **kwargs: object) -> None:
        raise smq.BackendError("the dead-letter queue's node is unreachable")

    monkeypatch.setattr(_moves, "_move_in", unreachable)
    assert [m.body for m in queue.receive(10)] == ["good"]
    monkeypatch.undo()
    assert queue.attributes().moving == 1
    assert client.recover("jobs") == 1
    assert len(dlq.receive(10)) == 1


def test_a_late_last_step_never_drops_a_newer_move_of_the_same_message(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    keys = queue.keys
    entry = b"new-token|dlq|jobs|1|0|1|0:x"
    raw(client).hset(keys.outbox, "m1", entry)
    raw(client).zadd(keys.outbox_at, {"m1": 0})
    reply = client.run("move_done", keys, ["", 1, "m1", "old-token"], queue="jobs")
    assert reply[1] == 0 and raw(client).hget(keys.outbox, "m1") == entry
    reply = client.run("move_done", keys, ["", 1, "m1", "new-token"], queue="jobs")
    assert reply[1] == 1 and raw(client).hlen(keys.outbox) == 0 and raw(client).zcard(keys.outbox_at) == 0


def test_redrive_is_not_cut_short_by_deleted_ids(client: smq.Client, clock: Clock) -> None:
    queue, dlq = _dead_letter_setup(client, max_receives=1)
    queue.send_batch([smq.SendEntry(f"e{n}", f"m{n}") for n in range(8)])
    queue.receive(10)
    clock.advance(10)
    queue.receive(10)
    for message in dlq.receive(3, visibility_timeout=5):
        dlq.change_visibility(message.receipt_handle, 0)
        dlq.delete(message.receipt_handle)  # three deleted ids stay in the list
    assert dlq.attributes().visible == 5
    assert client.redrive("jobs-dlq") == 5
    assert dlq.attributes().visible == 0


def test_origins_are_forgotten_when_messages_leave(client: smq.Client, clock: Clock) -> None:
    source, dlq = _dead_letter_setup(client, max_receives=1)
    dlq.set_attributes(message_retention_period=60)
    _exhaust(source, clock, 1)
    source.receive()
    assert raw(client).hlen(dlq.keys.origins) == 1
    clock.advance(60)
    assert dlq.receive() == []
    assert raw(client).hlen(dlq.keys.origins) == 0


def test_redrive_to_a_deleted_origin_keeps_the_messages_and_counts_none(
    client: smq.Client, clock: Clock
) -> None:
    queue, dlq = _dead_letter_setup(client, max_receives=1)
    queue.send_batch([smq.SendEntry(f"e{n}", f"m{n}") for n in range(3)])
    queue.receive(10)
    clock.advance(10)
    queue.receive(10)
    client.delete_queue("jobs")
    assert client.redrive("jobs-dlq") == 0
    assert dlq.attributes().visible == 3


def test_a_receive_recovers_at_most_one_round_of_parked_dead_letters(
    client: smq.Client, clock: Clock
) -> None:
    queue, dlq = _dead_letter_setup(client, max_receives=1)
    for _ in range(25):
        queue.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(10)])
    while queue.receive(10):
        pass
    clock.advance(10)
    client.delete_queue("jobs-dlq")
    while queue.receive(10) or queue.attributes().visible:
        pass
    assert queue.attributes().moving == 250
    dlq = client.create_queue("jobs-dlq")
    clock.advance(31)
    queue.receive()
    assert queue.attributes().moving == 150  # one round of 100; later receives take the rest
    assert client.recover("jobs") == 150
    assert dlq.attributes().visible == 250
