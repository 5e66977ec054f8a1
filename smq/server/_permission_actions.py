"""AddPermission and RemovePermission: labelled statements of a queue's Policy.

As in SQS, each permission is a statement of the queue's Policy attribute
(a JSON policy document of Version 2008-10-17, Id ``<queue arn>/SQSDefaultPolicy``),
named by its label (``Sid``): ``Effect`` Allow, ``Principal`` the accounts' root
ARNs, ``Action`` ``SQS:<action>`` (one as a string, two or more as a list),
``Resource`` the queue's ARN. With access keys, the server enforces them
(``_authorize``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..operations._policy import update_extra_attribute
from . import _params as p
from ._authorize import GRANTABLE, OWNER_ONLY
from ._context import Context
from ._errors import SqsError
from ._policy_quotas import MAX_ACTIONS, check_policy_quotas

Result = dict[str, Any]

_LABEL = re.compile(r"[A-Za-z0-9_-]{1,80}")
_ACCOUNT = re.compile(r"[0-9]{12}")


def _invalid(value: str, parameter: str, reason: str) -> SqsError:
    return SqsError(
        "InvalidParameterValue", f"Value {value} for parameter {parameter} is invalid. Reason: {reason}"
    )


def _label(params: Result) -> str:
    label = p.required_string(params, "Label")
    if not _LABEL.fullmatch(label):
        raise _invalid(
            label,
            "Label",
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length.",
        )
    return label


def _required_list(params: Result, name: str) -> list[str]:
    values = p.string_list(params, name)
    if not values:
        raise SqsError("MissingParameter", f"The request must contain the parameter {name}.")
    return list(dict.fromkeys(values))


def _actions(params: Result) -> list[str]:
    actions = _required_list(params, "Actions")
    for action in actions:
        if action in OWNER_ONLY:
            raise _invalid(
                f"SQS:{action}", "ActionName", "Only the queue owner is allowed to invoke this action."
            )
        if action not in GRANTABLE:
            raise _invalid(
                action, "ActionName", "Please refer to the appropriate WSDL for a list of valid actions."
            )
    if len(actions) > MAX_ACTIONS:
        raise SqsError("OverLimit", f"{len(actions)} Actions were found, maximum allowed is {MAX_ACTIONS}.")
    return actions


def _accounts(params: Result) -> list[str]:
    accounts = list(dict.fromkeys(p.string_list(params, "AWSAccountIds")))
    if not accounts:
        raise _invalid("[]", "PrincipalId", "Unable to verify.")
    for account in accounts:
        if not _ACCOUNT.fullmatch(account):
            raise _invalid(account, "PrincipalId", "Unable to verify principal.")
    return accounts


def _statements(document: dict[str, Any]) -> list[Any]:
    statements = document.get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    if not isinstance(statements, list):
        raise SqsError("InvalidParameterValue", "The queue's Policy has a Statement that is not a list.")
    return statements


def _labels(statements: list[Any]) -> set[str]:
    return {s["Sid"] for s in statements if isinstance(s, dict) and isinstance(s.get("Sid"), str)}


def _one_or_list(values: list[str]) -> str | list[str]:
    """As SQS writes a statement: one principal or action as a string, two or more as a list."""
    return values[0] if len(values) == 1 else values


async def add_permission(ctx: Context, params: Result) -> Result:
    name = ctx.queue_name(params)
    label = _label(params)
    accounts = _accounts(params)
    actions = _actions(params)
    arn = ctx.arn_of(name)
    statement = {
        "Sid": label,
        "Effect": "Allow",
        "Principal": {"AWS": _one_or_list([f"arn:aws:iam::{account}:root" for account in accounts])},
        "Action": _one_or_list([f"SQS:{action}" for action in actions]),
        "Resource": arn,
    }

    def change(current: str) -> str:
        # The document SQS starts: its policy language version and its default Id.
        document = (
            json.loads(current) if current else {"Version": "2008-10-17", "Id": f"{arn}/SQSDefaultPolicy"}
        )
        statements = _statements(document)
        if label in _labels(statements):
            raise _invalid(label, "Label", "Already exists.")
        document["Statement"] = [*statements, statement]
        grown = json.dumps(document, separators=(",", ":"))
        check_policy_quotas(grown)
        return grown

    await ctx.call(update_extra_attribute, ctx.client, name, "Policy", change)
    return {}


async def remove_permission(ctx: Context, params: Result) -> Result:
    name = ctx.queue_name(params)
    label = p.required_string(params, "Label")

    def change(current: str) -> str:
        document = json.loads(current) if current else {}
        statements = _statements(document)
        if label not in _labels(statements):
            raise _invalid(label, "Label", "can't find label.")
        kept = [s for s in statements if not (isinstance(s, dict) and s.get("Sid") == label)]
        if not kept:
            return ""  # no statement left: the queue has no Policy, as before the first AddPermission
        document["Statement"] = kept
        return json.dumps(document, separators=(",", ":"))

    await ctx.call(update_extra_attribute, ctx.client, name, "Policy", change)
    return {}
