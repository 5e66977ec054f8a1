"""SigV4 verification against requests signed by botocore's own signers.

botocore signs with a frozen clock (``SIGNED_AT``); ``verify`` gets the
server's time as ``now``. Each request is turned into what the server sees:
method, raw path, raw query, headers (with the Host the HTTP client would
add) and body bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from urllib.parse import urlsplit

import botocore.auth
import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from multidict import CIMultiDict, CIMultiDictProxy

from smq.server._errors import SqsError
from smq.server._sigv4 import scope_region, verify

KEY_ID = "AKIDEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SECRETS = {KEY_ID: SECRET, "AKIDOTHER": "another-secret"}
CREDENTIALS = Credentials(KEY_ID, SECRET)
SIGNED_AT = datetime(2026, 11, 21, 10, 0, 0)  # naive UTC, as botocore's clock gives it
NOW = SIGNED_AT.replace(tzinfo=timezone.utc).timestamp()
ENDPOINT = "http://localhost:9324"
QUEUE_URL = f"{ENDPOINT}/000000000000/my-queue"
AWKWARD = "a b ünïcödé ~/+=&?%2F*"


@pytest.fixture(autouse=True)
def frozen_signing_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: SIGNED_AT)


@dataclasses.dataclass(frozen=True)
class Received:
    """A request as the server receives it."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes

    def with_header(self, name: str, value: str | None) -> Received:
        headers = {key: val for key, val in self.headers.items() if key.lower() != name.lower()}
        if value is not None:
            headers[name] = value
        return dataclasses.replace(self, headers=headers)


def received(request: AWSRequest) -> Received:
    prepared = request.prepare()
    url = urlsplit(prepared.url)
    headers = dict(prepared.headers.items())
    headers.setdefault("Host", url.netloc)
    body = prepared.body or b""
    if isinstance(body, str):
        body = body.encode()
    return Received(prepared.method, url.path or "/", url.query, headers, body)


def signed(
    request: AWSRequest,
    *,
    credentials: Credentials = CREDENTIALS,
    region: str = "us-east-1",
    service: str = "sqs",
) -> Received:
    SigV4Auth(credentials, service, region).add_auth(request)
    return received(request)


def presigned(
    request: AWSRequest, *, expires: int = 3600, credentials: Credentials = CREDENTIALS
) -> Received:
    SigV4QueryAuth(credentials, "sqs", "us-east-1", expires=expires).add_auth(request)
    return received(request)


def check(request: Received, *, now: float = NOW, secrets: Mapping[str, str] = SECRETS) -> str:
    return verify(
        request.method, request.path, request.query, request.headers, request.body, secrets, now=now
    )


def rejection(request: Received, *, now: float = NOW, secrets: Mapping[str, str] = SECRETS) -> str:
    with pytest.raises(SqsError) as caught:
        check(request, now=now, secrets=secrets)
    return caught.value.code


def json_request() -> AWSRequest:
    return AWSRequest(
        method="POST",
        url=f"{ENDPOINT}/",
        headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"},
        data=json.dumps({"QueueUrl": QUEUE_URL, "MessageBody": AWKWARD}).encode(),
    )


def query_post_request() -> AWSRequest:
    return AWSRequest(
        method="POST",
        url=f"{ENDPOINT}/",
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        data={
            "Action": "SendMessage",
            "QueueUrl": QUEUE_URL,
            "MessageBody": AWKWARD,
            "Version": "2012-11-05",
        },
    )


def query_get_request() -> AWSRequest:
    return AWSRequest(
        method="GET",
        url=QUEUE_URL,
        params={"Action": "SendMessage", "MessageBody": AWKWARD, "Tilde": "~", "Empty": "", "Plus": "+"},
    )


STYLES: dict[str, Callable[[], AWSRequest]] = {
    "json": json_request,
    "query-post": query_post_request,
    "query-get": query_get_request,
}
style = pytest.mark.parametrize("make", STYLES.values(), ids=STYLES.keys())


@style
def test_a_signed_request_passes_and_names_its_key(make: Callable[[], AWSRequest]) -> None:
    assert check(signed(make())) == KEY_ID


@style
def test_a_request_signed_with_a_session_token_passes(make: Callable[[], AWSRequest]) -> None:
    request = signed(make(), credentials=Credentials(KEY_ID, SECRET, "session-token/+="))
    assert {name.lower() for name in request.headers} >= {"x-amz-security-token"}
    assert check(request) == KEY_ID


@style
def test_any_region_is_accepted(make: Callable[[], AWSRequest]) -> None:
    assert check(signed(make(), region="eu-west-3")) == KEY_ID


