"""The Query protocol sent with GET to a queue URL (unsigned: the server runs
with --no-auth), as the live service answers it: every action works there
(GetQueueUrl also for another queue), an unknown action is InvalidAction, a GET
with no Action is a 404 <UnknownOperationException/>, and a client that asks for
JSON (``Accept: application/json``) gets its other replies in JSON."""

from __future__ import annotations

import hashlib
import http.client
import json
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

import smq
from http_support import ACCOUNT

NS = {"sqs": "http://queue.amazonaws.com/doc/2012-11-05/"}
QUEUE = f"/{ACCOUNT}/jobs"


def request(
    server_url: str,
    path: str,
    params: dict[str, str],
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, bytes]:
    """One unsigned Query-protocol request: the parameters in the query string (GET) or the form (POST)."""
    parts = urlsplit(server_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    query = urlencode(params)
    try:
        if method == "GET":
            connection.request("GET", f"{path}?{query}", headers=headers or {})
        else:
            form = {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
            connection.request("POST", path, body=query.encode(), headers=form)
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def xml(body: bytes) -> ET.Element:
    return ET.fromstring(body)


def text_of(root: ET.Element, path: str) -> str:
    found = root.find(path, NS)
    assert found is not None and found.text is not None, (path, ET.tostring(root))
    return found.text


def error_of(body: bytes) -> tuple[str, str]:
    root = xml(body)
    return text_of(root, "sqs:Error/sqs:Code"), text_of(root, "sqs:Error/sqs:Message")


def test_queue_actions_work_with_get_on_the_queue_url(sqs_server: Any, core: smq.Client) -> None:
    core.create_queue("jobs")
    status, _, body = request(sqs_server.url, QUEUE, {"Action": "SendMessage", "MessageBody": "hello"})
    assert status == 200
    assert (
        text_of(xml(body), "sqs:SendMessageResult/sqs:MD5OfMessageBody") == hashlib.md5(b"hello").hexdigest()
    )
    params = {"Action": "GetQueueAttributes", "AttributeName.1": "ApproximateNumberOfMessages"}
    status, _, body = request(sqs_server.url, QUEUE, params)
    assert status == 200
    assert text_of(xml(body), "sqs:GetQueueAttributesResult/sqs:Attribute/sqs:Value") == "1"
    status, _, body = request(sqs_server.url, QUEUE, {"Action": "ReceiveMessage", "VisibilityTimeout": "30"})
    assert status == 200
    message = xml(body).find("sqs:ReceiveMessageResult/sqs:Message", NS)
    assert message is not None and text_of(message, "sqs:Body") == "hello"
    receipt = text_of(message, "sqs:ReceiptHandle")
    status, _, _ = request(sqs_server.url, QUEUE, {"Action": "DeleteMessage", "ReceiptHandle": receipt})
    assert status == 200
    info = core.get_queue("jobs").attributes()
    assert (info.visible, info.in_flight) == (0, 0)


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_get_queue_url_is_answered_at_a_queue_url_also_for_another_queue(
    sqs_server: Any, core: smq.Client, method: str
) -> None:
    core.create_queue("jobs")
    core.create_queue("other")
    for name in ("jobs", "other"):
        status, _, body = request(
            sqs_server.url, QUEUE, {"Action": "GetQueueUrl", "QueueName": name}, method=method
        )
        assert status == 200, body
        found = text_of(xml(body), "sqs:GetQueueUrlResult/sqs:QueueUrl")
        assert found == f"{sqs_server.url}/{ACCOUNT}/{name}"
    # The other actions that take no queue URL are answered there too.
    status, _, body = request(sqs_server.url, QUEUE, {"Action": "ListQueues"}, method=method)
    assert status == 200, body
    assert len(xml(body).findall("sqs:ListQueuesResult/sqs:QueueUrl", NS)) == 2


@pytest.mark.parametrize("path", [QUEUE, "/"])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_an_unknown_action_is_invalid_action(
    sqs_server: Any, core: smq.Client, method: str, path: str
) -> None:
    core.create_queue("jobs")
    status, headers, body = request(sqs_server.url, path, {"Action": "FooBar"}, method=method)
    assert status == 400
    assert error_of(body) == ("InvalidAction", "The action FooBar is not valid for this endpoint.")
    assert headers["Content-Type"].startswith("text/xml")


@pytest.mark.parametrize("accept", [{}, {"Accept": "application/json"}])
def test_a_get_with_no_action_is_404_unknown_operation_exception_in_xml(
    sqs_server: Any, core: smq.Client, accept: dict[str, str]
) -> None:
    core.create_queue("jobs")
    for path in (QUEUE, "/"):
        status, headers, body = request(sqs_server.url, path, {}, headers=accept)
        assert status == 404
        assert headers["Content-Type"].startswith("text/xml")
        assert xml(body).tag == "UnknownOperationException"
    # A POST that names no Action is still told what it lacks.
    status, _, body = request(sqs_server.url, QUEUE, {"MessageBody": "x"}, method="POST")
    assert status == 400
    assert error_of(body) == ("MissingAction", "The request must contain the parameter Action.")
    assert core.get_queue("jobs").attributes().visible == 0


def test_an_unknown_json_operation_names_unknown_operation_exception_in_both_codes(sqs_server: Any) -> None:
    parts = urlsplit(sqs_server.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.Frobnicate"}
    try:
        connection.request("POST", "/", body=b"{}", headers=headers)
        response = connection.getresponse()
        body = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 400
    assert body["__type"] == "com.amazonaws.sqs#UnknownOperationException"
    # SDKs that read the Query code from this header see the same name.
    assert response.headers["x-amzn-query-error"] == "UnknownOperationException;Sender"


def test_a_client_that_asks_for_json_gets_the_reply_in_json(sqs_server: Any, core: smq.Client) -> None:
    core.create_queue("jobs")
    accept = {"Accept": "application/json"}
    status, headers, body = request(
        sqs_server.url, QUEUE, {"Action": "SendMessage", "MessageBody": "hello"}, headers=accept
    )
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    reply = json.loads(body)
    assert list(reply) == ["SendMessageResponse"]
    result = reply["SendMessageResponse"]["SendMessageResult"]
    assert result["MD5OfMessageBody"] == hashlib.md5(b"hello").hexdigest() and result["MessageId"]
    assert reply["SendMessageResponse"]["ResponseMetadata"]["RequestId"] == headers["x-amzn-RequestId"]
    status, _, body = request(sqs_server.url, QUEUE, {"Action": "ReceiveMessage"}, headers=accept)
    (message,) = json.loads(body)["ReceiveMessageResponse"]["ReceiveMessageResult"]["Messages"]
    assert message["Body"] == "hello"
    status, _, body = request(
        sqs_server.url,
        QUEUE,
        {"Action": "DeleteMessage", "ReceiptHandle": message["ReceiptHandle"]},
        headers=accept,
    )
    assert status == 200
    assert list(json.loads(body)["DeleteMessageResponse"]) == ["ResponseMetadata"]
    # POST to the service endpoint too.
    status, _, body = request(sqs_server.url, "/", {"Action": "ListQueues"}, method="POST", headers=accept)
    assert status == 200
    assert json.loads(body)["ListQueuesResponse"]["ListQueuesResult"]["QueueUrls"] == [
        f"{sqs_server.url}{QUEUE}"
    ]


def test_a_client_that_asks_for_json_gets_errors_in_json(sqs_server: Any, core: smq.Client) -> None:
    status, headers, body = request(
        sqs_server.url,
        f"/{ACCOUNT}/nowhere",
        {"Action": "SendMessage", "MessageBody": "x"},
        headers={"Accept": "application/json"},
    )
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    reply = json.loads(body)
    assert reply["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert reply["Error"]["Type"] == "Sender" and reply["Error"]["Message"]
    assert reply["RequestId"] == headers["x-amzn-RequestId"]


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_queue_url_parameter_naming_another_queue_than_the_path_is_refused(
    sqs_server: Any, core: smq.Client, method: str
) -> None:
    core.create_queue("jobs")
    other = core.create_queue("other")
    params = {"Action": "SendMessage", "MessageBody": "x", "QueueUrl": f"{sqs_server.url}/{ACCOUNT}/other"}
    status, _, body = request(sqs_server.url, QUEUE, params, method=method)
    assert status == 400
    code, message = error_of(body)
    assert code == "InvalidParameterValue" and "another queue than the queue URL" in message
    assert other.attributes().visible == 0 and core.get_queue("jobs").attributes().visible == 0
    # The same queue in both is fine, and a bare name resolves as SQS resolves it.
    for named in (f"{sqs_server.url}{QUEUE}", "jobs"):
        status, _, body = request(sqs_server.url, QUEUE, {**params, "QueueUrl": named}, method=method)
        assert status == 200, body
    assert core.get_queue("jobs").attributes().visible == 2
