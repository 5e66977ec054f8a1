"""Message move tasks: SQS StartMessageMoveTask, ListMessageMoveTasks,
CancelMessageMoveTask, and the leased runner that does the moving."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import smq
from conftest import Clock, raw
from smq.core._keys import MOVE_TASKS
from smq.operations import _move_tasks, _moves


def _fill(queue: smq.Queue, count: int) -> list[str]:
    bodies = [f"{queue.name}-{n}" for n in range(count)]
    for start in range(0, count, 10):
        queue.send_batch([smq.SendEntry(f"e{i}", body) for i, body in enumerate(bodies[start : start + 10])])
    return bodies


def _drain(queue: smq.Queue) -> list[str]:
    bodies: list[str] = []
    while batch := queue.receive(10):
        bodies += [m.body for m in batch]
        queue.delete_batch([smq.DeleteEntry(f"e{i}", m.receipt_handle) for i, m in enumerate(batch)])
    return bodies


def _dead_letters(client: smq.Client, clock: Clock | None, counts: dict[str, int]) -> smq.Queue:
    """A dead-letter queue 'dlq' holding ``counts[name]`` dead letters of each source queue.

    Without a test clock, a clock running a minute behind Redis's hurries the
    dead-lettering along, then hands over to Redis's own.
    """
    if clock is None:
        _dead_letters(client, Clock(client, start_ms=int(time.time() * 1000) - 60_000), counts)
        client._now_ms_override = None
        return client.queue("dlq")
    dlq = client.create_queue("dlq")
    for name, count in counts.items():
        queue = client.create_queue(name, visibility_timeout=1, redrive_policy=smq.RedrivePolicy("dlq", 1))
        _fill(queue, count)
        while queue.receive(10):
            pass
    clock.advance(1)
    for name in counts:
        while client.queue(name).receive(10) or client.queue(name).attributes().visible:
            pass
    assert dlq.attributes().visible == sum(counts.values())
    return dlq


def test_start_records_a_running_task_and_moves_nothing(client: smq.Client, clock: Clock) -> None:
    dlq = _dead_letters(client, clock, {"a": 3, "b": 2})
    task = client.start_move_task("dlq")
    assert (task.status, task.source, task.destination, task.max_per_second) == ("RUNNING", "dlq", None, None)
    assert (task.moved, task.to_move, task.failure_reason) == (0, 5, None)
    assert task.started_at == clock.now_ms / 1000
    assert _move_tasks.parse_handle(task.handle)[0] == "dlq"
    assert client.list_move_tasks("dlq") == [task]
    assert dlq.attributes().visible == 5
    assert raw(client).zrange(MOVE_TASKS, 0, -1) == [task.handle.encode()]


def test_the_runner_moves_each_message_back_to_its_queue(client: smq.Client, clock: Clock) -> None:
    dlq = _dead_letters(client, clock, {"a": 13, "b": 4})
    task = client.start_move_task("dlq")
    assert client.run_move_tasks(owner="w1") == 1
    (done,) = client.list_move_tasks("dlq")
    assert (done.handle, done.status, done.moved, done.to_move) == (task.handle, "COMPLETED", 17, 17)
    assert dlq.attributes().visible == 0
    assert sorted(_drain(client.queue("a"))) == sorted(f"a-{n}" for n in range(13))
    assert sorted(_drain(client.queue("b"))) == sorted(f"b-{n}" for n in range(4))
    assert raw(client).zcard(MOVE_TASKS) == 0
    assert client.run_move_tasks(owner="w1") == 0


def test_with_a_destination_every_message_goes_there(client: smq.Client, clock: Clock) -> None:
    dlq = _dead_letters(client, clock, {"a": 3, "b": 3})
    other = client.create_queue("other")
    task = client.start_move_task("dlq", destination="other", max_per_second=500)
    assert (task.destination, task.max_per_second) == ("other", 500)
    client.run_move_tasks(owner="w1")
    assert client.list_move_tasks("dlq")[0].status == "COMPLETED"
    assert dlq.attributes().visible == 0
    assert len(_drain(other)) == 6
    assert client.queue("a").attributes().visible == 0


def test_a_message_of_no_known_source_stays_and_fails_the_task(client: smq.Client, clock: Clock) -> None:
    dlq = _dead_letters(client, clock, {"a": 2})
    dlq.send("sent to the dead-letter queue directly")
    client.start_move_task("dlq")
    client.run_move_tasks(owner="w1")
    (task,) = client.list_move_tasks("dlq")
    # As SQS: the task fails, naming why; the messages it could move are moved.
    assert (task.status, task.moved, task.to_move) == ("FAILED", 2, 3)
    assert task.failure_reason == "CouldNotDetermineMessageSource"
    assert _drain(dlq) == ["sent to the dead-letter queue directly"]
    # To a named destination, every message has somewhere to go.
    dlq.send("sent to the dead-letter queue directly")
    client.create_queue("other")
    client.start_move_task("dlq", destination="other")
    client.run_move_tasks(owner="w1")
    assert client.list_move_tasks("dlq")[0].status == "COMPLETED"
    assert _drain(client.queue("other")) == ["sent to the dead-letter queue directly"]


def test_a_task_stops_at_the_count_it_started_with(client: smq.Client, clock: Clock) -> None:
    dlq = _dead_letters(client, clock, {"a": 3})
    client.start_move_task("dlq", destination="a")
    dlq.send("after the start")
    client.run_move_tasks(owner="w1")
    (task,) = client.list_move_tasks("dlq")
    assert (task.status, task.moved, task.to_move) == ("COMPLETED", 3, 3)
    assert _drain(dlq) == ["after the start"]


def test_start_is_refused_while_a_task_is_active(client: smq.Client, clock: Clock) -> None:
    _dead_letters(client, clock, {"a": 2})
    first = client.start_move_task("dlq")
    with pytest.raises(smq.MoveTaskActive) as refused:
        client.start_move_task("dlq", destination="a")
    assert refused.value.handle == first.handle
    client.cancel_move_task(first.handle)
    with pytest.raises(smq.MoveTaskActive):
        client.start_move_task("dlq")  # cancelling is still active
    client.run_move_tasks(owner="w1")
    second = client.start_move_task("dlq")
    assert [t.handle for t in client.list_move_tasks("dlq")] == [second.handle, first.handle]
    assert raw(client).zrange(MOVE_TASKS, 0, -1) == [second.handle.encode()]


def test_start_checks_its_arguments(client: smq.Client, clock: Clock) -> None:
    _dead_letters(client, clock, {"a": 1})
    client.create_queue("plain")
    with pytest.raises(smq.QueueDoesNotExist):
        client.start_move_task("missing")
    with pytest.raises(smq.InvalidParameter, match="not a dead-letter queue"):
        client.start_move_task("plain")
    with pytest.raises(smq.QueueDoesNotExist, match="destination"):
        client.start_move_task("dlq", destination="missing")
    with pytest.raises(smq.InvalidParameter, match="into itself"):
        client.start_move_task("dlq", destination="dlq")
    for rate in (0, 501, 1.5, True):
        with pytest.raises(smq.InvalidParameter):
            client.start_move_task("dlq", max_per_second=rate)  # type: ignore[arg-type]
    with pytest.raises(smq.InvalidQueueName):
        client.start_move_task("a b")
    assert client.list_move_tasks("dlq") == []
    assert raw(client).zcard(MOVE_TASKS) == 0


def test_a_queue_whose_sources_left_is_no_longer_a_dead_letter_queue(
    client: smq.Client, clock: Clock
) -> None:
    _dead_letters(client, clock, {"a": 1})
    client.queue("a").set_attributes(redrive_policy=None)
    with pytest.raises(smq.InvalidParameter, match="not a dead-letter queue"):
        client.start_move_task("dlq")


def test_a_cancel_during_a_chunk_ends_the_task_after_it(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    dlq = _dead_letters(client, clock, {"a": 250})
    task = client.start_move_task("dlq")
    real_redrive = _move_tasks.redrive_counted

    def cancelled_meanwhile(*args: Any) -> Any:
        counts = real_redrive(*args)
        if counts[0] and client.list_move_tasks("dlq")[0].status == "RUNNING":
            client.cancel_move_task(task.handle)
        return counts

    monkeypatch.setattr(_move_tasks, "redrive_counted", cancelled_meanwhile)
    assert client.run_move_tasks(owner="w1") == 1
    (cancelled,) = client.list_move_tasks("dlq")
    assert (cancelled.status, cancelled.moved) == ("CANCELLED", 100)
    assert dlq.attributes().visible == 150
    assert client.queue("a").attributes().visible == 100
    with pytest.raises(smq.MoveTaskNotFound, match="CANCELLED"):
        client.cancel_move_task(task.handle)


def test_a_cancel_during_a_rate_limit_pause_moves_no_more(client: smq.Client) -> None:
    dlq = _dead_letters(client, None, {"a": 5})
    task = client.start_move_task("dlq", max_per_second=1)
    runner = threading.Thread(
        target=client.run_move_tasks, kwargs={"owner": "w1", "deadline": time.monotonic() + 1.8}
    )
    runner.start()
    time.sleep(0.3)  # the runner moved one message and waits a second before the next
    client.cancel_move_task(task.handle)
    runner.join()
    (cancelled,) = client.list_move_tasks("dlq")
    assert (cancelled.status, cancelled.moved) == ("CANCELLED", 1)
    assert dlq.attributes().visible == 4


def test_cancel_returns_the_task_and_the_runner_ends_it(client: smq.Client, clock: Clock) -> None:
    dlq = _dead_letters(client, clock, {"a": 2})
    task = client.start_move_task("dlq")
    cancelling = client.cancel_move_task(task.handle)
    assert (cancelling.status, cancelling.moved, cancelling.handle) == ("CANCELLING", 0, task.handle)
    assert client.cancel_move_task(task.handle).status == "CANCELLING"  # a repeated cancel is harmless
    assert client.list_move_tasks("dlq")[0].status == "CANCELLING"
    assert client.run_move_tasks(owner="w1") == 1
    assert client.list_move_tasks("dlq")[0].status == "CANCELLED"
    assert dlq.attributes().visible == 2
    assert raw(client).zcard(MOVE_TASKS) == 0


@pytest.mark.parametrize("handle", ["", "garbage", "!!!!", "ZGxxOnNob3J0", "x" * 500, None])
def test_malformed_handles_are_not_found(client: smq.Client, handle: Any) -> None:
    with pytest.raises(smq.MoveTaskNotFound):
        client.cancel_move_task(handle)


def test_unknown_and_ended_tasks_are_not_found(client: smq.Client, clock: Clock) -> None:
    _dead_letters(client, clock, {"a": 1})
    with pytest.raises(smq.MoveTaskNotFound):
        client.cancel_move_task(_move_tasks.make_handle("dlq", "A" * 16))
    with pytest.raises(smq.MoveTaskNotFound):
        client.cancel_move_task(_move_tasks.make_handle("nosuchqueue", "A" * 16))
    task = client.start_move_task("dlq")
    client.run_move_tasks(owner="w1")
    with pytest.raises(smq.MoveTaskNotFound, match="COMPLETED"):
        client.cancel_move_task(task.handle)
    client.delete_queue("dlq")
    with pytest.raises(smq.MoveTaskNotFound):
        client.cancel_move_task(task.handle)


def test_listing_keeps_the_last_ten_newest_first(client: smq.Client, clock: Clock) -> None:
    _dead_letters(client, clock, {"a": 1})
    handles = []
    for _ in range(12):
        handles.append(client.start_move_task("dlq", destination="a").handle)
        client.run_move_tasks(owner="w1")
        clock.advance(1)
    tasks = client.list_move_tasks("dlq")
    assert [t.handle for t in tasks] == handles[::-1][:10]
    assert [t.started_at for t in tasks] == sorted((t.started_at for t in tasks), reverse=True)
    assert [t.handle for t in client.list_move_tasks("dlq", limit=1)] == handles[-1:]
    assert raw(client).hlen(client.queue("dlq").keys.tasks) == 11  # ten tasks and their order
    with pytest.raises(smq.MoveTaskNotFound):
        client.cancel_move_task(handles[0])
    for limit in (0, 11):
        with pytest.raises(smq.InvalidParameter):
            client.list_move_tasks("dlq", limit=limit)
    with pytest.raises(smq.QueueDoesNotExist):
        client.list_move_tasks("missing")


def test_rate_limit_is_honoured_across_calls(client: smq.Client) -> None:
    dlq = _dead_letters(client, None, {"a": 10})
    client.start_move_task("dlq", max_per_second=3)
    # Three a second: a chunk of three, then a second's pause, which a
    # deadline sooner than that does not wait out.
    began = time.monotonic()
    assert client.run_move_tasks(owner="w1", deadline=began + 0.6) == 1
    assert time.monotonic() - began < 0.6
    (task,) = client.list_move_tasks("dlq")
    assert (task.status, task.moved) == ("RUNNING", 3)
    # The pause is kept in Redis: another call, by any owner, keeps the pace.
    client.run_move_tasks(owner="w1", deadline=time.monotonic() + 0.3)
    assert client.list_move_tasks("dlq")[0].moved == 3
    time.sleep(max(0.0, began + 1.0 - time.monotonic()))
    client.run_move_tasks(owner="w1", deadline=time.monotonic() + 0.6)
    assert client.list_move_tasks("dlq")[0].moved == 6
    assert dlq.attributes().visible == 4


def test_the_runner_returns_by_its_deadline(client: smq.Client, clock: Clock) -> None:
    _dead_letters(client, clock, {"a": 2})
    client.start_move_task("dlq")
    assert client.run_move_tasks(owner="w1", deadline=time.monotonic()) == 0
    assert client.list_move_tasks("dlq")[0].status == "RUNNING"
    assert client.run_move_tasks(owner="w2") == 1


def test_a_dead_runners_task_is_adopted_after_its_lease(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    dlq = _dead_letters(client, clock, {"a": 250})
    client.start_move_task("dlq")
    real_move_in = _moves._move_in
    calls = []

    def die_in_the_second_chunk(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("the runner's process died between step 1 and step 2")
        real_move_in(*args, **kwargs)

    monkeypatch.setattr(_moves, "_move_in", die_in_the_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        client.run_move_tasks(owner="dead", lease=5)
    monkeypatch.undo()
    (task,) = client.list_move_tasks("dlq")
    assert (task.status, task.moved) == ("RUNNING", 100)
    assert dlq.attributes().moving == 100  # taken out, not yet stored
    assert client.run_move_tasks(owner="alive", lease=5) == 0  # the lease still holds
    clock.advance(5)
    assert client.run_move_tasks(owner="alive", lease=5) == 1
    (task,) = client.list_move_tasks("dlq")
    assert (task.status, task.moved, task.to_move) == ("COMPLETED", 250, 250)
    info = dlq.attributes()
    assert (info.visible, info.moving) == (0, 0)
    bodies = _drain(client.queue("a"))
    assert sorted(bodies) == sorted(f"a-{n}" for n in range(250))  # none lost, none twice


def test_destination_deleted_fails_the_task_and_keeps_the_messages(client: smq.Client, clock: Clock) -> None:
    dlq = _dead_letters(client, clock, {"a": 5})
    client.create_queue("other")
    client.start_move_task("dlq", destination="other")
    client.delete_queue("other")
    assert client.run_move_tasks(owner="w1") == 1
    (task,) = client.list_move_tasks("dlq")
    assert task.status == "FAILED"
    assert task.failure_reason == "AWS.SimpleQueueService.NonExistentQueue"  # SQS's reason
    info = dlq.attributes()
    assert (info.visible, info.moving) == (5, 0)
    assert raw(client).zcard(MOVE_TASKS) == 0
    client.start_move_task("dlq")  # the source is free again


def test_a_deleted_source_takes_its_tasks_along(client: smq.Client, clock: Clock) -> None:
    _dead_letters(client, clock, {"a": 2})
    task = client.start_move_task("dlq")
    client.delete_queue("dlq")
    assert client.run_move_tasks(owner="w1") == 0
    assert raw(client).zcard(MOVE_TASKS) == 0
    assert raw(client).exists(client.queue("dlq").keys.tasks) == 0
    with pytest.raises(smq.MoveTaskNotFound):
        client.cancel_move_task(task.handle)


def test_a_task_lost_from_the_index_is_found_again_when_listed(client: smq.Client, clock: Clock) -> None:
    dlq = _dead_letters(client, clock, {"a": 2})
    client.start_move_task("dlq")
    raw(client).delete(MOVE_TASKS)  # as if a start died after its script, a runner having looked
    assert client.run_move_tasks(owner="w1") == 0
    client.list_move_tasks("dlq")
    assert client.run_move_tasks(owner="w1") == 1
    assert dlq.attributes().visible == 0


def test_garbage_in_the_index_is_dropped(client: smq.Client) -> None:
    raw(client).zadd(MOVE_TASKS, {"not a handle": 0, _move_tasks.make_handle("gone", "B" * 16): 0})
    assert client.run_move_tasks(owner="w1") == 0
    assert raw(client).zcard(MOVE_TASKS) == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"owner": ""},
        {"owner": "a|b"},
        {"owner": "x" * 101},
        {"owner": "w", "lease": 0.5},
        {"owner": "w", "deadline": "soon"},
    ],
)
def test_runner_arguments_are_checked(client: smq.Client, kwargs: dict[str, Any]) -> None:
    with pytest.raises(smq.InvalidParameter):
        client.run_move_tasks(**kwargs)


def test_runners_in_many_threads_move_each_message_once(client: smq.Client) -> None:
    dlq = _dead_letters(client, None, {"a": 150, "b": 150})
    client.start_move_task("dlq")
    errors: list[BaseException] = []

    def runner(owner: str) -> None:
        try:
            client.run_move_tasks(owner=owner, lease=1)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=runner, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert client.list_move_tasks("dlq")[0].status == "COMPLETED"
    assert dlq.attributes().visible == 0
    assert sorted(_drain(client.queue("a"))) == sorted(f"a-{n}" for n in range(150))
    assert sorted(_drain(client.queue("b"))) == sorted(f"b-{n}" for n in range(150))


def test_an_error_that_would_repeat_fails_the_task(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    dlq = _dead_letters(client, clock, {"a": 2})
    client.start_move_task("dlq")

    def refused(*args: Any) -> Any:
        raise smq.InvalidParameter("script refused its arguments: for the test")

    monkeypatch.setattr(_move_tasks, "redrive_counted", refused)
    assert client.run_move_tasks(owner="w1") == 1
    (task,) = client.list_move_tasks("dlq")
    assert task.status == "FAILED"
    assert task.failure_reason == "InvalidParameter: script refused its arguments: for the test"
    assert dlq.attributes().visible == 2
    assert raw(client).zcard(MOVE_TASKS) == 0


def test_a_failing_redis_leaves_the_task_running(
    client: smq.Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dead_letters(client, clock, {"a": 2})
    client.start_move_task("dlq")

    def unreachable(*args: Any) -> Any:
        raise smq.BackendError("connection refused")

    monkeypatch.setattr(_move_tasks, "redrive_counted", unreachable)
    assert client.run_move_tasks(owner="w1") == 0
    monkeypatch.undo()
    assert client.list_move_tasks("dlq")[0].status == "RUNNING"
    assert client.run_move_tasks(owner="w1") == 1
    assert client.list_move_tasks("dlq")[0].status == "COMPLETED"
