"""``smq upgrade``: move every queue's data to the newest layout this version knows.

A queue's meta hash records the data layout it is stored in (``layout``); every
script refuses a queue whose layout is newer than its own ``LAYOUT`` before it
changes anything (UnsupportedLayout), so a client older than the data never
misreads it. Layout 1 is the one 0.2.0 writes, which records no layout: the
upgrade stamps such queues, and changes no data. A later layout converts each
queue here in bounded steps while the queue stays in use (see "Rolling
upgrades" in docs/operations.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import LAYOUT, OldClientsPresent
from ..core._keys import QueueKeys
from ._legacy import old_consumers_seen

if TYPE_CHECKING:
    from ._queues import Queues

_MAX_STEPS = 1_000_000  # bounded steps per queue: a script that never says done is a bug


@dataclass(frozen=True)
class QueueUpgrade:
    """What ``Client.upgrade`` did (or, in a dry run, would do) to one queue.

    Attributes:
        queue: The queue's name (a shard of a sharded queue is named as such).
        before: The layout the queue was in (1 when it recorded none).
        after: The layout it is in now (in a dry run: would be in).
        recorded: Whether the queue recorded its layout before (0.2.0 records none).
    """

    queue: str
    before: int
    after: int
    recorded: bool

    @property
    def changed(self) -> bool:
        return self.before != self.after or not self.recorded

    def __str__(self) -> str:
        was = f"layout {self.before}" + ("" if self.recorded else " (unrecorded)")
        if not self.changed:
            return f"{self.queue}: layout {self.after}, up to date"
        return f"{self.queue}: {was} -> layout {self.after}"


def upgrade(client: Queues, *, dry_run: bool = False, force: bool = False) -> list[QueueUpgrade]:
    """Every queue (and shard) moved to ``LAYOUT``; see ``Client.upgrade``."""
    if not dry_run and not force:
        seen = old_consumers_seen(client)
        if seen is not False:
            why = (
                "Redis refuses SCRIPT EXISTS, so smq cannot tell whether smq 0.2.0 consumers share it"
                if seen is None
                else "an smq 0.2.0 client has received messages from this Redis since it started "
                "(its scripts are in the script cache)"
            )
            raise OldClientsPresent(
                f"{why}; 0.2.0 misreads queues in layout {LAYOUT}. Stop every 0.2.0 client, then "
                "SCRIPT FLUSH (or restart Redis) or upgrade with force"
            )
    done: list[QueueUpgrade] = []
    for name in client.list_queues():
        shards = client._layouts.read(name) or [name]
        for shard in shards:
            done.append(_upgrade_one(client, name, shard, dry_run))
    return done


def _upgrade_one(client: Queues, name: str, shard: str, dry_run: bool) -> QueueUpgrade:
    keys = QueueKeys.of(shard)
    first = None
    for _ in range(_MAX_STEPS):
        reply = client.run("upgrade", keys, [client._now_arg(), "1" if dry_run else ""], queue=name)
        stored, after, finished = reply[1], int(reply[2]), int(reply[3])
        if first is None:
            first = stored.decode() if isinstance(stored, bytes) else str(stored)
        if finished or dry_run:
            recorded = first != ""
            return QueueUpgrade(shard, int(first) if recorded else 1, after, recorded)
    raise RuntimeError(f"the upgrade of queue {shard!r} did not finish in {_MAX_STEPS} steps")


__all__ = ["LAYOUT", "QueueUpgrade", "upgrade"]
