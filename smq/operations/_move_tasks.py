"""Message move tasks (SQS StartMessageMoveTask, ListMessageMoveTasks,
CancelMessageMoveTask): redrive out of a dead-letter queue in the background.

A task is a record in its source queue's ``tasks`` hash, changed only by
small scripts: ``move_task_start`` (refuses while one is active, keeps the
last 10), ``move_task_update`` (a runner claims the task under a lease,
records progress, ends it), ``move_task_cancel``. Runners find tasks through
one global index, ``smq:move_tasks``, written with a plain command before and
after a task starts and cleaned as runners find its tasks ended or gone.

``run`` is the runner: any number of processes may call it at once. It
claims tasks whose lease is free or run out, moves messages in chunks by the
two-step redrive of ``smq.operations._moves`` (so a runner that dies loses and
doubles nothing: the next one finishes its moves), records progress after
each chunk (renewing the lease), and paces chunks to the task's rate by the
Redis clock.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import re
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import (
    BackendError,
    InvalidParameter,
    MoveTaskActive,
    MoveTaskNotFound,
    OutcomeUnknown,
    QueueDoesNotExist,
    SmqError,
    Status,
)
from ..core._config import check_int, check_queue_name, is_fifo_name
from ..core._keys import MOVE_TASKS, QueueKeys
from ..core._names import MAX_QUALIFIED, NAME_CHARACTERS
from ..core._scripts import text
from ._moves import MOVE_CHUNK, redrive_counted
from ._sources import is_dead_letter_queue

if TYPE_CHECKING:
    from ._queues import Queues

log = logging.getLogger("smq.move_tasks")

RUNNING, COMPLETED, CANCELLING, CANCELLED, FAILED = (
    "RUNNING",
    "COMPLETED",
    "CANCELLING",
    "CANCELLED",
    "FAILED",
)
ACTIVE = (RUNNING, CANCELLING)
# FailureReason of a failed task, as SQS names them.
COULD_NOT_DETERMINE_SOURCE = "CouldNotDetermineMessageSource"
DESTINATION_MISSING = "AWS.SimpleQueueService.NonExistentQueue"
MAX_PER_SECOND = 500
MAX_LIST = 10
_RUNNER_BATCH = 1000
TOKEN = re.compile(r"[A-Za-z0-9_-]{16}")
"""A task's token: 12 random bytes in URL-safe base64 (a fixed width the Lua layout relies on)."""
_QUEUE = re.compile(rf"[{NAME_CHARACTERS}]{{1,{MAX_QUALIFIED}}}")


@dataclass(frozen=True)
class MoveTask:
    """A message move task, as SQS ListMessageMoveTasks describes it.

    Attributes:
        handle: TaskHandle: names the task (and its source queue) for a cancel.
            SQS shows it only for RUNNING tasks.
        status: RUNNING, COMPLETED, CANCELLING, CANCELLED or FAILED.
        source: The queue messages are moved out of (a dead-letter queue).
        destination: The queue they go to, or None: each back to the queue
            it was dead-lettered from.
        max_per_second: MaxNumberOfMessagesPerSecond, or None: as fast as possible.
        moved: ApproximateNumberOfMessagesMoved.
        to_move: ApproximateNumberOfMessagesToMove: the source's visible
            messages when the task started.
        started_at: StartedTimestamp, seconds since the epoch (Redis clock).
        failure_reason: FailureReason of a FAILED task, else None.
    """

    handle: str
    status: str
    source: str
    destination: str | None
    max_per_second: int | None
    moved: int
    to_move: int
    started_at: float
    failure_reason: str | None


@dataclass(frozen=True)
class _Record:
    """A task as stored (see ``lua/includes/common.lua``)."""

    status: str
    moved: int
    processed: int
    to_move: int
    started_ms: int
    rate: int
    owner: str
    lease_ms: int
    next_ms: int
    destination: str
    reason: str

    @classmethod
    def parse(cls, raw: Any) -> _Record:
        status, moved, processed, to_move, started, rate, owner, lease, next_ms, destination, reason = text(
            raw
        ).split("|", 10)
        return cls(
            status,
            int(moved),
            int(processed),
            int(to_move),
            int(started),
            int(rate),
            owner,
            int(lease),
            int(next_ms),
            destination,
            reason,
        )

    def task(self, handle: str, source: str) -> MoveTask:
        return MoveTask(
            handle=handle,
            status=self.status,
            source=source,
            destination=self.destination or None,
            max_per_second=self.rate or None,
            moved=self.moved,
            to_move=self.to_move,
            started_at=self.started_ms / 1000,
            failure_reason=self.reason if self.status == FAILED else None,
        )


def make_handle(source: str, token: str) -> str:
    return base64.urlsafe_b64encode(f"{source}:{token}".encode()).decode().rstrip("=")


