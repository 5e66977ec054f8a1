"""Declared queues: a TOML file of queues that ``Client.apply_queues`` creates or updates.

::

    [queues.jobs-dlq]
    MessageRetentionPeriod = 1209600

    [queues.jobs]
    VisibilityTimeout = 30
    DeadLetterQueue = "jobs-dlq"
    MaxReceiveCount = 5
    tags = { team = "data" }

Attributes are named as SQS names them (smq's own ones start with ``Smq``).
Applying is in three steps, and writes only in the last: ``load`` (or
``parse``) reads the whole file and checks all that needs no Redis, ``plan``
compares each queue with the one that exists and checks what needs Redis,
and ``apply`` runs the plan, dead-letter queues first. Every check is the
core's own (``new_queue_config``, ``changed_config``, ``check_tags``...):
this module only says in the file's words which queue and field failed.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

from .._errors import InvalidDeclaration, InvalidParameter
from ..core._attributes import (
    ATTRIBUTE_OF,
    FIFO_ONLY,
    SETTINGS,
    SHARDS,
    STORED,
    in_attribute_words,
    integer_text,
)
from ..core._config import (
    RedrivePolicy,
    changed_config,
    check_queue_name,
    is_fifo_name,
    new_queue_config,
)
from ..core._names import split_name
from ._tags import check_tags

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:
    from ._queues import Queues

T = TypeVar("T")
Value = Union[int, bool, str, None]  # noqa: UP007 (a type alias: Python 3.10 evaluates it)
"""A value as a declared-queues file writes it; None for "not set"."""

MAPPING_SOURCE = "declared queues"
"""How errors name a declaration given as a mapping rather than a file."""

# The file's names of the integer settings: SQS's, then smq's own.
_INTEGERS = {
    **SETTINGS,
    "SmqInflightLimit": "inflight_limit",
    "SmqEventStreamMaxLen": "event_stream_max_len",
    SHARDS: "shards",
}
_REDRIVE_WORDS = ("DeadLetterQueue", "MaxReceiveCount", "RedrivePolicy")
_TAGS = "tags"
_KNOWN = (*_INTEGERS, "FifoQueue", *FIFO_ONLY, *_REDRIVE_WORDS, *STORED, _TAGS)
# QueueConfig field -> the file's word, for the core's error messages.
_WORD_OF = {
    **ATTRIBUTE_OF,
    **{field: word for word, field in _INTEGERS.items()},
    "max_receive_count": "MaxReceiveCount",
}


@dataclass(frozen=True)
class QueueChange:
    """What applying declared queues did to one queue (or, in a dry run, would do).

    ``str()`` of it is one line: ``created jobs-dlq``, ``updated jobs:
    VisibilityTimeout 60 -> 30``, ``unchanged jobs``.

    Attributes:
        queue: The queue's name.
        action: ``"created"``, ``"updated"`` or ``"unchanged"``.
        changes: Of an updated queue, ``(attribute, before, after)`` of each
            declared attribute or tag whose value differed, named as in the
            file (a tag as ``tags.KEY``, a redrive policy as
            ``DeadLetterQueue`` and ``MaxReceiveCount``); None stands for
            "not set".
    """

    queue: str
    action: str
    changes: tuple[tuple[str, Value, Value], ...] = ()

    def __str__(self) -> str:
        if not self.changes:
            return f"{self.action} {self.queue}"
        listed = ", ".join(
            f"{name} {_shown(before)} -> {_shown(after)}" for name, before, after in self.changes
        )
        return f"{self.action} {self.queue}: {listed}"


def _shown(value: Value) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if isinstance(value, str) and (not text or " " in text or len(text) > 40):
        text = json.dumps(text if len(text) <= 40 else text[:37] + "...")
    return text


@dataclass(frozen=True)
class DeclaredQueue:
    """One queue of a declaration, checked: its settings (QueueConfig fields) and tags."""

    name: str
    settings: Mapping[str, Any]
    tags: Mapping[str, str] | None  # None: not declared
    redrive_words: tuple[str, ...] = ()  # how the file gave its redrive policy, for errors


@dataclass(frozen=True)
class Declaration:
    """A whole file, checked, its queues in the order to apply them (dead-letter queues first)."""

    source: str
    queues: tuple[DeclaredQueue, ...]


@dataclass(frozen=True)
class _Step:
    queue: DeclaredQueue
    change: QueueChange
    settings: Mapping[str, Any]  # to set: all of a new queue's, the differing ones of another
    tags: Mapping[str, str]


# -- reading ------------------------------------------------------------------


def load(path: str | os.PathLike[str]) -> Declaration:
    """Read and check a declared-queues file (``-``: standard input); raises InvalidDeclaration."""
    source = str(path)
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(path).read_bytes()
    except OSError as error:
        raise InvalidDeclaration(source, f"cannot read it: {error.strerror or error}") from None
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise InvalidDeclaration(source, f"not UTF-8 text: {error.reason} at byte {error.start}") from None
    except tomllib.TOMLDecodeError as error:
        raise InvalidDeclaration(source, f"not valid TOML: {error}") from None
    return parse(document, source="<stdin>" if source == "-" else source)


def parse(document: Mapping[str, Any], *, source: str = MAPPING_SOURCE) -> Declaration:
    """Check a parsed declaration (``{"queues": {name: {attribute: value}}}``); raises InvalidDeclaration."""
    if not isinstance(document, Mapping):
        raise InvalidDeclaration(source, f"must be a table, not {type(document).__name__}")
    for key in document:
        if key != "queues":
            raise InvalidDeclaration(source, f"unknown key {key!r}: declare queues as [queues.NAME] tables")
    queues = document.get("queues", {})
    if not isinstance(queues, Mapping):
        raise InvalidDeclaration(source, "queues must be a table of [queues.NAME] tables")
    declared = [_queue(source, name, attributes) for name, attributes in queues.items()]
    return Declaration(source, _in_order(source, declared))


def _queue(source: str, name: str, attributes: object) -> DeclaredQueue:
    try:
        check_queue_name(name)
    except InvalidParameter as error:
        raise InvalidDeclaration(source, str(error), name) from None
    if not isinstance(attributes, Mapping):
        raise InvalidDeclaration(source, f"must be a table of attributes, not {_toml(attributes)}", name)
    settings: dict[str, Any] = {}
    stored: dict[str, str] = {}
    tags: dict[str, str] | None = None
    for word, value in attributes.items():
        if word in _INTEGERS:
            field, value = _INTEGERS[word], _integer(value)
        elif word == "FifoQueue":
            field, value = "fifo_queue", _boolean(value)
        elif word in FIFO_ONLY:
            if not is_fifo_name(name):
                raise InvalidDeclaration(
                    source, "applies to FIFO queues only (names ending in .fifo)", name, word
                )
            field = FIFO_ONLY[word]
            value = _boolean(value) if word == "ContentBasedDeduplication" else value
        elif word in STORED:
            field, value = "extra_attributes", {word: _stored(value)}
        elif word == _TAGS:
            tags = _checked(source, name, word, check_tags, value)
            continue
        elif word in _REDRIVE_WORDS:
            continue  # below: they go together
        else:
            raise InvalidDeclaration(source, _unknown(name, word, value), name, word)
        # Each value checked on its own, as a creation checks it, so that an error names its field.
        config = _checked(source, name, word, new_queue_config, name, {field: value})
        if field == "extra_attributes":
            stored[word] = config.extra_attributes.get(word, "")  # normalised; "" is "not set"
        else:
            settings[field] = value
    if stored:
        settings["extra_attributes"] = stored
    words = tuple(word for word in _REDRIVE_WORDS if word in attributes)
    if words:
        policy = _redrive_policy(source, name, attributes, words)
        _checked(source, name, words[0], new_queue_config, name, {"redrive_policy": policy})
        settings["redrive_policy"] = policy
    # What only the fields together decide (a sharded FIFO queue's scope, a sharded queue as
    # its own dead-letter queue), as a creation checks it.
    _checked(source, name, None, new_queue_config, name, settings, redrive_words=words)
    return DeclaredQueue(name, settings, tags, words)


def _integer(value: object) -> object:
    """An integer written as one or as text (``"30"``, as SQS takes them); else the value as it is."""
    if isinstance(value, str):
        number = integer_text(value)
        return value if number is None else number
    return value


def _boolean(value: object) -> object:
    """A boolean written as one or as text (``"true"``, as SQS takes them); else the value."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def _stored(value: object) -> Any:
    """A stored SQS attribute as text: a table (Policy) as JSON, a boolean or integer as SQS writes it."""
    if isinstance(value, Mapping):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return value  # a string, or a value for check_extra_attributes to refuse


