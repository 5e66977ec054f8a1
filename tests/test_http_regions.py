"""Regions over HTTP: the same queue name in two regions is two queues.

Two boto3 clients on one real `smq serve`, signing for different regions
(the server's own, us-east-1, and eu-west-1), each over the JSON and the
Query protocol. The server takes a request's region from its signature's
credential scope. The core client sees the queues of the server's region
under their bare names (today's keys) and the others under qualified names.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from botocore import UNSIGNED
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

import smq
from http_support import ACCOUNT, KEY_ID, REGION, SECRET, Server, json_client, query_client

AWAY = "eu-west-1"
MAKERS = {"json": json_client, "query": query_client}


@pytest.fixture(scope="module")
def regional(sqs_server: Any) -> dict[str, dict[str, Any]]:
    """Clients by protocol and region, made once per module."""
    return {
        protocol: {region: make(sqs_server.url, region=region) for region in (REGION, AWAY)}
        for protocol, make in MAKERS.items()
    }


@pytest.fixture(params=["json", "query"])
def protocol(request: pytest.FixtureRequest, core: smq.Client) -> str:
    """The protocol under test, on an emptied Redis."""
    return str(request.param)


@pytest.fixture
def home(regional: dict[str, dict[str, Any]], protocol: str) -> Any:
    """boto3 signing for the server's own region."""
    return regional[protocol][REGION]


@pytest.fixture
def away(regional: dict[str, dict[str, Any]], protocol: str) -> Any:
    """boto3 signing for another region."""
    return regional[protocol][AWAY]


