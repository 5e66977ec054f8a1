"""Queue lifecycle: create, get, list, delete, purge, settings and counts."""

from __future__ import annotations

import pytest

import smq
from conftest import Clock, raw
from smq.core._keys import QueueKeys


def test_create_returns_existing_queue_when_settings_match(client: smq.Client) -> None:
    first = client.create_queue("jobs", visibility_timeout=60)
    second = client.create_queue("jobs", visibility_timeout=60)
    assert first.name == second.name == "jobs"
    assert second.attributes().config.visibility_timeout == 60


def test_create_with_other_settings_raises_queue_name_exists(client: smq.Client) -> None:
    client.create_queue("jobs", visibility_timeout=60)
    with pytest.raises(smq.QueueNameExists, match="visibility_timeout=60"):
        client.create_queue("jobs", visibility_timeout=61)


def test_create_compares_only_the_settings_given(client: smq.Client) -> None:
    client.create_queue("jobs", visibility_timeout=60)
    assert client.create_queue("jobs").attributes().config.visibility_timeout == 60


def test_new_queue_has_sqs_defaults(client: smq.Client) -> None:
    config = client.create_queue("jobs").attributes().config
    assert config == smq.QueueConfig(
        visibility_timeout=30,
        delay_seconds=0,
        message_retention_period=345600,
        maximum_message_size=1048576,
        receive_message_wait_time_seconds=0,
        redrive_policy=None,
        inflight_limit=120_000,
    )


@pytest.mark.parametrize(
    "name", ["", "a" * 81, "has space", "dot.name", "brace{x}", "a.b.fifo", "x" * 77 + ".fifo", ".fifo", "ü"]
)
def test_invalid_queue_names_are_refused_before_any_write(client: smq.Client, name: str) -> None:
    with pytest.raises(smq.InvalidQueueName):
        client.create_queue(name)
    assert client.list_queues() == []


@pytest.mark.parametrize("name", ["a", "A-b_9", "q" * 80])
def test_valid_queue_names_are_accepted(client: smq.Client, name: str) -> None:
    assert client.create_queue(name).name == name


@pytest.mark.parametrize(
    "setting,value",
    [
        ("visibility_timeout", -1),
        ("visibility_timeout", 43201),
        ("delay_seconds", 901),
        ("message_retention_period", 59),
        ("message_retention_period", 1209601),
        ("maximum_message_size", 1023),
        ("maximum_message_size", 1048577),
        ("receive_message_wait_time_seconds", 21),
        ("inflight_limit", 0),
        ("visibility_timeout", "30"),
        ("visibility_timeout", True),
    ],
)
def test_settings_out_of_range_raise_invalid_attribute_value(
    client: smq.Client, setting: str, value: object
) -> None:
    with pytest.raises(smq.InvalidAttributeValue, match=setting):
        client.create_queue("jobs", **{setting: value})
    assert not client.queue_exists("jobs")


def test_unknown_setting_raises_invalid_attribute_name(client: smq.Client) -> None:
    with pytest.raises(smq.InvalidAttributeName, match="colour"):
        client.create_queue("jobs", colour="blue")


@pytest.mark.parametrize("count", [0, 1001])
def test_max_receive_count_out_of_range_is_refused(count: int) -> None:
    with pytest.raises(smq.InvalidAttributeValue):
        smq.RedrivePolicy("dlq", count)


def test_get_queue_of_missing_queue_raises(client: smq.Client) -> None:
    with pytest.raises(smq.QueueDoesNotExist):
        client.get_queue("nope")
    with pytest.raises(smq.QueueDoesNotExist):
        client.queue("nope").send("x")


def test_list_queues_by_prefix_and_page(client: smq.Client) -> None:
    for name in ["orders", "orders-dlq", "payments", "order"]:
        client.create_queue(name)
    assert client.list_queues() == ["order", "orders", "orders-dlq", "payments"]
    assert client.list_queues("orders") == ["orders", "orders-dlq"]
    assert client.list_queues("order", limit=2) == ["order", "orders"]
    assert client.list_queues("order", limit=2, after="orders") == ["orders-dlq"]
    assert client.list_queues("zzz") == []


def test_delete_queue_removes_it_and_its_messages(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.send("x")
    assert client.delete_queue("jobs") is True
    assert client.delete_queue("jobs") is False
    assert client.list_queues() == []
    with pytest.raises(smq.QueueDoesNotExist):
        queue.receive()
    assert client.create_queue("jobs").attributes().visible == 0


def test_sqss_rule_refuses_a_name_for_60_seconds_after_its_queue_was_deleted(
    client: smq.Client, clock: Clock
) -> None:
    client.create_queue("jobs")
    client.create_queue("other")
    client.delete_queue("jobs")
    with pytest.raises(smq.QueueDeletedRecently, match="You must wait 60 seconds"):
        client.create_queue("jobs", refuse_recently_deleted=True)
    assert not client.queue_exists("jobs")
    # An existing queue is returned as ever; other names are free.
    assert client.create_queue("other", refuse_recently_deleted=True).name == "other"
    assert client.create_queue("new", refuse_recently_deleted=True).name == "new"
    clock.advance(59)
    with pytest.raises(smq.QueueDeletedRecently):
        client.create_queue("jobs", refuse_recently_deleted=True)
    clock.advance(1)
    client.create_queue("jobs", refuse_recently_deleted=True)
    # Without the rule (the default), a name is free again at once.
    client.delete_queue("jobs")
    client.create_queue("jobs")


def test_a_refused_sharded_create_leaves_no_shards_behind(client: smq.Client) -> None:
    client.create_queue("wide", shards=2)
    client.delete_queue("wide")
    with pytest.raises(smq.QueueDeletedRecently):
        client.create_queue("wide", shards=3, visibility_timeout=5, refuse_recently_deleted=True)
    assert not client.queue_exists("wide")
    assert not any(raw(client).exists(QueueKeys.of(f"wide.s{n}").meta) for n in range(1, 4))


def test_purge_deletes_all_messages_and_keeps_settings(client: smq.Client) -> None:
    queue = client.create_queue("jobs", visibility_timeout=99, delay_seconds=0)
    for n in range(5):
        queue.send(f"m{n}")
    queue.send("later", delay_seconds=60)
    received = queue.receive(2)
    assert queue.purge() == 6
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.delayed) == (0, 0, 0)
    assert info.config.visibility_timeout == 99
    assert queue.delete(received[0].receipt_handle) is False
    queue.send("after")
    assert [m.body for m in queue.receive(10)] == ["after"]


def test_counts_are_exact_per_state(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    for n in range(4):
        queue.send(f"m{n}")
    queue.send("d", delay_seconds=300)
    queue.receive(3)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.delayed) == (1, 3, 1)


def test_set_attributes_changes_settings_and_modified_time(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    created = queue.attributes()
    clock.advance(5)
    queue.set_attributes(visibility_timeout=5, delay_seconds=3)
    info = queue.attributes()
    assert info.config.visibility_timeout == 5
    assert info.config.delay_seconds == 3
    assert info.config.message_retention_period == 345600
    assert info.created_at == created.created_at
    assert info.modified_at == created.modified_at + 5


def test_set_attributes_on_missing_queue_raises(client: smq.Client) -> None:
    with pytest.raises(smq.QueueDoesNotExist):
        client.queue("nope").set_attributes(visibility_timeout=5)


def test_oldest_message_age_follows_the_server_clock(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    assert queue.attributes().oldest_age is None
    queue.send("old")
    clock.advance(10)
    queue.send("new")
    clock.advance(2)
    assert queue.attributes().oldest_age == pytest.approx(12.0)
