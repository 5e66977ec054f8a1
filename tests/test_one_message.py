"""One visible message by its id (Queue.discard, Queue.move_message): found near the place a peek
showed it, left in the visible list as a ghost; a move is a redrive of one message, in the two
steps of every move between queues (lua/take_one.lua, smq/operations/_take_one.py)."""

from __future__ import annotations

import uuid

import pytest

import smq
from conftest import Clock, raw, sync_of
from smq.core._ids import message_id, new_ids, stored_ids
from smq.core._scripts import lua_dir
from smq.operations import _moves
from smq.operations._take_one import MAX_NEAR, NEAR_WINDOW


@pytest.fixture(params=[1, 2])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The data layout of the queues the test creates: 1 (every visible entry an id, the record
    in `messages`) or 2 (a message never received is "<id>|<record>" in the list)."""
    monkeypatch.setenv("SMQ_LAYOUT", str(request.param))
    return int(request.param)


def _fill(queue: smq.Queue, n: int, prefix: str = "m") -> list[str]:
    """Send ``n`` messages (bodies m0, m1, ...); their message ids, in receive order."""
    ids: list[str] = []
    for start in range(0, n, 10):
        entries = [smq.SendEntry(str(i), f"{prefix}{i}") for i in range(start, min(start + 10, n))]
        result = queue.send_batch(entries)
        by_entry = {sent.id: sent.message_id for sent in result.successful}
        ids += [by_entry[entry.id] for entry in entries]
    return ids


def _receive_all(queue: smq.Queue) -> list[str]:
    bodies: list[str] = []
    for _ in range(1000):
        got = queue.receive(10)
        if not got:
            break
        bodies += [m.body for m in got]
    return bodies


def _peek_all(queue: smq.Queue) -> list[str]:
    bodies: list[str] = []
    for offset in range(0, 1000, 100):
        bodies += [p.body for p in queue.peek(limit=100, offset=offset)]
    return bodies


def _entry_is_inline(client: smq.Client, queue: smq.Queue, index: int) -> bool:
    return b"|" in raw(client).lrange(queue.keys.visible, index, index)[0]


def test_discard_deletes_a_message_at_the_head_in_the_middle_and_near_the_end(
    client: smq.Client, layout: int
) -> None:
    queue = client.create_queue("jobs", event_stream_max_len=100)
    ids = _fill(queue, 150)
    assert _entry_is_inline(client, queue, 75) is (layout == 2)
    for index in (0, 75, 149):
        assert queue.discard(ids[index], near=index) is True
        assert queue.discard(ids[index], near=index) is False  # gone: not found again
    gone = {"m0", "m75", "m149"}
    left = [f"m{i}" for i in range(150) if f"m{i}" not in gone]
    info = queue.attributes()
    assert (info.visible, info.counters["deleted"]) == (147, 3)
    assert int(raw(client).hget(queue.keys.meta, "ghosts")) == 3
    assert raw(client).llen(queue.keys.visible) == 150  # ghosts stay: no removal in the middle
    assert not _entry_is_inline(client, queue, 75)  # a ghost: the plain id, no record
    assert _peek_all(queue) == left
    assert [(e.kind, e.message_id, e.receive_count) for e in queue.events() if e.kind == "deleted"] == [
        ("deleted", ids[i], 0) for i in (0, 75, 149)
    ]
    assert _receive_all(queue) == left
    assert int(raw(client).hget(queue.keys.meta, "ghosts")) == 0  # each ghost skipped, and counted off
    assert queue.attributes().visible == 0


def test_a_message_received_meanwhile_is_found_where_it_moved(client: smq.Client, layout: int) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    ids = _fill(queue, 60)
    assert [p.body for p in queue.peek(limit=1, offset=50)] == ["m50"]
    assert len(queue.receive(10)) == 10  # m50 is at index 40 now, not 50
    assert queue.discard(ids[50], near=50) is True
    # Moved the other way: back at the head after a change of visibility, m1 went from 0 to 1.
    (m10,) = queue.receive(1)
    queue.change_visibility(m10, 0)
    assert [p.body for p in queue.peek(limit=2)] == ["m10", "m11"]
    assert queue.discard(ids[11], near=0) is True
    bodies = _receive_all(queue)
    assert "m50" not in bodies and "m11" not in bodies
    assert len(bodies) == 60 - 10 - 2


def test_a_message_far_from_the_place_named_is_not_found_and_stays(client: smq.Client, layout: int) -> None:
    queue = client.create_queue("jobs")
    client.create_queue("other")
    ids = _fill(queue, 300)
    assert queue.discard(ids[250], near=0) is False
    assert queue.move_message(ids[250], "other", near=0) is False
    assert queue.discard(str(uuid.uuid4()), near=0) is False  # no such message
    info = queue.attributes()
    assert (info.visible, info.counters.get("deleted", 0)) == (300, 0)
    assert queue.discard(ids[250], near=250) is True


@pytest.mark.parametrize("client", ["redis", "fake"], indirect=True)
def test_the_script_looks_100_entries_either_side_of_the_place_named(client: smq.Client, layout: int) -> None:
    queue = client.create_queue("jobs")
    ids = _fill(queue, 400)
    assert queue.discard(ids[100], near=201) is False  # 101 below
    assert queue.discard(ids[302], near=201) is False  # 101 above
    assert queue.discard(ids[101], near=201) is True  # 100 below
    assert queue.discard(ids[301], near=201) is True  # 100 above
    assert queue.discard(ids[0], near=100) is True
    assert queue.discard(ids[399], near=299) is True
    assert queue.discard(ids[399], near=10_099) is False  # past the end of the list
    with pytest.raises(smq.InvalidParameter):
        queue.discard(ids[5], near=MAX_NEAR + 1)
    with pytest.raises(smq.InvalidParameter):
        queue.discard(ids[5], near=-1)
    with pytest.raises(smq.InvalidParameter):
        queue.discard("not an id!", near=0)
    assert queue.attributes().visible == 396


def test_a_message_in_flight_is_not_visible_and_stays(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", visibility_timeout=30)
    client.create_queue("other")
    ids = _fill(queue, 3)
    (held,) = queue.receive()
    assert queue.discard(ids[0], near=0) is False  # no entry in the list
    # Visible again (its entry back in the list), then hidden again: the entry stays, a ghost.
    queue.change_visibility(held, 0)
    queue.change_visibility(held, 30)
    assert raw(client).lrange(queue.keys.visible, 0, 0)[0].split(b"|")[0].decode() in stored_ids(ids[0])
    assert queue.discard(ids[0], near=0) is False
    assert queue.move_message(ids[0], "other", near=0) is False
    assert queue.attributes().in_flight == 1
    queue.delete(held)


def test_after_a_discard_purge_and_delete_queue_leave_nothing(client: smq.Client, layout: int) -> None:
    queue = client.create_queue("jobs")
    ids = _fill(queue, 20)
    assert queue.discard(ids[3], near=3) and queue.discard(ids[10], near=10)
    assert queue.purge() == 18
    assert queue.attributes().visible == 0
    assert raw(client).llen(queue.keys.visible) == 0 and raw(client).hlen(queue.keys.messages) == 0
    ids = _fill(queue, 5)
    assert queue.discard(ids[2], near=2)
    assert queue.attributes().visible == 4
    assert client.delete_queue("jobs") is True
    assert not raw(client).exists(queue.keys.visible, queue.keys.messages, queue.keys.meta)


def _dead_letters(client: smq.Client, clock: Clock, n: int) -> tuple[smq.Queue, smq.Queue, list[str]]:
    """Queue "jobs" whose ``n`` messages were dead-lettered into "jobs-dlq"; the dead letters' ids."""
    dlq = client.create_queue("jobs-dlq")
    source = client.create_queue(
        "jobs", visibility_timeout=10, redrive_policy=smq.RedrivePolicy("jobs-dlq", max_receive_count=1)
    )
    _fill(source, n)
    assert len(_receive_all(source)) == n
    clock.advance(10)
    assert source.receive(10) == []  # each dead-lettered
    dead = [p.message_id for p in dlq.peek(limit=100)]
    assert len(dead) == n
    return source, dlq, dead


