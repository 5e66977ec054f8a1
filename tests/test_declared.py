"""Declared queues (``Client.apply_queues``): a TOML file of queues, checked whole, then applied,
on a real Redis. The command line and ``smq serve --queues`` are in test_cli_declared.py."""

from __future__ import annotations

import json
import pickle
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import smq
from conftest import ROOT

Write = Callable[..., Path]

JOBS = """
[queues.jobs-dlq]
MessageRetentionPeriod = 1209600

[queues.jobs]
VisibilityTimeout = 30
DeadLetterQueue = "jobs-dlq"
MaxReceiveCount = 5
tags = { team = "data" }

[queues."orders.fifo"]
ContentBasedDeduplication = true
"""


@pytest.fixture
def write(tmp_path: Path) -> Write:
    """Writes a file of declared queues (dedented) in the test's folder; returns its path."""

    def write(text: str, name: str = "queues.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


def _lines(changes: list[smq.QueueChange]) -> list[str]:
    return [str(change) for change in changes]


def test_apply_creates_the_declared_queues_with_attributes_dead_letter_queue_fifo_and_tags(
    redis_client: smq.Client, write: Write
) -> None:
    changes = redis_client.apply_queues(write(JOBS))
    assert _lines(changes) == ["created jobs-dlq", "created jobs", "created orders.fifo"]
    assert all(isinstance(change, smq.QueueChange) for change in changes)
    dlq = redis_client.get_queue("jobs-dlq").attributes().config
    assert dlq.message_retention_period == 1209600 and dlq.visibility_timeout == 30
    jobs = redis_client.get_queue("jobs")
    assert jobs.attributes().config.redrive_policy == smq.RedrivePolicy("jobs-dlq", 5)
    assert jobs.tags() == {"team": "data"}
    assert redis_client.dead_letter_sources("jobs-dlq") == ["jobs"]
    orders = redis_client.get_queue("orders.fifo").attributes().config
    assert orders.fifo_queue and orders.content_based_deduplication
    assert orders.inflight_limit == 20_000  # a FIFO queue's default, as a creation sets it


def test_applying_the_same_file_again_changes_nothing_and_says_so(
    redis_client: smq.Client, write: Write
) -> None:
    path = write(JOBS)
    redis_client.apply_queues(path)
    before = {name: redis_client.queue(name).attributes().modified_at for name in redis_client.list_queues()}
    again = redis_client.apply_queues(path)
    assert _lines(again) == ["unchanged jobs-dlq", "unchanged jobs", "unchanged orders.fifo"]
    assert [change.action for change in again] == ["unchanged"] * 3
    after = {name: redis_client.queue(name).attributes().modified_at for name in redis_client.list_queues()}
    assert after == before


def test_an_existing_queue_gets_what_is_declared_and_keeps_what_is_not(
    redis_client: smq.Client, write: Write
) -> None:
    redis_client.create_queue("jobs-dlq")
    redis_client.create_queue(
        "jobs", visibility_timeout=60, delay_seconds=7, tags={"team": "search", "cost": "low"}
    )
    changes = redis_client.apply_queues(write(JOBS))
    assert _lines(changes) == [
        "updated jobs-dlq: MessageRetentionPeriod 345600 -> 1209600",
        "updated jobs: VisibilityTimeout 60 -> 30, DeadLetterQueue (none) -> jobs-dlq, "
        "MaxReceiveCount (none) -> 5, tags.team search -> data",
        "created orders.fifo",
    ]
    assert changes[1].changes == (
        ("VisibilityTimeout", 60, 30),
        ("DeadLetterQueue", None, "jobs-dlq"),
        ("MaxReceiveCount", None, 5),
        ("tags.team", "search", "data"),
    )
    jobs = redis_client.get_queue("jobs")
    config = jobs.attributes().config
    assert (config.visibility_timeout, config.delay_seconds) == (30, 7)  # DelaySeconds not declared
    assert config.redrive_policy == smq.RedrivePolicy("jobs-dlq", 5)
    assert jobs.tags() == {"team": "data", "cost": "low"}  # an undeclared tag stays
    redis_client.queue("jobs").set_attributes(redrive_policy=smq.RedrivePolicy("jobs-dlq", 9))
    assert _lines(redis_client.apply_queues(write(JOBS)))[1] == "updated jobs: MaxReceiveCount 9 -> 5"


def test_dead_letter_queues_are_created_first_whatever_the_order_of_the_file(
    redis_client: smq.Client, write: Write
) -> None:
    path = write(
        """
        [queues.a]
        DeadLetterQueue = "b"
        MaxReceiveCount = 3

        [queues.b]
        DeadLetterQueue = "c"
        MaxReceiveCount = 4

        [queues.c]
        DeadLetterQueue = "c"   # its own: smq accepts it, as SQS does
        MaxReceiveCount = 5

        [queues.d]
        """
    )
    assert _lines(redis_client.apply_queues(path)) == ["created c", "created b", "created a", "created d"]
    policies = {n: redis_client.queue(n).attributes().config.redrive_policy for n in "abcd"}
    assert policies == {
        "a": smq.RedrivePolicy("b", 3),
        "b": smq.RedrivePolicy("c", 4),
        "c": smq.RedrivePolicy("c", 5),
        "d": None,
    }


def test_a_dead_letter_queue_that_exists_need_not_be_declared(redis_client: smq.Client, write: Write) -> None:
    redis_client.create_queue("elsewhere-dlq")
    path = write('[queues.jobs]\nDeadLetterQueue = "elsewhere-dlq"\nMaxReceiveCount = 2\n')
    assert _lines(redis_client.apply_queues(path)) == ["created jobs"]
    assert redis_client.dead_letter_sources("elsewhere-dlq") == ["jobs"]


def test_a_dry_run_reports_the_plan_and_changes_nothing(redis_client: smq.Client, write: Write) -> None:
    redis_client.create_queue("jobs-dlq")
    path = write(JOBS)
    planned = redis_client.apply_queues(path, dry_run=True)
    assert [change.action for change in planned] == ["updated", "created", "created"]
    assert redis_client.list_queues() == ["jobs-dlq"]
    assert redis_client.queue("jobs-dlq").attributes().config.message_retention_period == 345600
    assert redis_client.apply_queues(path) == planned


def test_values_may_be_written_as_text_and_redrive_policies_as_in_sqs(
    redis_client: smq.Client, write: Write
) -> None:
    arn = "arn:aws:sqs:us-east-1:000000000000:jobs-dlq"
    path = write(
        f"""
        [queues.jobs-dlq]
        [queues.jobs]
        VisibilityTimeout = "45"
        RedrivePolicy = {{ deadLetterTargetArn = "{arn}", maxReceiveCount = "4" }}
        [queues.other]
        RedrivePolicy = '{{"deadLetterTargetArn": "jobs-dlq", "maxReceiveCount": 2}}'
        [queues."orders.fifo"]
        FifoQueue = "true"
        ContentBasedDeduplication = "TRUE"
        DeduplicationScope = "messageGroup"
        FifoThroughputLimit = "perMessageGroupId"
        SmqInflightLimit = 100
        SmqEventStreamMaxLen = 1000
        Policy = {{ Version = "2012-10-17", Statement = [] }}
        SqsManagedSseEnabled = false
        """
    )
    redis_client.apply_queues(path)
    jobs = redis_client.get_queue("jobs").attributes().config
    assert (jobs.visibility_timeout, jobs.redrive_policy) == (45, smq.RedrivePolicy("jobs-dlq", 4))
    assert redis_client.queue("other").attributes().config.redrive_policy == smq.RedrivePolicy("jobs-dlq", 2)
    orders = redis_client.get_queue("orders.fifo").attributes().config
    assert orders.content_based_deduplication and orders.deduplication_scope == "messageGroup"
    assert (orders.fifo_throughput_limit, orders.inflight_limit, orders.event_stream_max_len) == (
        "perMessageGroupId",
        100,
        1000,
    )
    assert json.loads(orders.extra_attributes["Policy"]) == {"Version": "2012-10-17", "Statement": []}
    assert orders.extra_attributes["SqsManagedSseEnabled"] == "false"
    assert {change.action for change in redis_client.apply_queues(path)} == {"unchanged"}
    # RedrivePolicy "" removes a queue's policy, as in SQS.
    removed = redis_client.apply_queues({"queues": {"jobs": {"RedrivePolicy": ""}}})
    assert _lines(removed) == [
        "updated jobs: DeadLetterQueue jobs-dlq -> (none), MaxReceiveCount 4 -> (none)"
    ]
    assert redis_client.queue("jobs").attributes().config.redrive_policy is None


def test_a_mapping_may_stand_for_the_file(redis_client: smq.Client) -> None:
    changes = redis_client.apply_queues({"queues": {"jobs": {"VisibilityTimeout": 10}}})
    assert _lines(changes) == ["created jobs"]
    with pytest.raises(smq.InvalidDeclaration) as raised:
        redis_client.apply_queues({"queues": {"jobs": {"VisibilityTimeout": -1}}})
    assert str(raised.value) == (
        'declared queues: queue "jobs": VisibilityTimeout: must be an integer from 0 to 43200, not -1'
    )
    assert redis_client.apply_queues({}) == []


def test_an_error_is_one_line_naming_the_file_queue_and_field(redis_client: smq.Client, write: Write) -> None:
    path = write("[queues.ok]\n[queues.jobs]\nVisibilityTimeout = 50000\n")
    with pytest.raises(smq.InvalidDeclaration) as raised:
        redis_client.apply_queues(path)
    error = raised.value
    assert (
        str(error)
        == f'{path}: queue "jobs": VisibilityTimeout: must be an integer from 0 to 43200, not 50000'
    )
    assert (error.source, error.queue, error.field) == (str(path), "jobs", "VisibilityTimeout")
    assert isinstance(error, smq.InvalidParameter) and isinstance(error, smq.SmqError)
    assert error.reason == "must be an integer from 0 to 43200, not 50000"
    assert str(pickle.loads(pickle.dumps(error))) == str(error)  # as it crosses processes
    assert redis_client.list_queues() == []  # "ok" was not applied either


# (file text after a valid queue "first", the error's text after the file name, its field)
_BAD_FILES = {
    "syntax": (
        "[queues.jobs\n",
        "not valid TOML: Expected ']' at the end of a table declaration (at line 3, column 13)",
        None,
    ),
    "range": (
        '[queues.jobs]\nMaxReceiveCount = 0\nDeadLetterQueue = "first"\n',
        'queue "jobs": MaxReceiveCount: must be an integer from 1 to 1000, not 0',
        "MaxReceiveCount",
    ),
    "type": (
        "[queues.jobs]\nDelaySeconds = 1.5\n",
        'queue "jobs": DelaySeconds: must be an integer from 0 to 900, not 1.5',
        "DelaySeconds",
    ),
    "unknown field": (
        "[queues.jobs]\nvisibilitytimeout = 3\n",
        'queue "jobs": visibilitytimeout: unknown attribute; did you mean VisibilityTimeout?',
        "visibilitytimeout",
    ),
    "unknown top-level key": (
        "[queue.jobs]\n",
        "unknown key 'queue': declare queues as [queues.NAME] tables",
        None,
    ),
    "unquoted FIFO name": (
        "[queues.orders.fifo]\n",
        'queue "orders": fifo: unknown attribute; a FIFO queue\'s name needs quotes: [queues."orders.fifo"]',
        "fifo",
    ),
    "queue name": (
        '[queues."no spaces"]\n',
        "queue \"no spaces\": queue name 'no spaces' is invalid",
        None,
    ),
    "dead-letter queue neither declared nor existing": (
        '[queues.jobs]\nDeadLetterQueue = "nowhere"\nMaxReceiveCount = 5\n',
        'queue "jobs": DeadLetterQueue: queue "nowhere" is neither declared in this file nor exists',
        "DeadLetterQueue",
    ),
    "dead-letter queue of the other kind": (
        '[queues."jobs.fifo"]\nDeadLetterQueue = "first"\nMaxReceiveCount = 5\n',
        'queue "jobs.fifo": DeadLetterQueue: the dead-letter queue of a FIFO queue must be a FIFO queue, '
        "not 'first'",
        "DeadLetterQueue",
    ),
    "half a redrive policy": (
        '[queues.jobs]\nDeadLetterQueue = "first"\n',
        'queue "jobs": DeadLetterQueue: goes with MaxReceiveCount',
        "DeadLetterQueue",
    ),
    "malformed RedrivePolicy": (
        '[queues.jobs]\nRedrivePolicy = { deadLetterTargetArn = "first" }\n',
        'queue "jobs": RedrivePolicy: must be a table (or its JSON) of deadLetterTargetArn and '
        'maxReceiveCount, or "" for none',
        "RedrivePolicy",
    ),
    "cycle": (
        '[queues.a]\nDeadLetterQueue = "b"\nMaxReceiveCount = 1\n'
        '[queues.b]\nDeadLetterQueue = "a"\nMaxReceiveCount = 1\n',
        'queue "a": DeadLetterQueue: the dead-letter queues form a cycle: a -> b -> a',
        "DeadLetterQueue",
    ),
    "sharded queue as its own dead-letter queue": (
        '[queues.a]\nSmqShards = 2\nDeadLetterQueue = "a"\nMaxReceiveCount = 1\n',
        "queue \"a\": DeadLetterQueue: sharded queue 'a' cannot be its own dead-letter queue",
        "DeadLetterQueue",
    ),
    "FIFO setting on a standard queue": (
        "[queues.jobs]\nContentBasedDeduplication = true\n",
        'queue "jobs": ContentBasedDeduplication: applies to FIFO queues only (names ending in .fifo)',
        "ContentBasedDeduplication",
    ),
    "FifoQueue against the name": (
        '[queues."jobs.fifo"]\nFifoQueue = false\n',
        "queue \"jobs.fifo\": FifoQueue: a FIFO queue's name ends in .fifo, and only a FIFO queue's does",
        "FifoQueue",
    ),
    "FIFO choice": (
        '[queues."jobs.fifo"]\nDeduplicationScope = "group"\n',
        "queue \"jobs.fifo\": DeduplicationScope: must be one of 'queue', 'messageGroup', not 'group'",
        "DeduplicationScope",
    ),
    "fields together": (
        '[queues."jobs.fifo"]\nSmqShards = 2\nDeduplicationScope = "queue"\n',
        'queue "jobs.fifo": DeduplicationScope: a sharded FIFO queue deduplicates within message groups '
        "(DeduplicationScope 'messageGroup')",
        "DeduplicationScope",
    ),
    "tag": (
        '[queues.jobs]\ntags = { "aws:team" = "data" }\n',
        "queue \"jobs\": tags: tag key 'aws:team': the prefix 'aws:' is reserved",
        "tags",
    ),
    "stored attribute": (
        "[queues.jobs]\nPolicy = 'not json'\n",
        'queue "jobs": Policy: is not valid JSON',
        "Policy",
    ),
    "not a table": ("[queues]\njobs = 5\n", 'queue "jobs": must be a table of attributes, not 5', None),
}


@pytest.mark.parametrize("kind", list(_BAD_FILES))
def test_a_file_in_error_names_file_queue_and_field_and_applies_nothing(
    redis_client: smq.Client, write: Write, kind: str
) -> None:
    text, reason, field = _BAD_FILES[kind]
    path = write("[queues.first]\nVisibilityTimeout = 10\n" + text)
    with pytest.raises(smq.InvalidDeclaration) as raised:
        redis_client.apply_queues(path)
    assert str(raised.value).startswith(f"{path}: {reason}")
    assert "\n" not in str(raised.value)
    assert raised.value.field == field
    assert redis_client.list_queues() == []


def test_a_file_that_contradicts_the_queues_that_exist_applies_nothing(
    redis_client: smq.Client, write: Write
) -> None:
    redis_client.create_queue("hot")
    redis_client.create_queue("sharded.fifo", shards=2)
    redis_client.create_queue("tagged", tags={f"k{n}": "v" for n in range(49)})
    cases = {
        "[queues.hot]\nSmqShards = 2\n": (
            'queue "hot": SmqShards: the queue exists with SmqShards 1, and a queue\'s number of shards '
            "is set when it is created, never changed",
            "SmqShards",
        ),
        '[queues."sharded.fifo"]\nDeduplicationScope = "queue"\n': (
            "queue \"sharded.fifo\": DeduplicationScope: queue 'sharded.fifo' is sharded: its "
            "DeduplicationScope is messageGroup, never queue",
            "DeduplicationScope",
        ),
        '[queues.tagged]\ntags = { a = "1", b = "2" }\n': (
            'queue "tagged": tags: 51 tags given; a queue has at most 50',
            "tags",
        ),
    }
    for text, (reason, field) in cases.items():
        path = write("[queues.first]\n" + text)
        with pytest.raises(smq.InvalidDeclaration) as raised:
            redis_client.apply_queues(path)
        assert str(raised.value) == f"{path}: {reason}"
        assert raised.value.field == field
        assert not redis_client.queue_exists("first")
    assert len(redis_client.queue("tagged").tags()) == 49


def test_the_example_file_in_deploy_declares_the_queues_the_setup_job_creates(
    redis_client: smq.Client,
) -> None:
    changes = redis_client.apply_queues(ROOT / "deploy" / "queues.toml")
    assert _lines(changes) == ["created jobs-dlq", "created jobs"]
    assert redis_client.queue("jobs-dlq").attributes().config.message_retention_period == 1209600
    jobs = redis_client.queue("jobs").attributes().config
    assert jobs.visibility_timeout == 30
    assert jobs.redrive_policy == smq.RedrivePolicy("jobs-dlq", 5)


def test_the_files_the_docs_show_apply(redis_client: smq.Client, write: Write) -> None:
    page = (ROOT / "docs" / "declared-queues.md").read_text()
    blocks = [block for block in re.findall(r"```toml\n(.*?)```", page, re.S) if "--8<--" not in block]
    assert blocks
    for block in blocks:
        changes = redis_client.apply_queues(write(block))
        assert {change.action for change in changes} == {"created"}
