"""Malformed requests: every one is the client's error, answered 4xx, logged in one line.

Raw requests to a real `smq serve`, over the JSON and the Query protocol:
JSON nested past the parser's depth, integers longer than Python converts,
Query field indexes that are not ASCII numbers, bodies their
Content-Encoding does not decode, HTTP that aiohttp itself refuses. None may
answer 5xx, and none may put a traceback in the server's log. Then the
lenient readings SQS does not make (other scripts' digits, spaces around a
number, control characters in tags) are refused, and the correct forms still
taken. Last, bounded random requests (hypothesis) look for any 5xx.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import time
from typing import Any
from urllib.parse import quote, urlencode, urlsplit
from xml.etree import ElementTree

import pytest

from http_support import ACCOUNT, KEY_ID, SECRET, Server

DEEP = "[" * 100_000 + "]" * 100_000
LONG_DIGITS = "9" * 5_000  # past int()'s limit of 4,300 digits
JSON_TYPE = "application/x-amz-json-1.0"
FORM_TYPE = "application/x-www-form-urlencoded"
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"


# -- raw requests ------------------------------------------------------------------


def send(
    server_url: str, body: bytes, headers: dict[str, str], path: str = "/", method: str = "POST"
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(server_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.headers), response.read()
    finally:
        connection.close()


def json_call(server_url: str, action: str, body: bytes | dict[str, Any], **headers: str) -> tuple[int, str]:
    """(status, Error.Code) of a JSON-protocol request; the code of a success is ""."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, answered, _ = send(
        server_url, data, {"Content-Type": JSON_TYPE, "X-Amz-Target": f"AmazonSQS.{action}", **headers}
    )
    return status, answered.get("x-amzn-query-error", ";").split(";")[0]


def query_call(server_url: str, form: dict[str, str] | bytes, **headers: str) -> tuple[int, str]:
    """(status, Error.Code) of a Query-protocol request; the code of a success is ""."""
    data = form if isinstance(form, bytes) else urlencode(form).encode()
    status, _, body = send(server_url, data, {"Content-Type": FORM_TYPE, **headers})
    found = re.search(rb"<Code>(.*?)</Code>", body)
    return status, found.group(1).decode() if found else ""


