"""Dead-letter sources (SQS ListDeadLetterSourceQueues): a verified reverse index."""

from __future__ import annotations

from typing import Any

import pytest

import smq
from conftest import raw


def _source(client: smq.Client, name: str, dlq: str) -> smq.Queue:
    return client.create_queue(name, redrive_policy=smq.RedrivePolicy(dlq, 3))


def test_lists_the_queues_whose_policy_names_it(client: smq.Client) -> None:
    client.create_queue("dlq")
    client.create_queue("other-dlq")
    for name in ["b", "a", "c"]:
        _source(client, name, "dlq")
    _source(client, "d", "other-dlq")
    client.create_queue("plain")
    assert client.dead_letter_sources("dlq") == ["a", "b", "c"]
    assert client.dead_letter_sources("other-dlq") == ["d"]
    assert client.dead_letter_sources("plain") == []


def test_a_source_that_changes_or_drops_its_policy_disappears(client: smq.Client) -> None:
    client.create_queue("dlq")
    client.create_queue("dlq2")
    a = _source(client, "a", "dlq")
    b = _source(client, "b", "dlq")
    a.set_attributes(redrive_policy=smq.RedrivePolicy("dlq2", 5))
    assert client.dead_letter_sources("dlq") == ["b"]
    assert client.dead_letter_sources("dlq2") == ["a"]
    b.set_attributes(redrive_policy=None)
    assert client.dead_letter_sources("dlq") == []
    assert raw(client).zcard(client.queue("dlq").keys.sources) == 0  # stale entries dropped on read
    b.set_attributes(redrive_policy=smq.RedrivePolicy("dlq", 2))
    assert client.dead_letter_sources("dlq") == ["b"]


def test_a_deleted_source_disappears(client: smq.Client) -> None:
    client.create_queue("dlq")
    _source(client, "a", "dlq")
    _source(client, "b", "dlq")
    client.delete_queue("a")
    assert client.dead_letter_sources("dlq") == ["b"]


def test_a_refused_create_leaves_no_source(client: smq.Client) -> None:
    client.create_queue("dlq")
    client.create_queue("a")
    with pytest.raises(smq.QueueNameExists):
        _source(client, "a", "dlq")  # exists without a policy
    assert client.dead_letter_sources("dlq") == []


def test_pages_by_name(client: smq.Client) -> None:
    client.create_queue("dlq")
    names = [f"s{n}" for n in range(7)]
    for name in names:
        _source(client, name, "dlq")
    assert client.dead_letter_sources("dlq", limit=3) == names[:3]
    assert client.dead_letter_sources("dlq", limit=3, after="s2") == names[3:6]
    assert client.dead_letter_sources("dlq", limit=3, after="s5") == names[6:]
    assert client.dead_letter_sources("dlq", limit=1000, after="s6") == []
    assert client.dead_letter_sources("dlq", after="s1") == names[2:]


def test_stale_entries_do_not_shorten_a_page(client: smq.Client) -> None:
    client.create_queue("dlq")
    for n in range(8):
        _source(client, f"s{n}", "dlq")
    for n in (1, 2, 4):
        client.queue(f"s{n}").set_attributes(redrive_policy=None)
    assert client.dead_letter_sources("dlq", limit=3) == ["s0", "s3", "s5"]
    assert client.dead_letter_sources("dlq", limit=3, after="s5") == ["s6", "s7"]


def test_missing_queue_and_bad_arguments_raise(client: smq.Client) -> None:
    with pytest.raises(smq.QueueDoesNotExist):
        client.dead_letter_sources("nope")
    client.create_queue("dlq")
    for kwargs in ({"limit": 0}, {"limit": 1001}, {"after": "a b"}):
        with pytest.raises(smq.InvalidParameter):
            client.dead_letter_sources("dlq", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(smq.InvalidQueueName):
        client.dead_letter_sources("a b")


def test_a_reader_between_the_index_write_and_the_policy_cannot_hide_the_source(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.create_queue("dlq")
    queue = client.create_queue("a")
    real_run = client.run
    seen: list[list[str]] = []

    def reader_in_between(script: str, *args: Any, **kwargs: Any) -> Any:
        if script == "set_attributes":
            seen.append(client.dead_letter_sources("dlq"))  # drops "a": no policy yet
        return real_run(script, *args, **kwargs)

    monkeypatch.setattr(client, "run", reader_in_between)
    queue.set_attributes(redrive_policy=smq.RedrivePolicy("dlq", 3))
    monkeypatch.undo()
    assert seen == [[]]
    assert client.dead_letter_sources("dlq") == ["a"]


def test_the_index_is_deleted_with_the_dead_letter_queue(client: smq.Client) -> None:
    client.create_queue("dlq")
    _source(client, "a", "dlq")
    client.delete_queue("dlq")
    assert raw(client).exists(client.queue("dlq").keys.sources) == 0
