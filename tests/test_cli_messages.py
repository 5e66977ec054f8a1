"""`smq send`, `receive`, `delete`, `change-visibility` through click's CliRunner, on a real Redis."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import smq
from smq.cli import main
from smq.core._ids import message_id as shown_id
from smq.embedded import EmbeddedRedis

Smq = Callable[..., Result]


@pytest.fixture
def cli(redis_client: smq.Client, redis_server: EmbeddedRedis) -> Smq:
    """Runs `smq ARGS` on the fixture's (emptied) Redis, through SMQ_REDIS_URL."""
    runner = CliRunner()

    def run(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None) -> Result:
        return runner.invoke(
            main, list(args), input=input, env={"SMQ_REDIS_URL": redis_server.url, **(env or {})}
        )

    return run


@pytest.fixture
def jobs(redis_client: smq.Client) -> smq.Queue:
    return redis_client.create_queue("jobs")


def test_send_a_body_prints_its_message_id(cli: Smq, jobs: smq.Queue) -> None:
    done = cli("send", "jobs", "resize image 42")
    assert done.exit_code == 0, done.output
    (message,) = jobs.receive(1)
    assert done.stdout == message.message_id + "\n" and message.body == "resize image 42"


def test_send_json_gives_the_id_and_the_md5_of_the_body(cli: Smq, jobs: smq.Queue) -> None:
    reply = json.loads(cli("send", "jobs", "hello", "--json").stdout)
    assert reply == {"message_id": reply["message_id"], "md5_of_body": "5d41402abc4b2a76b9719d911017c592"}


def test_send_with_delay_and_attributes_stores_both(cli: Smq, jobs: smq.Queue) -> None:
    done = cli("send", "jobs", "later", "--delay", "60", "--attribute", "kind=resize", "--attribute", "n=2")
    assert done.exit_code == 0, done.output
    info = jobs.attributes()
    assert (info.visible, info.delayed) == (0, 1)
    (peeked,) = jobs.peek("delayed")
    assert peeked.attributes == {
        "kind": smq.MessageAttribute("String", "resize"),
        "n": smq.MessageAttribute("String", "2"),
    }


def test_send_an_attribute_without_equals_sign_is_a_usage_error(cli: Smq, jobs: smq.Queue) -> None:
    done = cli("send", "jobs", "x", "--attribute", "kind")
    assert done.exit_code == 2 and "NAME=VALUE" in done.stderr