def parse_handle(handle: object) -> tuple[str, str]:
    """The (source queue, task token) a handle names; MoveTaskNotFound if malformed."""
    if isinstance(handle, str) and len(handle) <= 200:
        try:
            decoded = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
        except (binascii.Error, ValueError):
            decoded = ""
        source, _, token = decoded.rpartition(":")
        if _QUEUE.fullmatch(source) and TOKEN.fullmatch(token):
            return source, token
    raise MoveTaskNotFound(f"{handle!r} is not a message move task handle")


# -- the index of tasks that may be active ------------------------------------


def _index_add(client: Queues, handle: str) -> None:
    source = parse_handle(handle)[0]
    client._write(
        "indexing a move task", source, MOVE_TASKS, "ZADD", MOVE_TASKS, "NX", int(time.time() * 1000), handle
    )


def _index_remove(client: Queues, handle: str) -> None:
    # Tidying the index: nobody is told of it, and a lost one is done again, so no wait.
    client._call(client._redis.zrem, MOVE_TASKS, handle)


# -- start, list, cancel ----------------------------------------------------------


def start(client: Queues, source: str, destination: str | None, max_per_second: int | None) -> MoveTask:
    check_queue_name(source)
    if destination is not None:
        check_queue_name(destination)
        if is_fifo_name(destination) != is_fifo_name(source):
            raise InvalidParameter(
                f"messages of {source!r} can move only to a queue of the same type (FIFO or standard), "
                f"not to {destination!r}"
            )
        if destination == source:
            raise InvalidParameter(f"a message move task cannot move queue {source!r} into itself")
    if max_per_second is not None:
        check_int("max_per_second", max_per_second, 1, MAX_PER_SECOND)
    if not client.queue_exists(source):
        raise QueueDoesNotExist(f"queue {source!r} does not exist")
    if not is_dead_letter_queue(client, source):
        raise InvalidParameter(
            f"queue {source!r} is not a dead-letter queue (no queue's redrive policy names it): "
            "message move tasks move messages out of dead-letter queues only"
        )
    if destination is not None and not client.queue_exists(destination):
        raise QueueDoesNotExist(f"destination queue {destination!r} does not exist")
    token = secrets.token_urlsafe(12)
    handle = make_handle(source, token)
    keys = QueueKeys.of(source)
    args = [client._now_arg(), token, destination or "", max_per_second or 0]
    # Indexed before the task exists (a crash after the script leaves it
    # findable) and again after (a runner may have dropped it meanwhile, not
    # finding the task yet).
    _index_add(client, handle)
    try:
        reply = client.run("move_task_start", keys, args, queue=source, tolerate=Status.E_TASK_ACTIVE)
    except OutcomeUnknown:
        raise  # the task may exist: leave it indexed
    except SmqError:
        _index_remove(client, handle)
        raise
    if reply[0] == Status.E_TASK_ACTIVE:
        _index_remove(client, handle)
        active = make_handle(source, text(reply[1]))
        _index_add(client, active)  # repair, should its start have been cut short
        raise MoveTaskActive(f"queue {source!r} has an active message move task: {active}", active)
    _index_add(client, handle)
    return _Record.parse(reply[2]).task(handle, source)


def list_tasks(client: Queues, source: str, limit: int) -> list[MoveTask]:
    check_queue_name(source)
    check_int("limit", limit, 1, MAX_LIST)
    reply = client.run("move_task_list", QueueKeys.of(source), [client._now_arg(), limit], queue=source)
    tasks = [
        _Record.parse(reply[i + 1]).task(make_handle(source, text(reply[i])), source)
        for i in range(2, len(reply), 2)
    ]
    if tasks and tasks[0].status in ACTIVE:
        _index_add(client, tasks[0].handle)  # repair, should its start have been cut short
    return tasks


def cancel(client: Queues, handle: str) -> MoveTask:
    source, token = parse_handle(handle)
    reply = client.run(
        "move_task_cancel",
        QueueKeys.of(source),
        [client._now_arg(), token],
        queue=source,
        tolerate=Status.E_TASK_MISSING,
    )
    if reply[0] == Status.E_TASK_MISSING:
        raise MoveTaskNotFound(f"no message move task {handle!r} (queue {source!r})")
    task = _Record.parse(reply[1]).task(handle, source)
    if task.status not in ACTIVE:
        raise MoveTaskNotFound(
            f"message move task {handle!r} is {task.status}: only a running task can be cancelled"
        )
    return task


# -- the runner ---------------------------------------------------------------------