@style
def test_the_scope_region_is_read_from_a_signature_without_checking_it(
    make: Callable[[], AWSRequest],
) -> None:
    request = signed(make(), region="eu-west-3")
    assert scope_region(request.headers, request.query) == "eu-west-3"
    request = presigned(make())
    assert scope_region(request.headers, request.query) == "us-east-1"
    lower = {name.lower(): value for name, value in signed(make(), region="ap-south-1").headers.items()}
    assert scope_region(lower, "") == "ap-south-1"


@pytest.mark.parametrize(
    "authorization",
    ["", "AWS4-HMAC-SHA256 SignedHeaders=host", "AWS4-HMAC-SHA256 Credential=key/20260101/sqs/aws4_request"],
)
def test_no_scope_region_without_a_whole_credential(authorization: str) -> None:
    assert (
        scope_region({"Authorization": authorization} if authorization else {}, "Action=ListQueues") is None
    )


def test_header_names_are_looked_up_in_any_case() -> None:
    request = signed(json_request())
    lower = dataclasses.replace(
        request, headers={name.lower(): value for name, value in request.headers.items()}
    )
    assert check(lower) == KEY_ID
    proxy = dataclasses.replace(request, headers=CIMultiDictProxy(CIMultiDict(request.headers)))
    assert check(proxy) == KEY_ID


def test_a_header_sent_twice_is_signed_as_its_values_joined_by_commas() -> None:
    request = json_request()
    request.headers["X-Custom"] = "one,two"
    sent = signed(request)
    twice = CIMultiDict(sent.with_header("X-Custom", None).headers)
    twice.add("X-Custom", "one")
    twice.add("x-custom", " two ")
    assert check(dataclasses.replace(sent, headers=CIMultiDictProxy(twice))) == KEY_ID


def test_the_path_is_signed_normalised_and_encoded_twice() -> None:
    request = AWSRequest(
        method="GET", url=f"{ENDPOINT}/000000000000/./a//b/../my%20queue~!/", params={"A": "1"}
    )
    sent = signed(request)
    assert sent.path == "/000000000000/./a//b/../my%20queue~!/"
    assert check(sent) == KEY_ID


def test_the_date_header_stands_in_for_x_amz_date() -> None:
    request = json_request()
    request.headers["Date"] = "placeholder, botocore rewrites it"
    sent = signed(request)
    assert "X-Amz-Date" not in sent.headers
    assert check(sent) == KEY_ID


@style
def test_a_tampered_body_fails(make: Callable[[], AWSRequest]) -> None:
    sent = signed(make())
    assert rejection(dataclasses.replace(sent, body=sent.body + b" ")) == "SignatureDoesNotMatch"


@style
def test_a_tampered_signed_header_fails(make: Callable[[], AWSRequest]) -> None:
    assert rejection(signed(make()).with_header("Host", "localhost:9325")) == "SignatureDoesNotMatch"


def test_a_tampered_target_header_fails() -> None:
    sent = signed(json_request()).with_header("X-Amz-Target", "AmazonSQS.DeleteQueue")
    assert rejection(sent) == "SignatureDoesNotMatch"


def test_an_unsigned_header_may_change() -> None:
    assert check(signed(json_request()).with_header("User-Agent", "proxy/1.0")) == KEY_ID


@style
def test_a_tampered_path_fails(make: Callable[[], AWSRequest]) -> None:
    sent = signed(make())
    assert rejection(dataclasses.replace(sent, path="/000000000000/other-queue")) == "SignatureDoesNotMatch"


@style
def test_a_tampered_query_fails(make: Callable[[], AWSRequest]) -> None:
    sent = signed(make())
    query = "&".join(filter(None, [sent.query, "Action=DeleteQueue"]))
    assert rejection(dataclasses.replace(sent, query=query)) == "SignatureDoesNotMatch"


def test_a_query_encoded_differently_but_equal_passes() -> None:
    sent = signed(query_get_request())
    assert "Tilde=~" in sent.query and "+" in sent.query  # botocore's URL is form-encoded
    query = sent.query.replace("Tilde=~", "Tilde=%7e").replace("+", "%20")
    assert check(dataclasses.replace(sent, query=query)) == KEY_ID


def test_a_tampered_query_value_fails() -> None:
    sent = signed(query_get_request())
    assert rejection(dataclasses.replace(sent, query=sent.query.replace("Tilde=~", "Tilde=%7E%7E"))) == (
        "SignatureDoesNotMatch"
    )


@style
def test_a_tampered_method_fails(make: Callable[[], AWSRequest]) -> None:
    assert rejection(dataclasses.replace(signed(make()), method="PUT")) == "SignatureDoesNotMatch"


