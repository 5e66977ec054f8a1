"""SQS attributes smq stores but does not act on: Policy, KMS, SSE, RedriveAllowPolicy."""

from __future__ import annotations

import json
import pickle

import pytest

import smq
from conftest import Clock, raw

POLICY = json.dumps({"Version": "2012-10-17", "Statement": []})
ALLOW = json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": ["arn:aws:sqs:us-east-1:1:a"]})


def test_stored_attributes_are_returned(client: smq.Client) -> None:
    extra = {
        "Policy": POLICY,
        "KmsMasterKeyId": "alias/aws/sqs",
        "KmsDataKeyReusePeriodSeconds": "300",
        "SqsManagedSseEnabled": "true",
        "RedriveAllowPolicy": ALLOW,
    }
    queue = client.create_queue("jobs", extra_attributes=extra)
    config = queue.attributes().config
    assert dict(config.extra_attributes) == extra
    assert config.extra_attributes["Policy"] == POLICY
    assert raw(client).hget(queue.keys.meta, "x:Policy") == POLICY.encode()


def test_a_new_queue_has_none(client: smq.Client) -> None:
    config = client.create_queue("jobs").attributes().config
    assert dict(config.extra_attributes) == {}
    assert config == smq.QueueConfig()


def test_values_are_normalised(client: smq.Client) -> None:
    queue = client.create_queue(
        "jobs", extra_attributes={"SqsManagedSseEnabled": "TRUE", "KmsDataKeyReusePeriodSeconds": "0300"}
    )
    extra = queue.attributes().config.extra_attributes
    assert dict(extra) == {"SqsManagedSseEnabled": "true", "KmsDataKeyReusePeriodSeconds": "300"}


def test_create_compares_only_the_attributes_given(client: smq.Client) -> None:
    client.create_queue("jobs", extra_attributes={"Policy": POLICY, "KmsMasterKeyId": "k1"})
    client.create_queue("jobs", extra_attributes={"Policy": POLICY})
    client.create_queue("jobs", extra_attributes={"KmsMasterKeyId": "k1"})
    client.create_queue("jobs")
    with pytest.raises(smq.QueueNameExists, match="KmsMasterKeyId='k1', not 'k2'"):
        client.create_queue("jobs", extra_attributes={"KmsMasterKeyId": "k2"})
    with pytest.raises(smq.QueueNameExists, match="SqsManagedSseEnabled"):
        client.create_queue("jobs", extra_attributes={"SqsManagedSseEnabled": "false"})
    # empty stands for "not set"
    client.create_queue("jobs", extra_attributes={"RedriveAllowPolicy": ""})
    with pytest.raises(smq.QueueNameExists):
        client.create_queue("jobs", extra_attributes={"Policy": ""})


