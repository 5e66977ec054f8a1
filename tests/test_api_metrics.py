"""`smq serve`'s own metrics at GET /metrics: requests, errors and latency by action,
scraped from the real server after real boto3 calls."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from botocore.exceptions import ClientError

from http_support import KEY_ID, SECRET, Server, http_get
from metrics_support import Samples, scrape
from smq.embedded import EmbeddedRedis


def _get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_api_counts_requests_by_action_and_status(sqs: Any, sqs_server: Any) -> None:
    before = scrape(f"{sqs_server.url}/metrics")
    url = sqs.create_queue(QueueName="counted")["QueueUrl"]
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{n}")
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    after = scrape(f"{sqs_server.url}/metrics")

    def delta(name: str, **labels: str) -> float:
        return _get(after, name, **labels) - _get(before, name, **labels)

    assert delta("smq_api_requests_total", action="SendMessage", code="200") == 3
    assert delta("smq_api_requests_total", action="CreateQueue", code="200") == 1
    assert delta("smq_api_request_duration_seconds_count", action="ReceiveMessage") == 1
    assert delta("smq_api_request_duration_seconds_bucket", action="SendMessage", le="+Inf") == 3
    assert _get(after, "smq_api_requests_in_flight") == 0


def test_api_counts_errors_by_sqs_error_code_and_bounds_unknown_actions(sqs: Any, sqs_server: Any) -> None:
    before = scrape(f"{sqs_server.url}/metrics")
    with pytest.raises(ClientError):
        sqs.get_queue_url(QueueName="no-such-queue")
    request = urllib.request.Request(
        sqs_server.url, data=b"Action=NoSuchAction&Version=2012-11-05", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(request)
    after = scrape(f"{sqs_server.url}/metrics")

    def delta(name: str, **labels: str) -> float:
        return _get(after, name, **labels) - _get(before, name, **labels)

    assert delta("smq_api_errors_total", action="GetQueueUrl", error="QueueDoesNotExist") == 1
    assert delta("smq_api_requests_total", action="GetQueueUrl", code="400") == 1
    assert delta("smq_api_errors_total", action="unknown", error="InvalidAction") == 1
    assert not any(dict(labels).get("action") == "NoSuchAction" for _, labels in after)


TOKEN = "a-long-enough-metrics-token"


def test_with_access_keys_metrics_can_require_a_bearer_token(http_redis: EmbeddedRedis) -> None:
    server = Server(http_redis.url, "--access-key", f"{KEY_ID}:{SECRET}", "--metrics-token", TOKEN)
    try:
        status, body = http_get(f"{server.url}/metrics")
        assert status == 401 and "smq_api" not in body
        assert (
            http_get(f"{server.url}/metrics", {"Authorization": "Bearer wrong-token-wrong-token"})[0] == 401
        )
        status, body = http_get(f"{server.url}/metrics", {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and "smq_api_requests_in_flight" in body
    finally:
        server.stop()


def test_metrics_can_be_served_on_a_listener_of_their_own(http_redis: EmbeddedRedis) -> None:
    server = Server(http_redis.url, "--access-key", f"{KEY_ID}:{SECRET}", "--metrics-port", "0")
    try:
        found = re.search(r"metrics on (http://\S+/metrics)", server.logs())
        deadline = time.monotonic() + 10
        while found is None and time.monotonic() < deadline:
            time.sleep(0.05)
            found = re.search(r"metrics on (http://\S+/metrics)", server.logs())
        assert found is not None, server.logs()
        status, body = http_get(found.group(1))
        assert status == 200 and "smq_api_requests_in_flight" in body
        status, body = http_get(f"{server.url}/metrics")  # not on the API's listener any more
        assert "smq_api_requests_in_flight" not in body
        assert "/metrics answers anyone" not in server.logs()
    finally:
        server.stop()


def test_with_access_keys_and_metrics_left_open_the_server_warns(http_redis: EmbeddedRedis) -> None:
    server = Server(http_redis.url, "--access-key", f"{KEY_ID}:{SECRET}")
    try:
        deadline = time.monotonic() + 10
        while "/metrics answers anyone" not in server.logs():
            assert time.monotonic() < deadline, server.logs()
            time.sleep(0.05)
    finally:
        server.stop()
