"""The AWS CLI, run as a subprocess, against a real `smq serve` on a real Redis.

Every `aws sqs` command of a queue's life, as users type them. The CLI speaks
the JSON protocol through its own botocore; state is arranged and checked
through the core client where that is shorter.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import smq
from http_support import ACCOUNT, REGION, aws_cli


def _list_calls(server: Any) -> int:
    """ListQueues requests in the server's access log so far."""
    lines = [line for line in server.logs().splitlines() if line.startswith("{")]
    return sum(json.loads(line).get("action") == "ListQueues" for line in lines)


def test_the_cli_creates_finds_lists_configures_and_deletes_queues(sqs_server: Any, core: smq.Client) -> None:
    url = sqs_server.url
    created = aws_cli(url, "create-queue", "--queue-name", "jobs", "--attributes", "VisibilityTimeout=45")
    assert created == {"QueueUrl": f"{url}/{ACCOUNT}/jobs"}
    for n in range(4):
        core.create_queue(f"jobs-{n}")
    assert aws_cli(url, "get-queue-url", "--queue-name", "jobs") == created
    # The CLI pages by itself: five queues in pages of two, with NextToken.
    before = _list_calls(sqs_server)
    listed = aws_cli(url, "list-queues", "--queue-name-prefix", "jobs", "--page-size", "2")
    assert _list_calls(sqs_server) - before == 3
    assert sorted(listed["QueueUrls"]) == [f"{url}/{ACCOUNT}/jobs"] + [
        f"{url}/{ACCOUNT}/jobs-{n}" for n in range(4)
    ]
    policy = json.dumps(
        {"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs-0", "maxReceiveCount": 4}
    )
    aws_cli(
        url,
        "set-queue-attributes",
        "--queue-url",
        created["QueueUrl"],
        "--attributes",
        json.dumps({"DelaySeconds": "5", "RedrivePolicy": policy}),
    )
    attributes = aws_cli(
        url, "get-queue-attributes", "--queue-url", created["QueueUrl"], "--attribute-names", "All"
    )["Attributes"]
    assert attributes["VisibilityTimeout"] == "45"
    assert attributes["DelaySeconds"] == "5"
    assert attributes["QueueArn"] == f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"
    assert json.loads(attributes["RedrivePolicy"])["deadLetterTargetArn"].endswith(":jobs-0")
    assert aws_cli(url, "delete-queue", "--queue-url", created["QueueUrl"]) == {}
    assert not core.queue_exists("jobs")


def test_the_cli_sends_receives_changes_visibility_and_deletes_a_message(
    sqs_server: Any, core: smq.Client
) -> None:
    url = sqs_server.url
    queue_url = f"{url}/{ACCOUNT}/jobs"
    core.create_queue("jobs", visibility_timeout=600)
    sent = aws_cli(
        url,
        "send-message",
        "--queue-url",
        queue_url,
        "--message-body",
        "resize image 42",
        "--message-attributes",
        json.dumps({"priority": {"DataType": "Number", "StringValue": "3"}}),
    )
    assert sent["MD5OfMessageBody"] == hashlib.md5(b"resize image 42").hexdigest()
    assert sent["MD5OfMessageAttributes"]
    reply = aws_cli(
        url,
        "receive-message",
        "--queue-url",
        queue_url,
        "--attribute-names",
        "All",
        "--message-attribute-names",
        "All",
    )
    (message,) = reply["Messages"]
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == "resize image 42"
    assert message["MessageAttributes"] == {"priority": {"DataType": "Number", "StringValue": "3"}}
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    assert core.queue("jobs").attributes().in_flight == 1
    aws_cli(
        url,
        "change-message-visibility",
        "--queue-url",
        queue_url,
        "--receipt-handle",
        message["ReceiptHandle"],
        "--visibility-timeout",
        "0",
    )
    (again,) = core.queue("jobs").receive()  # visible at once
    assert again.message_id == message["MessageId"]
    aws_cli(url, "delete-message", "--queue-url", queue_url, "--receipt-handle", again.receipt_handle)
    info = core.queue("jobs").attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 1)


def test_the_cli_sends_and_deletes_in_batches_and_purges(sqs_server: Any, core: smq.Client) -> None:
    url = sqs_server.url
    queue_url = f"{url}/{ACCOUNT}/jobs"
    queue = core.create_queue("jobs")
    entries = [{"Id": f"e{n}", "MessageBody": f"message {n}"} for n in range(3)]
    entries.append({"Id": "bad", "MessageBody": "nul \u0000"})
    sent = aws_cli(url, "send-message-batch", "--queue-url", queue_url, "--entries", json.dumps(entries))
    assert sorted(entry["Id"] for entry in sent["Successful"]) == ["e0", "e1", "e2"]
    assert [(entry["Id"], entry["Code"]) for entry in sent["Failed"]] == [("bad", "InvalidMessageContents")]
    messages = queue.receive(10)
    assert sorted(m.body for m in messages) == ["message 0", "message 1", "message 2"]
    deletes = [{"Id": f"d{n}", "ReceiptHandle": m.receipt_handle} for n, m in enumerate(messages)]
    deleted = aws_cli(url, "delete-message-batch", "--queue-url", queue_url, "--entries", json.dumps(deletes))
    assert sorted(entry["Id"] for entry in deleted["Successful"]) == ["d0", "d1", "d2"]
    assert deleted.get("Failed", []) == []
    for n in range(5):
        queue.send(f"left {n}")
    queue.receive()
    aws_cli(url, "purge-queue", "--queue-url", queue_url)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.delayed) == (0, 0, 0)


def test_the_cli_fails_on_a_missing_queue_and_names_the_sqs_error(sqs_server: Any, core: smq.Client) -> None:
    done = aws_cli(sqs_server.url, "get-queue-url", "--queue-name", "nowhere", check=False)
    assert done.returncode != 0
    assert "AWS.SimpleQueueService.NonExistentQueue" in done.stderr or "QueueDoesNotExist" in done.stderr
