"""Qualified queue names, ``<region>:<account>:<name>``, in the core.

The HTTP API keeps queues of regions other than its own under such names;
the core treats them as names like any other: one hash tag per queue, listed
by prefix, or left out of a listing of the bare names.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

import smq
from smq.cli import main
from smq.embedded import EmbeddedRedis

EU = "eu-west-1:000000000000:"
US = "us-west-2:000000000000:"


@pytest.mark.parametrize(
    "name",
    [
        "eu-west-1:000000000000:orders",
        "eu-west-1:000000000000:orders.fifo",
        "x:123456789012:" + "q" * 80,
        "a" * 32 + ":000000000000:q",
    ],
)
def test_qualified_names_are_queue_names(client: smq.Client, name: str) -> None:
    assert client.create_queue(name).name == name
    assert client.list_queues() == [name]


@pytest.mark.parametrize(
    "name",
    [
        "eu-west-1:orders",
        "eu-west-1:00000000000:orders",
        "EU-WEST-1:000000000000:orders",
        "eu_west_1:000000000000:orders",
        "a" * 33 + ":000000000000:q",
        "eu-west-1:000000000000:",
        "eu-west-1:000000000000:a.b",
        "eu-west-1:000000000000:" + "q" * 81,
        ":000000000000:orders",
        "eu-west-1:000000000000:orders:x",
    ],
)
def test_malformed_qualified_names_are_refused(client: smq.Client, name: str) -> None:
    with pytest.raises(smq.InvalidQueueName):
        client.create_queue(name)
    assert client.list_queues() == []


def test_a_qualified_queue_keeps_its_keys_in_one_slot_and_works(client: smq.Client) -> None:
    queue = client.create_queue(EU + "orders")
    assert queue.keys.meta == "smq:{eu-west-1:000000000000:orders}:meta"
    assert {key.split("}")[0] for key in (queue.keys.visible, queue.keys.events)} == {
        "smq:{eu-west-1:000000000000:orders"
    }
    queue.send("hello")
    (message,) = queue.receive()
    assert message.receipt_handle.startswith(EU + "orders:")
    assert queue.delete(message.receipt_handle)
    assert queue.attributes().visible == 0
    with pytest.raises(smq.ReceiptHandleIsInvalid):
        client.create_queue("orders").delete(message.receipt_handle)


def test_a_fifo_queue_may_be_qualified(client: smq.Client) -> None:
    queue = client.create_queue(EU + "jobs.fifo", content_based_deduplication=True)
    assert queue.fifo
    queue.send("one", message_group_id="g")
    queue.send("two", message_group_id="g")
    assert [m.body for m in queue.receive(max_messages=10)] == ["one", "two"]
    queue.send("three", message_group_id="g")
    assert queue.receive(max_messages=10) == []  # its group is in flight


def test_list_queues_by_namespace_or_bare_names_only(client: smq.Client) -> None:
    for name in ("eu-west-1-a", "eu-west-1_b", "zulu", EU + "eu-west-1-a", EU + "m", US + "m", US + "n"):
        client.create_queue(name)
    assert client.list_queues(EU) == [EU + "eu-west-1-a", EU + "m"]
    assert client.list_queues(US + "n") == [US + "n"]
    assert client.list_queues(qualified=False) == ["eu-west-1-a", "eu-west-1_b", "zulu"]
    assert client.list_queues("eu", qualified=False) == ["eu-west-1-a", "eu-west-1_b"]
    pages, after = [], ""
    while page := client.list_queues(limit=1, after=after, qualified=False):
        pages.append(page)
        after = page[-1]
    assert pages == [["eu-west-1-a"], ["eu-west-1_b"], ["zulu"]]
    assert client.list_queues(limit=2, qualified=False) == ["eu-west-1-a", "eu-west-1_b"]
    assert client.list_queues(limit=5, after=EU + "m", qualified=False) == ["eu-west-1_b", "zulu"]


def test_a_dead_letter_queue_must_share_its_sources_namespace(client: smq.Client) -> None:
    client.create_queue("dead")
    client.create_queue(EU + "dead")
    with pytest.raises(smq.InvalidAttributeValue):
        client.create_queue(EU + "work", redrive_policy=smq.RedrivePolicy("dead", 1))
    with pytest.raises(smq.InvalidAttributeValue):
        client.create_queue("work", redrive_policy=smq.RedrivePolicy(EU + "dead", 1))
    work = client.create_queue(EU + "work", redrive_policy=smq.RedrivePolicy(EU + "dead", 1))
    work.send("poison")
    assert [m.body for m in work.receive(visibility_timeout=0)] == ["poison"]
    assert work.receive() == []
    assert client.dead_letter_sources(EU + "dead") == [EU + "work"]
    assert client.dead_letter_sources("dead") == []
    task = client.start_move_task(EU + "dead")
    assert task.source == EU + "dead"
    client.run_move_tasks(owner="test")
    assert [t.status for t in client.list_move_tasks(EU + "dead")] == ["COMPLETED"]
    assert [m.body for m in work.receive()] == ["poison"]


def test_a_move_task_handle_of_a_qualified_queue_can_be_cancelled(client: smq.Client) -> None:
    dead = client.create_queue(US + "dead")
    client.create_queue(US + "work", redrive_policy=smq.RedrivePolicy(US + "dead", 1))
    client.create_queue(US + "elsewhere")
    dead.send("x")
    task = client.start_move_task(US + "dead", destination=US + "elsewhere", max_per_second=1)
    assert client.cancel_move_task(task.handle).status == "CANCELLING"


def test_the_command_line_addresses_qualified_queues_like_any_other(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    runner = CliRunner()

    def smq_(*args: str) -> Result:
        done = runner.invoke(main, list(args), env={"SMQ_REDIS_URL": redis_server.url})
        assert done.exit_code == 0, done.output
        return done

    smq_("queue", "create", EU + "jobs")
    smq_("queue", "create", "jobs")
    smq_("send", EU + "jobs", "for eu-west-1")
    (row,) = json.loads(smq_("queue", "list", "--prefix", EU, "--json").stdout)
    assert (row["name"], row["visible"]) == (EU + "jobs", 1)
    (message,) = json.loads(smq_("receive", EU + "jobs", "--json", "--delete").stdout)
    assert message["body"] == "for eu-west-1"
    assert redis_client.queue(EU + "jobs").attributes().in_flight == 0
    assert redis_client.queue("jobs").attributes().visible == 0
