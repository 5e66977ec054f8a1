"""Jobs on a Spark standalone cluster the tests start themselves (a master and two workers, by
``spark-class``, see ``spark_cluster.py``), submitted by ``smq spark-submit --master spark://...``.
The executors, JVMs of their own started by the workers, write 200 rows to a queue through the smq
sink and read them back with a snapshot read; each test gets smq onto them one of the ways
docs/spark.md names."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import smq
from conftest import building_from_the_checkout
from smq.spark._stream_read import BatchRecord
from spark_cluster import StandaloneCluster, descendants, standalone_cluster

pytestmark = pytest.mark.slow

SMQ = str(Path(sys.executable).parent / "smq")

JOB = """
import importlib.metadata
import os
import shutil
import sys
import tarfile

from smq.spark import spark_session


def where(_):
    # On an executor: the Python that runs the tasks, and where it found smq and redis-py.
    import importlib.util

    import redis
    import smq

    yield sys.executable, smq.__file__, redis.__file__, importlib.util.find_spec("hiredis") is not None


spark = spark_session(app_name=sys.argv[1])
url = os.environ["SMQ_REDIS_URL"]
rows = spark.range(0, 200, 1, 4).selectExpr("concat('row ', id) AS body", "id % 3 AS part")
rows.write.format("smq").option("url", url).option("queue", "cluster").option(
    "attributeColumns", "part"
).mode("append").save()
read = spark.read.format("smq").option("url", url).option("queue", "cluster").load()
print("master", spark.sparkContext.master)
print("read", read.count(), read.select("body").distinct().count())
# The streaming source: planned in a Python worker of the driver (PYSPARK_PYTHON), read by tasks.
spark.range(0, 50, 1, 2).selectExpr("concat('s ', id) AS body").write.format("smq").option(
    "url", url
).option("queue", "cluster-stream").mode("append").save()
query = (
    spark.readStream.format("smq").option("url", url).option("queue", "cluster-stream").load()
    .writeStream.format("memory").queryName("streamed").option("checkpointLocation", "stream-ck")
    .trigger(processingTime="1 second").start()
)
import time

deadline = time.monotonic() + 120
streamed = (0, 0)
while time.monotonic() < deadline and query.isActive:
    streamed = spark.sql("SELECT count(*), count(DISTINCT body) FROM streamed").collect()[0]
    if streamed[0] >= 50:
        break
    time.sleep(0.5)
error = query.exception()
query.stop()
print("streamed", *streamed, error)
for found in sorted(set(spark.sparkContext.parallelize(range(4), 4).mapPartitions(where).collect())):
    print("executor", *found)
spark.stop()
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    with standalone_cluster(workers=2, cores_per_worker=1, memory="1g") as started:
        yield started


def submit(
    master: str, job: Path, env: dict[str, str], *options: str, new_session: bool = False
) -> subprocess.Popen[str]:
    """Start ``smq spark-submit`` of ``job`` on ``master`` (no UI, small executors), in ``job``'s folder
    (with ``new_session``, as a process group of its own, for a kill -9 of the whole driver)."""
    command = [SMQ, "spark-submit", "--master", master]
    command += ["--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=512m"]
    command += [*options, str(job)]
    return subprocess.Popen(
        command,
        cwd=job.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


def finish(job: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str, str]:
    """Wait for a submitted job: its exit code, stdout and stderr (killed at the deadline)."""
    try:
        out, err = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        job.kill()
        out, err = job.communicate()
    return job.returncode, out, err


def run_job(
    cluster: StandaloneCluster, redis_client: smq.Client, folder: Path, app: str, *options: str, **env: str
) -> list[list[str]]:
    """Run JOB as application ``app`` on ``cluster``; check what it did in Redis and on the cluster.

    Returns what each executor's Python said (its executable, smq's and redis-py's files, and
    whether hiredis is there).
    """
    queue = redis_client.create_queue("cluster")
    redis_client.create_queue("cluster-stream", visibility_timeout=60)
    job = folder / "job.py"
    job.write_text(JOB.replace("sys.argv[1]", repr(app)))
    running = submit(
        cluster.master_url, job, {**os.environ, "SMQ_REDIS_URL": redis_client.settings.url, **env}, *options
    )
    try:
        executors = cluster.wait_for_executors(2, timeout=120)  # JVMs of their own, one per worker
    finally:
        code, out, err = finish(running)
    assert code == 0, "\n".join(line for line in err.splitlines() if " INFO " not in line)[-3000:]
    assert f"master {cluster.master_url}" in out
    assert "read 200 200" in out
    assert "streamed 50 50 None" in out, out[-2000:]
    (done,) = [a for a in cluster.status()["completedapps"] if a["name"] == app]
    assert done["state"] == "FINISHED"
    # Both workers ran executors of the job (each offers one core; the job asked for all).
    logs = [list((cluster.folder / "work" / f"worker-{n}" / done["id"]).glob("*/stderr")) for n in (0, 1)]
    assert all(logs), cluster.logs()
    assert not any(_running(pid) for pid in executors)  # they ended with the application
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.delayed) == (200, 0, 0)
    peeked = [m for offset in range(0, 200, 100) for m in queue.peek(limit=100, offset=offset)]
    bodies = {m.body: m.attributes["part"].value for m in peeked}
    assert bodies == {f"row {n}": str(n % 3) for n in range(200)}
    return [line.split()[1:] for line in out.splitlines() if line.startswith("executor ")]


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def executor_logs(cluster: StandaloneCluster, app: str) -> str:
    (done,) = [a for a in cluster.status()["completedapps"] if a["name"] == app]
    return "".join(
        p.read_text(errors="replace") for p in cluster.folder.glob(f"work/*/{done['id']}/*/stderr")
    )


