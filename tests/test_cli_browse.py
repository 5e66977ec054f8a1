"""`smq peek`, `smq dlq redrive` and `smq top` through click's CliRunner, on a real Redis."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

import smq
from smq.cli import _dlq, main
from smq.embedded import EmbeddedRedis

Smq = Callable[..., Result]


@pytest.fixture
def cli(redis_client: smq.Client, redis_server: EmbeddedRedis) -> Smq:
    """Runs `smq ARGS` on the fixture's (emptied) Redis, through SMQ_REDIS_URL."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None) -> Result:
        return runner.invoke(main, list(args), input=input, env={"SMQ_REDIS_URL": redis_server.url})

    return run


@pytest.fixture
def jobs(redis_client: smq.Client) -> smq.Queue:
    return redis_client.create_queue("jobs")


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def _dead_letter(client: smq.Client, source: str, count: int, dlq: str = "jobs-dlq") -> smq.Queue:
    """``count`` messages of queue ``source`` moved to ``dlq`` by a receive past maxReceiveCount 1."""
    if not client.queue_exists(dlq):
        client.create_queue(dlq)
    queue = client.create_queue(source, redrive_policy=smq.RedrivePolicy(dlq, 1))
    for start in range(0, count, 10):
        queue.send_batch(
            [smq.SendEntry(str(n), f"{source} {n}") for n in range(start, min(count, start + 10))]
        )
    while queue.receive(10, visibility_timeout=0):
        pass
    queue.receive(10)
    return client.get_queue(dlq)


# -- peek ---------------------------------------------------------------------------------------


