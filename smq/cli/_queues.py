"""``smq queue``: create, list, show, change, purge and delete queues."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .._errors import QueueDoesNotExist, QueueNameExists
from ..client._client import Client
from ..core._config import (
    _INT_SETTINGS,
    DEDUPLICATION_SCOPES,
    MAX_SHARDS,
    THROUGHPUT_LIMITS,
    QueueConfig,
    QueueInfo,
    RedrivePolicy,
    is_fifo_name,
)
from ._base import fail, main
from ._connect import open_client, redis_options
from ._output import age, json_option, print_json, print_table

F = TypeVar("F", bound=Callable[..., Any])

# flag -> (QueueConfig field, help); the ranges come from the core's table.
_SETTING_FLAGS = {
    "visibility-timeout": ("visibility_timeout", "Seconds a received message stays invisible."),
    "delay": ("delay_seconds", "Seconds a new message stays delayed."),
    "retention": ("message_retention_period", "Seconds a message is kept."),
    "max-message-size": ("maximum_message_size", "Bytes of body plus attributes."),
    "wait-time": ("receive_message_wait_time_seconds", "Default long-poll wait of receives, seconds."),
    "inflight-limit": ("inflight_limit", "Messages in flight at most."),
    "event-stream-max-len": ("event_stream_max_len", "Length of the lifecycle event stream (0: none)."),
}
_UNITS = {"maximum_message_size": " bytes", "inflight_limit": "", "event_stream_max_len": ""}
# FIFO queues only: flag -> QueueConfig field (the options are written out below).
_FIFO_FLAGS = {
    "content-based-deduplication": "content_based_deduplication",
    "deduplication-scope": "deduplication_scope",
    "fifo-throughput-limit": "fifo_throughput_limit",
}


def _setting_options(command: F) -> F:
    """The QueueConfig options, each None unless given."""
    options = []
    for flag, (field, text) in _SETTING_FLAGS.items():
        _, low, high, default, _ = _INT_SETTINGS[field]
        options.append(
            click.option(
                f"--{flag}",
                type=click.IntRange(low, high),
                default=None,
                help=f"{text} {low}-{high}; default {default}.",
            )
        )
    options += [
        click.option(
            "--dead-letter-queue", metavar="QUEUE", help="Queue that takes messages received too often."
        ),
        click.option(
            "--max-receive-count",
            type=click.IntRange(1, 1000),
            help="Receives after which a message goes to the dead-letter queue (1-1000).",
        ),
        click.option(
            "--tag",
            multiple=True,
            metavar="KEY=VALUE",
            help="A tag of the queue; repeat for more.",
        ),
        click.option(
            "--content-based-deduplication/--no-content-based-deduplication",
            default=None,
            help="FIFO: a message sent without --deduplication-id is deduplicated by the SHA-256 "
            "of its body; default off.",
        ),
        click.option(
            "--deduplication-scope",
            type=click.Choice(DEDUPLICATION_SCOPES),
            help="FIFO: deduplication ids hold across the queue or within a message group; default queue.",
        ),
        click.option(
            "--fifo-throughput-limit",
            type=click.Choice(THROUGHPUT_LIMITS),
            help="FIFO: stored and reported, as in SQS (smq throttles nothing); default perQueue.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _tags(values: tuple[str, ...]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r}: give a tag as KEY=VALUE", param_hint="'--tag'")
        tags[key] = text
    return tags


def _given(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The QueueConfig settings among the options given (each option is named for its flag,
    so that its environment variable is too); FIFO settings on a standard queue fail."""
    flags = {flag: field for flag, (field, _) in _SETTING_FLAGS.items()} | _FIFO_FLAGS
    given = {
        flag: (field, options[flag.replace("-", "_")])
        for flag, field in flags.items()
        if options[flag.replace("-", "_")] is not None
    }
    fifo_only = [
        f"--{'no-' if given[flag][1] is False else ''}{flag}" for flag in _FIFO_FLAGS if flag in given
    ]
    if fifo_only and not is_fifo_name(name):
        fail(
            f"queue {name!r} is a standard queue: {', '.join(fifo_only)} "
            "applies to FIFO queues only (names ending in .fifo)"
        )
    return {field: value for field, value in given.values()}


@main.group()
def queue() -> None:
    """Create, list, show, change, purge and delete queues."""


