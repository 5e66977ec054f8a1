"""Data layout 2's forms in corners: each test runs on a queue in layout 1 and one in layout 2, which
must behave alike (a first receive's state in its in-flight member, records inline in the list)."""

from __future__ import annotations

import pytest

import smq
from conftest import Clock, raw

BACKENDS = ["redis", "fake"]


@pytest.fixture(params=[1, 2])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The data layout of the queues the test creates (``SMQ_LAYOUT``)."""
    monkeypatch.setenv("SMQ_LAYOUT", str(request.param))
    return int(request.param)


@pytest.mark.parametrize("client", BACKENDS, indirect=True)
def test_message_back_from_a_gone_origin_is_not_delivered_twice(
    client: smq.Client, clock: Clock, layout: int
) -> None:
    # A dead letter whose origin queue is gone stays in the dead-letter queue when redriven: it
    # comes back under its own id, with no receive state (receive count 0). If its id is also in
    # the visible list as a ghost (hidden again by change_visibility after its timeout was set
    # to 0), the receive that takes that ghost entry gives the message out; the one that takes
    # its new entry must see it in flight (layout 1: ZMSCORE of the id) and skip it.
    dlq = client.create_queue("dlq", visibility_timeout=30)
    source = client.create_queue("src", visibility_timeout=10, redrive_policy=smq.RedrivePolicy("dlq", 1))
    assert raw(client).hget(dlq.keys.meta, "layout") == str(layout).encode()
    source.send("x")
    assert len(source.receive()) == 1
    clock.advance(10)
    assert source.receive() == []  # dead-lettered
    client.delete_queue("src")

    (held,) = dlq.receive()
    dlq.change_visibility(held.receipt_handle, 0)
    dlq.change_visibility(held.receipt_handle, 30)  # hidden again: its id stays in the list
    clock.advance(30)
    assert client.redrive("dlq") == 0  # its origin is gone: it stays, under its id
    assert dlq.attributes().visible == 1

    first = dlq.receive(1)
    second = dlq.receive(10)
    assert [m.body for m in first] == ["x"]
    assert second == [], "one message, given out twice at once"
    assert dlq.attributes().in_flight == 1
    assert raw(client).zcard(dlq.keys.inflight) == 1


@pytest.mark.parametrize("client", BACKENDS, indirect=True)
def test_delete_by_a_wrong_token_on_a_first_receive_records_a_stale_receipt(
    client: smq.Client, layout: int
) -> None:
    # As change_visibility does, and as layout 1 does: a delete whose token is not
    # that of the message in flight is a stale receipt, recorded in the event stream.
    queue = client.create_queue("jobs", visibility_timeout=30, event_stream_max_len=100)
    queue.send("x")
    (message,) = queue.receive()
    issuer, stored, _ = message.receipt_handle.rsplit(":", 2)
    wrong = f"{issuer}:{stored}:{'A' * 22}"
    assert queue.delete(wrong) is False
    assert queue.attributes().counters["stale_receipts"] == 1
    assert [(e.kind, e.receive_count, e.extra) for e in queue.events() if e.kind == "stale_receipt"] == [
        ("stale_receipt", 1, "delete")
    ]
    assert queue.delete(message.receipt_handle) is True
