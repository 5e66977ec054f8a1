"""Failover chaos: kill -9 the primary under load, and count what the failover cost.

Two topologies, each with or without waiting for replicas:

- ``sentinel-failover``: a primary, 2 replicas and 3 Sentinels
  (``smq.embedded.EmbeddedSentinel``); everything connects with the
  ``redis+sentinel://`` URL. Each kill: SIGKILL the primary the Sentinels
  name, wait until they name another, start the killed node again as a
  replica of the new one (``replicaof``), and wait until it has caught up,
  so that the next failover has two replicas to choose from.
- ``cluster-failover``: a Redis Cluster of 3 primaries with one replica each
  (``smq.embedded.EmbeddedCluster(replicas=1)``, node timeout 1.5 s). Each
  kill: SIGKILL the primary of the queue's slot, wait until its replica has
  taken the slot over, start the killed node again (it rejoins as the new
  primary's replica) and wait until it has caught up.
- ``cluster-sharded-failover``: the same cluster, the queue in 3 shards (one
  per primary); each kill takes the primary of the next shard in turn, so
  every shard fails over once in three kills.

A suffix ``-wait1`` or ``-wait2`` sets ``wait_replicas`` for every client:
the producers (Python client threads, and one boto3 thread through `smq
serve`), the `smq worker` processes and the consumer threads that delete and
record their deletes. Besides the figures of ``check``, a run reports the
time until service resumed after each kill: from the kill to the
acknowledgement of the first send that started after it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _chaos import (
    EVENTS_MAX,
    QUEUE,
    Options,
    Result,
    _all_events,
    _boto3_sender,
    _consume_python,
    _drain,
    _produce,
    _python_sender,
    _Threads,
    boto3_client,
    paced_kills,
)
from _chaos_ledger import LedgerWriter, check, read_ledger
from _chaos_procs import Fleet, ServeProcess
from redis.cluster import key_slot

import smq
from smq._keys import QueueKeys
from smq.embedded import EmbeddedCluster, EmbeddedRedis, EmbeddedSentinel

TOPOLOGIES = ("sentinel-failover", "cluster-failover", "cluster-sharded-failover")
FAILOVER_SCENARIOS = (
    "sentinel-failover",
    "sentinel-failover-wait1",
    "sentinel-failover-wait2",
    "cluster-failover",
    "cluster-failover-wait1",
    "cluster-sharded-failover",
    "cluster-sharded-failover-wait1",
)
SHARDS = 3
VISIBILITY = 5
CLUSTER_NODE_TIMEOUT_MS = 1500
_FAILOVER_TIMEOUT = 60.0


def parse(scenario: str) -> tuple[str, int]:
    """(topology, wait_replicas) of a failover scenario's name."""
    if scenario not in FAILOVER_SCENARIOS:
        raise ValueError(f"unknown failover scenario {scenario!r}: one of {', '.join(FAILOVER_SCENARIOS)}")
    topology, _, wait = scenario.partition("-wait")
    return topology, int(wait or 0)


def _until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until it returns something true; errors count as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except Exception:  # a node killed a moment ago: ask again
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def _restart(node: EmbeddedRedis) -> None:
    for attempt in range(20):  # the port is ours again once the kernel lets go of it
        try:
            node.start()
            return
        except RuntimeError:
            time.sleep(0.1 * (attempt + 1))
    raise RuntimeError(f"Redis did not start again on port {node.port}")


def _kill(node: EmbeddedRedis) -> float:
    """SIGKILL ``node``; returns the moment (monotonic) it was dead."""
    assert node.process is not None
    node.process.kill()
    node.process.wait()
    return time.monotonic()


def _caught_up(node: EmbeddedRedis) -> bool:
    with node.client() as connection:
        info = connection.info("replication")
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


def _slot(queue: str) -> int:
    return int(key_slot(QueueKeys.of(queue).meta.encode()))


class _SentinelTopology:
    def __init__(self, folder: Path, options: Options) -> None:
        self.deployment = EmbeddedSentinel(
            folder / "sentinel",
            replicas=2,
            server=options.redis_server,
            down_after_ms=options.down_after_ms,
            config=options.redis_config,
        ).start()
        self.url = self.deployment.url
        self.cluster = False

    def fail_over(self) -> float:
        deployment = self.deployment
        old = deployment.primary_port()
        assert old is not None
        node = deployment.node_at(old)
        killed_at = _kill(node)
        new = _until(
            lambda: (port := deployment.primary_port()) not in (None, old) and port,
            _FAILOVER_TIMEOUT,
            "the Sentinels to name a new primary",
        )
        node.extra_config = [line for line in node.extra_config if not line.startswith("replicaof ")]
        node.extra_config.append(f"replicaof 127.0.0.1 {new}")
        _restart(node)
        # Against the primary the Sentinels name now: under load they may fail over again
        # on their own (a new primary that misses their pings for down_after_ms).
        _until(
            lambda: all(_caught_up(n) for n in deployment.nodes if n.port != deployment.primary_port()),
            60,
            "the replicas to catch up",
        )
        return killed_at

    def stop(self) -> None:
        self.deployment.stop()