def run(client: Queues, owner: str, lease: float, deadline: float | None) -> int:
    if not isinstance(owner, str) or not 1 <= len(owner) <= 100 or "|" in owner:
        raise InvalidParameter(f"owner must be 1 to 100 characters without '|', not {owner!r}")
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not 1 <= lease <= 3600:
        raise InvalidParameter(f"lease must be 1 to 3600 seconds, not {lease!r}")
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, (int, float))):
        raise InvalidParameter(f"deadline must be a time.monotonic() value or None, not {deadline!r}")
    runner = _Runner(client, owner, int(lease * 1000), deadline)
    worked = 0
    for raw in client._call(client._redis.zrange, MOVE_TASKS, 0, _RUNNER_BATCH - 1):
        if runner.out_of_time(0.0):
            break
        handle = text(raw)
        try:
            worked += runner.work(handle)
        except BackendError as error:
            # Redis failing: the task stays as it is; its lease runs out.
            log.warning("message move task %s left for a later run: %s", handle, error)
    return worked


class _Runner:
    def __init__(self, client: Queues, owner: str, lease_ms: int, deadline: float | None) -> None:
        self.client = client
        self.owner = owner
        self.lease_ms = lease_ms
        self.deadline = deadline

    def out_of_time(self, wait: float) -> bool:
        return self.deadline is not None and time.monotonic() + wait >= self.deadline

    def update(
        self,
        source: str,
        token: str,
        moved: int = 0,
        processed: int = 0,
        pause_ms: int = 0,
        outcome: str = "",
        reason: str = "",
    ) -> tuple[bool, int, _Record] | None:
        """Claim or renew, add counts, maybe end: (claimed, Redis now ms, record), None if gone."""
        args = [
            self.client._now_arg(),
            token,
            self.owner,
            self.lease_ms,
            moved,
            processed,
            pause_ms,
            outcome,
            reason,
        ]
        reply = self.client.run(
            "move_task_update", QueueKeys.of(source), args, queue=source, tolerate=Status.E_TASK_MISSING
        )
        if reply[0] == Status.E_TASK_MISSING:
            return None
        return bool(reply[1]), int(reply[2]), _Record.parse(reply[3])

    def work(self, handle: str) -> int:
        """Work on one task until it ends, the deadline comes or the lease is lost; 1 if claimed."""
        try:
            source, token = parse_handle(handle)
        except MoveTaskNotFound:
            _index_remove(self.client, handle)
            return 0
        state = self.update(source, token)
        if state is None:  # gone with its queue (or not started yet: start indexes it again)
            _index_remove(self.client, handle)
            return 0
        claimed, now_ms, record = state
        if not claimed:
            if record.status not in ACTIVE:
                _index_remove(self.client, handle)
            return 0
        while record.status == RUNNING:
            remaining = record.to_move - record.processed
            if remaining <= 0:
                state = self.update(source, token, outcome=COMPLETED)
            else:
                wait = max(0, record.next_ms - now_ms) / 1000
                if self.out_of_time(wait):
                    return 1  # still RUNNING, held until the lease runs out or we come back
                if wait > 0:
                    time.sleep(wait)
                    # Renew the lease, and see a cancel that came meanwhile.
                    state = self.update(source, token)
                else:
                    state = self.chunk(source, token, record, remaining)
            if state is None:
                _index_remove(self.client, handle)
                return 1
            claimed, now_ms, record = state
            if not claimed:
                return 1  # another runner took it over (our lease ran out)
        _index_remove(self.client, handle)
        return 1

    def chunk(
        self, source: str, token: str, record: _Record, remaining: int
    ) -> tuple[bool, int, _Record] | None:
        size = min(MOVE_CHUNK, remaining, record.rate or MOVE_CHUNK)
        began = time.monotonic()
        try:
            taken, moved, recovered, unsourced = redrive_counted(
                self.client, source, record.destination, size
            )
        except QueueDoesNotExist:
            return None  # the source queue is gone, and its tasks with it
        except BackendError:
            raise  # Redis failing: try again later
        except SmqError as error:
            # Anything else would fail again at every try: end the task, saying why.
            return self.update(source, token, outcome=FAILED, reason=f"{type(error).__name__}: {error}")
        outcome = reason = ""
        if unsourced and not record.destination:
            # As SQS: a message that came to the queue otherwise than as a dead letter has no
            # source to go back to; it stays, and the task fails.
            outcome, reason = FAILED, COULD_NOT_DETERMINE_SOURCE
        elif taken == 0:
            outcome = COMPLETED
        elif record.destination and moved < taken and not self.client.queue_exists(record.destination):
            # The messages went back to the source (see finish_moves).
            outcome, reason = FAILED, DESTINATION_MISSING
        pause_ms = 0
        if record.rate and not outcome:
            pause_ms = max(0, math.ceil(taken * 1000 / record.rate - (time.monotonic() - began) * 1000))
        return self.update(source, token, moved + recovered, taken, pause_ms, outcome, reason)
