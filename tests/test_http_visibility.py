"""Visibility semantics end to end over HTTP, on both protocols.

boto3 (JSON, and the Query model) against a real `smq serve` on a real Redis.
The server judges time by Redis's clock, on this machine: the tests use
timeouts of a second or a few, wait with margins on both sides, and poll
with deadlines rather than trusting one sleep.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

import smq
from http_support import ACCOUNT, REGION, json_client


def failure(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = caught.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def received(api: Any, url: str, **kwargs: Any) -> list[dict[str, Any]]:
    return list(api.receive_message(QueueUrl=url, **kwargs).get("Messages", []))


def receive_one(api: Any, url: str, **kwargs: Any) -> dict[str, Any]:
    (message,) = received(api, url, **kwargs)
    return message


def in_flight(api: Any, url: str) -> int:
    reply = api.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])
    return int(reply["Attributes"]["ApproximateNumberOfMessagesNotVisible"])


def receive_within(api: Any, url: str, seconds: float, **kwargs: Any) -> tuple[dict[str, Any], float]:
    """Long-poll until a message comes or ``seconds`` pass; (message, seconds it took)."""
    started = time.monotonic()
    deadline = started + seconds
    while time.monotonic() < deadline:
        wait = max(1, min(20, int(deadline - time.monotonic())))
        messages = received(api, url, WaitTimeSeconds=wait, **kwargs)
        if messages:
            return messages[0], time.monotonic() - started
    raise AssertionError(f"no message within {seconds} s")


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def change(api: Any, url: str, message: dict[str, Any], timeout: int) -> None:
    api.change_message_visibility(
        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=timeout
    )


# -- extend, terminate, per receipt ------------------------------------------------


def test_a_change_to_a_longer_timeout_keeps_the_message_hidden_past_the_first_expiry(api: Any) -> None:
    url = api.create_queue(QueueName="jobs")["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="work")
    message = receive_one(api, url, VisibilityTimeout=1)
    received_at = time.monotonic()
    change(api, url, message, 4)  # from now: ends about 4 s after the receive
    sleep_until(received_at + 1.5)  # well past the first expiry, well before the new one
    assert received(api, url) == []
    assert in_flight(api, url) == 1
    again, _ = receive_within(api, url, 8)
    assert again["MessageId"] == message["MessageId"]
    assert time.monotonic() - received_at >= 3.5  # not before the extended timeout ran out


def test_visibility_timeout_zero_makes_the_message_receivable_at_once_and_the_next_receive_counts(
    api: Any,
) -> None:
    url = api.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "600"})["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="work")
    first = receive_one(api, url)
    change(api, url, first, 0)
    assert in_flight(api, url) == 0
    again = receive_one(api, url, AttributeNames=["ApproximateReceiveCount"])
    assert again["MessageId"] == first["MessageId"]
    assert again["ReceiptHandle"] != first["ReceiptHandle"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"


def test_a_change_applies_to_that_receipt_only_and_the_next_receive_uses_the_queue_default(api: Any) -> None:
    url = api.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="work")
    first = receive_one(api, url)
    change(api, url, first, 600)
    change(api, url, first, 0)
    second = receive_one(api, url)  # hidden for the queue's 1 s, not for 600 s nor 0 s
    assert received(api, url) == []
    third, waited = receive_within(api, url, 8)
    assert third["MessageId"] == second["MessageId"] == first["MessageId"]
    assert waited < 5


# -- stale receipts ----------------------------------------------------------------


def test_a_stale_receipt_cannot_change_or_delete_and_the_new_receipt_still_works(api: Any) -> None:
    url = api.create_queue(QueueName="jobs")["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="work")
    old = receive_one(api, url, VisibilityTimeout=0)
    new = receive_one(api, url)
    with pytest.raises(ClientError) as caught:
        change(api, url, old, 60)
    assert failure(caught) == ("InvalidParameterValue", 400)
    api.delete_message(QueueUrl=url, ReceiptHandle=old["ReceiptHandle"])  # succeeds, deletes nothing
    assert in_flight(api, url) == 1
    change(api, url, new, 0)
    newest = receive_one(api, url)
    assert newest["MessageId"] == new["MessageId"]
    api.delete_message(QueueUrl=url, ReceiptHandle=newest["ReceiptHandle"])
    assert in_flight(api, url) == 0
    assert received(api, url) == []


# -- the 12-hour ceiling -----------------------------------------------------------


def test_a_change_ending_within_12_hours_of_the_receive_is_accepted(api: Any) -> None:
    # The ceiling counts from the receive, in milliseconds: 43200 s asked for
    # even a few ms later passes it (as in SQS); 43199 s within a second does not.
    url = api.create_queue(QueueName="jobs")["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="work")
    message = receive_one(api, url)
    change(api, url, message, 43199)
    assert in_flight(api, url) == 1


def test_a_change_past_12_hours_after_the_receive_is_refused_and_never_clamped(api: Any) -> None:
    url = api.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "2"})["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="work")
    message = receive_one(api, url)
    received_at = time.monotonic()
    sleep_until(received_at + 1.2)  # more than a second of the 12 hours has gone
    with pytest.raises(ClientError) as caught:
        change(api, url, message, 43200)
    assert failure(caught) == ("InvalidParameterValue", 400)
    assert caught.value.response["Error"]["Message"] == (
        "Value 43200 for parameter VisibilityTimeout is invalid. "
        "Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"
    )
    entry = {"Id": "e", "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 43200}
    (failed,) = api.change_message_visibility_batch(QueueUrl=url, Entries=[entry])["Failed"]
    assert (failed["Code"], failed["Message"]) == (
        "InvalidParameterValue",
        caught.value.response["Error"]["Message"],
    )
    # Not clamped to what was left: the receive's own 2 s still hold and run out.
    again, _ = receive_within(api, url, 8)
    assert again["MessageId"] == message["MessageId"]
    # A new receive starts a new 12 hours; within them a change is accepted.
    change(api, url, again, 43100)
    assert in_flight(api, url) == 1


# -- the in-flight limit -----------------------------------------------------------


def test_at_the_in_flight_limit_a_short_poll_is_over_limit_and_a_long_poll_returns_nothing(
    api: Any, core: smq.Client
) -> None:
    core.create_queue("jobs", inflight_limit=2)
    url = api.get_queue_url(QueueName="jobs")["QueueUrl"]
    api.send_message_batch(QueueUrl=url, Entries=[{"Id": f"e{n}", "MessageBody": str(n)} for n in range(3)])
    first = receive_one(api, url)
    receive_one(api, url)
    with pytest.raises(api.exceptions.OverLimit) as caught:
        api.receive_message(QueueUrl=url)
    assert failure(caught) == ("OverLimit", 403)
    started = time.monotonic()
    assert received(api, url, WaitTimeSeconds=1) == []
    assert 0.8 <= time.monotonic() - started < 5
    api.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])  # room for one more
    assert len(received(api, url, MaxNumberOfMessages=10)) == 1


# -- dead letters ------------------------------------------------------------------


def test_a_message_past_max_receive_count_moves_to_the_dead_letter_queue_with_body_and_attributes(
    api: Any,
) -> None:
    dead = api.create_queue(QueueName="jobs-dlq")["QueueUrl"]
    policy = json.dumps(
        {"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs-dlq", "maxReceiveCount": 1}
    )
    url = api.create_queue(QueueName="jobs", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    attributes = {
        "kind": {"DataType": "String", "StringValue": "resize"},
        "size": {"DataType": "Number.int", "StringValue": "42"},
        "thumb": {"DataType": "Binary", "BinaryValue": b"\x89PNG"},
    }
    sent = api.send_message(QueueUrl=url, MessageBody="poison", MessageAttributes=attributes)
    first = receive_one(api, url, VisibilityTimeout=0, AttributeNames=["All"])
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    assert received(api, url) == []  # this receive moved it instead of returning it
    moved, _ = receive_within(api, dead, 5, MessageAttributeNames=["All"], AttributeNames=["All"])
    assert moved["MessageId"] == sent["MessageId"]
    assert moved["Body"] == "poison"
    assert moved["MessageAttributes"] == attributes
    assert moved["MD5OfBody"] == sent["MD5OfMessageBody"]
    assert moved["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert moved["Attributes"]["SentTimestamp"] == first["Attributes"]["SentTimestamp"]
    counts = api.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == counts["ApproximateNumberOfMessagesNotVisible"] == "0"


# -- long polls --------------------------------------------------------------------


def test_a_long_poll_wakes_soon_after_a_send_from_another_client(api: Any, sqs_server: Any) -> None:
    url = api.create_queue(QueueName="jobs")["QueueUrl"]
    outcome: dict[str, Any] = {}

    def poll() -> None:
        outcome["messages"] = received(api, url, WaitTimeSeconds=20)  # all of it, if not woken
        outcome["done"] = time.monotonic()

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.5)  # let the poll park
    sent_at = time.monotonic()
    json_client(sqs_server.url).send_message(QueueUrl=url, MessageBody="wake up")
    poller.join(30)
    assert not poller.is_alive()
    assert [m["Body"] for m in outcome["messages"]] == ["wake up"]
    assert outcome["done"] - sent_at < 10  # woken, with room for a loaded machine


def test_a_long_poll_wakes_when_a_visibility_timeout_runs_out(api: Any) -> None:
    url = api.create_queue(QueueName="jobs")["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="work")
    first = receive_one(api, url, VisibilityTimeout=1)
    started = time.monotonic()
    (again,) = received(api, url, WaitTimeSeconds=20)
    waited = time.monotonic() - started
    assert again["MessageId"] == first["MessageId"]
    assert 0.5 <= waited < 10  # woken, not at the end of the wait


def test_a_long_poll_with_nothing_to_receive_returns_empty_after_its_wait(api: Any) -> None:
    url = api.create_queue(QueueName="jobs")["QueueUrl"]
    started = time.monotonic()
    assert received(api, url, WaitTimeSeconds=1) == []
    assert 0.9 <= time.monotonic() - started < 10  # its 1 s, not a longer wait


def test_a_receive_without_wait_time_waits_for_the_queue_default(api: Any) -> None:
    url = api.create_queue(QueueName="jobs", Attributes={"ReceiveMessageWaitTimeSeconds": "1"})["QueueUrl"]
    started = time.monotonic()
    assert received(api, url) == []
    assert 0.9 <= time.monotonic() - started < 10  # its 1 s, not a longer wait
    started = time.monotonic()
    assert received(api, url, WaitTimeSeconds=0) == []  # a short poll when asked for one
    assert time.monotonic() - started < 0.9
