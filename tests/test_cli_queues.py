"""`smq queue ...` through click's CliRunner, against a real Redis."""

from __future__ import annotations

import json
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


def test_queue_create_makes_a_queue_with_the_settings_given(cli: Smq, redis_client: smq.Client) -> None:
    done = cli(
        "queue",
        "create",
        "jobs",
        "--visibility-timeout",
        "60",
        "--delay",
        "5",
        "--retention",
        "3600",
        "--max-message-size",
        "2048",
        "--wait-time",
        "3",
        "--inflight-limit",
        "50",
        "--event-stream-max-len",
        "100",
    )
    assert done.exit_code == 0, done.output
    assert done.stdout == "created queue 'jobs'\n"
    config = redis_client.get_queue("jobs").attributes().config
    assert (config.visibility_timeout, config.delay_seconds, config.message_retention_period) == (60, 5, 3600)
    assert (config.maximum_message_size, config.receive_message_wait_time_seconds) == (2048, 3)
    assert (config.inflight_limit, config.event_stream_max_len) == (50, 100)


def test_queue_create_with_a_dead_letter_queue_and_tags_sets_both(cli: Smq, redis_client: smq.Client) -> None:
    assert cli("queue", "create", "jobs-dlq").exit_code == 0
    done = cli(
        "queue",
        "create",
        "jobs",
        "--dead-letter-queue",
        "jobs-dlq",
        "--max-receive-count",
        "3",
        "--tag",
        "team=search",
        "--tag",
        "cost=",
        "--json",
    )
    assert done.exit_code == 0, done.output
    reply = json.loads(done.stdout)
    assert reply["created"] is True
    assert reply["settings"]["redrive_policy"] == {"dead_letter_queue": "jobs-dlq", "max_receive_count": 3}
    assert redis_client.get_queue("jobs").tags() == {"team": "search", "cost": ""}