def test_a_job_runs_on_a_standalone_cluster_the_test_starts(
    cluster: StandaloneCluster, redis_client: smq.Client, tmp_path: Path
) -> None:
    """smq installed on each host: the executors run this Python, where smq is installed."""
    found = run_job(cluster, redis_client, tmp_path, "smq-installed")
    assert {Path(executable).parent for executable, *_ in found} == {Path(sys.executable).parent}
    assert {smq_file for _, smq_file, _, _ in found} == {smq.__file__}


WARNING = "hiredis could not be loaded: smq packs Redis commands in Python, which is slower"


def bare_python(folder: Path) -> Path:
    """A virtualenv of the Python under this one with nothing of smq's: no smq, redis-py or hiredis.

    It gets pyarrow alone, linked from this environment: Spark's Python data sources need it on
    every executor, whatever the source (PySpark itself reaches the executors from Spark, as
    ``pyspark.zip`` on the Python workers' path).
    """
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    probe = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True)
    assert probe.stdout.strip() == sys.version  # the same interpreter, as the executors need
    import pyarrow

    (site,) = folder.glob("lib/python*/site-packages")
    (site / "pyarrow").symlink_to(Path(pyarrow.__file__).parent)
    for missing in ("smq", "redis", "hiredis"):
        check = subprocess.run([python, "-c", f"import {missing}"], capture_output=True, timeout=60)
        assert check.returncode != 0, f"{missing} is importable in the bare virtualenv"
    return python


def test_py_files_ships_smq_to_executors_that_lack_it(
    cluster: StandaloneCluster, redis_client: smq.Client, tmp_path: Path
) -> None:
    """``spark-submit --py-files smq.zip`` (from ``smq spark-zip``) to executors whose Python has
    no smq, redis-py or hiredis.

    The cheapest honest setup: the executors' Python (``PYSPARK_PYTHON``) is a fresh virtualenv
    of the same interpreter with only pyarrow linked in (what Spark's Python data sources need
    anyway, see ``bare_python``); the driver keeps this Python. So smq and redis-py can come to
    the tasks only from the zip, and the sink and the snapshot read run on them without hiredis,
    with its one warning in the executors' logs.
    """
    zipped = tmp_path / "smq.zip"
    subprocess.run([SMQ, "spark-zip", str(zipped)], check=True, capture_output=True, timeout=60)
    python = bare_python(tmp_path / "bare")
    found = run_job(
        cluster, redis_client, tmp_path, "smq-py-files", "--py-files", str(zipped), PYSPARK_PYTHON=str(python)
    )
    assert found, "no executor answered"
    for executable, smq_file, redis_file, hiredis in found:
        assert executable == str(python)
        assert "smq.zip" in smq_file and "smq.zip" in redis_file, (smq_file, redis_file)
        assert hiredis == "False"
    assert WARNING in executor_logs(cluster, "smq-py-files")


def packed_virtualenv(folder: Path) -> Path:
    """``env.tar.gz``: a virtualenv of this interpreter with smq installed from a wheel of this
    checkout, and redis-py, hiredis and pyarrow copied in file by file from this environment
    (each distribution's own file list, as an install would lay them out)."""
    env = folder / "env"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    wheels = folder / "wheels"
    root = Path(__file__).resolve().parent.parent
    pip = [sys.executable, "-m", "pip"]
    with building_from_the_checkout():
        subprocess.run(
            [*pip, "wheel", "-q", "--no-deps", "--wheel-dir", str(wheels), str(root)], check=True, timeout=300
        )
    (wheel,) = wheels.glob("smq_redis-*.whl")
    install = [
        *pip,
        "--python",
        str(env / "bin" / "python"),
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        str(wheel),
    ]
    subprocess.run(install, check=True, timeout=300)
    (site,) = env.glob("lib/python*/site-packages")
    for name in ("redis", "hiredis", "pyarrow"):
        distribution = importlib.metadata.distribution(name)
        for file in distribution.files or []:
            source = Path(str(distribution.locate_file(file)))
            if "__pycache__" in file.parts or not source.is_file() or file.parts[0] == "..":
                continue
            (site / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, site / file)
    archive = folder / "env.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as packed:
        packed.add(env, arcname=".")
    return archive


