"""The SQS API over HTTP, action by action and error by error.

Real clients against a real `smq serve` on a real Redis: boto3 speaking the
JSON protocol, and boto3 driven by SQS's own Query-protocol model (botocore's
serializer and XML parser). Every action that exists in both protocols runs
in both (the ``api`` fixture). What boto3 refuses to send (a missing required
parameter, malformed JSON, an unknown action) goes out as a raw request.

Expected codes, statuses and behaviours are the SQS API Reference's. botocore
does not check the MD5 digests SQS returns, so these tests compute them from
the algorithm the SQS Developer Guide describes.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import struct
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from botocore.exceptions import ClientError

from http_support import ACCOUNT, REGION

SETTABLE = {
    "VisibilityTimeout": "120",
    "DelaySeconds": "10",
    "MessageRetentionPeriod": "3600",
    "MaximumMessageSize": "4096",
    "ReceiveMessageWaitTimeSeconds": "5",
}
OUT_OF_RANGE = [
    ("VisibilityTimeout", "43201"),
    ("VisibilityTimeout", "-1"),
    ("VisibilityTimeout", "soon"),
    ("DelaySeconds", "901"),
    ("MessageRetentionPeriod", "59"),
    ("MessageRetentionPeriod", "1209601"),
    ("MaximumMessageSize", "1023"),
    ("MaximumMessageSize", "1048577"),
    ("ReceiveMessageWaitTimeSeconds", "21"),
]
SYSTEM_ATTRIBUTES = {
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
}


@pytest.fixture
def url(api: Any) -> str:
    """A fresh queue with the default settings, named ``jobs``."""
    return str(api.create_queue(QueueName="jobs")["QueueUrl"])


def modelled(api: Any, name: str) -> type[Exception]:
    """The client's exception class for an error, where its model has one (else ClientError)."""
    found: type[Exception] = getattr(api.exceptions, name, ClientError)
    return found


def failure(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    """Error.Code and HTTP status of a ClientError."""
    response = caught.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def attributes_of(api: Any, url: str, *names: str) -> dict[str, str]:
    reply = api.get_queue_attributes(QueueUrl=url, AttributeNames=list(names) or ["All"])
    return dict(reply.get("Attributes", {}))


def counts(api: Any, url: str) -> tuple[int, int, int]:
    """(visible, in flight, delayed)."""
    values = attributes_of(api, url)
    return (
        int(values["ApproximateNumberOfMessages"]),
        int(values["ApproximateNumberOfMessagesNotVisible"]),
        int(values["ApproximateNumberOfMessagesDelayed"]),
    )


def md5_of_attributes(attributes: dict[str, dict[str, Any]]) -> str:
    """SQS's digest of message attributes, as the Developer Guide describes it:
    by name in order, each of name, data type and value as a 4-byte big-endian
    length and its bytes, with a transport byte (1 string, 2 binary) before the value."""

    def part(data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + data

    encoded = b""
    for name in sorted(attributes):
        value = attributes[name]
        encoded += part(name.encode()) + part(value["DataType"].encode())
        if "BinaryValue" in value:
            encoded += b"\x02" + part(value["BinaryValue"])
        else:
            encoded += b"\x01" + part(value["StringValue"].encode())
    return hashlib.md5(encoded).hexdigest()


def receive_one(api: Any, url: str, **kwargs: Any) -> dict[str, Any]:
    (message,) = api.receive_message(QueueUrl=url, **kwargs)["Messages"]
    return dict(message)


def received(api: Any, url: str, **kwargs: Any) -> list[dict[str, Any]]:
    return list(api.receive_message(QueueUrl=url, **kwargs).get("Messages", []))


# -- raw requests, for what boto3 will not send ------------------------------------


def raw(server_url: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any, bytes]:
    """POST one request with the standard library: (status, headers, body)."""
    parts = urlsplit(server_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def raw_json(server_url: str, action: str, body: bytes) -> tuple[int, Any, dict[str, Any]]:
    status, headers, data = raw(
        server_url,
        "/",
        body,
        {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"},
    )
    return status, headers, json.loads(data)


def raw_query(server_url: str, form: dict[str, str], path: str = "/") -> tuple[int, str]:
    status, _, data = raw(
        server_url,
        path,
        urlencode(form).encode(),
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    return status, data.decode()


def xml_code(text: str) -> str:
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0]


# -- CreateQueue -------------------------------------------------------------------


def test_create_queue_returns_its_url_and_keeps_the_attributes_given(api: Any, sqs_server: Any) -> None:
    url = api.create_queue(QueueName="jobs", Attributes=SETTABLE)["QueueUrl"]
    assert url == f"{sqs_server.url}/{ACCOUNT}/jobs"
    values = attributes_of(api, url)
    assert {name: values[name] for name in SETTABLE} == SETTABLE
    assert values["QueueArn"] == f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"


def test_create_queue_with_tags_tags_the_queue(api: Any) -> None:
    url = api.create_queue(QueueName="jobs", tags={"team": "search", "env": "test"})["QueueUrl"]
    assert api.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "search", "env": "test"}


def test_create_queue_again_with_the_same_attributes_returns_the_same_url(api: Any) -> None:
    first = api.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "45"})["QueueUrl"]
    again = api.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "45"})["QueueUrl"]
    unspecified = api.create_queue(QueueName="jobs")["QueueUrl"]  # attributes not given are not compared
    assert first == again == unspecified
    assert attributes_of(api, first, "VisibilityTimeout") == {"VisibilityTimeout": "45"}


def test_create_queue_with_different_attributes_is_refused_as_queue_name_exists(api: Any) -> None:
    url = api.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "45"})["QueueUrl"]
    with pytest.raises(api.exceptions.QueueNameExists) as caught:
        api.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "46"})
    assert failure(caught) == ("QueueAlreadyExists", 400)
    assert attributes_of(api, url, "VisibilityTimeout") == {"VisibilityTimeout": "45"}


@pytest.mark.parametrize("name", ["has space", "x" * 81, "dots.in.name", ""])
def test_create_queue_with_an_invalid_name_is_invalid_parameter_value(api: Any, name: str) -> None:
    with pytest.raises(ClientError) as caught:
        api.create_queue(QueueName=name)
    assert failure(caught) == ("InvalidParameterValue", 400)


