"""Reply shapes as SQS gives them, on both protocols: batch replies without an
empty Successful or Failed list, and the encryption attributes of
GetQueueAttributes."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def url(api: Any) -> str:
    return str(api.create_queue(QueueName="jobs")["QueueUrl"])


def attributes_of(api: Any, url: str, *names: str) -> dict[str, str]:
    return dict(
        api.get_queue_attributes(QueueUrl=url, AttributeNames=list(names) or ["All"]).get("Attributes", {})
    )


def test_batches_whose_entries_all_succeed_have_no_failed(api: Any, url: str) -> None:
    sent = api.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "one"}, {"Id": "b", "MessageBody": "two"}]
    )
    assert "Failed" not in sent and len(sent["Successful"]) == 2
    messages = api.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert len(messages) == 2
    entries = [{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)]
    changed = api.change_message_visibility_batch(
        QueueUrl=url, Entries=[{**entry, "VisibilityTimeout": 60} for entry in entries]
    )
    assert "Failed" not in changed and len(changed["Successful"]) == 2
    deleted = api.delete_message_batch(QueueUrl=url, Entries=entries)
    assert "Failed" not in deleted and len(deleted["Successful"]) == 2


def test_batches_whose_entries_all_fail_have_no_successful(api: Any, url: str) -> None:
    sent = api.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "\x00"}])
    assert "Successful" not in sent and [f["Id"] for f in sent["Failed"]] == ["a"]
    bad = [{"Id": "a", "ReceiptHandle": "not-a-receipt"}]
    changed = api.change_message_visibility_batch(QueueUrl=url, Entries=[{**bad[0], "VisibilityTimeout": 5}])
    assert "Successful" not in changed and [f["Id"] for f in changed["Failed"]] == ["a"]
    deleted = api.delete_message_batch(QueueUrl=url, Entries=bad)
    assert "Successful" not in deleted and [f["Id"] for f in deleted["Failed"]] == ["a"]


def test_a_new_queue_does_not_claim_encryption_smq_does_not_do(api: Any, url: str) -> None:
    # SQS encrypts a new queue with SQS-managed keys and says "true"; smq keeps bodies in
    # Redis in clear, so it says "false" (docs/sqs-differences.md).
    everything = attributes_of(api, url)
    assert everything["SqsManagedSseEnabled"] == "false"
    assert "KmsDataKeyReusePeriodSeconds" not in everything and "KmsMasterKeyId" not in everything
    assert attributes_of(api, url, "SqsManagedSseEnabled") == {"SqsManagedSseEnabled": "false"}
    assert attributes_of(api, url, "KmsDataKeyReusePeriodSeconds") == {}


def test_sqs_managed_encryption_turned_off_is_false(api: Any, url: str) -> None:
    api.set_queue_attributes(QueueUrl=url, Attributes={"SqsManagedSseEnabled": "false"})
    assert attributes_of(api, url)["SqsManagedSseEnabled"] == "false"
    api.set_queue_attributes(QueueUrl=url, Attributes={"SqsManagedSseEnabled": "true"})
    assert attributes_of(api, url)["SqsManagedSseEnabled"] == "true"


def test_a_kms_key_reports_its_reuse_period_and_no_sqs_managed_encryption(api: Any) -> None:
    url = api.create_queue(QueueName="secret", Attributes={"KmsMasterKeyId": "alias/aws/sqs"})["QueueUrl"]
    everything = attributes_of(api, url)
    assert (everything["KmsMasterKeyId"], everything["SqsManagedSseEnabled"]) == ("alias/aws/sqs", "false")
    assert everything["KmsDataKeyReusePeriodSeconds"] == "300"  # SQS's default
    api.set_queue_attributes(QueueUrl=url, Attributes={"KmsDataKeyReusePeriodSeconds": "600"})
    assert attributes_of(api, url, "KmsDataKeyReusePeriodSeconds") == {"KmsDataKeyReusePeriodSeconds": "600"}
    api.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": ""})  # no KMS key any more
    everything = attributes_of(api, url)
    assert everything["SqsManagedSseEnabled"] == "false"  # SQS: "true"; smq encrypts nothing
    assert "KmsDataKeyReusePeriodSeconds" not in everything
