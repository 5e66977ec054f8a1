"""The Prometheus exporter on real Redis servers, scraped over real HTTP and parsed
with the Prometheus text parser."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import smq
from conftest import Clock, need_program, stderr_line_after, stored_id
from metrics_support import labelled, names, scrape, serving_exporter, value
from smq.embedded import EmbeddedCluster, EmbeddedRedis
from smq.exporter import COUNTER_METRICS, Exporter, ExporterConfig
from smq.exporter._config import DEPRECATED_NAMES

BIN = Path(sys.executable).parent


def _lenient(url: str, **settings: object) -> smq.Client:
    return smq.Client(settings=smq.Settings(url=url, allow_eviction=True, **settings))  # type: ignore[arg-type]


def test_scrape_reports_each_queues_messages_by_state_and_the_oldest_age(redis_client: smq.Client) -> None:
    clock = Clock(redis_client)
    jobs = redis_client.create_queue("jobs")
    jobs.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(5)])
    clock.advance(7)
    jobs.send("later")
    jobs.send("delayed", delay_seconds=60)
    jobs.receive(2)
    redis_client.create_queue("idle")
    with serving_exporter(redis_client) as url:
        samples = scrape(url)
    assert value(samples, "smq_up") == 1
    assert value(samples, "smq_queue_messages_visible", queue="jobs") == 4
    assert value(samples, "smq_queue_messages_in_flight", queue="jobs") == 2
    assert value(samples, "smq_queue_messages_delayed", queue="jobs") == 1
    assert value(samples, "smq_queue_messages_moving", queue="jobs") == 0
    # Two of the first five were received; the oldest still visible was sent 7 s ago.
    assert value(samples, "smq_queue_oldest_message_age_seconds", queue="jobs") == 7.0
    assert value(samples, "smq_queue_messages_visible", queue="idle") == 0
    assert value(samples, "smq_queue_oldest_message_age_seconds", queue="idle") == 0
    assert value(samples, "smq_exporter_queues") == 2


def test_scrape_reports_queue_settings_as_numbers(redis_client: smq.Client) -> None:
    redis_client.create_queue("dlq")
    redis_client.create_queue(
        "jobs",
        visibility_timeout=45,
        message_retention_period=3600,
        delay_seconds=5,
        receive_message_wait_time_seconds=20,
        maximum_message_size=2048,
        inflight_limit=10,
        redrive_policy=smq.RedrivePolicy("dlq", 3),
    )
    with serving_exporter(redis_client) as url:
        samples = scrape(url)
    expected = {
        "smq_queue_visibility_timeout_seconds": 45,
        "smq_queue_message_retention_seconds": 3600,
        "smq_queue_delay_seconds": 5,
        "smq_queue_receive_wait_time_seconds": 20,
        "smq_queue_maximum_message_size_bytes": 2048,
        "smq_queue_in_flight_limit": 10,
        "smq_queue_max_receives": 3,
    }
    assert {name: value(samples, name, queue="jobs") for name in expected} == expected
    assert value(samples, "smq_queue_max_receives", queue="dlq") == 0
    assert "smq_queue_max_receive_count" not in names(samples)  # deprecated: opt-in


def test_the_deprecated_metric_names_are_reported_beside_the_new_when_asked(redis_client: smq.Client) -> None:
    redis_client.create_queue("dlq")
    redis_client.create_queue("jobs", redrive_policy=smq.RedrivePolicy("dlq", 3))
    with serving_exporter(redis_client, ExporterConfig(deprecated_names=True)) as url:
        samples = scrape(url)
    for new, old in DEPRECATED_NAMES.items():
        assert value(samples, old, queue="jobs") == value(samples, new, queue="jobs") == 3


def test_the_exporters_metrics_pass_promtool_check_metrics(redis_client: smq.Client) -> None:
    promtool = need_program("promtool", "Debian: apt-get install prometheus")
    redis_client.create_queue("dlq")
    redis_client.create_queue("jobs", redrive_policy=smq.RedrivePolicy("dlq", 3))
    redis_client.create_queue("orders.fifo")
    redis_client.get_queue("jobs").send("x")
    with serving_exporter(redis_client) as url:
        text = urllib.request.urlopen(url, timeout=10).read()
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()


def test_in_flight_limit_in_use_is_the_share_of_the_limit_taken(redis_client: smq.Client) -> None:
    jobs = redis_client.create_queue("jobs", inflight_limit=10)
    jobs.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(6)])
    jobs.receive(4)
    with serving_exporter(redis_client) as url:
        assert value(scrape(url), "smq_queue_in_flight_limit_used_ratio", queue="jobs") == 0.4


def test_dead_letter_depth_is_reported_for_each_source_even_when_the_dlq_is_not_listed(
    redis_client: smq.Client,
) -> None:
    clock = Clock(redis_client)
    redis_client.create_queue("jobs-dlq")
    jobs = redis_client.create_queue(
        "jobs", visibility_timeout=5, redrive_policy=smq.RedrivePolicy("jobs-dlq", 1)
    )
    other = redis_client.create_queue("other", redrive_policy=smq.RedrivePolicy("jobs-dlq", 5))
    jobs.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(3)])
    other.send("y")
    jobs.receive(10)
    clock.advance(6)
    assert jobs.receive(10) == []  # all three moved to the dead-letter queue on this receive
    config = ExporterConfig(queues=("jobs", "other"))
    with serving_exporter(redis_client, config) as url:
        samples = scrape(url)
    assert value(samples, "smq_queue_dead_letter_messages", queue="jobs", dead_letter_queue="jobs-dlq") == 3
    assert value(samples, "smq_queue_dead_letter_messages", queue="other", dead_letter_queue="jobs-dlq") == 3
    assert value(samples, "smq_queue_messages_dead_lettered_total", queue="jobs") == 3
    assert labelled(samples, "smq_queue_messages_visible", "queue") == {"jobs", "other"}


def test_counters_are_the_scripts_counters_summed_over_every_client(redis_client: smq.Client) -> None:
    clock = Clock(redis_client)
    other = smq.Client(settings=redis_client.settings, redis_client=redis_client._redis)
    Clock(other).now_ms = clock.now_ms
    jobs = redis_client.create_queue("jobs", visibility_timeout=5)
    jobs.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(4)])
    theirs = other.queue("jobs")
    first = theirs.receive(2)
    jobs.receive(1)
    theirs.change_visibility(first[0].receipt_handle, 30)
    theirs.delete(first[1].receipt_handle)
    clock.advance(6)
    other._now_ms_override = clock.now_ms
    again = jobs.receive(10)  # the third message's lease expired: received again
    jobs.delete(first[1].receipt_handle)  # stale: already deleted
    jobs.receive(10)  # empty
    assert sorted(m.receive_count for m in again) == [1, 2]
    counters = jobs.attributes().counters
    with serving_exporter(redis_client) as url:
        samples = scrape(url)
    reported = {
        counter: value(samples, f"{metric}_total", queue="jobs")
        for counter, (metric, _) in COUNTER_METRICS.items()
    }
    assert reported == {counter: counters.get(counter, 0) for counter in smq.COUNTERS}
    assert (reported["sent"], reported["received"], reported["redelivered"]) == (4, 5, 1)
    assert (reported["visibility_expired"], reported["empty_receives"], reported["deleted"]) == (1, 1, 1)


def test_fifo_queues_report_their_message_groups_and_deduplicated_sends(redis_client: smq.Client) -> None:
    jobs = redis_client.create_queue("jobs.fifo")
    for group in ("a", "b", "c"):
        for n in (1, 2):
            jobs.send(f"{group}{n}", message_group_id=group, deduplication_id=f"{group}{n}")
    # One message of each of two groups: both locked while it is in flight.
    assert [m.body for m in jobs.receive(1) + jobs.receive(1)] == ["a1", "b1"]
    assert jobs.send("a1", message_group_id="a", deduplication_id="a1").duplicate
    redis_client.create_queue("plain").send("x")
    with serving_exporter(redis_client) as url:
        samples = scrape(url)
    assert value(samples, "smq_queue_message_groups", queue="jobs.fifo") == 3
    assert value(samples, "smq_queue_message_groups_in_flight", queue="jobs.fifo") == 2
    assert value(samples, "smq_queue_messages_in_flight", queue="jobs.fifo") == 2
    assert value(samples, "smq_queue_messages_visible", queue="jobs.fifo") == 4
    assert value(samples, "smq_queue_deduplicated_total", queue="jobs.fifo") == 1
    assert value(samples, "smq_queue_messages_sent_total", queue="jobs.fifo") == 6
    assert value(samples, "smq_queue_in_flight_limit", queue="jobs.fifo") == 20_000
    # A standard queue has no groups: no series, not a 0; its counter of duplicates is 0.
    assert labelled(samples, "smq_queue_message_groups", "queue") == {"jobs.fifo"}
    assert labelled(samples, "smq_queue_message_groups_in_flight", "queue") == {"jobs.fifo"}
    assert value(samples, "smq_queue_deduplicated_total", queue="plain") == 0


def test_queue_allow_list_pattern_and_cap_bound_the_queue_label(redis_client: smq.Client) -> None:
    for name in ("a-1", "a-2", "a-3", "b-1", "c-1"):
        redis_client.create_queue(name)
    capped = ExporterConfig(queue_pattern=r"a-\d", max_queues=2)
    with serving_exporter(redis_client, capped) as url:
        samples = scrape(url)
    assert labelled(samples, "smq_queue_messages_visible", "queue") == {"a-1", "a-2"}
    assert (value(samples, "smq_exporter_queues"), value(samples, "smq_exporter_queues_skipped")) == (2, 1)
    listed = ExporterConfig(queues=("c-1", "b-1", "not-created-yet"))
    with serving_exporter(redis_client, listed) as url:
        samples = scrape(url)
    assert labelled(samples, "smq_queue_messages_visible", "queue") == {"b-1", "c-1"}
    assert value(samples, "smq_up") == 1


def test_bad_exporter_settings_are_refused_with_typed_errors() -> None:
    with pytest.raises(smq.InvalidParameter, match="queue pattern"):
        ExporterConfig(queue_pattern="(")
    with pytest.raises(smq.InvalidParameter, match="max_queues"):
        ExporterConfig(max_queues=0)
    with pytest.raises(smq.InvalidQueueName):
        ExporterConfig(queues=("no spaces",))


def test_no_label_value_is_a_message_id_or_body(redis_client: smq.Client) -> None:
    jobs = redis_client.create_queue("jobs")
    sent = [jobs.send(f"secret-body-{n}") for n in range(20)]
    received = jobs.receive(10)
    with serving_exporter(redis_client) as url:
        samples = scrape(url)
        with urllib.request.urlopen(url) as reply:
            text = reply.read().decode()
    stored = [stored_id(m) for m in received]
    for secret in (
        [s.message_id for s in sent] + [m.receipt_handle for m in received] + stored + ["secret-body"]
    ):
        assert secret not in text
    label_names = {name for _, labels in samples for name, _ in labels}
    assert label_names <= {"queue", "dead_letter_queue", "node", "policy", "version"}


def test_redis_health_shows_policy_aof_and_memory_of_a_server_it_would_refuse(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "redis") as server:
        client = _lenient(server.url)
        client.create_queue("jobs").send("x")
        with serving_exporter(client) as url:
            samples = scrape(url)
            node = str(server.socket_path)
            assert value(samples, "smq_redis_maxmemory_policy_info", node=node, policy="noeviction") == 1
            assert value(samples, "smq_redis_eviction_policy_safe", node=node) == 1
            assert value(samples, "smq_redis_aof_enabled", node=node) == 1
            assert value(samples, "smq_redis_aof_last_write_ok", node=node) == 1
            assert value(samples, "smq_redis_memory_used_bytes", node=node) > 100_000
            assert value(samples, "smq_redis_memory_max_bytes", node=node) == 0
            assert value(samples, "smq_redis_evicted_keys_total", node=node) == 0
            with server.client() as admin:
                admin.config_set("maxmemory-policy", "allkeys-lru")
                admin.config_set("appendonly", "no")
                admin.config_set("maxmemory", str(512 * 1024 * 1024))
            samples = scrape(url)
        client.close()
    # The exporter reads a Redis that smq itself refuses to write to, and says why.
    assert value(samples, "smq_redis_maxmemory_policy_info", node=node, policy="allkeys-lru") == 1
    assert value(samples, "smq_redis_eviction_policy_safe", node=node) == 0
    assert value(samples, "smq_redis_aof_enabled", node=node) == 0
    assert value(samples, "smq_redis_memory_max_bytes", node=node) == 512 * 1024 * 1024
    assert value(samples, "smq_queue_messages_visible", queue="jobs") == 1


def test_exporter_stays_up_and_reports_smq_up_0_while_redis_is_down(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis").start()
    client = _lenient(server.url, socket_timeout=2.0, connect_timeout=1.0)
    try:
        client.create_queue("jobs").send("kept")
        with serving_exporter(client) as url:
            assert value(scrape(url), "smq_up") == 1
            server.stop()
            down = scrape(url)
            assert value(down, "smq_up") == 0
            assert value(down, "smq_exporter_scrape_errors_total") == 1
            assert "smq_queue_messages_visible" not in names(down)  # no stale numbers
            health = url.replace("/metrics", "/healthz")
            with urllib.request.urlopen(health) as reply:
                assert reply.status == 200
            server.start()  # same folder: the AOF brings the message back
            up = scrape(url)
    finally:
        client.close()
        server.stop()
    assert value(up, "smq_up") == 1
    assert value(up, "smq_queue_messages_visible", queue="jobs") == 1
    assert value(up, "smq_exporter_scrape_errors_total") == 1


@pytest.mark.cluster
def test_exporter_reports_every_primary_of_a_redis_cluster(redis_cluster: EmbeddedCluster) -> None:
    client = smq.Client(settings=smq.Settings(url=redis_cluster.url, cluster=True))
    try:
        for name in ("alpha", "beta", "gamma", "delta"):
            client.create_queue(name).send("x")
        samples = scrape_once(client)
    finally:
        client.close()
    assert len(labelled(samples, "smq_redis_memory_used_bytes", "node")) == 3
    assert {"alpha", "beta", "gamma", "delta"} <= labelled(samples, "smq_queue_messages_visible", "queue")
    assert value(samples, "smq_queue_messages_visible", queue="gamma") == 1


def scrape_once(client: smq.Client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with serving_exporter(client) as url:
        return scrape(url)


def test_metrics_text_needs_no_server(redis_client: smq.Client) -> None:
    redis_client.create_queue("jobs").send("x")
    text = Exporter(redis_client).metrics_text()
    assert 'smq_queue_messages_visible{queue="jobs"} 1.0' in text


# -- the command ----------------------------------------------------------------------


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [str(BIN / "smq"), "exporter", "--port", "0", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return process, stderr_line_after(process, "serving ")


def test_smq_exporter_command_serves_the_fleet_until_sigterm(
    redis_client: smq.Client, redis_server: EmbeddedRedis
) -> None:
    for name in ("jobs-a", "jobs-b", "mail"):
        redis_client.create_queue(name).send("x")
    process, url = _start("--redis-url", redis_server.url, "--queue-pattern", "jobs-.*")
    try:
        samples = scrape(url)
        assert labelled(samples, "smq_queue_messages_visible", "queue") == {"jobs-a", "jobs-b"}
        assert "process_cpu_seconds_total" in names(samples)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue-pattern", "("], "queue pattern '(' is invalid"),
        (["--queue", "bad name"], "queue name 'bad name' is invalid"),
        (["--max-queues", "0"], "0 is not in the range"),
    ],
)
def test_smq_exporter_refuses_bad_options_in_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(BIN / "smq"), "exporter", "--port", "0", "--redis-url", f"unix://{tmp_path}/none.sock", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert message in done.stderr
    if "range" not in message:  # click's own usage errors print the usage first
        assert done.stderr.strip().count("\n") == 0
