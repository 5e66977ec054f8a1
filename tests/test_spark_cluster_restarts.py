"""A driver killed with kill -9 on a Spark standalone cluster the tests start (see
``test_spark_cluster.py``), then the same job again: the stream's output and the sink's queue
hold each message once.

A file of its own (and a cluster of its own), so that these long tests run beside the other
cluster tests on another pytest-xdist worker.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import smq
from smq.spark._stream_read import BatchRecord
from spark_cluster import StandaloneCluster, finish, standalone_cluster, submit

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    with standalone_cluster(workers=2, cores_per_worker=1, memory="1g") as started:
        yield started


def committed_rows(folder: Path) -> Any:
    """The rows of Spark's file sink in ``folder``, through its ``_spark_metadata`` log, as Spark
    reads them: the files the log adds and does not delete (a killed attempt's files are not in it)."""
    files: dict[str, bool] = {}
    logs = [p for p in (folder / "_spark_metadata").iterdir() if re.fullmatch(r"\d+(\.compact)?", p.name)]
    for log in sorted(logs, key=lambda p: int(p.name.split(".")[0])):
        for line in log.read_text().splitlines()[1:]:  # the first line is the log's version
            entry = json.loads(line)
            files[entry["path"]] = entry["action"] == "add"
    paths = [path.removeprefix("file://") for path, added in files.items() if added]
    return pq.ParquetDataset(paths).read()


EXACTLY_JOB = """
import os
import time

import smq
from pyspark.sql.functions import udf
from smq.spark import spark_session

url, folder, total = os.environ["SMQ_REDIS_URL"], os.environ["JOB_FOLDER"], int(os.environ["JOB_TOTAL"])
spark = spark_session(app_name="exactly-once")


@udf("string")
def slow(body):
    time.sleep(0.004)  # tasks take a while: a kill can land while they run
    return body


stream = (
    spark.readStream.format("smq").option("url", url).option("queue", "exactly")
    .option("numPartitions", "2").option("maxMessagesPerBatch", "400").option("visibilityTimeout", "10")
    .load()
)
query = (
    stream.select("message_id", slow("body").alias("body")).writeStream.format("parquet")
    .option("path", f"{folder}/out").option("checkpointLocation", f"{folder}/ck")
    .trigger(processingTime="1 second").start()
)
queue = smq.Client(url).get_queue("exactly")
deadline = time.monotonic() + 240
while time.monotonic() < deadline and query.isActive:
    info = queue.attributes()
    if info.visible + info.in_flight == 0 and info.counters.get("deleted", 0) >= total:
        break
    time.sleep(0.2)
print("ended", query.exception())
query.stop()
spark.stop()
"""


class _Checkpoint:
    """What a streaming query's checkpoint and the queue say, read from outside while it runs."""

    def __init__(self, folder: Path, queue: smq.Queue) -> None:
        self.folder, self.queue = folder, queue

    def last(self, log: str) -> int:
        """The newest batch id in the checkpoint's ``offsets`` or ``commits`` log, -1 if none."""
        return max((int(p.name) for p in (self.folder / log).glob("*") if p.name.isdigit()), default=-1)

    def recorded(self, batch: int) -> int:
        """How many shares of Spark's batch ``batch`` its tasks have recorded."""
        offset = self.folder / "offsets" / str(batch)
        try:
            position = json.loads(offset.read_text().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            return 0
        record = BatchRecord("exactly", position["reader"], position["batch"])
        return int(self.queue._client._redis.hlen(record.rows))  # the test's own client

    def deleted(self) -> int:
        return self.queue.attributes().counters.get("deleted", 0)


def test_a_driver_killed_at_each_point_of_a_batch_s_life_writes_each_message_once(
    cluster: StandaloneCluster, redis_client: smq.Client, tmp_path: Path
) -> None:
    """kill -9 of the driver (spark-submit's JVM and its Pythons) at each point of a micro-batch's
    life, then the same query again from its checkpoint, into Spark's file sink: the output holds
    each message once, and the queue ends empty. The points, each a run of its own:

    1. planned: Spark logged the batch's offset; no task has recorded a share yet;
    2. tasks running: shares recorded, the batch not committed;
    3. after the commit log: Spark committed the batch, none of its messages is deleted yet;
    4. during the deletes: the next batch's tasks have begun to delete the batch's messages.

    The records outlive the driver, and its 10 s visibility timeout runs out while the next one
    starts: the restarted driver hides the replayed batch again.
    """
    total = 4000
    queue = redis_client.create_queue("exactly")
    for start in range(0, total, 10):
        queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(start, start + 10)])
    job = tmp_path / "exactly_job.py"
    job.write_text(EXACTLY_JOB)
    env = {
        **os.environ,
        "SMQ_REDIS_URL": redis_client.settings.url,
        "JOB_FOLDER": str(tmp_path),
        "JOB_TOTAL": str(total),
    }
    checkpoint = _Checkpoint(tmp_path / "ck", queue)

    # Each predicate sees the checkpoint as the run found it (``first``): it waits for this run's
    # own progress, not what an earlier run left.
    def planned(first: tuple[int, int, int]) -> bool:
        batch = checkpoint.last("offsets")
        return batch > checkpoint.last("commits") and checkpoint.recorded(batch) == 0

    def running(first: tuple[int, int, int]) -> bool:
        batch = checkpoint.last("offsets")
        shares = checkpoint.recorded(batch)
        return batch > checkpoint.last("commits") and shares > 0 and (batch, shares) != first[:2]

    def committed(first: tuple[int, int, int]) -> bool:
        batch = checkpoint.last("commits")
        return batch > first[2] and checkpoint.last("offsets") == batch  # the next one is not planned

    marks: dict[int, int] = {}  # batch committed in this run -> messages deleted when it was seen

    def deleting(first: tuple[int, int, int]) -> bool:
        batch = checkpoint.last("commits")
        if batch <= first[2]:
            return False
        return checkpoint.deleted() > marks.setdefault(batch, checkpoint.deleted())

    seen = {
        point: _kill_when(cluster, job, env, ready, checkpoint)
        for point, ready in (
            ("planned", planned),
            ("running", running),
            ("committed", committed),
            ("deleting", deleting),
        )
    }
    running_job = submit(cluster.master_url, job, env, new_session=True)
    code, out, err = finish(running_job, timeout=300)
    said = "\n".join(line for line in err.splitlines() if " INFO " not in line)
    assert code == 0 and "ended None" in out, said[-3000:]
    ids = committed_rows(tmp_path / "out").column("message_id").to_pylist()
    assert len(ids) == len(set(ids)) == total, (len(ids), len(set(ids)), seen)
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, total), seen
    # Each kill landed where it was meant to (what the checkpoint and queue said at the kill).
    assert all(seen[point].startswith("killed") for point in seen), seen
    print("kills:", seen)