def failure(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = caught.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def arn_of(api: Any, url: str) -> str:
    return str(api.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def visible(api: Any, url: str) -> int:
    reply = api.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(reply["Attributes"]["ApproximateNumberOfMessages"])


def bodies(api: Any, url: str, **options: Any) -> list[str]:
    reply = api.receive_message(QueueUrl=url, MaxNumberOfMessages=10, **options)
    return [message["Body"] for message in reply.get("Messages", [])]


def listed(api: Any, **options: Any) -> list[str]:
    return list(api.list_queues(**options).get("QueueUrls", []))


def test_the_same_name_in_two_regions_is_two_queues(home: Any, away: Any, sqs_server: Any) -> None:
    here = home.create_queue(QueueName="orders")["QueueUrl"]
    there = away.create_queue(QueueName="orders")["QueueUrl"]
    assert here == f"{sqs_server.url}/{ACCOUNT}/orders"
    assert there == f"{sqs_server.url}/{AWAY}/{ACCOUNT}/orders"
    assert arn_of(home, here) == f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"
    assert arn_of(away, there) == f"arn:aws:sqs:{AWAY}:{ACCOUNT}:orders"
    away.send_message(QueueUrl=there, MessageBody="for eu-west-1")
    assert visible(home, here) == 0
    assert bodies(home, here) == []
    assert bodies(away, there) == ["for eu-west-1"]


def test_the_core_sees_the_servers_region_under_todays_names(
    home: Any, away: Any, core: smq.Client, sqs_server: Any
) -> None:
    core.create_queue("legacy").send("written by the core")
    assert listed(home) == [f"{sqs_server.url}/{ACCOUNT}/legacy"]
    assert bodies(home, f"{sqs_server.url}/{ACCOUNT}/legacy") == ["written by the core"]
    assert listed(away) == []
    away.create_queue(QueueName="legacy")
    assert core.list_queues() == ["eu-west-1:000000000000:legacy", "legacy"]
    raw = core._redis
    assert raw.exists("smq:{legacy}:meta") and raw.exists("smq:{eu-west-1:000000000000:legacy}:meta")
    core.queue(f"{AWAY}:{ACCOUNT}:legacy").send("written by the core, for eu-west-1")
    assert bodies(away, "legacy") == ["written by the core, for eu-west-1"]


def test_list_queues_lists_the_requests_region_only(home: Any, away: Any, sqs_server: Any) -> None:
    for name in ("alpha", "beta"):
        home.create_queue(QueueName=name)
    for name in ("beta", "gamma"):
        away.create_queue(QueueName=name)
    base = sqs_server.url
    assert listed(home) == [f"{base}/{ACCOUNT}/alpha", f"{base}/{ACCOUNT}/beta"]
    assert listed(away) == [f"{base}/{AWAY}/{ACCOUNT}/beta", f"{base}/{AWAY}/{ACCOUNT}/gamma"]
    assert listed(away, QueueNamePrefix="g") == [f"{base}/{AWAY}/{ACCOUNT}/gamma"]
    assert listed(home, QueueNamePrefix="g") == []
    assert listed(away, QueueNamePrefix="eu") == []


def test_list_queues_pages_through_one_region_past_the_names_of_others(
    home: Any, away: Any, sqs_server: Any
) -> None:
    # In the registry, the core names of eu-west-1 ("eu-west-1:<account>:...")
    # sort between these two of us-east-1: a page must step over them.
    ours = ["eu-west-1-a", "eu-west-1_b", "zulu"]
    theirs = ["eu-west-1-a", "m1", "m2", "m3"]
    for name in ours:
        home.create_queue(QueueName=name)
    for name in theirs:
        away.create_queue(QueueName=name)

    def pages(api: Any, **options: Any) -> list[list[str]]:
        found, token = [], None
        while True:
            reply = api.list_queues(MaxResults=1, **options, **({"NextToken": token} if token else {}))
            found.append([url.rsplit("/", 1)[1] for url in reply.get("QueueUrls", [])])
            token = reply.get("NextToken")
            if token is None:
                return found

    assert pages(home) == [[name] for name in ours]
    assert pages(away) == [[name] for name in theirs]
    assert pages(home, QueueNamePrefix="eu") == [["eu-west-1-a"], ["eu-west-1_b"]]
    assert listed(home, MaxResults=2)[1].endswith(f"/{ACCOUNT}/eu-west-1_b")


def test_get_queue_url_answers_for_the_requests_region(home: Any, away: Any, sqs_server: Any) -> None:
    home.create_queue(QueueName="only-home")
    away.create_queue(QueueName="only-away")
    with pytest.raises(away.exceptions.QueueDoesNotExist):
        away.get_queue_url(QueueName="only-home")
    with pytest.raises(home.exceptions.QueueDoesNotExist):
        home.get_queue_url(QueueName="only-away")
    there = f"{sqs_server.url}/{AWAY}/{ACCOUNT}/only-away"
    assert away.get_queue_url(QueueName="only-away")["QueueUrl"] == there
    assert away.get_queue_url(QueueName="only-away", QueueOwnerAWSAccountId=ACCOUNT)["QueueUrl"] == there
    with pytest.raises(away.exceptions.QueueDoesNotExist):
        away.get_queue_url(QueueName="only-away", QueueOwnerAWSAccountId="123456789012")
    with pytest.raises(away.exceptions.QueueDoesNotExist):
        away.get_queue_url(QueueName=f"{AWAY}:{ACCOUNT}:only-away")  # a core name is no SQS name


def test_a_url_naming_a_region_addresses_it_whatever_the_signature(
    home: Any, away: Any, sqs_server: Any
) -> None:
    there = away.create_queue(QueueName="orders")["QueueUrl"]
    here = home.create_queue(QueueName="orders")["QueueUrl"]
    home.send_message(QueueUrl=there, MessageBody="sent from us-east-1 to eu-west-1")
    assert bodies(away, "orders") == ["sent from us-east-1 to eu-west-1"]
    # A URL without a region addresses the request's region.
    away.send_message(QueueUrl=here, MessageBody="sent by eu-west-1")
    assert bodies(home, here) == []
    assert bodies(away, there, VisibilityTimeout=0) == ["sent by eu-west-1"]
    # LocalStack's form: /queue/<region>/<account>/<name>.
    home.send_message(QueueUrl=f"{sqs_server.url}/queue/{AWAY}/{ACCOUNT}/orders", MessageBody="x")
    assert visible(away, there) == 2
    with pytest.raises(home.exceptions.QueueDoesNotExist):
        home.send_message(QueueUrl=f"{sqs_server.url}/{AWAY}/123456789012/orders", MessageBody="x")
    with pytest.raises(home.exceptions.QueueDoesNotExist):
        home.send_message(QueueUrl=f"{sqs_server.url}/EU/{ACCOUNT}/orders", MessageBody="x")


@pytest.mark.parametrize("name", ["orders", "orders.fifo"])
def test_a_bare_queue_name_is_a_queue_url_of_the_requests_region(home: Any, away: Any, name: str) -> None:
    fifo = name.endswith(".fifo")
    attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true"} if fifo else {}
    home.create_queue(QueueName=name, Attributes=attributes)
    away.create_queue(QueueName=name, Attributes=attributes)
    group = {"MessageGroupId": "g"} if fifo else {}
    for api, body in ((home, "home"), (away, "away")):
        api.send_message(QueueUrl=name, MessageBody=body, **group)
        assert visible(api, name) == 1
        (message,) = api.receive_message(QueueUrl=name)["Messages"]
        assert message["Body"] == body
        api.delete_message(QueueUrl=name, ReceiptHandle=message["ReceiptHandle"])
        reply = api.get_queue_attributes(
            QueueUrl=name,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )
        assert reply["Attributes"] == {
            "ApproximateNumberOfMessages": "0",
            "ApproximateNumberOfMessagesNotVisible": "0",
        }


def test_a_bare_name_of_no_queue_is_queue_does_not_exist(away: Any) -> None:
    with pytest.raises(away.exceptions.QueueDoesNotExist):
        away.send_message(QueueUrl="nowhere", MessageBody="x")
    with pytest.raises(away.exceptions.QueueDoesNotExist):
        away.send_message(QueueUrl="not a name", MessageBody="x")


def test_a_receipt_of_one_region_does_not_delete_in_the_other(home: Any, away: Any) -> None:
    for api in (home, away):
        api.create_queue(QueueName="orders")
        api.send_message(QueueUrl="orders", MessageBody="x")
    (message,) = away.receive_message(QueueUrl="orders")["Messages"]
    with pytest.raises(ClientError) as caught:
        home.delete_message(QueueUrl="orders", ReceiptHandle=message["ReceiptHandle"])
    assert failure(caught)[0] == "ReceiptHandleIsInvalid"


def test_dead_letters_and_their_redrive_stay_in_their_region(home: Any, away: Any, sqs_server: Any) -> None:
    dead = away.create_queue(QueueName="dead")["QueueUrl"]
    dead_arn = arn_of(away, dead)
    assert dead_arn == f"arn:aws:sqs:{AWAY}:{ACCOUNT}:dead"
    policy = json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": 1})
    work = away.create_queue(QueueName="work", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    home.create_queue(QueueName="work")
    home.create_queue(QueueName="dead")
    stored = away.get_queue_attributes(QueueUrl=work, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert json.loads(stored["RedrivePolicy"])["deadLetterTargetArn"] == dead_arn

    away.send_message(QueueUrl=work, MessageBody="poison")
    assert bodies(away, work, VisibilityTimeout=0) == ["poison"]
    assert bodies(away, work) == []  # its second receive dead-letters it
    assert visible(away, dead) == 1
    assert visible(home, "dead") == 0
    assert away.list_dead_letter_source_queues(QueueUrl=dead)["queueUrls"] == [work]
    assert home.list_dead_letter_source_queues(QueueUrl="dead").get("queueUrls", []) == []

    away.start_message_move_task(SourceArn=dead_arn)
    deadline = time.monotonic() + 10
    while visible(away, work) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    (task,) = away.list_message_move_tasks(SourceArn=dead_arn)["Results"]
    assert (task["SourceArn"], task["Status"]) == (dead_arn, "COMPLETED")
    assert bodies(away, work) == ["poison"]
    assert visible(home, "work") == 0


def test_a_move_task_moves_within_its_region_only(home: Any, away: Any) -> None:
    dead = away.create_queue(QueueName="dead")["QueueUrl"]
    dead_arn = arn_of(away, dead)
    policy = json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": 1})
    away.create_queue(QueueName="work", Attributes={"RedrivePolicy": policy})
    away.send_message(QueueUrl=dead, MessageBody="x")
    elsewhere = arn_of(home, home.create_queue(QueueName="elsewhere")["QueueUrl"])
    with pytest.raises(ClientError) as caught:
        away.start_message_move_task(SourceArn=dead_arn, DestinationArn=elsewhere)
    assert failure(caught) == ("InvalidParameterValue", 400)
    assert away.list_message_move_tasks(SourceArn=dead_arn).get("Results", []) == []
    # The ARNs name the region, not the signature: any client may start it.
    there = arn_of(away, away.create_queue(QueueName="elsewhere")["QueueUrl"])
    home.start_message_move_task(SourceArn=dead_arn, DestinationArn=there)
    deadline = time.monotonic() + 10
    while visible(away, "elsewhere") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert bodies(away, "elsewhere") == ["x"]
    assert visible(home, "elsewhere") == 0


def test_a_dead_letter_queue_in_another_region_is_refused(home: Any, away: Any) -> None:
    dead = home.create_queue(QueueName="dead")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": arn_of(home, dead), "maxReceiveCount": 3})
    with pytest.raises(ClientError) as caught:
        away.create_queue(QueueName="work", Attributes={"RedrivePolicy": policy})
    assert failure(caught) == ("InvalidParameterValue", 400)
    assert "same account and region" in caught.value.response["Error"]["Message"]
    away.create_queue(QueueName="work")
    with pytest.raises(ClientError) as caught:
        away.set_queue_attributes(QueueUrl="work", Attributes={"RedrivePolicy": policy})
    assert failure(caught) == ("InvalidParameterValue", 400)
    assert (
        listed(away)
        and "RedrivePolicy"
        not in away.get_queue_attributes(QueueUrl="work", AttributeNames=["All"])["Attributes"]
    )


def test_an_unsigned_request_acts_in_the_servers_region(
    protocol: str, away: Any, sqs_server: Any, core: smq.Client
) -> None:
    away.create_queue(QueueName="signed-away")
    unsigned = MAKERS[protocol](sqs_server.url, region=AWAY, signature_version=UNSIGNED)
    assert unsigned.create_queue(QueueName="plain")["QueueUrl"] == f"{sqs_server.url}/{ACCOUNT}/plain"
    assert listed(unsigned) == [f"{sqs_server.url}/{ACCOUNT}/plain"]
    assert core.queue_exists("plain")


def test_a_credential_scope_of_no_valid_region_is_refused(protocol: str, sqs_server: Any) -> None:
    odd = MAKERS[protocol](sqs_server.url, region="EU-West-1")
    with pytest.raises(ClientError) as caught:
        odd.list_queues()
    assert failure(caught) == ("SignatureDoesNotMatch", 403)


def test_a_presigned_url_acts_in_its_credentials_region(away: Any, sqs_server: Any) -> None:
    away.create_queue(QueueName="orders")
    request = AWSRequest(method="GET", url=f"{sqs_server.url}/", params={"Action": "ListQueues"})
    SigV4QueryAuth(Credentials(KEY_ID, SECRET), "sqs", AWAY, expires=300).add_auth(request)
    with urllib.request.urlopen(request.prepare().url) as response:
        text = response.read().decode()
    assert f"<QueueUrl>{sqs_server.url}/{AWAY}/{ACCOUNT}/orders</QueueUrl>" in text


def test_a_server_in_another_region_keeps_its_own_queues_under_bare_names(
    http_redis: Any, core: smq.Client, protocol: str
) -> None:
    server = Server(http_redis.url, "--no-auth", "--region", AWAY)
    try:
        local = MAKERS[protocol](server.url, region=AWAY)
        assert local.create_queue(QueueName="orders")["QueueUrl"] == f"{server.url}/{ACCOUNT}/orders"
        assert arn_of(local, "orders") == f"arn:aws:sqs:{AWAY}:{ACCOUNT}:orders"
        east = MAKERS[protocol](server.url, region=REGION)
        assert east.create_queue(QueueName="orders")["QueueUrl"] == f"{server.url}/{REGION}/{ACCOUNT}/orders"
        assert core.list_queues() == ["orders", f"{REGION}:{ACCOUNT}:orders"]
    finally:
        server.stop()


def test_errors_name_a_regional_queue_as_the_client_knows_it(away: Any) -> None:
    url = away.create_queue(QueueName="jobs")["QueueUrl"]
    away.purge_queue(QueueUrl=url)
    with pytest.raises(ClientError) as caught:
        away.purge_queue(QueueUrl=url)
    assert caught.value.response["Error"]["Message"] == (
        "Only one PurgeQueue operation on jobs is allowed every 60 seconds."
    )


def test_a_query_get_on_a_regional_queue_url_serves_queue_actions(away: Any, protocol: str) -> None:
    url = away.create_queue(QueueName="jobs")["QueueUrl"]
    away.send_message(QueueUrl=url, MessageBody="hello")
    with urllib.request.urlopen(f"{url}?Action=GetQueueAttributes&AttributeName.1=All", timeout=10) as reply:
        assert "<Name>ApproximateNumberOfMessages</Name><Value>1</Value>" in reply.read().decode()
    # As SQS: the other actions are answered there too, in the queue URL's region.
    with urllib.request.urlopen(f"{url}?Action=ListQueues", timeout=10) as reply:
        assert f"<QueueUrl>{url}</QueueUrl>" in reply.read().decode()
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{url}?Action=FooBar", timeout=10)
    assert "<Code>InvalidAction</Code>" in caught.value.read().decode()
