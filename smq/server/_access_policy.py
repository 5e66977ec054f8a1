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
no caller. A statement smq cannot fully judge (another condition, or an
element it cannot read: an account id written as a number, a Principal
neither ``*`` nor a mapping, no Principal or no Action) never allows, and
denies whenever the rest of it matches: what it does not understand fails
closed.
"""

from __future__ import annotations

import enum
import functools
import json
import re
import string
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
        applies = _applies(statement, request) if effect in ("Allow", "Deny") else False
        if applies is False:
            continue
        judged = _conditions_hold(statement.get("Condition"), request)
        if effect == "Deny" and judged is not False:
            return Decision.DENY
        if effect == "Allow" and applies and judged is True:
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


def _applies(statement: dict[str, Any], request: Request) -> bool | None:
    """Whether the statement's principal, action and resource all cover the request:
    None when one of them smq cannot read and none it can read rules the request out."""
    covered = [
        _covered(statement, "Principal", lambda p: _principal_matches(p, request.account), default=None),
        _covered(statement, "Action", lambda a: _action_matches(a, request.action), default=None),
        _covered(statement, "Resource", lambda r: _resource_matches(r, request.resource), default=True),
    ]
    if False in covered:
        return False
    return None if None in covered else True


def _covered(statement: dict[str, Any], element: str, matches: Any, *, default: bool | None) -> bool | None:
    """``element`` (or its ``Not`` form) of a statement, judged by ``matches`` on each value
    (True, False, or None for a value it cannot read); ``default`` when it has neither."""
    if element in statement:
        negated, given = False, statement[element]
    elif "Not" + element in statement:
        negated, given = True, statement["Not" + element]
    else:
        return default
    found = [matches(value) for value in _values(given, element)]
    if True in found:
        return not negated
    if None in found:
        return None
    return negated


class _Unreadable:
    """A value in a shape the policy grammar does not allow."""


_UNREADABLE = _Unreadable()


def _values(value: Any, element: str) -> list[Any]:
    if element == "Principal":
        # Only "*" stands alone; of the kinds in a mapping only AWS principals can be
        # callers here (Service, Federated, ... match no one).
        if isinstance(value, dict):
            value = value.get("AWS", [])
        elif value == "*":
            value = ["*"]
        else:
            value = [_UNREADABLE]
    if isinstance(value, list):
        return value
    return [value]


def _principal_matches(principal: Any, account: str) -> bool | None:
    if not isinstance(principal, str):
        return None
    if principal == "*" or (_ACCOUNT.fullmatch(principal) and principal == account):
        return True
    root = _ROOT.fullmatch(principal)
    if root is not None:
        return root.group(1) == account
    # A user, role or other identity (never a caller here); anything else is no principal.
    return False if _ACCOUNT.fullmatch(principal) or principal.startswith("arn:") else None


def _action_matches(pattern: Any, action: str) -> bool | None:
    if not isinstance(pattern, str):
        return None
    if pattern == "*":
        return True
    service, sep, name = pattern.partition(":")
    if not sep:
        return None
    if service.lower() != "sqs":
        return False
    return wildcard_matches(name, action, ignore_case=True)


def _resource_matches(pattern: Any, arn: str) -> bool | None:
    return wildcard_matches(pattern, arn) if isinstance(pattern, str) else None


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def wildcard_matches(pattern: str, text: str, *, ignore_case: bool = False) -> bool:
    """Whether ``text`` matches a policy wildcard pattern: ``*`` any run of characters, ``?`` any one.

    ``ignore_case``: ASCII letters match either case (action names are ASCII).
    Matched piece by piece, each leftmost (a backtracking regular expression
    can take exponentially long on patterns such as ``*a*a*a*a*a*a*a*b``, and
    a Policy is its owner's to write): the work is at most in proportion to
    the length of ``text`` times the length of the pattern's pieces.
    """
    if ignore_case:
        pattern, text = pattern.translate(_ASCII_LOWER), text.translate(_ASCII_LOWER)
    first, *rest = pattern.split("*")
    if not rest:
        return len(first) == len(text) and _fits(first, text, 0)
    last = rest.pop()
    middle = [part for part in rest if part]
    if len(first) + len(last) + sum(map(len, middle)) > len(text):
        return False  # each character of a piece stands for one of the text
    end = len(text) - len(last)
    if not _fits(first, text, 0) or not _fits(last, text, end):
        return False
    at = len(first)
    for part in middle:
        # The leftmost place a piece fits leaves the most room for the pieces after it.
        found = _find(part, text, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


def _fits(part: str, text: str, at: int) -> bool:
    """Whether ``part`` (``?`` any character) matches ``text`` at ``at``."""
    if "?" not in part:
        return text.startswith(part, at)
    return (
        0 <= at
        and at + len(part) <= len(text)
        and all(text.startswith(piece, at + offset) for offset, piece in _pieces(part))
    )


def _find(part: str, text: str, start: int, end: int) -> int:
    """The first place in ``text[start:end]`` where ``part`` fits whole, or -1."""
    if "?" not in part:
        return text.find(part, start, end)
    # Candidates are where the part's longest literal piece is.
    offset, piece = max(_pieces(part), key=lambda found: len(found[1]))
    last_start = end - len(part)
    at = start
    while at <= last_start:
        found = text.find(piece, at + offset, last_start + offset + len(piece))
        if found < 0:
            return -1
        if _fits(part, text, found - offset):
            return found - offset
        at = found - offset + 1
    return -1


def _pieces(part: str) -> list[tuple[int, str]]:
    """(offset, text) of the literal pieces between the ``?`` of a part."""
    pieces, at = [], 0
    for piece in part.split("?"):
        pieces.append((at, piece))
        at += len(piece) + 1
    return pieces


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
