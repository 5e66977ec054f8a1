"""Queue actions: create, find, list, delete, purge, attributes, tags, dead letters."""

from __future__ import annotations

import base64
import binascii
import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import (
    InvalidAttributeName,
    InvalidAttributeValue,
    InvalidQueueName,
    PurgeQueueInProgress,
    QueueNameExists,
    SmqError,
    TooManyTags,
)
from ..core._attributes import ATTRIBUTE_OF, FIFO_ONLY, SETTINGS, SHARDS, STORED, in_attribute_words
from ..core._config import (
    MAX_SHARDS,
    QueueInfo,
    RedrivePolicy,
    check_extra_attributes,
    check_queue_name,
    is_fifo_name,
    setting_choices,
    setting_range,
)
from ..core._names import check_sqs_name, split_name
from . import _params as p
from ._context import Context
from ._errors import SqsError
from ._policy_quotas import check_policy_quotas

Result = dict[str, Any]

READ_ONLY = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
)
ALL_NAMES = ("All", *SETTINGS, "RedrivePolicy", *STORED, *READ_ONLY, "FifoQueue", *FIFO_ONLY, SHARDS)


_FIFO_NAME_RULE = (
    "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, "
    "must end with .fifo suffix and be 1 to 80 in length."
)


def _name(value: str, fifo: bool = False) -> str:
    try:
        name = check_sqs_name(value)
    except InvalidQueueName as error:
        if fifo:
            raise SqsError("InvalidParameterValue", _FIFO_NAME_RULE) from error
        raise SqsError(
            "InvalidParameterValue",
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        ) from error
    if is_fifo_name(name) != fifo:
        if fifo:
            raise SqsError("InvalidParameterValue", _FIFO_NAME_RULE)
        raise SqsError(
            "InvalidParameterValue",
            f"Queue {name} ends in .fifo: a FIFO queue needs the attribute FifoQueue=true at creation.",
        )
    return name


