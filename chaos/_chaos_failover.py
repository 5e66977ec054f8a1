"""Failover chaos: kill -9 or pause the primary under load, and count what the failover cost.

Topologies:

- ``sentinel-failover``: a primary, 2 replicas and 3 Sentinels
  (``smq.embedded.EmbeddedSentinel``, whose data nodes set
  ``min-replicas-to-write 1``); everything connects with the
  ``redis+sentinel://`` URL. Each kill: SIGKILL the primary the Sentinels
  name, wait until they name another, start the killed node again as a
  replica of the new one (``replicaof``), and wait until it has caught up,
  so that the next failover has two replicas to choose from.
- ``sentinel-pause``: the same deployment; each fault pauses the primary
  (SIGSTOP: a stalled VM, a long stop of the world) until the Sentinels have
  promoted another and ``PAUSE_AFTER_FAILOVER`` seconds more, then wakes it
  (SIGCONT). It wakes still a primary and answers what its clients had sent
  it meanwhile, until the Sentinels demote it, which erases those writes:
  the classic way a failover loses acknowledged changes.
- ``cluster-failover``: a Redis Cluster of 3 primaries with one replica each
  (``smq.embedded.EmbeddedCluster(replicas=1)``, node timeout 1.5 s). Each
  kill: SIGKILL the primary of the queue's slot, wait until its replica has
  taken the slot over, start the killed node again (it rejoins as the new
  primary's replica) and wait until it has caught up.
- ``cluster-sharded-failover``: the same cluster, the queue in 3 shards (one
  per primary); each kill takes the primary of the next shard in turn, so
  every shard fails over once in three kills.

With no suffix every client runs at smq's defaults (``wait_replicas``
decided at start: 1 here, as every topology has replicas). A suffix sets it
for every client, the producers (Python client threads, and one boto3
thread through `smq serve`), the `smq worker` processes and the consumer
threads that delete and record their deletes: ``-async`` opts out
(``wait_replicas=0``), ``-bare`` opts out on data nodes without
``min-replicas-to-write`` (how smq ran before waiting was the default),
``-wait1`` and ``-wait2`` ask for that many. Besides the figures of
``check``, a run reports the time until service resumed after each fault:
from the kill (or pause) to the acknowledgement of the first send that
started after it.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _chaos import (
    EVENTS_MAX,
    QUEUE,
    Options,
    Result,
    _all_events,
    _boto3_sender,
    _consume_boto3,
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
from smq.core._keys import QueueKeys
from smq.embedded import EmbeddedCluster, EmbeddedRedis, EmbeddedSentinel

TOPOLOGIES = ("sentinel-failover", "sentinel-pause", "cluster-failover", "cluster-sharded-failover")
FAILOVER_SCENARIOS = (
    "sentinel-failover",
    "sentinel-failover-async",
    "sentinel-failover-bare",
    "sentinel-failover-wait1",
    "sentinel-failover-wait2",
    "sentinel-pause",
    "sentinel-pause-async",
    "sentinel-pause-bare",
    "cluster-failover",
    "cluster-failover-async",
    "cluster-sharded-failover",
    "cluster-sharded-failover-async",
)
SHARDS = 3
VISIBILITY = 5
CLUSTER_NODE_TIMEOUT_MS = 1500
PAUSE_AFTER_FAILOVER = 2.0
_FAILOVER_TIMEOUT = 60.0


@dataclass(frozen=True)
class Scenario:
    """What a failover scenario's name says."""

    topology: str
    wait_replicas: int | None  # None: smq's default (decided at start)
    guarded: bool = True  # the data nodes set min-replicas-to-write

    @property
    def strict(self) -> bool:
        """Whether the run must hold the bar (else its losses are measured, not a fault)."""
        return self.wait_replicas is None or self.wait_replicas > 0


