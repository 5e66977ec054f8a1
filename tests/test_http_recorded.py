"""What the live Amazon SQS service answers, recorded from it, answered the same by `smq serve`.

Each case is one observation of the live service (codes, statuses and texts
as it sent them), checked with boto3 over the JSON and the Query protocol
against a real `smq serve` on a real Redis. Where smq differs on purpose
(stale receipts stay fenced), docs/sqs-differences.md says so and
tests/test_http_api.py pins it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError
from test_http_api import failure, md5_of_attributes, raw_json, raw_query, received

from http_support import ACCOUNT

TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def refused(call: Callable[[], Any]) -> tuple[str, int, str]:
    """(Error.Code, HTTP status, message) of a call that must fail."""
    with pytest.raises(ClientError) as caught:
        call()
    code, status = failure(caught)
    return code, status, caught.value.response["Error"]["Message"]


def is_json(api: Any) -> bool:
    return bool(api.meta.service_model.protocol == "json")


@pytest.fixture
def url(api: Any) -> str:
    return str(api.create_queue(QueueName="jobs")["QueueUrl"])


@pytest.fixture
def fifo(api: Any) -> str:
    return str(api.create_queue(QueueName="jobs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"])


def send_fifo(api: Any, url: str, body: str, group: str = "g", dedup: str | None = None) -> dict[str, Any]:
    reply: dict[str, Any] = api.send_message(
        QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=dedup or body
    )
    return reply


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [m["Body"] for m in messages]


# -- the error table --------------------------------------------------------------------------


def test_an_unknown_queue_has_the_protocols_own_text(api: Any, url: str) -> None:
    code, status, message = refused(lambda: api.get_queue_attributes(QueueUrl=url + "-missing"))
    assert (code, status) == ("AWS.SimpleQueueService.NonExistentQueue", 400)
    if is_json(api):
        assert message == "The specified queue does not exist."
    else:
        assert message == "The specified queue does not exist for this wsdl version."


def test_receive_limits_are_refused_in_sqss_words(api: Any, url: str) -> None:
    assert refused(lambda: api.receive_message(QueueUrl=url, MaxNumberOfMessages=11)) == (
        "InvalidParameterValue",
        400,
        "Value 11 for parameter MaxNumberOfMessages is invalid. "
        "Reason: Must be between 1 and 10, if provided.",
    )
    assert refused(lambda: api.receive_message(QueueUrl=url, WaitTimeSeconds=21)) == (
        "InvalidParameterValue",
        400,
        "Value 21 for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.",
    )


def test_a_body_over_the_queues_maximum_names_the_limit(api: Any, url: str) -> None:
    api.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1024"})
    assert refused(lambda: api.send_message(QueueUrl=url, MessageBody="x" * 1025)) == (
        "InvalidParameterValue",
        400,
        "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.",
    )


def test_batch_errors_as_the_live_service_words_them(api: Any, url: str) -> None:
    big = [{"Id": str(i), "MessageBody": "x" * (262144 if i < 3 else 262145)} for i in range(4)]
    assert refused(lambda: api.send_message_batch(QueueUrl=url, Entries=big)) == (
        "AWS.SimpleQueueService.BatchRequestTooLong",
        400,
        "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes.",
    )
    many = [{"Id": str(i), "MessageBody": "x"} for i in range(20)]
    assert refused(lambda: api.send_message_batch(QueueUrl=url, Entries=many)) == (
        "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        400,
        "Maximum number of entries per request are 10. You have sent 20.",
    )
    empty_code = "AWS.SimpleQueueService.EmptyBatchRequest"
    for action, entry in (
        (api.send_message_batch, "SendMessageBatchRequestEntry"),
        (api.delete_message_batch, "DeleteMessageBatchRequestEntry"),
        (api.change_message_visibility_batch, "ChangeMessageVisibilityBatchRequestEntry"),
    ):
        assert refused(lambda action=action: action(QueueUrl=url, Entries=[])) == (
            empty_code,
            400,
            f"There should be at least one {entry} in the request.",
        )
    bad_id = [{"Id": "not valid!", "MessageBody": "x"}]
    assert refused(lambda: api.send_message_batch(QueueUrl=url, Entries=bad_id)) == (
        "AWS.SimpleQueueService.InvalidBatchEntryId",
        400,
        "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
        "It can be at most 80 letters long.",
    )
    assert received(api, url) == []


def test_fifo_send_errors_as_the_live_service_words_them(api: Any, fifo: str) -> None:
    assert refused(lambda: api.send_message(QueueUrl=fifo, MessageBody="x", MessageDeduplicationId="d")) == (
        "MissingParameter",
        400,
        "The request must contain the parameter MessageGroupId.",
    )
    for name, value in (("MessageGroupId", "a b"), ("MessageDeduplicationId", "d d")):
        fields = {"MessageGroupId": "g", "MessageDeduplicationId": "d", name: value}
        assert refused(lambda fields=fields: api.send_message(QueueUrl=fifo, MessageBody="x", **fields)) == (
            "InvalidParameterValue",
            400,
            f"Value {value} for parameter {name} is invalid. Reason: {name} can only include alphanumeric "
            "and punctuation characters. 1 to 128 in length.",
        )
    assert refused(lambda: api.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId="g")) == (
        "InvalidParameterValue",
        400,
        "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided "
        "explicitly",
    )
    assert refused(
        lambda: api.send_message(
            QueueUrl=fifo, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d", DelaySeconds=2
        )
    ) == (
        "InvalidParameterValue",
        400,
        "Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not "
        "valid for this queue type.",
    )


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        (
            {"a": {"DataType": "String", "StringValue": ""}},
            "Message (user) attribute 'a' must contain a non-empty value of type 'String'.",
        ),
        (
            {"a b": {"DataType": "String", "StringValue": "v"}},
            "The message attribute name 'a b' is invalid. Attribute name can contain A-Z, a-z, 0-9, "
            "underscore (_), hyphen (-), and period (.) characters.",
        ),
        (
            {"a": {"DataType": "Text", "StringValue": "v"}},
            "The message attribute 'a' has an invalid message attribute type, the set of supported type "
            "prefixes is Binary, Number, and String.",
        ),
    ],
    ids=["empty-value", "bad-name", "bad-type"],
)
def test_message_attribute_errors_as_the_live_service_words_them(
    api: Any, url: str, attributes: dict[str, Any], message: str
) -> None:
    assert refused(lambda: api.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=attributes)) == (
        "InvalidParameterValue",
        400,
        message,
    )


def test_queue_errors_as_the_live_service_words_them(api: Any, url: str) -> None:
    assert refused(lambda: api.create_queue(QueueName="jobs", Attributes={"DelaySeconds": "5"})) == (
        "QueueAlreadyExists",
        400,
        "A queue already exists with the same name and a different value for attribute DelaySeconds",
    )
    assert refused(lambda: api.create_queue(QueueName="other", Attributes={"Colour": "blue"})) == (
        "InvalidAttributeName",
        400,
        "Unknown Attribute Colour.",
    )
    assert refused(lambda: api.tag_queue(QueueUrl=url, Tags={})) == (
        "MissingParameter",
        400,
        "The request must contain the parameter Tags.",
    )
    assert refused(lambda: api.untag_queue(QueueUrl=url, TagKeys=[])) == (
        "InvalidParameterValue",
        400,
        "Tag keys must be between 1 and 128 characters in length.",
    )


def test_json_errors_carry_the_live_services_types(sqs_server: Any, core: Any) -> None:
    core.create_queue("jobs")
    queue_url = f"{sqs_server.url}/000000000000/jobs"
    status, headers, body = raw_json(
        sqs_server.url,
        "ReceiveMessage",
        json.dumps({"QueueUrl": queue_url, "MaxNumberOfMessages": 11}).encode(),
    )
    assert (status, body["__type"]) == (400, "com.amazonaws.sqs#InvalidParameterValueException")
    assert headers["x-amzn-query-error"] == "InvalidParameterValue;Sender"
    status, headers, body = raw_json(
        sqs_server.url, "SendMessage", json.dumps({"QueueUrl": queue_url}).encode()
    )
    assert (status, body["__type"]) == (400, "com.amazonaws.sqs#MissingRequiredParameterException")
    assert headers["x-amzn-query-error"] == "MissingParameter;Sender"
    assert body["message"] == "The request must contain the parameter MessageBody."
    # Batch errors: the header repeats the Query protocol's long code, __type keeps the shape name.
    status, headers, body = raw_json(
        sqs_server.url, "SendMessageBatch", json.dumps({"QueueUrl": queue_url, "Entries": []}).encode()
    )
    assert (status, body["__type"]) == (400, "com.amazonaws.sqs#EmptyBatchRequest")
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.EmptyBatchRequest;Sender"


# -- receipts -----------------------------------------------------------------------------------


def test_the_newest_receipt_hides_the_message_again_after_its_timeout_ran_out(api: Any, url: str) -> None:
    api.send_message(QueueUrl=url, MessageBody="x")
    (message,) = received(api, url, VisibilityTimeout=1)
    time.sleep(1.3)
    # Ran out, nobody received it since: the change succeeds and hides it again.
    api.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=30)
    assert received(api, url) == []
    attributes = api.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (
        attributes["ApproximateNumberOfMessages"],
        attributes["ApproximateNumberOfMessagesNotVisible"],
    ) == (
        "0",
        "1",
    )
    # ... and the same receipt still acts: it releases and deletes the message.
    api.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    (again,) = received(api, url)
    assert again["MessageId"] == message["MessageId"]
    api.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    assert received(api, url) == []


def test_a_receipt_whose_message_went_back_to_the_queue_hides_it_once(api: Any, url: str) -> None:
    api.send_message(QueueUrl=url, MessageBody="x")
    (message,) = received(api, url, VisibilityTimeout=1)
    time.sleep(1.3)
    assert received(api, url, VisibilityTimeout=0) != []  # back in the queue; a 0 s receive keeps it there
    # The receive above issued a newer receipt: the first is stale now (fenced by smq).
    with pytest.raises(ClientError):
        api.change_message_visibility(
            QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=30
        )
    (newest,) = received(api, url, VisibilityTimeout=1)
    time.sleep(1.3)
    api.change_message_visibility(QueueUrl=url, ReceiptHandle=newest["ReceiptHandle"], VisibilityTimeout=2)
    assert received(api, url) == []
    deadline = time.monotonic() + 10
    while not (got := received(api, url, WaitTimeSeconds=1)) and time.monotonic() < deadline:
        pass
    assert [m["MessageId"] for m in got] == [message["MessageId"]]  # once, not twice


def test_a_fifo_receipt_whose_timeout_ran_out_can_no_longer_delete(api: Any, fifo: str) -> None:
    send_fifo(api, fifo, "a")
    (message,) = received(api, fifo, VisibilityTimeout=1)
    receipt = message["ReceiptHandle"]
    time.sleep(1.3)
    expired = (
        "InvalidParameterValue",
        400,
        f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
    )
    assert refused(lambda: api.delete_message(QueueUrl=fifo, ReceiptHandle=receipt)) == expired
    assert bodies(received(api, fifo)) == ["a"]  # not deleted


def test_a_receipt_that_is_not_one_is_receipt_handle_is_invalid(api: Any, url: str) -> None:
    assert refused(lambda: api.delete_message(QueueUrl=url, ReceiptHandle="garbage")) == (
        "ReceiptHandleIsInvalid",
        400,
        'The input receipt handle "garbage" is not a valid receipt handle.',
    )


# -- FIFO groups and deduplication --------------------------------------------------------------


def test_a_released_message_is_receivable_while_a_later_one_of_its_group_is_in_flight(
    api: Any, fifo: str
) -> None:
    send_fifo(api, fifo, "m1")
    send_fifo(api, fifo, "m2")
    first, second = received(api, fifo, MaxNumberOfMessages=2)
    api.change_message_visibility(QueueUrl=fifo, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    assert bodies(received(api, fifo, MaxNumberOfMessages=10)) == ["m1"]  # m2 is in flight: stop there


def test_extending_the_last_of_a_batch_does_not_hide_the_earlier_ones(api: Any, fifo: str) -> None:
    for body in ("m1", "m2", "m3"):
        send_fifo(api, fifo, body)
    batch = received(api, fifo, MaxNumberOfMessages=3, VisibilityTimeout=1)
    assert bodies(batch) == ["m1", "m2", "m3"]
    api.change_message_visibility(
        QueueUrl=fifo, ReceiptHandle=batch[2]["ReceiptHandle"], VisibilityTimeout=30
    )
    time.sleep(1.3)
    assert bodies(received(api, fifo, MaxNumberOfMessages=10)) == ["m1", "m2"]


def test_a_message_in_flight_still_blocks_the_later_ones_of_its_group(api: Any, fifo: str) -> None:
    send_fifo(api, fifo, "m1")
    assert bodies(received(api, fifo)) == ["m1"]
    send_fifo(api, fifo, "m2")
    send_fifo(api, fifo, "other", group="h")
    assert bodies(received(api, fifo, MaxNumberOfMessages=10)) == ["other"]


def test_purge_clears_the_deduplication_window(api: Any, fifo: str) -> None:
    send_fifo(api, fifo, "a", dedup="same")
    api.purge_queue(QueueUrl=fifo)
    send_fifo(api, fifo, "b", dedup="same")
    assert bodies(received(api, fifo)) == ["b"]


def test_a_switch_of_deduplication_scope_changes_the_attributes_not_deduplication(
    api: Any, fifo: str
) -> None:
    send_fifo(api, fifo, "a", group="g1", dedup="same")
    switch = {"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}
    api.set_queue_attributes(QueueUrl=fifo, Attributes=switch)
    reported = api.get_queue_attributes(QueueUrl=fifo, AttributeNames=["All"])["Attributes"]
    assert {name: reported[name] for name in switch} == switch
    send_fifo(api, fifo, "b", group="g2", dedup="same")  # seen before the switch: dropped
    send_fifo(api, fifo, "c", group="g4", dedup="d2")
    messages = received(api, fifo, MaxNumberOfMessages=10)
    assert bodies(messages) == ["a", "c"]
    for message in messages:
        api.delete_message(QueueUrl=fifo, ReceiptHandle=message["ReceiptHandle"])
    send_fifo(api, fifo, "d", group="g5", dedup="d2")  # first sent after the switch: dropped too
    assert received(api, fifo, MaxNumberOfMessages=10) == []


def test_groups_released_together_go_behind_the_never_received_in_the_order_received(
    api: Any, fifo: str
) -> None:
    for body, group in (("g1-m1", "g1"), ("g2-m1", "g2"), ("g2-m2", "g2"), ("g3-m1", "g3"), ("g1-m2", "g1")):
        send_fifo(api, fifo, body, group=group)
    first = received(api, fifo, MaxNumberOfMessages=3, VisibilityTimeout=0)
    assert bodies(first) == ["g1-m1", "g1-m2", "g2-m1"]
    assert bodies(received(api, fifo, MaxNumberOfMessages=10)) == [
        "g3-m1",
        "g1-m1",
        "g1-m2",
        "g2-m1",
        "g2-m2",
    ]


def test_a_per_message_delay_of_0_is_accepted_on_a_fifo_queue(api: Any, fifo: str) -> None:
    api.send_message(
        QueueUrl=fifo, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d", DelaySeconds=0
    )
    assert bodies(received(api, fifo)) == ["x"]


def test_a_fifo_batch_with_an_entry_missing_its_ids_fails_as_a_whole(api: Any, fifo: str) -> None:
    good = {"Id": "good", "MessageBody": "a", "MessageGroupId": "g", "MessageDeduplicationId": "a"}
    for bad, message in (
        (
            {"Id": "bad", "MessageBody": "b", "MessageDeduplicationId": "b"},
            "The request must contain the parameter MessageGroupId.",
        ),
        (
            {"Id": "bad", "MessageBody": "b", "MessageGroupId": "g"},
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId "
            "provided explicitly",
        ),
    ):
        assert refused(lambda bad=bad: api.send_message_batch(QueueUrl=fifo, Entries=[good, bad])) == (
            "InvalidParameterValue",
            400,
            message,
        )
    if is_json(api):  # __type is InvalidParameterValue's shape, not MissingParameter's
        with pytest.raises(ClientError) as caught:
            api.send_message_batch(QueueUrl=fifo, Entries=[{"Id": "x", "MessageBody": "b"}])
        assert caught.value.response["Error"]["QueryErrorCode"] == "InvalidParameterValueException"
    assert received(api, fifo) == []


def test_sequence_numbers_are_large_decimals_increasing_in_a_group(api: Any, fifo: str) -> None:
    numbers = [int(send_fifo(api, fifo, body)["SequenceNumber"]) for body in ("a", "b", "c")]
    assert all(len(str(n)) == 20 for n in numbers)
    assert numbers == sorted(numbers) and len(set(numbers)) == 3
    assert [
        m["Attributes"]["SequenceNumber"]
        for m in received(api, fifo, MaxNumberOfMessages=3, AttributeNames=["SequenceNumber"])
    ] == [str(n) for n in numbers]


def test_the_fifo_queue_attribute_as_the_live_service_treats_it(api: Any, fifo: str) -> None:
    api.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "true"})  # no-op
    assert refused(lambda: api.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "false"})) == (
        "InvalidAttributeValue",
        400,
        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
    )


@pytest.mark.parametrize("value", ["true", "false"])
def test_the_fifo_queue_attribute_is_unknown_to_a_standard_queue(api: Any, url: str, value: str) -> None:
    assert refused(lambda: api.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": value})) == (
        "InvalidAttributeName",
        400,
        "Unknown Attribute FifoQueue.",
    )
    assert "FifoQueue" not in api.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


@pytest.mark.parametrize(
    ("name", "value", "code", "message"),
    [
        ("FifoQueue", "false", "InvalidAttributeName", "Unknown Attribute FifoQueue."),
        (
            "ContentBasedDeduplication",
            "true",
            "InvalidAttributeName",
            "Unknown Attribute ContentBasedDeduplication.",
        ),
        (
            "DeduplicationScope",
            "queue",
            "InvalidAttributeName",
            "You can specify the DeduplicationScope only when FifoQueue is set to true.",
        ),
        (
            "FifoThroughputLimit",
            "perQueue",
            "InvalidAttributeName",
            "You can specify the FifoThroughputLimit only when FifoQueue is set to true.",
        ),
    ],
)
def test_fifo_only_attributes_on_a_standard_queue_are_refused(
    api: Any, name: str, value: str, code: str, message: str
) -> None:
    assert refused(lambda: api.create_queue(QueueName="plain", Attributes={name: value})) == (
        code,
        400,
        message,
    )


def test_purge_queue_in_progress_names_the_queue(api: Any, url: str) -> None:
    api.purge_queue(QueueUrl=url)
    assert refused(lambda: api.purge_queue(QueueUrl=url)) == (
        "AWS.SimpleQueueService.PurgeQueueInProgress",
        403,
        "Only one PurgeQueue operation on jobs is allowed every 60 seconds.",
    )


# -- requests -----------------------------------------------------------------------------------


def test_message_attribute_names_all_star_and_prefixes_select_as_on_sqs(api: Any, url: str) -> None:
    attributes = {
        "Custom.a": {"DataType": "String", "StringValue": "1"},
        "Custom1": {"DataType": "String", "StringValue": "1"},
        "Hello": {"DataType": "String", "StringValue": "h"},
        "Help.Me": {"DataType": "String", "StringValue": "h"},
        "Other": {"DataType": "Number", "StringValue": "2"},
        "größe": {"DataType": "String", "StringValue": "groß"},  # non-ASCII letters are allowed
    }
    sent = api.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=attributes)
    assert sent["MD5OfMessageAttributes"] == md5_of_attributes(attributes)
    for names, expected in (
        (["All"], set(attributes)),
        ([".*"], set(attributes)),
        (["*"], set(attributes)),
        # The prefix is the text before ".*".
        (["Custom.*"], {"Custom.a", "Custom1"}),
        (["Hel.*"], {"Hello", "Help.Me"}),
        (["Help.*", "Other"], {"Help.Me", "Other"}),
        (["größe"], {"größe"}),
    ):
        (message,) = received(api, url, MessageAttributeNames=names, VisibilityTimeout=0)
        assert set(message.get("MessageAttributes", {})) == expected, names


def test_an_empty_body_is_missing_parameter(api: Any, url: str) -> None:
    assert refused(lambda: api.send_message(QueueUrl=url, MessageBody="")) == (
        "MissingParameter",
        400,
        "The request must contain the parameter MessageBody.",
    )


# -- system attributes --------------------------------------------------------------------------


def test_aws_trace_header_is_kept_with_its_digest(api: Any, url: str) -> None:
    system = {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}
    sent = api.send_message(QueueUrl=url, MessageBody="traced", MessageSystemAttributes=system)
    assert sent["MD5OfMessageSystemAttributes"] == md5_of_attributes(system)
    (message,) = received(api, url, AttributeNames=["AWSTraceHeader"])
    assert message["Attributes"] == {"AWSTraceHeader": TRACE}
    plain = api.send_message(QueueUrl=url, MessageBody="plain")
    assert "MD5OfMessageSystemAttributes" not in plain


def test_the_x_amzn_trace_id_header_becomes_the_aws_trace_header(api: Any, url: str) -> None:
    def add_header(request: Any, **_: Any) -> None:
        request.headers["X-Amzn-Trace-Id"] = TRACE

    api.meta.events.register("before-sign.sqs.SendMessage", add_header)
    try:
        sent = api.send_message(QueueUrl=url, MessageBody="traced")
    finally:
        api.meta.events.unregister("before-sign.sqs.SendMessage", add_header)
    assert sent["MD5OfMessageSystemAttributes"] == md5_of_attributes(
        {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}
    )
    (message,) = received(api, url, AttributeNames=["All"])
    assert message["Attributes"]["AWSTraceHeader"] == TRACE


def test_a_dead_letter_keeps_its_trace_header_and_names_its_source(api: Any, url: str) -> None:
    dead = api.create_queue(QueueName="jobs-dlq")["QueueUrl"]
    dead_arn = api.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    source_arn = api.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": 1})
    api.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
    system = {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}
    api.send_message(QueueUrl=url, MessageBody="doomed", MessageSystemAttributes=system)
    assert bodies(received(api, url, VisibilityTimeout=0)) == ["doomed"]
    assert received(api, url) == []  # second receive: over maxReceiveCount, moved
    deadline = time.monotonic() + 10
    while not (got := received(api, dead, AttributeNames=["All"])) and time.monotonic() < deadline:
        time.sleep(0.1)
    (message,) = got
    assert message["Attributes"]["AWSTraceHeader"] == TRACE
    assert message["Attributes"]["DeadLetterQueueSourceArn"] == source_arn
    api.send_message(QueueUrl=dead, MessageBody="sent here")
    messages = received(api, dead, AttributeNames=["All"], MaxNumberOfMessages=10, VisibilityTimeout=0)
    by_body = {m["Body"]: m["Attributes"] for m in messages}
    assert "DeadLetterQueueSourceArn" not in by_body["sent here"]


# -- smaller ones -------------------------------------------------------------------------------


def test_a_queue_may_be_its_own_dead_letter_target(api: Any, url: str) -> None:
    arn = api.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 1})
    api.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
    shown = api.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert json.loads(shown["RedrivePolicy"])["deadLetterTargetArn"] == arn
    api.send_message(QueueUrl=url, MessageBody="x")
    for count in ("1", "2"):  # nowhere else to go: it stays
        (message,) = received(api, url, VisibilityTimeout=0, AttributeNames=["ApproximateReceiveCount"])
        assert message["Attributes"]["ApproximateReceiveCount"] == count
    # At creation too, naming the queue about to be made.
    own = arn.rsplit(":", 1)[0] + ":self"
    policy = json.dumps({"deadLetterTargetArn": own, "maxReceiveCount": 3})
    api.create_queue(QueueName="self", Attributes={"RedrivePolicy": policy})


def test_delete_message_checks_the_queue_before_the_receipt(api: Any, url: str) -> None:
    code, status, _ = refused(lambda: api.delete_message(QueueUrl=url + "-missing", ReceiptHandle="garbage"))
    assert (code, status) == ("AWS.SimpleQueueService.NonExistentQueue", 400)


def test_distinct_batch_ids_are_named_when_repeated(api: Any, url: str) -> None:
    entries = [{"Id": "id_1", "MessageBody": "a"}, {"Id": "id_2", "MessageBody": "b"}]
    entries.append({"Id": "id_2", "MessageBody": "c"})
    assert refused(lambda: api.send_message_batch(QueueUrl=url, Entries=entries)) == (
        "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        400,
        "Id id_2 repeated.",
    )


def test_an_empty_query_receive_is_an_empty_result_element(sqs_server: Any, core: Any) -> None:
    core.create_queue("jobs")
    status, text = raw_query(
        sqs_server.url, {"Action": "ReceiveMessage", "Version": "2012-11-05"}, path=f"/{ACCOUNT}/jobs"
    )
    assert status == 200
    assert "<ReceiveMessageResult/>" in text


def test_a_queue_name_is_refused_for_60_seconds_after_its_queue_was_deleted(api: Any, url: str) -> None:
    api.delete_queue(QueueUrl=url)
    assert refused(lambda: api.create_queue(QueueName="jobs")) == (
        "AWS.SimpleQueueService.QueueDeletedRecently",
        400,
        "You must wait 60 seconds after deleting a queue before you can create another with the same name.",
    )
    api.create_queue(QueueName="other")  # other names are free


@pytest.mark.parametrize(
    ("attributes", "named"),
    [
        ({"MessageRetentionPeriod": "59"}, "MessageRetentionPeriod"),
        ({"VisibilityTimeout": "43201"}, "VisibilityTimeout"),
        ({"DelaySeconds": "901"}, "DelaySeconds"),
        ({"MaximumMessageSize": "1023"}, "MaximumMessageSize"),
        ({"ReceiveMessageWaitTimeSeconds": "21"}, "ReceiveMessageWaitTimeSeconds"),
    ],
)
def test_attribute_errors_name_sqs_attributes_not_python_fields(
    api: Any, url: str, attributes: dict[str, str], named: str
) -> None:
    for call in (
        lambda: api.set_queue_attributes(QueueUrl=url, Attributes=attributes),
        lambda: api.create_queue(QueueName="other", Attributes=attributes),
    ):
        code, status, message = refused(call)
        assert (code, status) == ("InvalidAttributeValue", 400)
        assert message == f"Invalid value for the parameter {named}.", message


def test_fifo_attribute_errors_name_sqs_attributes_not_python_fields(api: Any, fifo: str) -> None:
    for name in ("DeduplicationScope", "FifoThroughputLimit"):
        assert refused(lambda name=name: api.set_queue_attributes(QueueUrl=fifo, Attributes={name: "x"})) == (
            "InvalidAttributeValue",
            400,
            f"Invalid value for the parameter {name}.",
        )
    wide = {"FifoQueue": "true", "SmqShards": "2", "DeduplicationScope": "queue"}
    code, _, message = refused(lambda: api.create_queue(QueueName="wide.fifo", Attributes=wide))
    assert code == "InvalidAttributeValue" and "DeduplicationScope" in message
    assert "deduplication_scope" not in message and "_" not in message.replace("wide.fifo", "")
