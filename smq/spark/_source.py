"""The ``smq`` format: one PySpark Python data source for reading, writing and streaming queues."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StructType

from ._options import SourceOptions

MESSAGE_SCHEMA = (
    "message_id string, body string, attributes map<string,string>, sent_timestamp timestamp, "
    "receive_count int, first_receive_timestamp timestamp, message_group_id string, "
    "sequence_number string, deduplication_id string, state string, visible_timestamp timestamp, "
    "origin string"
)
"""One row per message, for batch and streaming reads (times by the Redis clock, UTC).

A batch read (peek) fills ``state`` (visible, in_flight, delayed), ``visible_timestamp``
and ``origin``, and has no sequence number or deduplication id; a streaming
read (receive) has ``state`` ``in_flight`` and fills the FIFO columns.
"""


class SmqDataSource(DataSource):
    """``format("smq")``: read a snapshot, write messages, or stream a queue at least once."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # Parse on the driver, so a bad option fails the query before any task runs.
        self.checked = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "smq"

    def schema(self) -> str:
        if self.checked.table == "events":
            from ._event_reader import EVENT_SCHEMA

            return EVENT_SCHEMA
        return MESSAGE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if self.checked.table == "events":
            from ._event_reader import EventReader

            return EventReader(self.checked)
        from ._snapshot import SnapshotReader

        return SnapshotReader(self.checked)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from ._sink import QueueWriter

        return QueueWriter(self.checked, schema, overwrite)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from ._stream import QueueStreamReader

        return QueueStreamReader(self.checked)