@queue.command()
@click.argument("name")
@_setting_options
@click.option(
    "--shards",
    type=click.IntRange(1, MAX_SHARDS),
    default=None,
    help=f"Full queues behind the one name (1-{MAX_SHARDS}), placed on different primaries of a "
    "Redis Cluster; fixed at creation. Default 1.",
)
@redis_options
@json_option
def create(
    name: str,
    shards: int | None,
    dead_letter_queue: str | None,
    max_receive_count: int | None,
    tag: tuple[str, ...],
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
    **options: Any,
) -> None:
    """Create queue NAME (a queue that exists with the settings given is fine).

    A NAME ending in .fifo makes a FIFO queue: messages in order within each
    message group, deduplication ids held for 5 minutes.

    \b
    smq queue create jobs --visibility-timeout 60
    smq queue create jobs-dlq && smq queue create jobs --dead-letter-queue jobs-dlq --max-receive-count 5
    smq queue create jobs.fifo --content-based-deduplication
    smq queue create hot --shards 3 --cluster   # one queue on three primaries
    """
    settings = _given(name, options)
    if shards is not None:
        settings["shards"] = shards
    if (dead_letter_queue is None) != (max_receive_count is None):
        raise click.UsageError("--dead-letter-queue and --max-receive-count go together")
    if dead_letter_queue is not None and max_receive_count is not None:
        settings["redrive_policy"] = RedrivePolicy(dead_letter_queue, max_receive_count)
    with open_client(redis_url, cluster, data_dir) as client:
        existed = client.queue_exists(name)
        try:
            made = client.create_queue(name, tags=_tags(tag), **settings)
        except QueueNameExists as error:
            fail(_differs(client, name, error, settings))
        info = made.attributes()
    if as_json:
        print_json({"name": name, "created": not existed, "settings": _settings_json(info.config)})
    elif existed:
        click.echo(f"queue {name!r} exists already, with the settings given")
    else:
        click.echo(f"created queue {name!r}")


def _differs(client: Client, name: str, error: QueueNameExists, settings: dict[str, Any]) -> str:
    """A QueueNameExists in the options' words (``--visibility-timeout 30``, not the field)."""
    field = error.setting
    flags = {f: flag for flag, (f, _) in _SETTING_FLAGS.items()}
    flags.update({f: flag for flag, f in _FIFO_FLAGS.items()})
    flags.update({"redrive_policy": "dead-letter-queue/--max-receive-count", "shards": "shards"})
    if field not in flags:
        return str(error)
    existing = getattr(client.queue(name).attributes().config, field)
    return f"queue {name!r} exists with --{flags[field]} {_shown(existing)}, not {_shown(settings[field])}"


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, RedrivePolicy):
        return f"{value.dead_letter_queue} {value.max_receive_count}"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


@queue.command(name="list")
@click.option("--prefix", default="", help="Only queues whose name starts with this.")
@redis_options
@json_option
def list_(prefix: str, redis_url: str | None, cluster: bool, data_dir: Path, as_json: bool) -> None:
    """List queues with their message counts."""
    with open_client(redis_url, cluster, data_dir) as client:
        infos = _infos(client, prefix)
    if as_json:
        print_json([_counts_json(info) for info in infos])
        return
    print_table(
        ["name", "visible", "in flight", "delayed", "oldest"],
        [(i.name, i.visible, i.in_flight, i.delayed, age(i.oldest_age)) for i in infos],
    )


def _infos(client: Client, prefix: str) -> list[QueueInfo]:
    infos = []
    for name in client.list_queues(prefix):
        try:
            infos.append(client.queue(name).attributes())
        except QueueDoesNotExist:
            continue  # deleted since it was listed
    return infos


def _counts_json(info: QueueInfo) -> dict[str, Any]:
    counts: dict[str, Any] = {
        "name": info.name,
        "visible": info.visible,
        "in_flight": info.in_flight,
        "delayed": info.delayed,
        "moving": info.moving,
        "oldest_age": info.oldest_age,
    }
    if info.config.fifo_queue:  # FIFO numbers for FIFO queues only, as SQS returns its attributes
        counts.update(groups=info.groups, groups_in_flight=info.groups_in_flight)
    return counts


def _settings_json(config: QueueConfig) -> dict[str, Any]:
    policy = config.redrive_policy
    fifo = {field: getattr(config, field) for field in _FIFO_FLAGS.values()} if config.fifo_queue else {}
    return {
        **{field: getattr(config, field) for field, _ in _SETTING_FLAGS.values()},
        "fifo_queue": config.fifo_queue,
        "shards": config.shards,
        **fifo,
        "redrive_policy": (
            None
            if policy is None
            else {
                "dead_letter_queue": policy.dead_letter_queue,
                "max_receive_count": policy.max_receive_count,
            }
        ),
        "extra_attributes": dict(config.extra_attributes),
    }