def parse(scenario: str) -> Scenario:
    """The topology and settings of a failover scenario's name."""
    if scenario not in FAILOVER_SCENARIOS:
        raise ValueError(f"unknown failover scenario {scenario!r}: one of {', '.join(FAILOVER_SCENARIOS)}")
    for topology in sorted(TOPOLOGIES, key=len, reverse=True):
        if scenario.startswith(topology):
            suffix = scenario[len(topology) :]
            break
    if suffix == "":
        return Scenario(topology, None)
    if suffix == "-async":
        return Scenario(topology, 0)
    if suffix == "-bare":
        return Scenario(topology, 0, guarded=False)
    return Scenario(topology, int(suffix.removeprefix("-wait")))


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
    def __init__(self, folder: Path, options: Options, scenario: Scenario) -> None:
        guard = {} if scenario.guarded else {"min_replicas_to_write": 0}
        self.deployment = EmbeddedSentinel(
            folder / "sentinel",
            replicas=2,
            server=options.redis_server,
            down_after_ms=options.down_after_ms,
            config=options.redis_config,
            **guard,
        ).start()
        self.url = self.deployment.url
        self.cluster = False
        self.pause = scenario.topology == "sentinel-pause"

    def fail_over(self) -> float:
        return self._pause() if self.pause else self._kill()

    def _kill(self) -> float:
        deployment = self.deployment
        old = deployment.primary_port()
        assert old is not None
        node = deployment.node_at(old)
        killed_at = _kill(node)
        new = self._new_primary(old)
        node.extra_config = [line for line in node.extra_config if not line.startswith("replicaof ")]
        node.extra_config.append(f"replicaof 127.0.0.1 {new}")
        _restart(node)
        self._caught_up()
        return killed_at

    def _pause(self) -> float:
        """SIGSTOP the primary past its failover, then SIGCONT: it wakes a deposed primary."""
        deployment = self.deployment
        old = deployment.primary_port()
        assert old is not None
        node = deployment.node_at(old)
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        try:
            self._new_primary(old)
            time.sleep(PAUSE_AFTER_FAILOVER)
        finally:
            os.kill(node.process.pid, signal.SIGCONT)
        # The Sentinels demote it once they see it again; then it resyncs from the new primary.
        self._caught_up()
        return paused_at

    def _new_primary(self, old: int) -> int:
        deployment = self.deployment
        return int(
            _until(
                lambda: (port := deployment.primary_port()) not in (None, old) and port,
                _FAILOVER_TIMEOUT,
                "the Sentinels to name a new primary",
            )
        )

    def _caught_up(self) -> None:
        # Against the primary the Sentinels name now: under load they may fail over again
        # on their own (a new primary that misses their pings for down_after_ms).
        deployment = self.deployment
        _until(
            lambda: all(_caught_up(n) for n in deployment.nodes if n.port != deployment.primary_port()),
            60,
            "the replicas to catch up",
        )

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
    parsed = parse(scenario)
    folder.mkdir(parents=True, exist_ok=True)
    topology: _SentinelTopology | _ClusterTopology
    if parsed.topology.startswith("sentinel-"):
        topology = _SentinelTopology(folder, options, parsed)
    else:
        topology = _ClusterTopology(folder, options)
    shards = SHARDS if parsed.topology == "cluster-sharded-failover" else 1
    ledger = LedgerWriter(folder / "ledger.jsonl")
    wait = parsed.wait_replicas
    settings = smq.Settings(url=topology.url, cluster=topology.cluster, wait_replicas=wait)
    client = smq.Client(settings=settings)
    try:
        return _run(scenario, parsed, folder, options, topology, client, ledger, shards)
    finally:
        client.close()
        ledger.close()
        topology.stop()


def _run(
    scenario: str,
    parsed: Scenario,
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
    if parsed.wait_replicas is not None:
        connect += ["--wait-replicas", str(parsed.wait_replicas)]
    args = ["--visibility-timeout", str(visibility), "--concurrency", str(options.concurrency)]
    args += ["--wait-time", "1", "--grace-period", "20", *connect]
    fleet = Fleet(folder, topology.url, QUEUE, options.workers, args, options.work_ms, options.handler)
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
        # With two consumers or more, one receives and deletes over the SQS API too.
        for index in range(options.consumers):
            if index == 0 and options.consumers > 1:
                consumers.start(_consume_boto3, sqs, url, ledger, visibility)
            else:
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
    result.strict = parsed.strict
    return result


def resume_times(lines: list[dict[str, Any]], kills: list[float]) -> list[float]:
    """Seconds from each kill to the acknowledgement of the first send begun after it."""
    sends = sorted((line["s"], line["at"]) for line in lines if line["k"] == "sent" and "s" in line)
    times = []
    for killed_at in kills:
        after = [acked for begun, acked in sends if begun > killed_at]
        times.append(round(min(after) - killed_at, 3) if after else float("inf"))
    return times
