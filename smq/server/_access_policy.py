"""A queue's Policy, evaluated: may this account do this action to this queue?

The subset SQS users write: statements with ``Effect`` ``Allow`` or
``Deny``; ``Principal`` (or ``NotPrincipal``) ``*``, ``{"AWS": ...}`` of
account ids, ``arn:aws:iam::<account>:root`` or ``*``; ``Action`` (or
``NotAction``) such as ``sqs:SendMessage``, ``SQS:*``, ``sqs:Receive*`` or
``*`` (case does not matter, ``*`` and ``?`` are wildcards); ``Resource`` (or
``NotResource``) queue ARNs, wildcards allowed (a statement naming neither is
about its own queue). Of conditions, only ``Bool`` ``aws:SecureTransport``.

A caller is an account (an access key stands for its account's root), so a
principal naming a user or role, a service or a federated identity matches
no caller. A statement smq cannot fully judge (another condition) never
allows, and denies whenever the rest of it matches: what it does not
understand fails closed.
"""

from __future__ import annotations

import enum
import functools
import json
import re
from dataclasses import dataclass
from typing import Any

_ACCOUNT = re.compile(r"[0-9]{12}")
_ROOT = re.compile(r"arn:aws:iam::([0-9]{12}):root")


class Decision(enum.Enum):
    """What a policy says of a request."""

    ALLOW = "allow"
    DENY = "deny"  # an explicit Deny: wins over any Allow
    NONE = "none"  # no statement speaks of it


@dataclass(frozen=True)
class Request:
    """Who asks to do what to which queue.

    ``action`` is the action as IAM names it without its service
    (``SendMessage``, also for ``SendMessageBatch``); ``secure`` whether the
    request came over HTTPS.
    """

    account: str
    action: str
    resource: str
    secure: bool = False


@functools.lru_cache(maxsize=4096)
def evaluate(policy: str, request: Request) -> Decision:
    """What ``policy`` (a queue's Policy attribute, ``""`` for none) says of ``request``."""
    allowed = False
    for statement in _statements(policy):
        effect = statement.get("Effect")
        if effect not in ("Allow", "Deny") or not _applies(statement, request):
            continue
        judged = _conditions_hold(statement.get("Condition"), request)
        if effect == "Deny" and judged is not False:
            return Decision.DENY
        if effect == "Allow" and judged is True:
            allowed = True
    return Decision.ALLOW if allowed else Decision.NONE


@functools.lru_cache(maxsize=256)
def _statements(policy: str) -> tuple[dict[str, Any], ...]:
    """The statements of a Policy document (parsed once per distinct text; never changed)."""
    if not policy:
        return ()
    try:
        document = json.loads(policy)
    except (ValueError, RecursionError):
        return ()
    statements = document.get("Statement") if isinstance(document, dict) else None
    if isinstance(statements, dict):
        statements = [statements]
    if not isinstance(statements, list):
        return ()
    return tuple(s for s in statements if isinstance(s, dict))


def _applies(statement: dict[str, Any], request: Request) -> bool:
    """Whether the statement's principal, action and resource all cover the request."""
    return (
        _covered(statement, "Principal", lambda p: _principal_matches(p, request.account), default=False)
        and _covered(statement, "Action", lambda a: _action_matches(a, request.action), default=False)
        and _covered(statement, "Resource", lambda r: _resource_matches(r, request.resource), default=True)
    )


def _covered(statement: dict[str, Any], element: str, matches: Any, *, default: bool) -> bool:
    """``element`` (or its ``Not`` form) of a statement, judged by ``matches`` on each value."""
    if element in statement:
        return any(matches(value) for value in _values(statement[element], element))
    negated = "Not" + element
    if negated in statement:
        return not any(matches(value) for value in _values(statement[negated], element))
    return default


def _values(value: Any, element: str) -> list[Any]:
    if element == "Principal":
        # Only "*" stands alone; of the kinds in a mapping only AWS principals can be
        # callers here (Service, Federated, ... match no one).
        value = value.get("AWS", []) if isinstance(value, dict) else ["*"] if value == "*" else []
    if isinstance(value, list):
        return value
    return [value]


def _principal_matches(principal: Any, account: str) -> bool:
    if not isinstance(principal, str):
        return False
    if principal == "*" or (_ACCOUNT.fullmatch(principal) and principal == account):
        return True
    root = _ROOT.fullmatch(principal)
    return root is not None and root.group(1) == account


def _action_matches(pattern: Any, action: str) -> bool:
    if not isinstance(pattern, str):
        return False
    if pattern == "*":
        return True
    service, sep, name = pattern.partition(":")
    if not sep or service.lower() != "sqs":
        return False
    return _glob(name, ignore_case=True).fullmatch(action) is not None


def _resource_matches(pattern: Any, arn: str) -> bool:
    return isinstance(pattern, str) and _glob(pattern, ignore_case=False).fullmatch(arn) is not None


@functools.lru_cache(maxsize=1024)
def _glob(pattern: str, *, ignore_case: bool) -> re.Pattern[str]:
    """A policy wildcard pattern (``*`` any run, ``?`` any one character) as a regex."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL)


def _conditions_hold(conditions: Any, request: Request) -> bool | None:
    """Whether a statement's conditions (all of them) hold: None when smq cannot judge
    one of them and none of those it can judge is false."""
    if conditions is None or conditions == {}:
        return True
    if not isinstance(conditions, dict):
        return None
    judged: list[bool | None] = []
    for operator, tests in conditions.items():
        if operator != "Bool" or not isinstance(tests, dict):
            judged.append(None)
            continue
        for key, expected in tests.items():
            values = {str(v).lower() for v in (expected if isinstance(expected, list) else [expected])}
            if key.lower() != "aws:securetransport" or not values <= {"true", "false"}:
                judged.append(None)
            else:
                judged.append(str(request.secure).lower() in values)
    if False in judged:
        return False
    return None if None in judged else True
