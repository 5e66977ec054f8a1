"""SQS error codes: the one table of the HTTP layer.

Every error the API returns is an ``SqsError``. Its ``code`` names it
here; ``json_type`` is the ``__type`` SQS gives it in the JSON protocol
(``com.amazonaws.sqs#<name>`` for SQS's own errors); ``query_code`` is the code of the
Query protocol, which the JSON protocol repeats in the ``x-amzn-query-error``
header, so that SDKs that check ``Error.Code`` and SDKs that raise modelled
exceptions both recognise it. Codes, statuses, types and texts are the live
service's where it was recorded.
"""

from __future__ import annotations

import logging
import time

from .. import _errors as core

log = logging.getLogger("smq.serve")

# code: (Query-protocol code, HTTP status)
ERRORS: dict[str, tuple[str, int]] = {
    "QueueDoesNotExist": ("AWS.SimpleQueueService.NonExistentQueue", 400),
    "QueueNameExists": ("QueueAlreadyExists", 400),
    "QueueDeletedRecently": ("AWS.SimpleQueueService.QueueDeletedRecently", 400),
    "BatchEntryIdsNotDistinct": ("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400),
    "BatchRequestTooLong": ("AWS.SimpleQueueService.BatchRequestTooLong", 400),
    "EmptyBatchRequest": ("AWS.SimpleQueueService.EmptyBatchRequest", 400),
    "InvalidBatchEntryId": ("AWS.SimpleQueueService.InvalidBatchEntryId", 400),
    "TooManyEntriesInBatchRequest": ("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400),
    "MessageNotInflight": ("AWS.SimpleQueueService.MessageNotInflight", 400),
    "PurgeQueueInProgress": ("AWS.SimpleQueueService.PurgeQueueInProgress", 403),
    "UnsupportedOperation": ("AWS.SimpleQueueService.UnsupportedOperation", 400),
    "OverLimit": ("OverLimit", 403),
    "ResourceNotFoundException": ("ResourceNotFoundException", 404),
    "InvalidAttributeName": ("InvalidAttributeName", 400),
    "InvalidAttributeValue": ("InvalidAttributeValue", 400),
    "InvalidMessageContents": ("InvalidMessageContents", 400),
    "ReceiptHandleIsInvalid": ("ReceiptHandleIsInvalid", 400),
    "InvalidAddress": ("InvalidAddress", 404),
    "RequestThrottled": ("RequestThrottled", 403),
    # Common errors of all AWS Query-era services.
    "InvalidParameterValue": ("InvalidParameterValue", 400),
    "MissingParameter": ("MissingParameter", 400),
    "InvalidAction": ("InvalidAction", 400),
    "MissingAction": ("MissingAction", 400),
    # An unknown X-Amz-Target of the JSON protocol.
    "UnknownOperationException": ("UnknownOperationException", 400),
    # A GET with no Action at all: the service's front answers 404 and a bare
    # <UnknownOperationException/>, in XML even to a client that asks for JSON.
    "NoAction": ("UnknownOperationException", 404),
    "MalformedQueryString": ("MalformedQueryString", 404),
    "SerializationException": ("SerializationException", 400),
    "InvalidClientTokenId": ("InvalidClientTokenId", 403),
    "MissingAuthenticationToken": ("MissingAuthenticationToken", 403),
    "IncompleteSignature": ("IncompleteSignature", 400),
    "SignatureDoesNotMatch": ("SignatureDoesNotMatch", 403),
    "RequestExpired": ("RequestExpired", 400),
    "AccessDenied": ("AccessDenied", 403),
    "InternalFailure": ("InternalFailure", 500),
    "ServiceUnavailable": ("ServiceUnavailable", 503),
    # A request body slower than --body-timeout (the code and status S3 gives one).
    "RequestTimeout": ("RequestTimeout", 408),
}
# JSON ``__type`` names that differ from the code (as the live service sends them).
_JSON_TYPES = {
    "InvalidParameterValue": "InvalidParameterValueException",
    "MissingParameter": "MissingRequiredParameterException",
}
# Errors of the AWS request layer in front of SQS, not of SQS itself: their own
# namespace in the JSON protocol.
_FRONT_TYPES = {"AccessDenied": "com.amazon.coral.service#AccessDeniedException"}
NO_QUEUE = "The specified queue does not exist."
# The Query protocol's wording of the same error.
_QUERY_TEXTS = {NO_QUEUE: "The specified queue does not exist for this wsdl version."}


class SqsError(Exception):
    """An error as SQS reports it: code, message, HTTP status, fault side."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        if code not in ERRORS:
            raise KeyError(f"no SQS error code {code!r} in the table")
        self.code = code
        self.message = message
        self.query_code, self.status = ERRORS[code]

    @property
    def json_type(self) -> str:
        if self.code in _FRONT_TYPES:
            return _FRONT_TYPES[self.code]
        return "com.amazonaws.sqs#" + _JSON_TYPES.get(self.code, self.code)

    @property
    def query_message(self) -> str:
        return _QUERY_TEXTS.get(self.message, self.message)

    @property
    def sender_fault(self) -> bool:
        return self.status < 500

    @property
    def fault(self) -> str:
        """``Sender`` or ``Receiver``, as the Query protocol's ``Type``."""
        return "Sender" if self.sender_fault else "Receiver"

    def __repr__(self) -> str:
        return f"SqsError({self.code!r}, {self.message!r})"


# smq exception class -> SQS code; the most specific class listed wins.
_FROM_CORE: dict[type[core.SmqError], str] = {
    core.InvalidQueueName: "InvalidParameterValue",
    core.InvalidAttributeName: "InvalidAttributeName",
    core.InvalidAttributeValue: "InvalidAttributeValue",
    core.InvalidMessageContents: "InvalidMessageContents",
    core.MessageTooLong: "InvalidParameterValue",
    core.MissingParameter: "MissingParameter",
    core.VisibilityCeilingExceeded: "InvalidParameterValue",
    core.EmptyBatchRequest: "EmptyBatchRequest",
    core.TooManyEntriesInBatchRequest: "TooManyEntriesInBatchRequest",
    core.BatchEntryIdsNotDistinct: "BatchEntryIdsNotDistinct",
    core.InvalidBatchEntryId: "InvalidBatchEntryId",
    core.BatchRequestTooLong: "BatchRequestTooLong",
    core.InvalidParameter: "InvalidParameterValue",
    core.QueueDoesNotExist: "QueueDoesNotExist",
    core.QueueNameExists: "QueueNameExists",
    core.QueueDeletedRecently: "QueueDeletedRecently",
    core.ReceiptHandleIsInvalid: "ReceiptHandleIsInvalid",
    # A change on a deleted message: the live service answers InvalidParameterValue.
    core.MessageNotInflight: "InvalidParameterValue",
    core.ReceiptExpired: "InvalidParameterValue",
    core.PurgeQueueInProgress: "PurgeQueueInProgress",
    # SQS answers a change by a receipt that no longer holds the message so.
    core.StaleReceipt: "InvalidParameterValue",
    core.OverLimit: "OverLimit",
    core.MoveTaskNotFound: "ResourceNotFoundException",
    core.MoveTaskActive: "UnsupportedOperation",
    core.UnsafeRedisConfig: "ServiceUnavailable",
    # This server is older than the queue's data (a rolling upgrade under way): an SDK retries
    # a 503, and may reach an upgraded server; the detail is for the operator's log.
    core.UnsupportedLayout: "ServiceUnavailable",
    core.Unavailable: "ServiceUnavailable",  # surely did not run: SDKs retry a 503
    core.OutcomeUnknown: "InternalFailure",
    core.BackendError: "ServiceUnavailable",
}
_BY_NAME = {kind.__name__: code for kind, code in _FROM_CORE.items()}


# What a client is told of a failure of the backend. The details (the Redis address, a TLS
# error, which replica did not confirm) are for the operator's log only.
UNAVAILABLE = "The request has failed due to a temporary failure of the server."
UNKNOWN = (
    "The request processing has failed because of an internal error; "
    "the change it asked for may or may not have been made."
)
_BACKEND = (
    core.Unavailable,
    core.OutcomeUnknown,
    core.BackendError,
    core.UnsafeRedisConfig,
    core.UnsupportedLayout,
)
_said: dict[str, float] = {}  # code -> when its detail was last logged


def from_core(error: core.SmqError) -> SqsError:
    """The SQS error for an exception of the queue core."""
    if isinstance(error, core.QueueDoesNotExist):
        return SqsError("QueueDoesNotExist", NO_QUEUE)
    for kind in type(error).__mro__:
        code = _FROM_CORE.get(kind)
        if code is not None:
            if isinstance(error, _BACKEND):
                return SqsError(code, public_text(code, str(error)))
            return SqsError(code, str(error))
    return SqsError("InternalFailure", public_text("InternalFailure", str(error)))


def public_text(code: str, detail: str) -> str:
    """The text a client gets for a backend failure of ``code``; ``detail`` goes to the log
    (at most one line per code every 10 s, under an outage that fails every request)."""
    now = time.monotonic()
    if now - _said.get(code, float("-inf")) >= 10.0:
        _said[code] = now
        log.warning("%s: %s", code, detail)
    return UNKNOWN if code == "InternalFailure" else UNAVAILABLE


def code_for(core_name: str) -> str:
    """The SQS code for the name of an smq exception (a batch failure's ``code``)."""
    return _BY_NAME.get(core_name, "InternalFailure")
