"""The worker runner in-process on a real Redis: leases, heartbeat batches, metrics, errors."""

from __future__ import annotations

import logging
import queue as queues
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

import smq
from smq.cli import main
from smq.embedded import EmbeddedCluster, EmbeddedRedis
from smq.worker import load_handler
from worker_support import Running, wait_for


class CountingQueue(smq.Queue):
    """A real queue that also notes the size of each visibility batch the worker sends."""

    __slots__ = ("batches",)

    def __init__(self, client: smq.Client, name: str) -> None:
        super().__init__(client, name)
        self.batches: list[list[int]] = []

    def change_visibility_batch(self, entries: Sequence[smq.ChangeEntry]) -> smq.BatchResult[str]:
        self.batches.append([entry.visibility_timeout for entry in entries])
        return super().change_visibility_batch(entries)


def _metric(worker: smq.Worker, name: str, **labels: str) -> float:
    value = worker.metrics.registry.get_sample_value(name, {"queue": worker.queue.name, **labels})
    return value or 0.0


def test_a_stale_receipt_tells_the_handler_and_the_worker_never_deletes(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs", visibility_timeout=2)
    jobs.send("work")
    handed: queues.Queue[smq.Job] = queues.Queue()
    finished = threading.Event()

    def handle(job: smq.Job) -> None:
        handed.put(job)
        job.wait_lost(20)
        finished.set()
        job.raise_if_lost()

    worker = smq.Worker(redis_client, "jobs", handle, config=smq.WorkerConfig(prefetch=0))
    running(worker)
    job = handed.get(timeout=10)
    # Another consumer takes the message: the worker's receipt is stale from now on.
    jobs.change_visibility(job.message, 0)
    (taken,) = jobs.receive(1, visibility_timeout=60)
    assert taken.message_id == job.message_id
    assert finished.wait(10)
    assert job.lease_lost and "stale receipt" in job.lost_reason
    with pytest.raises(smq.LeaseLost):
        job.raise_if_lost()
    wait_for(lambda: _metric(worker, "smq_worker_messages_total", outcome="lost") == 1, 5, "the lost outcome")
    assert _metric(worker, "smq_worker_lost_leases_total") == 1
    time.sleep(0.5)  # a delete would have been sent by now
    assert jobs.attributes().counters.get("deleted", 0) == 0
    assert jobs.delete(taken)  # the new holder's receipt still deletes: the worker left it alone


def test_the_heartbeat_extends_held_messages_in_batches_of_ten(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    redis_client.create_queue("jobs", visibility_timeout=2)
    jobs = CountingQueue(redis_client, "jobs")
    for i in range(10):
        jobs.send(str(i))
    done: list[str] = []

    def handle(job: smq.Job) -> None:
        time.sleep(3.5)
        done.append(job.body)

    worker = smq.Worker(redis_client, jobs, handle, config=smq.WorkerConfig(concurrency=5, prefetch=5))
    run = running(worker)
    wait_for(lambda: len(done) == 10, 20, "ten messages")  # two rounds of five: about 7 s
    run.stop()
    info = jobs.attributes()
    assert info.counters.get("visibility_expired", 0) == 0
    assert info.counters["deleted"] == 10
    sizes = [len(batch) for batch in jobs.batches]
    assert max(sizes) == 10  # all ten held messages in one call, running or waiting
    assert sum(sizes) == info.counters["visibility_changed"]
    assert len(jobs.batches) <= 8


def test_the_heartbeat_stops_at_the_ceiling_with_a_log_line_and_a_metric(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running], caplog: pytest.LogCaptureFixture
) -> None:
    jobs = redis_client.create_queue("jobs", visibility_timeout=2)
    jobs.send("long")
    release = threading.Event()
    worker = smq.Worker(
        redis_client, "jobs", lambda job: release.wait(30), config=smq.WorkerConfig(prefetch=0)
    )
    worker._ceiling = 8.5  # seconds after the receive, less the 5 s margin: 3.5 s
    with caplog.at_level(logging.WARNING, logger="smq.worker"):
        running(worker)
        wait_for(lambda: _metric(worker, "smq_worker_visibility_ceiling_reached_total") == 1, 10, "the cap")
        # No longer extended: it comes back to other consumers while the handler still runs.
        again = wait_for(lambda: jobs.receive(1), 10, "the message to come back")
    release.set()
    assert again[0].receive_count == 2
    assert any("12-hour visibility ceiling" in record.getMessage() for record in caplog.records)
    assert _metric(worker, "smq_worker_visibility_extensions_total") >= 1


def test_metrics_are_served_for_prometheus(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs")
    for body in ("ok", "ok", "fail", "hold"):
        jobs.send(body)
    release = threading.Event()

    def handle(job: smq.Job) -> None:
        if job.body == "fail":
            raise ValueError("no")
        if job.body == "hold":
            release.wait(30)

    config = smq.WorkerConfig(concurrency=2, metrics_port=0, metrics_host="127.0.0.1", backoff=60)
    worker = smq.Worker(redis_client, "jobs", handle, config=config)
    run = running(worker)
    wait_for(lambda: _metric(worker, "smq_worker_processing_seconds_count") == 3, 10, "three messages")
    assert worker.metrics_url is not None
    with urllib.request.urlopen(worker.metrics_url, timeout=10) as response:
        text = response.read().decode()
    samples = {
        (sample.name, sample.labels.get("outcome", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("queue") == "jobs"
    }
    assert samples[("smq_worker_messages_total", "succeeded")] == 2
    assert samples[("smq_worker_messages_total", "failed")] == 1
    assert samples[("smq_worker_processing_seconds_count", "")] == 3
    assert samples[("smq_worker_messages_in_flight", "")] == 1  # "hold" (the failed one is back in the queue)
    assert samples[("smq_worker_handlers_running", "")] == 1
    assert samples[("smq_worker_lost_leases_total", "")] == 0
    assert ("smq_worker_visibility_extensions_total", "") in samples
    release.set()
    run.stop()
    assert worker.metrics_url is None


def test_a_worker_can_be_stopped_from_another_thread_while_it_long_polls(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    redis_client.create_queue("jobs")
    run = running(smq.Worker(redis_client, "jobs", lambda job: None))
    time.sleep(0.3)  # in its 20 s long poll by now
    stopped = time.monotonic()
    run.stop()
    assert time.monotonic() - stopped < 2


def test_the_decorator_registers_the_handler(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs")
    jobs.send("hello")
    worker = smq.Worker(redis_client, "jobs")
    seen: list[str] = []

    @worker.handler
    def handle(job: smq.Job) -> None:
        seen.append(job.body)

    running(worker)
    wait_for(lambda: seen == ["hello"], 10, "the message")


def test_run_refuses_a_missing_queue_a_zero_timeout_and_no_handler(redis_client: smq.Client) -> None:
    with pytest.raises(smq.QueueDoesNotExist):
        smq.Worker(redis_client, "nope", lambda job: None).run(install_signal_handlers=False)
    redis_client.create_queue("instant", visibility_timeout=0)
    with pytest.raises(smq.InvalidParameter, match="visibility timeout of 0"):
        smq.Worker(redis_client, "instant", lambda job: None).run(install_signal_handlers=False)
    with pytest.raises(smq.InvalidParameter, match="no handler"):
        smq.Worker(redis_client, "instant").run(install_signal_handlers=False)


def test_worker_config_checks_its_values_and_doubles_the_backoff() -> None:
    config = smq.WorkerConfig(concurrency=4, backoff=2, max_backoff=10)
    assert config.max_held == 8
    assert [config.retry_delay(n) for n in (1, 2, 3, 4, 50)] == [2, 4, 8, 10, 10]
    assert smq.WorkerConfig(concurrency=2, prefetch=0).max_held == 2
    assert smq.WorkerConfig(backoff=0).retry_delay(5) == 0
    for bad in ({"concurrency": 0}, {"visibility_timeout": 0}, {"visibility_timeout": 43201},
                {"wait_time_seconds": 21}, {"grace_period": -1}, {"prefetch": -1}):  # fmt: skip
        with pytest.raises(smq.InvalidParameter):
            smq.WorkerConfig(**bad)  # type: ignore[arg-type]


def test_load_handler_names_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tasks_here.py").write_text("def handle(job):\n    pass\nvalue = 3\n")
    monkeypatch.chdir(tmp_path)
    assert load_handler("tasks_here:handle").__name__ == "handle"
    for spec, words in [
        ("tasks_here", "MODULE:FUNCTION"),
        ("no_such_module_here:handle", "cannot import"),
        ("tasks_here:nothing", "has no 'nothing'"),
        ("tasks_here:value", "not a function"),
    ]:
        with pytest.raises(smq.InvalidParameter, match=words):
            load_handler(spec)


def test_the_cli_reports_a_bad_handler_or_a_missing_queue_in_one_line(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    runner = CliRunner()
    for args, words in [
        (["no_such_module_here:handle", "--queue", "jobs"], "cannot import"),
        (["json:dumps", "--queue", "missing"], "missing"),
        (["json:dumps", "--queue", "jobs", "--concurrency", "0"], "0"),
    ]:
        result = runner.invoke(main, ["worker", *args, "--redis-url", redis_server.url])
        assert result.exit_code in (1, 2), result.output
        lines = result.output.strip().splitlines()
        assert lines and words in lines[-1]
        assert "Traceback" not in result.output


@pytest.mark.cluster
def test_a_worker_serves_a_queue_on_a_redis_cluster(
    redis_cluster: EmbeddedCluster, running: Callable[[smq.Worker], Running]
) -> None:
    client = smq.Client(settings=smq.Settings(url=redis_cluster.url, cluster=True))
    try:
        for name in ("jobs", "jobs-dlq"):
            client.delete_queue(name)
        client.create_queue("jobs-dlq")
        jobs = client.create_queue(
            "jobs", visibility_timeout=1, redrive_policy=smq.RedrivePolicy("jobs-dlq", 2)
        )
        for i in range(20):
            jobs.send("fail" if i == 0 else str(i))
        done: list[str] = []

        def handle(job: smq.Job) -> None:
            if job.body == "fail":
                raise ValueError("no")
            time.sleep(1.5)  # past the 1 s timeout: the heartbeat keeps it
            done.append(job.body)

        config = smq.WorkerConfig(concurrency=10, backoff=0)
        run = running(smq.Worker(client, "jobs", handle, config=config))
        wait_for(lambda: len(done) == 19 and client.queue("jobs-dlq").attributes().visible == 1, 20, "all")
        run.stop()
        assert sorted(done, key=int) == [str(i) for i in range(1, 20)]
        counters = jobs.attributes().counters
        assert counters["deleted"] == 19
        assert counters.get("visibility_expired", 0) == 0
    finally:
        client.close()


def test_a_handler_that_raises_system_exit_fails_its_message_and_the_slot_goes_on(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    import sys

    jobs = redis_client.create_queue("jobs", visibility_timeout=2)
    jobs.send("exit")
    jobs.send("after")
    seen: list[str] = []

    def handle(job: smq.Job) -> None:
        seen.append(job.body)
        if job.body == "exit":
            sys.exit(3)

    config = smq.WorkerConfig(prefetch=0, backoff=60)
    worker = smq.Worker(redis_client, "jobs", handle, config=config)
    running(worker)
    wait_for(lambda: seen == ["exit", "after"], 10, "both messages, one after the other")
    wait_for(lambda: _metric(worker, "smq_worker_messages_total", outcome="failed") == 1, 5, "the failure")
    wait_for(lambda: jobs.attributes().counters.get("deleted") == 1, 5, "the other's delete")


def test_deleting_the_queue_stops_the_worker_with_the_error(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs", visibility_timeout=2)
    jobs.send("hold")
    started = threading.Event()

    def handle(job: smq.Job) -> None:
        started.set()
        job.wait_lost(20)

    worker = smq.Worker(redis_client, "jobs", handle)
    run = running(worker)
    assert started.wait(10)
    redis_client.delete_queue("jobs")
    run.thread.join(15)
    assert not run.thread.is_alive()
    assert isinstance(run.error, smq.QueueDoesNotExist)
    assert worker._keeper is not None and worker._keeper.held() == 0


def test_every_message_ends_in_exactly_one_outcome(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs", visibility_timeout=30)
    for i in range(30):
        jobs.send("fail" if i % 3 == 0 else "hold" if i % 10 == 1 else "ok")
    handled: list[str] = []

    def handle(job: smq.Job) -> None:
        handled.append(job.body)
        if job.body == "fail":
            raise ValueError("no")
        if job.body == "hold":
            job.wait_lost(30)

    config = smq.WorkerConfig(concurrency=4, prefetch=6, backoff=60, grace_period=0.5)
    worker = smq.Worker(redis_client, "jobs", handle, config=config)
    run = running(worker)
    wait_for(lambda: jobs.attributes().visible == 0, 10, "every message received")
    time.sleep(0.5)
    run.stop()
    totals = {o: _metric(worker, "smq_worker_messages_total", outcome=o) for o in smq.worker.OUTCOMES}
    received = jobs.attributes().counters["received"]
    assert sum(totals.values()) == received
    assert totals["succeeded"] == jobs.attributes().counters["deleted"]
    assert totals["released"] >= 1  # the held ones, at the end of the grace period


class DeleteCountingQueue(smq.Queue):
    """A real queue that counts the deletes the heartbeat thread sends on their own."""

    __slots__ = ("own_deletes",)

    def __init__(self, client: smq.Client, name: str) -> None:
        super().__init__(client, name)
        self.own_deletes = 0

    def delete_batch(self, entries: Sequence[smq.DeleteEntry]) -> smq.BatchResult[str]:
        self.own_deletes += 1
        return super().delete_batch(entries)


def test_deletes_ride_on_the_next_receive(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    redis_client.create_queue("jobs")
    jobs = DeleteCountingQueue(redis_client, "jobs")
    for start in range(0, 40, 10):
        jobs.send_batch([smq.SendEntry(str(i), f"m{start + i}") for i in range(10)])
    handled: list[str] = []
    # One message held at a time: the receiver waits for room, which a finished message's
    # delete makes; it takes that delete and sends it with its next receive.
    config = smq.WorkerConfig(concurrency=1, prefetch=0, wait_time_seconds=1)
    worker = smq.Worker(redis_client, jobs, lambda job: handled.append(job.body), config=config)
    running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted", 0) == 40, 20, "40 deletes")
    info = jobs.attributes()
    assert (info.visible, info.in_flight, sorted(handled)) == (0, 0, sorted(f"m{i}" for i in range(40)))
    assert jobs.own_deletes <= 10, f"{jobs.own_deletes} of 40 deletes went on their own"


class FlakyShardsQueue(smq.Queue):
    """A real queue whose look-up of its shards fails a few times (Redis busy or unreachable)."""

    __slots__ = ("failures",)

    def __init__(self, client: smq.Client, name: str) -> None:
        super().__init__(client, name)
        self.failures = 0

    def _shards(self) -> tuple[smq.Queue, ...]:
        if self.failures > 0:
            self.failures -= 1
            raise smq.Unavailable("reading the shards: Redis is not answering")
        return super()._shards()


def test_a_failed_look_up_of_the_shards_is_retried_like_a_failed_receive(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    plain = redis_client.create_queue("jobs")
    jobs = FlakyShardsQueue(redis_client, "jobs")
    plain.send_batch([smq.SendEntry(str(i), f"m{i}") for i in range(10)])
    config = smq.WorkerConfig(concurrency=2, wait_time_seconds=1)
    worker = smq.Worker(redis_client, jobs, lambda job: None, config=config)
    run = running(worker)
    jobs.failures = 3  # from now on: the worker's loop meets them
    plain.send_batch([smq.SendEntry(str(i), f"n{i}") for i in range(10)])
    wait_for(lambda: plain.attributes().counters.get("deleted", 0) == 20, 20, "20 deletes")
    assert run.thread.is_alive() and run.error is None


# -- fast sync handlers run on the receiving thread -------------------------------------------


def test_a_handler_run_on_the_receiving_thread_keeps_its_message_hidden_past_the_timeout(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs", visibility_timeout=1)
    jobs.send("slow")
    threads: list[str] = []

    def handle(job: smq.Job) -> None:
        threads.append(threading.current_thread().name)
        time.sleep(2.5)  # past the 1 s timeout: the keeper extends it meanwhile

    worker = smq.Worker(redis_client, "jobs", handle, config=smq.WorkerConfig(prefetch=0))
    run = running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted") == 1, 10, "the delete")
    run.stop()
    assert threads == ["smq-receiver"]  # inline: a first handler always is
    counters = jobs.attributes().counters
    assert counters.get("visibility_expired", 0) == 0
    assert counters["received"] == 1
    assert _metric(worker, "smq_worker_visibility_extensions_total") >= 2


def test_a_stop_waits_for_the_handler_on_the_receiving_thread_and_releases_the_rest_of_its_batch(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs", visibility_timeout=120)
    jobs.send_batch([smq.SendEntry(str(i), f"m{i}") for i in range(5)])
    started, release = threading.Event(), threading.Event()
    handled: list[str] = []

    def handle(job: smq.Job) -> None:
        handled.append(threading.current_thread().name)
        if len(handled) == 1:
            started.set()
            release.wait(30)

    config = smq.WorkerConfig(concurrency=1, prefetch=4, grace_period=20)
    worker = smq.Worker(redis_client, "jobs", handle, config=config)
    run = running(worker)
    assert started.wait(10)
    worker.stop()
    # The four not started come back at once; the running one keeps its lease.
    wait_for(lambda: jobs.attributes().visible == 4, 5, "the rest released")
    time.sleep(0.3)
    assert run.thread.is_alive()  # still in the grace period, waiting for the handler
    release.set()
    run.thread.join(10)
    assert not run.thread.is_alive() and run.error is None
    assert handled == ["smq-receiver"]
    info = jobs.attributes()
    assert (info.counters.get("deleted"), info.visible, info.in_flight) == (1, 4, 0)
    totals = {o: _metric(worker, "smq_worker_messages_total", outcome=o) for o in smq.worker.OUTCOMES}
    assert totals == {"succeeded": 1, "failed": 0, "lost": 0, "released": 4}


def test_a_handler_that_runs_long_on_the_receiving_thread_lets_others_run_and_receiving_go_on(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs", visibility_timeout=30)
    jobs.send("block")
    jobs.send_batch([smq.SendEntry(str(i), f"q{i}") for i in range(10)])
    jobs.send_batch([smq.SendEntry(str(i), f"q{i + 10}") for i in range(10)])
    lock = threading.Lock()
    active, most = [0], [0]
    quick_done = threading.Event()
    done: list[str] = []
    where: dict[str, str] = {}

    def handle(job: smq.Job) -> None:
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
            where[job.body] = threading.current_thread().name
        try:
            if job.body == "block":
                # Needs all 20 others done: only if they run elsewhere while this one runs,
                # and if another thread receives them meanwhile (at most 4 are held at once).
                assert quick_done.wait(20), "the others did not run while this handler ran"
            else:
                time.sleep(0.001)
        finally:
            with lock:
                active[0] -= 1
                done.append(job.body)
                if sum(1 for body in done if body != "block") == 20:
                    quick_done.set()

    config = smq.WorkerConfig(concurrency=2, prefetch=2)
    worker = smq.Worker(redis_client, "jobs", handle, config=config)
    run = running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted") == 21, 30, "21 deletes")
    run.stop()
    assert where["block"] == "smq-receiver"
    assert most[0] <= 2  # the concurrency holds, inline or not
    assert _metric(worker, "smq_worker_messages_total", outcome="succeeded") == 21


def test_fast_handlers_go_back_to_the_receiving_thread_after_slow_ones(
    redis_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    jobs = redis_client.create_queue("jobs")
    for start in range(0, 1000, 10):
        jobs.send_batch([smq.SendEntry(str(i), str(start + i)) for i in range(10)])
    where: dict[int, str] = {}

    def handle(job: smq.Job) -> None:
        n = int(job.body)
        where[n] = threading.current_thread().name
        if n < 20:
            time.sleep(0.005)  # slow: these go to the handler threads

    config = smq.WorkerConfig(concurrency=4, prefetch=6)
    worker = smq.Worker(redis_client, "jobs", handle, config=config)
    run = running(worker)
    wait_for(lambda: jobs.attributes().counters.get("deleted") == 1000, 30, "1000 deletes")
    run.stop()
    names = [where[n] for n in sorted(where)]
    assert any(name.startswith("smq-handler") for name in names[:30])
    # Back after a window of fast ones (a handler slowed by the machine may send a window back).
    assert names[-500:].count("smq-receiver") >= 200