def test_a_dead_letter_moves_back_to_the_queue_it_came_from(client: smq.Client, clock: Clock) -> None:
    source, dlq, dead = _dead_letters(client, clock, 5)
    (seen,) = dlq.peek(limit=1, offset=2)
    assert seen.origin == "jobs"
    assert dlq.move_message(seen.message_id, near=2) is True
    assert [p.message_id for p in dlq.peek(limit=10)] == dead[:2] + dead[3:]
    info = dlq.attributes()
    assert (info.visible, info.moving) == (4, 0)
    (back,) = source.receive(10)
    # As a redrive: a new message (new id, receive count starts over), its body and attributes kept.
    assert (back.body, back.receive_count) == (seen.body, 1)
    assert back.message_id != seen.message_id
    assert source.attributes().counters["moved_in"] == 1
    assert source.receive(10) == []  # once


def test_a_message_moves_to_a_named_queue(client: smq.Client, clock: Clock, layout: int) -> None:
    other = client.create_queue("other")
    dlq = client.create_queue("dlq", event_stream_max_len=100)
    ids = _fill(dlq, 30)  # sent here directly: no origin
    assert dlq.move_message(ids[17], "other", near=17) is True
    (arrived,) = other.peek()
    assert (arrived.body, arrived.origin) == ("m17", "dlq")
    assert [e.extra for e in dlq.events() if e.kind == "moved_out"] == ["other"]
    assert "m17" not in _peek_all(dlq)
    assert (dlq.attributes().visible, dlq.attributes().moving) == (29, 0)
    # No origin and no destination: refused, nothing taken.
    with pytest.raises(smq.InvalidParameter, match="no other queue"):
        dlq.move_message(ids[3], near=3)
    with pytest.raises(smq.InvalidParameter):
        dlq.move_message(ids[3], "dlq", near=3)  # where it is already
    assert dlq.attributes().visible == 29
    assert _receive_all(dlq) == [f"m{i}" for i in range(30) if i != 17]