def raw_http(server_url: str, data: bytes) -> bytes:
    """Bytes sent as they are on a new connection; the first bytes of the answer."""
    parts = urlsplit(server_url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as connection:
        connection.sendall(data)
        return connection.recv(200)


def query_attribute(action: str, name: str, value: str, **more: str) -> dict[str, str]:
    return {"Action": action, "Attribute.1.Name": name, "Attribute.1.Value": value, **more}


def redrive(count: Any, arn: str = f"arn:aws:sqs:us-east-1:{ACCOUNT}:dead") -> str:
    return json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": count})


@pytest.fixture
def queue_url(sqs_server: Any, core: Any) -> str:
    """A fresh queue ``jobs`` (and its dead-letter queue ``dead``) on the shared server."""
    status, _, body = send(
        sqs_server.url,
        b'{"QueueName":"dead"}',
        {"Content-Type": JSON_TYPE, "X-Amz-Target": "AmazonSQS.CreateQueue"},
    )
    assert status == 200
    status, _, body = send(
        sqs_server.url,
        b'{"QueueName":"jobs"}',
        {"Content-Type": JSON_TYPE, "X-Amz-Target": "AmazonSQS.CreateQueue"},
    )
    assert status == 200
    return str(json.loads(body)["QueueUrl"])


# -- the eight inputs that answered 500 --------------------------------------------


def test_json_nested_past_the_parsers_depth_is_a_serialization_exception(sqs_server: Any, core: Any) -> None:
    assert json_call(sqs_server.url, "ListQueues", b'{"QueueNamePrefix":' + DEEP.encode() + b"}") == (
        400,
        "SerializationException",
    )
    assert json_call(sqs_server.url, "ListQueues", DEEP.encode()) == (400, "SerializationException")


def test_a_number_longer_than_python_converts_in_a_json_body_is_a_serialization_exception(
    sqs_server: Any, core: Any
) -> None:
    body = b'{"QueueName":"jobs","Attributes":{},"MaxResults":' + LONG_DIGITS.encode() + b"}"
    assert json_call(sqs_server.url, "ListQueues", body) == (400, "SerializationException")


@pytest.mark.parametrize("action", ["CreateQueue", "SetQueueAttributes"])
def test_a_redrive_policy_nested_past_the_parsers_depth_is_invalid_parameter_value(
    sqs_server: Any, queue_url: str, action: str
) -> None:
    where = {"QueueName": "other"} if action == "CreateQueue" else {"QueueUrl": queue_url}
    assert json_call(sqs_server.url, action, {**where, "Attributes": {"RedrivePolicy": DEEP}}) == (
        400,
        "InvalidParameterValue",
    )
    assert query_call(sqs_server.url, query_attribute(action, "RedrivePolicy", DEEP, **where)) == (
        400,
        "InvalidParameterValue",
    )


def test_a_policy_nested_past_the_parsers_depth_is_invalid_attribute_value(
    sqs_server: Any, queue_url: str
) -> None:
    form = query_attribute("SetQueueAttributes", "Policy", DEEP, QueueUrl=queue_url)
    assert query_call(sqs_server.url, form) == (400, "InvalidAttributeValue")
    body = {"QueueUrl": queue_url, "Attributes": {"RedriveAllowPolicy": DEEP}}
    assert json_call(sqs_server.url, "SetQueueAttributes", body) == (400, "InvalidAttributeValue")


def test_a_task_handle_nested_past_the_parsers_depth_is_invalid_parameter_value(
    sqs_server: Any, core: Any
) -> None:
    handle = base64.b64encode(DEEP.encode()).decode()
    assert json_call(sqs_server.url, "CancelMessageMoveTask", {"TaskHandle": handle}) == (
        400,
        "InvalidParameterValue",
    )
    assert query_call(sqs_server.url, {"Action": "CancelMessageMoveTask", "TaskHandle": handle}) == (
        400,
        "InvalidParameterValue",
    )


@pytest.mark.parametrize("name", ["DelaySeconds", "VisibilityTimeout", "KmsDataKeyReusePeriodSeconds"])
@pytest.mark.parametrize("digits", [LONG_DIGITS, "-" + LONG_DIGITS])
def test_an_attribute_integer_longer_than_python_converts_is_invalid_attribute_value(
    sqs_server: Any, queue_url: str, name: str, digits: str
) -> None:
    body = {"QueueUrl": queue_url, "Attributes": {name: digits}}
    assert json_call(sqs_server.url, "SetQueueAttributes", body) == (400, "InvalidAttributeValue")
    form = query_attribute("CreateQueue", name, digits, QueueName="other")
    assert query_call(sqs_server.url, form) == (400, "InvalidAttributeValue")


@pytest.mark.parametrize("count", [LONG_DIGITS, "-" + LONG_DIGITS])
def test_a_max_receive_count_longer_than_python_converts_is_invalid_parameter_value(
    sqs_server: Any, queue_url: str, count: str
) -> None:
    body = {"QueueUrl": queue_url, "Attributes": {"RedrivePolicy": redrive(count)}}
    assert json_call(sqs_server.url, "SetQueueAttributes", body) == (400, "InvalidParameterValue")
    form = query_attribute("SetQueueAttributes", "RedrivePolicy", redrive(count), QueueUrl=queue_url)
    assert query_call(sqs_server.url, form) == (400, "InvalidParameterValue")
    # A JSON number that long: not JSON Python reads.
    as_number = redrive(0).replace('"maxReceiveCount": 0', f'"maxReceiveCount": {count}')
    body = {"QueueUrl": queue_url, "Attributes": {"RedrivePolicy": as_number}}
    assert json_call(sqs_server.url, "SetQueueAttributes", body) == (400, "InvalidParameterValue")


def test_a_query_integer_longer_than_python_converts_is_invalid_parameter_value(
    sqs_server: Any, queue_url: str
) -> None:
    form = {"Action": "ReceiveMessage", "QueueUrl": queue_url, "MaxNumberOfMessages": LONG_DIGITS}
    assert query_call(sqs_server.url, form) == (400, "InvalidParameterValue")


@pytest.mark.parametrize("index", [LONG_DIGITS, "\u00b2", "\u0663", "0", "-1", "1 ", ""])
def test_a_query_field_index_not_an_ascii_number_from_1_is_an_invalid_parameter(
    sqs_server: Any, queue_url: str, index: str
) -> None:
    # A 400, as for any bad parameter: a 404 would tell a client the resource is missing.
    form = {"Action": "CreateQueue", "QueueName": "other"}
    form |= {f"Attribute.{index}.Name": "DelaySeconds", f"Attribute.{index}.Value": "1"}
    status, code = query_call(sqs_server.url, form)
    assert (status, code) == (400, "InvalidParameterValue")
    entries = {"Action": "SendMessageBatch", "QueueUrl": queue_url}
    entries |= {
        f"SendMessageBatchRequestEntry.{index}.Id": "a",
        f"SendMessageBatchRequestEntry.{index}.MessageBody": "x",
    }
    assert query_call(sqs_server.url, entries) == (400, "InvalidParameterValue")


def test_a_body_its_content_encoding_does_not_decode_is_refused(sqs_server: Any, core: Any) -> None:
    assert json_call(sqs_server.url, "ListQueues", b"{}", **{"Content-Encoding": "gzip"}) == (
        400,
        "SerializationException",
    )
    assert json_call(
        sqs_server.url,
        "ListQueues",
        GZIP_HEADER + b"\xff\xff\xff",  # a reserved deflate block type, **{"Content-Encoding": "gzip"}
    ) == (
        400,
        "SerializationException",
    )
    assert query_call(sqs_server.url, b"Action=ListQueues", **{"Content-Encoding": "gzip"}) == (
        404,
        "MalformedQueryString",
    )
    # The server still answers well-formed requests afterwards.
    assert json_call(sqs_server.url, "ListQueues", b"{}") == (200, "")


def test_a_body_its_content_encoding_does_not_decode_is_refused_with_keys_too(http_redis: Any) -> None:
    """Unsigned: whether the signature or the body is checked first, the answer is 4xx, not 500."""
    server = Server(http_redis.url, "--access-key", f"{KEY_ID}:{SECRET}")
    try:
        status, code = json_call(server.url, "ListQueues", b"not gzip", **{"Content-Encoding": "gzip"})
        assert status < 500 and code in ("SerializationException", "MissingAuthenticationToken")
        status, code = query_call(server.url, b"not gzip", **{"Content-Encoding": "gzip"})
        assert status < 500 and code in ("MalformedQueryString", "MissingAuthenticationToken")
        # A presigned URL whose X-Amz-Expires is longer than Python converts.
        now = time.gmtime()
        presigned = {
            "Action": "ListQueues",
            "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
            "X-Amz-Credential": f"{KEY_ID}/{time.strftime('%Y%m%d', now)}/us-east-1/sqs/aws4_request",
            "X-Amz-Date": time.strftime("%Y%m%dT%H%M%SZ", now),
            "X-Amz-Expires": LONG_DIGITS,
            "X-Amz-SignedHeaders": "host",
            "X-Amz-Signature": "0" * 64,
        }
        status, _, body = send(
            server.url, b"", {}, path="/?" + urlencode(presigned, quote_via=quote), method="GET"
        )
        assert (status, re.findall(rb"<Code>(.*?)</Code>", body)) == (400, [b"IncompleteSignature"])
    finally:
        server.stop()
    assert "Traceback" not in server.logs()


def test_a_lone_surrogate_in_a_json_string_is_a_serialization_exception(
    sqs_server: Any, queue_url: str
) -> None:
    for attributes in ({"KmsMasterKeyId": "key\ud800"}, {"Policy": '{"Id": "\udfff"}'}):
        body = {"QueueUrl": queue_url, "Attributes": attributes}  # json.dumps writes \udxxx escapes
        assert json_call(sqs_server.url, "SetQueueAttributes", body) == (400, "SerializationException")
    assert json_call(sqs_server.url, "ListQueues", {"QueueNamePrefix": "\udc00"}) == (
        400,
        "SerializationException",
    )
    # A pair is one character; a body in UTF-16, or with UTF-8's encoding of a surrogate, is not UTF-8.
    body = {"QueueUrl": queue_url, "Attributes": {"KmsMasterKeyId": "key\U0001f600"}}
    assert json_call(sqs_server.url, "SetQueueAttributes", body) == (200, "")
    assert json_call(sqs_server.url, "ListQueues", "{}".encode("utf-16")) == (400, "SerializationException")
    assert json_call(sqs_server.url, "ListQueues", b'{"QueueNamePrefix": "\xed\xa0\x80"}') == (
        400,
        "SerializationException",
    )
    assert json_call(sqs_server.url, "ListQueues", b"\xef\xbb\xbf{}") == (200, "")  # a UTF-8 BOM


def test_an_error_quoting_undecodable_header_bytes_is_still_json(http_redis: Any) -> None:
    server = Server(http_redis.url, "--access-key", f"{KEY_ID}:{SECRET}")
    try:
        request = (
            b"POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: AmazonSQS.ListQueues\r\nAuthorization: \xc1 x\r\n"
            b"Content-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        )
        parts = urlsplit(server.url)
        assert parts.hostname is not None and parts.port is not None
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as connection:
            connection.sendall(request)
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] == b"400", answer
        assert json.loads(body)["__type"].endswith("#IncompleteSignature")
    finally:
        server.stop()
    assert "Traceback" not in server.logs()


def test_an_error_quoting_a_control_character_is_still_xml(sqs_server: Any, queue_url: str) -> None:
    form = {"Action": "AddPermission", "QueueUrl": queue_url, "Label": "a\u0001b"}
    form |= {"AWSAccountId.1": "111122223333", "ActionName.1": "SendMessage"}
    status, _, body = send(sqs_server.url, urlencode(form).encode(), {"Content-Type": FORM_TYPE})
    assert status == 400
    assert ElementTree.fromstring(body).findtext(".//{*}Code") == "InvalidParameterValue"


# -- the log: one line per client error, never a traceback -------------------------


def test_each_malformed_request_logs_one_line_and_no_traceback(http_redis: Any) -> None:
    server = Server(http_redis.url, "--no-auth")
    try:
        started = len(server.logs().splitlines())
        url = server.url
        answers = [
            json_call(url, "ListQueues", b'{"QueueNamePrefix": ')[0],
            json_call(url, "ListQueues", b"not gzip", **{"Content-Encoding": "gzip"})[0],
            query_call(url, b"Action=ListQueues", **{"Content-Encoding": "gzip"})[0],
            json_call(url, "ListQueues", DEEP.encode())[0],
            query_call(url, {"Action": "CreateQueue", "QueueName": "q", "Attribute.\u00b2.Name": "x"})[0],
            query_call(
                url, {"Action": "CreateQueue", "QueueName": "q", f"Attribute.{LONG_DIGITS}.Name": "x"}
            )[0],
        ]
        assert all(400 <= status < 500 for status in answers), answers
        rejected = [
            b"GARBAGE / HTTP/1.1\r\nHost: x\r\n\r\n",  # a request line aiohttp refuses
            b"POST / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",  # a header it refuses
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: nine\r\n\r\n",
            b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # a request line too long
        ]
        for data in rejected:
            answer = raw_http(url, data)
            assert answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n")[0], answer
        time.sleep(0.2)  # aiohttp logs some rejections after answering them
        lines = server.logs().splitlines()[started:]
    finally:
        server.stop()
    assert "Traceback" not in server.logs()
    assert len(lines) == len(answers) + len(rejected), "\n".join(lines)
    access = [json.loads(line) for line in lines[: len(answers)]]
    assert [entry["status"] for entry in access] == answers
    assert all(line.startswith("bad HTTP request from ") for line in lines[len(answers) :]), lines


# -- lenient readings: refused; the correct forms taken ----------------------------

LENIENT_INTEGERS = [
    "\u0663\u0660",
    " 45 ",
    "45 ",
    "+45",
    "4_5",
    "\uff14\uff15",
    "45\n",
    "",
    "045",
    "00",
    "-0",
]


@pytest.mark.parametrize("text", LENIENT_INTEGERS)
def test_an_attribute_integer_in_any_form_but_ascii_digits_is_invalid_attribute_value(
    sqs_server: Any, queue_url: str, text: str
) -> None:
    body = {"QueueUrl": queue_url, "Attributes": {"DelaySeconds": text}}
    assert json_call(sqs_server.url, "SetQueueAttributes", body) == (400, "InvalidAttributeValue")
    form = query_attribute("SetQueueAttributes", "DelaySeconds", text, QueueUrl=queue_url)
    assert query_call(sqs_server.url, form) == (400, "InvalidAttributeValue")


@pytest.mark.parametrize("text", LENIENT_INTEGERS)
def test_a_query_integer_in_any_form_but_ascii_digits_is_invalid_parameter_value(
    sqs_server: Any, queue_url: str, text: str
) -> None:
    form = {"Action": "ReceiveMessage", "QueueUrl": queue_url, "MaxNumberOfMessages": text}
    assert query_call(sqs_server.url, form) == (400, "InvalidParameterValue")


@pytest.mark.parametrize("count", ["\u0663", " 5 ", "+5", "5\n"])
def test_a_max_receive_count_in_any_form_but_ascii_digits_is_invalid_parameter_value(
    sqs_server: Any, queue_url: str, count: str
) -> None:
    body = {"QueueUrl": queue_url, "Attributes": {"RedrivePolicy": redrive(count)}}
    assert json_call(sqs_server.url, "SetQueueAttributes", body) == (400, "InvalidParameterValue")
    form = query_attribute("SetQueueAttributes", "RedrivePolicy", redrive(count), QueueUrl=queue_url)
    assert query_call(sqs_server.url, form) == (400, "InvalidParameterValue")


def test_an_account_id_in_other_digits_than_ascii_is_invalid_parameter_value(
    sqs_server: Any, queue_url: str
) -> None:
    account = "\u0661" * 12  # twelve Arabic-Indic ones
    body = {"QueueUrl": queue_url, "Label": "ok", "AWSAccountIds": [account], "Actions": ["SendMessage"]}
    assert json_call(sqs_server.url, "AddPermission", body) == (400, "InvalidParameterValue")
    form = {"Action": "AddPermission", "QueueUrl": queue_url, "Label": "ok"}
    form |= {"AWSAccountId.1": account, "ActionName.1": "SendMessage"}
    assert query_call(sqs_server.url, form) == (400, "InvalidParameterValue")
    body["AWSAccountIds"] = ["111122223333"]
    assert json_call(sqs_server.url, "AddPermission", body) == (200, "")


def test_integers_in_ascii_digits_are_still_taken(sqs_server: Any, queue_url: str) -> None:
    body = {"QueueUrl": queue_url, "Attributes": {"DelaySeconds": "30", "RedrivePolicy": redrive("5")}}
    assert json_call(sqs_server.url, "SetQueueAttributes", body) == (200, "")
    form = query_attribute("SetQueueAttributes", "VisibilityTimeout", "45", QueueUrl=queue_url)
    assert query_call(
        sqs_server.url, form | {"Attribute.2.Name": "RedrivePolicy", "Attribute.2.Value": redrive(7)}
    ) == (
        200,
        "",
    )
    form = {
        "Action": "ReceiveMessage",
        "QueueUrl": queue_url,
        "MaxNumberOfMessages": "10",
        "VisibilityTimeout": "0",
    }
    assert query_call(sqs_server.url, form) == (200, "")
    _, _, data = send(
        sqs_server.url,
        json.dumps({"QueueUrl": queue_url, "AttributeNames": ["All"]}).encode(),
        {"Content-Type": JSON_TYPE, "X-Amz-Target": "AmazonSQS.GetQueueAttributes"},
    )
    attributes = json.loads(data)["Attributes"]
    assert (attributes["DelaySeconds"], attributes["VisibilityTimeout"]) == ("30", "45")
    assert json.loads(attributes["RedrivePolicy"])["maxReceiveCount"] == 7


@pytest.mark.parametrize(
    "tags", [{"\u0000": "v"}, {"team": "a\u0000"}, {"team\u001f": "v"}, {"team": "a\tb"}, {"team#": "v"}]
)
def test_a_tag_with_a_character_sqs_does_not_allow_is_invalid_parameter_value(
    sqs_server: Any, queue_url: str, tags: dict[str, str]
) -> None:
    assert json_call(sqs_server.url, "TagQueue", {"QueueUrl": queue_url, "Tags": tags}) == (
        400,
        "InvalidParameterValue",
    )
    assert json_call(sqs_server.url, "CreateQueue", {"QueueName": "other", "tags": tags}) == (
        400,
        "InvalidParameterValue",
    )
    ((key, value),) = tags.items()
    form = {"Action": "TagQueue", "QueueUrl": queue_url, "Tag.1.Key": key, "Tag.1.Value": value}
    assert query_call(sqs_server.url, form) == (400, "InvalidParameterValue")


def test_tags_of_unicode_letters_digits_spaces_and_the_allowed_punctuation_are_taken(
    sqs_server: Any, queue_url: str
) -> None:
    tags = {"Équipe 二 \u0663": "välue x_.:/=+-@", "k": ""}
    assert json_call(sqs_server.url, "TagQueue", {"QueueUrl": queue_url, "Tags": tags}) == (200, "")
    _, _, data = send(
        sqs_server.url,
        json.dumps({"QueueUrl": queue_url}).encode(),
        {"Content-Type": JSON_TYPE, "X-Amz-Target": "AmazonSQS.ListQueueTags"},
    )
    assert json.loads(data)["Tags"] == tags


# -- random requests (hypothesis): no 5xx, no traceback ----------------------------

FUZZ_ACTIONS = [
    "CreateQueue",
    "SetQueueAttributes",
    "GetQueueAttributes",
    "SendMessage",
    "SendMessageBatch",
    "ReceiveMessage",
    "ChangeMessageVisibility",
    "DeleteMessageBatch",
    "TagQueue",
    "UntagQueue",
    "ListQueues",
    "StartMessageMoveTask",
    "CancelMessageMoveTask",
]
# Parameter, attribute and field names of those actions. No WaitTimeSeconds or
# ReceiveMessageWaitTimeSeconds: a long poll would only make the test slow.
JSON_NAMES = [
    "QueueName",
    "QueueUrl",
    "Attributes",
    "AttributeNames",
    "tags",
    "Tags",
    "TagKeys",
    "MessageBody",
    "MessageAttributes",
    "MessageSystemAttributes",
    "MessageGroupId",
    "MessageDeduplicationId",
    "Entries",
    "Id",
    "ReceiptHandle",
    "DataType",
    "StringValue",
    "BinaryValue",
    "StringListValues",
    "DelaySeconds",
    "VisibilityTimeout",
    "MaxNumberOfMessages",
    "MaxResults",
    "NextToken",
    "SourceArn",
    "DestinationArn",
    "TaskHandle",
    "MaxNumberOfMessagesPerSecond",
    "RedrivePolicy",
    "Policy",
    "RedriveAllowPolicy",
    "deadLetterTargetArn",
    "maxReceiveCount",
    "MessageRetentionPeriod",
    "MaximumMessageSize",
    "KmsDataKeyReusePeriodSeconds",
    "FifoQueue",
    "ContentBasedDeduplication",
]
QUERY_NAMES = [
    "QueueName",
    "QueueUrl",
    "Attribute",
    "AttributeName",
    "Tag",
    "TagKey",
    "MessageBody",
    "MessageAttribute",
    "MessageAttributeName",
    "SendMessageBatchRequestEntry",
    "DeleteMessageBatchRequestEntry",
    "Id",
    "ReceiptHandle",
    "Name",
    "Value",
    "Key",
    "DataType",
    "StringValue",
    "BinaryValue",
    "StringListValue",
    "DelaySeconds",
    "VisibilityTimeout",
    "MaxNumberOfMessages",
    "MaxResults",
    "SourceArn",
    "TaskHandle",
    "RedrivePolicy",
]
TRICKY = [
    "",
    "0",
    "1",
    "-1",
    "10",
    "\u0663\u0660",
    " 45 ",
    "\u00b2",
    "9" * 30,
    "true",
    "String",
    "Number",
    "All",
]


def test_random_requests_never_answer_5xx_nor_log_a_traceback(acl_server: Any) -> None:
    """Also: the server connects as the least-privilege ACL user (smq's keys, channels and
    commands only), so a request that made smq touch anything else would answer 503."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from conftest import acl_url

    with acl_server.client() as admin:
        admin.flushall()
        admin.acl_log_reset()
    server = Server(acl_url(acl_server), "--no-auth")
    try:
        status, _, body = send(
            server.url,
            b'{"QueueName":"fuzz"}',
            {"Content-Type": JSON_TYPE, "X-Amz-Target": "AmazonSQS.CreateQueue"},
        )
        assert status == 200
        queue_url = json.loads(body)["QueueUrl"]
        known = [
            queue_url,
            f"arn:aws:sqs:us-east-1:{ACCOUNT}:fuzz",
            redrive(3, f"arn:aws:sqs:us-east-1:{ACCOUNT}:fuzz"),
        ]
        texts = st.sampled_from(TRICKY + known) | st.text(max_size=12)
        # JSON strings may also hold lone surrogates (as \udxxx escapes); a form's UTF-8 cannot.
        any_text = st.sampled_from(TRICKY + known) | st.text(
            st.characters(exclude_categories=[]), max_size=12
        )
        scalars = any_text | st.integers(-(2**70), 2**70) | st.floats() | st.booleans() | st.none()
        keys = st.sampled_from(JSON_NAMES) | any_text
        values = st.recursive(
            scalars,
            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
            max_leaves=12,
        )
        json_bodies = st.dictionaries(keys, values, max_size=6).map(
            lambda v: json.dumps(v).encode()
        ) | st.binary(max_size=40)
        parts = (
            st.sampled_from(QUERY_NAMES) | st.sampled_from(["1", "2", "0", "\u00b2", "99999999999"]) | texts
        )
        fields = st.lists(parts, min_size=1, max_size=4).map(".".join)
        forms = st.dictionaries(fields, texts, max_size=8)
        fuzz = settings(
            max_examples=200,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )

        def answered_well(status: int, logged: int) -> None:
            assert status < 500
            assert "Traceback" not in "\n".join(server.logs().splitlines()[logged:])

        @fuzz
        @given(action=st.sampled_from(FUZZ_ACTIONS), body=json_bodies)
        def json_requests(action: str, body: bytes) -> None:
            logged = len(server.logs().splitlines())
            answered_well(json_call(server.url, action, body)[0], logged)

        @fuzz
        @given(action=st.sampled_from(FUZZ_ACTIONS), form=forms, at_queue=st.booleans())
        def query_requests(action: str, form: dict[str, str], at_queue: bool) -> None:
            logged = len(server.logs().splitlines())
            form = {**form, "Action": action, **({"QueueUrl": queue_url} if at_queue else {})}
            answered_well(query_call(server.url, form)[0], logged)

        json_requests()
        query_requests()
        with acl_server.client() as admin:
            assert any(c.get("user") == "smq" for c in admin.client_list())  # really that user
            assert admin.acl_log() == []  # and nothing it ran was refused
    finally:
        server.stop()
    log = server.logs()
    assert "Traceback" not in log
    assert '"status": 5' not in log