class _ClusterTopology:
    def __init__(self, folder: Path, options: Options) -> None:
        self.cluster_nodes = EmbeddedCluster(
            folder / "cluster",
            replicas=1,
            server=options.redis_server,
            node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS,
            config=options.redis_config,
        ).start()
        self.url = self.cluster_nodes.url
        self.cluster = True
        self.slots = [_slot(QUEUE)]  # the queue's; of a sharded queue, each shard's (see aim)
        self.kills = 0

    def aim(self, shard_names: list[str]) -> None:
        """Kill the primaries of these queues' (shards') slots in turn."""
        self.slots = [_slot(name) for name in shard_names]

    def _primary_port(self) -> int | None:
        """The port of the primary serving the slot of the shard to kill next, as a live node sees it."""
        slot = self.slots[self.kills % len(self.slots)]
        for node in self.cluster_nodes.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            try:
                with node.client() as connection:
                    shards = connection.execute_command("CLUSTER SHARDS")
            except Exception:
                continue
            for shard in shards:
                ranges = shard[b"slots"]
                if not any(low <= slot <= high for low, high in zip(ranges[::2], ranges[1::2], strict=True)):
                    continue
                for entry in shard[b"nodes"]:
                    if entry[b"role"] == b"master" and entry[b"health"] == b"online":
                        return int(entry[b"port"])
            return None
        return None

    def fail_over(self) -> float:
        old = _until(self._primary_port, _FAILOVER_TIMEOUT, "the primary of the queue's slot")
        node = self.cluster_nodes.node_at(old)
        killed_at = _kill(node)
        new = _until(
            lambda: (port := self._primary_port()) not in (None, old) and port,
            _FAILOVER_TIMEOUT,
            "a replica to take the queue's slot over",
        )
        _restart(node)  # its nodes.conf names it; the cluster tells it it is a replica now
        _until(lambda: _caught_up(node), 60, "the restarted node to follow the new primary")
        assert self._primary_port() == new
        self.kills += 1
        return killed_at

    def stop(self) -> None:
        self.cluster_nodes.stop()


def run_failover(scenario: str, folder: Path, options: Options) -> Result:
    """Run a failover scenario (one of ``FAILOVER_SCENARIOS``) in ``folder``."""
    topology_name, wait = parse(scenario)
    folder.mkdir(parents=True, exist_ok=True)
    topology = (_SentinelTopology if topology_name == "sentinel-failover" else _ClusterTopology)(
        folder, options
    )
    shards = SHARDS if topology_name == "cluster-sharded-failover" else 1
    ledger = LedgerWriter(folder / "ledger.jsonl")
    settings = smq.Settings(url=topology.url, cluster=topology.cluster, wait_replicas=wait)
    client = smq.Client(settings=settings)
    try:
        return _run(scenario, wait, folder, options, topology, client, ledger, shards)
    finally:
        client.close()
        ledger.close()
        topology.stop()


def _run(
    scenario: str,
    wait: int,
    folder: Path,
    options: Options,
    topology: _SentinelTopology | _ClusterTopology,
    client: smq.Client,
    ledger: LedgerWriter,
    shards: int,
) -> Result:
    visibility = options.visibility_timeout or VISIBILITY
    queue = client.create_queue(
        QUEUE, visibility_timeout=visibility, event_stream_max_len=EVENTS_MAX, shards=shards
    )
    if isinstance(topology, _ClusterTopology):
        topology.aim(queue.shard_names())
    chance = random.Random(options.seed)
    producers, consumers = _Threads(), _Threads()
    connect = ["--cluster"] if topology.cluster else []
    if wait:
        connect += ["--wait-replicas", str(wait)]
    args = ["--visibility-timeout", str(visibility), "--concurrency", str(options.concurrency)]
    args += ["--wait-time", "1", "--grace-period", "20", *connect]
    fleet = Fleet(folder, topology.url, QUEUE, options.workers, args, options.work_ms)
    serve = ServeProcess(folder, topology.url, connect)
    notes: list[str] = []
    kills: list[float] = []
    started = time.monotonic()
    try:
        sqs = boto3_client(serve.url)
        url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
        rate = options.rate / options.producers
        producers.start(_produce, 0, _boto3_sender(sqs, url), ledger, rate)
        for index in range(1, options.producers):
            producers.start(_produce, index, _python_sender(queue), ledger, rate)
        for _ in range(options.consumers):
            consumers.start(_consume_python, queue, ledger, visibility)
        for _ in paced_kills(options.seconds, options.kill_every, chance):
            fleet.check()
            kills.append(topology.fail_over())
        producers.join()
        loaded = time.monotonic()
        fleet.await_started()
        left = _drain(queue, options.drain_timeout)
        drain_seconds = time.monotonic() - loaded
    finally:
        producers.join()
        consumers.join()
        fleet.stop()
        serve.stop()
        notes += fleet.bad_exits + producers.errors + consumers.errors
    lines = read_ledger(folder / "ledger.jsonl")
    figures, problems = check(lines, _all_events(queue), left)
    result = Result(
        scenario, figures, problems, len(kills), visibility, time.monotonic() - started, drain_seconds
    )
    result.notes = notes
    result.resume = resume_times(lines, kills)
    result.strict = wait > 0
    return result


def resume_times(lines: list[dict[str, Any]], kills: list[float]) -> list[float]:
    """Seconds from each kill to the acknowledgement of the first send begun after it."""
    sends = sorted((line["s"], line["at"]) for line in lines if line["k"] == "sent" and "s" in line)
    times = []
    for killed_at in kills:
        after = [acked for begun, acked in sends if begun > killed_at]
        times.append(round(min(after) - killed_at, 3) if after else float("inf"))
    return times