def _redrive_policy(
    source: str, name: str, attributes: Mapping[str, Any], words: tuple[str, ...]
) -> RedrivePolicy | None:
    if "RedrivePolicy" in words:
        if len(words) > 1:
            raise InvalidDeclaration(
                source, "give either RedrivePolicy or DeadLetterQueue and MaxReceiveCount", name, words[0]
            )
        return _policy_table(source, name, attributes["RedrivePolicy"])
    if len(words) != 2:
        missing = "MaxReceiveCount" if words == ("DeadLetterQueue",) else "DeadLetterQueue"
        raise InvalidDeclaration(source, f"goes with {missing}", name, words[0])
    target = attributes["DeadLetterQueue"]
    _checked(source, name, "DeadLetterQueue", check_queue_name, target)
    count = _integer(attributes["MaxReceiveCount"])
    return _checked(source, name, "MaxReceiveCount", RedrivePolicy, target, count)


def _policy_table(source: str, name: str, value: object) -> RedrivePolicy | None:
    """RedrivePolicy as SQS writes it, a table or its JSON text; "" removes a queue's policy."""
    field = "RedrivePolicy"
    if value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise InvalidDeclaration(source, "not valid JSON", name, field) from None
    shape = 'a table (or its JSON) of deadLetterTargetArn and maxReceiveCount, or "" for none'
    if not isinstance(value, Mapping) or set(value) != {"deadLetterTargetArn", "maxReceiveCount"}:
        raise InvalidDeclaration(source, f"must be {shape}", name, field)
    target = value["deadLetterTargetArn"]
    if isinstance(target, str) and target.startswith("arn:"):
        target = _arn_queue(source, name, target)
    _checked(source, name, field, check_queue_name, target)
    count = _integer(value["maxReceiveCount"])
    return _checked(source, name, field, RedrivePolicy, target, count)


