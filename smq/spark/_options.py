"""The ``smq`` data source's options, read once into a frozen object.

Every mode:

- ``queue`` (required): the queue's name.
- ``url``: the Redis to use (default: ``$SMQ_REDIS_URL``, else the embedded
  server that ``smq serve`` runs in ``.smq``, as ``smq.Settings`` says);
  ``cluster``: ``true`` for a Redis Cluster; ``tlsCa``, ``tlsCert``, ``tlsKey``: the
  CA file and client certificate and key for a ``rediss://`` URL (files each
  executor can read; default: ``$SMQ_REDIS_TLS_*`` with ``$SMQ_REDIS_URL``);
  ``waitReplicas``, ``waitTimeout`` (seconds), ``waitAof``: wait for replicas
  (or append-only files) after each change, as ``smq.Settings`` says.

Batch read (``spark.read``): a snapshot, by peek, that changes nothing.

- ``states``: comma-separated ``visible``, ``in_flight``, ``delayed``
  (default: all three); ``maxMessages``: most rows per state (default and
  most 10,100, as deep as a peek can look); ``onPartial``: when a state holds
  more messages than that, ``warn`` (the default: a warning in the driver's
  log, and the snapshot holds the first ones) or ``fail`` (the read fails).
- ``table``: ``messages`` (default) or ``events``: the queue's lifecycle
  event stream, one row per event (see ``smq.spark._event_reader``).

Write (``df.write``): rows become messages, sent in batches of 10 from the executors.

- ``bodyColumn`` (default ``body``): the message body, a string.
- ``attributeColumns``: comma-separated columns sent as message attributes
  (numbers as ``Number``, the rest as ``String``); a ``map<string,string>``
  column named ``attributes`` is sent as String attributes too.
- ``groupColumn`` (default ``message_group_id``, FIFO): the group;
  ``deduplicationIdColumn`` (default ``deduplication_id``): ids of your own;
  ``delayColumn`` (default ``delay_seconds``, standard queues).
- ``writeId``: names this write for deduplication (default: a new id per
  write); ``deduplicate``: ``false`` sends without deduplication ids.

Stream read (``spark.readStream``): executor tasks receive, the driver keeps
hidden, Spark's commit deletes (see ``smq.spark._stream``).

- ``maxMessagesPerBatch`` (default 1000), ``visibilityTimeout`` seconds a
  received message stays hidden between heartbeats (default 30),
  ``waitTimeSeconds`` a trigger waits for the first visible message (default 1),
  ``numPartitions`` tasks that receive each micro-batch, a share each (default 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .._errors import InvalidParameter
from ..connection._settings import Settings
from ..operations._peek import MAX_PEEK, MAX_PEEK_OFFSET, PEEK_STATES

_DEEPEST = MAX_PEEK_OFFSET + MAX_PEEK


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name.lower())
    if value is None:
        return default
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise InvalidParameter(f"option {name} must be true or false, not {value!r}")


def _int(options: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    value = options.get(name.lower())
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise InvalidParameter(f"option {name} must be a whole number, not {value!r}") from None
    if not low <= number <= high:
        raise InvalidParameter(f"option {name} must be {low} to {high}, not {number}")
    return number


def _seconds(options: Mapping[str, str], name: str, default: float) -> float:
    value = options.get(name.lower())
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        raise InvalidParameter(f"option {name} must be a number of seconds, not {value!r}") from None


def _names(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


@dataclass(frozen=True)
class SourceOptions:
    """The options of one read or write, checked."""

    queue: str
    settings: Settings
    table: str = "messages"
    states: tuple[str, ...] = PEEK_STATES
    max_messages: int = _DEEPEST
    on_partial: str = "warn"
    body_column: str = "body"
    attribute_columns: tuple[str, ...] = ()
    group_column: str = "message_group_id"
    deduplication_column: str = "deduplication_id"
    delay_column: str = "delay_seconds"
    write_id: str | None = None
    deduplicate: bool = True
    max_messages_per_batch: int = 1000
    visibility_timeout: int = 30
    wait_time_seconds: int = 1
    num_partitions: int = 2

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Check ``options`` (the data source's, case-insensitive keys); raise InvalidParameter."""
        lowered = {key.lower(): str(value) for key, value in options.items()}
        queue = lowered.get("queue")
        if not queue:
            raise InvalidParameter('the smq data source needs option("queue", <name>)')
        given = lowered.get("waitreplicas")
        wait_replicas = None if given is None else _int(lowered, "waitReplicas", 0, 0, 1000)
        wait_timeout = _seconds(lowered, "waitTimeout", 1.0)
        try:
            settings = Settings(
                url=lowered.get("url") or None,
                cluster=_flag(lowered, "cluster", False),
                tls_ca=lowered.get("tlsca") or None,
                tls_cert=lowered.get("tlscert") or None,
                tls_key=lowered.get("tlskey") or None,
                wait_replicas=wait_replicas,
                wait_timeout=wait_timeout,
                wait_aof=_flag(lowered, "waitAof", False),
            ).resolved()
        except ValueError as error:
            names = "waitTimeout" if "wait_" in str(error) else "tlsCert and tlsKey"
            raise InvalidParameter(f"options {names}: {error}") from None
        table = lowered.get("table", "messages")
        if table not in ("messages", "events"):
            raise InvalidParameter(f"option table must be messages or events, not {table!r}")
        states = _names(lowered.get("states")) or PEEK_STATES
        for state in states:
            if state not in PEEK_STATES:
                raise InvalidParameter(f"option states: {state!r} is not one of {', '.join(PEEK_STATES)}")
        on_partial = lowered.get("onpartial", "warn").lower()
        if on_partial not in ("warn", "fail"):
            raise InvalidParameter(f"option onPartial must be warn or fail, not {on_partial!r}")
        write_id = lowered.get("writeid")
        if write_id is not None and not (0 < len(write_id) <= 64 and write_id.isprintable()):
            raise InvalidParameter("option writeId must be 1 to 64 printable characters")
        return cls(
            queue=queue,
            settings=settings,
            table=table,
            states=states,
            max_messages=_int(lowered, "maxMessages", _DEEPEST, 1, _DEEPEST),
            on_partial=on_partial,
            body_column=lowered.get("bodycolumn", "body"),
            attribute_columns=_names(lowered.get("attributecolumns")),
            group_column=lowered.get("groupcolumn", "message_group_id"),
            deduplication_column=lowered.get("deduplicationidcolumn", "deduplication_id"),
            delay_column=lowered.get("delaycolumn", "delay_seconds"),
            write_id=write_id,
            deduplicate=_flag(lowered, "deduplicate", True),
            max_messages_per_batch=_int(lowered, "maxMessagesPerBatch", 1000, 1, 1_000_000),
            visibility_timeout=_int(lowered, "visibilityTimeout", 30, 1, 43_200),
            wait_time_seconds=_int(lowered, "waitTimeSeconds", 1, 0, 20),
            num_partitions=_int(lowered, "numPartitions", 2, 1, 10_000),
        )
