"""A job on a Spark standalone cluster the test starts itself (master and two workers, by
``spark-class``, see ``spark_cluster.py``), submitted by ``smq spark-submit --master spark://...``:
its executors, separate JVMs started by the workers, write 200 rows to a queue through the smq
sink and read them back with a snapshot read; the executors use this Python, where smq is
installed (the "installed on each host" way of docs/spark.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import smq
from spark_cluster import standalone_cluster

pytestmark = pytest.mark.slow

JOB = """
import os

from smq.spark import spark_session

spark = spark_session(app_name="smq-cluster-test")
url = os.environ["SMQ_REDIS_URL"]
rows = spark.range(0, 200, 1, 4).selectExpr("concat('row ', id) AS body", "id % 3 AS part")
rows.write.format("smq").option("url", url).option("queue", "cluster").option(
    "attributeColumns", "part"
).mode("append").save()
read = spark.read.format("smq").option("url", url).option("queue", "cluster").load()
print("master", spark.sparkContext.master)
print("read", read.count(), read.select("body").distinct().count())
spark.stop()
"""


def submit(master: str, job: Path, env: dict[str, str], *options: str) -> subprocess.Popen[str]:
    """Start ``smq spark-submit`` of ``job`` on ``master`` (no UI, small executors), in ``job``'s folder."""
    command = [str(Path(sys.executable).parent / "smq"), "spark-submit", "--master", master]
    command += [
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.executor.memory=512m",
        *options,
        str(job),
    ]
    return subprocess.Popen(
        command, cwd=job.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(job: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str, str]:
    """Wait for a submitted job: its exit code, stdout and stderr (killed at the deadline)."""
    try:
        out, err = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        job.kill()
        out, err = job.communicate()
    return job.returncode, out, err


def test_a_job_runs_on_a_standalone_cluster_the_test_starts(redis_client: smq.Client, tmp_path: Path) -> None:
    queue = redis_client.create_queue("cluster")
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {**os.environ, "SMQ_REDIS_URL": redis_client.settings.url}
    with standalone_cluster(workers=2, cores_per_worker=1, memory="1g") as cluster:
        running = submit(cluster.master_url, job, env)
        try:
            executors = cluster.wait_for_executors(2, timeout=120)  # JVMs of their own, one per worker
        finally:
            code, out, err = finish(running)
        assert code == 0, err[-3000:] + cluster.logs()
        assert f"master {cluster.master_url}" in out
        assert "read 200 200" in out
        (app,) = cluster.status()["completedapps"]
        assert (app["name"], app["state"]) == ("smq-cluster-test", "FINISHED")
        # Both workers ran executors of the job (each offers one core; the job asked for all).
        assert all(any((cluster.folder / "work" / f"worker-{n}").glob("app-*/*/stderr")) for n in (0, 1))
    assert not any(Path(f"/proc/{pid}").exists() for pid in executors)  # stopped with the cluster
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.delayed) == (200, 0, 0)
    peeked = [m for offset in range(0, 200, 100) for m in queue.peek(limit=100, offset=offset)]
    bodies = {m.body: m.attributes["part"].value for m in peeked}
    assert bodies == {f"row {n}": str(n % 3) for n in range(200)}