@style
def test_a_tampered_date_fails(make: Callable[[], AWSRequest]) -> None:
    assert rejection(signed(make()).with_header("X-Amz-Date", "20261121T100001Z")) == "SignatureDoesNotMatch"


def test_a_scope_date_other_than_the_signing_date_fails() -> None:
    sent = signed(json_request())
    authorization = sent.headers["Authorization"].replace("/20261121/", "/20261120/")
    assert rejection(sent.with_header("Authorization", authorization)) == "SignatureDoesNotMatch"


@style
def test_a_wrong_secret_fails(make: Callable[[], AWSRequest]) -> None:
    assert rejection(signed(make()), secrets={KEY_ID: "not-the-secret"}) == "SignatureDoesNotMatch"


def test_a_signing_key_kept_for_one_secret_is_never_used_for_another() -> None:
    sent = signed(json_request())
    assert check(sent) == KEY_ID  # its signing key is now kept
    assert rejection(sent, secrets={KEY_ID: "a-new-secret"}) == "SignatureDoesNotMatch"
    assert check(sent, secrets={KEY_ID: SECRET}) == KEY_ID
    # The key id with its new secret: requests signed with it pass, the old secret's fail.
    resigned = signed(json_request(), credentials=Credentials(KEY_ID, "a-new-secret"))
    assert check(resigned, secrets={KEY_ID: "a-new-secret"}) == KEY_ID
    assert rejection(resigned) == "SignatureDoesNotMatch"


def test_a_key_removed_from_the_secrets_refuses_the_requests_it_signed() -> None:
    sent = signed(json_request())
    assert check(sent) == KEY_ID
    assert rejection(sent, secrets={"AKIDOTHER": "another-secret"}) == "InvalidClientTokenId"


@style
def test_an_unknown_key_is_an_invalid_client_token(make: Callable[[], AWSRequest]) -> None:
    sent = signed(make(), credentials=Credentials("AKIDUNKNOWN", SECRET))
    assert rejection(sent) == "InvalidClientTokenId"


def test_a_signature_for_another_region_fails_under_this_regions_scope() -> None:
    sent = signed(json_request(), region="eu-west-1")
    authorization = sent.headers["Authorization"].replace("/eu-west-1/", "/us-east-1/")
    assert rejection(sent.with_header("Authorization", authorization)) == "SignatureDoesNotMatch"


def test_a_signature_for_another_service_fails() -> None:
    assert rejection(signed(json_request(), service="sns")) == "SignatureDoesNotMatch"
    sent = signed(json_request(), service="sns")
    authorization = sent.headers["Authorization"].replace("/sns/", "/sqs/")
    assert rejection(sent.with_header("Authorization", authorization)) == "SignatureDoesNotMatch"


def test_a_non_ascii_signature_fails_as_a_mismatch() -> None:
    sent = signed(json_request())
    authorization = sent.headers["Authorization"][:-1] + "é"
    assert rejection(sent.with_header("Authorization", authorization)) == "SignatureDoesNotMatch"


@style
def test_a_request_without_authentication_is_missing_its_token(make: Callable[[], AWSRequest]) -> None:
    assert rejection(received(make())) == "MissingAuthenticationToken"
    assert rejection(signed(make()).with_header("Authorization", None)) == "MissingAuthenticationToken"


@pytest.mark.parametrize(
    "authorization",
    [
        "AWS4-HMAC-SHA256",
        "AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders={headers}",
        "AWS4-HMAC-SHA256 Credential={credential}, Signature={signature}",
        "AWS4-HMAC-SHA256 SignedHeaders={headers}, Signature={signature}",
        "AWS4-HMAC-SHA1 Credential={credential}, SignedHeaders={headers}, Signature={signature}",
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261121/us-east-1/sqs, SignedHeaders={headers}, "
        "Signature={signature}",
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261121/us-east-1/sqs/aws5_request, "
        "SignedHeaders={headers}, Signature={signature}",
        "AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders=x-amz-date, Signature={signature}",
    ],
    ids=[
        "bare",
        "no-signature",
        "no-signed-headers",
        "no-credential",
        "other-algorithm",
        "short-scope",
        "bad-terminator",
        "host-unsigned",
    ],
)
def test_a_malformed_authorization_header_is_an_incomplete_signature(authorization: str) -> None:
    sent = signed(json_request())
    fields = dict(part.split("=", 1) for part in sent.headers["Authorization"].split(" ", 1)[1].split(", "))
    header = authorization.format(
        credential=fields["Credential"], headers=fields["SignedHeaders"], signature=fields["Signature"]
    )
    assert rejection(sent.with_header("Authorization", header)) == "IncompleteSignature"


def test_a_request_without_any_date_is_an_incomplete_signature() -> None:
    assert rejection(signed(json_request()).with_header("X-Amz-Date", None)) == "IncompleteSignature"