def _setting_text(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


@queue.command()
@click.argument("name")
@redis_options
@json_option
def show(name: str, redis_url: str | None, cluster: bool, data_dir: Path, as_json: bool) -> None:
    """Settings, message counts, counters and tags of queue NAME."""
    with open_client(redis_url, cluster, data_dir) as client:
        handle = client.get_queue(name)
        info = handle.attributes()
        tags = handle.tags()
        sources = client.dead_letter_sources(name)
    if as_json:
        print_json(
            {
                **_counts_json(info),
                "created_at": info.created_at,
                "modified_at": info.modified_at,
                "settings": _settings_json(info.config),
                "counters": dict(info.counters),
                "tags": tags,
                "dead_letter_sources": sources,
            }
        )
        return
    config = info.config
    policy = config.redrive_policy
    kind = " (FIFO)" if config.fifo_queue else ""
    click.echo(f"queue {name}{kind}: created {_when(info.created_at)}, changed {_when(info.modified_at)}")
    click.echo()
    rows: list[tuple[str, object]] = [
        (flag, f"{getattr(config, field)}{_UNITS.get(field, 's')}")
        for flag, (field, _) in _SETTING_FLAGS.items()
    ]
    if config.fifo_queue:
        rows += [(flag, _setting_text(getattr(config, field))) for flag, field in _FIFO_FLAGS.items()]
    if config.shards > 1:
        rows.append(("shards", ", ".join(handle.shard_names())))
    rows.append(
        (
            "dead-letter-queue",
            f"{policy.dead_letter_queue} after {policy.max_receive_count} receives" if policy else None,
        )
    )
    rows += [(attribute, value) for attribute, value in config.extra_attributes.items()]
    print_table(["setting", "value"], [(k, str(v) if v is not None else None) for k, v in rows])
    click.echo()
    print_table(
        ["messages", "count"],
        [
            ("visible", info.visible),
            ("in flight", info.in_flight),
            ("delayed", info.delayed),
            ("moving", info.moving),
        ],
    )
    click.echo(f"oldest visible: {age(info.oldest_age)}")
    if config.fifo_queue:
        click.echo(f"message groups: {info.groups}, {info.groups_in_flight} with a message in flight")
    click.echo()
    print_table(["counter", "total"], sorted(info.counters.items()))
    if tags:
        click.echo()
        print_table(["tag", "value"], sorted(tags.items()))
    if sources:
        click.echo()
        click.echo(f"dead-letter queue of: {', '.join(sources)}")


@queue.command(name="set")
@click.argument("name")
@_setting_options
@click.option("--no-dead-letter-queue", is_flag=True, help="Remove the redrive policy.")
@click.option("--untag", multiple=True, metavar="KEY", help="Remove the tag KEY; repeat for more.")
@redis_options
@json_option
def set_(
    name: str,
    dead_letter_queue: str | None,
    max_receive_count: int | None,
    tag: tuple[str, ...],
    no_dead_letter_queue: bool,
    untag: tuple[str, ...],
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    as_json: bool,
    **options: Any,
) -> None:
    """Change the settings given of queue NAME (and its tags); others stay.

    \b
    smq queue set jobs --visibility-timeout 120 --tag team=search
    smq queue set jobs --no-dead-letter-queue
    """
    settings = _given(name, options)
    redrive = dead_letter_queue is not None or max_receive_count is not None
    if no_dead_letter_queue and redrive:
        raise click.UsageError("--no-dead-letter-queue excludes --dead-letter-queue and --max-receive-count")
    new_tags = _tags(tag)
    if not settings and not redrive and not no_dead_letter_queue and not new_tags and not untag:
        raise click.UsageError("nothing to change: give a setting, --tag or --untag")
    with open_client(redis_url, cluster, data_dir) as client:
        handle = client.get_queue(name)
        if no_dead_letter_queue:
            settings["redrive_policy"] = None
        elif redrive:
            current = handle.attributes().config.redrive_policy
            target = dead_letter_queue or (current.dead_letter_queue if current else None)
            count = max_receive_count or (current.max_receive_count if current else None)
            if target is None or count is None:
                raise click.UsageError(
                    f"queue {name!r} has no dead-letter queue: "
                    "give --dead-letter-queue and --max-receive-count"
                )
            settings["redrive_policy"] = RedrivePolicy(target, count)
        if settings:
            handle.set_attributes(**settings)
        if new_tags:
            handle.tag(new_tags)
        if untag:
            handle.untag(list(untag))
        info = handle.attributes()
        current_tags = handle.tags()
    if as_json:
        print_json({"name": name, "settings": _settings_json(info.config), "tags": current_tags})
    else:
        changed = sorted(settings) + (["tags"] if new_tags or untag else [])
        click.echo(f"queue {name!r}: changed {', '.join(changed)}")


@queue.command()
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@redis_options
@json_option
def purge(name: str, yes: bool, redis_url: str | None, cluster: bool, data_dir: Path, as_json: bool) -> None:
    """Delete every message of queue NAME (asks first, unless --yes)."""
    with open_client(redis_url, cluster, data_dir) as client:
        handle = client.get_queue(name)
        if not yes:
            info = handle.attributes()
            total = info.visible + info.in_flight + info.delayed
            click.confirm(f"Delete all {total} messages of queue {name!r}?", abort=True, err=True)
        purged = handle.purge()
    if as_json:
        print_json({"name": name, "purged": purged})
    else:
        click.echo(f"purged {purged} messages from queue {name!r}")


@queue.command()
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@redis_options
@json_option
def delete(name: str, yes: bool, redis_url: str | None, cluster: bool, data_dir: Path, as_json: bool) -> None:
    """Delete queue NAME and all its messages (asks first, unless --yes)."""
    with open_client(redis_url, cluster, data_dir) as client:
        handle = client.get_queue(name)
        if not yes:
            info = handle.attributes()
            total = info.visible + info.in_flight + info.delayed
            click.confirm(f"Delete queue {name!r} and its {total} messages?", abort=True, err=True)
        if not client.delete_queue(name):
            raise QueueDoesNotExist(f"queue {name!r} does not exist")
    if as_json:
        print_json({"name": name, "deleted": True})
    else:
        click.echo(f"deleted queue {name!r}")