def test_create_queue_with_an_out_of_range_attribute_is_invalid_attribute_value(api: Any) -> None:
    with pytest.raises(modelled(api, "InvalidAttributeValue")) as caught:
        api.create_queue(QueueName="jobs", Attributes={"DelaySeconds": "901"})
    assert failure(caught) == ("InvalidAttributeValue", 400)
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.get_queue_url(QueueName="jobs")


def test_create_queue_with_an_unknown_attribute_is_invalid_attribute_name(api: Any) -> None:
    with pytest.raises(api.exceptions.InvalidAttributeName) as caught:
        api.create_queue(QueueName="jobs", Attributes={"Colour": "blue"})
    assert failure(caught) == ("InvalidAttributeName", 400)


# -- GetQueueUrl, ListQueues, DeleteQueue, PurgeQueue -------------------------------


def test_get_queue_url_finds_an_existing_queue(api: Any, url: str) -> None:
    assert api.get_queue_url(QueueName="jobs")["QueueUrl"] == url
    assert api.get_queue_url(QueueName="jobs", QueueOwnerAWSAccountId=ACCOUNT)["QueueUrl"] == url


def test_get_queue_url_of_a_missing_queue_is_queue_does_not_exist(api: Any) -> None:
    with pytest.raises(api.exceptions.QueueDoesNotExist) as caught:
        api.get_queue_url(QueueName="nowhere")
    assert failure(caught) == ("AWS.SimpleQueueService.NonExistentQueue", 400)


def test_get_queue_url_in_another_account_is_queue_does_not_exist(api: Any, url: str) -> None:
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.get_queue_url(QueueName="jobs", QueueOwnerAWSAccountId="123456789012")


def test_list_queues_filters_by_prefix(api: Any) -> None:
    urls = {name: api.create_queue(QueueName=name)["QueueUrl"] for name in ("alpha-1", "alpha-2", "beta")}
    assert sorted(api.list_queues()["QueueUrls"]) == sorted(urls.values())
    assert sorted(api.list_queues(QueueNamePrefix="alpha")["QueueUrls"]) == [urls["alpha-1"], urls["alpha-2"]]
    assert api.list_queues(QueueNamePrefix="gamma").get("QueueUrls", []) == []


def test_list_queues_pages_through_every_queue_with_max_results_and_next_token(api: Any) -> None:
    names = [f"queue-{n}" for n in range(7)]
    for name in names:
        api.create_queue(QueueName=name)
    api.create_queue(QueueName="other")
    pages: list[list[str]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"QueueNamePrefix": "queue-", "MaxResults": 3}
        if token:
            kwargs["NextToken"] = token
        reply = api.list_queues(**kwargs)
        pages.append([u.rsplit("/", 1)[1] for u in reply["QueueUrls"]])
        token = reply.get("NextToken")
        if not token:
            break
        assert len(pages) < 5
    assert [len(page) for page in pages] == [3, 3, 1]
    assert sorted(sum(pages, [])) == names


def test_list_queues_gives_no_next_token_without_max_results_or_when_nothing_follows(api: Any) -> None:
    for n in range(3):
        api.create_queue(QueueName=f"queue-{n}")
    assert "NextToken" not in api.list_queues()
    exact = api.list_queues(MaxResults=3)
    assert len(exact["QueueUrls"]) == 3 and "NextToken" not in exact


def test_list_queues_with_a_next_token_it_did_not_issue_is_invalid_parameter_value(api: Any) -> None:
    with pytest.raises(ClientError) as caught:
        api.list_queues(MaxResults=1, NextToken="@@ not a token @@")
    assert failure(caught) == ("InvalidParameterValue", 400)


@pytest.mark.parametrize("max_results", [0, 1001])
def test_list_queues_max_results_outside_1_to_1000_is_invalid_parameter_value(
    api: Any, max_results: int
) -> None:
    with pytest.raises(ClientError) as caught:
        api.list_queues(MaxResults=max_results)
    assert failure(caught) == ("InvalidParameterValue", 400)


def test_delete_queue_removes_it_and_a_second_delete_is_queue_does_not_exist(api: Any, url: str) -> None:
    api.delete_queue(QueueUrl=url)
    assert api.list_queues().get("QueueUrls", []) == []
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.get_queue_url(QueueName="jobs")
    with pytest.raises(api.exceptions.QueueDoesNotExist) as caught:
        api.delete_queue(QueueUrl=url)
    assert failure(caught) == ("AWS.SimpleQueueService.NonExistentQueue", 400)


def test_purge_queue_removes_visible_in_flight_and_delayed_messages(api: Any, url: str) -> None:
    for body in ("a", "b", "c"):
        api.send_message(QueueUrl=url, MessageBody=body)
    api.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
    receive_one(api, url)
    assert counts(api, url) == (2, 1, 1)
    api.purge_queue(QueueUrl=url)
    assert counts(api, url) == (0, 0, 0)
    assert received(api, url) == []


def test_purge_queue_of_a_missing_queue_is_queue_does_not_exist(api: Any, sqs_server: Any) -> None:
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.purge_queue(QueueUrl=f"{sqs_server.url}/{ACCOUNT}/nowhere")


# -- GetQueueAttributes, SetQueueAttributes ---------------------------------------


def test_get_queue_attributes_all_gives_settings_counts_times_and_arn(api: Any, url: str) -> None:
    before = int(time.time())
    api.send_message(QueueUrl=url, MessageBody="visible")
    api.send_message(QueueUrl=url, MessageBody="in flight")
    api.send_message(QueueUrl=url, MessageBody="delayed", DelaySeconds=60)
    receive_one(api, url)
    values = attributes_of(api, url)
    assert values == {
        "ApproximateNumberOfMessages": "1",
        "ApproximateNumberOfMessagesNotVisible": "1",
        "ApproximateNumberOfMessagesDelayed": "1",
        "CreatedTimestamp": values["CreatedTimestamp"],
        "LastModifiedTimestamp": values["LastModifiedTimestamp"],
        "QueueArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs",
        "VisibilityTimeout": "30",
        "DelaySeconds": "0",
        "MessageRetentionPeriod": "345600",
        "MaximumMessageSize": "1048576",
        "ReceiveMessageWaitTimeSeconds": "0",
        "SqsManagedSseEnabled": "false",  # SQS says true; smq encrypts nothing (sqs-differences)
    }
    # Seconds since the epoch, by the Redis clock on this machine.
    assert before - 60 <= int(values["CreatedTimestamp"]) <= time.time() + 60
    assert int(values["LastModifiedTimestamp"]) == int(values["CreatedTimestamp"])


