"""Batch read: a look at a queue's messages by peek, which receives, hides and counts nothing.

One Spark partition per state peeked. Each reads pages of up to 100 messages,
as deep as a peek can look (10,100 messages per state). Pages are read one
after another while the queue moves on, so the result is a sample of the
moment, not a transaction: a message that changes state between two pages
can be missed or seen twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from .._errors import InvalidParameter
from ..client._client import Client
from ..operations._peek import MAX_PEEK, MAX_PEEK_OFFSET
from ._options import SourceOptions
from ._rows import peeked_row

log = logging.getLogger("smq.spark")


@dataclass
class StatePartition(InputPartition):
    """The messages of one state (visible, in_flight or delayed)."""

    state: str


class SnapshotReader(DataSourceReader):
    """Reads up to ``maxMessages`` messages of each state asked for."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        with Client(settings=options.settings) as client:
            info = client.get_queue(options.queue).attributes()  # a missing queue fails here, by name
        held = {"visible": info.visible, "in_flight": info.in_flight, "delayed": info.delayed}
        over = {state: held[state] for state in options.states if held[state] > options.max_messages}
        if over:
            counts = ", ".join(f"{n:,} {state}" for state, n in over.items())
            text = (
                f"snapshot of queue {options.queue!r} is partial: it holds {counts}, and a snapshot "
                f"reads at most {options.max_messages:,} messages of each state (maxMessages; a peek "
                "looks 10,100 deep at most); for counts, see the queue's attributes"
            )
            if options.on_partial == "fail":
                raise InvalidParameter(text + " (onPartial=fail)")
            log.warning("%s", text)

    def partitions(self) -> Sequence[InputPartition]:
        return [StatePartition(state) for state in self.options.states]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, StatePartition)
        with Client(settings=self.options.settings) as client:
            queue = client.get_queue(self.options.queue)
            offset = 0
            wanted = self.options.max_messages
            while offset < wanted and offset <= MAX_PEEK_OFFSET:
                page = queue.peek(partition.state, limit=min(MAX_PEEK, wanted - offset), offset=offset)
                yield from (peeked_row(message) for message in page)
                if len(page) < MAX_PEEK:
                    return
                offset += len(page)
