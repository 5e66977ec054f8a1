"""SQS's quotas of a queue's Policy, applied to what the HTTP API is asked to store.

SQS refuses a Policy past them with 403 ``OverLimit``. They apply where a request
would store a Policy (CreateQueue, SetQueueAttributes, AddPermission), not to a
Policy already stored, so that one stored by an earlier version can still be
shrunk (RemovePermission) or re-sent unchanged; the Python API stores what it
is given.
"""

from __future__ import annotations

import json
from typing import Any

from ._errors import SqsError

MAX_BYTES = 8192
MAX_STATEMENTS = 20
MAX_PRINCIPALS = 50
MAX_ACTIONS = 7  # in one statement
MAX_CONDITIONS = 10  # in one statement


def check_policy_quotas(value: str) -> None:
    """Raise OverLimit, in SQS's words, for a Policy document past one of SQS's quotas."""
    if len(value.encode()) > MAX_BYTES:
        raise _over("Submitted policy is over max allowed size.")
    try:
        document = json.loads(value)
    except (ValueError, RecursionError):
        return  # not a policy: refused as a value where it is checked
    statements = document.get("Statement", []) if isinstance(document, dict) else []
    statements = [statements] if isinstance(statements, dict) else statements
    if not isinstance(statements, list):
        return
    if len(statements) > MAX_STATEMENTS:
        raise _over(
            f"{len(statements)} statements were found in the submitted policy, "
            f"max allowed is {MAX_STATEMENTS}"
        )
    principals = 0
    for statement in statements:
        if isinstance(statement, dict):
            _check_statement(statement)
            principals += _principals(statement.get("Principal"))
    if principals > MAX_PRINCIPALS:
        raise _over(
            f"{principals} principals were found in the submitted policy, max allowed is {MAX_PRINCIPALS}"
        )


def _check_statement(statement: dict[str, Any]) -> None:
    actions = statement.get("Action", [])
    if isinstance(actions, list) and len(actions) > MAX_ACTIONS:
        raise _over(
            f"{len(actions)} actions were found in a statement from the submitted policy, "
            f"max allowed is {MAX_ACTIONS}"
        )
    conditions = statement.get("Condition", {})
    if isinstance(conditions, dict):
        count = sum(len(c) if isinstance(c, dict) else 1 for c in conditions.values())
        if count > MAX_CONDITIONS:
            raise _over(
                f"{count} conditions were found in a statement from the submitted policy, "
                f"max allowed is {MAX_CONDITIONS}"
            )


def _principals(principal: object) -> int:
    if isinstance(principal, dict):
        return sum(len(p) if isinstance(p, list) else 1 for p in principal.values())
    return 0


def _over(message: str) -> SqsError:
    return SqsError("OverLimit", message)
