"""FIFO queues over HTTP: boto3 in both protocols, and the AWS CLI, against a real `smq serve`."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from botocore.exceptions import ClientError

import smq
from http_support import ACCOUNT, aws_cli


def _failure(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = caught.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.fixture
def fifo_url(api: Any) -> str:
    created = api.create_queue(
        QueueName="jobs.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )
    return str(created["QueueUrl"])


def test_create_queue_makes_a_fifo_queue_and_reports_its_attributes(api: Any, fifo_url: str) -> None:
    attributes = api.get_queue_attributes(QueueUrl=fifo_url, AttributeNames=["All"])["Attributes"]
    assert {k: attributes[k] for k in ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope")} == {
        "FifoQueue": "true",
        "ContentBasedDeduplication": "true",
        "DeduplicationScope": "queue",
    }
    assert attributes["FifoThroughputLimit"] == "perQueue"
    api.set_queue_attributes(
        QueueUrl=fifo_url,
        Attributes={"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"},
    )
    changed = api.get_queue_attributes(QueueUrl=fifo_url, AttributeNames=["DeduplicationScope"])
    assert changed["Attributes"] == {"DeduplicationScope": "messageGroup"}
    # The same request again is idempotent; a different one is QueueNameExists.
    api.create_queue(QueueName="jobs.fifo", Attributes={"FifoQueue": "true"})


@pytest.mark.parametrize(
    ("name", "attributes", "code"),
    [
        ("jobs.fifo", {}, "InvalidParameterValue"),  # a .fifo name needs FifoQueue=true
        ("jobs", {"FifoQueue": "true"}, "InvalidParameterValue"),  # FifoQueue needs a .fifo name
        ("jobs", {"ContentBasedDeduplication": "true"}, "InvalidAttributeName"),
        ("jobs.fifo", {"FifoQueue": "true", "DeduplicationScope": "everywhere"}, "InvalidAttributeValue"),
        ("jobs.fifo", {"FifoQueue": "maybe"}, "InvalidAttributeValue"),
    ],
)
def test_create_queue_refuses_mismatched_fifo_names_and_attributes(
    api: Any, name: str, attributes: dict[str, str], code: str
) -> None:
    with pytest.raises(ClientError) as caught:
        api.create_queue(QueueName=name, Attributes=attributes)
    assert _failure(caught) == (code, 400)
    assert "QueueUrls" not in api.list_queues()


def test_send_and_receive_keep_group_order_and_report_fifo_attributes(api: Any, fifo_url: str) -> None:
    sent = [
        api.send_message(QueueUrl=fifo_url, MessageBody=body, MessageGroupId=body[0])
        for body in ("a1", "b1", "a2")
    ]
    numbers = [s["SequenceNumber"] for s in sent]
    assert numbers == sorted(numbers) and all(len(n) == 20 for n in numbers)
    received = api.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10, AttributeNames=["All"])[
        "Messages"
    ]
    assert [m["Body"] for m in received] == ["a1", "a2", "b1"]
    first = received[0]["Attributes"]
    assert first["MessageGroupId"] == "a"
    assert first["SequenceNumber"] == numbers[0]
    assert first["MessageDeduplicationId"] == hashlib.sha256(b"a1").hexdigest()
    assert "Messages" not in api.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10)
    api.delete_message(QueueUrl=fifo_url, ReceiptHandle=received[0]["ReceiptHandle"])
    api.delete_message(QueueUrl=fifo_url, ReceiptHandle=received[1]["ReceiptHandle"])
    api.send_message(QueueUrl=fifo_url, MessageBody="a3", MessageGroupId="a")
    again = api.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in again] == ["a3"]


def test_duplicates_are_accepted_and_not_delivered(api: Any, fifo_url: str) -> None:
    first = api.send_message(
        QueueUrl=fifo_url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d-1"
    )
    again = api.send_message(
        QueueUrl=fifo_url, MessageBody="y", MessageGroupId="g", MessageDeduplicationId="d-1"
    )
    assert again["MessageId"] == first["MessageId"]
    batch = api.send_message_batch(
        QueueUrl=fifo_url,
        Entries=[
            {"Id": "one", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d-1"},
            {"Id": "two", "MessageBody": "z", "MessageGroupId": "g"},
        ],
    )
    assert sorted(e["Id"] for e in batch["Successful"]) == ["one", "two"]
    assert all("SequenceNumber" in e for e in batch["Successful"])
    bodies = [m["Body"] for m in api.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10)["Messages"]]
    assert bodies == ["x", "z"]


def test_fifo_sends_need_a_group_and_take_no_delay(api: Any, fifo_url: str) -> None:
    with pytest.raises(ClientError) as caught:
        api.send_message(QueueUrl=fifo_url, MessageBody="x")
    assert _failure(caught) == ("MissingParameter", 400)
    with pytest.raises(ClientError) as caught:
        api.send_message(QueueUrl=fifo_url, MessageBody="x", MessageGroupId="g", DelaySeconds=5)
    assert _failure(caught) == ("InvalidParameterValue", 400)
    # As the live service: an entry without its group fails the whole batch.
    with pytest.raises(ClientError) as caught:
        api.send_message_batch(
            QueueUrl=fifo_url,
            Entries=[
                {"Id": "nogroup", "MessageBody": "x"},
                {"Id": "ok", "MessageBody": "y", "MessageGroupId": "g"},
            ],
        )
    assert _failure(caught) == ("InvalidParameterValue", 400)
    assert "Messages" not in api.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10)
    url = api.create_queue(QueueName="plain")["QueueUrl"]
    with pytest.raises(ClientError) as caught:
        api.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
    assert _failure(caught) == ("InvalidParameterValue", 400)


def test_a_repeated_receive_request_attempt_id_returns_the_same_receipts(api: Any, fifo_url: str) -> None:
    for body in ("a1", "a2"):
        api.send_message(QueueUrl=fifo_url, MessageBody=body, MessageGroupId="a")
    first = api.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=1, ReceiveRequestAttemptId="attempt-1")
    again = api.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=1, ReceiveRequestAttemptId="attempt-1")
    assert [m["ReceiptHandle"] for m in again["Messages"]] == [m["ReceiptHandle"] for m in first["Messages"]]


def test_a_fifo_queue_dead_letters_into_a_fifo_queue_only(api: Any, fifo_url: str, core: smq.Client) -> None:
    plain = api.create_queue(QueueName="plain-dlq")["QueueUrl"]
    arn = api.get_queue_attributes(QueueUrl=plain, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    with pytest.raises(ClientError) as caught:
        api.set_queue_attributes(
            QueueUrl=fifo_url,
            Attributes={"RedrivePolicy": f'{{"deadLetterTargetArn":"{arn}","maxReceiveCount":1}}'},
        )
    assert _failure(caught)[1] == 400
    assert core.queue("jobs.fifo").attributes().config.redrive_policy is None


def test_the_aws_cli_drives_a_fifo_queue(sqs_server: Any, core: smq.Client) -> None:
    url = sqs_server.url
    created = aws_cli(
        url,
        "create-queue",
        "--queue-name",
        "cli.fifo",
        "--attributes",
        "FifoQueue=true,ContentBasedDeduplication=true",
    )
    queue_url = created["QueueUrl"]
    assert queue_url == f"{url}/{ACCOUNT}/cli.fifo"
    for body in ("first", "second"):
        sent = aws_cli(
            url, "send-message", "--queue-url", queue_url, "--message-body", body, "--message-group-id", "g"
        )
        assert len(sent["SequenceNumber"]) == 20
    received = aws_cli(
        url,
        "receive-message",
        "--queue-url",
        queue_url,
        "--max-number-of-messages",
        "10",
        "--attribute-names",
        "All",
        "--receive-request-attempt-id",
        "cli-attempt",
    )
    assert [(m["Body"], m["Attributes"]["MessageGroupId"]) for m in received["Messages"]] == [
        ("first", "g"),
        ("second", "g"),
    ]
    assert core.queue("cli.fifo").attributes().groups_in_flight == 1
