"""A mixed fleet: smq 0.2.0 clients and this version's on the same queues, as during a rolling upgrade.

tests/fixtures holds the wheel of smq-redis 0.2.0 (the last version that records no data layout),
built from its release commit; the old client runs from it in a subprocess, this version in the
test, with new queues pinned to layout 1 (``SMQ_LAYOUT=1``) as docs/operations.md "Rolling upgrades"
says for as long as 0.2.0 clients remain: 0.2.0 reads layout 1 only and checks no layout. Each hands
messages, receipts and dead letters to the other; then the 0.2.0 clients leave, `smq upgrade` moves
the queues to layout 2, and what the pinned fleet left (messages, receipts) works on.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import smq
from conftest import raw
from smq._errors import LAYOUT
from smq.core._keys import QueueKeys
from smq.embedded import EmbeddedRedis
from smq.operations._legacy import OLD_CONSUMER_SCRIPTS

WHEEL = Path(__file__).parent / "fixtures" / "smq_redis-0.2.0-py3-none-any.whl"


class OldClient:
    """smq 0.2.0, run from its wheel in a fresh Python: each ``run`` is one process."""

    def __init__(self, url: str) -> None:
        self.url = url

    def run(self, code: str) -> Any:
        program = (
            "import json, smq\n"
            f"assert smq.__file__.startswith({str(WHEEL)!r}), smq.__file__\n"
            f"client = smq.Client({self.url!r})\n"
            "result = None\n" + textwrap.dedent(code) + "\nprint(json.dumps(result))\n"
        )
        env = {**os.environ, "PYTHONPATH": str(WHEEL)}
        # Run from the fixtures folder: the current folder comes first on the path, and the
        # checkout's holds this version's smq.
        done = subprocess.run(
            [sys.executable, "-c", program],
            env=env,
            cwd=WHEEL.parent,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def old(
    redis_client: smq.Client, redis_server: EmbeddedRedis, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OldClient]:
    monkeypatch.setenv("SMQ_LAYOUT", "1")  # the rolling upgrade's first step, for this version's clients
    yield OldClient(redis_server.url)
    # The server is shared: its script cache must not tell later tests that 0.2.0 consumers are about.
    raw(redis_client).script_flush()


def test_the_old_client_really_is_the_old_version(old: OldClient) -> None:
    # 0.2.0 knows no layouts: the fence this version adds is not in its scripts.
    assert old.run("import smq._errors as e\nresult = hasattr(e, 'LAYOUT')") is False


def test_messages_sent_by_the_old_client_are_received_by_the_new_one(
    old: OldClient, redis_client: smq.Client
) -> None:
    sent = old.run(
        """
        queue = client.create_queue("from-old", visibility_timeout=30)
        number = {n: {"n": smq.MessageAttribute("Number", str(n))} for n in range(5)}
        entries = [smq.SendEntry(f"e{n}", f"body {n}", attributes=number[n]) for n in range(5)]
        result = sorted(r.md5_of_body for r in queue.send_batch(entries).successful)
        """
    )
    queue = redis_client.get_queue("from-old")
    assert raw(redis_client).hget(QueueKeys.of("from-old").meta, "layout") is None  # as 0.2.0 leaves it
    received = queue.receive(10)
    assert sorted(m.body for m in received) == [f"body {n}" for n in range(5)]
    assert sorted(m.md5_of_body for m in received) == sent
    assert {m.attributes["n"].value for m in received} == {str(n) for n in range(5)}
    assert all(m.receive_count == 1 for m in received)
    deleted = queue.delete_batch([smq.DeleteEntry(f"d{n}", m.receipt_handle) for n, m in enumerate(received)])
    assert (len(deleted.successful), deleted.failed) == (5, [])
    assert (queue.attributes().visible, queue.attributes().in_flight) == (0, 0)


def test_receipts_of_either_version_delete_and_change_messages_of_the_other(
    old: OldClient, redis_client: smq.Client
) -> None:
    queue = redis_client.create_queue("both", visibility_timeout=30)
    queue.send_batch([smq.SendEntry(f"e{n}", f"m{n}") for n in range(4)])
    held = old.run(
        """
        got = client.get_queue("both").receive(4)
        result = {m.body: [m.receipt_handle, m.receive_count] for m in got}
        """
    )
    assert sorted(held) == ["m0", "m1", "m2", "m3"]
    # The new client deletes with the old receipts, and ends one's timeout early.
    assert queue.delete(held["m0"][0]) is True
    assert queue.delete(held["m1"][0]) is True
    queue.change_visibility(held["m2"][0], 0)
    (again,) = queue.receive(1)
    assert (again.body, again.receive_count) == ("m2", 2)
    # The old client's receipt of m2 is stale now; the new receipt, used by the old client, deletes it.
    outcome = old.run(
        f"""
        queue = client.get_queue("both")
        result = [queue.delete({held["m2"][0]!r}), queue.delete({again.receipt_handle!r})]
        """
    )
    assert outcome == [False, True]
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (0, 1)  # m3, still held by the old receive
    assert info.counters["stale_receipts"] == 1


def test_dead_letters_cross_versions(old: OldClient, redis_client: smq.Client) -> None:
    old.run(
        """
        client.create_queue("mixed-dlq")
        client.create_queue("mixed", redrive_policy=smq.RedrivePolicy("mixed-dlq", 1))
        """
    )
    queue = redis_client.get_queue("mixed")
    queue.send("poison")
    assert old.run(
        "result = [m.body for m in client.get_queue('mixed').receive(1, visibility_timeout=0)]"
    ) == ["poison"]
    assert queue.receive(10) == []  # its second receive, by the new client: off to the dead-letter queue
    dead = old.run(
        """
        got = client.get_queue("mixed-dlq").receive(1)
        result = [(m.body, m.receive_count) for m in got]
        """
    )
    assert dead == [["poison", 2]]  # its count goes on in the dead-letter queue, as in SQS


def test_fifo_groups_keep_their_order_across_versions(old: OldClient, redis_client: smq.Client) -> None:
    old.run(
        """
        queue = client.create_queue("orders.fifo", fifo_queue=True, content_based_deduplication=True)
        queue.send("a", message_group_id="g")
        queue.send("b", message_group_id="g")
        """
    )
    queue = redis_client.get_queue("orders.fifo")
    queue.send("c", message_group_id="g")
    received = queue.receive(10)
    assert [m.body for m in received] == ["a", "b", "c"]
    for message in received:
        queue.delete(message.receipt_handle)
    old.run("client.get_queue('orders.fifo').send('d', message_group_id='g')")
    assert [m.body for m in queue.receive(10)] == ["d"]


def test_while_pinned_new_queues_are_in_layout_1_and_the_old_client_uses_them(
    old: OldClient, redis_client: smq.Client
) -> None:
    redis_client.create_queue("pinned").send("from new")
    assert raw(redis_client).hget(QueueKeys.of("pinned").meta, "layout") == b"1"
    got = old.run(
        """
        queue = client.get_queue("pinned")
        queue.send("from old")
        result = sorted(m.body for m in queue.receive(10))
        """
    )
    assert got == ["from new", "from old"]


def test_after_the_old_clients_leave_the_upgrade_moves_queues_and_their_receipts_still_act(
    old: OldClient, redis_client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    old.run(
        """
        entries = [smq.SendEntry(str(n), f"old {n}") for n in range(4)]
        client.create_queue("stamped").send_batch(entries)
        """
    )
    queue = redis_client.get_queue("stamped")
    held = queue.receive(3, visibility_timeout=30)  # layout 1 receipts, state in `state`
    assert len(held) == 3
    (change,) = [u for u in redis_client.upgrade() if u.queue == "stamped"]
    assert (change.before, change.after, change.recorded) == (1, LAYOUT, False)
    monkeypatch.delenv("SMQ_LAYOUT")  # the last step: new queues in the newest layout
    queue.send("new")
    # Receipts from before the upgrade act on it: a delete, a change, a timeout ended.
    assert queue.delete(held[0].receipt_handle) is True
    queue.change_visibility(held[1].receipt_handle, 60)
    queue.change_visibility(held[2].receipt_handle, 0)
    got = {m.body: m for m in queue.receive(10)}
    assert sorted(got) == sorted(["new", "old 3", held[2].body])
    assert got[held[2].body].receive_count == 2 and got["new"].receive_count == 1
    for message in got.values():
        assert queue.delete(message.receipt_handle) is True
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (0, 1)  # held[1], hidden for 60 s
    assert queue.delete(held[1].receipt_handle) is True
    assert redis_client.create_queue("fresh").name == "fresh"
    assert raw(redis_client).hget(QueueKeys.of("fresh").meta, "layout") == str(LAYOUT).encode()


def test_a_layout_outside_this_versions_range_is_refused(
    redis_client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMQ_LAYOUT", str(LAYOUT + 1))
    with pytest.raises(ValueError, match="SMQ_LAYOUT must be 1 to"):
        redis_client.create_queue("never")
    with pytest.raises(ValueError, match="layout must be 1 to"):
        smq.Settings(layout=0)
    assert redis_client.list_queues() == []


def test_the_scripts_smq_looks_for_are_those_of_the_0_2_0_consumer(old: OldClient) -> None:
    shas = old.run(
        """
        import smq._scripts as scripts  # the 0.2.0 layout
        result = sorted({scripts.sources(sharded)[name].sha for sharded in (False, True)
                         for name in ("receive", "move_out")})
        """
    )
    assert shas == sorted(OLD_CONSUMER_SCRIPTS.values())


def test_once_a_0_2_0_consumer_ran_new_queues_stay_in_layout_1_and_the_upgrade_waits(
    old: OldClient,
    redis_client: smq.Client,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("SMQ_LAYOUT")  # forgotten: smq finds the 0.2.0 consumer by itself
    redis_client.create_queue("before-old")
    old.run("client.create_queue('consumed').receive(1)")
    with caplog.at_level(logging.WARNING, "smq.layout"):
        redis_client.create_queue("during")
        redis_client.create_queue("during-2")
    layouts = {
        name: raw(redis_client).hget(QueueKeys.of(name).meta, "layout") for name in ("before-old", "during")
    }
    assert layouts == {"before-old": str(LAYOUT).encode(), "during": b"1"}
    assert len([r for r in caplog.records if "0.2.0 client has received" in r.getMessage()]) == 1
    # The old consumer still reads what the new client sends to the queue made meanwhile.
    redis_client.get_queue("during").send("safe")
    assert old.run("result = [m.body for m in client.get_queue('during').receive(1)]") == ["safe"]
    with pytest.raises(smq.OldClientsPresent, match="0.2.0 client has received"):
        redis_client.upgrade()
    assert raw(redis_client).hget(QueueKeys.of("during").meta, "layout") == b"1"  # nothing moved
    assert redis_client.upgrade(dry_run=True)  # a dry run still reports
    raw(redis_client).script_flush()  # the operator, once no 0.2.0 client is left
    moved = {u.queue: (u.before, u.after) for u in redis_client.upgrade()}
    assert moved["during"] == (1, LAYOUT)
    redis_client.create_queue("after")
    assert raw(redis_client).hget(QueueKeys.of("after").meta, "layout") == str(LAYOUT).encode()


def test_force_upgrades_despite_cached_0_2_0_scripts(old: OldClient, redis_client: smq.Client) -> None:
    old.run("client.create_queue('forced').receive(1)")
    (moved,) = redis_client.upgrade(force=True)
    assert (moved.queue, moved.after) == ("forced", LAYOUT)
