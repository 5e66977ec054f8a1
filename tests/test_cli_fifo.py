"""FIFO queues on the command line: `smq queue create/set/show/list`, `send`, `receive` and `peek`
through click's CliRunner (and one real process), against a real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

import smq
from smq.cli import main
from smq.embedded import EmbeddedRedis

Smq = Callable[..., Result]


@pytest.fixture
def cli(redis_client: smq.Client, redis_server: EmbeddedRedis) -> Smq:
    """Runs `smq ARGS` on the fixture's (emptied) Redis, through SMQ_REDIS_URL."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        return runner.invoke(
            main, list(args), input=input, env={"SMQ_REDIS_URL": redis_server.url, **(env or {})}
        )

    return run


@pytest.fixture
def jobs(redis_client: smq.Client) -> smq.Queue:
    return redis_client.create_queue("jobs.fifo")


def _send(queue: smq.Queue, *bodies: str) -> None:
    """Each body to the group named by its first letter, deduplicated by the body."""
    for body in bodies:
        queue.send(body, message_group_id=body[0], deduplication_id=body)


# -- queue create, set, show, list --------------------------------------------------------------


def test_queue_create_of_a_fifo_name_makes_a_fifo_queue_with_the_fifo_settings_given(
    cli: Smq, redis_client: smq.Client
) -> None:
    done = cli(
        "queue",
        "create",
        "jobs.fifo",
        "--content-based-deduplication",
        "--deduplication-scope",
        "messageGroup",
        "--fifo-throughput-limit",
        "perMessageGroupId",
    )
    assert (done.exit_code, done.stdout) == (0, "created queue 'jobs.fifo'\n"), done.output
    config = redis_client.get_queue("jobs.fifo").attributes().config
    assert config.fifo_queue and config.content_based_deduplication
    assert (config.deduplication_scope, config.fifo_throughput_limit) == ("messageGroup", "perMessageGroupId")
    assert config.inflight_limit == 20_000


def test_queue_create_of_a_fifo_name_without_options_takes_the_fifo_defaults(
    cli: Smq, redis_client: smq.Client
) -> None:
    reply = json.loads(cli("queue", "create", "plain.fifo", "--json").stdout)
    assert reply["created"] is True
    settings = reply["settings"]
    assert settings["fifo_queue"] is True and settings["content_based_deduplication"] is False
    assert (settings["deduplication_scope"], settings["fifo_throughput_limit"]) == ("queue", "perQueue")
    assert settings["inflight_limit"] == 20_000


def test_fifo_options_read_their_smq_environment_variables(cli: Smq, redis_client: smq.Client) -> None:
    env = {
        "SMQ_QUEUE_CREATE_CONTENT_BASED_DEDUPLICATION": "true",
        "SMQ_QUEUE_CREATE_DEDUPLICATION_SCOPE": "messageGroup",
        "SMQ_QUEUE_CREATE_FIFO_THROUGHPUT_LIMIT": "perMessageGroupId",
    }
    assert cli("queue", "create", "jobs.fifo", env=env).exit_code == 0
    config = redis_client.get_queue("jobs.fifo").attributes().config
    assert config.content_based_deduplication and config.deduplication_scope == "messageGroup"
    assert config.fifo_throughput_limit == "perMessageGroupId"
    done = cli("send", "jobs.fifo", "x", env={"SMQ_SEND_GROUP": "g", "SMQ_SEND_DEDUPLICATION_ID": "d-1"})
    assert done.exit_code == 0, done.output
    (message,) = redis_client.get_queue("jobs.fifo").receive(1, attempt_id="first")
    assert (message.message_group_id, message.deduplication_id) == ("g", "d-1")
    again = cli("receive", "jobs.fifo", "--json", env={"SMQ_RECEIVE_ATTEMPT_ID": "first"})
    assert json.loads(again.stdout)[0]["receipt_handle"] == message.receipt_handle


@pytest.mark.parametrize(
    "args",
    [
        ["--content-based-deduplication"],
        ["--no-content-based-deduplication"],
        ["--deduplication-scope", "messageGroup"],
        ["--fifo-throughput-limit", "perQueue"],
    ],
)
def test_fifo_options_on_a_standard_queue_fail_in_one_line(
    cli: Smq, redis_client: smq.Client, args: list[str]
) -> None:
    done = cli("queue", "create", "jobs", *args)
    assert (done.exit_code, done.stdout) == (1, "")
    assert done.stderr == (
        f"smq: queue 'jobs' is a standard queue: {args[0]} applies to FIFO queues only "
        "(names ending in .fifo)\n"
    )
    assert not redis_client.queue_exists("jobs")
    redis_client.create_queue("jobs")
    changed = cli("queue", "set", "jobs", *args)
    assert changed.exit_code == 1 and changed.stderr.startswith("smq: queue 'jobs' is a standard queue: ")
    assert changed.stderr.count("\n") == 1


