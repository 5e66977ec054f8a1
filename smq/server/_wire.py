"""The two wire protocols: AWS JSON 1.0 and the AWS Query protocol.

Actions work on one shape of parameters and results, the JSON protocol's.
The Query protocol (form fields such as ``Attribute.1.Name``, XML replies)
is translated to and from it here, with the layout of each action's lists
and maps as SQS's Query API defines it (flattened lists, ``Name``/``Value``
map entries).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Union
from xml.sax.saxutils import escape

from ._errors import SqsError
from ._params import integer_text, shown

XML_NAMESPACE = "http://queue.amazonaws.com/doc/2012-11-05/"
JSON_CONTENT_TYPE = "application/x-amz-json-1.0"


# -- shapes of the Query protocol -------------------------------------------------
# A shape is "s" (string), "i" (integer), or one of the classes below.


class _List:
    """A flattened list: ``<Name>.1``, ``<Name>.2``... (or repeated ``<Name>`` elements)."""

    def __init__(self, member: Shape = "s", element: str = "") -> None:
        self.member = member
        self.element = element  # output only: the element name of each member


class _Map:
    """A flattened map: ``<Name>.N.<key>`` and ``<Name>.N.<value>``."""

    def __init__(self, key: str, value: str, value_shape: Shape = "s", element: str = "") -> None:
        self.key = key
        self.value = value
        self.value_shape = value_shape
        self.element = element  # output only


class _Struct:
    """Fields: query name -> (JSON name, shape)."""

    def __init__(self, fields: Mapping[str, tuple[str, Shape]]) -> None:
        self.fields = dict(fields)


Shape = Union[str, _List, _Map, _Struct]  # noqa: UP007

_ATTRIBUTE_VALUE = _Struct(
    {
        "StringValue": ("StringValue", "s"),
        "BinaryValue": ("BinaryValue", "s"),
        "DataType": ("DataType", "s"),
        "StringListValue": ("StringListValues", _List()),
        "BinaryListValue": ("BinaryListValues", _List()),
    }
)
_SEND: dict[str, tuple[str, Shape]] = {
    "MessageBody": ("MessageBody", "s"),
    "DelaySeconds": ("DelaySeconds", "i"),
    "MessageAttribute": ("MessageAttributes", _Map("Name", "Value", _ATTRIBUTE_VALUE)),
    "MessageSystemAttribute": ("MessageSystemAttributes", _Map("Name", "Value", _ATTRIBUTE_VALUE)),
    "MessageDeduplicationId": ("MessageDeduplicationId", "s"),
    "MessageGroupId": ("MessageGroupId", "s"),
}
_URL: dict[str, tuple[str, Shape]] = {"QueueUrl": ("QueueUrl", "s")}
_ATTRIBUTES: tuple[str, Shape] = ("Attributes", _Map("Name", "Value"))
_TAGS = _Map("Key", "Value")

INPUTS: dict[str, dict[str, tuple[str, Shape]]] = {
    "CreateQueue": {"QueueName": ("QueueName", "s"), "Attribute": _ATTRIBUTES, "Tag": ("tags", _TAGS)},
    "GetQueueUrl": {
        "QueueName": ("QueueName", "s"),
        "QueueOwnerAWSAccountId": ("QueueOwnerAWSAccountId", "s"),
    },
    "ListQueues": {
        "QueueNamePrefix": ("QueueNamePrefix", "s"),
        "NextToken": ("NextToken", "s"),
        "MaxResults": ("MaxResults", "i"),
    },
    "DeleteQueue": _URL,
    "PurgeQueue": _URL,
    "GetQueueAttributes": {**_URL, "AttributeName": ("AttributeNames", _List())},
    "SetQueueAttributes": {**_URL, "Attribute": _ATTRIBUTES},
    "SendMessage": {**_URL, **_SEND},
    "SendMessageBatch": {
        **_URL,
        "SendMessageBatchRequestEntry": ("Entries", _List(_Struct({"Id": ("Id", "s"), **_SEND}))),
    },
    "ReceiveMessage": {
        **_URL,
        "AttributeName": ("AttributeNames", _List()),
        "MessageSystemAttributeName": ("MessageSystemAttributeNames", _List()),
        "MessageAttributeName": ("MessageAttributeNames", _List()),
        "MaxNumberOfMessages": ("MaxNumberOfMessages", "i"),
        "VisibilityTimeout": ("VisibilityTimeout", "i"),
        "WaitTimeSeconds": ("WaitTimeSeconds", "i"),
        "ReceiveRequestAttemptId": ("ReceiveRequestAttemptId", "s"),
    },
    "DeleteMessage": {**_URL, "ReceiptHandle": ("ReceiptHandle", "s")},
    "DeleteMessageBatch": {
        **_URL,
        "DeleteMessageBatchRequestEntry": (
            "Entries",
            _List(_Struct({"Id": ("Id", "s"), "ReceiptHandle": ("ReceiptHandle", "s")})),
        ),
    },
    "ChangeMessageVisibility": {
        **_URL,
        "ReceiptHandle": ("ReceiptHandle", "s"),
        "VisibilityTimeout": ("VisibilityTimeout", "i"),
    },
    "ChangeMessageVisibilityBatch": {
        **_URL,
        "ChangeMessageVisibilityBatchRequestEntry": (
            "Entries",
            _List(
                _Struct(
                    {
                        "Id": ("Id", "s"),
                        "ReceiptHandle": ("ReceiptHandle", "s"),
                        "VisibilityTimeout": ("VisibilityTimeout", "i"),
                    }
                )
            ),
        ),
    },
    "ListDeadLetterSourceQueues": {
        **_URL,
        "NextToken": ("NextToken", "s"),
        "MaxResults": ("MaxResults", "i"),
    },
    "StartMessageMoveTask": {
        "SourceArn": ("SourceArn", "s"),
        "DestinationArn": ("DestinationArn", "s"),
        "MaxNumberOfMessagesPerSecond": ("MaxNumberOfMessagesPerSecond", "i"),
    },
    "ListMessageMoveTasks": {"SourceArn": ("SourceArn", "s"), "MaxResults": ("MaxResults", "i")},
    "CancelMessageMoveTask": {"TaskHandle": ("TaskHandle", "s")},
    "TagQueue": {**_URL, "Tag": ("Tags", _TAGS)},
    "UntagQueue": {**_URL, "TagKey": ("TagKeys", _List())},
    "ListQueueTags": _URL,
    "AddPermission": {
        **_URL,
        "Label": ("Label", "s"),
        "AWSAccountId": ("AWSAccountIds", _List()),
        "ActionName": ("Actions", _List()),
    },
    "RemovePermission": {**_URL, "Label": ("Label", "s")},
}

_BATCH_ERROR = _Struct({})
# Actions whose reply has no <ActionResult> element; every other reply has
# one, even when empty (botocore's Query parser looks for it).
NO_RESULT = frozenset(
    {
        "DeleteQueue",
        "PurgeQueue",
        "SetQueueAttributes",
        "DeleteMessage",
        "ChangeMessageVisibility",
        "TagQueue",
        "UntagQueue",
        "AddPermission",
        "RemovePermission",
    }
)
OUTPUTS: dict[str, dict[str, Shape]] = {
    "ListQueues": {"QueueUrls": _List(element="QueueUrl")},
    "ListDeadLetterSourceQueues": {"queueUrls": _List(element="QueueUrl")},
    "GetQueueAttributes": {"Attributes": _Map("Name", "Value", element="Attribute")},
    "ListQueueTags": {"Tags": _Map("Key", "Value", element="Tag")},
    "ReceiveMessage": {
        "Messages": _List(
            _Struct(
                {
                    "Attributes": ("Attributes", _Map("Name", "Value", element="Attribute")),
                    "MessageAttributes": (
                        "MessageAttributes",
                        _Map(
                            "Name",
                            "Value",
                            _Struct(
                                {
                                    "StringListValues": (
                                        "StringListValues",
                                        _List(element="StringListValue"),
                                    ),
                                    "BinaryListValues": (
                                        "BinaryListValues",
                                        _List(element="BinaryListValue"),
                                    ),
                                }
                            ),
                            element="MessageAttribute",
                        ),
                    ),
                }
            ),
            element="Message",
        )
    },
    "SendMessageBatch": {
        "Successful": _List(element="SendMessageBatchResultEntry"),
        "Failed": _List(element="BatchResultErrorEntry"),
    },
    "DeleteMessageBatch": {
        "Successful": _List(element="DeleteMessageBatchResultEntry"),
        "Failed": _List(element="BatchResultErrorEntry"),
    },
    "ChangeMessageVisibilityBatch": {
        "Successful": _List(element="ChangeMessageVisibilityBatchResultEntry"),
        "Failed": _List(element="BatchResultErrorEntry"),
    },
    "ListMessageMoveTasks": {"Results": _List(element="ListMessageMoveTasksResultEntry")},
}


# -- JSON -------------------------------------------------------------------------


def json_params(body: bytes) -> dict[str, Any]:
    """The parameters of a JSON-protocol request body."""
    if not body.strip():
        return {}
    try:
        # UTF-8 only: json.loads would also take UTF-16 and UTF-32, and the
        # encoded surrogates UTF-8 has no place for.
        text = body.decode("utf-8-sig")
        params = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise SqsError("SerializationException", f"the request body is not valid JSON: {error}") from None
    except RecursionError:
        raise SqsError("SerializationException", "the request body is nested too deeply") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "the request body must be a JSON object")
    if _SURROGATE_ESCAPE.search(text) and not _is_unicode(params):
        raise SqsError("SerializationException", "a string in the request body has a lone surrogate")
    return params


# A \u escape of a UTF-16 surrogate: in a pair it is one character, alone it
# is none, and no string with one can be stored or sent on.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _is_unicode(params: dict[str, Any]) -> bool:
    try:
        json.dumps(params, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


# One encoder for every reply: ``json.dumps`` with options makes a new one per call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def json_body(result: Mapping[str, Any]) -> bytes:
    # A lone surrogate (from a header's undecodable bytes, or a JSON escape a
    # client sent) has no UTF-8 form: it goes out as its JSON escape, \udcxx.
    return _ENCODE(result).encode("utf-8", "backslashreplace")


def json_error(error: SqsError) -> tuple[bytes, dict[str, str]]:
    body = json_body({"__type": error.json_type, "message": error.message})
    return body, {"x-amzn-query-error": f"{error.query_code};{error.fault}"}


# -- Query: parameters ------------------------------------------------------------


def query_params(action: str, form: Mapping[str, str]) -> dict[str, Any]:
    """The JSON-shaped parameters of a Query-protocol request's form fields."""
    tree: dict[str, Any] = {}
    for name, value in form.items():
        node = tree
        *path, last = name.split(".")
        for part in path:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise SqsError("MalformedQueryString", f"parameter {name!r} conflicts with another")
            node = child
        if isinstance(node.get(last), dict):
            raise SqsError("MalformedQueryString", f"parameter {name!r} conflicts with another")
        node[last] = value
    return _struct(_Struct(INPUTS.get(action, {})), tree, "")


