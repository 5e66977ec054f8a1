"""AddPermission and RemovePermission, on both protocols: labelled statements
kept in the queue's Policy attribute, with SQS's checks and errors."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError

import smq
from http_support import ACCOUNT, REGION

ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"


@pytest.fixture
def url(api: Any) -> str:
    return str(api.create_queue(QueueName="jobs")["QueueUrl"])


def policy_of(api: Any, url: str) -> dict[str, Any] | None:
    attributes = api.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"]).get("Attributes", {})
    return json.loads(attributes["Policy"]) if "Policy" in attributes else None


def error(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, int, str]:
    response = caught.value.response
    return (
        response["Error"]["Code"],
        response["ResponseMetadata"]["HTTPStatusCode"],
        response["Error"]["Message"],
    )


def test_add_permission_keeps_a_statement_under_its_label(api: Any, url: str) -> None:
    api.add_permission(
        QueueUrl=url,
        Label="AliceSendMessage",
        AWSAccountIds=["111122223333", "444455556666"],
        Actions=["SendMessage", "ReceiveMessage"],
    )
    policy = policy_of(api, url)
    assert policy is not None
    assert (policy["Version"], policy["Id"]) == ("2008-10-17", f"{ARN}/SQSDefaultPolicy")
    assert policy["Statement"] == [
        {
            "Sid": "AliceSendMessage",
            "Effect": "Allow",
            "Principal": {"AWS": ["arn:aws:iam::111122223333:root", "arn:aws:iam::444455556666:root"]},
            "Action": ["SQS:SendMessage", "SQS:ReceiveMessage"],
            "Resource": ARN,
        }
    ]
    api.add_permission(QueueUrl=url, Label="everything", AWSAccountIds=["111122223333"], Actions=["*"])
    policy = policy_of(api, url)
    assert policy is not None
    assert [(s["Sid"], s["Action"]) for s in policy["Statement"]] == [
        ("AliceSendMessage", ["SQS:SendMessage", "SQS:ReceiveMessage"]),
        ("everything", "SQS:*"),
    ]
    # One principal and one action are strings, as SQS writes them.
    assert policy["Statement"][1]["Principal"] == {"AWS": "arn:aws:iam::111122223333:root"}
    assert list(policy) == ["Version", "Id", "Statement"]


def test_remove_permission_drops_its_statement_and_the_last_one_the_policy(api: Any, url: str) -> None:
    for label in ("one", "two"):
        api.add_permission(QueueUrl=url, Label=label, AWSAccountIds=["111122223333"], Actions=["SendMessage"])
    api.remove_permission(QueueUrl=url, Label="one")
    policy = policy_of(api, url)
    assert policy is not None and [s["Sid"] for s in policy["Statement"]] == ["two"]
    api.remove_permission(QueueUrl=url, Label="two")
    assert policy_of(api, url) is None


def test_statements_join_a_policy_set_by_set_queue_attributes(api: Any, url: str) -> None:
    mine = {"Sid": "mine", "Effect": "Deny", "Principal": "*", "Action": "SQS:*", "Resource": ARN}
    api.set_queue_attributes(
        QueueUrl=url, Attributes={"Policy": json.dumps({"Version": "2012-10-17", "Statement": [mine]})}
    )
    api.add_permission(QueueUrl=url, Label="added", AWSAccountIds=["111122223333"], Actions=["GetQueueUrl"])
    policy = policy_of(api, url)
    assert policy is not None and policy["Statement"][0] == mine
    assert [s["Sid"] for s in policy["Statement"]] == ["mine", "added"]
    with pytest.raises(ClientError) as caught:
        api.add_permission(
            QueueUrl=url, Label="mine", AWSAccountIds=["111122223333"], Actions=["SendMessage"]
        )
    assert error(caught) == (
        "InvalidParameterValue",
        400,
        "Value mine for parameter Label is invalid. Reason: Already exists.",
    )
    api.remove_permission(QueueUrl=url, Label="mine")
    policy = policy_of(api, url)
    assert policy is not None and [s["Sid"] for s in policy["Statement"]] == ["added"]


def test_a_label_in_use_or_unknown_is_invalid_parameter_value(api: Any, url: str) -> None:
    api.add_permission(QueueUrl=url, Label="L", AWSAccountIds=["111122223333"], Actions=["SendMessage"])
    before = policy_of(api, url)
    with pytest.raises(ClientError) as caught:
        api.add_permission(QueueUrl=url, Label="L", AWSAccountIds=["444455556666"], Actions=["DeleteMessage"])
    assert error(caught) == (
        "InvalidParameterValue",
        400,
        "Value L for parameter Label is invalid. Reason: Already exists.",
    )
    assert policy_of(api, url) == before
    with pytest.raises(ClientError) as caught:
        api.remove_permission(QueueUrl=url, Label="M")
    assert error(caught) == (
        "InvalidParameterValue",
        400,
        "Value M for parameter Label is invalid. Reason: can't find label.",
    )
    api.remove_permission(QueueUrl=url, Label="L")
    with pytest.raises(ClientError) as caught:
        api.remove_permission(QueueUrl=url, Label="L")  # no policy at all
    assert error(caught)[2] == "Value L for parameter Label is invalid. Reason: can't find label."


@pytest.mark.parametrize(
    ("label", "accounts", "actions", "code", "message"),
    [
        (
            "a b",
            ["111122223333"],
            ["SendMessage"],
            "InvalidParameterValue",
            "Value a b for parameter Label is invalid.",
        ),
        (
            "x" * 81,
            ["111122223333"],
            ["SendMessage"],
            "InvalidParameterValue",
            f"Value {'x' * 81} for parameter Label",
        ),
        (
            "ok",
            [],
            ["SendMessage"],
            "InvalidParameterValue",
            "Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.",
        ),
        ("ok", ["111122223333"], [], "MissingParameter", "The request must contain the parameter Actions."),
        (
            "ok",
            ["1234"],
            ["SendMessage"],
            "InvalidParameterValue",
            "Value 1234 for parameter PrincipalId is invalid.",
        ),
        (
            "ok",
            ["111122223333"],
            ["Frobnicate"],
            "InvalidParameterValue",
            "Value Frobnicate for parameter ActionName",
        ),
        (
            "ok",
            ["111122223333"],
            ["DeleteQueue"],
            "InvalidParameterValue",
            "Value SQS:DeleteQueue for parameter ActionName is invalid. "
            "Reason: Only the queue owner is allowed to invoke this action.",
        ),
    ],
    ids=[
        "label-chars",
        "label-length",
        "no-accounts",
        "no-actions",
        "bad-account",
        "unknown-action",
        "owner-only",
    ],
)
def test_add_permission_checks_its_parameters(
    api: Any, url: str, label: str, accounts: list[str], actions: list[str], code: str, message: str
) -> None:
    with pytest.raises(ClientError) as caught:
        api.add_permission(QueueUrl=url, Label=label, AWSAccountIds=accounts, Actions=actions)
    found = error(caught)
    assert found[:2] == (code, 400) and found[2].startswith(message), found
    assert policy_of(api, url) is None


def test_a_policy_past_sqss_quotas_is_over_limit(api: Any, url: str) -> None:
    eight = [
        "ChangeMessageVisibility", "DeleteMessage", "GetQueueAttributes", "GetQueueUrl",
        "ListDeadLetterSourceQueues", "PurgeQueue", "ReceiveMessage", "SendMessage",
    ]  # fmt: skip
    with pytest.raises(ClientError) as caught:
        api.add_permission(QueueUrl=url, Label="l", AWSAccountIds=["111122223333"], Actions=eight)
    assert error(caught) == ("OverLimit", 403, "8 Actions were found, maximum allowed is 7.")

    def statement(n: int, **fields: Any) -> dict[str, Any]:
        return {"Sid": f"s{n}", "Effect": "Allow", "Principal": "*", "Action": "SQS:SendMessage",
                "Resource": ARN, **fields}  # fmt: skip

    too_many: dict[str, Any] = {
        "statements": [statement(n) for n in range(21)],
        "actions": [statement(0, Action=[f"SQS:{a}" for a in eight])],
        "principals": [
            statement(0, Principal={"AWS": [f"arn:aws:iam::{n:012d}:root" for n in range(1, 52)]})
        ],
        "size": [statement(0, Sid="x" * 9000)],
    }
    texts = {
        "statements": "21 statements were found in the submitted policy, max allowed is 20",
        "actions": "8 actions were found in a statement from the submitted policy, max allowed is 7",
        "principals": "51 principals were found in the submitted policy, max allowed is 50",
        "size": "Submitted policy is over max allowed size.",
    }
    for name, statements in too_many.items():
        policy = json.dumps({"Version": "2012-10-17", "Statement": statements})
        with pytest.raises(ClientError) as caught:
            api.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy})
        assert error(caught) == ("OverLimit", 403, texts[name]), name
    # The twenty-first AddPermission label is one statement too many.
    for n in range(20):
        api.add_permission(
            QueueUrl=url, Label=f"l{n}", AWSAccountIds=["111122223333"], Actions=["SendMessage"]
        )
    with pytest.raises(ClientError) as caught:
        api.add_permission(QueueUrl=url, Label="l20", AWSAccountIds=["111122223333"], Actions=["SendMessage"])
    assert error(caught)[:2] == ("OverLimit", 403)
    policy = policy_of(api, url)
    assert policy is not None and len(policy["Statement"]) == 20


def test_a_stored_policy_past_the_quotas_can_still_shrink(api: Any, url: str, core: Any) -> None:
    # Stored by an earlier version (or the Python API, which applies no quotas): 21 labels.
    statements = [
        {"Sid": f"l{n}", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
         "Action": "SQS:SendMessage", "Resource": ARN}
        for n in range(21)
    ]  # fmt: skip
    policy = json.dumps({"Version": "2008-10-17", "Statement": statements})
    core.get_queue("jobs").set_attributes(extra_attributes={"Policy": policy})
    api.remove_permission(QueueUrl=url, Label="l0")
    stored = policy_of(api, url)
    assert stored is not None and len(stored["Statement"]) == 20
    with pytest.raises(ClientError) as caught:  # growing it again is refused
        api.add_permission(QueueUrl=url, Label="l0", AWSAccountIds=["111122223333"], Actions=["*"])
    assert error(caught)[:2] == ("OverLimit", 403)


def test_permissions_of_a_missing_queue_are_queue_does_not_exist(api: Any, sqs_server: Any) -> None:
    missing = f"{sqs_server.url}/{ACCOUNT}/nowhere"
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.add_permission(
            QueueUrl=missing, Label="l", AWSAccountIds=["111122223333"], Actions=["SendMessage"]
        )
    with pytest.raises(api.exceptions.QueueDoesNotExist):
        api.remove_permission(QueueUrl=missing, Label="l")


def test_concurrent_permission_changes_are_all_kept(api: Any, url: str, core: smq.Client) -> None:
    labels = [f"label-{n}" for n in range(16)]
    failures: list[BaseException] = []

    def add(label: str) -> None:
        try:
            api.add_permission(
                QueueUrl=url, Label=label, AWSAccountIds=["111122223333"], Actions=["SendMessage"]
            )
        except BaseException as caught:  # reported below
            failures.append(caught)

    threads = [threading.Thread(target=add, args=(label,)) for label in labels]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    policy = policy_of(api, url)
    assert policy is not None and sorted(s["Sid"] for s in policy["Statement"]) == sorted(labels)
