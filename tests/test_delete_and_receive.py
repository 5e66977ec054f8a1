"""Queue.delete_and_receive: one batch's deletes ride on the next receive, in one write to Redis."""

from __future__ import annotations

import threading
import time

import pytest

import smq
from conftest import acl_url, raw
from smq import DeleteEntry, SendEntry
from smq.core._keys import KINDS, QueueKeys
from smq.embedded import EmbeddedRedis

#: Why these tests run on all 14 combinations of ``client`` (conftest.MATRICES).
EVERY_BACKEND = "the receipt rules of delete against receive"


def entries_of(messages: list[smq.Message]) -> list[DeleteEntry]:
    return [DeleteEntry(f"d{i}", m.receipt_handle) for i, m in enumerate(messages)]


def test_deletes_then_receives_with_delete_batch_outcomes(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send_batch([SendEntry(str(i), f"a{i}") for i in range(10)])
    queue.send_batch([SendEntry(str(i), f"b{i}") for i in range(5)])
    deleted, first = queue.delete_and_receive([], 10)
    assert (deleted.successful, deleted.failed, len(first)) == ([], [], 10)
    done = entries_of(first[:9]) + [DeleteEntry("bad", "not-a-receipt")]
    deleted, second = queue.delete_and_receive(done, 10)
    assert deleted.successful == [f"d{i}" for i in range(9)]
    assert [(f.id, f.code, f.sender_fault) for f in deleted.failed] == [
        ("bad", "ReceiptHandleIsInvalid", True)
    ]
    assert len(second) == 5
    assert not {m.message_id for m in second} & {m.message_id for m in first}
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (0, 6)  # one of the first ten, and the five
    assert (info.counters["deleted"], info.counters["received"]) == (9, 15)
    # Deleting again with the same receipts succeeds (as delete_batch does) and deletes nothing more.
    again, _ = queue.delete_and_receive(entries_of(first[:9]), 1)
    assert again.successful == [f"d{i}" for i in range(9)]
    assert queue.attributes().counters["deleted"] == 9


def test_a_stale_receipt_succeeds_deletes_nothing_and_is_counted(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("x")
    (old,) = queue.receive(visibility_timeout=0)
    (new,) = queue.receive()  # received again: the first receipt is stale
    deleted, got = queue.delete_and_receive(entries_of([old]), 1)
    assert (deleted.successful, got) == (["d0"], [])
    info = queue.attributes()
    assert (info.in_flight, info.counters["stale_receipts"], info.counters.get("deleted", 0)) == (1, 1, 0)
    deleted, _ = queue.delete_and_receive(entries_of([new]), 1)
    assert deleted.successful == ["d0"]
    assert queue.attributes().counters["deleted"] == 1


def test_bad_arguments_raise_before_anything_runs(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("x")
    (message,) = queue.receive()
    for call in (
        lambda: queue.delete_and_receive(entries_of([message]), 11),
        lambda: queue.delete_and_receive(entries_of([message]), 1, visibility_timeout=43_201),
        lambda: queue.delete_and_receive(entries_of([message]), 1, wait_time_seconds=21),
        lambda: queue.delete_and_receive(entries_of([message]) * 2, 1),
        lambda: queue.delete_and_receive(entries_of([message]), 1, attempt_id="a"),
    ):
        with pytest.raises(smq.SmqError):
            call()
    info = queue.attributes()
    assert (info.in_flight, info.counters.get("deleted", 0)) == (1, 0)


def test_on_a_fifo_queue_a_delete_unlocks_its_group_for_the_same_call(client: smq.Client) -> None:
    queue = client.create_queue("jobs.fifo", content_based_deduplication=True)
    for body in ("g1", "g2", "g3"):
        queue.send(body, message_group_id="g")
    (first,) = queue.receive(1)
    assert first.body == "g1"
    assert queue.receive(10) == []  # the group is locked behind its message in flight
    deleted, got = queue.delete_and_receive(entries_of([first]), 10)
    assert deleted.successful == ["d0"]
    assert [m.body for m in got] == ["g2", "g3"]


def test_a_long_poll_deletes_at_once_and_returns_what_arrives(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("first")
    (message,) = queue.receive()
    seen: list[int] = []

    def send_later() -> None:
        deadline = time.monotonic() + 10
        # The delete is done before the poll waits: wait for it, then send.
        while queue.attributes().counters.get("deleted", 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(queue.attributes().in_flight)
        queue.send("second")

    sender = threading.Thread(target=send_later)
    sender.start()
    deleted, got = queue.delete_and_receive(entries_of([message]), 1, wait_time_seconds=10)
    sender.join()
    assert deleted.successful == ["d0"]
    assert seen == [0]
    assert [m.body for m in got] == ["second"]


def test_on_a_sharded_queue_deletes_go_to_each_receipts_shard(client: smq.Client) -> None:
    queue = client.create_queue("hot", shards=3)
    for i in range(9):
        queue.send(f"m{i}")
    got: list[smq.Message] = []
    while len(got) < 9:
        got += queue.receive(10)
    deleted, more = queue.delete_and_receive(entries_of(got), 10)
    assert (len(deleted.successful), more) == (9, [])
    assert queue.attributes().counters["deleted"] == 9


def test_a_flushed_script_cache_is_loaded_again(redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs")
    queue.send_batch([SendEntry(str(i), f"m{i}") for i in range(4)])
    taken = queue.receive(2)
    raw(redis_client).script_flush()  # both scripts answer NOSCRIPT: neither ran
    deleted, got = queue.delete_and_receive(entries_of(taken), 10)
    assert (len(deleted.successful), len(got)) == (2, 2)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 2, 2)
    # Only the receive loaded again: the delete is refused unrun, and runs after the receive.
    queue.send_batch([SendEntry(str(i), f"n{i}") for i in range(2)])
    raw(redis_client).script_flush()
    assert len(queue.receive(1)) == 1
    deleted, got = queue.delete_and_receive(entries_of(got), 10)
    assert (len(deleted.successful), len(got)) == (2, 1)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 2, 4)


def test_both_calls_reach_redis_in_one_read(redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs")
    admin = raw(redis_client)
    queue.send_batch([SendEntry(str(i), f"m{i}") for i in range(10)])
    held = queue.receive(1)
    calls = 20

    def reads() -> int:
        return int(admin.info("stats")["total_reads_processed"])

    before = reads()
    for _ in range(calls):
        _, held = queue.delete_and_receive(entries_of(held), 1)
    # One read of each call's two scripts (and one of the INFO): 21; separate calls would make
    # 41 or more. The margin is all the room below that, for a loaded machine, where the kernel
    # may hand a pipeline over in two reads now and then (seen: 27, then 31 for 20 calls while
    # other suites ran beside the suite's parallel workers).
    assert reads() - before <= calls * 2


def test_a_receive_refused_after_its_delete_ran_is_an_unknown_outcome(
    redis_server: EmbeddedRedis, redis_client: smq.Client
) -> None:
    queue = redis_client.create_queue("jobs")
    queue.send_batch([SendEntry(str(i), f"m{i}") for i in range(3)])
    first, *taken = queue.receive(2)
    queue.delete(first)  # both scripts are loaded now
    keys = QueueKeys.of("jobs")
    # A user that may touch every key of the queue but the receive's outbox_at: Redis refuses
    # that script (NOPERM) before running it, after the delete written with it ran.
    allowed = [f"~{keys.by_kind(kind)}" for kind in KINDS if kind != "outbox_at"]
    admin = raw(redis_client)
    admin.execute_command("ACL", "SETUSER", "partly", "on", ">pw", "+@all", "&*", *allowed)
    try:
        limited = smq.Client(acl_url(redis_server, "partly", "pw"))
        limited._checked = True  # the start-up probe's own keys are not allowed either
        limited._scripts._ran.update({"delete", "receive"})  # both loaded: one write
        with pytest.raises(smq.OutcomeUnknown, match="another script of the same write ran"):
            limited.queue("jobs").delete_and_receive(entries_of(taken), 1)
        limited.close()
    finally:
        admin.execute_command("ACL", "DELUSER", "partly")
    info = queue.attributes()
    assert (info.counters["deleted"], info.visible, info.in_flight) == (2, 1, 0)