def _kill_when(
    cluster: StandaloneCluster, job: Path, env: dict[str, str], ready: Any, checkpoint: _Checkpoint
) -> str:
    """Submit ``job``; kill -9 its driver's process group as soon as ``ready()``; say what was seen."""
    offsets = checkpoint.last("offsets")
    first = (offsets, checkpoint.recorded(offsets), checkpoint.last("commits"))
    running = submit(cluster.master_url, job, env, new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and running.poll() is None:
            if ready(first):
                os.killpg(running.pid, signal.SIGKILL)
                running.wait(timeout=30)
                state = (checkpoint.last("offsets"), checkpoint.last("commits"), checkpoint.deleted())
                return f"killed at offsets/commits/deleted {state}"
            time.sleep(0.005)
        return f"not reached (exit {running.poll()})"
    finally:
        if running.poll() is None:
            os.killpg(running.pid, signal.SIGKILL)
        finish(running, timeout=60)
        _wait_for_no_application(cluster)


def _wait_for_no_application(cluster: StandaloneCluster) -> None:
    """The master has seen the killed driver go (its executors freed for the next run)."""
    deadline = time.monotonic() + 60
    while (cluster.status().get("activeapps") or cluster.executor_pids()) and time.monotonic() < deadline:
        time.sleep(0.2)


SINK_JOB = """
import os
import time

from pyspark.sql.functions import udf
from smq.spark import spark_session

url, total = os.environ["SMQ_REDIS_URL"], int(os.environ["JOB_TOTAL"])
spark = spark_session(app_name="sink-rerun")


@udf("string")
def slow(body):
    time.sleep(0.001)  # the write takes a while: a kill lands in its middle
    return body


rows = spark.range(0, total, 1, 8).selectExpr("concat('row ', id) AS body").select(slow("body").alias("body"))
writer = rows.write.format("smq").option("url", url).option("queue", "written").mode("append")
if os.environ.get("WRITE_ID"):
    writer = writer.option("writeId", os.environ["WRITE_ID"])
writer.save()
print("written")
spark.stop()
"""


def test_a_sink_job_whose_driver_was_killed_mid_write_runs_again_with_its_printed_id(
    cluster: StandaloneCluster, redis_client: smq.Client, tmp_path: Path
) -> None:
    """kill -9 of a sink job's driver mid-write; the write id it printed at the start, given to the
    same job run again, makes the queue hold each row once."""
    total = 20_000
    queue = redis_client.create_queue("written")
    job = tmp_path / "sink_job.py"
    job.write_text(SINK_JOB)
    env = {**os.environ, "SMQ_REDIS_URL": redis_client.settings.url, "JOB_TOTAL": str(total)}
    running = submit(cluster.master_url, job, env, new_session=True)
    try:
        deadline = time.monotonic() + 180
        while queue.attributes().visible < total // 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.killpg(running.pid, signal.SIGKILL)
    finally:
        _, _, err = finish(running, timeout=60)
        _wait_for_no_application(cluster)
    (write_id,) = re.findall(r'use option\("writeId", "(\w+)"\)', err)
    sent = queue.attributes().visible
    assert total // 4 <= sent < total  # killed mid-write
    code, out, err = finish(submit(cluster.master_url, job, {**env, "WRITE_ID": write_id}))
    assert code == 0 and "written" in out, "\n".join(
        line for line in err.splitlines() if " INFO " not in line
    )
    assert queue.attributes().visible == total
    bodies: list[str] = []
    while batch := queue.receive(10, visibility_timeout=600):
        bodies += [m.body for m in batch]
    assert len(bodies) == len(set(bodies)) == total
    print(f"sink rerun: {sent} sent before the kill, {total} after the rerun")