def _boolean(name: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    return value.lower() == "true"


def _redrive_policy(ctx: Context, text: str) -> RedrivePolicy | None:
    if text == "":
        return None
    try:
        policy = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        policy = None
    if not isinstance(policy, dict) or "deadLetterTargetArn" not in policy or "maxReceiveCount" not in policy:
        raise SqsError(
            "InvalidParameterValue",
            "Value for parameter RedrivePolicy is invalid. Reason: Redrive policy is not a valid JSON map "
            "with deadLetterTargetArn and maxReceiveCount.",
        )
    dead_letters = ctx.name_of_arn(policy["deadLetterTargetArn"])
    count = policy["maxReceiveCount"]
    if isinstance(count, str):
        count = p.integer_text(count)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
        raise SqsError(
            "InvalidParameterValue",
            "Value for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount: "
            f"{p.shown(policy['maxReceiveCount'])}, valid values are from 1 to 1000 both inclusive.",
        )
    return RedrivePolicy(dead_letters, count)


def _fifo_queue(value: str, *, fifo: bool) -> None:
    """Check FifoQueue as the live service does: the name decided the type (see create_queue)."""
    wanted = _boolean("FifoQueue", value)
    if not fifo:
        # A standard queue knows no FifoQueue attribute, "true" or "false", at creation or after.
        raise SqsError("InvalidAttributeName", "Unknown Attribute FifoQueue.")
    if wanted != fifo:
        raise SqsError(
            "InvalidAttributeValue",
            "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
        )


def _shards(value: str, *, creating: bool) -> int:
    if not creating:
        raise SqsError("InvalidAttributeValue", f"{SHARDS} is set when the queue is created, never changed.")
    number = p.integer_text(value)
    if number is None or not 1 <= number <= MAX_SHARDS:
        raise SqsError(
            "InvalidAttributeValue",
            f"Invalid value for the parameter {SHARDS}. Reason: use an integer from 1 to {MAX_SHARDS}.",
        )
    return number


def _settings(ctx: Context, attributes: Mapping[str, str], *, creating: bool, fifo: bool) -> dict[str, Any]:
    """QueueConfig keyword arguments for SQS queue attributes (of a FIFO queue when ``fifo``)."""
    settings: dict[str, Any] = {}
    stored: dict[str, str] = {}
    for name, value in attributes.items():
        if name in SETTINGS:
            number = p.integer_text(value)
            low, high = setting_range(SETTINGS[name])
            if number is None or not low <= number <= high:
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
            settings[SETTINGS[name]] = number
        elif name == "RedrivePolicy":
            settings["redrive_policy"] = _redrive_policy(ctx, value)
        elif name in STORED:
            try:
                stored.update(check_extra_attributes({name: value}))
            except InvalidAttributeValue:
                # SQS's words, which name the attribute and not the check that refused it.
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.") from None
            if name == "Policy" and value:
                check_policy_quotas(value)
        elif name == "FifoQueue":
            _fifo_queue(value, fifo=fifo)
        elif name == SHARDS:
            settings["shards"] = _shards(value, creating=creating)
        elif name in FIFO_ONLY and fifo:
            if name == "ContentBasedDeduplication":
                settings[FIFO_ONLY[name]] = _boolean(name, value)
            elif value in setting_choices(FIFO_ONLY[name]):
                settings[FIFO_ONLY[name]] = value
            else:
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
        elif name in FIFO_ONLY and name != "ContentBasedDeduplication":
            raise SqsError(
                "InvalidAttributeName", f"You can specify the {name} only when FifoQueue is set to true."
            )
        else:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
    if stored:
        settings["extra_attributes"] = stored
    return settings


def _in_sqs_words(error: InvalidAttributeName | InvalidAttributeValue) -> SqsError:
    """A queue attribute refused by the core, named as SQS names it (never by a Python field)."""
    return SqsError(type(error).__name__, in_attribute_words(str(error)))


async def _check_dead_letter_queue(ctx: Context, settings: Mapping[str, Any], source: str) -> None:
    policy = settings.get("redrive_policy")
    if policy is not None and split_name(policy.dead_letter_queue)[:2] != split_name(source)[:2]:
        raise SqsError(
            "InvalidParameterValue",
            "Value for parameter RedrivePolicy is invalid. Reason: "
            "The dead-letter queue must be in the same account and region as the source queue.",
        )
    if (
        policy is not None
        and policy.dead_letter_queue != source  # its own: SQS accepts that, even at creation
        and not await ctx.call(ctx.client.queue_exists, policy.dead_letter_queue)
    ):
        raise SqsError(
            "InvalidParameterValue",
            "Value for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.",
        )


async def create_queue(ctx: Context, params: Result) -> Result:
    attributes = p.string_map(params, "Attributes")
    fifo = _boolean("FifoQueue", attributes.get("FifoQueue", "false"))
    name = ctx.core_name(_name(p.required_string(params, "QueueName"), fifo))
    settings = _settings(ctx, attributes, creating=True, fifo=fifo)
    tags = p.string_map(params, "tags")
    await _check_dead_letter_queue(ctx, settings, name)
    if tags:
        settings["tags"] = tags
    try:
        await ctx.call(ctx.client.create_queue, name, refuse_recently_deleted=True, **settings)
    except (InvalidAttributeName, InvalidAttributeValue) as error:
        raise _in_sqs_words(error) from None
    except QueueNameExists as error:
        raise SqsError(
            "QueueNameExists",
            "A queue already exists with the same name and a different value for attribute "
            + ATTRIBUTE_OF.get(error.setting, error.setting),
        ) from None
    return {"QueueUrl": ctx.url_of(name)}


async def get_queue_url(ctx: Context, params: Result) -> Result:
    name = p.required_string(params, "QueueName")
    owner = p.string(params, "QueueOwnerAWSAccountId")
    found = ctx.named_queue(name, owner)
    if found is None or not await ctx.call(ctx.client.queue_exists, found):
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    return {"QueueUrl": ctx.url_of(found)}


def _page_token(token: str | None) -> str:
    if token is None:
        return ""
    try:
        after = base64.urlsafe_b64decode(token.encode()).decode()
        check_queue_name(after)
    except (binascii.Error, UnicodeDecodeError, ValueError, SmqError):
        raise SqsError("InvalidParameterValue", "Invalid NextToken value.") from None
    return after


async def _paged(
    ctx: Context, lister: Callable[..., list[str]], limit: int | None, after: str, key: str
) -> Result:
    """A page of queue URLs; NextToken only when MaxResults was given and more follow."""
    names = await ctx.call(lister, limit=limit or 1000, after=after)
    result: Result = {key: [ctx.url_of(n) for n in names]}
    if limit is not None and len(names) == limit and await ctx.call(lister, limit=1, after=names[-1]):
        result["NextToken"] = base64.urlsafe_b64encode(names[-1].encode()).decode()
    return result


async def list_queues(ctx: Context, params: Result) -> Result:
    prefix = p.string(params, "QueueNamePrefix") or ""
    limit = p.integer(params, "MaxResults", 1, 1000)
    after = _page_token(p.string(params, "NextToken"))
    if prefix and not all(c.isalnum() or c in "-_" for c in prefix):
        return {}
    result = await _paged(ctx, ctx.queue_lister(prefix), limit, after, "QueueUrls")
    if not result["QueueUrls"]:
        del result["QueueUrls"]  # as SQS: no member when there are none
    return result


async def delete_queue(ctx: Context, params: Result) -> Result:
    name = ctx.queue_name(params)
    if not await ctx.call(ctx.client.delete_queue, name):
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    return {}


async def purge_queue(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    try:
        await ctx.call(functools.partial(queue.purge, interval=60))  # SQS: one purge per 60 s
    except PurgeQueueInProgress:
        # Named as the client knows it, without the region and account of the core name.
        raise SqsError(
            "PurgeQueueInProgress",
            f"Only one PurgeQueue operation on {split_name(queue.name)[2]} is allowed every 60 seconds.",
        ) from None
    return {}


def _attributes(ctx: Context, info: QueueInfo, names: set[str]) -> dict[str, str]:
    config = info.config
    values: dict[str, str] = {
        "ApproximateNumberOfMessages": str(info.visible),
        "ApproximateNumberOfMessagesNotVisible": str(info.in_flight),
        "ApproximateNumberOfMessagesDelayed": str(info.delayed),
        "CreatedTimestamp": str(int(info.created_at)),
        "LastModifiedTimestamp": str(int(info.modified_at)),
        "QueueArn": ctx.arn_of(info.name),
    }
    for attribute, setting in SETTINGS.items():
        values[attribute] = str(getattr(config, setting))
    policy = config.redrive_policy
    if policy is not None:
        values["RedrivePolicy"] = json.dumps(
            {
                "deadLetterTargetArn": ctx.arn_of(policy.dead_letter_queue),
                "maxReceiveCount": policy.max_receive_count,
            },
            separators=(",", ":"),
        )
    values.update(_encryption(getattr(config, "extra_attributes", {})))
    if config.fifo_queue:
        values["FifoQueue"] = "true"
        values["ContentBasedDeduplication"] = "true" if config.content_based_deduplication else "false"
        values["DeduplicationScope"] = config.deduplication_scope
        values["FifoThroughputLimit"] = config.fifo_throughput_limit
    if config.shards > 1 or SHARDS in names:
        values[SHARDS] = str(config.shards)  # not in "All" for a queue of one shard, as SQS has none
    if "All" in names:
        return values
    return {name: values[name] for name in sorted(names) if name in values}


def _encryption(stored: Mapping[str, str]) -> dict[str, str]:
    """The stored encryption attributes, as SQS lays them out.

    smq encrypts nothing, so unlike SQS (where a new queue is encrypted with
    SQS-managed keys) a queue reports ``SqsManagedSseEnabled`` false unless a
    template set it; the KMS data key reuse period (default 300 seconds) is
    reported only for a queue with a KMS key, whose ``SqsManagedSseEnabled``
    is false, as in SQS.
    """
    values = dict(stored)
    if values.get("KmsMasterKeyId"):
        values["SqsManagedSseEnabled"] = "false"
        values.setdefault("KmsDataKeyReusePeriodSeconds", "300")
    else:
        values.setdefault("SqsManagedSseEnabled", "false")
        values.pop("KmsDataKeyReusePeriodSeconds", None)
    return values


async def get_queue_attributes(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    names = set(p.string_list(params, "AttributeNames"))
    unknown = names - set(ALL_NAMES)
    if unknown:
        raise SqsError("InvalidAttributeName", f"Unknown Attribute {sorted(unknown)[0]}.")
    info = await ctx.drive(queue._attributes_steps())
    attributes = _attributes(ctx, info, names)
    return {"Attributes": attributes} if attributes else {}


async def set_queue_attributes(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    if "Attributes" not in params:
        raise SqsError("MissingParameter", "The request must contain the parameter Attributes.")
    attributes = p.string_map(params, "Attributes")
    for name in attributes:
        if name in READ_ONLY:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}. It cannot be set.")
    settings = _settings(ctx, attributes, creating=False, fifo=queue.fifo)
    if not settings:
        return {}
    await _check_dead_letter_queue(ctx, settings, queue.name)
    try:
        await ctx.call(lambda: queue.set_attributes(**settings))
    except (InvalidAttributeName, InvalidAttributeValue) as error:
        raise _in_sqs_words(error) from None
    return {}


async def list_dead_letter_source_queues(ctx: Context, params: Result) -> Result:
    name = ctx.queue_name(params)
    limit = p.integer(params, "MaxResults", 1, 1000)
    after = _page_token(p.string(params, "NextToken"))
    lister = functools.partial(ctx.client.dead_letter_sources, name)
    return await _paged(ctx, lister, limit, after, "queueUrls")


# -- tags -------------------------------------------------------------------------


async def tag_queue(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    if not params.get("Tags"):  # absent (Query) or {} (JSON)
        raise SqsError("MissingParameter", "The request must contain the parameter Tags.")
    tags = p.string_map(params, "Tags")
    try:
        await ctx.call(queue.tag, tags)
    except TooManyTags:  # more than 50, given or with the tags the queue has
        raise SqsError(
            "InvalidParameterValue", f"Too many tags added for queue {split_name(queue.name)[2]}."
        ) from None
    return {}


async def untag_queue(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    if "TagKeys" not in params:
        raise SqsError("MissingParameter", "The request must contain the parameter TagKeys.")
    keys = p.string_list(params, "TagKeys")
    if not keys:
        raise SqsError("InvalidParameterValue", "Tag keys must be between 1 and 128 characters in length.")
    await ctx.call(queue.untag, keys)
    return {}


async def list_queue_tags(ctx: Context, params: Result) -> Result:
    queue = ctx.queue(params)
    tags = await ctx.call(queue.tags)
    return {"Tags": tags} if tags else {}
