"""A queue's Policy, evaluated: principals, actions, resources, effects and
the conditions smq can judge (pure logic; the HTTP tests use it end to end)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smq.server._access_policy import Decision, Request, evaluate, wildcard_matches

OWNER, OTHER, THIRD = "111111111111", "222222222222", "333333333333"
ARN = f"arn:aws:sqs:us-east-1:{OWNER}:jobs"


_KEYS = st.sampled_from(
    [
        "Effect",
        "Principal",
        "NotPrincipal",
        "Action",
        "NotAction",
        "Resource",
        "NotResource",
        "Condition",
        "AWS",
        "Bool",
        "aws:SecureTransport",
        "Allow",
        "Deny",
    ]
)


def policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(principal: Any, action: Any, resource: Any = ARN, **more: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Principal": principal, "Action": action, "Resource": resource, **more}


def deny(principal: Any, action: Any, resource: Any = ARN, **more: Any) -> dict[str, Any]:
    return {**allow(principal, action, resource, **more), "Effect": "Deny"}


def asks(
    account: str = OTHER, action: str = "SendMessage", resource: str = ARN, secure: bool = False
) -> Request:
    return Request(account, action, resource, secure)


def test_no_policy_says_nothing() -> None:
    assert evaluate("", asks()) is Decision.NONE
    assert evaluate(policy(), asks()) is Decision.NONE


@pytest.mark.parametrize(
    "principal",
    [
        "*",
        {"AWS": "*"},
        {"AWS": OTHER},
        {"AWS": [THIRD, OTHER]},
        {"AWS": f"arn:aws:iam::{OTHER}:root"},
        {"AWS": [f"arn:aws:iam::{OTHER}:root"]},
    ],
)
def test_principals_that_name_the_callers_account_or_everyone(principal: Any) -> None:
    assert evaluate(policy(allow(principal, "sqs:SendMessage")), asks()) is Decision.ALLOW


@pytest.mark.parametrize(
    "principal",
    [
        {"AWS": THIRD},
        {"AWS": f"arn:aws:iam::{OTHER}:user/alice"},  # a user: an access key is its account's root
        {"AWS": f"arn:aws:iam::{OTHER}:role/worker"},
        {"Service": "sns.amazonaws.com"},
        {"Federated": "cognito-identity.amazonaws.com"},
        f"arn:aws:iam::{OTHER}:root",  # not in {"AWS": ...}: only "*" stands alone
        OTHER[:-1],
        42,
        None,
    ],
)
def test_principals_that_do_not_name_the_caller(principal: Any) -> None:
    assert evaluate(policy(allow(principal, "sqs:SendMessage")), asks()) is Decision.NONE


def test_a_statement_without_a_principal_or_an_action_matches_no_one() -> None:
    assert evaluate(policy({"Effect": "Allow", "Action": "sqs:*", "Resource": ARN}), asks()) is Decision.NONE
    assert evaluate(policy({"Effect": "Allow", "Principal": "*", "Resource": ARN}), asks()) is Decision.NONE


@pytest.mark.parametrize(
    ("action", "asked", "matches"),
    [
        ("*", "SendMessage", True),
        ("sqs:*", "ReceiveMessage", True),
        ("SQS:*", "PurgeQueue", True),
        ("sqs:SendMessage", "SendMessage", True),
        ("sqs:sendmessage", "SendMessage", True),  # action names ignore case
        ("SQS:SENDMESSAGE", "SendMessage", True),
        ("sqs:Send*", "SendMessage", True),
        ("sqs:*Message", "DeleteMessage", True),
        ("sqs:?eleteMessage", "DeleteMessage", True),
        ("sqs:Send*", "ReceiveMessage", False),
        ("sqs:SendMessageBatch", "SendMessage", False),  # batches need the single action's permission
        ("sns:*", "SendMessage", False),
        ("SendMessage", "SendMessage", False),  # no service prefix
        ("sqs:Send.*", "SendMessage", False),  # not a regular expression
        (["sqs:ReceiveMessage", "sqs:SendMessage"], "SendMessage", True),
        ([], "SendMessage", False),
    ],
)
def test_actions_and_their_wildcards(action: Any, asked: str, matches: bool) -> None:
    expected = Decision.ALLOW if matches else Decision.NONE
    assert evaluate(policy(allow("*", action)), asks(action=asked)) is expected


@pytest.mark.parametrize(
    ("resource", "matches"),
    [
        (ARN, True),
        ("*", True),
        (f"arn:aws:sqs:*:{OWNER}:*", True),
        (f"arn:aws:sqs:us-east-1:{OWNER}:jo*", True),
        (f"arn:aws:sqs:us-east-1:{OWNER}:jo?s", True),
        ([f"arn:aws:sqs:us-east-1:{OWNER}:other", ARN], True),
        (f"arn:aws:sqs:us-east-1:{OWNER}:other", False),
        (f"arn:aws:sqs:us-east-1:{OWNER}:JOBS", False),  # resource ARNs keep their case
        (f"arn:aws:sqs:eu-west-1:{OWNER}:jobs", False),
        (f"arn:aws:sqs:us-east-1:{OTHER}:jobs", False),
    ],
)
def test_resources_and_their_wildcards(resource: Any, matches: bool) -> None:
    expected = Decision.ALLOW if matches else Decision.NONE
    assert evaluate(policy(allow("*", "sqs:*", resource)), asks()) is expected


def test_a_statement_naming_no_resource_is_about_its_own_queue() -> None:
    statement = {"Effect": "Allow", "Principal": "*", "Action": "sqs:*"}
    assert evaluate(policy(statement), asks()) is Decision.ALLOW


def test_an_explicit_deny_wins_over_any_allow_in_any_order() -> None:
    statements = [allow("*", "sqs:*"), deny({"AWS": OTHER}, "sqs:Receive*")]
    for ordered in (statements, statements[::-1]):
        assert evaluate(policy(*ordered), asks(action="ReceiveMessage")) is Decision.DENY
        assert evaluate(policy(*ordered), asks(action="SendMessage")) is Decision.ALLOW
        assert evaluate(policy(*ordered), asks(account=THIRD, action="ReceiveMessage")) is Decision.ALLOW


def test_not_principal_not_action_and_not_resource_invert_their_match() -> None:
    everyone_but_other = {
        "Effect": "Deny",
        "NotPrincipal": {"AWS": OTHER},
        "Action": "sqs:*",
        "Resource": ARN,
    }
    assert evaluate(policy(everyone_but_other), asks()) is Decision.NONE
    assert evaluate(policy(everyone_but_other), asks(account=THIRD)) is Decision.DENY
    all_but_purge = {"Effect": "Allow", "Principal": "*", "NotAction": "sqs:Purge*", "Resource": ARN}
    assert evaluate(policy(all_but_purge), asks(action="SendMessage")) is Decision.ALLOW
    assert evaluate(policy(all_but_purge), asks(action="PurgeQueue")) is Decision.NONE
    other_queues = {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "NotResource": ARN}
    assert evaluate(policy(other_queues), asks()) is Decision.NONE


def test_secure_transport_is_the_condition_smq_judges() -> None:
    https_only = deny("*", "sqs:*", Condition={"Bool": {"aws:SecureTransport": "false"}})
    assert evaluate(policy(allow("*", "sqs:*"), https_only), asks(secure=False)) is Decision.DENY
    assert evaluate(policy(allow("*", "sqs:*"), https_only), asks(secure=True)) is Decision.ALLOW
    over_https = allow("*", "sqs:*", Condition={"Bool": {"aws:SecureTransport": ["true"]}})
    assert evaluate(policy(over_https), asks(secure=True)) is Decision.ALLOW
    assert evaluate(policy(over_https), asks(secure=False)) is Decision.NONE


def test_conditions_smq_cannot_judge_never_allow_and_always_deny() -> None:
    unknown = {"ArnEquals": {"aws:SourceArn": "arn:aws:sns:us-east-1:111111111111:topic"}}
    assert evaluate(policy(allow("*", "sqs:*", Condition=unknown)), asks()) is Decision.NONE
    assert (
        evaluate(policy(allow("*", "sqs:*"), deny("*", "sqs:*", Condition=unknown)), asks()) is Decision.DENY
    )
    # ... unless a condition it can judge rules the statement out.
    mixed = {**unknown, "Bool": {"aws:SecureTransport": "false"}}
    assert evaluate(policy(allow("*", "sqs:*"), deny("*", "sqs:*", Condition=mixed)), asks(secure=True)) is (
        Decision.ALLOW
    )


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"Statement": 3}',
        '{"Statement": [3, "x", null]}',
        json.dumps({"Statement": [{"Effect": "Maybe", "Principal": "*", "Action": "*"}]}),
        "[" * 10_000 + "]" * 10_000,
    ],
)
def test_policies_of_any_shape_never_fail_and_allow_nothing(text: str) -> None:
    assert evaluate(text, asks()) is Decision.NONE


def test_one_statement_alone_not_in_a_list() -> None:
    document = json.dumps({"Statement": allow({"AWS": OTHER}, "sqs:SendMessage")})
    assert evaluate(document, asks()) is Decision.ALLOW


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=12)
    | st.sampled_from(["*", "sqs:*", OTHER, ARN]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12) | _KEYS, inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(statements=st.lists(st.dictionaries(_KEYS, _JSON, max_size=6), max_size=4), secure=st.booleans())
def test_any_statements_are_judged_without_failing(statements: list[dict[str, Any]], secure: bool) -> None:
    decision = evaluate(json.dumps({"Statement": statements}), asks(secure=secure))
    assert isinstance(decision, Decision)
    if not any(s.get("Effect") == "Allow" for s in statements):
        assert decision is not Decision.ALLOW


@pytest.mark.parametrize("stars", [8, 20, 80])
def test_wildcards_take_time_in_proportion_to_the_pattern_not_exponential(stars: int) -> None:
    # "*a*a...*b" against an ARN of a's: a backtracking regular expression takes
    # exponentially long, and one owner's Policy would stall the server for everyone.
    arn = f"arn:aws:sqs:us-east-1:{OWNER}:" + "a" * 80
    pattern = "*a" * stars + "b"
    statements = [
        allow("*", "sqs:" + pattern, "*"),
        allow("*", "*", pattern),
        deny("*", "*", "*a" * stars + "*"),
    ]
    started = time.monotonic()
    assert evaluate(policy(*statements[:2]), asks(resource=arn)) is Decision.NONE
    assert evaluate(policy(statements[2]), asks(resource=arn)) is Decision.DENY
    assert time.monotonic() - started < 0.5


def test_a_largest_policy_of_pathological_wildcards_is_judged_quickly() -> None:
    arn = f"arn:aws:sqs:us-east-1:{OWNER}:" + "a" * 80
    statements, size = [], 0
    while size < 60_000:
        n = len(statements)
        pattern = "*a" * (5 + n % 40) + "?" * (n % 3) + "*" + f"{n}b"
        statements.append(allow("*", "*", pattern))
        size += len(pattern) + 60
    started = time.monotonic()
    assert evaluate(policy(*statements), asks(resource=arn)) is Decision.NONE
    assert time.monotonic() - started < 1.0


def _reference_glob(pattern: str, text: str, ignore_case: bool) -> bool:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    flags = re.DOTALL | (re.IGNORECASE | re.ASCII if ignore_case else 0)
    return re.fullmatch(body, text, flags) is not None


@settings(max_examples=500, deadline=None)
@given(
    pattern=st.text(alphabet="ab?*Aé", max_size=8),
    text=st.text(alphabet="abAé", max_size=8),
    ignore_case=st.booleans(),
)
def test_wildcards_match_as_a_regular_expression_would(pattern: str, text: str, ignore_case: bool) -> None:
    assert wildcard_matches(pattern, text, ignore_case=ignore_case) is _reference_glob(
        pattern, text, ignore_case
    )


@pytest.mark.parametrize(
    "unreadable",
    [
        {"Principal": {"AWS": int(OTHER)}},  # an account id not written as a string
        {"Principal": {"AWS": [THIRD, int(OTHER)]}},
        {"Principal": [OTHER]},  # a list, not {"AWS": [...]}
        {"Principal": OTHER},  # only "*" stands alone
        {"Principal": None},
        {"Principal": {"AWS": OTHER[:-1]}},  # not an account id, not an ARN
        {"NotPrincipal": {"AWS": int(THIRD)}},
        {"Action": ["sqs:PurgeQueue", 7]},
        {"Action": "SendMessage"},  # no service: not an action
        {"Action": None},
        {"NotAction": {"sqs": "PurgeQueue"}},
        {"Resource": {"arn": ARN}},
        {"Resource": [f"arn:aws:sqs:us-east-1:{OWNER}:other", None]},
        {"NotResource": 3},
    ],
)
def test_a_deny_smq_cannot_read_denies_and_an_allow_it_cannot_read_allows_nothing(
    unreadable: dict[str, Any],
) -> None:
    # A Deny with an element smq cannot read was ignored: it failed open.
    statement = {"Principal": "*", "Action": "sqs:*", "Resource": ARN, **unreadable}
    for element in ("Principal", "Action", "Resource"):
        if "Not" + element in unreadable:
            del statement[element]
    assert evaluate(policy(allow("*", "sqs:*"), {**statement, "Effect": "Deny"}), asks()) is Decision.DENY
    assert evaluate(policy({**statement, "Effect": "Allow"}), asks()) is Decision.NONE


def test_a_deny_naming_no_principal_or_no_action_denies() -> None:
    for statement in ({"Effect": "Deny", "Action": "sqs:*"}, {"Effect": "Deny", "Principal": "*"}):
        assert evaluate(policy(allow("*", "sqs:*"), statement), asks()) is Decision.DENY


def test_a_readable_deny_of_others_still_denies_no_one_else() -> None:
    for principal in (
        {"AWS": THIRD},
        {"AWS": f"arn:aws:iam::{OTHER}:user/alice"},
        {"Service": "sns.amazonaws.com"},
    ):
        assert evaluate(policy(allow("*", "sqs:*"), deny(principal, "sqs:*")), asks()) is Decision.ALLOW
    assert evaluate(policy(allow("*", "sqs:*"), deny("*", "sqs:Purge*")), asks()) is Decision.ALLOW
    assert (
        evaluate(policy(allow("*", "sqs:*"), deny("*", "sqs:*", "arn:aws:sqs:*:*:x")), asks())
        is Decision.ALLOW
    )
