"""Message move tasks over HTTP, on both protocols: StartMessageMoveTask,
ListMessageMoveTasks, CancelMessageMoveTask, run by the server process."""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

import smq
from http_support import ACCOUNT, REGION
from smq.operations._move_tasks import parse_handle


def arn(name: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def dead_letters(core: smq.Client, count: int) -> None:
    """Queue 'jobs' with `count` messages dead-lettered into 'jobs-dlq'."""
    core.create_queue("jobs-dlq")
    jobs = core.create_queue("jobs", redrive_policy=smq.RedrivePolicy("jobs-dlq", 1))
    for n in range(count):
        jobs.send(f"job {n}")
    while len(jobs.receive(10, visibility_timeout=0)) > 0:
        pass  # the second receive of each message moves it to the dead-letter queue
    assert core.get_queue("jobs-dlq").attributes().visible == count


def wait_for_status(api: Any, source: str, wanted: set[str], seconds: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        (task,) = api.list_message_move_tasks(SourceArn=arn(source))["Results"]
        if task["Status"] in wanted or time.monotonic() > deadline:
            return dict(task)
        time.sleep(0.1)


def code(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = caught.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def error(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, int, str]:
    """Error.Code, HTTP status and Error.Message of a ClientError."""
    return (*code(caught), caught.value.response["Error"]["Message"])


def handle_of(task_id: str, source_arn: str) -> str:
    return base64.b64encode(json.dumps({"taskId": task_id, "sourceArn": source_arn}).encode()).decode()


ACTIVE = (
    "There is already a task running. Only one active task is allowed for a source queue arn at a given time."
)


def test_a_move_task_redrives_dead_letters_to_their_queue(api: Any, core: smq.Client) -> None:
    dead_letters(core, 25)
    dead_ids = {m.message_id for m in core.get_queue("jobs-dlq").peek(limit=25)}
    handle = api.start_message_move_task(SourceArn=arn("jobs-dlq"))["TaskHandle"]
    assert handle
    task = wait_for_status(api, "jobs-dlq", {"COMPLETED", "FAILED"})
    assert task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == 25
    assert task["ApproximateNumberOfMessagesToMove"] == 25
    assert task["SourceArn"] == arn("jobs-dlq")
    assert "TaskHandle" not in task  # SQS shows it for running tasks only
    assert abs(task["StartedTimestamp"] / 1000 - time.time()) < 60
    assert core.get_queue("jobs").attributes().visible == 25
    assert core.get_queue("jobs-dlq").attributes().visible == 0
    # As SQS: redriven messages arrive as new ones, with new ids.
    url = api.get_queue_url(QueueName="jobs")["QueueUrl"]
    redriven = {
        m["MessageId"]
        for _ in range(3)
        for m in api.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    }
    assert len(redriven) == 25 and not redriven & dead_ids


def test_a_small_move_task_is_done_when_its_start_answers(api: Any, core: smq.Client) -> None:
    # The start wakes the runner and waits (up to a second) for its pass: no polling needed.
    dead_letters(core, 3)
    api.start_message_move_task(SourceArn=arn("jobs-dlq"))
    (task,) = api.list_message_move_tasks(SourceArn=arn("jobs-dlq"))["Results"]
    assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 3)
    url = api.get_queue_url(QueueName="jobs")["QueueUrl"]
    assert len(api.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]) == 3


def test_a_move_task_to_a_named_destination_at_a_set_rate(api: Any, core: smq.Client) -> None:
    dead_letters(core, 3)
    core.create_queue("elsewhere")
    api.start_message_move_task(
        SourceArn=arn("jobs-dlq"), DestinationArn=arn("elsewhere"), MaxNumberOfMessagesPerSecond=100
    )
    task = wait_for_status(api, "jobs-dlq", {"COMPLETED", "FAILED"})
    assert (task["Status"], task["DestinationArn"], task["MaxNumberOfMessagesPerSecond"]) == (
        "COMPLETED",
        arn("elsewhere"),
        100,
    )
    assert core.get_queue("elsewhere").attributes().visible == 3


def test_a_cancelled_move_task_stops_and_one_task_runs_at_a_time(api: Any, core: smq.Client) -> None:
    dead_letters(core, 20)
    handle = api.start_message_move_task(SourceArn=arn("jobs-dlq"), MaxNumberOfMessagesPerSecond=1)[
        "TaskHandle"
    ]
    with pytest.raises(ClientError) as caught:
        api.start_message_move_task(SourceArn=arn("jobs-dlq"))
    assert error(caught) == ("InvalidParameterValue", 400, ACTIVE)
    moved = api.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert moved < 20
    task = wait_for_status(api, "jobs-dlq", {"CANCELLED"})
    assert task["Status"] == "CANCELLED"
    left = core.get_queue("jobs-dlq").attributes().visible
    assert left == 20 - task["ApproximateNumberOfMessagesMoved"] and left > 0


def test_a_task_handle_is_base64_of_json_naming_the_task_and_its_source(api: Any, core: smq.Client) -> None:
    dead_letters(core, 5)
    handle = api.start_message_move_task(SourceArn=arn("jobs-dlq"), MaxNumberOfMessagesPerSecond=1)[
        "TaskHandle"
    ]
    document = json.loads(base64.b64decode(handle, validate=True))
    assert set(document) == {"taskId", "sourceArn"}
    assert document["sourceArn"] == arn("jobs-dlq")
    task_id = uuid.UUID(document["taskId"])  # a UUID, as SQS's task ids are
    assert str(task_id) == document["taskId"] and task_id.version == 4
    (listed,) = api.list_message_move_tasks(SourceArn=arn("jobs-dlq"))["Results"]
    assert listed["TaskHandle"] == handle
    api.cancel_message_move_task(TaskHandle=handle)
    assert wait_for_status(api, "jobs-dlq", {"CANCELLED"})["Status"] == "CANCELLED"


def test_a_handle_of_the_earlier_form_still_cancels_its_task(api: Any, core: smq.Client) -> None:
    # Handles given out before were the core's own (base64 of "<queue>:<token>"); a task
    # started then may still be running after an upgrade.
    dead_letters(core, 5)
    earlier = core.start_move_task("jobs-dlq", max_per_second=1).handle
    assert api.cancel_message_move_task(TaskHandle=earlier)["ApproximateNumberOfMessagesMoved"] < 5
    assert wait_for_status(api, "jobs-dlq", {"CANCELLED"})["Status"] == "CANCELLED"
    # 0.2.0's JSON handles named the task by the core's token, not by a UUID.
    token = parse_handle(core.start_move_task("jobs-dlq", max_per_second=1).handle)[1]
    assert api.cancel_message_move_task(TaskHandle=handle_of(token, arn("jobs-dlq")))
    assert wait_for_status(api, "jobs-dlq", {"CANCELLED"})["Status"] == "CANCELLED"


def test_cancel_errors_name_what_is_wrong(api: Any, core: smq.Client) -> None:
    dead_letters(core, 1)
    for bad in ["not-a-task", base64.b64encode(b"[1, 2]").decode(), handle_of("x", "not an arn")]:
        with pytest.raises(ClientError) as caught:
            api.cancel_message_move_task(TaskHandle=bad)
        assert error(caught) == ("InvalidParameterValue", 400, "Value for parameter TaskHandle is invalid.")
    with pytest.raises(ClientError) as caught:
        api.cancel_message_move_task(TaskHandle=handle_of("AAAAAAAAAAAAAAAA", arn("jobs-dlq")))
    assert error(caught) == ("ResourceNotFoundException", 404, "Task does not exist.")
    with pytest.raises(ClientError) as caught:
        api.cancel_message_move_task(TaskHandle=handle_of(str(uuid.uuid4()), arn("jobs-dlq")))
    assert error(caught) == ("ResourceNotFoundException", 404, "Task does not exist.")
    # A source queue that does not exist, in this account or any other: 404 naming SourceArn.
    for missing in (arn("missing"), f"arn:aws:sqs:{REGION}:210987654321:missing"):
        for task_id in ("AAAAAAAAAAAAAAAA", str(uuid.uuid4())):
            with pytest.raises(ClientError) as caught:
                api.cancel_message_move_task(TaskHandle=handle_of(task_id, missing))
            assert error(caught) == (
                "ResourceNotFoundException",
                404,
                "The resource that you specified for the SourceArn parameter doesn't exist.",
            )
    # A task that has ended cannot be cancelled: for a cancel, it no longer exists.
    handle = api.start_message_move_task(SourceArn=arn("jobs-dlq"))["TaskHandle"]
    wait_for_status(api, "jobs-dlq", {"COMPLETED"})
    with pytest.raises(ClientError) as caught:
        api.cancel_message_move_task(TaskHandle=handle)
    assert error(caught) == ("ResourceNotFoundException", 404, "Task does not exist.")


def test_move_task_errors(api: Any, core: smq.Client) -> None:
    core.create_queue("plain")
    dead_letters(core, 1)
    with pytest.raises(ClientError) as caught:
        api.start_message_move_task(SourceArn=arn("missing"))
    assert error(caught) == (
        "ResourceNotFoundException",
        404,
        "The resource that you specified for the SourceArn parameter doesn't exist.",
    )
    with pytest.raises(ClientError) as caught:
        api.start_message_move_task(SourceArn=arn("plain"))  # not a dead-letter queue
    assert error(caught) == (
        "InvalidParameterValue",
        400,
        "Source queue must be configured as a Dead Letter Queue.",
    )
    with pytest.raises(ClientError) as caught:
        api.start_message_move_task(SourceArn=arn("jobs-dlq"), DestinationArn=arn("missing"))
    assert error(caught) == (
        "ResourceNotFoundException",
        404,
        "The resource that you specified for the DestinationArn parameter doesn't exist.",
    )
    assert not api.list_message_move_tasks(SourceArn=arn("jobs-dlq")).get("Results")  # nothing started
    with pytest.raises(ClientError) as caught:
        api.start_message_move_task(SourceArn="arn:aws:sqs:eu-west-1:123456789012:plain")
    assert code(caught)[0] == "InvalidParameterValue"
    with pytest.raises(ClientError) as caught:
        api.list_message_move_tasks(SourceArn=arn("missing"))
    assert error(caught) == (
        "ResourceNotFoundException",
        404,
        "The resource that you specified for the SourceArn parameter doesn't exist.",
    )
    with pytest.raises(ClientError) as caught:
        api.list_message_move_tasks(SourceArn=arn("plain"), MaxResults=11)
    assert error(caught) == (
        "InvalidParameterValue",
        400,
        "Value 11 for parameter MaxResults is invalid. Reason: Must be between 1 and 10.",
    )
    with pytest.raises(ClientError) as caught:
        api.start_message_move_task(SourceArn=arn("jobs-dlq"), MaxNumberOfMessagesPerSecond=501)
    assert error(caught) == (
        "InvalidParameterValue",
        400,
        "Value 501 for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: Must be between 1 and 500.",
    )