def test_queue_create_with_fifo_settings_that_differ_from_the_existing_queue_fails(
    cli: Smq, jobs: smq.Queue
) -> None:
    done = cli("queue", "create", "jobs.fifo", "--content-based-deduplication")
    assert done.exit_code == 1
    assert done.stderr == "smq: queue 'jobs.fifo' exists with --content-based-deduplication off, not on\n"
    assert cli("queue", "create", "jobs.fifo", "--no-content-based-deduplication").exit_code == 0


def test_queue_set_changes_a_fifo_setting_and_keeps_the_others(cli: Smq, jobs: smq.Queue) -> None:
    done = cli("queue", "set", "jobs.fifo", "--content-based-deduplication")
    assert (done.exit_code, done.stdout) == (0, "queue 'jobs.fifo': changed content_based_deduplication\n")
    config = jobs.attributes().config
    assert config.content_based_deduplication and config.deduplication_scope == "queue"
    reply = json.loads(
        cli("queue", "set", "jobs.fifo", "--deduplication-scope", "messageGroup", "--json").stdout
    )
    assert reply["settings"]["deduplication_scope"] == "messageGroup"
    assert reply["settings"]["content_based_deduplication"] is True


def test_queue_show_of_a_fifo_queue_gives_its_fifo_settings_and_its_groups(cli: Smq, jobs: smq.Queue) -> None:
    _send(jobs, "a1", "a2", "b1", "c1", "c1")  # the second c1 a duplicate
    jobs.receive(1)  # a1: group a locked
    done = cli("queue", "show", "jobs.fifo")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].startswith("queue jobs.fifo (FIFO): created ")
    assert any(line.split() == ["content-based-deduplication", "off"] for line in lines)
    assert any(line.split() == ["deduplication-scope", "queue"] for line in lines)
    assert any(line.split() == ["fifo-throughput-limit", "perQueue"] for line in lines)
    assert any(line.split() == ["inflight-limit", "20000"] for line in lines)
    assert "message groups: 3, 1 with a message in flight" in lines
    assert any(line.split() == ["deduplicated", "1"] for line in lines)
    reply = json.loads(cli("queue", "show", "jobs.fifo", "--json").stdout)
    assert (reply["groups"], reply["groups_in_flight"], reply["visible"], reply["in_flight"]) == (3, 1, 3, 1)
    assert reply["settings"]["fifo_queue"] is True
    assert reply["counters"]["deduplicated"] == 1


def test_queue_show_of_a_standard_queue_shows_no_fifo_settings_or_groups(
    cli: Smq, redis_client: smq.Client
) -> None:
    redis_client.create_queue("plain")
    text = cli("queue", "show", "plain").stdout
    assert "(FIFO)" not in text and "deduplication" not in text.replace("deduplicated", "")
    assert "message groups" not in text
    reply = json.loads(cli("queue", "show", "plain", "--json").stdout)
    assert "groups" not in reply and reply["settings"]["fifo_queue"] is False
    assert "content_based_deduplication" not in reply["settings"]


def test_queue_list_json_gives_the_groups_of_fifo_queues_only(
    cli: Smq, jobs: smq.Queue, redis_client: smq.Client
) -> None:
    redis_client.create_queue("plain")
    _send(jobs, "a1", "b1")
    jobs.receive(1)
    listed = {q["name"]: q for q in json.loads(cli("queue", "list", "--json").stdout)}
    assert (listed["jobs.fifo"]["groups"], listed["jobs.fifo"]["groups_in_flight"]) == (2, 1)
    assert "groups" not in listed["plain"]


# -- send ------------------------------------------------------------------------------------------


def test_send_to_a_fifo_queue_prints_the_sequence_number_and_marks_a_duplicate(
    cli: Smq, jobs: smq.Queue
) -> None:
    first = cli("send", "jobs.fifo", "pay 10", "--group", "acct-1", "--deduplication-id", "tx-1")
    assert first.exit_code == 0, first.output
    message_id, word, sequence = first.stdout.split()
    assert word == "sequence" and len(sequence) == 20 and sequence.isdigit()
    again = cli("send", "jobs.fifo", "pay 10", "--group", "acct-1", "--deduplication-id", "tx-1")
    assert again.exit_code == 0, again.output
    assert again.stdout == (
        f"{message_id}  sequence {sequence}  duplicate (sent within 5 minutes: not stored again)\n"
    )
    reply = json.loads(
        cli("send", "jobs.fifo", "pay 10", "--group", "acct-1", "--deduplication-id", "tx-1", "--json").stdout
    )
    assert reply == {
        "message_id": message_id,
        "md5_of_body": reply["md5_of_body"],
        "sequence_number": sequence,
        "duplicate": True,
    }
    (message,) = jobs.receive(10)
    assert (message.message_id, message.sequence_number, message.message_group_id) == (
        message_id,
        sequence,
        "acct-1",
    )
    assert jobs.attributes().counters["deduplicated"] == 2