def test_get_queue_attributes_gives_only_the_names_asked_for(api: Any, url: str) -> None:
    values = attributes_of(api, url, "VisibilityTimeout", "QueueArn")
    assert values == {"VisibilityTimeout": "30", "QueueArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"}
    assert "Attributes" not in api.get_queue_attributes(QueueUrl=url)  # no names, no attributes


def test_get_queue_attributes_with_an_unknown_name_is_invalid_attribute_name(api: Any, url: str) -> None:
    with pytest.raises(api.exceptions.InvalidAttributeName) as caught:
        api.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "Colour"])
    assert failure(caught) == ("InvalidAttributeName", 400)


def test_get_queue_attributes_of_a_missing_queue_is_queue_does_not_exist(api: Any, sqs_server: Any) -> None:
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.get_queue_attributes(QueueUrl=f"{sqs_server.url}/{ACCOUNT}/nowhere", AttributeNames=["All"])


@pytest.mark.parametrize("name", sorted(SETTABLE))
def test_set_queue_attributes_changes_each_settable_attribute(api: Any, url: str, name: str) -> None:
    api.set_queue_attributes(QueueUrl=url, Attributes={name: SETTABLE[name]})
    assert attributes_of(api, url, name) == {name: SETTABLE[name]}


@pytest.mark.parametrize(("name", "value"), OUT_OF_RANGE)
def test_set_queue_attributes_out_of_range_is_invalid_attribute_value(
    api: Any, url: str, name: str, value: str
) -> None:
    before = attributes_of(api, url, name)
    with pytest.raises(modelled(api, "InvalidAttributeValue")) as caught:
        api.set_queue_attributes(QueueUrl=url, Attributes={name: value})
    assert failure(caught) == ("InvalidAttributeValue", 400)
    assert attributes_of(api, url, name) == before


def test_set_queue_attributes_sets_and_clears_a_redrive_policy_by_arn(api: Any, url: str) -> None:
    dead = api.create_queue(QueueName="jobs-dlq")["QueueUrl"]
    arn = attributes_of(api, dead, "QueueArn")["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "3"})
    api.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
    stored = json.loads(attributes_of(api, url, "RedrivePolicy")["RedrivePolicy"])
    assert stored["deadLetterTargetArn"] == arn
    assert int(stored["maxReceiveCount"]) == 3
    api.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    assert "RedrivePolicy" not in attributes_of(api, url)


def test_create_queue_takes_a_redrive_policy_by_arn(api: Any) -> None:
    api.create_queue(QueueName="jobs-dlq")
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs-dlq"
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 5})
    url = api.create_queue(QueueName="jobs", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    stored = json.loads(attributes_of(api, url, "RedrivePolicy")["RedrivePolicy"])
    assert (stored["deadLetterTargetArn"], int(stored["maxReceiveCount"])) == (arn, 5)


def test_a_redrive_policy_to_a_missing_queue_is_invalid_parameter_value(api: Any, url: str) -> None:
    policy = json.dumps(
        {"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:nowhere", "maxReceiveCount": 3}
    )
    with pytest.raises(ClientError) as caught:
        api.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
    assert failure(caught) == ("InvalidParameterValue", 400)
    with pytest.raises(ClientError) as caught:
        api.create_queue(QueueName="other", Attributes={"RedrivePolicy": policy})
    assert failure(caught) == ("InvalidParameterValue", 400)
    assert "RedrivePolicy" not in attributes_of(api, url)


@pytest.mark.parametrize(
    "policy",
    [
        "not json",
        json.dumps({"maxReceiveCount": 3}),
        json.dumps({"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs-dlq", "maxReceiveCount": 0}),
        json.dumps(
            {"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:999999999999:jobs-dlq", "maxReceiveCount": 3}
        ),
    ],
    ids=["not-json", "no-target", "count-0", "other-account"],
)
def test_a_malformed_redrive_policy_is_invalid_parameter_value(api: Any, url: str, policy: str) -> None:
    api.create_queue(QueueName="jobs-dlq")
    with pytest.raises(ClientError) as caught:
        api.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
    assert failure(caught) == ("InvalidParameterValue", 400)


@pytest.mark.parametrize("name", ["Colour", "QueueArn", "ApproximateNumberOfMessages"])
def test_set_queue_attributes_with_an_unknown_or_read_only_name_is_invalid_attribute_name(
    api: Any, url: str, name: str
) -> None:
    with pytest.raises(api.exceptions.InvalidAttributeName) as caught:
        api.set_queue_attributes(QueueUrl=url, Attributes={name: "1"})
    assert failure(caught) == ("InvalidAttributeName", 400)


def test_policy_and_encryption_attributes_are_accepted_kept_and_returned(api: Any) -> None:
    policy = json.dumps({"Version": "2012-10-17", "Statement": []})
    url = api.create_queue(QueueName="jobs", Attributes={"Policy": policy})["QueueUrl"]
    api.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": "alias/aws/sqs"})
    api.set_queue_attributes(QueueUrl=url, Attributes={"SqsManagedSseEnabled": "false"})
    expected = {"Policy": policy, "KmsMasterKeyId": "alias/aws/sqs", "SqsManagedSseEnabled": "false"}
    assert attributes_of(api, url, *expected) == expected  # each set kept the others
    everything = attributes_of(api, url)
    assert {name: everything[name] for name in expected} == expected
    # Creating again compares only what is given.
    assert api.create_queue(QueueName="jobs", Attributes={"Policy": policy})["QueueUrl"] == url
    with pytest.raises(api.exceptions.QueueNameExists):
        api.create_queue(QueueName="jobs", Attributes={"KmsMasterKeyId": "alias/other"})
    api.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})  # an empty value unsets it
    assert "Policy" not in attributes_of(api, url)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Policy", "not json"),
        ("SqsManagedSseEnabled", "maybe"),
        ("KmsDataKeyReusePeriodSeconds", "59"),
        ("KmsDataKeyReusePeriodSeconds", "86401"),
        ("RedriveAllowPolicy", json.dumps({"redrivePermission": "sometimes"})),
    ],
)
def test_stored_attributes_outside_what_sqs_accepts_are_invalid_attribute_value(
    api: Any, url: str, name: str, value: str
) -> None:
    before = attributes_of(api, url)
    with pytest.raises(modelled(api, "InvalidAttributeValue")) as caught:
        api.set_queue_attributes(QueueUrl=url, Attributes={name: value})
    assert failure(caught) == ("InvalidAttributeValue", 400)
    assert attributes_of(api, url) == before


