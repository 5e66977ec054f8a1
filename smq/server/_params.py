"""Reading and checking request parameters, with SQS's error codes and wording."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core._attributes import integer_text as integer_text  # re-exported: its old home
from ._errors import SqsError


def shown(value: object) -> str:
    """A client's value in an error message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def string(params: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = params.get(name)
    if value is None:
        if required:
            raise SqsError("MissingParameter", f"The request must contain the parameter {name}.")
        return None
    if not isinstance(value, str):
        raise SqsError("InvalidParameterValue", f"Value for parameter {name} must be a string.")
    return value


def required_string(params: Mapping[str, Any], name: str) -> str:
    value = string(params, name, required=True)
    assert value is not None
    return value


def integer(
    params: Mapping[str, Any],
    name: str,
    low: int,
    high: int,
    *,
    required: bool = False,
    reason: str | None = None,
) -> int | None:
    value = params.get(name)
    if value is None:
        if required:
            raise SqsError("MissingParameter", f"The request must contain the parameter {name}.")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SqsError(
            "InvalidParameterValue",
            f"Value {shown(value)} for parameter {name} is invalid. Reason: "
            + (reason or f"Must be between {low} and {high}, if provided."),
        )
    return value


def string_list(params: Mapping[str, Any], name: str) -> list[str]:
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SqsError("InvalidParameterValue", f"Value for parameter {name} must be a list of strings.")
    return value


def string_map(params: Mapping[str, Any], name: str) -> dict[str, str]:
    value = params.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise SqsError("InvalidParameterValue", f"Value for parameter {name} must be a map of strings.")
    return value


def entries(params: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    """The Entries of a batch request; ``kind`` names an entry in the error (``...RequestEntry``)."""
    value = params.get("Entries")
    if value is None:
        raise SqsError("MissingParameter", "The request must contain the parameter Entries.")
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise SqsError("InvalidParameterValue", "Entries must be a list of objects.")
    if not value:
        raise SqsError("EmptyBatchRequest", f"There should be at least one {kind} in the request.")
    return value
