"""Sharded queues: one name, N full queues in their own slots, on the primaries of a real
3-primary Redis Cluster (and on one node, where the shards share it)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.cluster import RedisCluster, key_slot

import smq
from conftest import _fresh_cluster, _fresh_real, as_asked, raw
from http_support import Server, json_client
from smq.client import _shards
from smq.core._keys import QueueKeys
from smq.embedded import EmbeddedCluster, EmbeddedRedis
from worker_support import Running, wait_for


@pytest.fixture(params=["cluster", "redis", "cluster-aio", "redis-aio"])
def client(request: pytest.FixtureRequest) -> Iterator[smq.Client]:
    """``smq.Client``, and (``-aio``) the asyncio client behind the sync interface."""
    if request.param.startswith("cluster"):
        made = _fresh_cluster(request.getfixturevalue("redis_cluster"))
    else:
        made = _fresh_real(request.getfixturevalue("redis_server"))
    yield from as_asked(request.param, made)
    made.close()


@pytest.fixture
def cluster_client(redis_cluster: EmbeddedCluster) -> Iterator[smq.Client]:
    made = _fresh_cluster(redis_cluster)
    yield made
    made.close()


def owner(client: smq.Client, name: str) -> str:
    node = client._redis.nodes_manager.get_node_from_slot(key_slot(QueueKeys.of(name).meta.encode()))
    return str(node.name)


def per_shard(queue: smq.Queue) -> list[int]:
    """Visible messages of each shard, read shard by shard."""
    return [shard._attributes_here().visible for shard in queue._shards()]


def drain(queue: smq.Queue, wait: int = 0) -> list[smq.Message]:
    got: list[smq.Message] = []
    while batch := queue.receive(10, wait_time_seconds=wait, visibility_timeout=60):
        got += batch
    return got


def test_the_shards_land_on_every_primary_and_stay_out_of_the_listing(cluster_client: smq.Client) -> None:
    queue = cluster_client.create_queue("hot", shards=3)
    names = queue.shard_names()
    assert names[0] == "hot" and len(names) == 3
    assert all(name.startswith("hot.s") for name in names[1:])
    primaries = {node.name for node in cluster_client._redis.get_primaries()}
    assert {owner(cluster_client, name) for name in names} == primaries
    assert cluster_client.list_queues() == ["hot"]
    assert queue.attributes().config.shards == 3
    fifo = cluster_client.create_queue("hot.fifo", shards=3)
    assert all(name.endswith(".fifo") for name in fifo.shard_names())
    assert {owner(cluster_client, name) for name in fifo.shard_names()} == primaries
    # Names no user can create: SQS names hold no '.' before .fifo.
    for name in names[1:] + fifo.shard_names()[1:]:
        with pytest.raises(smq.InvalidQueueName):
            cluster_client.create_queue(name)


def test_sends_spread_receives_take_from_every_shard_and_receipts_name_their_shard(
    client: smq.Client,
) -> None:
    queue = client.create_queue("hot", shards=3)
    for i in range(30):
        queue.send(f"m{i}")
    queue.send_batch([smq.SendEntry(str(i), f"b{i}") for i in range(10)])
    spread = per_shard(queue)
    assert sum(spread) == 40 and min(spread) >= 10, spread  # each call in turn; a batch to one shard
    info = queue.attributes()
    assert (info.visible, info.counters["sent"], info.name) == (40, 40, "hot")
    got = drain(queue)
    assert sorted(m.body for m in got) == sorted([f"m{i}" for i in range(30)] + [f"b{i}" for i in range(10)])
    assert {m.receipt_handle.split(":")[0] for m in got} == set(queue.shard_names())
    assert {m.queue for m in got} == {"hot"}
    assert queue.attributes().in_flight == 40
    # Deletes and visibility changes go to the shard each receipt names, also in one batch.
    first, rest = got[:10], got[10:]
    result = queue.change_visibility_batch(
        [smq.ChangeEntry(str(i), m.receipt_handle, 0) for i, m in enumerate(first)]
    )
    assert len(result.successful) == 10 and not result.failed
    assert queue.attributes().visible == 10
    assert len(drain(queue)) == 10
    deleted = queue.delete_batch([smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(rest[:10])])
    assert len(deleted.successful) == 10 and not deleted.failed
    for message in rest[10:]:
        assert queue.delete(message)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 10, 30)


def test_a_receipt_of_another_queue_is_refused(client: smq.Client) -> None:
    queue = client.create_queue("hot", shards=3)
    other = client.create_queue("other")
    other.send("x")
    (message,) = other.receive()
    with pytest.raises(smq.ReceiptHandleIsInvalid):
        queue.delete(message.receipt_handle)
    result = queue.delete_batch([smq.DeleteEntry("a", message.receipt_handle), smq.DeleteEntry("b", "junk")])
    assert sorted(f.id for f in result.failed) == ["a", "b"]
    assert other.attributes().in_flight == 1


def test_a_long_poll_wakes_on_whichever_shard_gets_the_message(client: smq.Client) -> None:
    queue = client.create_queue("hot", shards=3)
    for shard in queue._shards():
        got: list[list[smq.Message]] = []
        waiting = threading.Thread(target=lambda got=got: got.append(queue.receive(1, wait_time_seconds=20)))
        started = time.monotonic()
        waiting.start()
        time.sleep(0.3)
        shard.send(f"to {shard.name}")  # straight to that shard
        waiting.join(30)
        assert [m.body for m in got[0]] == [f"to {shard.name}"]
        assert time.monotonic() - started < 10, "woken by the timeout, not by the notification"


def test_a_fifo_group_keeps_to_one_shard_and_its_order(client: smq.Client) -> None:
    queue = client.create_queue("hot.fifo", shards=3, content_based_deduplication=True)
    assert queue.attributes().config.deduplication_scope == "messageGroup"
    groups = [f"g{g}" for g in range(12)]
    for i in range(10):
        queue.send_batch([smq.SendEntry(g, f"{g}:{i}", message_group_id=g) for g in groups[:10]])
        for g in groups[10:]:
            queue.send(f"{g}:{i}", message_group_id=g)
    assert queue.send("g0:0", message_group_id="g0").duplicate  # deduplicated in its group's shard
    seen: dict[str, list[int]] = {}
    while batch := queue.receive(10, visibility_timeout=60):
        for message in batch:
            group, number = message.body.split(":")
            assert message.message_group_id == group
            seen.setdefault(group, []).append(int(number))
            queue.delete(message)
    assert seen == {g: list(range(10)) for g in groups}
    # Every group went to exactly the shard its id hashes to.
    names = queue.shard_names()
    counts = Counter(names[_shards._index(g, 3)] for g in groups)
    sent = {shard.name: shard._attributes_here().counters.get("sent", 0) for shard in queue._shards()}
    assert sent == {name: counts[name] * 10 for name in names}


def test_a_sharded_fifo_queue_deduplicates_within_groups_only(client: smq.Client) -> None:
    with pytest.raises(smq.InvalidAttributeValue, match="messageGroup"):
        client.create_queue("hot.fifo", shards=3, deduplication_scope="queue")
    queue = client.create_queue("hot.fifo", shards=3)
    with pytest.raises(smq.InvalidAttributeValue, match="messageGroup"):
        queue.set_attributes(deduplication_scope="queue")
    with pytest.raises(smq.InvalidAttributeValue, match="created"):
        queue.set_attributes(shards=2)


def test_settings_reach_every_shard_and_creating_again_compares_shards(client: smq.Client) -> None:
    queue = client.create_queue("hot", shards=3, visibility_timeout=5)
    assert client.create_queue("hot", shards=3).shard_names() == queue.shard_names()
    with pytest.raises(smq.QueueNameExists, match="shards"):
        client.create_queue("hot", shards=2)
    queue.set_attributes(visibility_timeout=7, delay_seconds=1)
    for shard in queue._shards():
        config = shard._attributes_here().config
        assert (config.visibility_timeout, config.delay_seconds) == (7, 1)


def test_dead_letters_leave_every_shard_and_redrive_brings_them_back(client: smq.Client) -> None:
    client.create_queue("hot-dlq")
    queue = client.create_queue(
        "hot", shards=3, redrive_policy=smq.RedrivePolicy("hot-dlq", 1), visibility_timeout=0
    )
    for i in range(9):
        queue.send(f"m{i}")
    first: list[smq.Message] = []
    while batch := queue.receive(10):
        first += batch  # received once each, visible again at once (timeout 0)
        if len(first) >= 9:
            break
    assert len(first) == 9
    assert queue.receive(10) == []  # the second receive dead-letters them instead
    dead = client.get_queue("hot-dlq")
    assert dead.attributes().visible == 9
    assert client.dead_letter_sources("hot-dlq") == ["hot"]
    assert client.redrive("hot-dlq") == 9
    assert dead.attributes().visible == 0
    assert queue.attributes().visible == 9


def test_peek_pages_through_the_shards_and_purge_and_delete_reach_them_all(client: smq.Client) -> None:
    queue = client.create_queue("hot", shards=3)
    for i in range(15):
        queue.send(f"m{i}")
    pages = [queue.peek(limit=4, offset=offset) for offset in range(0, 16, 4)]
    bodies = [m.body for page in pages for m in page]
    assert sorted(bodies) == sorted(f"m{i}" for i in range(15))
    assert {m.queue for page in pages for m in page} == {"hot"}
    with pytest.raises(smq.InvalidParameter):
        queue.peek(limit=0)
    received = queue.receive(10, visibility_timeout=60)
    held = queue.peek("in_flight", limit=100)
    assert {m.message_id for m in held} == {m.message_id for m in received}
    assert queue.delete(held[0].receipt_handle)  # a peeked receipt names its shard too
    assert queue.purge() == 14
    assert queue.attributes().visible == 0
    names = queue.shard_names()
    assert client.delete_queue("hot")
    # Only each name's mark of the deletion stays, for 60 s (SQS's QueueDeletedRecently).
    leftovers = _keys_of(client, names)
    assert sorted(leftovers) == sorted(QueueKeys.of(name).deleted.encode() for name in names), leftovers
    assert all(0 < raw(client).pttl(key) <= 60_000 for key in leftovers)


def _keys_of(client: smq.Client, names: list[str]) -> list[bytes]:
    found: list[bytes] = []
    for name in names:
        pattern = QueueKeys.of(name).meta.replace(":meta", ":*").replace("{", "\\{").replace("}", "\\}")
        if isinstance(client._redis, RedisCluster):
            found += client._redis.keys(pattern, target_nodes=RedisCluster.ALL_NODES)
        else:
            found += raw(client).keys(pattern)
    return found


def test_a_client_that_used_a_name_before_the_queue_existed_sees_its_shards(client: smq.Client) -> None:
    early = client.queue("hot")
    with pytest.raises(smq.QueueDoesNotExist):
        early.send("too soon")  # the client reads (and keeps) that "hot" has no shards
    client.create_queue("hot", shards=3)
    for i in range(6):
        early.send(f"m{i}")
    assert min(per_shard(client.queue("hot"))) == 2


def test_a_client_sees_a_queue_made_again_with_other_shards(
    client: smq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_shards, "LAYOUT_TTL", 0.2)
    client.create_queue("hot", shards=3).send("before")
    other = smq.Client(settings=client.settings, redis_client=client._redis)
    assert len(other.queue("hot").shard_names()) == 3
    client.delete_queue("hot")
    client.create_queue("hot", shards=2)
    time.sleep(0.3)
    handle = other.queue("hot")
    assert len(handle.shard_names()) == 2
    for i in range(4):
        handle.send(f"m{i}")
    assert sorted(m.body for m in drain(client.queue("hot"))) == ["m0", "m1", "m2", "m3"]


def test_a_worker_and_the_exporter_see_one_queue(
    cluster_client: smq.Client, running: Callable[[smq.Worker], Running]
) -> None:
    from smq.exporter import QueueCollector

    queue = cluster_client.create_queue("hot", shards=3)
    for i in range(30):
        queue.send(f"m{i}")
    registry_text = _scrape(QueueCollector(cluster_client))
    assert registry_text[("smq_queue_messages_visible", "hot")] == 30
    assert registry_text[("smq_queue_in_flight_limit", "hot")] == 3 * 120_000  # each shard's limit
    assert not any(name.startswith("hot.s") for (_, name) in registry_text)
    done: list[str] = []
    worker = smq.Worker(cluster_client, "hot", lambda job: done.append(job.message.body))
    running(worker)
    wait_for(lambda: len(done) == 30, 20, "the worker to handle every message")
    wait_for(lambda: queue.attributes().counters.get("deleted", 0) == 30, 10, "the deletes")
    assert sorted(done) == sorted(f"m{i}" for i in range(30))


def _scrape(collector: object) -> dict[tuple[str, str], float]:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    values = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if "queue" in sample.labels:
                values[(sample.name, sample.labels["queue"])] = sample.value
    return values


def test_boto3_creates_and_uses_a_sharded_queue(sqs: object, core: smq.Client) -> None:
    from botocore.exceptions import ClientError

    url = sqs.create_queue(QueueName="hot", Attributes={"SmqShards": "3"})["QueueUrl"]  # type: ignore[attr-defined]
    assert core.queue("hot").shard_names()[1:] == ["hot.s1", "hot.s2"]
    for i in range(6):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")  # type: ignore[attr-defined]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]  # type: ignore[attr-defined]
    assert attributes["SmqShards"] == "3" and attributes["ApproximateNumberOfMessages"] == "6"
    got = []
    while True:
        reply = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)  # type: ignore[attr-defined]
        if not reply.get("Messages"):
            break
        got += reply["Messages"]
    assert sorted(m["Body"] for m in got) == [f"m{i}" for i in range(6)]
    sqs.delete_message_batch(  # type: ignore[attr-defined]
        QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
    )
    assert core.queue("hot").attributes().counters["deleted"] == 6
    # A waiting ReceiveMessage on the server wakes on whichever shard the message reaches.
    for shard in core.queue("hot")._shards():
        replies: list[dict[str, object]] = []
        waiting = threading.Thread(
            target=lambda replies=replies: replies.append(
                sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)  # type: ignore[attr-defined]
            )
        )
        started = time.monotonic()
        waiting.start()
        time.sleep(0.5)
        shard.send(f"to {shard.name}")
        waiting.join(30)
        assert [m["Body"] for m in replies[0]["Messages"]] == [f"to {shard.name}"]  # type: ignore[index]
        assert time.monotonic() - started < 10, "woken by the timeout, not by the notification"
    with pytest.raises(ClientError) as refused:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"SmqShards": "2"})  # type: ignore[attr-defined]
    assert refused.value.response["Error"]["Code"] == "InvalidAttributeValue"
    plain = sqs.create_queue(QueueName="plain")["QueueUrl"]  # type: ignore[attr-defined]
    everything = sqs.get_queue_attributes(QueueUrl=plain, AttributeNames=["All"])["Attributes"]  # type: ignore[attr-defined]
    assert "SmqShards" not in everything  # as SQS answers: a queue of one shard shows no extension
    for bad in ("0", "33", "x"):
        with pytest.raises(ClientError) as refused:
            sqs.create_queue(QueueName="bad", Attributes={"SmqShards": bad})  # type: ignore[attr-defined]
        assert refused.value.response["Error"]["Code"] == "InvalidAttributeValue"


def test_every_shard_is_served_by_one_node_of_one_slot(cluster_client: smq.Client) -> None:
    queue = cluster_client.create_queue("hot", shards=3)
    slots = {key_slot(QueueKeys.of(name).meta.encode()) for name in queue.shard_names()}
    assert len(slots) == 3
    # A queue whose name's own slot is on the last primary still spreads: the order wraps.
    for name in ("a", "b", "c", "d", "e", "f"):
        made = cluster_client.create_queue(name, shards=3)
        assert len({owner(cluster_client, n) for n in made.shard_names()}) == 3


def test_single_node_clients_see_no_difference_for_a_queue_of_one_shard(redis_server: EmbeddedRedis) -> None:
    client = _fresh_real(redis_server)
    queue = client.create_queue("plain")
    assert queue.shard_names() == ["plain"] and queue._wake_channels() == [queue.keys.wake_channel]
    queue.send("x")
    assert [m.queue for m in queue.receive()] == ["plain"]
    client.close()


def test_a_sharded_dead_letter_queue_is_redriven_from_every_shard(client: smq.Client) -> None:
    dead = client.create_queue("hot-dlq", shards=3)
    for i in range(6):
        dead.send(f"d{i}")  # sent straight to it: spread over its shards
    assert min(per_shard(dead)) == 2
    target = client.create_queue("target")
    assert client.redrive("hot-dlq", destination="target", max_messages=5) == 5
    assert client.redrive("hot-dlq", destination="target") == 1
    assert target.attributes().visible == 6 and dead.attributes().visible == 0


def test_the_command_line_creates_and_shows_a_sharded_queue(redis_cluster: EmbeddedCluster) -> None:
    from click.testing import CliRunner

    from smq.cli import main

    client = _fresh_cluster(redis_cluster)
    env = {"SMQ_REDIS_URL": redis_cluster.url}
    runner = CliRunner()
    made = runner.invoke(main, ["queue", "create", "hot", "--shards", "3", "--cluster"], env=env)
    assert made.exit_code == 0, made.output
    names = client.queue("hot").shard_names()
    assert len(names) == 3
    shown = runner.invoke(main, ["queue", "show", "hot", "--cluster", "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    assert '"shards": 3' in shown.output
    table = runner.invoke(main, ["queue", "show", "hot", "--cluster"], env=env)
    assert ", ".join(names) in table.output
    refused = runner.invoke(main, ["queue", "create", "cold", "--shards", "33", "--cluster"], env=env)
    assert refused.exit_code != 0 and "33" in refused.output
    client.close()


@pytest.mark.parametrize("lost", [0, 1])
def test_sends_and_receives_go_on_while_one_shards_primary_is_down(
    tmp_path: Path, lost: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long node timeout and partial coverage: the cluster keeps serving the other slots
    # while one primary is gone, as it does in the seconds before a failover. Shard 0's
    # node holds the list of shards: the client keeps the list it read.
    monkeypatch.setattr(_shards, "LAYOUT_TTL", 0.05)
    with EmbeddedCluster(
        tmp_path, masters=3, node_timeout_ms=60_000, config=["cluster-require-full-coverage no"]
    ) as cluster:
        client = smq.Client(settings=smq.Settings(url=cluster.url, cluster=True))
        queue = client.create_queue("hot", shards=3)
        for i in range(6):
            queue.send(f"before{i}")
        lost_shard = queue._shards()[lost]
        stranded = {m.body for m in lost_shard.peek(limit=100)}
        assert len(stranded) == 2
        port = owner(client, lost_shard.name).rpartition(":")[2]
        (lost_node,) = [node for node in cluster.nodes if str(node.port) == port]
        assert lost_node.process is not None
        lost_node.process.kill()
        lost_node.process.wait(10)
        # The client's open connection to that node breaks on its next call: a call that may
        # have run (OutcomeUnknown). From then on, connections are refused: nothing ran.
        with pytest.raises((smq.OutcomeUnknown, smq.Unavailable)):
            lost_shard.send("on the old connection")
        for i in range(12):
            queue.send(f"during{i}")
        result = queue.send_batch([smq.SendEntry(str(i), f"batch{i}") for i in range(10)])
        assert len(result.successful) == 10
        with pytest.raises(smq.Unavailable):
            lost_shard.send("straight to the lost shard")  # what the queue's sends went around
        got = drain(queue)  # the first receives since the kill: the script is loaded where it runs
        expected = {f"before{i}" for i in range(6)} - stranded
        expected |= {f"during{i}" for i in range(12)} | {f"batch{i}" for i in range(10)}
        assert sorted(m.body for m in got) == sorted(expected)
        for message in got:
            assert queue.delete(message)
        client.close()


def _woken_within(queue: smq.Queue, send: Callable[[], object], wait: int = 10) -> float:
    """Seconds a waiting receive on ``queue`` took to return what ``send`` sent 0.3 s after it began."""
    got: list[list[smq.Message]] = []
    waiting = threading.Thread(target=lambda: got.append(queue.receive(1, wait_time_seconds=wait)))
    started = time.monotonic()
    waiting.start()
    time.sleep(0.3)
    send()
    waiting.join(wait + 10)
    assert got and len(got[0]) == 1, "the poll returned nothing"
    queue.delete(got[0][0])
    return time.monotonic() - started


def test_long_polls_are_woken_while_one_shards_primary_is_down(tmp_path: Path) -> None:
    # Woken, each poll returns within a second or so; not woken, it would wait out its 10 s
    # (15 s over HTTP): the bounds below tell the two apart with room for a slow machine.
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            EmbeddedCluster(
                tmp_path, masters=3, node_timeout_ms=60_000, config=["cluster-require-full-coverage no"]
            )
        )
        client = stack.enter_context(smq.Client(settings=smq.Settings(url=cluster.url, cluster=True)))
        producer = stack.enter_context(smq.Client(settings=smq.Settings(url=cluster.url, cluster=True)))
        sharded = client.create_queue("hot", shards=3)
        lost_shard = sharded._shards()[1]
        lost_owner = owner(client, lost_shard.name)
        plain_name = next(f"plain{i}" for i in range(100) if owner(client, f"plain{i}") != lost_owner)
        plain = client.create_queue(plain_name)
        live_shard = next(s for s in sharded._shards() if owner(client, s.name) != lost_owner)
        assert _woken_within(plain, lambda: producer.queue(plain_name).send("x")) < 5
        server = Server(cluster.url, "--no-auth", "--cluster")
        stack.callback(server.stop)
        sqs = json_client(server.url)
        hot_url = sqs.get_queue_url(QueueName="hot")["QueueUrl"]
        assert sqs.receive_message(QueueUrl=hot_url, WaitTimeSeconds=1).get("Messages") is None
        (lost_node,) = [n for n in cluster.nodes if lost_owner.endswith(f":{n.port}")]
        assert lost_node.process is not None
        lost_node.process.kill()
        lost_node.process.wait(10)
        time.sleep(1.5)  # the client's wake-up connection to that node breaks meanwhile
        other = producer.queue("hot")._shards()[sharded.shard_names().index(live_shard.name)]
        for _ in range(2):
            # A poll of the sharded queue watches the lost shard's channel too; it must not
            # keep the wake-ups of the other shards, nor of other queues, from arriving.
            assert _woken_within(sharded, lambda: other.send("y")) < 5
            assert _woken_within(plain, lambda: producer.queue(plain_name).send("x")) < 5
        # The same through `smq serve`: its polls park on every shard's channel.
        for _ in range(2):
            replies: list[dict[str, Any]] = []
            waiting = threading.Thread(
                target=lambda replies=replies: replies.append(
                    sqs.receive_message(QueueUrl=hot_url, WaitTimeSeconds=15)
                )
            )
            started = time.monotonic()
            waiting.start()
            time.sleep(0.5)
            other.send("z")
            waiting.join(30)
            assert [m["Body"] for m in replies[0].get("Messages", [])] == ["z"], server.logs()[-2000:]
            assert time.monotonic() - started < 6
            sqs.delete_message(QueueUrl=hot_url, ReceiptHandle=replies[0]["Messages"][0]["ReceiptHandle"])


def test_the_event_streams_of_the_shards_read_as_one(client: smq.Client) -> None:
    queue = client.create_queue("hot", shards=3, event_stream_max_len=1000)
    for i in range(30):
        queue.send(f"m{i}")
    for message in drain(queue):
        queue.delete(message)
    everything = queue.events()
    assert Counter(e.kind for e in everything) == {"sent": 30, "received": 30, "deleted": 30}
    assert {e.event_id.rsplit("-", 1)[1] for e in everything} == {"0", "1", "2"}
    assert {e.queue for e in everything} == {"hot"}
    order = [(int(a), int(b), int(c)) for a, b, c in (e.event_id.split("-") for e in everything)]
    assert order == sorted(order)
    for message_id in {e.message_id for e in everything}:
        kinds = [e.kind for e in everything if e.message_id == message_id]
        assert kinds == ["sent", "received", "deleted"]
    for size in (1, 7, 30):  # pages of any size go on where the last ended: each event once
        paged: list[smq.Event] = []
        after = "-"
        while page := queue.events(after=after, limit=size):
            paged += page
            after = page[-1].event_id
        assert [e.event_id for e in paged] == [e.event_id for e in everything]
    with pytest.raises(smq.InvalidParameter):
        queue.events(after="junk")