# -- SendMessage -------------------------------------------------------------------

# The three attributes and their digest are a published example of SQS's algorithm.
EXAMPLE_ATTRIBUTES = {
    "attribName1": {"DataType": "String", "StringValue": "attribValue 1"},
    "customNumberTypeAttrib": {
        "DataType": "Number.float",
        "StringValue": "4563442423554324324264524243.32543234",
    },
    "binaryAttribute": {"DataType": "Binary", "BinaryValue": b"Hello binary world!"},
}
EXAMPLE_DIGEST = "c932db14a896c663f83c260297d594ff"
TYPED_ATTRIBUTES = {
    "text": {"DataType": "String", "StringValue": "héllo wörld"},
    "label": {"DataType": "String.label", "StringValue": "urgent"},
    "count": {"DataType": "Number", "StringValue": "-12.5"},
    "retries": {"DataType": "Number.int", "StringValue": "3"},
    "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
    "icon": {"DataType": "Binary.gif", "BinaryValue": b"GIF89a\x00\x01"},
}


def test_send_message_returns_the_md5_digests_of_body_and_attributes(api: Any, url: str) -> None:
    body = "résumé ✓ 𝄞"
    reply = api.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=EXAMPLE_ATTRIBUTES)
    assert reply["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest()
    assert reply["MD5OfMessageAttributes"] == EXAMPLE_DIGEST == md5_of_attributes(EXAMPLE_ATTRIBUTES)
    plain = api.send_message(QueueUrl=url, MessageBody="plain")
    assert "MD5OfMessageAttributes" not in plain


def test_a_received_message_carries_the_body_and_typed_attributes_sent(api: Any, url: str) -> None:
    body = "line one\nline two\r\n\ttabbed <xml> & ünïcode 𝄞"
    sent = api.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=TYPED_ATTRIBUTES)
    message = receive_one(api, url, MessageAttributeNames=["All"])
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == body
    assert message["MD5OfBody"] == hashlib.md5(body.encode()).hexdigest()
    assert message["MessageAttributes"] == TYPED_ATTRIBUTES
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert message["MD5OfMessageAttributes"] == md5_of_attributes(TYPED_ATTRIBUTES)


def test_send_message_with_delay_seconds_hides_it_until_the_delay_ends(api: Any, url: str) -> None:
    api.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=1)
    assert received(api, url) == []
    assert counts(api, url) == (0, 0, 1)
    (message,) = received(api, url, WaitTimeSeconds=5)
    assert message["Body"] == "later"


def test_send_message_over_the_maximum_message_size_is_invalid_parameter_value(api: Any) -> None:
    url = api.create_queue(QueueName="jobs", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    api.send_message(QueueUrl=url, MessageBody="x" * 1024)
    with pytest.raises(ClientError) as caught:
        api.send_message(QueueUrl=url, MessageBody="x" * 1025)
    assert failure(caught) == ("InvalidParameterValue", 400)
    assert counts(api, url) == (1, 0, 0)


@pytest.mark.parametrize("body", ["nul \x00 here", "bell \x07", "not a character \ufffe"])
def test_send_message_with_characters_sqs_refuses_is_invalid_message_contents(
    api: Any, url: str, body: str
) -> None:
    with pytest.raises(api.exceptions.InvalidMessageContents) as caught:
        api.send_message(QueueUrl=url, MessageBody=body)
    assert failure(caught) == ("InvalidMessageContents", 400)


def test_an_empty_body_is_refused(api: Any, url: str) -> None:
    with pytest.raises(ClientError) as caught:
        api.send_message(QueueUrl=url, MessageBody="")
    code, status = failure(caught)
    assert status == 400 and code in ("InvalidMessageContents", "MissingParameter", "InvalidParameterValue")


def test_send_message_with_delay_seconds_past_900_is_invalid_parameter_value(api: Any, url: str) -> None:
    with pytest.raises(ClientError) as caught:
        api.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901)
    assert failure(caught) == ("InvalidParameterValue", 400)


def test_message_deduplication_id_on_a_standard_queue_is_refused(api: Any, url: str) -> None:
    with pytest.raises(ClientError) as caught:
        api.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="once")
    assert failure(caught) == ("InvalidParameterValue", 400)
    assert counts(api, url) == (0, 0, 0)


@pytest.mark.parametrize(
    "attributes",
    [
        {"AWS.reserved": {"DataType": "String", "StringValue": "x"}},
        {"n": {"DataType": "Number", "StringValue": "not a number"}},
        {"t": {"DataType": "Colour", "StringValue": "red"}},
        {"e": {"DataType": "String", "StringValue": ""}},
        {f"a{n}": {"DataType": "String", "StringValue": "x"} for n in range(11)},
    ],
    ids=["reserved-name", "bad-number", "bad-type", "empty-value", "eleven"],
)
def test_invalid_message_attributes_are_invalid_parameter_value(
    api: Any, url: str, attributes: dict[str, Any]
) -> None:
    with pytest.raises(ClientError) as caught:
        api.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=attributes)
    assert failure(caught) == ("InvalidParameterValue", 400)


def test_send_message_to_a_missing_queue_is_queue_does_not_exist(api: Any, sqs_server: Any) -> None:
    with pytest.raises(api.exceptions.QueueDoesNotExist) as caught:
        api.send_message(QueueUrl=f"{sqs_server.url}/{ACCOUNT}/nowhere", MessageBody="x")
    assert failure(caught) == ("AWS.SimpleQueueService.NonExistentQueue", 400)