def test_send_to_a_content_based_fifo_queue_needs_no_deduplication_id(
    cli: Smq, redis_client: smq.Client
) -> None:
    redis_client.create_queue("jobs.fifo", content_based_deduplication=True)
    reply = json.loads(cli("send", "jobs.fifo", "hello", "--group", "g", "--json").stdout)
    assert reply["duplicate"] is False
    assert json.loads(cli("send", "jobs.fifo", "hello", "--group", "g", "--json").stdout)["duplicate"] is True


@pytest.mark.parametrize(
    ("queue", "args", "message"),
    [
        (
            "jobs.fifo",
            ["--deduplication-id", "d"],
            "queue 'jobs.fifo' is a FIFO queue: give --group (the message group)",
        ),
        (
            "jobs.fifo",
            ["--group", "g", "--deduplication-id", "d", "--delay", "5"],
            "FIFO queue 'jobs.fifo' takes no per-message --delay; "
            "the queue's delay applies (smq queue set --delay)",
        ),
        (
            "jobs.fifo",
            ["--group", "g"],
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId "
            "provided explicitly",
        ),
        (
            "plain",
            ["--deduplication-id", "d"],
            "queue 'plain' is a standard queue: --deduplication-id applies to FIFO queues only "
            "(names ending in .fifo)",
        ),
    ],
)
def test_a_send_the_queue_would_refuse_fails_in_one_line_naming_the_option(
    cli: Smq, jobs: smq.Queue, redis_client: smq.Client, queue: str, args: list[str], message: str
) -> None:
    redis_client.create_queue("plain")
    done = cli("send", queue, "x", *args)
    assert (done.exit_code, done.stdout, done.stderr) == (1, "", f"smq: {message}\n")
    assert redis_client.get_queue(queue).attributes().counters.get("sent", 0) == 0


def test_send_with_a_group_to_a_standard_queue_keeps_the_group(cli: Smq, redis_client: smq.Client) -> None:
    plain = redis_client.create_queue("plain")
    done = cli("send", "plain", "x", "--group", "tenant-7")
    assert done.exit_code == 0 and len(done.stdout.split()) == 1  # the message id alone, as before
    table = cli("peek", "plain").stdout.splitlines()
    assert table[0].split()[:3] == ["STATE", "ID", "GROUP"] and "tenant-7" in table[1]
    (message,) = plain.receive(1, visibility_timeout=0)
    assert message.message_group_id == "tenant-7"
    (received,) = json.loads(cli("receive", "plain", "--json").stdout)
    assert received["message_group_id"] == "tenant-7" and "sequence_number" not in received


def test_send_lines_to_a_fifo_queue_keeps_their_order_and_a_rerun_stores_no_line_twice(
    cli: Smq, jobs: smq.Queue
) -> None:
    lines = "".join(f"step {n}\n" for n in range(1, 26))
    done = cli(
        "send", "jobs.fifo", "--lines", "--group", "build-7", "--deduplication-id", "run-1", input=lines
    )
    assert (done.exit_code, done.stdout) == (0, "sent 25 messages\n"), done.output
    rerun = cli("send", "jobs.fifo", "-", "--group", "build-7", "--deduplication-id", "run-1", input=lines)
    assert (rerun.exit_code, rerun.stdout) == (0, "sent 25 messages (25 duplicates, not stored again)\n")
    received: list[smq.Message] = []
    while batch := jobs.receive(10):
        received += batch
        for message in batch:
            jobs.delete(message)
    assert [m.body for m in received] == [f"step {n}" for n in range(1, 26)]
    assert received[0].deduplication_id == "run-1-1" and received[-1].deduplication_id == "run-1-25"
    sequences = [m.sequence_number or "" for m in received]
    assert sequences == sorted(sequences)


def test_send_lines_json_gives_each_lines_sequence_number_and_duplicates(
    cli: Smq, redis_client: smq.Client
) -> None:
    redis_client.create_queue("jobs.fifo", content_based_deduplication=True)
    done = cli("send", "jobs.fifo", "--lines", "--group", "g", "--json", input="a\nb\na\n")
    assert done.exit_code == 0, done.output
    sent = json.loads(done.stdout)["sent"]
    assert [(s["line"], s["duplicate"]) for s in sent] == [(1, False), (2, False), (3, True)]
    assert sent[2]["message_id"] == sent[0]["message_id"]
    assert sent[2]["sequence_number"] == sent[0]["sequence_number"] < sent[1]["sequence_number"]
    assert cli("send", "jobs.fifo", "--lines", "--group", "g", input="a\nc\n").stdout == (
        "sent 2 messages (1 duplicates, not stored again)\n"
    )


