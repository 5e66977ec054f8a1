"""A mixed fleet: smq 0.2.0 clients and this version's on the same queues, as during a rolling upgrade.

tests/fixtures holds the wheel of smq-redis 0.2.0 (the last version that records no data layout),
built from its release commit; the old client runs from it in a subprocess, this version in the
test. Each hands messages, receipts and dead letters to the other; `smq upgrade` runs in between,
and the old client keeps working on the upgraded queues (layout 1 is 0.2.0's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import smq
from conftest import raw
from smq._errors import LAYOUT
from smq._keys import QueueKeys
from smq.embedded import EmbeddedRedis

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
def old(redis_client: smq.Client, redis_server: EmbeddedRedis) -> OldClient:
    return OldClient(redis_server.url)


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


def test_the_old_client_keeps_working_on_queues_the_upgrade_stamped(
    old: OldClient, redis_client: smq.Client
) -> None:
    old.run("client.create_queue('stamped').send('before')")
    (change,) = [u for u in redis_client.upgrade() if u.queue == "stamped"]
    assert (change.before, change.after, change.recorded) == (1, LAYOUT, False)
    got = old.run(
        """
        queue = client.get_queue("stamped")
        queue.send("after")
        result = sorted(m.body for m in queue.receive(10))
        """
    )
    assert got == ["after", "before"]