def test_a_queue_url_of_another_account_is_queue_does_not_exist(api: Any, url: str, sqs_server: Any) -> None:
    elsewhere = f"{sqs_server.url}/123456789012/jobs"
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.send_message(QueueUrl=elsewhere, MessageBody="x")
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.get_queue_attributes(QueueUrl=elsewhere, AttributeNames=["All"])
    assert counts(api, url) == (0, 0, 0)


# -- SendMessageBatch --------------------------------------------------------------


def test_send_message_batch_fails_bad_entries_alone_and_sends_the_others(api: Any) -> None:
    url = api.create_queue(QueueName="jobs", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    reply = api.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "first", "MessageBody": "one", "MessageAttributes": EXAMPLE_ATTRIBUTES},
            {"Id": "bad", "MessageBody": "nul \x00"},
            {"Id": "dedup", "MessageBody": "x", "MessageDeduplicationId": "d"},
            {"Id": "late", "MessageBody": "x", "DelaySeconds": 901},
            {"Id": "long", "MessageBody": "x" * 1025},
            {"Id": "last", "MessageBody": "two", "DelaySeconds": 0},
        ],
    )
    assert reply["ResponseMetadata"]["HTTPStatusCode"] == 200
    successful = {entry["Id"]: entry for entry in reply["Successful"]}
    assert sorted(successful) == ["first", "last"]
    assert successful["first"]["MD5OfMessageBody"] == hashlib.md5(b"one").hexdigest()
    assert successful["first"]["MD5OfMessageAttributes"] == EXAMPLE_DIGEST
    assert successful["last"]["MD5OfMessageBody"] == hashlib.md5(b"two").hexdigest()
    failed = {entry["Id"]: entry for entry in reply["Failed"]}
    assert {entry_id: (entry["Code"], entry["SenderFault"]) for entry_id, entry in failed.items()} == {
        "bad": ("InvalidMessageContents", True),
        "dedup": ("InvalidParameterValue", True),
        "late": ("InvalidParameterValue", True),
        "long": ("InvalidParameterValue", True),
    }
    bodies = sorted(m["Body"] for m in received(api, url, MaxNumberOfMessages=10))
    assert bodies == ["one", "two"]


def _entries(count: int, size: int = 1) -> list[dict[str, str]]:
    return [{"Id": f"e{n}", "MessageBody": "x" * size} for n in range(count)]


# Error.Code as the live service sends it on both protocols: x-amzn-query-error
# repeats the Query protocol's long code over JSON.
def batch_code(api: Any, code: str) -> str:
    return f"AWS.SimpleQueueService.{code}"


BATCH_ERRORS = {
    "EmptyBatchRequest": [],
    "TooManyEntriesInBatchRequest": _entries(11),
    "BatchEntryIdsNotDistinct": [{"Id": "same", "MessageBody": "a"}, {"Id": "same", "MessageBody": "b"}],
    "InvalidBatchEntryId": [{"Id": "not valid!", "MessageBody": "a"}],
    "BatchRequestTooLong": _entries(2, 600 * 1024),
}


@pytest.mark.parametrize("code", sorted(BATCH_ERRORS))
def test_a_malformed_send_batch_is_a_request_error_and_sends_nothing(api: Any, url: str, code: str) -> None:
    with pytest.raises(getattr(api.exceptions, code)) as caught:
        api.send_message_batch(QueueUrl=url, Entries=BATCH_ERRORS[code])
    assert failure(caught) == (batch_code(api, code), 400)
    assert counts(api, url) == (0, 0, 0)


@pytest.mark.parametrize("action", ["delete_message_batch", "change_message_visibility_batch"])
def test_malformed_delete_and_change_batches_are_request_errors(api: Any, url: str, action: str) -> None:
    def entry(entry_id: str) -> dict[str, Any]:
        fields: dict[str, Any] = {"Id": entry_id, "ReceiptHandle": "jobs:nothing:aaaaaaaaaaaaaaaa"}
        if action == "change_message_visibility_batch":
            fields["VisibilityTimeout"] = 5
        return fields

    cases = {
        "EmptyBatchRequest": [],
        "TooManyEntriesInBatchRequest": [entry(f"e{n}") for n in range(11)],
        "BatchEntryIdsNotDistinct": [entry("same"), entry("same")],
        "InvalidBatchEntryId": [entry("not valid!")],
    }
    for code, entries in cases.items():
        with pytest.raises(getattr(api.exceptions, code)) as caught:
            getattr(api, action)(QueueUrl=url, Entries=entries)
        assert failure(caught) == (batch_code(api, code), 400)


# -- ReceiveMessage ----------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 11])
def test_max_number_of_messages_outside_1_to_10_is_invalid_parameter_value(
    api: Any, url: str, count: int
) -> None:
    api.send_message(QueueUrl=url, MessageBody="x")
    with pytest.raises(ClientError) as caught:
        api.receive_message(QueueUrl=url, MaxNumberOfMessages=count)
    assert failure(caught) == ("InvalidParameterValue", 400)
    assert counts(api, url) == (1, 0, 0)


def test_receive_returns_up_to_max_number_of_messages(api: Any, url: str) -> None:
    api.send_message_batch(QueueUrl=url, Entries=_entries(10))
    api.send_message(QueueUrl=url, MessageBody="eleventh")
    assert len(received(api, url, MaxNumberOfMessages=10)) == 10
    assert len(received(api, url, MaxNumberOfMessages=10)) == 1


