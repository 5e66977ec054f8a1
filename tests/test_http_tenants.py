"""Tenants: access keys act in their accounts; another account's queue is
usable only where its Policy allows, over both protocols, with real boto3
and the AWS CLI against a real `smq serve` on a real Redis."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

import smq
from http_support import BIN, KEY_ID, REGION, ROOT, SECRET, Server, aws_cli, json_client, query_client
from smq.embedded import EmbeddedRedis

OWNER, OTHER, THIRD = "111111111111", "222222222222", "333333333333"
KEYS = {
    OWNER: ("AKIDOWNER", "owner-secret"),
    OTHER: ("AKIDOTHER", "other-secret"),
    THIRD: ("AKIDTHIRD", "third-secret"),
}
ARGS = [f"--access-key={KEY_ID}:{SECRET}"] + [f"--access-key={k}:{s}:{a}" for a, (k, s) in KEYS.items()]


@pytest.fixture(scope="module")
def server(http_redis: EmbeddedRedis) -> Iterator[Server]:
    made = Server(http_redis.url, *ARGS)
    yield made
    made.stop()


@pytest.fixture(params=["json", "query"])
def as_account(request: pytest.FixtureRequest, server: Server, core: smq.Client) -> Any:
    """``as_account(account)``: a boto3 client signing with that account's key (Redis emptied)."""
    make = json_client if request.param == "json" else query_client
    return lambda account: make(server.url, key=KEYS[account])


def refusal(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, int, str]:
    response = caught.value.response
    return (
        response["Error"]["Code"],
        response["ResponseMetadata"]["HTTPStatusCode"],
        response["Error"]["Message"],
    )


def denied(call: Any, **params: Any) -> str:
    """Call; it must be refused with AccessDenied (403); return the message."""
    with pytest.raises(ClientError) as caught:
        call(**params)
    code, status, message = refusal(caught)
    assert (code, status) == ("AccessDenied", 403), message
    return message


def test_each_key_acts_in_its_own_account(as_account: Any, core: smq.Client) -> None:
    owner, other = as_account(OWNER), as_account(OTHER)
    owner_url = owner.create_queue(QueueName="jobs")["QueueUrl"]
    other_url = other.create_queue(QueueName="jobs")["QueueUrl"]
    assert owner_url.endswith(f"/{OWNER}/jobs") and other_url.endswith(f"/{OTHER}/jobs")
    owner.send_message(QueueUrl=owner_url, MessageBody="for the owner")
    assert other.receive_message(QueueUrl=other_url).get("Messages", []) == []
    assert owner.list_queues()["QueueUrls"] == [owner_url]
    assert other.list_queues()["QueueUrls"] == [other_url]
    arn = owner.get_queue_attributes(QueueUrl=owner_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    assert arn == f"arn:aws:sqs:{REGION}:{OWNER}:jobs"
    assert sorted(core.list_queues()) == [f"{REGION}:{OWNER}:jobs", f"{REGION}:{OTHER}:jobs"]
    # A bare name is in the caller's account.
    assert other.get_queue_url(QueueName="jobs")["QueueUrl"] == other_url


def test_another_accounts_queue_is_denied_without_a_policy(as_account: Any, core: smq.Client) -> None:
    owner, other = as_account(OWNER), as_account(OTHER)
    url = owner.create_queue(QueueName="jobs")["QueueUrl"]
    owner.send_message(QueueUrl=url, MessageBody="kept")
    message = denied(other.send_message, QueueUrl=url, MessageBody="intruder")
    assert message == (
        f"User: arn:aws:iam::{OTHER}:root is not authorized to perform: sqs:sendmessage on resource: "
        f"arn:aws:sqs:{REGION}:{OWNER}:jobs "
        "because no resource-based policy allows the sqs:sendmessage action"
    )
    denied(other.send_message_batch, QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "x"}])
    denied(other.receive_message, QueueUrl=url)
    denied(other.get_queue_attributes, QueueUrl=url, AttributeNames=["All"])
    denied(other.purge_queue, QueueUrl=url)
    denied(other.delete_queue, QueueUrl=url)
    denied(other.get_queue_url, QueueName="jobs", QueueOwnerAWSAccountId=OWNER)
    # ... and it does not tell a queue that is not there from one it may not use.
    denied(other.send_message, QueueUrl=url.replace("/jobs", "/no-such-queue"), MessageBody="x")
    queue = core.queue(f"{REGION}:{OWNER}:jobs")
    assert [m.body for m in queue.peek()] == ["kept"]


