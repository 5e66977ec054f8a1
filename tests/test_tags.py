"""Queue tags: SQS TagQueue, UntagQueue, ListQueueTags, and tags at creation."""

from __future__ import annotations

import pytest

import smq
from conftest import raw


def test_tags_are_set_overwritten_and_removed(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    assert queue.tags() == {}
    queue.tag({"team": "a", "env": "prod"})
    queue.tag({"team": "b", "cost": ""})
    assert queue.tags() == {"team": "b", "env": "prod", "cost": ""}
    queue.untag(["env", "absent"])
    assert queue.tags() == {"team": "b", "cost": ""}


def test_tag_keys_are_case_sensitive(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.tag({"Env": "1", "env": "2"})
    queue.untag(["ENV"])
    assert queue.tags() == {"Env": "1", "env": "2"}


def test_a_change_past_fifty_tags_changes_nothing(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.tag({f"k{n}": "v" for n in range(45)})
    with pytest.raises(smq.InvalidParameter, match="55 tags; a queue has at most 50"):
        queue.tag({**{f"k{n}": "new" for n in range(5)}, **{f"x{n}": "v" for n in range(10)}})
    assert queue.tags() == {f"k{n}": "v" for n in range(45)}
    # overwriting existing keys does not count against the limit
    queue.tag({**{f"k{n}": "new" for n in range(40)}, **{f"x{n}": "v" for n in range(5)}})
    assert len(queue.tags()) == 50
    with pytest.raises(smq.InvalidParameter):
        queue.tag({"one-more": "v"})
    queue.tag({"k0": "again"})
    assert queue.tags()["k0"] == "again"


@pytest.mark.parametrize(
    "tags,match",
    [
        ({"": "v"}, "1 to 128"),
        ({"k" * 129: "v"}, "1 to 128"),
        ({"k": "v" * 257}, "at most 256"),
        ({"aws:team": "v"}, "reserved"),
        ({"AWS:team": "v"}, "reserved"),
        ({"\u0000": "v"}, "may contain only"),
        ({"team\u0007": "v"}, "may contain only"),
        ({"team#1": "v"}, "may contain only"),
        ({"team": "a\u0000"}, "may contain only"),
        ({"team": "a\tb"}, "may contain only"),
        ({"team": "a\nb"}, "may contain only"),
        ({"team": "a;b"}, "may contain only"),
        ({"k": 1}, "must be a string"),
        ({1: "v"}, "must be a string"),
        ({f"k{n}": "v" for n in range(51)}, "at most 50"),
        ({}, "at least one"),
        ([("k", "v")], "mapping"),
    ],
)
def test_invalid_tags_are_refused_before_any_write(client: smq.Client, tags: object, match: str) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter, match=match):
        queue.tag(tags)  # type: ignore[arg-type]
    assert queue.tags() == {}


def test_longest_keys_and_values_are_accepted(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.tag({"k" * 128: "v" * 256, "ünïcode key": "välue"})
    assert queue.tags() == {"k" * 128: "v" * 256, "ünïcode key": "välue"}


def test_every_character_tags_allow_is_accepted(client: smq.Client) -> None:
    """Unicode letters, digits and spaces, and _ . : / = + - @ (AWS's tag pattern)."""
    queue = client.create_queue("jobs")
    tags = {"Ärger ٣٠ ²_.:/=+-@": "välue ٣٠\u00a0x_.:/=+-@", "k": ""}
    queue.tag(tags)
    assert queue.tags() == tags


@pytest.mark.parametrize("keys", [[], "team", [""], ["k" * 129], [3], ["\u0000"]])
def test_invalid_untag_keys_are_refused(client: smq.Client, keys: object) -> None:
    queue = client.create_queue("jobs")
    queue.tag({"team": "a"})
    with pytest.raises(smq.InvalidParameter):
        queue.untag(keys)  # type: ignore[arg-type]
    assert queue.tags() == {"team": "a"}


def test_tags_of_a_missing_queue_raise(client: smq.Client) -> None:
    queue = client.queue("nope")
    with pytest.raises(smq.QueueDoesNotExist):
        queue.tag({"k": "v"})
    with pytest.raises(smq.QueueDoesNotExist):
        queue.untag(["k"])
    with pytest.raises(smq.QueueDoesNotExist):
        queue.tags()
    assert not client.queue_exists("nope")


def test_create_queue_sets_tags_only_on_a_new_queue(client: smq.Client) -> None:
    queue = client.create_queue("jobs", tags={"team": "a"}, visibility_timeout=40)
    assert queue.tags() == {"team": "a"}
    again = client.create_queue("jobs", tags={"team": "b", "other": "x"}, visibility_timeout=40)
    assert again.tags() == {"team": "a"}  # an existing queue keeps its tags, as in SQS


def test_create_queue_with_invalid_tags_creates_nothing(client: smq.Client) -> None:
    with pytest.raises(smq.InvalidParameter):
        client.create_queue("jobs", tags={"aws:x": "v"})
    with pytest.raises(smq.InvalidParameter):
        client.create_queue("jobs", tags={f"k{n}": "v" for n in range(51)})
    assert not client.queue_exists("jobs")


def test_create_queue_with_fifty_tags(client: smq.Client) -> None:
    tags = {f"k{n}": f"v{n}" for n in range(50)}
    assert client.create_queue("jobs", tags=tags).tags() == tags


def test_tags_are_deleted_with_the_queue(client: smq.Client) -> None:
    client.create_queue("jobs", tags={"team": "a"})
    client.delete_queue("jobs")
    assert raw(client).exists(smq.Queue(client, "jobs").keys.tags) == 0
    assert client.create_queue("jobs").tags() == {}


def test_untag_many_keys_at_once(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    queue.tag({f"k{n}": "v" for n in range(50)})
    queue.untag([f"k{n}" for n in range(1000)])
    assert queue.tags() == {}