def test_send_lines_without_a_deduplication_id_is_refused_once_not_per_line(
    cli: Smq, jobs: smq.Queue
) -> None:
    done = cli("send", "jobs.fifo", "--lines", "--group", "g", input="a\nb\nc\n")
    assert (done.exit_code, done.stdout) == (1, "")
    assert done.stderr == (
        "smq: FIFO queue 'jobs.fifo' has no content-based deduplication: give --deduplication-id "
        "(each line's id is ID-<line number>)\n"
    )
    assert jobs.attributes().visible == 0


# -- receive and peek ------------------------------------------------------------------------------


def test_receive_from_a_fifo_queue_shows_group_sequence_and_deduplication_id(
    cli: Smq, jobs: smq.Queue
) -> None:
    _send(jobs, "a1", "a2", "b1")
    done = cli("receive", "jobs.fifo", "--max-messages", "10")
    assert done.exit_code == 0, done.output
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["ID", "GROUP", "SEQUENCE", "DEDUPLICATION", "ID", "RECEIPT", "RECEIVES", "BODY"]
    cells = [row.split() for row in rows]
    assert [(c[1], c[3], c[-1]) for c in cells] == [("a", "a1", "a1"), ("a", "a2", "a2"), ("b", "b1", "b1")]
    assert all(len(c[2]) == 20 and c[2].isdigit() for c in cells)


def test_receive_json_from_a_fifo_queue_gives_the_fifo_fields_and_an_attempt_id_repeats_it(
    cli: Smq, jobs: smq.Queue
) -> None:
    _send(jobs, "a1", "b1")
    first = json.loads(cli("receive", "jobs.fifo", "-n", "10", "--attempt-id", "try-1", "--json").stdout)
    assert [(m["message_group_id"], m["deduplication_id"], m["body"]) for m in first] == [
        ("a", "a1", "a1"),
        ("b", "b1", "b1"),
    ]
    assert all(len(m["sequence_number"]) == 20 for m in first)
    again = json.loads(cli("receive", "jobs.fifo", "-n", "10", "--attempt-id", "try-1", "--json").stdout)
    assert [m["receipt_handle"] for m in again] == [m["receipt_handle"] for m in first]
    assert json.loads(cli("receive", "jobs.fifo", "-n", "10", "--json").stdout) == []  # both groups locked


def test_receive_with_an_attempt_id_from_a_standard_queue_fails_in_one_line(
    cli: Smq, redis_client: smq.Client
) -> None:
    redis_client.create_queue("plain")
    done = cli("receive", "plain", "--attempt-id", "x")
    assert (done.exit_code, done.stderr) == (1, "smq: ReceiveRequestAttemptId applies to FIFO queues only\n")


def test_peek_of_a_fifo_queue_shows_each_messages_group(cli: Smq, jobs: smq.Queue) -> None:
    _send(jobs, "b1", "a1", "b2")
    jobs.receive(1)  # b1
    done = cli("peek", "jobs.fifo", "--state", "all")
    assert done.exit_code == 0, done.output
    header, *rows = done.stdout.splitlines()
    assert header.split()[:3] == ["STATE", "ID", "GROUP"]
    assert sorted((row.split()[0], row.split()[2], row.split()[-1]) for row in rows) == [
        ("in-flight", "b", "b1"),
        ("visible", "a", "a1"),
        ("visible", "b", "b2"),
    ]
    peeked = json.loads(cli("peek", "jobs.fifo", "--json").stdout)
    assert sorted((m["message_group_id"], m["body"]) for m in peeked) == [("a", "a1"), ("b", "b2")]


# -- a real process --------------------------------------------------------------------------------


def test_the_cli_as_a_process_refuses_fifo_options_on_a_standard_queue_in_one_line(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMQ_")}
    env.update(SMQ_REDIS_URL=redis_server.url, SMQ_QUEUE_CREATE_DEDUPLICATION_SCOPE="messageGroup")
    done = subprocess.run(
        [sys.executable, "-m", "smq", "queue", "create", "jobs"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "smq: queue 'jobs' is a standard queue: --deduplication-scope applies to FIFO queues only "
        "(names ending in .fifo)\n"
    )
    made = subprocess.run(
        [sys.executable, "-m", "smq", "queue", "create", "jobs.fifo"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert made.returncode == 0, made.stderr
    assert redis_client.get_queue("jobs.fifo").attributes().config.deduplication_scope == "messageGroup"
