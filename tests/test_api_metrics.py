"""`smq serve`'s own metrics at GET /metrics: requests, errors and latency by action,
scraped from the real server after real boto3 calls."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
from botocore.exceptions import ClientError

from metrics_support import Samples, scrape


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
