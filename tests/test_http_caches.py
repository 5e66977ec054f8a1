"""What ``smq serve`` keeps between requests to spare work per request, and that keeping it
changes no answer: queue URLs resolved, access lines, metric children (signing keys: in
``test_sigv4.py``)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from smq.server._access_log import access_line
from smq.server._context import Context, ServerConfig
from smq.server._errors import SqsError
from smq.server._metrics import ApiMetrics

OTHER_ACCOUNT = "111111111111"


def _context(
    region: str = "", sender: str = "", kept: dict[tuple[str, str, str], str] | None = None
) -> Context:
    config = ServerConfig(access_keys={"tenant": "s", "own": "t"}, key_accounts={"tenant": OTHER_ACCOUNT})
    none = cast(Any, None)
    return Context(
        client=none,
        config=config,
        call=none,
        drive=none,
        polls=none,
        base_url="http://localhost:9324",
        sender=sender,
        region=region,
        resolved={} if kept is None else kept,
    )


def test_a_queue_url_resolved_once_is_resolved_alike_for_each_region_and_account() -> None:
    kept: dict[tuple[str, str, str], str] = {}
    home, abroad = _context(kept=kept), _context("eu-west-1", kept=kept)
    tenant = _context(sender="tenant", kept=kept)
    for _ in range(2):  # the second time from what was kept
        assert home.queue_name({"QueueUrl": "orders"}) == "orders"
        assert abroad.queue_name({"QueueUrl": "orders"}) == "eu-west-1:000000000000:orders"
        assert tenant.queue_name({"QueueUrl": "orders"}) == f"us-east-1:{OTHER_ACCOUNT}:orders"
        url = "http://localhost:9324/000000000000/orders"
        assert abroad.queue_name({"QueueUrl": url}) == "eu-west-1:000000000000:orders"
        assert home.queue_name({"QueueUrl": url}) == "orders"
    assert len(kept) == 5


def test_a_queue_url_that_names_no_queue_is_refused_every_time_and_not_kept() -> None:
    kept: dict[tuple[str, str, str], str] = {}
    context = _context(kept=kept)
    for _ in range(2):
        with pytest.raises(SqsError) as caught:
            context.queue_name({"QueueUrl": "http://localhost:9324/not-an-account/orders"})
        assert caught.value.code == "QueueDoesNotExist"
    assert kept == {}


@pytest.mark.parametrize(
    "fields",
    [
        (
            1795736766.168,
            "29747e30-0b33-46a4-94a8-2e667ccf61ca",
            "127.0.0.1",
            "json",
            "SendMessage",
            200,
            None,
            1.23,
        ),
        (1.0, "x", None, "query", 'Wé"ird\\ \udcff \x00\n', 499, "ClientClosedRequest", 0.0),
        (1e20, "", "::1", "json", "", 500, "InternalFailure", 12345.67),
    ],
)
def test_an_access_line_is_the_json_object_of_its_fields(fields: tuple[Any, ...]) -> None:
    names = ("time", "request_id", "remote", "protocol", "action", "status", "error", "ms")
    assert access_line(*fields) == json.dumps(dict(zip(names, fields, strict=True)))


def test_metrics_kept_per_action_and_status_count_each_apart() -> None:
    metrics = ApiMetrics(lambda: 0)
    for status, error in ((200, None), (200, None), (400, "InvalidParameterValue"), (200, None)):
        metrics.observe("SendMessage", status, error, 0.001)
    metrics.observe("NoSuchAction", 400, "InvalidAction", 0.001)
    body, _ = metrics.render(None)
    text = body.decode()
    assert 'smq_api_requests_total{action="SendMessage",code="200"} 3.0' in text
    assert 'smq_api_requests_total{action="SendMessage",code="400"} 1.0' in text
    assert 'smq_api_requests_total{action="unknown",code="400"} 1.0' in text
    assert 'smq_api_request_duration_seconds_count{action="SendMessage"} 4.0' in text
    assert 'smq_api_errors_total{action="SendMessage",error="InvalidParameterValue"} 1.0' in text