def test_grant_use_revoke(as_account: Any, core: smq.Client) -> None:
    owner, other, third = as_account(OWNER), as_account(OTHER), as_account(THIRD)
    url = owner.create_queue(QueueName="jobs")["QueueUrl"]
    owner.add_permission(
        QueueUrl=url,
        Label="other-works",
        AWSAccountIds=[OTHER],
        Actions=["SendMessage", "ReceiveMessage", "DeleteMessage", "GetQueueUrl"],
    )
    # Grant, then use: find the queue, send (one and a batch), receive, delete.
    assert other.get_queue_url(QueueName="jobs", QueueOwnerAWSAccountId=OWNER)["QueueUrl"] == url
    other.send_message(QueueUrl=url, MessageBody="one")
    other.send_message_batch(QueueUrl=url, Entries=[{"Id": "b", "MessageBody": "two"}])
    received = other.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    assert sorted(m["Body"] for m in received) == ["one", "two"]
    other.delete_message(QueueUrl=url, ReceiptHandle=received[0]["ReceiptHandle"])
    other.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "x", "ReceiptHandle": received[1]["ReceiptHandle"]}]
    )
    # Only what was granted, and only to whom.
    owner.send_message(QueueUrl=url, MessageBody="three")
    receipt = other.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"][0]["ReceiptHandle"]
    denied(other.change_message_visibility, QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=0)
    denied(
        other.change_message_visibility_batch,
        QueueUrl=url,
        Entries=[{"Id": "c", "ReceiptHandle": receipt, "VisibilityTimeout": 0}],
    )
    denied(other.get_queue_attributes, QueueUrl=url, AttributeNames=["All"])
    denied(third.send_message, QueueUrl=url, MessageBody="third")
    # Revoke: refused again at once.
    owner.remove_permission(QueueUrl=url, Label="other-works")
    denied(other.send_message, QueueUrl=url, MessageBody="after revoke")
    denied(other.get_queue_url, QueueName="jobs", QueueOwnerAWSAccountId=OWNER)
    assert [m.body for m in core.queue(f"{REGION}:{OWNER}:jobs").peek("in_flight")] == ["three"]


def set_policy(client: Any, url: str, *statements: dict[str, Any]) -> None:
    document = {"Version": "2012-10-17", "Statement": list(statements)}
    client.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(document)})