def test_a_packed_virtualenv_ships_python_and_smq_to_the_executors(
    cluster: StandaloneCluster, redis_client: smq.Client, tmp_path: Path
) -> None:
    """``spark-submit --archives env.tar.gz#environment`` with ``PYSPARK_PYTHON=./environment/bin/python``:
    every executor unpacks the virtualenv in its own folder and runs its tasks there, smq, redis-py
    and hiredis as installed in it.

    The driver needs ``./environment`` too, unpacked in the folder it is submitted from: Spark
    plans a Python data source in a Python process on the driver, started as ``PYSPARK_PYTHON``
    from the driver's working directory (where ``--archives`` unpacks nothing). The venv's
    ``bin/python`` links to this interpreter by its absolute path, so every host needs that
    interpreter at the same path (as with venv-pack).
    """
    archive = packed_virtualenv(tmp_path)
    with tarfile.open(archive) as packed:
        safe = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}  # Python 3.10.12+
        packed.extractall(tmp_path / "environment", **safe)
    found = run_job(
        cluster,
        redis_client,
        tmp_path,
        "smq-archives",
        "--archives",
        f"{archive}#environment",
        PYSPARK_PYTHON="./environment/bin/python",
    )
    assert found, "no executor answered"
    for executable, smq_file, redis_file, hiredis in found:
        assert executable.endswith("/environment/bin/python") and str(tmp_path) not in executable
        assert "/environment/lib/" in smq_file and "/environment/lib/" in redis_file, (smq_file, redis_file)
        assert hiredis == "True"
    assert WARNING not in executor_logs(cluster, "smq-archives")


STREAM_JOB = """
import os
import time
from pathlib import Path

import smq
from smq.spark import spark_session

url, folder = os.environ["SMQ_REDIS_URL"], Path(os.environ["JOB_FOLDER"])
spark = spark_session(app_name="killed-executor")


def slow(rows):
    # On an executor: say which Python reads this partition, then take a while over it.
    for n, row in enumerate(rows):
        if n == 0:
            (folder / f"task-{os.getpid()}").touch()
        time.sleep(0.02)
        yield row.message_id


def each(batch, batch_id):
    ids = batch.rdd.mapPartitions(slow).collect()
    with (folder / "done.txt").open("a") as done:
        done.writelines(f"{batch_id} {message_id}\\n" for message_id in ids)


stream = (
    spark.readStream.format("smq").option("url", url).option("queue", "stream")
    .option("numPartitions", "2").option("maxMessagesPerBatch", "300").option("visibilityTimeout", "4")
    .load()
)
query = stream.writeStream.foreachBatch(each).option("checkpointLocation", str(folder / "ck")).start()
queue = smq.Client(url).get_queue("stream")
deadline = time.monotonic() + 240
while time.monotonic() < deadline:
    info = queue.attributes()
    if info.visible + info.in_flight == 0 and info.counters.get("deleted", 0) >= 1000:
        break
    time.sleep(0.2)
query.stop()
spark.stop()
"""


def test_an_executor_killed_mid_batch_loses_and_repeats_nothing(
    cluster: StandaloneCluster, redis_client: smq.Client, tmp_path: Path
) -> None:
    """kill -9 of an executor JVM while its task reads a micro-batch: Spark runs the task again
    elsewhere, and the new attempt reads the partition's record (the same messages, still hidden
    by the driver's heartbeat); the batch is written once, and its commit deletes it."""
    queue = redis_client.create_queue("stream")
    for start in range(0, 1000, 10):
        queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(start, start + 10)])
    job = tmp_path / "stream_job.py"
    job.write_text(STREAM_JOB)
    env = {**os.environ, "SMQ_REDIS_URL": redis_client.settings.url, "JOB_FOLDER": str(tmp_path)}
    running = submit(cluster.master_url, job, env)
    killed: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while not killed and time.monotonic() < deadline and running.poll() is None:
            readers = [int(p.name.removeprefix("task-")) for p in tmp_path.glob("task-*")]
            for executor in cluster.executor_pids():
                if any(reader in descendants(executor) for reader in readers):
                    os.kill(executor, signal.SIGKILL)  # mid-batch: its task is reading rows
                    killed.append(executor)
                    break
            time.sleep(0.05)
    finally:
        code, out, err = finish(running)
    assert killed, "no executor was seen reading a batch"
    assert code == 0, "\n".join(line for line in err.splitlines() if " INFO " not in line)[-3000:]
    assert "ExecutorLostFailure" in err or "Lost executor" in err  # Spark saw it die
    done = [line.split()[1] for line in (tmp_path / "done.txt").read_text().splitlines()]
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 1000)
    assert len(done) == len(set(done)) == 1000  # every message written, none twice
    # The task was killed after it recorded its share (it had begun to give rows): its next
    # attempt read the record, so no message was received twice.
    assert info.counters["received"] == 1000


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
    cluster: StandaloneCluster, redis_client: smq.Client, spark: Any, tmp_path: Path
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
    rows = spark.read.parquet(str(tmp_path / "out"))  # through the sink's log: committed files only
    ids = [row.message_id for row in rows.select("message_id").collect()]
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