def _arn_queue(source: str, name: str, arn: str) -> str:
    """The queue an ARN names, in the namespace of queue ``name`` (a dead-letter queue is in its
    source's region and account, as in SQS: the ARN's are checked against a qualified name's)."""
    parts = arn.split(":")
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"]:
        raise InvalidDeclaration(source, f"{arn!r} is not the ARN of a queue", name, "RedrivePolicy")
    region, account, _ = split_name(name)
    if region is not None and (region, account) != (parts[3], parts[4]):
        raise InvalidDeclaration(
            source, f"{arn!r} is not in the region and account of the queue", name, "RedrivePolicy"
        )
    return f"{region}:{account}:{parts[5]}" if region is not None else parts[5]


def _unknown(name: str, word: str, value: object) -> str:
    if isinstance(value, Mapping) and is_fifo_name(f"{name}.{word}"):
        return f'unknown attribute; a FIFO queue\'s name needs quotes: [queues."{name}.{word}"]'
    folded = {known.lower(): known for known in _KNOWN}
    close = difflib.get_close_matches(str(word).lower(), list(folded), n=1)
    hint = f"did you mean {folded[close[0]]}?" if close else f"known: {', '.join(_KNOWN)}"
    return f"unknown attribute; {hint}"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _checked(
    source: str,
    name: str,
    field: str | None,
    check: Callable[..., T],
    *args: Any,
    redrive_words: tuple[str, ...] = (),
) -> T:
    """``check(*args)``; an InvalidParameter it raises becomes an InvalidDeclaration naming the field.

    With no ``field``, the field is the first attribute the core's message names.
    """
    try:
        return check(*args)
    except InvalidParameter as error:
        words = {**_WORD_OF, "redrive_policy": (redrive_words or ("RedrivePolicy",))[0]}
        text = in_attribute_words(str(error), words)
        if text.startswith(f"queue {name!r}: "):
            text = text[len(f"queue {name!r}: ") :]
        if field is None:
            named = [word for word in (*words.values(), *STORED) if re.search(rf"\b{word}\b", text)]
            if not named and "dead-letter queue" in text:
                named = list(redrive_words)
            field = named[0] if named else None
        if field is not None and text.startswith(field + " "):
            text = text[len(field) + 1 :]
        raise InvalidDeclaration(source, text, name, field) from None


def _in_order(source: str, queues: list[DeclaredQueue]) -> tuple[DeclaredQueue, ...]:
    """The queues with each dead-letter queue declared here before the queues that use it.

    Otherwise in the file's order. A queue may be its own dead-letter queue;
    a longer cycle is an error, as no order could create it.
    """
    by_name = {queue.name: queue for queue in queues}
    ordered: dict[str, DeclaredQueue] = {}
    for first in queues:
        path: list[str] = []  # first, its dead-letter queue, that one's, ... until one is ordered
        name: str | None = first.name
        while name is not None and name not in ordered:
            if name in path:
                cycle = [*path[path.index(name) :], name]
                raise InvalidDeclaration(
                    source,
                    f"the dead-letter queues form a cycle: {' -> '.join(cycle)}",
                    name,
                    by_name[name].redrive_words[0],
                )
            path.append(name)
            target = _target(by_name[name])
            name = target if target in by_name and target != name else None
        for name in reversed(path):
            ordered[name] = by_name[name]
    return tuple(ordered.values())