def test_a_receive_visibility_timeout_overrides_the_queue_default_for_that_receive(
    api: Any, url: str
) -> None:
    api.send_message(QueueUrl=url, MessageBody="x")
    first = receive_one(api, url, VisibilityTimeout=0)  # visible again at once
    again = receive_one(api, url, AttributeNames=["ApproximateReceiveCount"])  # the queue's 30 s
    assert again["MessageId"] == first["MessageId"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert received(api, url) == []


@pytest.mark.parametrize(("name", "value"), [("VisibilityTimeout", 43201), ("WaitTimeSeconds", 21)])
def test_receive_timeouts_out_of_range_are_invalid_parameter_value(
    api: Any, url: str, name: str, value: int
) -> None:
    with pytest.raises(ClientError) as caught:
        api.receive_message(QueueUrl=url, **{name: value})
    assert failure(caught) == ("InvalidParameterValue", 400)


def test_system_attribute_names_all_or_one_select_the_attributes_returned(api: Any, url: str) -> None:
    before_ms = time.time() * 1000
    api.send_message(QueueUrl=url, MessageBody="x")
    message = receive_one(api, url, AttributeNames=["All"], VisibilityTimeout=0)
    values = message["Attributes"]
    assert set(values) == SYSTEM_ATTRIBUTES
    assert values["SenderId"] == ACCOUNT  # no authentication: the account
    assert values["ApproximateReceiveCount"] == "1"
    assert (
        before_ms - 60_000 <= int(values["SentTimestamp"]) <= int(values["ApproximateFirstReceiveTimestamp"])
    )
    single = receive_one(api, url, AttributeNames=["ApproximateReceiveCount"], VisibilityTimeout=0)
    assert single["Attributes"] == {"ApproximateReceiveCount": "2"}
    assert "Attributes" not in receive_one(api, url, VisibilityTimeout=0)


def test_message_system_attribute_names_select_like_attribute_names(sqs: Any) -> None:
    # MessageSystemAttributeNames is in the JSON model only (SQS added it after the move to JSON).
    url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    every = receive_one(sqs, url, MessageSystemAttributeNames=["All"], VisibilityTimeout=0)
    assert set(every["Attributes"]) == SYSTEM_ATTRIBUTES
    one = receive_one(sqs, url, MessageSystemAttributeNames=["SentTimestamp"], VisibilityTimeout=0)
    assert set(one["Attributes"]) == {"SentTimestamp"}


def test_an_unknown_system_attribute_name_is_invalid_attribute_name(api: Any, url: str) -> None:
    with pytest.raises(api.exceptions.InvalidAttributeName) as caught:
        api.receive_message(QueueUrl=url, AttributeNames=["Colour"])
    assert failure(caught) == ("InvalidAttributeName", 400)


def test_message_attribute_names_select_all_by_prefix_or_exactly_with_the_digest_of_that_subset(
    api: Any, url: str
) -> None:
    attributes = {
        "color": {"DataType": "String", "StringValue": "red"},
        "color.shade": {"DataType": "String", "StringValue": "dark"},
        "size": {"DataType": "Number", "StringValue": "10"},
        "sig": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }
    api.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=attributes)
    cases = {
        ("All",): set(attributes),
        (".*",): set(attributes),
        ("color.*",): {"color", "color.shade"},  # the prefix is the text before ".*"
        ("color.s.*",): {"color.shade"},
        ("size",): {"size"},
        ("size", "sig"): {"size", "sig"},
        ("siz",): set(),
        (): set(),
    }
    for wanted, names in cases.items():
        message = receive_one(api, url, MessageAttributeNames=list(wanted), VisibilityTimeout=0)
        subset = {name: attributes[name] for name in names}
        assert message.get("MessageAttributes", {}) == subset, wanted
        if subset:
            assert message["MD5OfMessageAttributes"] == md5_of_attributes(subset), wanted
        else:
            assert "MD5OfMessageAttributes" not in message, wanted


def test_receive_from_a_missing_queue_is_queue_does_not_exist(api: Any, sqs_server: Any) -> None:
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.receive_message(QueueUrl=f"{sqs_server.url}/{ACCOUNT}/nowhere")


# -- DeleteMessage, DeleteMessageBatch ---------------------------------------------


def test_delete_message_deletes_it(api: Any, url: str) -> None:
    api.send_message(QueueUrl=url, MessageBody="x")
    message = receive_one(api, url)
    api.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert counts(api, url) == (0, 0, 0)


@pytest.mark.parametrize(
    "receipt", ["garbage", "other:0f8fad5b-d9cb-469f-a165-70867728950e:aaaaaaaaaaaaaaaa"]
)
def test_delete_message_with_a_receipt_not_of_this_queue_is_receipt_handle_is_invalid(
    api: Any, url: str, receipt: str
) -> None:
    with pytest.raises(api.exceptions.ReceiptHandleIsInvalid) as caught:
        api.delete_message(QueueUrl=url, ReceiptHandle=receipt)
    assert failure(caught) == ("ReceiptHandleIsInvalid", 400)


def test_delete_message_with_a_stale_receipt_succeeds_and_deletes_nothing(api: Any, url: str) -> None:
    api.send_message(QueueUrl=url, MessageBody="x")
    old = receive_one(api, url, VisibilityTimeout=0)
    new = receive_one(api, url)
    api.delete_message(QueueUrl=url, ReceiptHandle=old["ReceiptHandle"])
    assert counts(api, url) == (0, 1, 0)
    api.delete_message(QueueUrl=url, ReceiptHandle=new["ReceiptHandle"])
    assert counts(api, url) == (0, 0, 0)


def test_delete_message_batch_fails_a_garbage_receipt_alone_and_takes_a_stale_one_as_done(
    api: Any, url: str
) -> None:
    api.send_message_batch(QueueUrl=url, Entries=_entries(3))
    first, second, third = received(api, url, MaxNumberOfMessages=3)
    api.change_message_visibility(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"], VisibilityTimeout=0)
    receive_one(api, url)  # the third again: its first receipt is stale
    reply = api.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "ReceiptHandle": first["ReceiptHandle"]},
            {"Id": "b", "ReceiptHandle": "garbage"},
            {"Id": "c", "ReceiptHandle": second["ReceiptHandle"]},
            {"Id": "stale", "ReceiptHandle": third["ReceiptHandle"]},
        ],
    )
    assert sorted(entry["Id"] for entry in reply["Successful"]) == ["a", "c", "stale"]
    (bad,) = reply["Failed"]
    assert (bad["Id"], bad["Code"], bad["SenderFault"]) == ("b", "ReceiptHandleIsInvalid", True)
    assert counts(api, url) == (0, 1, 0)  # the stale receipt deleted nothing


# -- ChangeMessageVisibility, ChangeMessageVisibilityBatch --------------------------


def test_change_message_visibility_of_a_deleted_message_is_invalid_parameter_value(
    api: Any, url: str
) -> None:
    api.send_message(QueueUrl=url, MessageBody="x")
    receipt = receive_one(api, url)["ReceiptHandle"]
    api.delete_message(QueueUrl=url, ReceiptHandle=receipt)
    with pytest.raises(ClientError) as caught:
        api.change_message_visibility(QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=30)
    assert failure(caught) == ("InvalidParameterValue", 400)
    assert caught.value.response["Error"]["Message"] == (
        f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: Message does not exist or is "
        "not available for visibility timeout change."
    )