def test_set_attributes_merges_and_removes(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs", extra_attributes={"Policy": POLICY})
    clock.advance(3)
    queue.set_attributes(extra_attributes={"KmsMasterKeyId": "alias/k"})
    info = queue.attributes()
    assert dict(info.config.extra_attributes) == {"Policy": POLICY, "KmsMasterKeyId": "alias/k"}
    assert info.modified_at == info.created_at + 3
    queue.set_attributes(extra_attributes={"Policy": "", "KmsMasterKeyId": "alias/k2"}, visibility_timeout=7)
    config = queue.attributes().config
    assert dict(config.extra_attributes) == {"KmsMasterKeyId": "alias/k2"}
    assert config.visibility_timeout == 7
    assert raw(client).hexists(queue.keys.meta, "x:Policy") == 0
    queue.set_attributes(extra_attributes={"SqsManagedSseEnabled": ""})  # removing an absent one
    assert dict(queue.attributes().config.extra_attributes) == {"KmsMasterKeyId": "alias/k2"}


def test_other_settings_leave_stored_attributes_alone(client: smq.Client) -> None:
    queue = client.create_queue("jobs", extra_attributes={"Policy": POLICY})
    queue.set_attributes(delay_seconds=5)
    assert dict(queue.attributes().config.extra_attributes) == {"Policy": POLICY}


@pytest.mark.parametrize(
    "name,value",
    [
        ("KmsDataKeyReusePeriodSeconds", "59"),
        ("KmsDataKeyReusePeriodSeconds", "86401"),
        ("KmsDataKeyReusePeriodSeconds", "5m"),
        ("KmsDataKeyReusePeriodSeconds", "-60"),
        ("KmsDataKeyReusePeriodSeconds", 300),
        ("SqsManagedSseEnabled", "yes"),
        ("SqsManagedSseEnabled", True),
        ("Policy", "not json"),
        ("Policy", "[]"),
        ("Policy", '"a string"'),
        ("KmsMasterKeyId", "k" * 65537),
        ("RedriveAllowPolicy", "{}"),
        ("RedriveAllowPolicy", '{"redrivePermission": "sometimes"}'),
        ("RedriveAllowPolicy", '{"redrivePermission": "allowAll", "sourceQueueArns": ["arn:a"]}'),
        ("RedriveAllowPolicy", '{"redrivePermission": "denyAll", "sourceQueueArns": []}'),
        ("RedriveAllowPolicy", '{"redrivePermission": "byQueue"}'),
        ("RedriveAllowPolicy", '{"redrivePermission": "byQueue", "sourceQueueArns": "arn:a"}'),
        ("RedriveAllowPolicy", '{"redrivePermission": "byQueue", "sourceQueueArns": [1]}'),
        ("RedriveAllowPolicy", json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": ["a"] * 11})),
        ("RedriveAllowPolicy", '{"redrivePermission": "allowAll", "colour": "blue"}'),
    ],
)
def test_invalid_values_are_refused_before_any_write(client: smq.Client, name: str, value: object) -> None:
    with pytest.raises(smq.InvalidAttributeValue, match=name):
        client.create_queue("jobs", extra_attributes={name: value})
    assert not client.queue_exists("jobs")
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidAttributeValue, match=name):
        queue.set_attributes(extra_attributes={name: value})
    assert dict(queue.attributes().config.extra_attributes) == {}


@pytest.mark.parametrize(
    "value",
    [
        '{"redrivePermission": "allowAll"}',
        '{"redrivePermission": "denyAll"}',
        json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": ["a"] * 10}),
    ],
)
def test_valid_redrive_allow_policies_are_stored(client: smq.Client, value: str) -> None:
    queue = client.create_queue("jobs", extra_attributes={"RedriveAllowPolicy": value})
    assert queue.attributes().config.extra_attributes["RedriveAllowPolicy"] == value


def test_unknown_names_are_refused(client: smq.Client) -> None:
    with pytest.raises(smq.InvalidAttributeName, match="FifoQueue"):
        client.create_queue("jobs", extra_attributes={"FifoQueue": "true"})
    with pytest.raises(smq.InvalidAttributeValue):
        client.create_queue("jobs", extra_attributes=[("Policy", POLICY)])
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidAttributeName):
        queue.set_attributes(extra_attributes={"policy": POLICY})
    with pytest.raises(smq.InvalidParameter, match="at least one"):
        queue.set_attributes(extra_attributes={})


def test_config_holds_them_as_an_immutable_hashable_mapping() -> None:
    config = smq.QueueConfig(extra_attributes={"Policy": POLICY, "KmsMasterKeyId": ""})
    assert dict(config.extra_attributes) == {"Policy": POLICY}
    assert config == smq.QueueConfig(extra_attributes={"Policy": POLICY})
    assert hash(config) == hash(smq.QueueConfig(extra_attributes={"Policy": POLICY}))
    assert config != smq.QueueConfig()
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(TypeError):
        config.extra_attributes["Policy"] = "{}"  # type: ignore[index]
    assert config.to_meta(["extra_attributes"]) == {"x:Policy": POLICY}


def test_a_read_modify_write_computes_again_after_a_change_made_meanwhile(client: smq.Client) -> None:
    from smq.operations._policy import update_extra_attribute

    queue = client.create_queue("jobs")
    seen: list[str] = []

    def change(current: str) -> str:
        seen.append(current)
        if len(seen) == 1:  # another client writes between this read and the write
            queue.set_attributes(extra_attributes={"Policy": POLICY})
        return json.dumps({"Statement": [*json.loads(current or "{}").get("Statement", []), "mine"]})

    written = update_extra_attribute(client, "jobs", "Policy", change)
    assert seen == ["", POLICY]  # the first result was not written: it would have lost POLICY
    assert json.loads(written) == {"Statement": ["mine"]}
    assert queue.attributes().config.extra_attributes["Policy"] == written
    update_extra_attribute(client, "jobs", "Policy", lambda current: "")  # "" removes it
    assert "Policy" not in queue.attributes().config.extra_attributes
    with pytest.raises(smq.QueueDoesNotExist):
        update_extra_attribute(client, "nowhere", "Policy", lambda current: POLICY)
    with pytest.raises(smq.InvalidAttributeValue):
        update_extra_attribute(client, "jobs", "Policy", lambda current: "not json")
