"""A queue's history: samples of its counts, one per step, kept beside it in Redis."""

from __future__ import annotations

import pytest

import smq
from conftest import Clock, raw
from smq.operations import _history

START = 1_800_000_000  # the clock fixture's start, in seconds


def test_a_sample_per_step_with_the_counts_and_counters(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    queue.send_batch([smq.SendEntry(str(i), f"m{i}") for i in range(5)])
    (message, *_) = queue.receive(2)
    queue.delete(message)
    assert queue._sample() is True
    clock.advance(3)
    assert queue._sample() is False  # the same 10 s step: kept once, whoever samples
    clock.advance(7)
    queue.send("late", delay_seconds=60)
    assert queue._sample() is True
    first, second = queue.history()
    assert first == smq.Sample(
        at=START, visible=3, in_flight=1, delayed=0, sent=5, received=2, deleted=1,
        visibility_expired=0, dead_lettered=0,
    )  # fmt: skip
    assert (second.at, second.delayed, second.sent) == (START + 10, 1, 6)


def test_the_history_keeps_the_newest_samples_only(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    for _ in range(8):
        queue._sample(step=1, keep=5)
        clock.advance(1)
    kept = queue.history()
    assert [s.at for s in kept] == [START + i for i in range(3, 8)]
    assert [s.at for s in queue.history(limit=2)] == [START + 6, START + 7]
    # A smaller keep trims a few per sample, not all at once: bounded work.
    for _ in range(2):
        queue._sample(step=1, keep=1)
        clock.advance(1)
    assert len(queue.history()) == 1


def test_a_deleted_queue_gets_no_history_back(client: smq.Client, clock: Clock) -> None:
    queue = client.create_queue("jobs")
    queue._sample()
    assert raw(client).exists(queue.keys.history)
    info = queue.attributes()
    client.delete_queue("jobs")
    assert not raw(client).exists(queue.keys.history)
    with pytest.raises(smq.QueueDoesNotExist):
        _history.record(client, queue.keys, info, 10, 10)
    assert not raw(client).exists(queue.keys.history)
    with pytest.raises(smq.QueueDoesNotExist):
        queue.history()


@pytest.mark.parametrize(("step", "keep"), [(0, 10), (3601, 10), (10, 0), (10, 10_001)])
def test_bad_arguments_are_refused(client: smq.Client, step: int, keep: int) -> None:
    queue = client.create_queue("jobs")
    with pytest.raises(smq.InvalidParameter):
        queue._sample(step=step, keep=keep)
    queue._sample()
    with pytest.raises(smq.InvalidParameter):  # also with a sample of this step kept
        queue._sample(step=step, keep=keep)
    for limit in (0, 10_001):
        with pytest.raises(smq.InvalidParameter):
            queue.history(limit=limit)
    assert len(queue.history()) == 1


def test_the_script_checks_its_arguments_before_writing(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    for args in (("", 999, 10, "1|2"), ("", 1000, 10, "1|x"), ("", 1000, 10, "1" * 301), ("", 1000, 0, "1")):
        with pytest.raises(smq.InvalidParameter):
            client.run("history_add", queue.keys, args, queue="jobs")
    assert not raw(client).exists(queue.keys.history)


def test_a_sample_of_an_older_version_reads_with_zeros_for_what_it_lacks(client: smq.Client) -> None:
    queue = client.create_queue("jobs")
    client.run("history_add", queue.keys, ("", 1000, 10, "4|1"), queue="jobs")
    (sample,) = queue.history()
    assert (sample.visible, sample.in_flight, sample.delayed, sample.dead_lettered) == (4, 1, 0, 0)


def test_sample_queues_samples_each_queue_once_a_step(client: smq.Client, clock: Clock) -> None:
    for name in ("a", "b", "c"):
        client.create_queue(name).send("x")
    assert _history.sample_queues(client) == 3
    assert _history.sample_queues(client) == 0
    assert _history.sample_queues(client, limit=2) == 0
    clock.advance(10)
    assert _history.sample_queues(client, limit=2) == 2
    assert [len(client.queue(n).history()) for n in ("a", "b", "c")] == [2, 2, 1]


def test_sampling_stops_between_two_queues_when_asked(client: smq.Client) -> None:
    for name in ("a", "b", "c"):
        client.create_queue(name)
    asked = iter([False, True])
    assert _history.sample_queues(client, stopping=lambda: next(asked)) == 1
    assert [len(client.queue(n).history()) for n in ("a", "b", "c")] == [1, 0, 0]