def test_a_malformed_date_is_an_incomplete_signature() -> None:
    sent = signed(json_request()).with_header("X-Amz-Date", "2026-11-21T10:00:00Z")
    assert rejection(sent) == "IncompleteSignature"


@pytest.mark.parametrize("offset", [-299.0, 0.0, 299.0, 300.0])
def test_a_clock_skew_within_five_minutes_passes(offset: float) -> None:
    assert check(signed(json_request()), now=NOW + offset) == KEY_ID


@pytest.mark.parametrize("offset", [-301.0, 301.0, -86400.0])
def test_a_clock_skew_beyond_five_minutes_is_request_expired(offset: float) -> None:
    with pytest.raises(SqsError) as caught:
        check(signed(json_request()), now=NOW + offset)
    assert caught.value.code == "RequestExpired"
    assert "20261121T100000Z" in caught.value.message


def test_the_skew_window_is_adjustable() -> None:
    sent = signed(json_request())
    args = (sent.method, sent.path, sent.query, sent.headers, sent.body, SECRETS)
    assert verify(*args, now=NOW + 600, max_skew=900) == KEY_ID
    with pytest.raises(SqsError, match="0.5 min") as caught:
        verify(*args, now=NOW + 60, max_skew=30)
    assert caught.value.code == "RequestExpired"


def test_a_real_signature_of_the_current_time_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    assert check(signed(json_request()), now=time.time()) == KEY_ID


@pytest.mark.parametrize("make", [query_get_request, query_post_request], ids=["query-get", "query-post"])
def test_a_presigned_url_passes_until_it_expires(make: Callable[[], AWSRequest]) -> None:
    sent = presigned(make(), expires=600)
    assert "Authorization" not in sent.headers
    assert "X-Amz-Signature=" in sent.query
    assert check(sent) == KEY_ID
    assert check(sent, now=NOW + 600) == KEY_ID
    assert rejection(sent, now=NOW + 601) == "RequestExpired"


def test_a_presigned_url_signed_in_the_future_is_not_yet_valid() -> None:
    assert rejection(presigned(query_get_request()), now=NOW - 301) == "RequestExpired"


def test_a_presigned_url_may_not_live_longer_than_a_week() -> None:
    assert check(presigned(query_get_request(), expires=604800)) == KEY_ID
    assert rejection(presigned(query_get_request(), expires=604801)) == "RequestExpired"


def test_a_presigned_url_with_a_session_token_passes() -> None:
    sent = presigned(query_get_request(), credentials=Credentials(KEY_ID, SECRET, "token+/="))
    assert "X-Amz-Security-Token=" in sent.query
    assert check(sent) == KEY_ID


def test_a_tampered_presigned_url_fails() -> None:
    sent = presigned(query_get_request())
    assert rejection(dataclasses.replace(sent, query=sent.query.replace("Tilde=", "Tilde=x"))) == (
        "SignatureDoesNotMatch"
    )
    longer = sent.query.replace("X-Amz-Expires=3600", "X-Amz-Expires=7200")
    assert rejection(dataclasses.replace(sent, query=longer)) == "SignatureDoesNotMatch"
    assert rejection(dataclasses.replace(sent, body=b"Action=DeleteQueue")) == "SignatureDoesNotMatch"


def test_a_presigned_url_missing_a_field_is_an_incomplete_signature() -> None:
    sent = presigned(query_get_request())
    query = "&".join(item for item in sent.query.split("&") if not item.startswith("X-Amz-Date="))
    assert rejection(dataclasses.replace(sent, query=query)) == "IncompleteSignature"


def test_an_unsigned_payload_passes_with_any_body() -> None:
    request = AWSRequest(
        method="POST",
        url="https://sqs.us-east-1.amazonaws.com/",
        headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"},
        data=b"{}",
    )
    request.context["payload_signing_enabled"] = False
    sent = signed(request)
    assert sent.headers["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    assert check(sent) == KEY_ID
    assert check(dataclasses.replace(sent, body=b'{"QueueName": "other"}')) == KEY_ID


def test_a_content_sha256_header_must_match_the_body() -> None:
    request = json_request()
    request.headers["X-Amz-Content-SHA256"] = hashlib.sha256(request.body).hexdigest()
    sent = signed(request)
    assert check(sent) == KEY_ID
    assert rejection(dataclasses.replace(sent, body=b"{}")) == "SignatureDoesNotMatch"
    wrong = json_request()
    wrong.headers["X-Amz-Content-SHA256"] = hashlib.sha256(b"{}").hexdigest()
    assert rejection(signed(wrong)) == "SignatureDoesNotMatch"
