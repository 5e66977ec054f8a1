"""Redis Cluster specifics: queues spread over slots, moves cross them."""

from __future__ import annotations

import time
from pathlib import Path

from redis.cluster import RedisCluster
from redis.crc import key_slot

import smq
from conftest import Clock
from smq.embedded import EmbeddedCluster, EmbeddedRedis


def _cluster_client(cluster: EmbeddedCluster) -> smq.Client:
    client = smq.Client(settings=smq.Settings(url=cluster.url, cluster=True))
    client._redis.flushall(target_nodes=RedisCluster.PRIMARIES)
    return client


def test_queues_spread_over_the_cluster_primaries(redis_cluster: EmbeddedCluster) -> None:
    client = _cluster_client(redis_cluster)
    names = [f"q{n}" for n in range(30)]
    for name in names:
        client.create_queue(name).send(name)
    nodes = {client._redis.get_node_from_key(f"smq:{{{name}}}:meta").name for name in names}
    assert len(nodes) == 3
    assert sorted(client.list_queues("q")) == sorted(names)
    for name in names:
        (message,) = client.queue(name).receive()
        assert message.body == name


def test_dead_letter_move_and_redrive_cross_primaries(redis_cluster: EmbeddedCluster) -> None:
    client = _cluster_client(redis_cluster)
    source, target = "src", "dlq-3"
    source_node = client._redis.get_node_from_key(f"smq:{{{source}}}:meta").name
    target_node = client._redis.get_node_from_key(f"smq:{{{target}}}:meta").name
    assert key_slot(source.encode()) != key_slot(target.encode())
    assert source_node != target_node, "pick names on two different primaries"
    clock = Clock(client)
    dlq = client.create_queue(target)
    queue = client.create_queue(source, visibility_timeout=5, redrive_policy=smq.RedrivePolicy(target, 1))
    queue.send_batch([smq.SendEntry(f"e{n}", f"m{n}") for n in range(10)])
    assert len(queue.receive(10)) == 10
    clock.advance(5)
    assert queue.receive(10) == []
    assert dlq.attributes().visible == 10
    assert client.redrive(target) == 10
    assert sorted(m.body for m in queue.receive(10)) == [f"m{n}" for n in range(10)]


def test_scripts_load_on_every_primary(redis_cluster: EmbeddedCluster) -> None:
    client = _cluster_client(redis_cluster)
    for node in client._redis.get_primaries():
        client._redis.get_redis_connection(node).script_flush()
    for n in range(12):
        client.create_queue(f"fresh{n}").send("x")  # NOSCRIPT on each node, then loaded
    assert all(len(client.queue(f"fresh{n}").receive()) == 1 for n in range(12))


def test_a_call_routed_to_the_wrong_primary_follows_moved_and_runs_once(
    redis_cluster: EmbeddedCluster,
) -> None:
    client = _cluster_client(redis_cluster)
    queue = client.create_queue("jobs")
    cluster = client._redis
    right = cluster.get_node_from_key(queue.keys.meta)
    wrong = next(node for node in cluster.get_primaries() if node.name != right.name)
    cluster.get_redis_connection(wrong)  # connected, so the lean path takes it
    real = cluster.nodes_manager.get_node_from_slot
    calls = []

    def stale_map(slot: int, *args: object, **kwargs: object) -> object:
        calls.append(slot)
        return wrong if len(calls) == 1 else real(slot, *args, **kwargs)

    cluster.nodes_manager.get_node_from_slot = stale_map
    try:
        queue.send("once")  # MOVED from the wrong node: the script did not run there
    finally:
        cluster.nodes_manager.get_node_from_slot = real
    assert calls
    assert [m.body for m in queue.receive(10)] == ["once"]
    assert queue.attributes().counters["sent"] == 1


def test_a_cluster_with_replicas_fails_over_and_clients_follow(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path / "cluster", replicas=1, node_timeout_ms=1000) as cluster:
        roles = [_role(node) for node in cluster.nodes]
        assert sorted(roles) == ["master"] * 3 + ["slave"] * 3
        settings = smq.Settings(url=cluster.url, cluster=True)  # the defaults: wait for replicas
        with smq.Client(settings=settings) as client:
            queue = client.create_queue("jobs")
            queue.send("before")  # waited for: on the replica too
            wait = client._scripts.wait
            assert wait is not None and wait.every, "a cluster with replicas waits for them by default"
            port = int(client._redis.get_node_from_key("smq:{jobs}:meta").port)
            primary = cluster.node_at(port)
            assert primary.process is not None
            primary.process.kill()
            primary.process.wait()
            replica = cluster.nodes[cluster.masters + cluster.nodes.index(primary)]
            deadline = time.monotonic() + 30
            while _role(replica) != "master":  # the node timeout (1 s) passes, then the election
                assert time.monotonic() < deadline, "the replica was not promoted in 30 s"
                time.sleep(0.1)
            primary.start()  # it rejoins as the replica of the promoted one, for the wait
            while True:  # CLUSTERDOWN and refused connections are Unavailable: send again
                try:
                    queue.send("after")
                    break
                except (smq.Unavailable, smq.OutcomeUnknown):  # unknown: a connection the kill broke
                    assert time.monotonic() < deadline, "no send through the promoted replica in 30 s"
                    time.sleep(0.2)
            assert {m.body for m in queue.receive(10)} == {"after", "before"}
            assert int(client._redis.get_node_from_key("smq:{jobs}:meta").port) != port


def _role(node: EmbeddedRedis) -> str:
    with node.client() as connection:
        return str(connection.info("replication")["role"])