def _convert(shape: Shape, value: Any, where: str) -> Any:
    if shape == "s":
        if not isinstance(value, str):
            raise SqsError("MalformedQueryString", f"parameter {where} must be a single value")
        return value
    if shape == "i":
        number = integer_text(value) if isinstance(value, str) else None
        if number is None:
            shown_value = shown(value) if isinstance(value, str) else "(not a single value)"
            raise SqsError("InvalidParameterValue", f"Value {shown_value} for parameter {where} is invalid")
        return number
    if isinstance(shape, _Struct):
        if not isinstance(value, dict):
            raise SqsError("MalformedQueryString", f"parameter {where} needs members")
        return _struct(shape, value, where + ".")
    if value == "":  # an empty list or map, written as ``<Name>=``
        return [] if isinstance(shape, _List) else {}
    members = _numbered(value, where)
    if isinstance(shape, _List):
        return [_convert(shape.member, member, f"{where}.{n}") for n, member in members]
    assert isinstance(shape, _Map)
    result: dict[str, Any] = {}
    for n, entry in members:
        if not isinstance(entry, dict) or shape.key not in entry or shape.value not in entry:
            raise SqsError("MissingParameter", f"{where}.{n} needs a {shape.key} and a {shape.value}")
        key = _convert("s", entry[shape.key], f"{where}.{n}.{shape.key}")
        result[key] = _convert(shape.value_shape, entry[shape.value], f"{where}.{n}.{shape.value}")
    return result