def test_send_a_file_sends_its_text_as_one_message(cli: Smq, jobs: smq.Queue, tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text('{"image": 42}\n{"second": "line"}\n')
    assert cli("send", "jobs", "--file", str(path)).exit_code == 0
    (message,) = jobs.receive(10)
    assert message.body == '{"image": 42}\n{"second": "line"}\n'


def test_send_a_file_that_is_not_utf8_fails_with_one_line(cli: Smq, jobs: smq.Queue, tmp_path: Path) -> None:
    path = tmp_path / "image.bin"
    path.write_bytes(b"\xff\xfe\x00")
    done = cli("send", "jobs", "--file", str(path))
    assert done.exit_code == 1 and done.stderr == f"smq: {path}: not UTF-8 text (a message body is text)\n"


def test_send_lines_sends_each_line_of_stdin_in_batches_of_ten(cli: Smq, jobs: smq.Queue) -> None:
    lines = [f"job {n}" for n in range(1, 26)]
    done = cli(
        "send", "jobs", "--lines", "--json", input="\n".join(lines[:12]) + "\n\n" + "\n".join(lines[12:])
    )
    assert done.exit_code == 0, done.output
    reply = json.loads(done.stdout)
    assert reply["failed"] == []
    # The empty line 13 is skipped; line numbers are those of stdin.
    assert [entry["line"] for entry in reply["sent"]] == [*range(1, 13), *range(14, 27)]
    assert jobs.attributes().counters["sent"] == 25
    received = []
    while batch := jobs.receive(10):
        received += batch
    assert sorted(m.body for m in received) == sorted(lines)
    ids = {entry["message_id"] for entry in reply["sent"]}
    assert ids == {m.message_id for m in received}


def test_send_dash_reads_stdin_like_lines_and_reports_a_count(cli: Smq, jobs: smq.Queue) -> None:
    done = cli("send", "jobs", "-", input="a\r\nb\r\nc")
    assert (done.exit_code, done.stdout) == (0, "sent 3 messages\n")
    assert sorted(m.body for m in jobs.receive(10)) == ["a", "b", "c"]


def test_send_lines_names_the_lines_not_sent_and_exits_1(cli: Smq, redis_client: smq.Client) -> None:
    small = redis_client.create_queue("small", maximum_message_size=1024)
    text = "ok 1\n" + "x" * 2000 + "\nok 3\n\ufffe bad\nok 5\n"
    done = cli("send", "small", "--lines", "--json", input=text)
    assert done.exit_code == 1
    reply = json.loads(done.stdout)
    assert [entry["line"] for entry in reply["sent"]] == [1, 3, 5]
    assert [(entry["line"], entry["code"]) for entry in reply["failed"]] == [
        (2, "MessageTooLong"),
        (4, "InvalidMessageContents"),
    ]
    errors = done.stderr.splitlines()
    assert errors[0].startswith("smq: line 2 not sent: MessageTooLong: ")
    assert errors[1].startswith("smq: line 4 not sent: InvalidMessageContents: ")
    assert errors[2] == "smq: 2 of 5 lines not sent (lines 2, 4)"
    assert small.attributes().visible == 3


def test_send_lines_of_a_batch_over_1_mib_are_sent_one_by_one(cli: Smq, jobs: smq.Queue) -> None:
    lines = [str(n) * 200_000 for n in range(1, 7)]  # 1.2 MB in one batch of six
    done = cli("send", "jobs", "--lines", input="\n".join(lines) + "\n")
    assert (done.exit_code, done.stdout) == (0, "sent 6 messages\n"), done.stderr
    assert jobs.attributes().visible == 6


def test_send_needs_exactly_one_of_body_file_and_lines(cli: Smq, jobs: smq.Queue, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    for args in ([], ["body", "--lines"], ["body", "--file", str(tmp_path / "f")]):
        done = cli("send", "jobs", *args)
        assert done.exit_code == 2 and "give one of" in done.stderr, args


def test_send_to_a_missing_queue_fails_with_one_line(cli: Smq) -> None:
    done = cli("send", "nope", "x")
    assert (done.exit_code, done.stderr) == (1, "smq: queue 'nope' does not exist\n")


def test_send_an_empty_body_fails_with_one_line(cli: Smq, jobs: smq.Queue) -> None:
    done = cli("send", "jobs", "")
    assert (done.exit_code, done.stderr) == (1, "smq: message body must not be empty\n")


def test_receive_prints_id_receipt_receive_count_and_body(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("first\nline-two")
    done = cli("receive", "jobs")
    assert done.exit_code == 0, done.output
    header, row = done.stdout.splitlines()
    assert header.split() == ["ID", "RECEIPT", "RECEIVES", "BODY"]
    message_id, receipt, count, body = row.split()
    assert (count, body) == ("1", "first\\nline-two")
    assert jobs.attributes().in_flight == 1
    # The receipt carries the stored id, of which the message id is the UUID form.
    assert jobs.delete(receipt) and shown_id(receipt.split(":")[1]) == message_id


def test_receive_json_gives_whole_messages_and_delete_removes_them(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("a", attributes={"kind": "x", "raw": b"\x00\x01"})
    jobs.send("b")
    done = cli("receive", "jobs", "--max-messages", "10", "--json", "--delete")
    assert done.exit_code == 0, done.output
    messages = json.loads(done.stdout)
    assert sorted(m["body"] for m in messages) == ["a", "b"]
    first = next(m for m in messages if m["body"] == "a")
    assert first["attributes"] == {
        "kind": {"data_type": "String", "value": "x"},
        "raw": {"data_type": "Binary", "value": "AAE="},
    }
    assert first["receive_count"] == 1 and first["receipt_handle"].startswith("jobs:")
    info = jobs.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 2)


def test_receive_with_a_visibility_timeout_of_zero_leaves_the_message_visible(
    cli: Smq, jobs: smq.Queue
) -> None:
    jobs.send("a")
    assert cli("receive", "jobs", "--visibility-timeout", "0").exit_code == 0
    assert jobs.attributes().visible == 1


def test_receive_of_an_empty_queue_says_so_on_stderr(cli: Smq, jobs: smq.Queue) -> None:
    done = cli("receive", "jobs", "--wait-time", "0")
    assert (done.exit_code, done.stdout, done.stderr) == (0, "", "no messages\n")
    assert json.loads(cli("receive", "jobs", "--json").stdout) == []


def test_receive_more_than_ten_messages_is_a_usage_error(cli: Smq, jobs: smq.Queue) -> None:
    done = cli("receive", "jobs", "--max-messages", "11")
    assert done.exit_code == 2 and "1<=x<=10" in done.stderr


def test_delete_by_receipts_deletes_and_reports_a_stale_receipt(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("a")
    (first,) = jobs.receive(1, visibility_timeout=0)
    (again,) = jobs.receive(1)
    jobs.send("b")
    (second,) = jobs.receive(1)
    done = cli("delete", "jobs", first.receipt_handle, second.receipt_handle, "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == [
        {"receipt_handle": first.receipt_handle, "deleted": False, "error": None},
        {"receipt_handle": second.receipt_handle, "deleted": True, "error": None},
    ]
    table = cli("delete", "jobs", again.receipt_handle).stdout
    assert table.splitlines()[1].split() == [again.receipt_handle, "deleted"]


def test_delete_with_a_receipt_smq_did_not_issue_exits_1(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("a")
    (message,) = jobs.receive(1)
    done = cli("delete", "jobs", "not-a-receipt", message.receipt_handle)
    assert done.exit_code == 1
    assert "nothing deleted" not in done.stdout and message.receipt_handle in done.stdout
    assert done.stderr == (
        'smq: 1 of 2 receipts refused: The input receipt handle "not-a-receipt" '
        "is not a valid receipt handle.\n"
    )
    assert jobs.attributes().in_flight == 0


def test_change_visibility_zero_makes_the_message_visible_again(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("a")
    (message,) = jobs.receive(1)
    done = cli("change-visibility", "jobs", message.receipt_handle, "0")
    assert (done.exit_code, done.stdout) == (0, "visible again now\n")
    assert jobs.attributes().visible == 1


def test_change_visibility_extends_the_timeout(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("a")
    (message,) = jobs.receive(1, visibility_timeout=1)
    done = cli("change-visibility", "jobs", message.receipt_handle, "600", "--json")
    assert json.loads(done.stdout) == {"receipt_handle": message.receipt_handle, "visibility_timeout": 600}
    (peeked,) = jobs.peek("in_flight")
    assert peeked.visible_at is not None and peeked.visible_at - peeked.sent_at > 500


def test_change_visibility_with_a_stale_receipt_fails_with_one_line(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("a")
    (old,) = jobs.receive(1, visibility_timeout=0)
    jobs.receive(1)
    done = cli("change-visibility", "jobs", old.receipt_handle, "10")
    assert done.exit_code == 1
    assert done.stderr == "smq: receipt is stale: the message was received again since\n"


def test_send_lines_of_more_than_1_mib_each_are_named_as_not_sent(cli: Smq, jobs: smq.Queue) -> None:
    done = cli("send", "jobs", "--lines", "--json", input="small\n" + "x" * 1_100_000 + "\nsmall too\n")
    assert done.exit_code == 1
    reply = json.loads(done.stdout)
    assert [s["line"] for s in reply["sent"]] == [1, 3]
    assert [(f["line"], f["code"]) for f in reply["failed"]] == [(2, "BatchRequestTooLong")]


@pytest.mark.parametrize(
    ("error", "unknown", "unsent"),
    [
        (smq.OutcomeUnknown("connection lost"), list(range(11, 21)), []),
        (smq.BackendError("refused"), [], list(range(11, 21))),
    ],
)
def test_send_lines_stopped_by_redis_names_lines_sent_unknown_and_not_sent(
    cli: Smq,
    jobs: smq.Queue,
    monkeypatch: pytest.MonkeyPatch,
    error: smq.SmqError,
    unknown: list[int],
    unsent: list[int],
) -> None:
    real = smq.Queue.send_batch
    calls = []

    def failing_second_call(self: smq.Queue, entries: list[smq.SendEntry]) -> object:
        calls.append(entries)
        if len(calls) == 2:
            raise error
        return real(self, entries)

    monkeypatch.setattr(smq.Queue, "send_batch", failing_second_call)
    done = cli("send", "jobs", "--lines", "--json", input="".join(f"line {n}\n" for n in range(1, 31)))
    assert done.exit_code == 1
    reply = json.loads(done.stdout)
    assert [s["line"] for s in reply["sent"]] == list(range(1, 11))
    assert (reply["outcome_unknown"], reply["not_sent"], reply["not_read_after"]) == (unknown, unsent, 20)
    (line,) = done.stderr.splitlines()
    if unknown:
        assert line == (
            "smq: stopped: connection lost; lines 11-20 may or may not have been sent; "
            "no line after line 20 was sent"
        )
    else:
        assert line == "smq: stopped: refused; lines 11-20 were not sent, nor any after line 20"
    assert jobs.attributes().visible == 10