def test_change_message_visibility_with_a_garbage_receipt_is_receipt_handle_is_invalid(
    api: Any, url: str
) -> None:
    with pytest.raises(api.exceptions.ReceiptHandleIsInvalid) as caught:
        api.change_message_visibility(QueueUrl=url, ReceiptHandle="garbage", VisibilityTimeout=5)
    assert failure(caught) == ("ReceiptHandleIsInvalid", 400)


def test_change_message_visibility_past_43200_is_invalid_parameter_value(api: Any, url: str) -> None:
    api.send_message(QueueUrl=url, MessageBody="x")
    message = receive_one(api, url)
    with pytest.raises(ClientError) as caught:
        api.change_message_visibility(
            QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=43201
        )
    assert failure(caught) == ("InvalidParameterValue", 400)


def test_change_message_visibility_batch_fails_bad_entries_alone(api: Any, url: str) -> None:
    api.send_message_batch(QueueUrl=url, Entries=_entries(3))
    api.send_message(QueueUrl=url, MessageBody="fourth")
    first, second, third, fourth = received(api, url, MaxNumberOfMessages=4)
    api.change_message_visibility(QueueUrl=url, ReceiptHandle=fourth["ReceiptHandle"], VisibilityTimeout=0)
    again = receive_one(api, url)
    assert again["MessageId"] == fourth["MessageId"]  # received anew: the first receipt is stale
    api.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])
    reply = api.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "release", "ReceiptHandle": first["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "garbage", "ReceiptHandle": "garbage", "VisibilityTimeout": 0},
            {"Id": "too-long", "ReceiptHandle": second["ReceiptHandle"], "VisibilityTimeout": 43201},
            {"Id": "deleted", "ReceiptHandle": third["ReceiptHandle"], "VisibilityTimeout": 10},
            {"Id": "stale", "ReceiptHandle": fourth["ReceiptHandle"], "VisibilityTimeout": 0},
        ],
    )
    assert [entry["Id"] for entry in reply["Successful"]] == ["release"]
    failed = {entry["Id"]: (entry["Code"], entry["SenderFault"]) for entry in reply["Failed"]}
    assert failed == {
        "garbage": ("ReceiptHandleIsInvalid", True),
        "too-long": ("InvalidParameterValue", True),
        "deleted": ("InvalidParameterValue", True),
        "stale": ("InvalidParameterValue", True),
    }
    visible = {m["MessageId"] for m in received(api, url, MaxNumberOfMessages=10)}
    assert visible == {first["MessageId"]}


# -- dead-letter sources, tags, permissions ----------------------------------------


def test_list_dead_letter_source_queues_names_the_queues_that_redrive_to_it(api: Any) -> None:
    dead = api.create_queue(QueueName="jobs-dlq")["QueueUrl"]
    policy = json.dumps(
        {"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs-dlq", "maxReceiveCount": 3}
    )
    sources = sorted(
        api.create_queue(QueueName=name, Attributes={"RedrivePolicy": policy})["QueueUrl"]
        for name in ("source-a", "source-b", "source-c")
    )
    api.create_queue(QueueName="unrelated")
    everything = api.list_dead_letter_source_queues(QueueUrl=dead)
    assert sorted(everything["queueUrls"]) == sources and "NextToken" not in everything
    first = api.list_dead_letter_source_queues(QueueUrl=dead, MaxResults=2)
    assert len(first["queueUrls"]) == 2 and first["NextToken"]
    rest = api.list_dead_letter_source_queues(QueueUrl=dead, MaxResults=2, NextToken=first["NextToken"])
    assert "NextToken" not in rest
    assert sorted(first["queueUrls"] + rest["queueUrls"]) == sources


def test_a_queue_leaves_the_dead_letter_sources_when_its_policy_is_cleared_or_it_is_deleted(
    api: Any,
) -> None:
    dead = api.create_queue(QueueName="jobs-dlq")["QueueUrl"]
    target = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs-dlq"
    policy = json.dumps({"deadLetterTargetArn": target, "maxReceiveCount": 3})
    cleared = api.create_queue(QueueName="cleared", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    deleted = api.create_queue(QueueName="deleted", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    kept = api.create_queue(QueueName="kept", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    api.set_queue_attributes(QueueUrl=cleared, Attributes={"RedrivePolicy": ""})
    api.delete_queue(QueueUrl=deleted)
    assert api.list_dead_letter_source_queues(QueueUrl=dead).get("queueUrls", []) == [kept]


def test_list_dead_letter_source_queues_of_a_missing_queue_is_queue_does_not_exist(
    api: Any, sqs_server: Any
) -> None:
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.list_dead_letter_source_queues(QueueUrl=f"{sqs_server.url}/{ACCOUNT}/nowhere")


def test_tag_queue_untag_queue_and_list_queue_tags(api: Any, url: str) -> None:
    assert api.list_queue_tags(QueueUrl=url).get("Tags", {}) == {}
    api.tag_queue(QueueUrl=url, Tags={"team": "search", "env": "test"})
    api.tag_queue(QueueUrl=url, Tags={"env": "prod"})  # a tag of the same key is replaced
    assert api.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "search", "env": "prod"}
    api.untag_queue(QueueUrl=url, TagKeys=["team", "absent"])
    assert api.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "prod"}
    # More than 50, given at once or with the tags the queue has: nothing changes.
    for count in (51, 50):
        with pytest.raises(ClientError) as caught:
            api.tag_queue(QueueUrl=url, Tags={f"k{n}": "v" for n in range(count)})
        assert failure(caught) == ("InvalidParameterValue", 400)
        assert caught.value.response["Error"]["Message"] == "Too many tags added for queue jobs."
    assert api.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "prod"}


def test_tags_of_a_missing_queue_are_queue_does_not_exist(api: Any, sqs_server: Any) -> None:
    missing = f"{sqs_server.url}/{ACCOUNT}/nowhere"
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.tag_queue(QueueUrl=missing, Tags={"a": "b"})
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.list_queue_tags(QueueUrl=missing)


