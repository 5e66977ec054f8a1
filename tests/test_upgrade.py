"""Data layouts: every script refuses a queue in a newer layout, and `smq upgrade` moves queues."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import pytest
from click.testing import CliRunner

import smq
from conftest import raw
from smq._errors import LAYOUT
from smq.cli import main
from smq.core._keys import QueueKeys
from smq.embedded import EmbeddedRedis

NEWER = LAYOUT + 1


def _fence(request: pytest.FixtureRequest, admin: Any, name: str) -> None:
    """Mark queue ``name`` as stored in a newer layout, undone when the test ends (before its
    client closes: finalizers run last registered first), as the servers are shared."""
    meta = QueueKeys.of(name).meta
    admin.hset(meta, "layout", NEWER)
    request.addfinalizer(lambda: admin.hset(meta, "layout", LAYOUT))


def _snapshot(client: smq.Client, name: str) -> dict[str, Any]:
    """Every key of the queue, dumped: a refused call must leave each byte as it was."""
    keys = QueueKeys.of(name)
    names = [getattr(keys, f.name) for f in fields(keys) if f.name not in ("name", "wake_channel")]
    return {key: raw(client).dump(key) for key in names}


def _ready(
    request: pytest.FixtureRequest, client: smq.Client, name: str, *, sources: bool, **config: Any
) -> tuple[smq.Queue, smq.Message]:
    """A queue with a message in flight, a visible one and a tag (and ``sources``: the dead-letter
    queue of a queue ``source``), then moved to a newer layout."""
    queue = client.create_queue(name, **config)
    if sources:
        client.create_queue("elsewhere")
        client.create_queue("source", redrive_policy=smq.RedrivePolicy(name, 3))
    group = {"message_group_id": "g"} if name.endswith(".fifo") else {}
    queue.send_batch([smq.SendEntry(f"e{n}", f"m{n}", **group) for n in range(2)])
    (held,) = queue.receive(1)
    queue.tag({"team": "a"})
    _fence(request, raw(client), name)
    return queue, held


OPERATIONS: dict[str, Callable[[smq.Client, smq.Queue, smq.Message], object]] = {
    "send": lambda c, q, m: q.send("x", **({"message_group_id": "g"} if q.name.endswith(".fifo") else {})),
    "receive": lambda c, q, m: q.receive(10),
    "delete": lambda c, q, m: q.delete(m.receipt_handle),
    "change_visibility": lambda c, q, m: q.change_visibility(m.receipt_handle, 0),
    "attributes": lambda c, q, m: q.attributes(),
    "set_attributes": lambda c, q, m: q.set_attributes(visibility_timeout=5),
    "peek": lambda c, q, m: q.peek("visible"),
    "purge": lambda c, q, m: q.purge(),
    "tag": lambda c, q, m: q.tag({"k": "v"}),
    "untag": lambda c, q, m: q.untag(["team"]),
    "tags": lambda c, q, m: q.tags(),
    "create_queue": lambda c, q, m: c.create_queue(q.name, fifo_queue=q.name.endswith(".fifo")),
    "delete_queue": lambda c, q, m: c.delete_queue(q.name),
    "list_move_tasks": lambda c, q, m: c.list_move_tasks(q.name),
    "start_move_task": lambda c, q, m: c.start_move_task(q.name, destination="elsewhere"),
}


# A FIFO queue takes no move task.
CASES = [(name, op) for name in ("jobs", "jobs.fifo") for op in sorted(OPERATIONS)]
CASES.remove(("jobs.fifo", "start_move_task"))


@pytest.mark.parametrize(("name", "operation"), CASES)
def test_a_queue_in_a_newer_layout_is_refused_whole(
    request: pytest.FixtureRequest, client: smq.Client, name: str, operation: str
) -> None:
    config = {"fifo_queue": True, "content_based_deduplication": True} if name.endswith(".fifo") else {}
    queue, held = _ready(request, client, name, sources=operation == "start_move_task", **config)
    before = _snapshot(client, name)
    with pytest.raises(
        smq.UnsupportedLayout, match=rf"data layout {NEWER}, newer than this smq .* upgrade smq"
    ):
        OPERATIONS[operation](client, queue, held)
    assert _snapshot(client, name) == before


def test_a_new_queue_records_the_layout_it_is_in(client: smq.Client) -> None:
    client.create_queue("jobs")
    assert raw(client).hget(QueueKeys.of("jobs").meta, "layout") == str(LAYOUT).encode()
    # ... which create_queue does not mistake for a setting of its own
    assert client.create_queue("jobs").name == "jobs"


def test_upgrade_records_the_layout_of_queues_made_before_layouts_were(client: smq.Client) -> None:
    for name in ("a", "b.fifo"):
        fifo = name.endswith(".fifo")
        queue = client.create_queue(name, fifo_queue=fifo, content_based_deduplication=fifo)
        queue.send("kept", **({"message_group_id": "g"} if fifo else {}))
    raw(client).hdel(QueueKeys.of("a").meta, "layout")  # as 0.2.0 left it
    before = _snapshot(client, "a")

    planned = client.upgrade(dry_run=True)
    assert [(u.queue, u.before, u.after, u.recorded, u.changed) for u in planned] == [
        ("a", 1, LAYOUT, False, True),
        ("b.fifo", LAYOUT, LAYOUT, True, False),
    ]
    assert _snapshot(client, "a") == before  # a dry run changes nothing

    done = client.upgrade()
    assert [(u.queue, u.changed) for u in done] == [("a", True), ("b.fifo", False)]
    assert raw(client).hget(QueueKeys.of("a").meta, "layout") == str(LAYOUT).encode()
    assert [u.changed for u in client.upgrade()] == [False, False]  # again: nothing to do
    # The data itself was not touched: the messages are there to receive.
    assert [m.body for m in client.get_queue("a").receive(10)] == ["kept"]


def test_upgrade_moves_every_shard_of_a_sharded_queue(client: smq.Client) -> None:
    queue = client.create_queue("wide", shards=3)
    shards = queue.shard_names()
    for shard in shards:
        raw(client).hdel(QueueKeys.of(shard).meta, "layout")
    assert sorted(u.queue for u in client.upgrade() if u.changed) == sorted(shards)


def test_upgrade_refuses_a_queue_newer_than_itself(
    request: pytest.FixtureRequest, client: smq.Client
) -> None:
    client.create_queue("jobs")
    _fence(request, raw(client), "jobs")
    with pytest.raises(smq.UnsupportedLayout):
        client.upgrade()


def test_the_upgrade_command_says_what_it_did(
    request: pytest.FixtureRequest, redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    redis_url = redis_server.url
    redis_client.create_queue("old")
    redis_client.create_queue("new")
    raw(redis_client).hdel(QueueKeys.of("old").meta, "layout")
    runner = CliRunner()
    dry = runner.invoke(main, ["upgrade", "--dry-run", "--redis-url", redis_url])
    assert dry.exit_code == 0, dry.output
    assert dry.output.splitlines() == [
        f"new: layout {LAYOUT}, up to date",
        f"old: layout 1 (unrecorded) would move to layout {LAYOUT}",
        f"2 queues, 1 would move to layout {LAYOUT} (dry run)",
    ]
    done = runner.invoke(main, ["upgrade", "--redis-url", redis_url])
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[-1] == f"2 queues, 1 moved to layout {LAYOUT}"
    _fence(request, raw(redis_client), "new")
    refused = runner.invoke(main, ["upgrade", "--redis-url", redis_url])
    assert refused.exit_code != 0
    assert f"data layout {NEWER}" in refused.output


def test_smq_serve_answers_a_queue_in_a_newer_layout_with_a_retryable_503(
    request: pytest.FixtureRequest, api: Any, core: smq.Client
) -> None:
    from botocore.exceptions import ClientError

    url = api.create_queue(QueueName="jobs")["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="kept")
    _fence(request, raw(core), "jobs")
    for call in (
        lambda: api.send_message(QueueUrl=url, MessageBody="x"),
        lambda: api.receive_message(QueueUrl=url),
        lambda: api.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]),
    ):
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert refused.value.response["Error"]["Code"] == "ServiceUnavailable"
    raw(core).hset(QueueKeys.of("jobs").meta, "layout", LAYOUT)  # an upgraded server would read it
    assert [m["Body"] for m in api.receive_message(QueueUrl=url)["Messages"]] == ["kept"]
