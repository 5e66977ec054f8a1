"""Jobs on a Spark standalone cluster the tests start themselves (a master and two workers, by
``spark-class``, see ``spark_cluster.py``), submitted by ``smq spark-submit --master spark://...``.
The executors, JVMs of their own started by the workers, write 200 rows to a queue through the smq
sink and read them back with a snapshot read; each test gets smq onto them one of the ways
docs/spark.md names."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import smq
from conftest import building_from_the_checkout
from spark_cluster import SMQ, StandaloneCluster, descendants, finish, standalone_cluster, submit

pytestmark = pytest.mark.slow

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
