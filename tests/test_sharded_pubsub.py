"""Long-poll wake-ups on a Redis Cluster: sharded Pub/Sub (SPUBLISH) on Redis 7+ and
Valkey, so a notification reaches only the queue's node; plain PUBLISH, sent to every
node, on Redis 6.2. Real 3-primary clusters, started here."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import smq
from conftest import server_binary
from smq.embedded import EmbeddedCluster, EmbeddedRedis


def listeners(cluster: EmbeddedCluster, channel: str) -> list[redis.client.PubSub]:
    """A plain subscriber to ``channel`` on every node: what a PUBLISH would reach."""
    subscribers = []
    for node in cluster.nodes:
        pubsub = node.client().pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(channel)
        subscribers.append(pubsub)
    return subscribers


def woken_receive(client: smq.Client, producer: smq.Client, name: str) -> float:
    """Seconds a waiting receive on queue ``name`` took to return the message another client sent."""
    queue = client.get_queue(name)
    got: list[list[smq.Message]] = []
    waiting = threading.Thread(target=lambda: got.append(queue.receive(1, wait_time_seconds=20)))
    started = time.monotonic()
    waiting.start()
    time.sleep(0.5)
    producer.get_queue(name).send("wake")
    waiting.join(30)
    assert [m.body for m in got[0]] == ["wake"]
    return time.monotonic() - started


def test_a_wake_up_goes_only_to_the_queues_node(redis_cluster: EmbeddedCluster) -> None:
    with (
        smq.Client(settings=smq.Settings(url=redis_cluster.url, cluster=True)) as client,
        smq.Client(settings=smq.Settings(url=redis_cluster.url, cluster=True)) as other,
    ):
        queue = client.create_queue("sharded-wake")
        plain = listeners(redis_cluster, queue.keys.wake_channel)
        try:
            assert woken_receive(client, other, "sharded-wake") < 10
            assert client._scripts.sharded and other._scripts.sharded
            time.sleep(0.2)
            heard = [p.get_message(timeout=0.1) for p in plain]
            assert heard == [None] * len(plain), "a plain subscriber heard the wake-up: it was broadcast"
        finally:
            for pubsub in plain:
                pubsub.close()
        # The channel is a shard channel of the node that serves the queue's slot, and of no other.
        counts = []
        for node in redis_cluster.nodes:
            with node.client() as raw:
                counts.append(raw.execute_command("PUBSUB", "SHARDCHANNELS", "smq:*"))
        assert sum(len(found) for found in counts) == 0  # the poll has ended: nothing stays subscribed


def test_plain_pub_sub_when_asked_or_on_redis_6(redis_cluster: EmbeddedCluster, tmp_path: Path) -> None:
    settings = smq.Settings(url=redis_cluster.url, cluster=True, sharded_pubsub=False)
    with smq.Client(settings=settings) as client, smq.Client(settings=settings) as other:
        client.create_queue("plain-wake")
        assert woken_receive(client, other, "plain-wake") < 10
        assert not client._scripts.sharded


@pytest.fixture
def old_cluster(tmp_path: Path) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "cluster-6.2", masters=3, server=server_binary("redis-6.2")) as cluster:
        yield cluster


def test_redis_6_clusters_wake_through_plain_pub_sub(old_cluster: EmbeddedCluster) -> None:
    with (
        smq.Client(settings=smq.Settings(url=old_cluster.url, cluster=True)) as client,
        smq.Client(settings=smq.Settings(url=old_cluster.url, cluster=True)) as other,
    ):
        client.create_queue("old-wake")
        assert woken_receive(client, other, "old-wake") < 10
        assert not client._scripts.sharded
    asked = smq.Settings(url=old_cluster.url, cluster=True, sharded_pubsub=True)
    with smq.Client(settings=asked) as client:
        with pytest.raises(smq.UnsafeRedisConfig, match="sharded Pub/Sub needs Redis 7 or later"):
            client.create_queue("other")


def test_the_listener_comes_back_after_the_queues_node_restarts(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path / "cluster", masters=3) as cluster:
        settings = smq.Settings(url=cluster.url, cluster=True)
        with smq.Client(settings=settings) as client, smq.Client(settings=settings) as other:
            queue = client.create_queue("restart-wake")
            assert (
                woken_receive(client, other, "restart-wake") < 10
            )  # the listener holds the queue's node now
            node = next(n for n in cluster.nodes if queue.keys.meta in _keys_of(n))
            assert node.process is not None
            node.process.kill()
            node.process.wait()
            node.start()  # same folder and port: it serves the same slots again
            deadline = time.monotonic() + 30
            while True:
                try:
                    took = woken_receive(client, other, "restart-wake")
                    break
                except smq.SmqError:
                    assert time.monotonic() < deadline, "no wake-up after the node came back"
                    time.sleep(0.2)
            assert took < 10


def _keys_of(node: EmbeddedRedis) -> list[str]:
    with node.client() as raw:
        return [key.decode() for key in raw.keys("smq:*")]


@pytest.mark.parametrize("watching", [False, True])
def test_the_listener_idles_while_the_cluster_is_gone(tmp_path: Path, watching: bool) -> None:
    # A hung-up node connection whose channels are all unsubscribed stays readable; the
    # listener must not spin on it. Nor on a node that is gone while a poll still watches it.
    cluster = EmbeddedCluster(tmp_path, masters=3).start()
    client = smq.Client(settings=smq.Settings(url=cluster.url, cluster=True))
    try:
        queue = client.create_queue("idle", shards=3)
        assert queue.receive(1, wait_time_seconds=1) == []  # subscribes every shard, then leaves
        polls: list[threading.Thread] = []
        if watching:
            polls.append(threading.Thread(target=lambda: _quietly(queue), daemon=True))
            polls[0].start()
            time.sleep(0.5)
        cluster.stop()
        time.sleep(1.0)
        started = time.process_time()
        time.sleep(2.0)
        used = time.process_time() - started
        assert used < 0.5, f"{used:.2f} s of CPU in 2 s of waiting: something spins"
    finally:
        client.close()
        cluster.stop()


def _quietly(queue: smq.Queue) -> None:
    try:
        queue.receive(1, wait_time_seconds=6)
    except smq.SmqError:
        pass
