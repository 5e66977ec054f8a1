"""Read-modify-write of a stored SQS attribute (such as ``Policy``) that loses
no change made meanwhile: read, compute, then write by the ``swap_attribute``
script only if the value is still the one read; else compute again from
the value the script saw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._errors import BackendError, InvalidAttributeName, QueueDoesNotExist
from ..core._config import EXTRA_ATTRIBUTE_NAMES, EXTRA_PREFIX, check_extra_attributes
from ..core._keys import QueueKeys
from ..core._scripts import text

if TYPE_CHECKING:
    from ..core._backend import Backend

_ATTEMPTS = 20


def update_extra_attribute(client: Backend, queue: str, name: str, change: Callable[[str], str]) -> str:
    """Set stored attribute ``name`` of ``queue`` to ``change(current)``; return the new value.

    ``current`` and the result are ``""`` for "not set" (a ``""`` result
    removes the attribute). ``change`` may be called more than once, when
    another client changes the attribute in between; exceptions it raises
    pass through, and nothing is written. Raises QueueDoesNotExist,
    InvalidAttributeValue for a result SQS would refuse, and BackendError
    when the value keeps changing under it.
    """
    if name not in EXTRA_ATTRIBUTE_NAMES:
        raise InvalidAttributeName(f"{name!r} is not a stored SQS attribute")
    keys = QueueKeys.of(queue)
    field = EXTRA_PREFIX + name
    stored = client._call(client._redis.hget, keys.meta, field)
    if stored is None and not client.queue_exists(queue):
        raise QueueDoesNotExist(f"queue {queue!r} does not exist")
    current = "" if stored is None else text(stored)
    for _ in range(_ATTEMPTS):
        value = change(current)
        if value:
            value = check_extra_attributes({name: value})[name]
        reply = client.run("swap_attribute", keys, [client._now_arg(), field, current, value], queue=queue)
        if int(reply[1]) == 1:
            return value
        current = text(reply[2])
    raise BackendError(f"{name} of queue {queue!r} kept changing: {_ATTEMPTS} attempts lost the race")