def test_an_explicit_deny_wins_and_never_locks_the_owner_out(as_account: Any) -> None:
    owner, other, third = as_account(OWNER), as_account(OTHER), as_account(THIRD)
    url = owner.create_queue(QueueName="jobs")["QueueUrl"]
    arn = f"arn:aws:sqs:{REGION}:{OWNER}:jobs"
    set_policy(
        owner,
        url,
        {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": arn},
        {"Effect": "Deny", "Principal": {"AWS": [OTHER]}, "Action": "sqs:Receive*", "Resource": arn},
        {"Effect": "Deny", "Principal": "*", "Action": "sqs:PurgeQueue", "Resource": arn},
    )
    other.send_message(QueueUrl=url, MessageBody="from other")
    message = denied(other.receive_message, QueueUrl=url)
    assert message.endswith("on resource: " + arn + " with an explicit deny in a resource-based policy")
    assert third.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"][0]["Body"] == "from other"
    # A Deny binds the owner too, on what it may grant ...
    denied(owner.purge_queue, QueueUrl=url)
    denied(third.purge_queue, QueueUrl=url)
    # ... never on what only the owner may do: the policy can still be changed.
    set_policy(owner, url, {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": arn})
    owner.purge_queue(QueueUrl=url)
    other.receive_message(QueueUrl=url)


def test_a_deny_written_in_a_shape_smq_cannot_read_still_denies(as_account: Any) -> None:
    # It was ignored: the account id as a JSON number left the Allow to everyone in force.
    owner, other = as_account(OWNER), as_account(OTHER)
    url = owner.create_queue(QueueName="jobs")["QueueUrl"]
    arn = f"arn:aws:sqs:{REGION}:{OWNER}:jobs"
    set_policy(
        owner,
        url,
        {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": arn},
        {"Effect": "Deny", "Principal": {"AWS": int(OTHER)}, "Action": "sqs:ReceiveMessage", "Resource": arn},
    )
    other.send_message(QueueUrl=url, MessageBody="sending is allowed")
    message = denied(other.receive_message, QueueUrl=url)
    assert message.endswith("with an explicit deny in a resource-based policy")


def test_owner_only_actions_are_never_allowed_to_another_account(as_account: Any, core: smq.Client) -> None:
    owner, other = as_account(OWNER), as_account(OTHER)
    url = owner.create_queue(QueueName="jobs")["QueueUrl"]
    set_policy(owner, url, {"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*"})
    other.send_message(QueueUrl=url, MessageBody="allowed")
    denied(other.set_queue_attributes, QueueUrl=url, Attributes={"VisibilityTimeout": "5"})
    denied(other.delete_queue, QueueUrl=url)
    denied(other.tag_queue, QueueUrl=url, Tags={"team": "other"})
    denied(other.list_queue_tags, QueueUrl=url)
    denied(other.add_permission, QueueUrl=url, Label="mine", AWSAccountIds=[OTHER], Actions=["*"])
    message = denied(other.remove_permission, QueueUrl=url, Label="any")
    assert "sqs:removepermission" in message
    assert core.queue(f"{REGION}:{OWNER}:jobs").attributes().config.visibility_timeout == 30


def test_wildcard_actions_and_resources(as_account: Any) -> None:
    owner, other = as_account(OWNER), as_account(OTHER)
    jobs = owner.create_queue(QueueName="jobs")["QueueUrl"]
    logs = owner.create_queue(QueueName="logs")["QueueUrl"]
    statement = {
        "Effect": "Allow",
        "Principal": {"AWS": f"arn:aws:iam::{OTHER}:root"},
        "Action": ["SQS:Send*", "sqs:getqueue*"],
        "Resource": f"arn:aws:sqs:*:{OWNER}:j*",
    }
    set_policy(owner, jobs, statement)
    set_policy(owner, logs, statement)
    other.send_message(QueueUrl=jobs, MessageBody="x")
    assert other.get_queue_attributes(QueueUrl=jobs, AttributeNames=["ApproximateNumberOfMessages"])
    denied(other.receive_message, QueueUrl=jobs)
    denied(other.send_message, QueueUrl=logs, MessageBody="not a j* queue")


def test_a_policy_changed_through_another_server_applies_within_a_second(
    as_account: Any, server: Server, http_redis: EmbeddedRedis
) -> None:
    owner = as_account(OWNER)
    url = owner.create_queue(QueueName="jobs")["QueueUrl"]
    second = Server(http_redis.url, *ARGS)
    try:
        other_there = json_client(second.url, key=KEYS[OTHER])
        there = url.replace(server.url, second.url)
        denied(
            other_there.send_message, QueueUrl=there, MessageBody="before"
        )  # the second server keeps "none"
        owner.add_permission(QueueUrl=url, Label="l", AWSAccountIds=[OTHER], Actions=["SendMessage"])
        deadline = time.monotonic() + 10
        while True:
            try:
                other_there.send_message(QueueUrl=there, MessageBody="after")
                break
            except ClientError:
                assert time.monotonic() < deadline, "the grant never reached the second server"
                time.sleep(0.1)
    finally:
        second.stop()


def test_the_aws_cli_is_refused_with_access_denied(server: Server, core: smq.Client) -> None:
    url = aws_cli(server.url, "create-queue", "--queue-name", "jobs", key=KEYS[OWNER])["QueueUrl"]
    done = aws_cli(
        server.url, "send-message", "--queue-url", url, "--message-body", "x", check=False, key=KEYS[OTHER]
    )
    assert done.returncode != 0
    assert (
        "(AccessDenied) when calling the SendMessage operation: User: arn:aws:iam::222222222222:root"
        in done.stderr
    )


def test_a_key_without_an_account_acts_in_the_servers(server: Server, core: smq.Client) -> None:
    client = json_client(server.url)
    url = client.create_queue(QueueName="jobs")["QueueUrl"]
    assert url.endswith("/000000000000/jobs")
    assert core.list_queues() == ["jobs"]
    denied(json_client(server.url, key=KEYS[OTHER]).send_message, QueueUrl=url, MessageBody="x")


def test_without_access_keys_policies_are_kept_but_not_enforced(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    set_policy(sqs, url, {"Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": "*"})
    sqs.send_message(QueueUrl=url, MessageBody="no identities, nothing to deny")


def test_access_keys_with_a_bad_account_are_refused_at_start(http_redis: EmbeddedRedis) -> None:
    with pytest.raises(RuntimeError, match="its account must be 12 digits, not '12345'"):
        Server(http_redis.url, "--access-key", "AKID:secret:12345")


def test_an_access_key_given_twice_is_refused_at_start(http_redis: EmbeddedRedis) -> None:
    # Else the later secret was kept with the earlier account: a key meant for the server's
    # account (ID:SECRET) acted in a tenant's, or the other way round.
    for given in (["AKID:s1:111111111111", "AKID:s2"], ["AKID:s1", "AKID:s2:222222222222"]):
        with pytest.raises(RuntimeError, match="access key 'AKID' is given more than once"):
            Server(http_redis.url, *(f"--access-key={value}" for value in given))


def test_the_tenants_example_of_the_docs_works_as_written(
    http_redis: EmbeddedRedis, core: smq.Client
) -> None:
    text = (ROOT / "docs/sqs-api.md").read_text()
    (script,) = re.findall(r"```bash\n(.*?)```", text.split("## Tenants", 1)[1].split("\n## ", 1)[0], re.S)
    command = script.splitlines()[0].removeprefix("# smq serve ").split()
    server = Server(http_redis.url, *command)
    try:
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "AWS_CONFIG_FILE": os.devnull,
               "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_MAX_ATTEMPTS": "1"}  # fmt: skip
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script.replace("http://127.0.0.1:9324", server.url)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert f"{server.url}/111111111111/orders" in done.stdout  # the partner found the owner's queue
    assert "refused, as it should be" in done.stdout
    assert "(AccessDenied) when calling the SendMessage operation" in done.stderr
    assert [m.body for m in core.queue(f"{REGION}:111111111111:orders").peek()] == ["hi"]


def test_another_accounts_message_move_task_can_neither_be_seen_nor_cancelled(
    as_account: Any, core: smq.Client
) -> None:
    owner, other = as_account(OWNER), as_account(OTHER)
    dlq, jobs = f"{REGION}:{OWNER}:jobs-dlq", f"{REGION}:{OWNER}:jobs"
    core.create_queue(dlq)
    source = core.create_queue(jobs, redrive_policy=smq.RedrivePolicy(dlq, 1))
    for n in range(5):
        source.send(f"job {n}")
    while source.receive(10, visibility_timeout=0):
        pass  # the second receive of each message dead-letters it
    dlq_arn = f"arn:aws:sqs:{REGION}:{OWNER}:jobs-dlq"
    handle = owner.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    earlier = core.list_move_tasks(dlq)[0].handle  # the core's own form of the handle
    for given in (handle, earlier):
        with pytest.raises(ClientError) as caught:
            other.cancel_message_move_task(TaskHandle=given)
        assert refusal(caught)[:2] == ("InvalidParameterValue", 400)
    with pytest.raises(ClientError) as caught:
        other.list_message_move_tasks(SourceArn=dlq_arn)
    assert refusal(caught)[:2] == ("InvalidParameterValue", 400)
    assert owner.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]["Status"] == "RUNNING"
    owner.cancel_message_move_task(TaskHandle=handle)


def test_a_policy_of_pathological_wildcards_stalls_no_one(as_account: Any) -> None:
    # Wildcards judged by a backtracking regular expression took exponentially long: this
    # Policy held the server's event loop for minutes on each request to its queue.
    owner, other = as_account(OWNER), as_account(OTHER)
    name = "a" * 80
    url = owner.create_queue(QueueName=name)["QueueUrl"]
    mine = other.create_queue(QueueName="mine")["QueueUrl"]
    set_policy(owner, url, {"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*a" * 12 + "b"})
    started = time.monotonic()
    owner.send_message(QueueUrl=url, MessageBody="own queue: its Policy is read for a Deny")
    denied(other.send_message, QueueUrl=url, MessageBody="the pattern does not match")
    other.send_message(QueueUrl=mine, MessageBody="another account's own queue")
    assert time.monotonic() - started < 5


def test_sender_id_names_the_key_that_sent(as_account: Any, core: smq.Client) -> None:
    # A consumer may tell its own messages from a partner's by SenderId: it is the sending
    # key's, kept with the message (through a dead-letter move too), not the receiver's.
    owner, other = as_account(OWNER), as_account(OTHER)
    url = owner.create_queue(QueueName="jobs")["QueueUrl"]
    owner.add_permission(QueueUrl=url, Label="l", AWSAccountIds=[OTHER], Actions=["SendMessage"])
    other.send_message(QueueUrl=url, MessageBody="from the partner")
    other.send_message_batch(QueueUrl=url, Entries=[{"Id": "b", "MessageBody": "batch from the partner"}])
    owner.send_message(QueueUrl=url, MessageBody="own")
    core.queue(f"{REGION}:{OWNER}:jobs").send("from Python")
    got = owner.receive_message(
        QueueUrl=url, AttributeNames=["SenderId"], MaxNumberOfMessages=10, WaitTimeSeconds=1
    )
    senders = {m["Body"]: m["Attributes"]["SenderId"] for m in got["Messages"]}
    while len(senders) < 4:
        more = owner.receive_message(QueueUrl=url, AttributeNames=["SenderId"], MaxNumberOfMessages=10)
        senders.update({m["Body"]: m["Attributes"]["SenderId"] for m in more.get("Messages", [])})
    assert senders == {
        "from the partner": KEYS[OTHER][0],
        "batch from the partner": KEYS[OTHER][0],
        "own": KEYS[OWNER][0],
        "from Python": OWNER,  # no key: the queue's account
    }
