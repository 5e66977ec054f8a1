"""``option("table", "events")``: a queue's lifecycle event stream as rows.

One Spark partition reads the stream from its oldest kept entry to its end,
a page of ``PAGE`` events at a time, through ``smq.Queue.events``
(read-only: nothing in the queue changes). The columns are those of
``smq.Event``, plus ``at`` as a timestamp for people and windows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..operations._events import event_pages, timestamp_of
from ._options import SourceOptions

EVENT_SCHEMA = (
    "queue string, event_id string, kind string, message_id string, receive_count int, "
    "at_ms bigint, at timestamp, extra string"
)
"""One row per event: see ``smq.Event`` for what each column means.

``at_ms`` is exact (ms since the epoch, by the Redis clock); ``at`` is the
same instant as a timestamp. Files written by ``smq events export`` have the
same columns.
"""

PAGE = 5000
"""Events per XRANGE call."""


class EventReader(DataSourceReader):
    """Reads one queue's event stream, oldest event first, in one partition."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        from ..client._client import Client

        with Client(settings=self.options.settings) as client:
            for page in event_pages(client.queue(self.options.queue), PAGE):
                for event in page:
                    yield (
                        event.queue,
                        event.event_id,
                        event.kind,
                        event.message_id,
                        event.receive_count,
                        event.at_ms,
                        timestamp_of(event.at_ms),
                        event.extra,
                    )