def test_queue_create_of_a_queue_that_exists_with_the_same_settings_says_so(cli: Smq) -> None:
    cli("queue", "create", "jobs", "--visibility-timeout", "60")
    done = cli("queue", "create", "jobs", "--visibility-timeout", "60", "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["created"] is False


def test_queue_create_of_a_queue_that_exists_with_other_settings_fails_with_one_line(cli: Smq) -> None:
    cli("queue", "create", "jobs", "--visibility-timeout", "60")
    done = cli("queue", "create", "jobs", "--visibility-timeout", "30")
    assert done.exit_code == 1
    assert done.stderr == "smq: queue 'jobs' exists with --visibility-timeout 60, not 30\n"


def test_queue_create_needs_max_receive_count_with_a_dead_letter_queue(cli: Smq) -> None:
    done = cli("queue", "create", "jobs", "--dead-letter-queue", "dlq")
    assert done.exit_code == 2 and "go together" in done.stderr


def test_queue_create_refuses_an_out_of_range_setting_as_a_usage_error(cli: Smq) -> None:
    done = cli("queue", "create", "jobs", "--visibility-timeout", "43201")
    assert done.exit_code == 2 and "0<=x<=43200" in done.stderr


def test_queue_create_refuses_a_tag_without_equals_sign(cli: Smq) -> None:
    done = cli("queue", "create", "jobs", "--tag", "team")
    assert done.exit_code == 2 and "KEY=VALUE" in done.stderr


def test_queue_create_of_an_invalid_name_fails_with_one_line(cli: Smq) -> None:
    done = cli("queue", "create", "no spaces")
    assert done.exit_code == 1
    assert done.stderr.startswith("smq: queue name 'no spaces' is invalid") and done.stderr.count("\n") == 1


def test_queue_list_prints_an_aligned_table_of_counts(cli: Smq, redis_client: smq.Client) -> None:
    jobs = redis_client.create_queue("jobs")
    redis_client.create_queue("emails-outbound")
    for n in range(3):
        jobs.send(f"job {n}")
    jobs.send("later", delay_seconds=60)
    jobs.receive(1)
    done = cli("queue", "list")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["NAME", "VISIBLE", "IN", "FLIGHT", "DELAYED", "OLDEST"]
    assert lines[1].split() == ["emails-outbound", "0", "0", "0", "-"]
    assert lines[2].split()[:4] == ["jobs", "2", "1", "1"]
    # Aligned: every column starts where its header does; numbers end where theirs does.
    assert lines[1].index("0") + 1 == lines[0].index("VISIBLE") + len("VISIBLE")
    assert lines[2].index(" 2 ") + 2 == lines[0].index("VISIBLE") + len("VISIBLE")


def test_queue_list_json_with_prefix_gives_the_counts_of_matching_queues(
    cli: Smq, redis_client: smq.Client
) -> None:
    redis_client.create_queue("jobs").send("x")
    redis_client.create_queue("emails")
    done = cli("queue", "list", "--prefix", "jo", "--json")
    assert done.exit_code == 0, done.output
    (only,) = json.loads(done.stdout)
    assert only["name"] == "jobs" and only["visible"] == 1 and only["in_flight"] == 0
    assert only["oldest_age"] >= 0


def test_queue_list_of_no_queues_prints_only_the_header(cli: Smq) -> None:
    done = cli("queue", "list")
    assert done.exit_code == 0 and done.stdout.split() == [
        "NAME",
        "VISIBLE",
        "IN",
        "FLIGHT",
        "DELAYED",
        "OLDEST",
    ]


def test_queue_show_prints_settings_counts_counters_tags_and_sources(
    cli: Smq, redis_client: smq.Client
) -> None:
    redis_client.create_queue("jobs-dlq")
    jobs = redis_client.create_queue(
        "jobs",
        visibility_timeout=45,
        redrive_policy=smq.RedrivePolicy("jobs-dlq", 4),
        tags={"team": "search"},
    )
    jobs.send("a")
    done = cli("queue", "show", "jobs")
    assert done.exit_code == 0, done.output
    text = done.stdout
    assert "visibility-timeout    45s" in text
    assert "dead-letter-queue     jobs-dlq after 4 receives" in text
    rows = [line.split() for line in text.splitlines()]
    assert ["visible", "1"] in rows and ["sent", "1"] in rows and ["team", "search"] in rows
    shown = cli("queue", "show", "jobs-dlq").stdout
    assert "dead-letter queue of: jobs" in shown


def test_queue_show_json_has_settings_counts_counters_and_tags(cli: Smq, redis_client: smq.Client) -> None:
    redis_client.create_queue("jobs", tags={"team": "search"}).send("a")
    reply = json.loads(cli("queue", "show", "jobs", "--json").stdout)
    assert reply["settings"]["visibility_timeout"] == 30 and reply["settings"]["redrive_policy"] is None
    assert reply["visible"] == 1 and reply["counters"]["sent"] == 1
    assert reply["tags"] == {"team": "search"} and reply["dead_letter_sources"] == []


def test_queue_show_of_a_missing_queue_fails_with_one_line(cli: Smq) -> None:
    done = cli("queue", "show", "nope")
    assert (done.exit_code, done.stderr) == (1, "smq: queue 'nope' does not exist\n")


def test_queue_set_changes_only_the_settings_given(cli: Smq, redis_client: smq.Client) -> None:
    redis_client.create_queue("jobs", visibility_timeout=45, delay_seconds=2)
    done = cli("queue", "set", "jobs", "--visibility-timeout", "90", "--tag", "team=a")
    assert done.exit_code == 0, done.output
    assert done.stdout == "queue 'jobs': changed visibility_timeout, tags\n"
    jobs = redis_client.get_queue("jobs")
    config = jobs.attributes().config
    assert (config.visibility_timeout, config.delay_seconds) == (90, 2)
    assert jobs.tags() == {"team": "a"}
    assert cli("queue", "set", "jobs", "--untag", "team").exit_code == 0
    assert jobs.tags() == {}


def test_queue_set_max_receive_count_alone_keeps_the_dead_letter_queue(
    cli: Smq, redis_client: smq.Client
) -> None:
    redis_client.create_queue("dlq")
    redis_client.create_queue("jobs", redrive_policy=smq.RedrivePolicy("dlq", 4))
    reply = json.loads(cli("queue", "set", "jobs", "--max-receive-count", "9", "--json").stdout)
    assert reply["settings"]["redrive_policy"] == {"dead_letter_queue": "dlq", "max_receive_count": 9}


def test_queue_set_no_dead_letter_queue_removes_the_redrive_policy(
    cli: Smq, redis_client: smq.Client
) -> None:
    redis_client.create_queue("dlq")
    redis_client.create_queue("jobs", redrive_policy=smq.RedrivePolicy("dlq", 4))
    done = cli("queue", "set", "jobs", "--no-dead-letter-queue")
    assert done.exit_code == 0, done.output
    assert redis_client.get_queue("jobs").attributes().config.redrive_policy is None


def test_queue_set_a_dead_letter_queue_that_does_not_exist_fails_with_one_line(
    cli: Smq, redis_client: smq.Client
) -> None:
    redis_client.create_queue("jobs")
    done = cli("queue", "set", "jobs", "--dead-letter-queue", "nope", "--max-receive-count", "3")
    assert done.exit_code == 1
    assert done.stderr == "smq: dead-letter queue 'nope' does not exist; create it first\n"


def test_queue_set_without_anything_to_change_is_a_usage_error(cli: Smq, redis_client: smq.Client) -> None:
    redis_client.create_queue("jobs")
    done = cli("queue", "set", "jobs")
    assert done.exit_code == 2 and "nothing to change" in done.stderr


def test_queue_purge_answered_no_keeps_the_messages(cli: Smq, redis_client: smq.Client) -> None:
    jobs = redis_client.create_queue("jobs")
    jobs.send("a")
    done = cli("queue", "purge", "jobs", input="n\n")
    assert done.exit_code == 1
    assert "Delete all 1 messages of queue 'jobs'?" in done.stderr and "Aborted" in done.stderr
    assert jobs.attributes().visible == 1


def test_queue_purge_answered_yes_deletes_the_messages(cli: Smq, redis_client: smq.Client) -> None:
    jobs = redis_client.create_queue("jobs")
    jobs.send("a")
    jobs.send("b")
    done = cli("queue", "purge", "jobs", input="y\n")
    assert done.exit_code == 0, done.output
    assert done.stdout == "purged 2 messages from queue 'jobs'\n"
    assert jobs.attributes().visible == 0


def test_queue_purge_with_yes_asks_nothing(cli: Smq, redis_client: smq.Client) -> None:
    redis_client.create_queue("jobs").send("a")
    done = cli("queue", "purge", "jobs", "--yes", "--json")
    assert done.exit_code == 0 and done.stderr == ""
    assert json.loads(done.stdout) == {"name": "jobs", "purged": 1}


def test_queue_delete_answered_no_keeps_the_queue(cli: Smq, redis_client: smq.Client) -> None:
    redis_client.create_queue("jobs")
    done = cli("queue", "delete", "jobs", input="n\n")
    assert done.exit_code == 1 and redis_client.queue_exists("jobs")


def test_queue_delete_with_yes_deletes_the_queue(cli: Smq, redis_client: smq.Client) -> None:
    redis_client.create_queue("jobs").send("a")
    done = cli("queue", "delete", "jobs", "--yes")
    assert (done.exit_code, done.stdout) == (0, "deleted queue 'jobs'\n")
    assert not redis_client.queue_exists("jobs")


def test_queue_delete_of_a_missing_queue_fails_with_one_line_before_asking(cli: Smq) -> None:
    done = cli("queue", "delete", "nope")
    assert (done.exit_code, done.stderr) == (1, "smq: queue 'nope' does not exist\n")
