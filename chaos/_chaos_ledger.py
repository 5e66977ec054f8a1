"""The ledger of a chaos run, the worker handler that writes to it, and the check.

Every process of a run appends JSON lines to one ledger file, each line one
``write`` on a descriptor opened with ``O_APPEND``: lines of different
processes never interleave, and a line written before a process is killed
with SIGKILL stays (the kernel holds it; only a lost host would lose it, and
a run does not survive that anyway). Lines, by ``k``:

- ``sent``: a send acknowledged (token ``t``, message id ``m``);
- ``unknown``: a send whose outcome is unknown (the connection broke during
  the call): it may or may not have landed;
- ``delivered``: a handler or consumer got a message (``t``, ``m``, receive
  count ``n``, pid ``p``);
- ``deleted``: a delete acknowledged (``t``, ``m``, ``n``; ``d`` true when the
  reply says this receipt deleted it, false when it could not tell, as over
  the SQS API, where a stale receipt's delete also succeeds).

The check sets the ledger against the queue's lifecycle event stream, which
the scripts write in the same atomic step as every change, stamped by the
Redis clock. From the events it rebuilds each receipt's lease: from its
receive until its visibility timeout runs out (each visibility change counts
anew from its own time), or until a delete or a release (timeout 0) ends it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

LEDGER_ENV = "SMQ_CHAOS_LEDGER"
WORK_ENV = "SMQ_CHAOS_WORK_MS"


class LedgerWriter:
    """Appends lines to the ledger; one ``write`` per line, safe across threads and processes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, kind: str, **fields: Any) -> None:
        os.write(self._fd, (json.dumps({"k": kind, **fields}, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


_writer: LedgerWriter | None = None


def handle(job: Any) -> None:
    """The handler the run's ``smq worker`` processes load (``_chaos_ledger:handle``).

    Records the delivery first, then works for a random 0 to SMQ_CHAOS_WORK_MS
    ms, so that kills land before, during and after handlers.
    """
    time.sleep(_record(job))


async def handle_async(job: Any) -> None:
    """``handle`` as an ``async def`` handler (``_chaos_ledger:handle_async``): the worker runs
    it on its event loop, and the work is an ``asyncio.sleep``."""
    await asyncio.sleep(_record(job))


def _record(job: Any) -> float:
    """Write the delivery of ``job`` to the ledger; the seconds the handler then works."""
    global _writer
    if _writer is None:
        _writer = LedgerWriter(os.environ[LEDGER_ENV])
    message = job.message
    _writer.write(
        "delivered", t=job.body.split(" ", 1)[0], m=message.message_id, n=message.receive_count, p=os.getpid()
    )
    work_ms = float(os.environ.get(WORK_ENV, "0"))
    return random.uniform(0, work_ms) / 1000 if work_ms > 0 else 0.0


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Figures:
    """What a run's ledger and events say, per scenario.

    Attributes:
        sent: Sends acknowledged.
        unknown: Sends whose outcome was unknown (may or may not have landed).
        unknown_landed: Of those, how many were delivered.
        delivered: Acknowledged messages delivered at least once.
        deliveries: Deliveries in all (handler runs, or messages a consumer got).
        lost: Acknowledged messages never delivered.
        duplicated: Messages delivered more than once.
        extra_deliveries: Deliveries beyond the first of each message.
        overlapping: Receives that came while an earlier receipt's lease still ran,
            plus receipts delivered twice.
        reappeared: Receives after the message was deleted, by the queue's events.
        undone: Deletes undone: messages delivered again after a delete that said it
            deleted them, by the ledger (a failover that lost the delete also loses
            its event, so only the ledger sees these).
        unrecorded: Acknowledged steps the queue's record does not show
            (a delivery without its receive, a delete that said it deleted
            without its deleted event, a message delivered that the queue
            ran empty without a delete of): a write Redis lost.
        expired: Leases that ended by running out (the holder died or stalled).
        released: Leases ended early by a release (visibility 0).
        left: Messages still in the queue at the end (must be 0).
    """

    sent: int = 0
    unknown: int = 0
    unknown_landed: int = 0
    delivered: int = 0
    deliveries: int = 0
    lost: int = 0
    duplicated: int = 0
    extra_deliveries: int = 0
    overlapping: int = 0
    reappeared: int = 0
    undone: int = 0
    unrecorded: int = 0
    expired: int = 0
    released: int = 0
    left: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def holds(self) -> bool:
        """The bar: nothing acknowledged lost, no lease overlap, nothing back after its delete."""
        faults = self.lost or self.overlapping or self.reappeared or self.undone or self.unrecorded
        return not (faults or self.left)


@dataclass
class _Lease:
    count: int
    until_ms: int
    ended: str = ""  # "", "deleted" or "released"


def check(lines: Iterable[Mapping[str, Any]], events: Iterable[Any], left: int) -> tuple[Figures, list[str]]:
    """Figures of a run, and a line of evidence for each fault found.

    ``events`` are the queue's ``smq.Event``s, oldest first, all of them.
    """
    figures = Figures(left=left)
    problems: list[str] = []
    acked: dict[str, str] = {}  # token -> message id
    unknown: set[str] = set()
    deliveries: dict[str, list[tuple[str, int]]] = defaultdict(list)  # token -> (message id, n)
    sure_deletes: list[tuple[str, int]] = []
    gone: dict[str, int] = {}  # message id -> receive count whose delete said it deleted it
    undone: set[str] = set()
    for line in lines:  # in the order written: a delete's line follows its acknowledgement
        kind = line["k"]
        if kind == "sent":
            acked[line["t"]] = line["m"]
        elif kind == "unknown":
            unknown.add(line["t"])
        elif kind == "delivered":
            deliveries[line["t"]].append((line["m"], line["n"]))
            if line["m"] in gone and line["m"] not in undone:
                undone.add(line["m"])
                problems.append(
                    f"{line['t']} ({line['m']}): delivered (receive {line['n']}) after receive "
                    f"{gone[line['m']]} deleted it"
                )
        elif kind == "deleted" and line["d"]:
            sure_deletes.append((line["m"], line["n"]))
            gone[line["m"]] = line["n"]
    figures.undone = len(undone)

    received: set[tuple[str, int]] = set()
    deleted: dict[str, int] = {}
    leases: dict[str, _Lease] = {}
    for event in events:
        kind, mid, n, at = event.kind, event.message_id, event.receive_count, event.at_ms
        lease = leases.get(mid)
        if kind == "received":
            received.add((mid, n))
            if mid in deleted:
                figures.reappeared += 1
                problems.append(f"{mid}: received (receive {n}) after its delete (receive {deleted[mid]})")
            elif lease is not None and not lease.ended and at < lease.until_ms:
                figures.overlapping += 1
                problems.append(
                    f"{mid}: receive {n} at {at} while receive {lease.count} held it until {lease.until_ms}"
                )
            elif lease is not None and not lease.ended:
                figures.expired += 1
            leases[mid] = _Lease(n, at + int(event.extra))
        elif kind == "visibility_changed" and lease is not None and lease.count == n:
            timeout_ms = int(event.extra)
            if timeout_ms == 0:
                lease.ended, lease.until_ms = "released", at
                figures.released += 1
            else:  # also a lease that had run out: the newest receipt hides it again
                lease.ended, lease.until_ms = "", at + timeout_ms
        elif kind == "deleted":
            deleted[mid] = n
            if lease is not None:
                lease.ended = "deleted"
        elif kind in ("dead_lettered", "retention_expired"):
            problems.append(f"{mid}: {kind} (the run configures neither)")

    for mid, n in sure_deletes:
        if deleted.get(mid) != n:
            figures.unrecorded += 1
            problems.append(f"{mid}: receive {n} deleted it, but the queue recorded no such delete")
    for token, seen in deliveries.items():
        for mid, n in seen:
            if (mid, n) not in received:
                figures.unrecorded += 1
                problems.append(f"{token} ({mid}): delivered as receive {n}, which the queue never recorded")
        for (mid, n), times in Counter(seen).items():
            if times > 1:
                figures.overlapping += times - 1
                problems.append(f"{token} ({mid}): receive {n} delivered {times} times")
        figures.deliveries += len(seen)
        if len(seen) > 1:
            figures.duplicated += 1
            figures.extra_deliveries += len(seen) - 1

    figures.sent = len(acked)
    figures.unknown = len(unknown)
    figures.unknown_landed = sum(1 for token in unknown if token in deliveries)
    for token, mid in acked.items():
        if token not in deliveries:
            figures.lost += 1
            problems.append(f"{token} ({mid}): acknowledged, never delivered")
            continue
        figures.delivered += 1
        if mid not in deleted:  # it ran, but the queue's record of it is gone
            figures.unrecorded += 1
            problems.append(f"{token} ({mid}): acknowledged and delivered, but never deleted")
    if left:
        problems.append(f"{left} messages still in the queue at the end")
    return figures, problems