def test_a_missing_destination_is_refused_before_anything_is_taken(client: smq.Client, clock: Clock) -> None:
    source, dlq, dead = _dead_letters(client, clock, 3)
    with pytest.raises(smq.QueueDoesNotExist):
        dlq.move_message(dead[1], "missing", near=1)
    client.delete_queue("jobs")  # the queue the dead letters came from
    with pytest.raises(smq.QueueDoesNotExist):
        dlq.move_message(dead[1], near=1)
    info = dlq.attributes()
    assert (info.visible, info.moving) == (3, 0)
    assert [p.message_id for p in dlq.peek()] == dead


def test_a_destination_deleted_during_the_move_sends_the_message_back(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, dlq, dead = _dead_letters(client, clock, 2)
    real = smq.Client.queue_exists

    def gone_after_check(self: smq.Client, name: str) -> bool:
        found = real(self, name)
        if name == "jobs":
            sync_of(client).delete_queue("jobs")
        return found

    monkeypatch.setattr(smq.Client, "queue_exists", gone_after_check)
    with pytest.raises(smq.QueueDoesNotExist):
        dlq.move_message(dead[0], near=0)
    monkeypatch.undo()
    # Back under its id (move_in puts it at the tail; its ghost entry, ahead, finds its record
    # again): listed and received once.
    assert [p.message_id for p in dlq.peek()] == dead
    assert (dlq.attributes().visible, dlq.attributes().moving) == (2, 0)
    assert len(_receive_all(dlq)) == 2


def test_fifo_and_sharded_queues_are_refused(client: smq.Client) -> None:
    fifo = client.create_queue("jobs.fifo")
    sent = fifo.send("a", message_group_id="g", deduplication_id="1")
    with pytest.raises(smq.InvalidParameter, match="FIFO"):
        fifo.discard(sent.message_id)
    with pytest.raises(smq.InvalidParameter, match="FIFO"):
        fifo.move_message(sent.message_id, "jobs.fifo")
    (stored,) = stored_ids(sent.message_id)[:1]
    args = [client._now_arg(), "delete", 0, stored, "", "", "", "jobs.fifo"]
    with pytest.raises(smq.InvalidParameter, match="FIFO"):
        client.run("take_one", fifo.keys, args, queue="jobs.fifo")  # the script refuses too
    assert fifo.attributes().visible == 1
    hot = client.create_queue("hot", shards=2)
    sent = hot.send("b")
    with pytest.raises(smq.InvalidParameter, match="sharded"):
        hot.discard(sent.message_id)
    with pytest.raises(smq.InvalidParameter, match="sharded"):
        hot.move_message(sent.message_id, "jobs.fifo")


def test_a_move_cut_between_its_steps_is_recovered_once(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, dlq, dead = _dead_letters(client, clock, 3)

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("process died between step 1 and step 2")

    monkeypatch.setattr(_moves, "_move_in", crash)
    with pytest.raises(KeyboardInterrupt):
        dlq.move_message(dead[1], near=1)
    monkeypatch.undo()
    info = dlq.attributes()
    assert (info.visible, info.moving) == (2, 1)  # in the outbox: neither here nor there
    assert source.attributes().visible == 0
    assert client.recover("jobs-dlq") == 1  # the recovery every move has (move_claim)
    assert client.recover("jobs-dlq") == 0
    assert dlq.attributes().moving == 0
    assert len(source.receive(10)) == 1
    assert source.receive(10) == []


def test_a_move_cut_after_its_second_step_stores_the_message_once(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, dlq, dead = _dead_letters(client, clock, 2)
    real_run = client.run

    def crash_on_done(script: str, *args: object, **kwargs: object) -> object:
        if script == "move_done":
            raise KeyboardInterrupt("process died between step 2 and step 3")
        return real_run(script, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "run", crash_on_done)
    with pytest.raises(KeyboardInterrupt):
        dlq.move_message(dead[0], near=0)
    monkeypatch.undo()
    assert (dlq.attributes().moving, source.attributes().visible) == (1, 1)
    assert client.recover("jobs-dlq") == 1  # step 2 again: stored nothing more
    assert len(source.receive(10)) == 1
    assert source.receive(10) == []
    assert [p.message_id for p in dlq.peek()] == [dead[1]]


def test_a_fair_queue_s_visible_message_is_discarded(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    sent = [queue.send(f"m{i}", message_group_id=f"t{i % 3}") for i in range(9)]
    assert queue.discard(sent[4].message_id, near=4) is True
    assert sorted(_receive_all(queue)) == sorted(f"m{i}" for i in range(9) if i != 4)


def test_stored_ids_reverse_the_ids_users_see() -> None:
    for stored, shown in new_ids(500):
        # First the stored id it is the form of; then itself, as an earlier version stored it.
        assert stored_ids(shown) == [stored, shown]
    old = str(uuid.uuid4())  # an earlier version's stored id, shown as it is
    assert old in stored_ids(old)
    assert all(message_id(one) == old for one in stored_ids(old))
    assert stored_ids("m1") == ["m1"]  # an id given to the scripts by hand
    assert stored_ids("A" * 20) == []  # a stored id of this version: users see its UUID form
    assert stored_ids("a|b") == [] and stored_ids("") == []


def test_the_script_and_the_client_agree_on_the_window() -> None:
    body = (lua_dir() / "take_one.lua").read_text()
    assert f"local WINDOW = {NEAR_WINDOW} " in body
    assert f"local near = int_arg(ARGV[3], 0, {MAX_NEAR})" in body
    assert f"ARGV[3] near (0-{MAX_NEAR})" in body


def test_a_standard_queue_s_message_cannot_move_to_a_fifo_queue(client: smq.Client) -> None:
    dlq = client.create_queue("jobs-dlq")
    client.create_queue("elsewhere.fifo")
    dlq.send("no group")
    (message,) = dlq.peek()
    with pytest.raises(smq.InvalidParameter, match="only to a standard queue"):
        dlq.move_message(message.message_id, "elsewhere.fifo")
    assert [m.body for m in dlq.peek()] == ["no group"]
    assert client.queue("elsewhere.fifo").attributes().visible == 0