def test_peek_all_shows_visible_in_flight_and_delayed_messages(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("held")
    jobs.send("ready")
    jobs.send("later", delay_seconds=120)
    (held,) = jobs.receive(1, visibility_timeout=300)
    done = cli("peek", "jobs", "--state", "all")
    assert done.exit_code == 0, done.output
    header, visible, in_flight, delayed = _rows(done.stdout)
    assert header == ["STATE", "ID", "AGE", "RECEIVES", "RECEIPT", "EXPIRES", "DUE", "ORIGIN", "BODY"]
    assert visible[0] == "visible" and visible[3:] == ["0", "-", "-", "-", "-", "ready"]
    assert in_flight[:2] == ["in-flight", held.message_id] and in_flight[3:5] == ["1", held.receipt_handle]
    assert in_flight[5] == "in" and in_flight[6] in ("4m59s", "5m00s") and in_flight[7:] == ["-", "-", "held"]
    assert delayed[0] == "delayed" and delayed[5:7] == ["-", "in"] and delayed[7] in ("1m59s", "2m00s")


def test_peek_json_of_in_flight_names_the_receipt_that_holds_each_message(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("a", attributes={"kind": "x"})
    (message,) = jobs.receive(1)
    done = cli("peek", "jobs", "--state", "in-flight", "--json")
    (peeked,) = json.loads(done.stdout)
    assert peeked["receipt_handle"] == message.receipt_handle and peeked["state"] == "in_flight"
    assert peeked["receive_count"] == 1 and peeked["visible_at"] > peeked["received_at"]
    assert peeked["attributes"] == {"kind": {"data_type": "String", "value": "x"}}
    assert jobs.delete(peeked["receipt_handle"])


def test_peek_changes_nothing(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("a")
    before = jobs.attributes()
    assert cli("peek", "jobs").exit_code == 0
    after = jobs.attributes()
    assert (after.visible, after.in_flight, dict(after.counters)) == (1, 0, dict(before.counters))
    (message,) = jobs.receive(1)
    assert message.receive_count == 1


def test_peek_shows_an_in_flight_message_whose_timeout_ran_out_as_expired(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("a")
    jobs.receive(1, visibility_timeout=1)
    time.sleep(1.1)
    (_, row) = _rows(cli("peek", "jobs", "--state", "in-flight").stdout)
    assert row[5] == "expired"


def test_peek_limit_and_offset_page_through_the_messages(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send_batch([smq.SendEntry(str(n), f"m{n}") for n in range(5)])
    page = json.loads(cli("peek", "jobs", "--limit", "2", "--offset", "2", "--json").stdout)
    assert [m["body"] for m in page] == ["m2", "m3"]


def test_peek_of_nothing_says_so_on_stderr(cli: Smq, jobs: smq.Queue) -> None:
    done = cli("peek", "jobs", "--state", "delayed")
    assert (done.exit_code, done.stdout, done.stderr) == (0, "", "no delayed messages\n")


def test_peek_refuses_an_unknown_state_and_a_too_large_limit(cli: Smq, jobs: smq.Queue) -> None:
    assert cli("peek", "jobs", "--state", "in_flight").exit_code == 2
    assert cli("peek", "jobs", "--limit", "101").exit_code == 2


def test_peek_names_the_queue_a_dead_letter_came_from(cli: Smq, redis_client: smq.Client) -> None:
    _dead_letter(redis_client, "jobs", 1)
    (peeked,) = json.loads(cli("peek", "jobs-dlq", "--json").stdout)
    assert peeked["origin"] == "jobs"


# -- dlq redrive --------------------------------------------------------------------------------


def test_dlq_redrive_dry_run_counts_messages_per_origin_and_moves_nothing(
    cli: Smq, redis_client: smq.Client
) -> None:
    _dead_letter(redis_client, "jobs", 3)
    dlq = _dead_letter(redis_client, "emails", 2)
    dlq.send("sent to the dead-letter queue itself")
    done = cli("dlq", "redrive", "jobs-dlq", "--dry-run")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0] == "would move 5 messages out of 'jobs-dlq' (dry run: nothing moved)"
    assert _rows(done.stdout)[1:4] == [["TO", "QUEUE", "MESSAGES"], ["emails", "2"], ["jobs", "3"]]
    assert lines[4].startswith("1 messages came from no queue and would stay")
    assert dlq.attributes().visible == 6


def test_dlq_redrive_dry_run_with_limit_and_to_counts_what_would_go_there(
    cli: Smq, redis_client: smq.Client
) -> None:
    _dead_letter(redis_client, "jobs", 5)
    redis_client.create_queue("retry")
    reply = json.loads(
        cli("dlq", "redrive", "jobs-dlq", "--dry-run", "--limit", "4", "--to", "retry", "--json").stdout
    )
    assert reply["would_move"] == 4 and reply["destinations"] == {"retry": 4} and reply["complete"] is True


def test_dlq_redrive_dry_run_says_it_looked_only_at_the_first_messages(
    cli: Smq, redis_client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_dlq, "_DRY_RUN_REACH", 200)  # 10,000 in use: 200 keeps the test fast
    _dead_letter(redis_client, "jobs", 250)
    done = cli("dlq", "redrive", "jobs-dlq", "--dry-run")
    assert done.stdout.splitlines()[0] == "would move 200 messages out of 'jobs-dlq' (dry run: nothing moved)"
    assert "looked only at the first 200 of 250 messages" in done.stdout


def test_dlq_redrive_moves_messages_back_to_their_queues(cli: Smq, redis_client: smq.Client) -> None:
    dlq = _dead_letter(redis_client, "jobs", 3)
    done = cli("dlq", "redrive", "jobs-dlq")
    assert (done.exit_code, done.stdout) == (0, "moved 3 messages out of 'jobs-dlq'\n")
    assert dlq.attributes().visible == 0
    assert redis_client.get_queue("jobs").attributes().visible == 3


def test_dlq_redrive_with_limit_moves_at_most_that_many(cli: Smq, redis_client: smq.Client) -> None:
    dlq = _dead_letter(redis_client, "jobs", 5)
    reply = json.loads(cli("dlq", "redrive", "jobs-dlq", "--limit", "2", "--json").stdout)
    assert reply == {"queue": "jobs-dlq", "moved": 2}
    assert dlq.attributes().visible == 3


def test_dlq_redrive_to_another_queue_moves_everything_there(cli: Smq, redis_client: smq.Client) -> None:
    _dead_letter(redis_client, "jobs", 2)
    retry = redis_client.create_queue("retry")
    assert cli("dlq", "redrive", "jobs-dlq", "--to", "retry").exit_code == 0
    assert retry.attributes().visible == 2


def test_dlq_redrive_to_a_missing_queue_fails_with_one_line(cli: Smq, redis_client: smq.Client) -> None:
    _dead_letter(redis_client, "jobs", 1)
    for extra in ([], ["--dry-run"]):
        done = cli("dlq", "redrive", "jobs-dlq", "--to", "nope", *extra)
        assert (done.exit_code, done.stderr) == (1, "smq: queue 'nope' does not exist\n")


# -- top ----------------------------------------------------------------------------------------


def test_top_prints_a_table_per_view_with_counts(cli: Smq, jobs: smq.Queue) -> None:
    jobs.send("a")
    done = cli("top", "--iterations", "2", "--interval", "0.1")
    assert done.exit_code == 0, done.output
    views = done.stdout.split("\n\n")
    assert len(views) == 2
    for view in views:
        title, header, row = view.strip().splitlines()
        assert title.startswith("smq top ") and title.endswith("1 queues, every 0.1s")
        assert header.split() == [
            "QUEUE",
            "VISIBLE",
            "IN",
            "FLIGHT",
            "DELAYED",
            "OLDEST",
            "SENT/S",
            "RECEIVED/S",
            "DELETED/S",
        ]
    assert _rows(views[0])[2][:4] == ["jobs", "1", "0", "0"] and _rows(views[0])[2][5:] == ["-", "-", "-"]
    assert _rows(views[1])[2][5:] == ["0.0", "0.0", "0.0"]


def test_top_rates_come_from_counter_deltas(cli: Smq, jobs: smq.Queue) -> None:
    def work() -> None:
        time.sleep(0.2)
        jobs.send_batch([smq.SendEntry(str(n), "x") for n in range(10)])
        for message in jobs.receive(4):
            jobs.delete(message)

    worker = threading.Thread(target=work)
    worker.start()
    done = cli("top", "--iterations", "2", "--interval", "1", "--json")
    worker.join()
    first, second = (json.loads(line) for line in done.stdout.splitlines())
    assert first["queues"][0]["sent_per_second"] is None
    (row,) = second["queues"]
    assert row["name"] == "jobs" and (row["visible"], row["in_flight"]) == (6, 0)
    assert 5 < row["sent_per_second"] <= 10.5 and 2 < row["received_per_second"] <= 4.2
    assert row["deleted_per_second"] == row["received_per_second"]


def test_top_with_a_prefix_watches_only_matching_queues(cli: Smq, redis_client: smq.Client) -> None:
    redis_client.create_queue("jobs")
    redis_client.create_queue("emails")
    done = cli("top", "--iterations", "1", "--prefix", "em", "--json")
    assert [q["name"] for q in json.loads(done.stdout)["queues"]] == ["emails"]


def test_top_ends_with_status_0_on_ctrl_c(cli: Smq, jobs: smq.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", interrupt)
    done = cli("top")
    assert done.exit_code == 0 and done.stdout.count("smq top") == 1