def test_an_unknown_move_task_is_resource_not_found_with_status_404(api: Any) -> None:
    api.create_queue(QueueName="jobs")
    document = {"taskId": "AAAAAAAAAAAAAAAA", "sourceArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"}
    with pytest.raises(api.exceptions.ResourceNotFoundException) as caught:
        api.cancel_message_move_task(TaskHandle=base64.b64encode(json.dumps(document).encode()).decode())
    assert failure(caught) == ("ResourceNotFoundException", 404)


# -- requests boto3 will not send --------------------------------------------------


def test_json_errors_carry_the_query_code_in_x_amzn_query_error(sqs_server: Any, core: Any) -> None:
    status, headers, body = raw_json(sqs_server.url, "GetQueueUrl", b'{"QueueName": "nowhere"}')
    assert status == 400
    assert body["__type"] == "com.amazonaws.sqs#QueueDoesNotExist"
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.NonExistentQueue;Sender"


def test_an_unknown_json_action_is_unknown_operation_exception(sqs_server: Any, core: Any) -> None:
    status, _, body = raw_json(sqs_server.url, "Frobnicate", b"{}")
    assert status == 400
    assert body["__type"].rsplit("#", 1)[-1] == "UnknownOperationException"


def test_an_unknown_query_action_is_invalid_action(sqs_server: Any, core: Any) -> None:
    status, text = raw_query(sqs_server.url, {"Action": "Frobnicate", "Version": "2012-11-05"})
    assert status == 400
    assert xml_code(text) == "InvalidAction"


MISSING = [
    ("GetQueueUrl", {}),
    ("CreateQueue", {}),
    ("SendMessage", {"QueueUrl": "/000000000000/jobs"}),
    ("ReceiveMessage", {}),
    ("DeleteMessage", {"QueueUrl": "/000000000000/jobs"}),
    (
        "ChangeMessageVisibility",
        {"QueueUrl": "/000000000000/jobs", "ReceiptHandle": "jobs:x:aaaaaaaaaaaaaaaa"},
    ),
    ("SetQueueAttributes", {"QueueUrl": "/000000000000/jobs"}),
    ("SendMessageBatch", {"QueueUrl": "/000000000000/jobs"}),
]


@pytest.mark.parametrize(("action", "params"), MISSING, ids=[action for action, _ in MISSING])
def test_a_missing_required_parameter_is_missing_parameter_on_both_protocols(
    sqs_server: Any, core: Any, action: str, params: dict[str, str]
) -> None:
    core.create_queue("jobs")
    params = {k: sqs_server.url + v if k == "QueueUrl" else v for k, v in params.items()}
    status, headers, body = raw_json(sqs_server.url, action, json.dumps(params).encode())
    assert (status, body["__type"]) == (400, "com.amazonaws.sqs#MissingRequiredParameterException")
    assert headers["x-amzn-query-error"] == "MissingParameter;Sender"
    status, text = raw_query(sqs_server.url, {"Action": action, "Version": "2012-11-05", **params})
    assert (status, xml_code(text)) == (400, "MissingParameter")


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_a_body_that_is_not_a_json_object_is_serialization_exception(
    sqs_server: Any, core: Any, body: bytes
) -> None:
    status, _, reply = raw_json(sqs_server.url, "ListQueues", body)
    assert status == 400
    assert reply["__type"] == "com.amazonaws.sqs#SerializationException"


def test_parameters_of_the_wrong_json_type_are_invalid_parameter_value(sqs_server: Any, core: Any) -> None:
    core.create_queue("jobs")
    url = f"{sqs_server.url}/{ACCOUNT}/jobs"
    for params in (
        {"QueueUrl": url, "MaxNumberOfMessages": "ten"},
        {"QueueUrl": url, "MessageBody": 5},
        {"QueueUrl": 5, "MessageBody": "x"},
    ):
        action = "ReceiveMessage" if "MaxNumberOfMessages" in params else "SendMessage"
        status, _, reply = raw_json(sqs_server.url, action, json.dumps(params).encode())
        assert status == 400, params
        assert reply["__type"] == "com.amazonaws.sqs#InvalidParameterValueException", params


def test_a_query_request_may_come_as_a_get_with_its_parameters_in_the_url(sqs_server: Any, core: Any) -> None:
    core.create_queue("jobs")
    parts = urlsplit(sqs_server.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", "/?" + urlencode({"Action": "GetQueueUrl", "QueueName": "jobs"}))
        response = connection.getresponse()
        status, text = response.status, response.read().decode()
    finally:
        connection.close()
    assert status == 200, text
    assert f"<QueueUrl>{sqs_server.url}/{ACCOUNT}/jobs</QueueUrl>" in text


def test_a_query_request_may_name_its_queue_by_path(sqs_server: Any, core: Any) -> None:
    core.create_queue("jobs")
    status, text = raw_query(
        sqs_server.url, {"Action": "SendMessage", "MessageBody": "by path"}, path=f"/{ACCOUNT}/jobs"
    )
    assert status == 200, text
    assert "<MessageId>" in text
    (message,) = core.queue("jobs").receive()
    assert message.body == "by path"


# -- documented differences from SQS (docs/sqs-differences.md) --------------------------


def test_a_second_purge_within_60_seconds_is_purge_queue_in_progress(api: Any, url: str) -> None:
    api.send_message(QueueUrl=url, MessageBody="x")
    api.purge_queue(QueueUrl=url)
    api.send_message(QueueUrl=url, MessageBody="y")
    with pytest.raises(ClientError) as caught:
        api.purge_queue(QueueUrl=url)
    assert failure(caught) == ("AWS.SimpleQueueService.PurgeQueueInProgress", 403)
    assert caught.value.response["Error"]["Message"] == (
        "Only one PurgeQueue operation on jobs is allowed every 60 seconds."
    )
    assert counts(api, url) == (1, 0, 0)  # the second purge removed nothing
    other = api.create_queue(QueueName="other")["QueueUrl"]
    api.purge_queue(QueueUrl=other)  # the limit is per queue


def test_list_valued_message_attributes_are_refused_as_invalid_parameter_value(api: Any, url: str) -> None:
    attributes = {"tags": {"DataType": "String", "StringListValues": ["a", "b"]}}
    with pytest.raises(ClientError) as caught:
        api.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=attributes)
    assert failure(caught) == ("InvalidParameterValue", 400)
