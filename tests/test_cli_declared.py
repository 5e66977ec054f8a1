"""Declared queues from the command line: `smq queue apply` through click's CliRunner, and
`smq serve --queues` as a real subprocess that boto3 then talks to, on a real Redis."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import smq
from http_support import ACCOUNT, BIN, REGION, Server, json_client
from smq.cli import main
from smq.embedded import EmbeddedRedis

FILE = """\
[queues.jobs-dlq]
MessageRetentionPeriod = 1209600

[queues.jobs]
VisibilityTimeout = 30
DeadLetterQueue = "jobs-dlq"
MaxReceiveCount = 5
tags = { team = "data" }
"""


def _apply(redis_server: EmbeddedRedis, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(
        main, ["queue", "apply", *args], input=input, env={"SMQ_REDIS_URL": redis_server.url}
    )


def test_queue_apply_prints_a_line_per_queue_and_a_second_run_changes_nothing(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    path = tmp_path / "queues.toml"
    path.write_text(FILE)
    done = _apply(redis_server, str(path))
    assert done.exit_code == 0, done.output
    assert done.stdout == "created jobs-dlq\ncreated jobs\n"
    assert redis_client.get_queue("jobs").attributes().config.redrive_policy == smq.RedrivePolicy(
        "jobs-dlq", 5
    )
    again = _apply(redis_server, str(path))
    assert (again.exit_code, again.stdout) == (0, "unchanged jobs-dlq\nunchanged jobs\n")
    redis_client.queue("jobs").set_attributes(visibility_timeout=60)
    changed = _apply(redis_server, str(path), "--json")
    assert changed.exit_code == 0, changed.output
    assert json.loads(changed.stdout) == [
        {"queue": "jobs-dlq", "action": "unchanged", "changes": []},
        {
            "queue": "jobs",
            "action": "updated",
            "changes": [{"attribute": "VisibilityTimeout", "before": 60, "after": 30}],
        },
    ]


def test_queue_apply_dry_run_prints_the_plan_and_changes_nothing(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    redis_client.create_queue("jobs", visibility_timeout=60)
    path = tmp_path / "queues.toml"
    path.write_text(FILE)
    done = _apply(redis_server, str(path), "--dry-run")
    assert done.exit_code == 0, done.output
    assert done.stdout == (
        "would create jobs-dlq\n"
        "would update jobs: VisibilityTimeout 60 -> 30, DeadLetterQueue (none) -> jobs-dlq, "
        "MaxReceiveCount (none) -> 5, tags.team (none) -> data\n"
        "dry run: nothing changed\n"
    )
    assert redis_client.list_queues() == ["jobs"]
    assert redis_client.queue("jobs").attributes().config.visibility_timeout == 60


def test_queue_apply_reads_standard_input(redis_client: smq.Client, redis_server: EmbeddedRedis) -> None:
    done = _apply(redis_server, "-", input=FILE)
    assert (done.exit_code, done.stdout) == (0, "created jobs-dlq\ncreated jobs\n")
    bad = _apply(redis_server, "-", input="[queues.x]\nDelaySeconds = 901\n")
    assert bad.exit_code == 1
    assert bad.stderr == 'smq: <stdin>: queue "x": DelaySeconds: must be an integer from 0 to 900, not 901\n'


def test_queue_apply_of_a_file_in_error_exits_1_with_one_line_and_changes_nothing(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    path = tmp_path / "queues.toml"
    path.write_text(FILE + '\n[queues.orders]\nDeadLetterQueue = "nowhere"\nMaxReceiveCount = 3\n')
    done = _apply(redis_server, str(path))
    assert done.exit_code == 1
    assert done.stdout == ""
    assert done.stderr == (
        f'smq: {path}: queue "orders": DeadLetterQueue: queue "nowhere" is neither declared in this file '
        "nor exists\n"
    )
    assert redis_client.list_queues() == []
    missing = _apply(redis_server, str(tmp_path / "nope.toml"))
    assert missing.exit_code == 1
    assert missing.stderr == f"smq: {tmp_path / 'nope.toml'}: cannot read it: No such file or directory\n"


def test_serve_with_queues_creates_them_before_it_listens(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    path = tmp_path / "queues.toml"
    path.write_text(FILE + '\n[queues."orders.fifo"]\nContentBasedDeduplication = true\n')
    server = Server(redis_server.url, "--no-auth", env={"SMQ_QUEUES": str(path)})
    try:
        sqs = json_client(server.url)
        url = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert attributes["VisibilityTimeout"] == "30"
        assert json.loads(attributes["RedrivePolicy"]) == {
            "deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs-dlq",
            "maxReceiveCount": 5,
        }
        assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "data"}
        dlq = sqs.get_queue_url(QueueName="jobs-dlq")["QueueUrl"]
        retention = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["MessageRetentionPeriod"])
        assert retention["Attributes"] == {"MessageRetentionPeriod": "1209600"}
        fifo = sqs.get_queue_url(QueueName="orders.fifo")["QueueUrl"]
        dedup = sqs.get_queue_attributes(QueueUrl=fifo, AttributeNames=["ContentBasedDeduplication"])
        assert dedup["Attributes"] == {"ContentBasedDeduplication": "true"}
    finally:
        server.stop()
    logs = server.logs()
    assert "smq serve: " + f"{path}: created jobs-dlq" in logs
    assert "smq serve: " + f"{path}: created orders.fifo" in logs
    # A second server on the same file changes nothing, and says so.
    again = Server(redis_server.url, "--no-auth", "--queues", str(path))
    again.stop()
    assert f"{path}: unchanged jobs" in again.logs()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[queues.jobs]\nVisibilityTimeout = 50000\n", 'queue "jobs": VisibilityTimeout: must be an integer'),
        ("[queues.jobs\n", "not valid TOML: Expected ']' at the end of a table declaration (at line 2"),
        # Wrong only against Redis: checked once connected, still before listening.
        (
            '[queues.jobs]\nDeadLetterQueue = "gone"\nMaxReceiveCount = 1\n',
            'queue "jobs": DeadLetterQueue: queue "gone"',
        ),
    ],
)
def test_serve_with_a_file_in_error_exits_non_zero_before_listening(
    redis_client: smq.Client, redis_server: EmbeddedRedis, tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "queues.toml"
    path.write_text("[queues.first]\n" + text)
    done = subprocess.run(
        [str(BIN / "smq"), "serve", "--redis-url", redis_server.url, "--port", "0", "--queues", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )
    assert done.returncode == 1
    assert "listening" not in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("smq: ")]
    assert len(errors) == 1 and errors[0].startswith(f"smq: {path}: {reason}"), done.stderr
    assert redis_client.list_queues() == []


def test_serve_with_queues_exits_non_zero_when_redis_cannot_be_reached(tmp_path: Path) -> None:
    path = tmp_path / "queues.toml"
    path.write_text(FILE)
    done = subprocess.run(
        [
            str(BIN / "smq"),
            "serve",
            "--redis-url",
            "redis://127.0.0.1:1",
            "--port",
            "0",
            "--queues",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "listening" not in done.stdout
    assert done.stderr.splitlines()[-1].startswith(f"smq: applying {path}: "), done.stderr
