"""Runs: the messages one handler slot takes on together and handles one after another.

On a standard queue every message is a run of its own, so a receive's
messages run in parallel, up to the concurrency. On a FIFO queue the
messages of one group from one receive form one run, in the order received
(their sequence order): one slot handles them in turn, while the runs of
other groups take other slots. A later receive cannot hand out more of that
group while any of its messages is in flight (the queue locks the group),
so one group never runs in two slots at once, in this worker or another.

A run stops at its first message that does not succeed (its handler raised,
or its lease was lost): the messages after it are released at once
(visibility 0) and never started. That keeps the order: the group stays
locked while the failed message is hidden for its backoff, and a message
made visible keeps its place in its group, so the next receive hands out the
failed message first and the released ones after it. Waiting their turn,
the messages of a run are held leases like any other: the heartbeat keeps
them hidden however long the run takes.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._leases import Lease

Run = tuple[Lease, ...]


def runs(leases: Sequence[Lease], fifo: bool) -> list[Run]:
    """Split one receive's leases into runs: one per message, or on a FIFO queue one per group."""
    if not fifo:
        return [(lease,) for lease in leases]
    groups: dict[str | None, list[Lease]] = {}
    for lease in leases:  # dicts keep insertion order: groups, and messages, as received
        groups.setdefault(lease.job.message.message_group_id, []).append(lease)
    return [tuple(group) for group in groups.values()]