def _target(queue: DeclaredQueue) -> str | None:
    policy = queue.settings.get("redrive_policy")
    return policy.dead_letter_queue if isinstance(policy, RedrivePolicy) else None


# -- planning and applying ----------------------------------------------------


def plan(client: Queues, declaration: Declaration) -> list[_Step]:
    """What applying ``declaration`` would change, checked against the queues that exist.

    Reads Redis, writes nothing. Raises InvalidDeclaration for a dead-letter
    queue that is neither declared nor exists, or a queue that exists with
    another type or number of shards than declared, or tags past 50.
    """
    source = declaration.source
    declared = {queue.name for queue in declaration.queues}
    steps = []
    for queue in declaration.queues:
        target = _target(queue)
        if target is not None and target != queue.name and target not in declared:
            if not client.queue_exists(target):
                raise InvalidDeclaration(
                    source,
                    f'queue "{target}" is neither declared in this file nor exists',
                    queue.name,
                    queue.redrive_words[0],
                )
        if client.queue_exists(queue.name):
            steps.append(_update(client, source, queue))
        else:
            steps.append(_Step(queue, QueueChange(queue.name, "created"), queue.settings, queue.tags or {}))
    return steps


def _update(client: Queues, source: str, queue: DeclaredQueue) -> _Step:
    handle = client.queue(queue.name)
    config = handle.attributes().config
    name = queue.name
    changes: list[tuple[str, Value, Value]] = []
    settings: dict[str, Any] = {}
    for field, value in queue.settings.items():
        before = getattr(config, field)
        if field in ("fifo_queue", "shards"):
            if before != value:
                word = _WORD_OF[field]
                fixed = "type" if field == "fifo_queue" else "number of shards"
                raise InvalidDeclaration(
                    source,
                    f"the queue exists with {word} {_shown(before)}, and a queue's {fixed} "
                    "is set when it is created, never changed",
                    name,
                    word,
                )
        elif field == "extra_attributes":
            differ = {k: v for k, v in value.items() if before.get(k, "") != v}
            if differ:
                settings[field] = differ
                changes += [(k, before.get(k), v or None) for k, v in differ.items()]
        elif field == "redrive_policy":
            if before != value:
                settings[field] = value
                changes += _redrive_changes(before, value)
        elif before != value:
            settings[field] = value
            changes.append((_WORD_OF[field], before, value))
    if settings:
        sharded = config.shards > 1
        _checked(
            source,
            name,
            None,
            lambda: changed_config(name, settings, fifo=config.fifo_queue, sharded=sharded),
            redrive_words=queue.redrive_words,
        )
    tags: dict[str, str] = {}
    if queue.tags:
        existing = handle.tags()
        tags = {key: value for key, value in queue.tags.items() if existing.get(key) != value}
        _checked(source, name, _TAGS, check_tags, {**existing, **tags})
        changes += [(f"{_TAGS}.{key}", existing.get(key), value) for key, value in tags.items()]
    action = "updated" if changes else "unchanged"
    return _Step(queue, QueueChange(name, action, tuple(changes)), settings, tags)


def _redrive_changes(
    before: RedrivePolicy | None, after: RedrivePolicy | None
) -> list[tuple[str, Value, Value]]:
    old_queue, old_count = (before.dead_letter_queue, before.max_receive_count) if before else (None, None)
    new_queue, new_count = (after.dead_letter_queue, after.max_receive_count) if after else (None, None)
    changes: list[tuple[str, Value, Value]] = []
    if old_queue != new_queue:
        changes.append(("DeadLetterQueue", old_queue, new_queue))
    if old_count != new_count:
        changes.append(("MaxReceiveCount", old_count, new_count))
    return changes


def apply(client: Queues, declaration: Declaration, *, dry_run: bool = False) -> list[QueueChange]:
    """Plan, then (unless ``dry_run``) make the changes; returns one QueueChange per queue, in order."""
    steps = plan(client, declaration)
    if not dry_run:
        for step in steps:
            name = step.queue.name
            if step.change.action == "created":
                client.create_queue(name, tags=step.tags or None, **step.settings)
                continue
            handle = client.queue(name)
            if step.settings:
                handle.set_attributes(**step.settings)
            if step.tags:
                handle.tag(step.tags)
    return [step.change for step in steps]