def _struct(shape: _Struct, tree: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for query_name, (json_name, member) in shape.fields.items():
        if query_name in tree:
            params[json_name] = _convert(member, tree[query_name], prefix + query_name)
        elif isinstance(member, (_List, _Map)) and tree.get(json_name) == "":
            # botocore writes an empty list as ``<member name>=``: it has no
            # member to take the flattened name from.
            params[json_name] = [] if isinstance(member, _List) else {}
    return params


# A member's index: ASCII digits, from 1 (more digits than any list has are refused).
_INDEX = re.compile(r"[1-9][0-9]{0,8}")


def _numbered(value: Any, where: str) -> list[tuple[int, Any]]:
    if not isinstance(value, dict) or not all(_INDEX.fullmatch(k) for k in value):
        # A bad field index is a bad parameter (400); MalformedQueryString (404) is kept for
        # a query string that cannot be read at all.
        raise SqsError("InvalidParameterValue", f"parameter {where} must be numbered from 1 ({where}.1...)")
    return sorted((int(k), v) for k, v in value.items())


# -- Query: replies ---------------------------------------------------------------


# Characters XML cannot hold (control characters, lone surrogates): an error
# message may quote a client's text that has them.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    # Carriage returns would become newlines in any XML parser: keep them.
    return escape(_NOT_XML.sub("\ufffd", str(value))).replace("\r", "&#xD;")


def _element(name: str, value: Any, shape: Shape | None, out: list[str]) -> None:
    if isinstance(shape, _List):
        for member in value:
            _element(shape.element, member, shape.member if isinstance(shape.member, _Struct) else None, out)
    elif isinstance(shape, _Map):
        for key, item in value.items():
            out.append(f"<{shape.element}><{shape.key}>{_text(key)}</{shape.key}>")
            _element(
                shape.value, item, shape.value_shape if isinstance(shape.value_shape, _Struct) else None, out
            )
            out.append(f"</{shape.element}>")
    elif isinstance(value, Mapping):
        fields = shape.fields if isinstance(shape, _Struct) else {}
        out.append(f"<{name}>")
        _members(value, {k: s for k, (_, s) in fields.items()}, out)
        out.append(f"</{name}>")
    else:
        out.append(f"<{name}>{_text(value)}</{name}>")


def _members(result: Mapping[str, Any], shapes: Mapping[str, Shape], out: list[str]) -> None:
    for key, value in result.items():
        if value is None:
            continue
        _element(key, value, shapes.get(key), out)


def query_body(action: str, result: Mapping[str, Any] | None, request_id: str) -> bytes:
    """The XML reply of a Query-protocol action."""
    out = [f'<?xml version="1.0"?><{action}Response xmlns="{XML_NAMESPACE}">']
    if result or action not in NO_RESULT:
        members: list[str] = []
        _members(result or {}, OUTPUTS.get(action, {}), members)
        if members:
            out += (f"<{action}Result>", *members, f"</{action}Result>")
        else:
            out.append(f"<{action}Result/>")  # as SQS writes an empty result
    out.append(f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>")
    return "".join(out).encode()


def query_error(error: SqsError, request_id: str) -> bytes:
    return (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{XML_NAMESPACE}"><Error>'
        f"<Type>{error.fault}</Type><Code>{_text(error.query_code)}</Code>"
        f"<Message>{_text(error.query_message)}</Message><Detail/></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    ).encode()


# -- Query, replies in JSON (``Accept: application/json``) ------------------------


def query_json_body(action: str, result: Mapping[str, Any] | None, request_id: str) -> bytes:
    """The reply of a Query-protocol action to a client that asks for JSON.

    The XML reply's layout as JSON: ``{"<Action>Response": {"<Action>Result":
    {...}, "ResponseMetadata": {"RequestId": ...}}}``, the result's members
    as the JSON protocol names and shapes them.
    """
    response: dict[str, Any] = {}
    if result or action not in NO_RESULT:
        response[f"{action}Result"] = dict(result or {})
    response["ResponseMetadata"] = {"RequestId": request_id}
    return json_body({f"{action}Response": response})


def query_json_error(error: SqsError, request_id: str) -> bytes:
    """A Query-protocol error, to a client that asks for JSON: the XML error's layout."""
    return json_body(
        {
            "Error": {"Type": error.fault, "Code": error.query_code, "Message": error.message},
            "RequestId": request_id,
        }
    )
